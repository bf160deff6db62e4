"""The service behind the endpoint: prompts to token ids, a job to its chains, chains to choices.

A request's prompt becomes token ids once: completions text through the engine's
tokenizer (no special tokens added), chat messages through the model's chat template
applied straight to ids (``apply_chat_template(..., tokenize=True)``), never a text round
trip. Chain j of prompt i is keyed by (seed, i * n + j): the n chains of a prompt are
independent and share its prefix in the backend's KV cache.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..engines.base import Engine
from ..engines.server import ServerEngine
from ..errors import ConfigError
from ..methods import SampleResult
from ..pool import ChainPool, GuardedEngine, Ticket
from ..samplers import Sampler
from .params import LENGTH, ChainJob, Defaults, ParamError, request_error

ROLES = ("system", "developer", "user", "assistant")
SAMPLERS_KEPT = 32
"""Samplers kept (one per distinct request config, least recently used dropped first)."""


@dataclass(frozen=True)
class Choice:
    """One chain's answer: the text up to the first stop token or ``stop`` string."""

    index: int
    text: str
    token_ids: tuple[int, ...]  # the ids the text decodes (the response before its stop token)
    finish_reason: str  # "stop" (a stop token or string ended it) or "length"
    result: SampleResult
    eos_index: int | None


def _turn(i: int, message: Any) -> dict[str, str]:
    """``messages[i]`` as the chat template's {role, content}, its content parts joined."""
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise ParamError("messages", f"`messages[{i}]` must be an object with `role` one of {list(ROLES)}")
    content = message.get("content")
    if isinstance(content, list):  # content parts: text only
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ParamError("messages", f"`messages[{i}].content` parts must all be {{type: text, text: ...}}")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise ParamError("messages", f"`messages[{i}].content` must be a string or a list of text parts")
    return {"role": message["role"], "content": content}


class Service:
    """One backend ``engine`` serving requests: ``defaults`` fill what a request leaves out."""

    def __init__(self, engine: Engine, defaults: Defaults, pool: ChainPool, model: str) -> None:
        self.engine = GuardedEngine(engine)
        self.defaults = defaults
        self.pool = pool
        self.model = model
        self.text = engine.text  # a server engine loads its tokenizer here (or answers with ids)
        self._samplers: OrderedDict[tuple[Any, Any], Sampler] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def sampler(self, job: ChainJob) -> Sampler:
        """The sampler of the job's configs, shared by every request with the same ones (its
        planner's learned call times with it)."""
        key = (job.config, job.presto)
        with self._lock:
            if key in self._samplers:
                self._samplers.move_to_end(key)
                return self._samplers[key]
            try:
                sampler = Sampler(self.engine, job.config, job.presto)
            except ValueError as exc:  # CapabilityError: e.g. entropycut on an engine without entropy
                raise ParamError("method", str(exc)) from None
            self._samplers[key] = sampler
            if len(self._samplers) > SAMPLERS_KEPT:
                self._samplers.popitem(last=False)
            return sampler

    def prompt_ids(self, job: ChainJob, prompt: Any) -> tuple[int, ...]:
        """One prompt as token ids, checked by the sampler (400 naming the field otherwise)."""
        field = "messages" if job.kind == "chat" else "prompt"
        try:
            if job.kind == "chat":
                ids = self._chat_ids(prompt)
            else:
                ids = self._text_ids(prompt) if isinstance(prompt, str) else list(prompt)
            return self.sampler(job).check_prompt(ids)
        except ConfigError as exc:
            raise request_error(exc, {"prompt": field, LENGTH: "max_tokens"}) from None

    def _text_ids(self, text: str) -> list[int]:
        if not self.text.has_tokenizer:
            raise ParamError("prompt", "this backend has no tokenizer; send the prompt as a list of token ids")
        try:
            return self.text.encode(text)
        except ConfigError as exc:  # e.g. characters outside the reference vocabulary
            raise ParamError("prompt", f"{exc}; or send the prompt as a list of token ids") from None

    def _chat_ids(self, messages: Sequence[Any]) -> list[int]:
        if not self.text.has_chat_template:
            raise ParamError("messages", "this backend's model has no chat template; use /v1/completions")
        return self.text.chat_ids([_turn(i, m) for i, m in enumerate(messages)])

    def start(self, job: ChainJob, ticket: Ticket) -> tuple[int, list[tuple[int, ...]], list[Future] | None]:
        """(seed, prompt ids, one future per chain), or futures None when the pool is full.

        Everything a request can get wrong is raised (ParamError) before a chain starts."""
        prompts = [self.prompt_ids(job, p) for p in job.prompts]
        sampler = self.sampler(job)
        seed = job.seed if job.seed is not None else secrets.randbelow(2**31)  # reported: the response can be redrawn
        chains: list[Callable[[], SampleResult]] = []
        for i, ids in enumerate(prompts):
            for j in range(job.n):
                chains.append(lambda ids=ids, cid=i * job.n + j: sampler.run(ids, seed=seed, prompt_id=cid))
        if len(chains) > self.pool.capacity:
            raise ParamError("n", f"the request asks for {len(chains)} chains (prompts x n) but this server holds at "
                             f"most {self.pool.capacity} (--concurrency + --queue-size)")
        return seed, prompts, self.pool.submit(ticket, chains)

    def choice(self, job: ChainJob, index: int, result: SampleResult) -> Choice:
        """The answer of one chain: cut at the first stop token, then at the first ``stop`` string."""
        answer = self.text.answer(result.state.tokens)
        text, reason = answer.text, "stop" if answer.eos_index is not None else "length"
        cuts = [text.index(s) for s in job.stop if s in text]
        if cuts:
            text, reason = text[: min(cuts)], "stop"
        return Choice(index, text, answer.ids, reason, result, answer.eos_index)

    def backend_healthy(self) -> bool:
        """The backend answers ``/health`` (server engines), or is in process."""
        inner = self.engine.inner
        return inner.wait_healthy(0.0) if isinstance(inner, ServerEngine) else True
