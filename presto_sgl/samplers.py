"""The sampler: the block schedule around one executor that runs any MH kernel.

Stage l extends the state by B tokens from q_tau (no EOS stop), then runs K MH
transitions targeting p0(x_{1:lB})^alpha. The transitions run in rounds: the planner
picks decisions whose draws one batched model call fetches, the walker takes the MH
path through them. Sequential PowerMH (paper Alg. 1) is the planner that picks the next
decision only; PreSTO (Alg. 2) is every other planner. With the same keys every rule
visits exactly the same states (paper Prop. 1; docs/design.md §4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from .config import PowerConfig, PrestoConfig
from .engines.base import Engine, Request
from .errors import CapabilityError
from .executor import OnTransition, Recorder, StageExecutor
from .kernels.base import Kernel
from .kernels.entropycut import EntropyCutKernel
from .kernels.multitry import MultiTryKernel
from .kernels.powermh import PowerMHKernel
from .keys import ChainKeys
from .metrics import CallRecord, PromptMetrics, RequestRecord, summarize
from .planners import Planner, make_planner
from .resume import Checkpoint, check_same_run
from .state import ChainState
from .trace import TraceWriter


@dataclass(frozen=True)
class SampleResult:
    state: ChainState
    metrics: PromptMetrics


def make_kernel(config: PowerConfig) -> Kernel:
    """The MH kernel of ``config.sampler`` (the paper's samplers join here)."""
    if config.sampler == "entropycut":
        return EntropyCutKernel(alpha=float(config.alpha), temperature=config.temperature, beta=float(config.beta))
    if config.sampler == "multitry":
        return MultiTryKernel(alpha=float(config.alpha), temperatures=config.try_temperatures, tries=config.tries)
    return PowerMHKernel(alpha=float(config.alpha), temperature=config.temperature)


def check_prompt(engine: Engine, prompt: Sequence[int], max_new_tokens: int) -> tuple[int, ...]:
    """The prompt as a tuple of ids, or a ValueError naming `prompt` if it cannot be sampled from.

    The one place a prompt is validated (samplers, baselines, the CLI and ``power_gen``)."""
    if isinstance(prompt, (str, bytes)):
        raise ValueError("`prompt` must be token ids, not text; encode it with the engine's tokenizer")
    if len(prompt) == 0:
        raise ValueError("`prompt` (=[]) is empty; pass at least one token id (e.g. a BOS or chat-template prefix)")
    vocab_size = engine.capabilities.vocab_size
    bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int) or not (0 <= t < vocab_size)]
    if bad:
        raise ValueError(
            f"`prompt` has token ids {bad[:5]} outside the vocabulary [0, {vocab_size}); "
            "tokenize with the engine's tokenizer"
        )
    limit = engine.capabilities.context_length
    if limit is not None and len(prompt) + max_new_tokens > limit:
        raise ValueError(
            f"`max_new_tokens` (={max_new_tokens}) plus the prompt ({len(prompt)} tokens) exceeds "
            f"the model context ({limit}); use max_new_tokens <= {max(0, limit - len(prompt))} or a shorter prompt"
        )
    return tuple(int(t) for t in prompt)


class Sampler:
    """Power sampling by MH suffix resampling: ``kernel`` (default from ``config``) run by
    the planner of ``presto.rule`` (default: PreSTO's step rule), or by ``planner`` when
    given (an object shared by every run of this sampler; see :mod:`presto_sgl.planners`).

    One sampler may run many chains at once (threads): each run gets its own planner
    state (:meth:`Planner.for_run`); what planners learn is shared on purpose.
    """

    def __init__(
        self,
        engine: Engine,
        config: PowerConfig,
        presto: PrestoConfig | None = None,
        *,
        kernel: Kernel | None = None,
        planner: Planner | None = None,
    ) -> None:
        if not isinstance(config, PowerConfig):
            raise TypeError(f"`config` must be a PowerConfig, got {type(config).__name__}")
        presto = presto if presto is not None else PrestoConfig()
        if not isinstance(presto, PrestoConfig):
            raise TypeError(f"`presto` must be a PrestoConfig, got {type(presto).__name__}")
        self.engine = engine
        self.config = config
        self.presto = presto
        self.kernel = kernel if kernel is not None else make_kernel(config)
        self.planner = planner if planner is not None else make_planner(presto)
        need = self.planner.keying  # the rule's keys (make_planner), or an injected planner's
        if need is not None and need != config.keying:
            rule = type(self.planner).__name__ if planner is not None else f"rule {presto.rule!r}"
            raise ValueError(
                f"{rule} couples with {need} keys but `config.keying` is {config.keying!r}; "
                f"use PowerConfig(keying={need!r})"
            )
        if self.kernel.needs_entropy and not engine.capabilities.entropy:
            raise CapabilityError(
                f"the {self.kernel.name} kernel needs per-token entropy, which this engine cannot return; "
                "use an engine with entropy (embedded, reference, SGLang one-pass)"
            )
        temps = self.kernel.score_temperatures
        if temps and not engine.capabilities.scores_at(temps):
            have = engine.capabilities.score_temperatures
            raise CapabilityError(
                f"the {self.kernel.name} kernel needs log q at temperatures {list(temps)}, which this engine cannot "
                f"return (it scores at {list(have or [])}); use the embedded or reference engine, or an SGLang "
                "one-pass server started with PRESTO_SGL_SCORE_TEMPERATURES covering them"
            )

    @property
    def name(self) -> str:
        """``sequential`` or ``presto`` (the trace's ``sampler`` field)."""
        return "sequential" if self.presto.sequential else "presto"

    def describe(self) -> dict[str, object]:
        c = self.config
        out: dict[str, object] = {
            "sampler": self.name,
            "kernel": self.kernel.name,
            "alpha": c.alpha,
            "tau": c.temperature,
            "max_new_tokens": c.max_new_tokens,
            "block_size": c.block_size,
            "steps": c.steps,
            "keying": c.keying,
            **({"beta": c.beta} if c.sampler == "entropycut" else {}),
            **({"tries": c.tries, "try_temperatures": list(c.try_temperatures)} if c.sampler == "multitry" else {}),
        }
        return out if self.presto.sequential else {**out, **asdict(self.presto)}

    def check_prompt(self, prompt: Sequence[int]) -> tuple[int, ...]:
        """The prompt as a tuple of ids, or a ValueError naming `prompt` (:func:`check_prompt`)."""
        return check_prompt(self.engine, prompt, self.config.max_new_tokens)

    def run_record(self, prompt: Sequence[int], seed: int, prompt_id: int | str, info: Mapping[str, object] | None = None) -> dict[str, object]:
        """The trace's ``run`` record: what identifies the chain (compared on resume)."""
        return {**self.describe(), "seed": seed, "prompt_id": prompt_id, "prompt_len": len(prompt), "prompt": list(prompt),
                "vocab_size": self.engine.capabilities.vocab_size, **(info or {})}

    def run(
        self,
        prompt: Sequence[int],
        *,
        seed: int,
        prompt_id: int | str = 0,
        trace: TraceWriter | None = None,
        on_transition: OnTransition | None = None,
        resume: Checkpoint | None = None,
        info: Mapping[str, object] | None = None,
    ) -> SampleResult:
        """Sample one response of ``max_new_tokens`` tokens (approximately) from pi_alpha.

        ``resume``: go on from a trace's checkpoint (:mod:`presto_sgl.resume`); ``trace`` then
        continues that trace (no new run record). ``info``: further fields of the run record
        (the CLI's engine and model)."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` (={seed!r}) must be an integer")
        prompt_ids = self.check_prompt(prompt)
        keys = ChainKeys(seed, prompt_id)
        rec = Recorder(self.engine, trace)
        cfg = self.config
        planner = self.planner.for_run()
        entropy, temps = self.kernel.needs_entropy, self.kernel.score_temperatures
        state = ChainState(prompt_ids, entropy=() if entropy else None, logq_at=() if temps else None)
        start, path, k = 0, "", 0
        if resume is not None:
            check_same_run(resume.name, resume.run, self.run_record(prompt_ids, seed, prompt_id, info))
            rec.calls, rec.nodes = list(resume.calls), list(resume.nodes)
            start, path, k = resume.stage, resume.path, resume.k
            state = resume.state if resume.state is not None else state
            if trace:
                trace.write("resume", {"stage": start, "k": k, "calls": len(rec.calls)})
        elif trace:
            trace.write("run", self.run_record(prompt_ids, seed, prompt_id, info))
        for stage in range(max(start, 1), cfg.num_stages + 1):
            if stage > start:
                L = state.length
                req = Request(state.context(L), cfg.block_size, cfg.temperature, keys.extension_seed(stage), entropy, temps,
                              keys.route)
                (comp,), elapsed = rec.call([req])
                request = RequestRecord(None, L, len(req.prefix), cfg.block_size, comp.cached_tokens, True, req.temperature, req.seed)
                rec.record_call(CallRecord(len(rec.calls), stage, "extend", 0, (request,), elapsed))
                state = state.replace_suffix(L, comp.tokens, comp.logq, comp.logp, comp.entropy, comp.logq_at)
                path, k = "", 0
                rec.record_state(stage, k, path, state)
            state = StageExecutor(
                self.kernel, cfg, self.presto.budget, planner, stage, keys, rec, on_transition
            ).run(state, path, k)
        metrics = summarize(rec.calls, rec.nodes)
        if trace:
            trace.write("summary", {"metrics": metrics.__dict__, "tokens": list(state.tokens)})
        return SampleResult(state, metrics)


class PowerMH(Sampler):
    """Sequential PowerMH (paper Alg. 1): one model call per MH transition."""

    def __init__(self, engine: Engine, config: PowerConfig, *, kernel: Kernel | None = None) -> None:
        super().__init__(engine, config, PrestoConfig(rule="sequential"), kernel=kernel)


class PrestoPowerMH(Sampler):
    """PreSTO-PowerMH (paper Alg. 2): prefetch a subtree of future proposals per call, then walk it."""

    def __init__(
        self,
        engine: Engine,
        config: PowerConfig,
        presto: PrestoConfig | None = None,
        planner: Planner | None = None,
        *,
        kernel: Kernel | None = None,
    ) -> None:
        super().__init__(engine, config, presto, kernel=kernel, planner=planner)


def make_sampler(
    engine: Engine,
    config: PowerConfig,
    presto: PrestoConfig,
    *,
    kernel: Kernel | None = None,
    planner: Planner | None = None,
) -> Sampler:
    """The sampler of ``presto.rule`` (``sequential``, ``bfs``, ``predictive``, ``step``) on
    ``engine``: the one way the CLI, ``power_gen``, the runner and the benchmarks build
    samplers (with :func:`presto_sgl.config.sampling_configs` for the configs)."""
    return Sampler(engine, config, presto, kernel=kernel, planner=planner)
