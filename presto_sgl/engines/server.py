"""What every server engine shares (standard library only): the HTTP exchange, its errors,
the client-side counts, the call loop that never advances a chain on partial data, and the
one-pass core: the modes and how the plugin is detected (:meth:`ServerEngine._settle_mode`,
refused when the engine is built), the capabilities that follow, what a request asks the
plugin for (:meth:`ServerEngine.ask`), the constraint checks and the grammar-resume probe,
monitoring and value parsing. A server engine adds only its wire format.

:meth:`ServerEngine.generate` tries every request once (``_attempt``, the engine's own
passes); what comes back as None (a response the server reported aborted, never one
judged by its content) is re-issued as a fresh draw, at most ``max_retries`` times per
call. A lost connection (refused, reset, closed mid-answer: a server restart) re-issues
what was lost once ``GET /health`` answers again, within ``restart_timeout_s``
(``stats.reconnects`` counts these); answers that came back before it are kept, so no
request is drawn twice. Both are exact: the failure never depends on what was drawn.
"""

from __future__ import annotations

import functools
import http.client
import importlib.util
import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, CapabilityError, ConfigError, EngineError
from ..fields import integer, number
from ..wire import ask
from .base import Completion, EngineCapabilities, Request, validate_completion
from .grammar import Grammars

if TYPE_CHECKING:
    from ..constraints import Constraint
    from .monitor import ServerMonitor

MODES = ("auto", "one-pass", "two-pass")
"""How log p0 comes back: ``one-pass`` (the server's presto-sgl plugin, same pass as log q),
``two-pass`` (a second, scoring pass; PowerMH only), ``auto`` (one-pass when the plugin answers)."""


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ConfigError("mode", mode, f"{{mode}} (={mode!r}) must be one of {MODES}")


def as_float(x: Any) -> float:
    """A log-probability from JSON; null (not computed) and NaN become NaN (caught by validation)."""
    return math.nan if x is None else float(x)


PROBE_TEMPERATURE = 0.375
PROBE_ASK = ask(True, (PROBE_TEMPERATURE,))
"""What the plugin probe asks for: the entropy and a temperature no client default uses, so that
only a plugin that answers per request (not one that answers every request the same) passes."""


class EngineHTTPError(EngineError):
    """The server answered with an HTTP error status (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EngineUnreachable(EngineError):
    """No answer: connection refused, reset, or closed before the whole response came.

    ``done``: when only part of an attempt was lost (one of a router's concurrent bodies),
    per request of the attempt its completion that did come back, None where lost."""

    def __init__(self, message: str, done: Sequence[Completion | None] | None = None) -> None:
        super().__init__(message)
        self.done = done


class Lost:
    """An answer that never came: its connection was lost (``cause``) while other requests
    of the same attempt were answered (they are kept: :class:`EngineUnreachable` ``done``)."""

    def __init__(self, cause: EngineUnreachable) -> None:
        self.cause = cause


def map_keeping_lost(fn: Callable[[Any], Any], items: Sequence[Any], max_workers: int) -> list[Any]:
    """``fn`` of each item, concurrently (a single item inline), in order: :class:`Lost` where
    its connection was lost while others answered; all lost: that failure is raised. Any
    other failure is raised after every item finished."""

    def one(x: Any) -> Any:
        try:
            return fn(x)
        except EngineUnreachable as exc:
            return Lost(exc)

    if len(items) <= 1:
        answers = [one(x) for x in items]
    else:
        with ThreadPoolExecutor(max_workers=min(len(items), max_workers)) as pool:
            answers = list(pool.map(one, items))
    if answers and all(isinstance(a, Lost) for a in answers):
        raise answers[0].cause
    return answers


@dataclass(frozen=True)
class Decoded:
    """One request's answer as a server engine decoded it, before it is a :class:`Completion`.

    ``logq``: log q_tau of each token (the decode pass); ``logp``: log p0, None until a
    second, scoring pass fills it (two-pass mode); ``entropy``: the p0 entropy (one pass
    only); ``cached_tokens``: the prompt tokens the server's prefix cache served;
    ``logq_at``: per token, log q at the request's score temperatures (one pass, when asked)."""

    tokens: tuple[int, ...]
    logq: tuple[float, ...]
    logp: tuple[float, ...] | None
    entropy: tuple[float, ...] | None
    _: KW_ONLY
    cached_tokens: int
    logq_at: tuple[tuple[float, ...], ...] | None = None

    def completion(self, request: Request, vocab_size: int) -> Completion:
        """The validated completion (entropy only when ``request`` asks for it); EngineError
        when it is not whole."""
        if self.logp is None:
            raise EngineError("a decoded answer has no log p0 (its scoring pass never ran)")
        comp = Completion(
            tokens=self.tokens,
            logq=self.logq,
            logp=self.logp,
            entropy=self.entropy if request.return_entropy else None,
            cached_tokens=self.cached_tokens,
            logq_at=self.logq_at,
        )
        validate_completion(request, comp, vocab_size)
        return comp


@dataclass
class ServerStats:
    calls: int = 0
    http_requests: int = 0
    retries: int = 0
    reconnects: int = 0  # waits for the server to come back after a lost connection
    _: KW_ONLY
    cached_tokens: int = 0
    prompt_tokens: int = 0


class ServerEngine:
    """Base of the server engines: ``_call(method, path, body)`` is the single exchange with
    the server (subclasses may replace it); ``_attempt(requests)`` is one try at a batch."""

    KIND = "server"  # the server's name in messages, e.g. "SGLang server"
    START_HINT = "start it or pass the right --url"
    PLUGIN_HINT = "install presto-sgl into the server's environment and restart it"
    GRAMMARS: frozenset[str] = frozenset()  # the grammar kinds the server's structured outputs take
    capabilities: EngineCapabilities  # set by each engine once it has probed its server

    def __init__(self, url: str, timeout_s: float, max_retries: int, restart_timeout_s: float) -> None:
        number(0, strict=True, what="seconds")("timeout_s", timeout_s)
        integer(0, "retries of a failed call")("max_retries", max_retries)
        number(0, strict=False, what="seconds; 0: fail at once")("restart_timeout_s", restart_timeout_s)
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.restart_timeout_s = float(restart_timeout_s)
        self.stats = ServerStats()
        self._stats_lock = threading.Lock()

    def _call(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        """One request to the server at ``self.url``: the engine's single transport."""
        with self._stats_lock:
            self.stats.http_requests += 1
        return self._http(method, self.url + path, body, headers)

    def _http(self, method: str, url: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
        return http_json(method, url, body, self.timeout_s, self.KIND, self.START_HINT, headers)

    def _attempt(self, requests: Sequence[Request]) -> list[Completion | None]:
        """One try at every request: a validated completion, or None where the server reported an abort."""
        raise NotImplementedError

    @property
    def mode(self) -> str:
        """How log p0 comes back: "one-pass" (the server's plugin) or "two-pass" (a scoring pass)."""
        return self._mode

    # -- the one-pass core ------------------------------------------------------------------------
    def _settle_mode(self, requested: str, plugin: str) -> None:
        """Set the mode from the plugin probe's answer ``plugin``: "yes" (per-request fields),
        "no" (a stock server) or "stale" (a plugin that answers every request: an older
        presto-sgl). EngineError, when the engine is built, for one-pass without the plugin and
        for a stale plugin. Also resets the grammar-resume probe."""
        if plugin == "stale":
            raise EngineError(
                f"{self.KIND} {self.url} runs an older presto-sgl plugin that adds its fields to every request "
                f"(not only to those that ask); {self.PLUGIN_HINT}"
            )
        if requested == "one-pass" and plugin != "yes":
            raise EngineError(
                f"{self.KIND} {self.url} does not load presto-sgl's one-pass plugin, so mode='one-pass' cannot "
                f"work; {self.PLUGIN_HINT}, or use mode='two-pass' (PowerMH only)"
            )
        self._mode = ("one-pass" if plugin == "yes" else "two-pass") if requested == "auto" else requested
        self._resumes: bool | None = None  # the plugin resumes grammars: probed on the first constraint

    def _capabilities(self, seeded: bool, vocab_size: int, context_length: int | None) -> EngineCapabilities:
        """One pass: the entropy, log q at any score temperature (each request asks for its own),
        ending at stop tokens, constraints; two passes: log p0 only."""
        one = self._mode == "one-pass"
        return EngineCapabilities(
            seeded=seeded,
            entropy=one,
            vocab_size=vocab_size,
            context_length=context_length,
            score_temperatures=None if one else (),
            stops=True,
            constraints=one,
        )

    @staticmethod
    def ask(request: Request) -> str:
        """What ``request`` asks the plugin for (:func:`presto_sgl.wire.ask`): log p0, and the
        entropy and the log-normalizers only when its sampler uses them."""
        return ask(request.return_entropy, request.score_temperatures)

    def _check_constraints(self, constraints: Sequence[Constraint]) -> None:
        """CapabilityError unless this server can mask every one of ``constraints`` exactly:
        one pass, a grammar kind it takes, a plugin that resumes grammars (probed once)."""
        if not constraints:
            return
        if self._mode != "one-pass":
            raise CapabilityError(
                f"a constraint needs presto-sgl's plugin on the {self.KIND} {self.url} (two-pass mode cannot mask "
                f"the draws exactly); {self.PLUGIN_HINT}"
            )
        kinds = {c.grammar[0] for c in constraints if c.grammar is not None}
        if kinds - self.GRAMMARS:
            raise CapabilityError(
                f"the {self.KIND} takes no {sorted(kinds - self.GRAMMARS)} grammar; it takes {sorted(self.GRAMMARS)}"
            )
        if not kinds:
            return
        if self._resumes is None:
            self._resumes = self._resume_refused()
        if not self._resumes:
            raise CapabilityError(
                f"the {self.KIND} {self.url} does not resume a grammar at a response prefix (its presto-sgl plugin "
                f"predates structured power sampling); {self.PLUGIN_HINT}"
            )

    def _resume_refused(self) -> bool:
        """Whether the server refuses a request whose resumed prefix token breaks its grammar
        (regex ``[0-9]+``, prefix "Hello"): a plugin that resumes does; one that restarts the
        grammar instead would make the chain inexact."""
        raise NotImplementedError

    def _probe_ids(self) -> list[int]:
        return self.text.encode("Hello") if self.text.has_tokenizer else [1]  # type: ignore[attr-defined]

    def server_loads(self) -> list[dict[str, Any]]:
        """One load snapshot per server (a router: per worker), in the monitor's keys."""
        raise NotImplementedError

    def monitor(self, interval_s: float = 0.25) -> ServerMonitor:
        """A context manager that samples :meth:`server_loads` while a run is in progress."""
        from .monitor import ServerMonitor

        return ServerMonitor(self, interval_s)

    def _health_urls(self) -> list[str]:
        """Further URLs whose ``/health`` must answer before a retry (a router's workers)."""
        return []

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        with self._stats_lock:
            self.stats.calls += 1
        out: list[Completion | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        lost: EngineUnreachable | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._stats_lock:
                    self.stats.retries += len(pending)
            try:
                done = self._attempt([requests[i] for i in pending])
            except EngineUnreachable as exc:  # what was lost is drawn afresh once the server is back
                lost = exc
                for i, comp in zip(pending, exc.done or (), strict=False):
                    out[i] = comp  # answered before the loss: kept (the loss never depends on content)
                pending = [i for i in pending if out[i] is None]
                self._await_restart(exc)
                continue
            for i, comp in zip(pending, done, strict=True):
                out[i] = comp
            pending = [i for i in pending if out[i] is None]
            if not pending:
                self._check_masked(requests, out)  # type: ignore[arg-type]  # no slot is pending
                return out  # type: ignore[return-value]  # every slot holds a Completion
        cause = f"; last connection failure: {lost}" if lost is not None else ""
        raise EngineError(
            f"{self.KIND} {self.url} returned incomplete results for {len(pending)} request(s) "
            f"after {self.max_retries + 1} attempts (aborted or lost responses){cause}; "
            "raise `max_retries` if the server is flaky"
        )

    def _check_masked(self, requests: Sequence[Request], completions: Sequence[Completion]) -> None:
        """EngineError when a constrained response holds a token its grammar forbids (the server did not
        mask that draw): such a response never reaches a chain, and an answer outside the constraint's
        language never comes back as if sampled. Checked with xgrammar on this machine where it is
        installed (the ``embedded`` extra, and every SGLang and vLLM environment)."""
        if not any(r.constraint is not None and r.constraint.grammar is not None for r in requests):
            return
        grammars = self._client_grammars
        if grammars is None:
            return
        for r, comp in zip(requests, completions, strict=True):
            if r.constraint is None or r.constraint.grammar is None:
                continue
            i = grammars.violation(r, comp.tokens)
            if i is not None:
                raise EngineError(
                    f"{self.KIND} {self.url} returned a response whose token {i} (id {comp.tokens[i]}) the "
                    f"constraint {r.constraint.describe()} forbids there: the server did not mask that draw with "
                    f"the request's grammar (resumed after {r.resume} response tokens); the chain stops rather "
                    f"than keep an answer outside the constraint. {self.PLUGIN_HINT}"
                )

    @functools.cached_property
    def _client_grammars(self) -> Grammars | None:
        """This engine's vocabulary's grammars on this machine (None: no tokenizer, or no xgrammar)."""
        if not self.text.has_tokenizer or importlib.util.find_spec("xgrammar") is None:  # type: ignore[attr-defined]
            return None
        return Grammars.for_tokenizer(
            self.tokenizer,  # type: ignore[attr-defined]
            self.capabilities.vocab_size,
            self.text.stop_ids,  # type: ignore[attr-defined]
        )

    def _await_restart(self, exc: EngineUnreachable) -> None:
        """Count a reconnect and wait for ``/health``, or raise EngineError naming the URL."""
        with self._stats_lock:
            self.stats.reconnects += 1
        if not self.wait_healthy(self.restart_timeout_s):
            raise BackendUnavailable(
                f"{self.KIND} {self.url} went away during a call ({exc}) and was not healthy again within "
                f"restart_timeout_s={self.restart_timeout_s:g} s; {self.START_HINT} and rerun, or raise "
                "`restart_timeout_s`"
            ) from None

    def wait_healthy(self, timeout_s: float, interval_s: float = 1.0) -> bool:
        """Poll ``GET /health`` (and :meth:`_health_urls`) until it answers (True) or
        ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._call("GET", "/health")
                for url in self._health_urls():
                    self._http("GET", url + "/health", None)
                return True
            except EngineError:
                if time.monotonic() >= deadline:
                    return False
            time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def http_json(
    method: str,
    url: str,
    body: Any,
    timeout_s: float,
    kind: str = "server",
    hint: str = "",
    headers: Mapping[str, str] | None = None,
) -> Any:
    """One HTTP exchange (with extra ``headers``): the parsed JSON answer (or its text, e.g. ``/health``'s).

    Raises EngineHTTPError on an error status, EngineUnreachable when the connection
    fails, EngineError on a timeout."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:2000]
        if "call_upstream_request_error" in detail:  # sglang-router 0.3.2 cannot reach its worker (HTTP 500)
            raise EngineUnreachable(
                f"SGLang router {_origin(url)} cannot reach its worker ({detail}); {hint}"
            ) from None
        raise EngineHTTPError(f"{kind} {url} returned HTTP {exc.code}: {detail}", exc.code) from None
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise EngineError(
                f"{kind} {url} did not answer within timeout_s={timeout_s:g} s; raise `timeout_s` (--timeout) "
                "for long calls"
            ) from None
        raise EngineUnreachable(f"{kind} {_origin(url)} is unreachable or not ready ({reason!r}); {hint}") from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _origin(url: str) -> str:
    """``http://host:port`` of a request URL."""
    return "/".join(url.split("/", 3)[:3])
