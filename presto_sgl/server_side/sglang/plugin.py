"""SGLang plugin: log p0 (and, when asked, the p0 entropy and masked log-normalizers) beside
SGLang's log q_tau, in the same pass, for the requests that ask and no other.

SGLang loads it in the launcher, scheduler and detokenizer processes through the entry point
group ``sglang.srt.plugins`` (name ``presto_raw_logprob``; restrict loading with
``SGLANG_PLUGINS=presto_raw_logprob``). It is a guest in a shared server: a request asks with
``sampling_params.custom_params[FIELDS_KEY]`` (:mod:`presto_sgl.wire`: the entropy, the score
temperatures); every other request's rows get no extra work and its answer is SGLang's own, and
a step whose batch has no asking row costs one Python check per hook and no host sync.

Where it reads the logits (SGLang 0.5.23), four hooks (:data:`HOOKS`):

- after ``ForwardBatch.init_new``: which rows of the batch asked (:class:`~..rowstats.Plan`,
  from ``batch.reqs``; a request's ask is parsed once and kept on its ``Req``);
- around ``ModelRunner.sample``: before ``_preprocess_logits`` applies, in place, the penalties,
  the grammar mask and the logit bias, ``log_softmax`` of the asking rows of the model's own
  logits (log p0);
- around ``Sampler.forward``: before the original divides by the temperature in place, which
  of the asking rows' tokens are at -inf (the grammar mask and ``min_new_tokens``' stops, so the
  normalizers are over what the draw allows, as SGLang's own log q_tau is); after the draw, the
  row statistics (:mod:`..rowstats`), moved to the host without waiting (the result processor's
  own sync covers the copy);
- around ``SchedulerBatchResultProcessor._maybe_collect_customized_info``: row i's values are
  appended to that request's ``customized_info`` only, which SGLang returns as
  ``meta_info.raw_logprob`` / ``raw_entropy`` / ``masked_lognorm@T1,...`` (one value per output
  token). ``output_token_logprobs`` stay log q_tau, so q and p0 come from the same logits row;
- around ``TokenizerManager.update_request_meta_info`` (the HTTP process): SGLang's output
  streamer pads a key that one request of a batch has with ``None`` for every other request of it,
  and the tokenizer manager would put that padding into their ``meta_info``; a presto key that a
  request never had a value for is dropped from its answer.

A hook target this SGLang lacks stops the server at start (:func:`..targets.require`), instead of
SGLang's default of logging the failure and serving without the hook. Installed into the
server's environment only; never imported by the client.
"""

from __future__ import annotations

from typing import Any

from ...wire import PRESTO_KEYS, RAW_ENTROPY_KEY, RAW_LOGPROB_KEY, lognorm_key
from ..rowstats import Ask, Fields, Plan, ask_of, fields, log_p0

PLAN = "sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new"
SAMPLE = "sglang.srt.model_executor.model_runner.ModelRunner.sample"
TARGET = "sglang.srt.layers.sampler.Sampler.forward"
COLLECT = (
    "sglang.srt.managers.scheduler_components.batch_result_processor."
    "SchedulerBatchResultProcessor._maybe_collect_customized_info"
)
META = "sglang.srt.managers.tokenizer_manager.TokenizerManager.update_request_meta_info"
_PLAN = "presto_plan"  # ForwardBatch / LogitsProcessorOutput attribute: the batch's asking rows
_RAW = "presto_raw"  # LogitsProcessorOutput attribute: (plan, log p0 of its rows) between the hooks
_FIELDS = "presto_fields"  # LogitsProcessorOutput attribute: the rows' Fields, for the collector
_ASK = "presto_ask"  # Req attribute: its parsed ask (None: did not ask)
_UNSET = object()


def register() -> None:
    """The entry point SGLang calls in each process (also registers the grammar resume hooks,
    :mod:`.grammar`, and installs the optional CPU patches their environment variables enable,
    :mod:`.cpu`; none is imported otherwise). Every target is checked first."""
    from sglang.srt.plugins.hook_registry import HookType

    from . import cpu, grammar
    from .hooks import register_all

    register_all(
        [
            (PLAN, after_init_new, HookType.AFTER),
            (SAMPLE, around_sample, HookType.AROUND),
            (TARGET, around_sampler_forward, HookType.AROUND),
            (COLLECT, around_collect, HookType.AROUND),
            (META, around_update_request_meta_info, HookType.AROUND),
        ]
    )
    grammar.register()
    cpu.install()


def ask_of_req(req: Any) -> Ask | None:
    """The request's ask, parsed once (SGLang keeps one ``Req`` per request, retracted or not)."""
    got = req.__dict__.get(_ASK, _UNSET)
    if got is _UNSET:
        got = ask_of(getattr(req.sampling_params, "custom_params", None))
        req.__dict__[_ASK] = got
    return got


def after_init_new(forward_batch: Any, cls: Any, batch: Any, *args: Any, **kwargs: Any) -> None:
    """Mark the forward batch with its asking rows (none: nothing is set)."""
    plan = Plan.of([ask_of_req(r) for r in getattr(batch, "reqs", None) or ()])
    if plan is not None:
        setattr(forward_batch, _PLAN, plan)


def around_sample(original: Any, runner: Any, logits_output: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
    """log p0 of the asking rows, before SGLang's preprocessing edits the logits in place."""
    plan: Plan | None = getattr(forward_batch, _PLAN, None)
    logits = getattr(logits_output, "next_token_logits", None)
    if plan is not None and logits is not None and logits.ndim == 2 and logits.shape[0] == plan.batch_size:
        setattr(logits_output, _RAW, (plan, log_p0(logits, plan)))
    return original(runner, logits_output, forward_batch, *args, **kwargs)


def around_sampler_forward(original: Any, sampler: Any, logits_output: Any, *args: Any, **kwargs: Any) -> Any:
    held = logits_output.__dict__.pop(_RAW, None) if hasattr(logits_output, "__dict__") else None
    if held is None:
        return original(sampler, logits_output, *args, **kwargs)
    plan, raw = held
    masked = None
    if any(a.temperatures for a in plan.asks):  # before the original divides the logits in place
        masked = plan.take(logits_output.next_token_logits).isneginf()
    next_ids = original(sampler, logits_output, *args, **kwargs)
    ids = next_ids[0] if isinstance(next_ids, tuple) else next_ids
    setattr(logits_output, _FIELDS, fields(raw, plan.take(ids), plan, masked))
    return next_ids


def around_collect(
    original: Any, processor: Any, i: int, req: Any, logits_output: Any, *args: Any, **kwargs: Any
) -> Any:
    """SGLang's own collection, then row i's values into its request's ``customized_info``
    (asking rows only: another request's answer is untouched)."""
    out = original(processor, i, req, logits_output, *args, **kwargs)
    got: Fields | None = getattr(logits_output, _FIELDS, None)
    if got is None:
        return out
    row = got.rows().get(i)
    if row is None:
        return out
    info = req.customized_info if req.customized_info is not None else {}
    info.setdefault(RAW_LOGPROB_KEY, []).append(row.logp)
    ask = ask_of_req(req)
    if ask is not None and ask.entropy:
        info.setdefault(RAW_ENTROPY_KEY, []).append(row.entropy)
    if ask is not None and ask.temperatures:
        info.setdefault(lognorm_key(ask.temperatures), []).append(list(row.lognorm))
    req.customized_info = info
    return out


def around_update_request_meta_info(
    original: Any,
    manager: Any,
    meta_info: Any,
    state: Any,
    customized_info: dict[str, Any],
    index: int,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """SGLang's own accumulation, without the ``None`` padding of presto keys that request ``index``
    of the batch never had a value for (it did not ask)."""
    reported = getattr(state, "customized_info_reported_keys", ())
    drop = [
        key
        for key, values in customized_info.items()
        if key.startswith(PRESTO_KEYS) and key not in reported and all(v is None for v in (values[index] or ()))
    ]
    if drop:
        customized_info = {k: v for k, v in customized_info.items() if k not in drop}
    return original(manager, meta_info, state, customized_info, index, *args, **kwargs)
