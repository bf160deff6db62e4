"""SGLang plugin: one-pass log p0 and p0 entropy beside SGLang's log q_tau.

SGLang loads it in the launcher, scheduler and detokenizer processes through the entry
point group ``sglang.srt.plugins`` (name ``presto_raw_logprob``; restrict loading with
``SGLANG_PLUGINS=presto_raw_logprob``). Where it reads the logits: SGLang 0.5.23's
``ModelRunner.sample`` first calls ``ModelRunner._preprocess_logits``, which applies, in
place, the penalties (repetition, frequency, presence, min-new-tokens: the penalizer
orchestrator), the grammar mask and the logit bias (``SamplingBatchInfo.apply_logits_bias``);
then ``Sampler.forward`` applies custom logit processors, divides by the temperature and
draws. An AROUND hook on ``_preprocess_logits`` takes ``log_softmax(logits.float())`` of the
model's own logits before any of that (:data:`PREPROCESS`); the hook on ``Sampler.forward``
(:data:`TARGET`) uses it (or the logits it receives, when no preprocessing ran) for the
entropy, and after sampling records the raw
log-probability of each sampled token in ``logits_output.customized_info``, which SGLang
returns as ``meta_info.raw_logprob`` / ``meta_info.raw_entropy`` (one value per output
token). ``output_token_logprobs`` stay log q_tau, so q and p0 come from the same logits
row. Installed into the server's environment only; never imported by the client (the
key names are :mod:`presto_sgl.wire`'s).

For MultiTryMH's temperature mixture it also records, per output token, the log-normalizers
Z_t = log sum_{u allowed} p0(u)^(1/t) at each score temperature t (env
``PRESTO_SGL_SCORE_TEMPERATURES``, default ``0.25,0.5,1.0``; empty: none), under the key
``masked_lognorm@T1,T2,...`` that names the set: the client then has
log q_t(token) = log p0(token) / t - Z_t from the same row. "Allowed" is the row's own mask as
``Sampler.forward`` receives it (the -inf entries ``_preprocess_logits`` wrote: the grammar
mask and ``min_new_tokens``' stop tokens; every token for an unconstrained row), so under a
constraint q_t is masked and renormalized exactly as the draw's own q_tau is.
"""

from __future__ import annotations

from typing import Any

from ...wire import LOGNORM_KEY, RAW_ENTROPY_KEY, RAW_LOGPROB_KEY
from ..temperatures import score_temperatures

TARGET = "sglang.srt.layers.sampler.Sampler.forward"
PREPROCESS = "sglang.srt.model_executor.model_runner.ModelRunner._preprocess_logits"
_RAW = "presto_raw_log_softmax"  # the attribute of the LogitsProcessorOutput that carries it between the hooks


def register() -> None:
    """The entry point SGLang calls in each process (also registers the grammar resume hooks,
    :mod:`.grammar`, and installs the optional CPU patches their environment variables enable,
    :mod:`.cpu`; none is imported otherwise)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from . import cpu, grammar

    HookRegistry.register(PREPROCESS, around_preprocess_logits, HookType.AROUND)
    HookRegistry.register(TARGET, around_sampler_forward, HookType.AROUND)
    grammar.register()
    cpu.install()


def around_preprocess_logits(original: Any, runner: Any, logits_output: Any, *args: Any, **kwargs: Any) -> Any:
    """log p0 of the rows before penalties, grammar masks and logit biases change them in place."""
    import torch

    logits = getattr(logits_output, "next_token_logits", None)
    if logits is not None and logits.ndim == 2 and logits.shape[0] > 0:
        setattr(logits_output, _RAW, torch.log_softmax(logits.float(), dim=-1))
    return original(runner, logits_output, *args, **kwargs)


def around_sampler_forward(original: Any, sampler: Any, logits_output: Any, *args: Any, **kwargs: Any) -> Any:
    import torch

    logits = getattr(logits_output, "next_token_logits", None)
    raw = logits_output.__dict__.pop(_RAW, None) if hasattr(logits_output, "__dict__") else None
    if logits is None or logits.ndim != 2 or logits.shape[0] == 0:
        return original(sampler, logits_output, *args, **kwargs)
    if raw is None or raw.shape != logits.shape:
        raw = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(raw.exp() * raw).sum(-1)
    temps = score_temperatures()
    if temps:  # before the original divides the logits by the temperature in place
        masked = torch.isneginf(logits)
        allowed = raw.masked_fill(masked, float("-inf")) if bool(masked.any()) else raw
        lognorm = torch.stack([torch.logsumexp(allowed / t, dim=-1) for t in temps], dim=-1)
    next_ids = original(sampler, logits_output, *args, **kwargs)
    ids = next_ids[0] if isinstance(next_ids, tuple) else next_ids
    chosen = raw.gather(1, ids.view(-1, 1).long().to(raw.device)).view(-1)
    info = dict(logits_output.customized_info or {})
    info[RAW_LOGPROB_KEY] = chosen.tolist()
    info[RAW_ENTROPY_KEY] = entropy.tolist()
    if temps:
        info[LOGNORM_KEY + ",".join(repr(t) for t in temps)] = lognorm.tolist()
    logits_output.customized_info = info
    return next_ids
