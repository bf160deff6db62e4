"""The service behind the endpoint: prompts to token ids, a job to its chains, chains to choices.

A request's prompt becomes token ids once: completions text through the engine's
tokenizer (no special tokens added), chat messages through the model's chat template
applied straight to ids (``apply_chat_template(..., tokenize=True)``), never a text round
trip. Chain j of prompt i is keyed by (seed, i * n + j): the n chains of a prompt are
independent and share its prefix in the backend's KV cache.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..engines.base import Engine
from ..engines.scoring import Scored, Scorer, scorer
from ..engines.server import ServerEngine
from ..engines.text import cut_at_stop, ids_of_prefix
from ..errors import CapabilityError, ConfigError
from ..execution.context import RunContext
from ..methods import SampleResult
from ..samplers import Sampler
from ..scheduling.pool import ChainPool, GuardedEngine, Ticket
from .parse import ChainJob, request_error
from .request import LENGTH, ROLES, Defaults, ParamError

SAMPLERS_KEPT = 32
"""Samplers kept (one per distinct request config, least recently used dropped first)."""


@dataclass(frozen=True)
class Choice:
    """One chain's answer: its first ``max_tokens`` tokens, up to the first stop token or ``stop``
    string; or (``scored``) a prompt scored in one pass, with the greedy next token when asked."""

    index: int
    text: str
    token_ids: tuple[int, ...]  # the ids the text decodes
    finish_reason: str  # "stop" (a stop token or string ended it) or "length"
    _: KW_ONLY
    result: SampleResult | None  # the chain (None: a scored prompt)
    eos_index: int | None  # the first stop token of the chain's whole response
    logp: tuple[float | None, ...] = ()  # log p0 of each of token_ids
    scored: Scored | None = None


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
            self._check_constrainable(job)
            try:
                sampler = Sampler(self.engine, job.config, job.presto)
            except ValueError as exc:  # CapabilityError: e.g. entropycut on an engine without entropy
                raise ParamError("method", str(exc)) from None
            if self.pool.scheduler is not None:
                self.pool.scheduler.adopt(sampler)
            self._samplers[key] = sampler
            if len(self._samplers) > SAMPLERS_KEPT:
                self._samplers.popitem(last=False)
            return sampler

    def _check_constrainable(self, job: ChainJob) -> None:
        """A 400 naming the constraint's field when the backend cannot sample under it: its draws
        cannot be masked by a grammar resumed at the kept prefix, or its model has no stop token
        (the constrained responses are those that end)."""
        c = job.config.target.constraint
        if c is None or job.constraint_field is None:
            return
        if not self.engine.capabilities.constraints:
            why = "this backend cannot mask its draws by a grammar resumed at the kept prefix"
        elif not self.engine.text.stop_ids:
            why = "the served model has no stop token, so no response can end where the constraint allows"
        else:
            return
        raise ParamError(
            job.constraint_field,
            f"`{job.constraint_field}` asks for structured power sampling, and {why} (embedded and reference "
            "engines, and SGLang with presto-sgl's plugin, can)",
        )

    def prompt_ids(self, job: ChainJob, prompt: Any) -> tuple[int, ...]:
        """One prompt as token ids, checked by the sampler (400 naming the field otherwise)."""
        field = "messages" if job.kind == "chat" else "prompt"
        try:
            if job.kind == "chat":
                ids = self._chat_ids(prompt)
            else:
                ids = self._text_ids(prompt, special=True) if isinstance(prompt, str) else list(prompt)
            return self.sampler(job).check_prompt(ids)
        except ConfigError as exc:
            raise request_error(exc, {"prompt": field, LENGTH: "max_tokens"}) from None

    def _text_ids(self, text: str, special: bool = False) -> list[int]:
        if not self.text.has_tokenizer:
            raise ParamError("prompt", "this backend has no tokenizer; send the prompt as a list of token ids")
        try:
            return self.text.encode(text, special=special)
        except ConfigError as exc:  # e.g. characters outside the reference vocabulary
            raise ParamError("prompt", f"{exc}; or send the prompt as a list of token ids") from None

    def _chat_ids(self, messages: Sequence[Any]) -> list[int]:
        if not self.text.has_chat_template:
            raise ParamError("messages", "this backend's model has no chat template; use /v1/completions")
        try:
            return self.text.chat_ids([_turn(i, m) for i, m in enumerate(messages)])
        except ConfigError as exc:  # the template refused the turns
            raise ParamError("messages", str(exc)) from None

    def encode(self, text: str, special: bool) -> list[int]:
        """``/tokenize``: ``text`` as ids (``special``: with the tokenizer's special tokens)."""
        return self._text_ids(text, special)

    def chat_ids(self, messages: Sequence[Any]) -> list[int]:
        """``/tokenize`` with ``messages``: the chat template's ids, with the generation prompt."""
        return self._chat_ids(messages)

    def start(self, job: ChainJob, ticket: Ticket) -> tuple[int, list[tuple[int, ...]], list[Future] | None]:
        """(seed, prompt ids, one future per chain), or futures None when the pool is full.

        Everything a request can get wrong is raised (ParamError) before a chain starts."""
        if job.scoring:  # one scoring pass per prompt, in the pool like a chain
            score = self._scorer().score_tokens
            prompts = [self._scoring_ids(job, p) for p in job.prompts]
            top = job.logprobs or 0

            def score_one(ids: tuple[int, ...], context: RunContext) -> Scored:  # one pass: no rounds to share
                return score([ids], top)[0]

            return 0, prompts, self._submit(ticket, [functools.partial(score_one, ids) for ids in prompts])
        prompts = [self.prompt_ids(job, p) for p in job.prompts]
        sampler = self.sampler(job)
        seed = job.seed if job.seed is not None else secrets.randbelow(2**31)  # reported: the response can be redrawn
        chains: list[Callable[..., SampleResult]] = []
        for i, ids in enumerate(prompts):
            for j in range(job.n):
                chains.append(functools.partial(sampler.run, ids, seed=seed, prompt_id=i * job.n + j))
        return seed, prompts, self._submit(ticket, chains)

    def _submit(self, ticket: Ticket, chains: Sequence[Callable[..., Any]]) -> list[Future] | None:
        if len(chains) > self.pool.capacity:
            raise ParamError(
                "n",
                f"the request asks for {len(chains)} chains (prompts x n) but this server holds at "
                f"most {self.pool.capacity} (--concurrency + --queue-size)",
            )
        return self.pool.submit(ticket, list(chains), self.engine)

    def _scorer(self) -> Scorer:
        try:
            return scorer(self.engine.inner)
        except CapabilityError as exc:
            raise ParamError("echo", str(exc)) from None

    def _scoring_ids(self, job: ChainJob, prompt: Any) -> tuple[int, ...]:
        ids = tuple(self._text_ids(prompt, special=True) if isinstance(prompt, str) else prompt)
        vocab = self.engine.capabilities.vocab_size
        if not ids or any(not 0 <= t < vocab for t in ids):
            raise ParamError("prompt", f"`prompt` must be non-empty token ids in [0, {vocab}) (or text) to be scored")
        context = self.engine.capabilities.context_length
        if context is not None and len(ids) + job.max_tokens > context:
            raise ParamError(
                "prompt",
                f"`prompt` has {len(ids)} tokens; with `max_tokens` {job.max_tokens} that "
                f"exceeds the model's context of {context}",
            )
        return ids

    def choice(self, job: ChainJob, index: int, result: Any, prompt: Sequence[int] = ()) -> Choice:
        """The answer of one chain: its first ``max_tokens`` tokens cut at the first stop token, then
        before the first ``stop`` string (keeping the ids whose text is inside it); or a scored prompt."""
        if job.scoring:
            ids = tuple(prompt) + ((result.next_token[0],) if job.max_tokens else ())
            logp = result.logp + ((result.next_token[1],) if job.max_tokens else ())
            return Choice(
                index, self.text.decode(ids), ids, "length", result=None, eos_index=None, logp=logp, scored=result
            )
        tokens = result.state.tokens
        answer = self.text.answer(tokens[: job.max_tokens])
        text, ids, reason = answer.text, answer.ids, "stop" if answer.eos_index is not None else "length"
        cuts = [text.index(s) for s in job.stop if s in text]
        if cuts:
            text, reason = text[: min(cuts)], "stop"
            ids, _ = ids_of_prefix(self.text, ids, text)
        eos_index = cut_at_stop(tokens, self.text.stop_ids)[1]
        return Choice(
            index, text, ids, reason, result=result, eos_index=eos_index, logp=tuple(result.state.logp[: len(ids)])
        )

    def backend_healthy(self) -> bool:
        """The backend answers ``/health`` (server engines), or is in process."""
        inner = self.engine.inner
        return inner.wait_healthy(0.0) if isinstance(inner, ServerEngine) else True
