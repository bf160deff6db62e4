"""Inverse-CDF sampling for SGLang's CPU sampler (server side, opt-in).

SGLang 0.5.23 samples an unseeded batch without top-k/top-p/min-p by the Gumbel-max trick
(or ``torch.multinomial``): one exponential draw per vocabulary entry and row, about 30 ms
per decode step for 20 rows of a 49152-token vocabulary on 2 CPU cores -- a quarter of a
20-fork call (benchmarks/RESULTS.md, profile). Drawing one uniform per row and searching
the row's cumulative distribution (float64) samples the same categorical law exactly,
in about 2 ms.

The plugin (:mod:`.plugin`) installs :func:`sampling_from_probs` as an AROUND hook on
``sglang.srt.layers.sampler.sampling_from_probs_torch`` when ``PRESTO_SGL_CDF_SAMPLING=1``
(``scripts/sglang_server.sh start --cdf-sampling``). Seeded requests keep SGLang's own
path. Imported only in the server's processes.
"""

from __future__ import annotations

from typing import Any

TARGET = "sglang.srt.layers.sampler.sampling_from_probs_torch"


def inverse_cdf(probs: Any, uniforms: Any) -> Any:
    """Row i's token: the first index whose cumulative probability exceeds u_i times the row's
    total (zero-probability tokens are never drawn). ``probs`` [R, V], ``uniforms`` [R] in [0, 1)."""
    import torch

    cdf = probs.double().cumsum(-1)
    target = (uniforms.double() * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).clamp_(max=probs.shape[-1] - 1).view(-1)


def sampling_from_probs(original: Any, probs: Any, sampling_seed: Any = None, positions: Any = None) -> Any:
    if sampling_seed is not None or probs.ndim != 2:
        return original(probs, sampling_seed=sampling_seed, positions=positions)
    import torch

    return inverse_cdf(probs, torch.rand(probs.shape[0], device=probs.device)).to(torch.int32)


def register() -> None:
    from sglang.srt.plugins.hook_registry import HookType

    from ..hooks import register_all

    register_all([(TARGET, sampling_from_probs, HookType.AROUND)])
