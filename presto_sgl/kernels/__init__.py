"""MH kernels behind one seam (:mod:`.base`): PowerMH (:mod:`.powermh`), EntropyCut
(:mod:`.entropycut`), MultiTryMH (:mod:`.multitry`), with the pieces they share (the acceptance,
the decision, one transition, the uniform cut) in :mod:`.mh`. :data:`SPECS` declares them to
the registry."""

from .base import Kernel, KernelSpec, Proposal, SuffixDraw, Transition
from .entropycut import EntropyCutKernel, EntropyCutParams
from .mh import accepts, log_acceptance, mh_step
from .multitry import MultiTryKernel, MultiTryParams
from .powermh import PowerMHKernel, PowerMHParams

__all__ = [
    "SPECS",
    "EntropyCutKernel",
    "Kernel",
    "KernelSpec",
    "MultiTryKernel",
    "PowerMHKernel",
    "Proposal",
    "SuffixDraw",
    "Transition",
    "accepts",
    "log_acceptance",
    "mh_step",
]

SPECS = (
    KernelSpec("powermh", PowerMHParams, lambda alpha, tau, p: PowerMHKernel(alpha, tau), "uniform cuts"),
    KernelSpec(
        "entropycut",
        EntropyCutParams,
        lambda alpha, tau, p: EntropyCutKernel(alpha, tau, p.beta),
        "cuts where the p0 entropy rises; needs an engine with entropy",
    ),
    KernelSpec(
        "multitry",
        MultiTryParams,
        lambda alpha, tau, p: MultiTryKernel(alpha, p.try_temperatures, p.tries),
        "multiple-try Metropolis: --tries candidates per transition at temperatures drawn from --try-temperatures",
    ),
)
"""The built-in kernels, registered by :mod:`presto_sgl.registry` when it loads."""
