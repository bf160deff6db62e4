"""The method protocol: what every way of drawing a response (an MH sampler or a baseline)
offers the front ends, and what they share.

A :class:`Method` validates its prompt (:meth:`check_prompt`), describes itself (the trace's
run record and the manifest's config, :meth:`describe`), and draws one response with
:meth:`run`, which returns a :class:`SampleResult` and writes the same trace records
whatever the method: ``run`` first (or ``resume``), then ``call`` (and, for MH, ``node`` and
``state``) records, the method's own declared records (:data:`presto_sgl.chain.trace.RECORD_TYPES`),
and ``summary`` last. So ``read_trace``, ``metrics_from_trace`` and ``resume`` accept the
trace of every method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .chain.metrics import CallRecord, PromptMetrics, RequestRecord, summarize
from .chain.state import ChainState
from .engines.base import Completion, Engine, Request
from .errors import ConfigError
from .execution.context import ALONE, RunContext
from .execution.executor import OnTransition, Recorder
from .execution.resume import Checkpoint, check_same_run
from .fields import integer

if TYPE_CHECKING:
    from .planners.base import Planner


@dataclass(frozen=True)
class SampleResult:
    state: ChainState
    metrics: PromptMetrics


@runtime_checkable
class Method(Protocol):
    @property
    def name(self) -> str:
        """The method: a kernel's name (run by a rule) or a baseline's."""
        ...

    engine: Engine
    transitions_per_run: int  # MH transitions one run makes (0 for a baseline): progress bars

    @property
    def planner(self) -> Planner | None:
        """The rule's planner (None: a baseline, which plans no rounds)."""
        ...

    def describe(self) -> dict[str, object]:
        """The method's config: the trace's run record and the run directory's manifest."""
        ...

    def check_prompt(self, prompt: Sequence[int]) -> tuple[int, ...]:
        """The prompt as a tuple of ids, or a ConfigError naming `prompt`."""
        ...

    def run_record(
        self, prompt: Sequence[int], seed: int, prompt_id: int | str, info: Mapping[str, object] | None = None
    ) -> dict[str, object]:
        """The trace's ``run`` record: what identifies the chain (compared on resume)."""
        ...

    def run(
        self,
        prompt: Sequence[int],
        *,
        seed: int,
        prompt_id: int | str = 0,
        context: RunContext = ALONE,
        on_transition: OnTransition | None = None,
        info: Mapping[str, object] | None = None,
    ) -> SampleResult:
        """Draw one response of ``max_new_tokens`` tokens for ``prompt`` (keys from ``seed`` and
        ``prompt_id``) in ``context``: its lane to a shared scheduler
        (:meth:`presto_sgl.scheduling.scheduler.Scheduler.chain`), its cancellation guard, its
        trace and the checkpoint it resumes from (:class:`~presto_sgl.execution.context.RunContext`).
        ``on_transition`` sees every MH transition; ``info`` adds fields to the run record (the
        CLI's engine and model). :class:`MethodBase` implements it once for every method."""
        ...


def check_prompt(engine: Engine, prompt: Sequence[int], max_new_tokens: int) -> tuple[int, ...]:
    """The prompt as a tuple of ids, or a ConfigError naming `prompt` if it cannot be sampled from.

    The one place a prompt is validated (samplers, baselines, the CLI, ``serve`` and ``power_gen``)."""
    if isinstance(prompt, (str, bytes)):
        raise ConfigError(
            "prompt", prompt, "{prompt} must be token ids, not text; encode it with the engine's tokenizer"
        )
    if len(prompt) == 0:
        raise ConfigError(
            "prompt", prompt, "{prompt} (=[]) is empty; pass at least one token id (e.g. a BOS or chat-template prefix)"
        )
    vocab_size = engine.capabilities.vocab_size
    bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int) or not (0 <= t < vocab_size)]
    if bad:
        raise ConfigError(
            "prompt",
            prompt,
            f"{{prompt}} has token ids {bad[:5]} outside the vocabulary "
            f"[0, {vocab_size}); tokenize with the engine's tokenizer",
        )
    limit = engine.capabilities.context_length
    if limit is not None and len(prompt) + max_new_tokens > limit:
        raise ConfigError(
            "max_new_tokens",
            max_new_tokens,
            f"{{max_new_tokens}} (={max_new_tokens}) plus the prompt ({len(prompt)} tokens) exceeds the "
            f"model context ({limit}); use {{max_new_tokens}} <= {max(0, limit - len(prompt))} or a "
            "shorter prompt",
        )
    return tuple(int(t) for t in prompt)


class MethodBase:
    """What methods share: the prompt check, the run record, the trace's opening and closing."""

    engine: Engine
    max_new_tokens: int
    transitions_per_run = 0
    planner: Planner | None = None

    @property
    def name(self) -> str:
        """The method's name in records (a class attribute of each method, or a property)."""
        raise NotImplementedError

    def describe(self) -> dict[str, object]:
        raise NotImplementedError

    def check_prompt(self, prompt: Sequence[int]) -> tuple[int, ...]:
        return check_prompt(self.engine, prompt, self.max_new_tokens)

    def run(
        self,
        prompt: Sequence[int],
        *,
        seed: int,
        prompt_id: int | str = 0,
        context: RunContext = ALONE,
        on_transition: OnTransition | None = None,
        info: Mapping[str, object] | None = None,
    ) -> SampleResult:
        integer(None, "the chain's keys")("seed", seed)
        ids = self.check_prompt(prompt)
        rec = Recorder(self.engine, context)
        self.open_trace(rec, ids, seed, prompt_id, info, context.resume)
        state = self.draw(rec, ids, seed=seed, prompt_id=prompt_id, resume=context.resume, on_transition=on_transition)
        return self.close_trace(rec, state)

    def draw(
        self,
        rec: Recorder,
        prompt: tuple[int, ...],
        *,
        seed: int,
        prompt_id: int | str,
        resume: Checkpoint | None,
        on_transition: OnTransition | None,
    ) -> ChainState:
        """The method's own part of :meth:`run`: the response state, its calls recorded in ``rec``
        (and its own records in ``rec.trace``). By default a :meth:`response` drawn from the start,
        resumed or not (its calls are keyed: the same draws); a method that goes on from
        ``resume`` or reports transitions (the MH sampler) overrides this."""
        return self.response(rec, prompt, seed, prompt_id)

    def response(self, rec: Recorder, prompt: tuple[int, ...], seed: int, prompt_id: int | str) -> ChainState:
        """The response state of a method drawn from the start (the baselines')."""
        raise NotImplementedError

    def run_record(
        self, prompt: Sequence[int], seed: int, prompt_id: int | str, info: Mapping[str, object] | None = None
    ) -> dict[str, object]:
        return {
            **self.describe(),
            "seed": seed,
            "prompt_id": prompt_id,
            "prompt_len": len(prompt),
            "prompt": list(prompt),
            "vocab_size": self.engine.capabilities.vocab_size,
            **(info or {}),
        }

    def open_trace(
        self,
        rec: Recorder,
        prompt: tuple[int, ...],
        seed: int,
        prompt_id: int | str,
        info: Mapping[str, object] | None,
        resume: Checkpoint | None,
    ) -> None:
        """Write the run record, or check ``resume`` is this run (a ``resume`` record marks where
        the trace goes on; a method that continues the chain carries its records over itself)."""
        trace = rec.trace
        if resume is not None:
            check_same_run(resume.name, resume.run, self.run_record(prompt, seed, prompt_id, info))
            if trace:
                trace.write("resume", {"stage": resume.stage, "k": resume.k, "calls": len(resume.calls)})
        elif trace:
            trace.write("run", self.run_record(prompt, seed, prompt_id, info))

    @staticmethod
    def close_trace(rec: Recorder, state: ChainState) -> SampleResult:
        metrics = summarize(rec.calls, rec.nodes)
        if rec.trace:
            rec.trace.write("summary", {"metrics": metrics.__dict__, "tokens": list(state.tokens)})
        return SampleResult(state, metrics)


def extend(rec: Recorder, stage: int, cut: int, requests: Sequence[Request]) -> list[Completion]:
    """One plain generation call (a block extension, a baseline's draws), recorded as a call of
    kind ``extend``: ``cut`` response tokens kept before each request's new ones."""
    comps, elapsed = rec.call(requests)
    records = tuple(
        RequestRecord(
            decision=None,
            cut=cut,
            prefix_len=len(r.prefix),
            new_tokens=len(c.tokens),
            cached_tokens=c.cached_tokens,
            reachable=True,
            temperature=r.temperature,
            seed=r.seed,
        )
        for r, c in zip(requests, comps, strict=True)
    )
    rec.record_call(
        CallRecord(index=len(rec.calls), stage=stage, kind="extend", k0=0, requests=records, time_s=elapsed)
    )
    return comps
