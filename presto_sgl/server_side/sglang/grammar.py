"""SGLang plugin part: resume a request's grammar (``regex`` / ``json_schema`` / ``ebnf``) at a
response prefix sent as input ids.

A client that continues a response of k tokens sends ``/generate`` with ``input_ids`` = prompt +
those k tokens, SGLang's own grammar in ``sampling_params`` and
``sampling_params.custom_params[GRAMMAR_RESUME_KEY] = k`` (:mod:`presto_sgl.wire`; k >= 0).
Without it SGLang would mask the first new token with the grammar's start state.

Where: SGLang 0.5.23's ``Scheduler.handle_generate_request`` calls
``GrammarManager.process_req_with_grammar(req)``, which sets ``req.grammar`` to a copy of the
cached grammar object (cache hit: the request is queued for prefill at once) or to a future of
its compilation (the request waits in ``grammar_queue``; ``GrammarManager.get_ready_grammar_requests``
resolves the future, caches a copy of the fresh object, and hands the request to the waiting
queue). An AFTER hook on each (:data:`IMMEDIATE`, :data:`QUEUED`) advances the request's own
grammar object by ``accept_token`` over the last k input ids, before the request can reach a
batch, so the vocabulary mask of its first sampled token is the grammar state after the prefix;
the cached object stays at the start state. A rejected token, a prefix after which the grammar
has already terminated (SGLang would then leave the row unmasked), a bad k or a k without a
grammar aborts the request (``Req.set_finish_with_abort``: HTTP 400 with the message), as SGLang
does with a grammar that fails to compile. Retracted requests keep their advanced grammar
(SGLang never recreates it), so neither hook runs twice for a request. SGLang's
``min_new_tokens`` / ``max_new_tokens`` still count new tokens only (the prefix is input).
"""

from __future__ import annotations

from typing import Any

from ...wire import GRAMMAR_RESUME_KEY

IMMEDIATE = "sglang.srt.constrained.grammar_manager.GrammarManager.process_req_with_grammar"
QUEUED = "sglang.srt.constrained.grammar_manager.GrammarManager.get_ready_grammar_requests"
_DONE = "presto_grammar_resumed"  # set on a Req once its grammar has been advanced


def register() -> None:
    """Register both hooks (called by the plugin's ``register``)."""
    from sglang.srt.plugins.hook_registry import HookType

    from .hooks import register_all

    register_all(
        [
            (IMMEDIATE, after_process_req_with_grammar, HookType.AFTER),
            (QUEUED, after_get_ready_grammar_requests, HookType.AFTER),
        ]
    )


def after_process_req_with_grammar(queued: bool, manager: Any, req: Any) -> None:
    """A request whose grammar came from the cache: resume it now (a queued one waits)."""
    if not queued:
        resume(req)


def after_get_ready_grammar_requests(reqs: list[Any], manager: Any) -> None:
    """Requests whose grammar has just been compiled (or failed, or timed out)."""
    for req in reqs:
        resume(req)


def resume(req: Any) -> None:
    """Advance ``req.grammar`` over the last k input ids, k = the request's resume count;
    abort the request when that is impossible. No-op without the key, or when the request
    is already finished or aborted."""
    params = getattr(req.sampling_params, "custom_params", None)
    if not isinstance(params, dict) or GRAMMAR_RESUME_KEY not in params:
        return
    if req.finished() or getattr(req, "to_finish", None) is not None or getattr(req, _DONE, False):
        return
    error = _advance(req, params[GRAMMAR_RESUME_KEY])
    setattr(req, _DONE, True)
    if error is not None:
        req.set_finish_with_abort(f"custom_params[{GRAMMAR_RESUME_KEY!r}]: {error}")


def _advance(req: Any, k: Any) -> str | None:
    """Feed the prefix to the grammar; the reason it cannot, or None."""
    from concurrent.futures import Future

    grammar, n = req.grammar, len(req.origin_input_ids)
    if type(k) is not int or not 0 <= k <= n:
        return f"must be an integer in [0, {n}] (the number of input ids), got {k!r}"
    if grammar is None or isinstance(grammar, Future):
        return "the request has no grammar (regex, json_schema or ebnf) to resume"
    for i, token in enumerate(int(t) for t in req.origin_input_ids[n - k :]):
        if grammar.is_terminated():
            return f"the grammar ended before prefix token {i} of {k} (id {token})"
        try:
            grammar.accept_token(token)
        except Exception as exc:  # xgrammar raises ValueError; other backends differ
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return f"the grammar rejected prefix token {i} of {k} (id {token}): {reason}"
    if k and grammar.is_terminated():
        return f"the grammar has already ended after the {k} prefix tokens: nothing is left to sample"
    return None
