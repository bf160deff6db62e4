"""MH kernels behind one seam (:mod:`.base`): PowerMH (:mod:`.powermh`), EntropyCut
(:mod:`.entropycut`), MultiTryMH (:mod:`.multitry`), with the pieces they share (the acceptance,
the decision, one transition, the uniform cut) in :mod:`.mh`."""

from .base import Kernel, Proposal, SuffixDraw, Transition
from .entropycut import EntropyCutKernel
from .mh import accepts, log_acceptance, mh_step
from .multitry import MultiTryKernel
from .powermh import PowerMHKernel

__all__ = [
    "EntropyCutKernel",
    "Kernel",
    "MultiTryKernel",
    "PowerMHKernel",
    "Proposal",
    "SuffixDraw",
    "Transition",
    "accepts",
    "log_acceptance",
    "mh_step",
]
