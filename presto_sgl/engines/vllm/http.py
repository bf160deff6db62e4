"""The vLLM server engine: ``/v1/completions`` with token-id prompts (never text).

Every request is its own HTTP request (sent concurrently; vLLM's scheduler batches them),
because a completions body carries one ``seed``: each request gets its own, and vLLM's
seeded sampler makes the same (seed, prefix) give the same tokens, so the engine is
``seeded``. Sampling is full-vocabulary at the request's temperature (top_k -1, top_p 1,
min_p 0, no penalties; explicit, so the model's generation config cannot change them),
exactly ``max_tokens`` tokens with ``ignore_eos``.

log q_tau and log p0:
- one pass (the server loads this package's plugin ``presto_onepass``, see
  :mod:`presto_sgl.server_side.vllm.plugin`): ``logprobs = wire.width(m)`` returns raw log p0 of each sampled
  token, log q_tau, the p0 entropy and the score-temperature normalizers from the same
  logits row;
- two passes (a stock server started with ``--logprobs-mode processed_logprobs``): the
  decode's logprobs are log q_tau; log p0 comes from a scoring request on prefix + tokens
  with ``prompt_logprobs: 0`` (always raw). No entropy, no score temperatures.
``mode="auto"`` probes the server once. A stock server in its default ``raw_logprobs``
mode gives neither pass log q: it is refused with the fix named.

Constraints (one pass only): vLLM's own ``structured_outputs`` (its xgrammar backend), resumed
by the plugin over the response tokens the prompt ends with (``vllm_xargs``), and
``min_tokens`` less those tokens; log q and the normalizers come after vLLM's mask, log p0
before it (:mod:`presto_sgl.server_side.vllm`).

Retries are decided by the finish reason only, never by what was drawn: ``length`` is
kept (and must then be complete, else EngineError); ``abort`` is re-issued as a fresh
draw; anything else is an error. A lost connection waits for the server to come back
(:class:`~presto_sgl.engines.server.ServerEngine`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ...errors import EngineError
from ...fields import integer
from ...wire import FIELDS_KEY, GRAMMAR_RESUME_KEY, width
from ..base import Completion, Request
from ..scoring import Scored, check_top
from ..server import (
    PROBE_ASK,
    PROBE_TEMPERATURE,
    Decoded,
    EngineHTTPError,
    EngineUnreachable,
    Lost,
    ServerEngine,
    as_float,
    check_mode,
    map_keeping_lost,
)
from ..text import ModelFolder
from .layout import parse_fields, signature_count

_FIXED_PARAMS = {
    "top_k": -1,
    "top_p": 1.0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "min_tokens": 0,
    "logit_bias": None,
    "ignore_eos": True,
    "return_tokens_as_token_ids": True,
}
"""Every sampling field a vLLM server could default from the model's generation config
(``--generation-config auto``: temperature, top-k, top-p, min-p, repetition penalty) or its
``--override-generation-config``, and every other penalty or bias, pinned neutral in every
request; the temperature is the request's."""
STRUCTURED = {"regex": "regex", "json_schema": "json", "ebnf": "grammar", "structural_tag": "structural_tag"}
"""presto-sgl's grammar kinds as vLLM's ``structured_outputs`` names them (each source as its text)."""


class VLLMEngine(ServerEngine, ModelFolder):
    """The engine protocol against ``python -m vllm.entrypoints.openai.api_server``."""

    KIND = "vLLM server"
    START_HINT = "start it with `bash scripts/vllm_server.sh start` or pass the right --url"
    PLUGIN_HINT = (
        "install presto-sgl into the vLLM server's environment and restart it (VLLM_PLUGINS unset or listing "
        "presto_onepass, and VLLM_USE_V2_MODEL_RUNNER=0: the plugin does not hook vLLM's V2 model runner), "
        "e.g. `bash scripts/vllm_server.sh start`"
    )
    GRAMMARS = frozenset(STRUCTURED)

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        *,
        mode: str = "auto",
        timeout_s: float = 600.0,
        max_retries: int = 2,
        restart_timeout_s: float = 300.0,
        seeded: bool = True,
        max_concurrency: int = 64,
        vocab_size: int | None = None,
        tokenizer: str | None = None,
    ) -> None:
        check_mode(mode)
        integer(1, "requests in flight")("max_concurrency", max_concurrency)
        super().__init__(url, timeout_s, max_retries, restart_timeout_s)
        self._seeded = seeded
        self.max_concurrency = max_concurrency
        models = self._call("GET", "/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        if not data or not isinstance(data[0], dict) or "id" not in data[0]:
            raise EngineError(f"{self.KIND} {self.url} answered GET /v1/models with {str(models)[:200]!r}")
        self.model = str(data[0]["id"])
        self.model_path = str(data[0].get("root") or self.model)
        self._vocab, context = self._open_model(
            [self.model_path, self.model],
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            context_length=data[0].get("max_model_len"),
        )
        if self.text.has_tokenizer:
            self.check_tokenizer(self._server_ids(self.probe_text()), self.probe_text())
        self._settle_mode(mode, self._probe_plugin())
        if self._mode == "two-pass":
            self._check_processed()
        self.capabilities = self._capabilities(seeded, self._vocab, int(context) if context else None)

    def _call(self, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        """The shared transport, plus: HTTP 500 "EngineCore encountered an issue" is vLLM's API
        process answering while its engine process is gone (a server stopping or crashing
        mid-call): treated as a lost connection, so pending requests are redrawn once the
        server is healthy again (the failure does not depend on what was drawn)."""
        try:
            return super()._call(method, path, body, headers)
        except EngineHTTPError as exc:
            if exc.status == 500 and "EngineCore" in str(exc):
                raise EngineUnreachable(f"{self.KIND} {self.url} lost its engine process ({exc})") from None
            raise

    # -- the protocol (ServerEngine.generate calls _attempt) -------------------------------
    def _attempt(self, requests: Sequence[Request]) -> list[Completion | None]:
        self._check_constraints([r.constraint for r in requests if r.constraint is not None])
        decoded: list[Decoded | Lost | None] = map_keeping_lost(self._decode, requests, self.max_concurrency)
        if self._mode == "two-pass":
            kept = [(i, d) for i, d in enumerate(decoded) if isinstance(d, Decoded)]
            scores = map_keeping_lost(self._score, [(requests[i], d.tokens) for i, d in kept], self.max_concurrency)
            for (i, d), logp in zip(kept, scores, strict=True):
                decoded[i] = logp if logp is None or isinstance(logp, Lost) else dataclasses.replace(d, logp=logp)
        lost = next((d.cause for d in decoded if isinstance(d, Lost)), None)
        out: list[Completion | None] = []
        for r, got in zip(requests, decoded, strict=True):
            if not isinstance(got, Decoded):  # aborted, or lost
                out.append(None)
                continue
            out.append(got.completion(r, self._vocab))  # a finished response must be whole: else an error
        if lost is not None:  # part of the attempt never came back: keep the rest
            raise EngineUnreachable(str(lost), done=out)
        return out

    # -- passes ----------------------------------------------------------------------------------
    def _completion(self, body: dict[str, Any], stops: bool = False) -> tuple[dict[str, Any], int] | None:
        """POST /v1/completions: its single choice and the prompt tokens vLLM's prefix cache
        served, or None when the server aborted it."""
        res = self._call("POST", "/v1/completions", {"model": self.model, **_FIXED_PARAMS, **body})
        choices = res.get("choices") if isinstance(res, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise EngineError(f"{self.KIND} {self.url} answered a completion with {str(res)[:200]!r}")
        choice = choices[0]
        reason = choice.get("finish_reason")
        if reason == "abort":
            return None
        if reason != "length" and not (stops and reason == "stop"):
            raise EngineError(
                f"{self.KIND} {self.url} finished a request with finish_reason={reason!r}; presto-sgl asks for "
                "max_tokens tokens (ignore_eos) or, under ending='eos', up to the first stop token, so only 'length' "
                "and 'stop' (kept) and 'abort' (redrawn) are expected"
            )
        usage = res.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        with self._stats_lock:
            self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.stats.cached_tokens += cached
        return choice, cached

    def _decode(self, r: Request) -> Decoded | None:
        one = self._mode == "one-pass"
        body: dict[str, Any] = {
            "prompt": list(r.prefix),
            "max_tokens": r.max_new_tokens,
            "temperature": r.temperature,
            "logprobs": width(len(r.score_temperatures)) if one else 0,
        }
        if one:
            body["vllm_xargs"] = {FIELDS_KEY: self.ask(r)}
        if self._seeded and r.seed is not None:
            body["seed"] = int(r.seed % (1 << 63))
        if r.stop:  # ending="eos": end at the first stop token, returned with its values
            body |= {"ignore_eos": False, "stop_token_ids": sorted(r.stop), "skip_special_tokens": False}
        if r.constraint is not None:
            body |= self._constrained(r, body["vllm_xargs"])
        answer = self._completion(body, stops=bool(r.stop))
        if answer is None:
            return None
        choice, cached = answer
        lp = choice.get("logprobs") or {}
        tokens = tuple(_token_id(t) for t in lp.get("tokens") or [])
        values = tuple(as_float(x) for x in lp.get("token_logprobs") or [])
        if self._mode == "two-pass":
            return Decoded(tokens=tokens, logq=values, logp=None, entropy=None, cached_tokens=cached)
        tops = lp.get("top_logprobs") or []
        parsed = [parse_fields(t, v, _top(top), self._vocab) for t, v, top in zip(tokens, values, tops, strict=False)]
        fields = [f for f in parsed if f is not None]
        if len(fields) != len(tokens):
            raise EngineError(
                f"{self.KIND} {self.url} returned no presto_onepass fields for a request (a restart without the "
                f"plugin?); {self.PLUGIN_HINT}"
            )
        at = None
        if r.score_temperatures:
            rows = [f.logq_at(r.score_temperatures) for f in fields]
            scored = [row for row in rows if row is not None]
            # a temperature the server does not score: no values (the completion fails validation)
            at = tuple(scored) if len(scored) == len(rows) else None
        return Decoded(
            tokens=tokens,
            logq=tuple(f.logq for f in fields),
            logp=values,
            entropy=tuple(f.entropy for f in fields) if r.return_entropy else None,
            cached_tokens=cached,
            logq_at=at,
        )

    @staticmethod
    def _constrained(r: Request, xargs: dict[str, Any]) -> dict[str, Any]:
        """vLLM's own fields for ``r.constraint`` (checked by ``_check_constraints``): its
        ``structured_outputs``, resumed by the plugin over the ``r.resume`` response tokens the
        prompt ends with (beside the request's ask in ``xargs``), and ``min_tokens`` less those
        tokens (vLLM counts new tokens only)."""
        c = r.constraint
        assert c is not None
        p: dict[str, Any] = {"min_tokens": max(0, c.min_tokens - r.resume)}
        if c.grammar is not None:
            kind, source = c.grammar
            p |= {
                "structured_outputs": {STRUCTURED[kind]: source},
                "vllm_xargs": {**xargs, GRAMMAR_RESUME_KEY: r.resume},
            }
        return p

    def _resume_refused(self) -> bool:
        """(vLLM fails the request with HTTP 500.)"""
        probe = {"prompt": self._probe_ids(), "max_tokens": 1, "temperature": 1.0}
        probe |= {"structured_outputs": {"regex": "[0-9]+"}, "vllm_xargs": {GRAMMAR_RESUME_KEY: 1}}
        try:
            self._call("POST", "/v1/completions", {"model": self.model, **_FIXED_PARAMS, **probe})
            return False
        except EngineHTTPError as exc:
            return exc.status == 500

    def _score(self, item: tuple[Request, tuple[int, ...]]) -> tuple[float, ...] | None:
        """log p0 of ``tokens`` after the request's prefix (raw ``prompt_logprobs``)."""
        r, tokens = item
        answer = self._completion(
            {"prompt": [*r.prefix, *tokens], "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
        )
        if answer is None:
            return None
        choice = answer[0]
        entries = (choice.get("prompt_logprobs") or [])[len(r.prefix) :]
        if len(entries) != len(tokens):
            raise EngineError(f"{self.KIND} {self.url} scored {len(entries)} of {len(tokens)} tokens")
        return tuple(as_float((e or {}).get(str(t), {}).get("logprob")) for e, t in zip(entries, tokens, strict=True))

    def score_tokens(self, sequences: Sequence[Sequence[int]], top: int) -> list[Scored]:
        """log p0 of each token and the ``top`` alternatives at each position (:mod:`..scoring`),
        all from raw ``prompt_logprobs`` (which the one-pass plugin leaves alone): the sequence
        is sent with one placeholder token after it, whose position's entry is the distribution
        after the sequence; the one decoded token is ignored."""
        k = check_top(top)
        out = []
        for ids in sequences:
            answer = self._completion({"prompt": [*ids, 0], "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": k})
            entries = (answer[0].get("prompt_logprobs") or []) if answer is not None else []
            if len(entries) != len(ids) + 1:
                raise EngineError(
                    f"{self.KIND} {self.url} scored {len(entries)} positions of {len(ids) + 1} (or aborted)"
                )

            def ranked(entry: Any) -> tuple[tuple[int, float], ...]:
                best = sorted(
                    (
                        (v.get("rank") or 0, int(t), as_float(v.get("logprob")))
                        for t, v in (entry or {}).items()
                        if 1 <= (v.get("rank") or 0) <= k
                    )
                )
                return tuple((t, lp) for _, t, lp in best)

            logp = (
                None,
                *(as_float((entries[t] or {}).get(str(ids[t]), {}).get("logprob")) for t in range(1, len(ids))),
            )
            out.append(Scored(logp, ((), *(ranked(entries[t]) for t in range(1, len(ids) + 1)))))
        return out

    # -- probes ------------------------------------------------------------------------------------
    def _server_ids(self, text: str) -> list[int] | None:
        """How the server tokenizes ``text`` (``POST /tokenize``, special tokens added); None when
        the server has no tokenizer endpoint."""
        try:
            res = self._call("POST", "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": True})
        except EngineHTTPError as exc:
            if exc.status in (404, 405):
                return None
            raise
        tokens = res.get("tokens") if isinstance(res, dict) else None
        return [int(t) for t in tokens] if isinstance(tokens, list) else None

    def _probe_one(self, temperature: float, logprobs: int, xargs: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"prompt": [0], "max_tokens": 1, "temperature": temperature, "logprobs": logprobs}
        answer = self._completion(body | ({"vllm_xargs": xargs} if xargs else {}))
        if answer is None:
            raise EngineError(f"{self.KIND} {self.url} aborted a probe request")
        return answer[0].get("logprobs") or {}

    def _probe_plugin(self) -> str:
        """The one-pass plugin: "yes", "no" or "stale" (:meth:`_settle_mode`): a request that asks
        (:data:`~..server.PROBE_ASK`) must get exactly its fields, one that does not, none."""
        lp = self._probe_one(1.0, width(1), {FIELDS_KEY: PROBE_ASK})
        sampled, top = _token_id(lp["tokens"][0]), _top(lp["top_logprobs"][0])
        if signature_count(top, sampled, self._vocab) is None:
            return "no"
        fields = parse_fields(sampled, 0.0, top, self._vocab)
        plain = self._probe_one(1.0, width(1))  # an older plugin rewrites every request's logprobs
        touched = signature_count(_top(plain["top_logprobs"][0]), _token_id(plain["tokens"][0]), self._vocab)
        fresh = fields is not None and fields.temperatures == (PROBE_TEMPERATURE,) and fields.entropy >= 0
        return "yes" if fresh and touched is None else "stale"

    def _check_processed(self) -> None:
        """Refuse a stock server whose logprobs are raw: two passes need log q_tau from the decode."""
        cold, hot = (max(_top(self._probe_one(t, 1)["top_logprobs"][0]).values()) for t in (0.25, 1.0))
        if math.isclose(cold, hot, abs_tol=1e-3):  # the top token's logprob does not depend on the temperature
            raise EngineError(
                f"{self.KIND} {self.url} returns raw logprobs (vLLM's default), so no pass gives log q_tau: start it "
                "with the presto_onepass plugin (`bash scripts/vllm_server.sh start`) or with "
                "`--logprobs-mode processed_logprobs`"
            )

    # -- server facts ------------------------------------------------------------------------------
    def server_loads(self) -> list[dict[str, Any]]:
        """One load snapshot from ``/metrics``, in the monitor's keys: ``num_used_tokens``
        (kv_cache_usage_perc x the KV pool), ``max_total_num_tokens``, ``num_running_reqs``,
        ``num_waiting_reqs``, ``cache_hit_rate`` (prefix-cache hits / queries since start)."""
        text = self._call("GET", "/metrics")
        if not isinstance(text, str):
            raise EngineError(f"{self.KIND} {self.url} answered GET /metrics with {str(text)[:200]!r}")
        values: dict[str, float] = {}
        capacity = 0
        for line in text.splitlines():
            if line.startswith("vllm:cache_config_info{"):
                for part in line[line.index("{") + 1 : line.rindex("}")].split(","):
                    key, _, val = part.partition("=")
                    if key == "kv_cache_size_tokens" and val.strip('"').isdigit():
                        capacity = int(val.strip('"'))
            elif line.startswith("vllm:") and "{" in line:
                name = line[: line.index("{")]
                try:
                    values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    continue
        queries = values.get("vllm:prefix_cache_queries_total", 0.0)
        return [
            {
                "num_used_tokens": round(values.get("vllm:kv_cache_usage_perc", 0.0) * capacity),
                "max_total_num_tokens": capacity,
                "num_running_reqs": int(values.get("vllm:num_requests_running", 0)),
                "num_waiting_reqs": int(values.get("vllm:num_requests_waiting", 0)),
                "cache_hit_rate": values.get("vllm:prefix_cache_hits_total", 0.0) / queries if queries else 0.0,
            }
        ]


def _token_id(text: Any) -> int:
    """A token id from ``return_tokens_as_token_ids`` (``"token_id:123"``)."""
    try:
        return int(str(text).rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise EngineError(f"vLLM returned token {text!r}, not 'token_id:N' (return_tokens_as_token_ids)") from None


def _top(entry: Any) -> dict[int, float]:
    return {_token_id(k): as_float(v) for k, v in (entry or {}).items()}
