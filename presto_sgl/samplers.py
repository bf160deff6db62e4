"""The sampler: the block schedule around one executor that runs any MH kernel.

Stage l extends the state by B tokens from q_tau (no EOS stop), then runs K MH
transitions targeting p0(x_{1:lB})^alpha. Under the EOS-terminated target (``ending="eos"``)
the extension and every proposal end at the model's first stop token, a state that has
ended is not extended, and stage l targets p0(x)^alpha over responses that end by lB
(docs/design.md §2.1). The transitions run in rounds: the planner
picks decisions whose draws one batched model call fetches, the walker takes the MH
path through them. Sequential PowerMH (paper Alg. 1) is the planner that picks the next
decision only; PreSTO (Alg. 2) is every other planner. With the same keys every rule
visits exactly the same states (paper Prop. 1; docs/design.md §4).
"""

from __future__ import annotations

from .chain.keys import ChainKeys
from .chain.state import ChainState
from .config import PowerConfig, PrestoConfig, check_keying
from .engines.base import Engine, Request
from .errors import CapabilityError, ConfigError
from .execution.executor import OnTransition, Recorder, StageExecutor
from .execution.resume import Checkpoint
from .kernels.base import Kernel
from .methods import MethodBase, SampleResult, extend
from .planners import BudgetPolicy, CallTimeModel, CostAware, Planner, RatePolicy, RolloutPolicy
from .predictor.certainty import Predictor
from .registry import RULES, make_kernel

__all__ = ["SampleResult", "Sampler", "make_planner"]


def make_planner(
    presto: PrestoConfig, *, predictor: Predictor | None = None, time_model: CallTimeModel | None = None
) -> Planner:
    """The planner of ``presto``: its rule (:mod:`presto_sgl.registry`) with a fixed budget, or
    with ``cost_aware`` a :class:`~presto_sgl.planners.CostAware` one: a rollout where the rule's
    proposals carry over, else the best rate. ``predictor`` (default: the config's, loaded) is
    shared by the rule and the policy (a rule that needs none with a fixed budget gets none);
    ``time_model`` (default: a fresh one) is the policy's."""
    from .predictor import load_predictor

    spec = RULES[presto.rule]
    if not (presto.cost_aware or spec.predicts):
        return spec.planner(None)
    if predictor is None:
        predictor = load_predictor(presto.predictor, online=presto.online)
    rule = spec.planner(predictor)
    if not presto.cost_aware:
        return rule
    policy: BudgetPolicy = RolloutPolicy(predictor, time_model) if rule.carries_over else RatePolicy(time_model)
    return CostAware(rule, policy, predictor)


class Sampler(MethodBase):
    """Power sampling by MH suffix resampling: ``kernel`` (default from ``config``) run by
    the planner of ``presto.rule`` (default: PreSTO's step rule), or by ``planner`` when
    given (an object shared by every run of this sampler; see :mod:`presto_sgl.planners`).

    One sampler may run many chains at once (threads): each run gets its own planner
    state (:meth:`Planner.for_run`); what planners learn is shared on purpose.
    """

    planner: Planner

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
        target = config.target
        self.max_new_tokens = target.max_new_tokens
        self.transitions_per_run = config.kernel.steps * target.num_stages
        self.stop: tuple[int, ...] = self._stop_ids() if target.ends else ()  # the EOS-terminated target's
        if not target.ends and self.kernel.ends:
            raise ConfigError(
                "ending", target.ending, f"the injected {self.kernel.name} kernel has ends=True; use {{ending='eos'}}"
            )
        if planner is not None:  # the rule's keys were checked by PrestoConfig; an injected planner's here
            check_keying(planner.keying, presto.keying, type(planner).__name__)
        self._check_scores()

    def _stop_ids(self) -> tuple[int, ...]:
        """The EOS-terminated target's stop tokens (the model's), or why this kernel and engine
        cannot sample it (or its constraint)."""
        target, engine = self.config.target, self.engine
        if not self.kernel.ends:
            raise ConfigError(
                "ending",
                target.ending,
                f"the injected {self.kernel.name} kernel samples fixed-length "
                "responses; build it with ends=True for {ending='eos'}",
            )
        if not engine.capabilities.stops:
            raise CapabilityError(
                "ending='eos' needs an engine that ends requests at stop tokens; this one cannot "
                "(use the embedded, reference, SGLang or vLLM engine, or ending='fixed')"
            )
        stop = tuple(sorted(set(engine.text.stop_ids)))
        if not stop:
            raise CapabilityError(
                "ending='eos' needs the model's stop tokens, and this engine's model has none "
                "(no EOS id in its tokenizer or generation config); use ending='fixed'"
            )
        if target.constraint is not None and not engine.capabilities.constraints:
            raise CapabilityError(
                f"the constraint {target.constraint.describe()} needs an engine that masks its draws by a grammar "
                "resumed at the kept prefix; this one cannot (use the embedded or reference engine, or an SGLang "
                "server with presto-sgl's plugin)"
            )
        return stop

    def _check_scores(self) -> None:
        """The engine returns what the kernel reads beside log q and log p0 (entropy, log q at
        other temperatures), or a CapabilityError naming it."""
        caps = self.engine.capabilities
        if self.kernel.needs_entropy and not caps.entropy:
            raise CapabilityError(
                f"the {self.kernel.name} kernel needs per-token entropy, which this engine cannot return; "
                "use an engine with entropy (embedded, reference, SGLang one-pass)"
            )
        temps = self.kernel.score_temperatures
        if temps and not caps.scores_at(temps):
            raise CapabilityError(
                f"the {self.kernel.name} kernel needs log q at temperatures {list(temps)}, which this engine cannot "
                f"return (it scores at {list(caps.score_temperatures or [])}); use the embedded or reference engine, "
                "or an SGLang / vLLM server with presto-sgl's plugin (one-pass mode)"
            )

    def ended(self, state: ChainState) -> bool:
        """The state's response has ended at a stop token (EOS-terminated target only)."""
        return bool(self.stop) and state.length > 0 and state.tokens[-1] in self.stop

    @property
    def name(self) -> str:
        """The method: the kernel's name."""
        return self.kernel.name

    def describe(self) -> dict[str, object]:
        """The run's config: method (the kernel), rule, the schedule and the kernel's parameters,
        and for a PreSTO rule its PrestoConfig (tuples as lists, as JSON keeps them)."""
        return {**self.config.describe(), **self.presto.describe()}

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
        """The chain: each stage's block extension, then its K transitions (PreSTO's rounds or
        sequential PowerMH); from ``resume``, the checkpoint's stage, path and state."""
        keys = ChainKeys(seed, prompt_id)
        target, steps = self.config.target, self.config.kernel.steps
        planner = self.planner.for_run()
        entropy, temps = self.kernel.needs_entropy, self.kernel.score_temperatures
        state = ChainState(prompt, entropy=() if entropy else None, logq_at=() if temps else None)
        start, path, k = 0, "", 0
        if resume is not None:
            rec.calls, rec.nodes = list(resume.calls), list(resume.nodes)
            start, path, k = resume.stage, resume.path, resume.k
            state = resume.state if resume.state is not None else state
        for stage in range(max(start, 1), target.num_stages + 1):
            if stage > start:
                state = self.extension(rec, keys, stage, state)
                path, k = "", 0
                rec.record_state(stage, k, path, state)
            state = StageExecutor(
                self.kernel,
                stage * target.block,
                steps,
                budget=self.presto.budget,
                keying=self.presto.keying,
                planner=planner,
                stage=stage,
                keys=keys,
                rec=rec,
                on_transition=on_transition,
                stop=self.stop,
                constraint=target.constraint,
            ).run(state, path, k)
        return state

    def extension(self, rec: Recorder, keys: ChainKeys, stage: int, state: ChainState) -> ChainState:
        """Stage ``stage``'s block extension: B more tokens from q_tau (none once the response ended)."""
        L, target = state.length, self.config.target
        if self.ended(state):
            return state
        req = Request(
            state.context(L),
            target.block,
            self.config.temperature,
            keys.extension_seed(stage),
            return_entropy=self.kernel.needs_entropy,
            score_temperatures=self.kernel.score_temperatures,
            route=keys.route,
            stop=self.stop,
            constraint=target.constraint,
            resume=L,
        )
        (comp,) = extend(rec, stage, L, [req])
        return state.replace_suffix(L, comp.tokens, comp.logq, comp.logp, comp.entropy, comp.logq_at)
