"""The SGLang server engine: native ``/generate`` with token ids (never text).

Decode pass: ``input_ids`` + per-request ``sampling_params`` (temperature tau, fixed
``max_new_tokens``, ``ignore_eos``, full vocabulary and no penalty or constraint: :data:`NEUTRAL`) with
``return_logprob``: ``meta_info.output_token_logprobs`` are after temperature, i.e.
log q_tau of each sampled token.

log p0 comes either from the same pass (one-pass mode: the server loads this package's
SGLang plugin, which adds ``meta_info.raw_logprob`` and ``raw_entropy`` computed from
the same logits row before temperature) or from a second, prefill-only scoring call
(two-pass mode, stock servers): ``max_new_tokens: 0``, ``logprob_start_len: P - 1``,
whose ``input_token_logprobs`` (always raw) after the first, null entry score the new
tokens; the cached prefix is reused. ``mode="auto"`` detects the plugin once.

Failures never advance the chain on partial data. Whether a response is redrawn is
decided by what the server reports, never by what was drawn (a redraw that depended on the
tokens would bias the chain): ``meta_info.finish_reason`` ``length`` is kept and must then
be whole (every token, its log q and log p0, finite), else EngineError; ``abort`` is
re-issued as a fresh draw; any other reason (a stop) is an EngineError. Re-issues happen at
most ``max_retries`` times per call:
- an aborted response is re-issued at once;
- a lost connection (refused, reset, closed mid-answer: a server restart; behind a
  router, its HTTP 500 ``call_upstream_request_error``) first waits until ``GET /health``
  answers again (of the router's workers too), up to ``restart_timeout_s``
  (``stats.reconnects`` counts these); the bodies of the call that were answered are kept.

An SGLang router (``sglang-router``, see ``scripts/sglang_router.sh``) works as the URL
too: its ``/generate`` takes one shared ``sampling_params`` and ``logprob_start_len``
per body, so requests are then grouped by those and the groups sent concurrently (the
server batches them); each body carries its chain's routing key (``Request.route``) as
``X-SMG-Routing-Key``, which the router's ``manual`` policy follows, so that a chain's
calls stay on the worker that holds its prefixes; ``/model_info`` falls back to ``/get_model_info``, and
``/v1/loads`` and ``/server_info`` are read from the router's workers (``/workers``):
:mod:`.transport` (standard library only).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ...errors import EngineError
from ...wire import FIELDS_KEY, GRAMMAR_RESUME_KEY, RAW_ENTROPY_KEY, RAW_LOGPROB_KEY
from ..base import Completion, Request
from ..scoring import Scored, check_top
from ..server import (
    PROBE_ASK,
    PROBE_TEMPERATURE,
    Decoded,
    EngineHTTPError,
    EngineUnreachable,
    Lost,
    as_float,
    check_mode,
    map_keeping_lost,
)
from ..text import ModelFolder
from .lognorm import logq_at, parse_lognorm
from .transport import ServerClient

NEUTRAL: dict[str, Any] = {
    "top_k": -1,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "min_new_tokens": 0,
    "logit_bias": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "stop": None,
    "stop_token_ids": None,
    "stop_regex": None,
    "n": 1,
    "ignore_eos": True,
    "custom_params": None,
}
"""Every SGLang sampling parameter that can change the sampled distribution, at its neutral value,
in every request: SGLang merges the server's ``--preferred-sampling-params`` *under* a request's
own fields (``TokenizerManager._create_tokenized_object``), so a deployment default (say
``repetition_penalty 1.05``) cannot reach the chain. Requests add temperature and length."""
TEXT_ONLY = frozenset(
    {
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "stream_interval",
        "max_new_tokens",
        "temperature",
        "sampling_seed",
    }
)
"""Preferred parameters that cannot change a chain: text rendering, and what every request sets."""


def check_preferred(preferred: Any, url: str) -> None:
    """EngineError when the server's ``--preferred-sampling-params`` hold a field that
    :data:`NEUTRAL` does not pin (a newer SGLang's): it could change the distribution unseen."""
    unknown = sorted(set(preferred or {}) - set(NEUTRAL) - TEXT_ONLY)
    if unknown:
        raise EngineError(
            f"SGLang server {url} sets --preferred-sampling-params {unknown}, which presto-sgl does not know how "
            "to neutralize: they could change the sampled distribution and bias the chain; restart the server "
            "without them (or report them to presto-sgl)"
        )


ROUTE_HEADER = "X-SMG-Routing-Key"  # sglang-router: the request's routing key (manual policy)


class SGLangEngine(ServerClient, ModelFolder):
    """The engine protocol against ``python -m sglang.launch_server`` (or an SGLang router).

    ``_call(method, path, body)`` is the single transport; subclasses may replace it
    (the in-process engine does) and keep the retry and restart handling above it.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:30000",
        *,
        mode: str = "auto",
        timeout_s: float = 600.0,
        max_retries: int = 2,
        restart_timeout_s: float = 300.0,
        seeded: bool = False,
        vocab_size: int | None = None,
        context_length: int | None = None,
        tokenizer: str | None = None,
    ) -> None:
        check_mode(mode)
        super().__init__(url, timeout_s, max_retries, restart_timeout_s)
        self._seeded = seeded
        info = self._get_with_fallback("/model_info", "/get_model_info")
        self.model_path = info.get("model_path")
        check_preferred(info.get("preferred_sampling_params"), self.url)
        vocab, context = self._open_model(
            [info.get("tokenizer_path"), self.model_path],
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            context_length=context_length,
        )
        self._list_params, plugin = self._probe()
        if self.text.has_tokenizer:
            self.check_tokenizer(self._server_ids(self.probe_text()), self.probe_text())
        self._settle_mode(mode, plugin)
        self.capabilities = self._capabilities(seeded, vocab, context)

    # -- the protocol (ServerEngine.generate calls _attempt) -------------------------------
    def _attempt(self, requests: Sequence[Request]) -> list[Completion | None]:
        """One try at every request: a validated completion, or None where the server aborted it."""
        self._check_constraints([r.constraint for r in requests if r.constraint is not None])
        decoded = self._decode(requests)
        lost = next((d.cause for d in decoded if isinstance(d, Lost)), None)
        good = [(i, d) for i, d in enumerate(decoded) if isinstance(d, Decoded)]
        if self._mode == "two-pass" and good:
            raws = self._score([requests[i] for i, _ in good], [d.tokens for _, d in good])
        else:
            raws = [d.logp for _, d in good]
        out: list[Completion | None] = [None] * len(requests)
        for (i, d), logp in zip(good, raws, strict=True):
            if isinstance(logp, Lost):
                lost = lost or logp.cause
                continue
            if logp is None:  # the scoring pass was aborted
                continue
            # finished: whole, else an error
            out[i] = dataclasses.replace(d, logp=logp).completion(requests[i], self.capabilities.vocab_size)
        if lost is not None:  # part of the attempt never came back: keep the rest
            raise EngineUnreachable(str(lost), done=out)
        return out

    # -- passes ----------------------------------------------------------------------------------
    def params(self, r: Request) -> dict[str, Any]:
        """The ``sampling_params`` of ``r``'s decode: :data:`NEUTRAL`, its temperature and length,
        its stops, seed and constraint, and (one pass) what it asks the plugin for."""
        p = {**NEUTRAL, "temperature": r.temperature, "max_new_tokens": r.max_new_tokens}
        if r.stop:  # ending="eos": end at the first stop token, returned with its values
            p |= {"ignore_eos": False, "stop_token_ids": sorted(r.stop)}
        if self._seeded and r.seed is not None:
            p["sampling_seed"] = int(r.seed % (1 << 31))
        if self._mode == "one-pass":
            p["custom_params"] = {FIELDS_KEY: self.ask(r)}
        if r.constraint is not None:
            p |= self._constrained(r, p["custom_params"])
        return p

    def _decode(self, requests: Sequence[Request]) -> list[Decoded | Lost | None]:
        items = [(list(r.prefix), self.params(r), None, r.route) for r in requests]
        out: list[Decoded | Lost | None] = []
        for r, res in zip(requests, self._generate(items), strict=True):
            if isinstance(res, Lost):
                out.append(res)
                continue
            if self._finished(res, stops=bool(r.stop)) == "abort":
                out.append(None)  # re-issued as a fresh draw
                continue
            meta = res.get("meta_info", {})
            ids = res.get("output_ids") or []
            lps = meta.get("output_token_logprobs") or []
            whole = 1 <= len(ids) <= r.max_new_tokens if r.stop else len(ids) == r.max_new_tokens
            if not whole or len(lps) != len(ids) or any(e[1] != t for e, t in zip(lps, ids, strict=True)):
                raise EngineError(
                    f"SGLang server {self.url} finished a request of {r.max_new_tokens} tokens with "
                    f"{len(ids)} tokens and {len(lps)} log-probs (or of other tokens): it must be whole"
                )
            logq = tuple(as_float(e[0]) for e in lps)
            raw = meta.get(RAW_LOGPROB_KEY)
            ent = meta.get(RAW_ENTROPY_KEY)
            if self._mode == "one-pass" and (raw is None or len(raw) != len(ids)):
                raise EngineError(
                    f"SGLang server {self.url} returned {'no' if raw is None else len(raw)} raw log-probs for "
                    f"{len(ids)} tokens (a restart without the plugin?); {self.PLUGIN_HINT}"
                )
            raw_t = tuple(as_float(x) for x in raw) if raw is not None and len(raw) == len(ids) else None
            ent_t = tuple(as_float(x) for x in ent) if ent is not None and len(ent) == len(ids) else None
            # log q at the score temperatures from the decode pass's row: one-pass only (never mix passes)
            at = None
            if self._mode == "one-pass" and raw_t is not None:  # (one pass: raw_t is whole, checked above)
                at = logq_at(raw_t, parse_lognorm(meta, len(ids)), r.score_temperatures)
            with self._stats_lock:
                self.stats.cached_tokens += int(meta.get("cached_tokens", 0))
                self.stats.prompt_tokens += len(r.prefix)
            out.append(
                Decoded(
                    tokens=tuple(ids),
                    logq=logq,
                    logp=raw_t,
                    entropy=ent_t,
                    cached_tokens=int(meta.get("cached_tokens", 0)),
                    logq_at=at,
                )
            )
        return out

    @staticmethod
    def _constrained(r: Request, custom: dict[str, Any]) -> dict[str, Any]:
        """SGLang's own fields for ``r.constraint`` (checked by ``_check_constraints``): its grammar
        (``regex`` / ``json_schema`` / ``ebnf`` / ``structural_tag``), resumed by the plugin over the
        ``r.resume`` response tokens the input ends with (beside the request's ask in ``custom``),
        and ``min_new_tokens`` less those tokens (SGLang counts new tokens only). Log q is then after
        SGLang's mask, the plugin's log p0 before it, and its log-normalizers at the score
        temperatures over the same mask (MultiTryMH's masked q_t)."""
        c = r.constraint
        assert c is not None
        p: dict[str, Any] = {"min_new_tokens": max(0, c.min_tokens - r.resume)}
        if c.grammar is not None:
            kind, source = c.grammar
            p |= {kind: source, "custom_params": {**custom, GRAMMAR_RESUME_KEY: r.resume}}
        return p

    def _resume_refused(self) -> bool:
        one = {**NEUTRAL, "max_new_tokens": 1, "temperature": 1.0, "regex": "[0-9]+"}
        one["custom_params"] = {GRAMMAR_RESUME_KEY: 1}
        try:
            self._call("POST", "/generate", {"input_ids": self._probe_ids(), "sampling_params": one})
            return False
        except EngineHTTPError as exc:
            return exc.status == 400 and GRAMMAR_RESUME_KEY in str(exc)

    def _score(
        self, requests: Sequence[Request], outputs: Sequence[tuple[int, ...]]
    ) -> list[tuple[float, ...] | Lost | None]:
        """log p0 of each output after its prefix (None where aborted): a prefill-only call, cached prefix reused."""
        params = {**NEUTRAL, "max_new_tokens": 0, "temperature": 1.0}
        items = [
            (list(r.prefix) + list(o), params, len(r.prefix) - 1, r.route)
            for r, o in zip(requests, outputs, strict=True)
        ]
        scores: list[tuple[float, ...] | Lost | None] = []
        for o, res in zip(outputs, self._generate(items), strict=True):
            if isinstance(res, Lost):
                scores.append(res)
                continue
            if self._finished(res) == "abort":
                scores.append(None)
                continue
            entries = res.get("meta_info", {}).get("input_token_logprobs") or []
            tail = entries[1:]  # entry 0 scores the last prefix token: null
            if len(tail) != len(o) or any(e[1] != t for e, t in zip(tail, o, strict=True)):
                raise EngineError(f"SGLang server {self.url} scored {len(tail)} tokens of {len(o)} (or other tokens)")
            scores.append(tuple(as_float(e[0]) for e in tail))
        return scores

    def score_tokens(self, sequences: Sequence[Sequence[int]], top: int) -> list[Scored]:
        """log p0 of each token and the ``top`` alternatives at each position (:mod:`..scoring`):
        one prefill with the input log-probs from position 0, at temperature 1 with every
        sampling parameter neutral (so raw log p0), plus one token for the distribution after it."""
        k = check_top(top)
        params = {**NEUTRAL, "max_new_tokens": 1, "temperature": 1.0}
        out = []
        for ids in sequences:
            body = {
                "input_ids": list(ids),
                "sampling_params": params,
                "return_logprob": True,
                "logprob_start_len": 0,
                "top_logprobs_num": k,
            }
            meta = (self._call("POST", "/generate", body) or {}).get("meta_info", {})
            given, tops, after = (
                meta.get(key) or [] for key in ("input_token_logprobs", "input_top_logprobs", "output_top_logprobs")
            )
            if (
                len(given) != len(ids)
                or len(tops) != len(ids)
                or not after
                or any(e[1] != t for e, t in zip(given, ids, strict=True))
            ):
                raise EngineError(
                    f"SGLang server {self.url} scored {len(given)} of {len(ids)} prompt tokens "
                    f"(or other tokens) with {len(tops)} top lists"
                )
            pairs = lambda entries: tuple((int(e[1]), as_float(e[0])) for e in (entries or [])[:k])  # noqa: E731
            logp = (None, *(as_float(e[0]) for e in given[1:]))
            out.append(Scored(logp, ((), *(pairs(t) for t in tops[1:]), pairs(after[0]))))
        return out

    def _finished(self, res: dict[str, Any], stops: bool = False) -> str:
        """``length``, ``abort`` or (``stops``: a request with stop tokens) ``stop``; else EngineError."""
        reason = res.get("meta_info", {}).get("finish_reason")
        kind = reason.get("type") if isinstance(reason, dict) else reason
        if kind in ("length", "abort") or (stops and kind == "stop"):
            return kind
        raise EngineError(
            f"SGLang server {self.url} finished a request with finish_reason={reason!r}; presto-sgl asks "
            "for max_new_tokens tokens (ignore_eos) or, under ending='eos', up to the first stop token, so "
            "only 'length' and 'stop' (kept) and 'abort' (redrawn) are expected"
        )

    def _generate(
        self, items: Sequence[tuple[list[int], dict[str, Any], int | None, str | None]]
    ) -> list[dict[str, Any] | Lost]:
        """``/generate`` for (input_ids, sampling_params, logprob_start_len, route) items, answers in
        order; :class:`Lost` for the items of a body whose connection was lost while others answered.

        One batch body per route (a call's requests are one chain's: one body) with per-request
        lists when the server takes them; else (a router) one body per distinct (params, start,
        route), sent concurrently. A route goes as the ``X-SMG-Routing-Key`` header, which
        sglang-router's ``manual`` policy follows: a chain's calls stay on one worker."""
        by_key: dict[str, list[int]] = {}
        for i, (_, params, start, route) in enumerate(items):
            key = [route] if self._list_params else [params, start, route]
            by_key.setdefault(json.dumps(key, sort_keys=True), []).append(i)
        groups = list(by_key.values())

        def body(group: list[int]) -> dict[str, Any]:
            b: dict[str, Any] = {"input_ids": [items[i][0] for i in group], "return_logprob": True}
            starts = [items[i][2] for i in group]
            if self._list_params:
                b["sampling_params"] = [items[i][1] for i in group]
                if starts[0] is not None:
                    b["logprob_start_len"] = starts
            else:
                b["sampling_params"] = items[group[0]][1]
                if starts[0] is not None:
                    b["logprob_start_len"] = starts[0]
            return b

        def post(group: list[int]) -> list[dict[str, Any]]:
            route = items[group[0]][3]
            results = self._call("POST", "/generate", body(group), {ROUTE_HEADER: route} if route else None)
            if (
                not isinstance(results, list)
                or len(results) != len(group)
                or not all(isinstance(r, dict) for r in results)
            ):
                raise EngineError(
                    f"SGLang server {self.url} answered a batch of {len(group)} requests with {str(results)[:200]!r}"
                )
            return results

        out: list[dict[str, Any] | Lost] = [{}] * len(items)
        for group, results in zip(groups, map_keeping_lost(post, groups, 32), strict=True):
            for j, i in enumerate(group):
                out[i] = results if isinstance(results, Lost) else results[j]
        return out

    def _probe(self) -> tuple[bool, str]:
        """(does /generate take per-request parameter lists, the one-pass plugin: "yes", "no" or
        "stale"; :meth:`_settle_mode`). The probe asks for the entropy and log-normalizers at
        :data:`~..server.PROBE_ASK`'s temperature; a plugin that answers per request returns
        exactly those."""
        one = {**NEUTRAL, "temperature": 1.0, "max_new_tokens": 2, "custom_params": {FIELDS_KEY: PROBE_ASK}}
        body: dict[str, Any] = {"input_ids": [[1, 2, 3], [1, 2]], "sampling_params": [one, one], "return_logprob": True}
        try:
            res = self._call("POST", "/generate", body)
            list_params = True
        except EngineHTTPError as exc:
            if exc.status not in (400, 422):  # a router rejects lists (HTTP 422); anything else is a real error
                raise
            body["sampling_params"] = one
            res = self._call("POST", "/generate", body)
            list_params = False
        if not isinstance(res, list) or not res or not isinstance(res[0], dict):
            raise EngineError(f"SGLang server {self.url} answered a probe /generate with {str(res)[:200]!r}")
        meta = res[0].get("meta_info", {})
        if RAW_LOGPROB_KEY not in meta:
            return list_params, "no"
        n = len(res[0].get("output_ids") or [])
        if len(meta[RAW_LOGPROB_KEY]) != n:  # the decode step bypassed SGLang's sampler, and the plugin
            raise EngineError(
                f"SGLang server {self.url} returned presto-sgl's fields for {len(meta[RAW_LOGPROB_KEY])} of {n} "
                "tokens: its decode steps sample outside SGLang's Sampler (speculative decoding, "
                "--speculative-algorithm), which the plugin does not hook; start it without speculative decoding"
            )
        lognorm = parse_lognorm(meta, n)
        fresh = RAW_ENTROPY_KEY in meta and lognorm is not None and lognorm[0] == (PROBE_TEMPERATURE,)
        return list_params, "yes" if fresh else "stale"

    def _server_ids(self, text: str) -> list[int] | None:
        """How the server tokenizes ``text`` (a prefill-only request scoring its input); None
        when the answer has no input log-probs to read the ids from."""
        body = {
            "text": text,
            "sampling_params": {**NEUTRAL, "max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        res = self._call("POST", "/generate", body)
        res = res[0] if isinstance(res, list) and res else res
        entries = res.get("meta_info", {}).get("input_token_logprobs") if isinstance(res, dict) else None
        return [int(e[1]) for e in entries] if entries else None
