"""MH kernels behind one seam (:mod:`.base`): PowerMH (:mod:`.powermh`), EntropyCut
(:mod:`.entropycut`), MultiTryMH (:mod:`.multitry`)."""

from .base import Kernel, Proposal, SuffixDraw, Transition
from .entropycut import EntropyCutKernel
from .multitry import MultiTryKernel
from .powermh import PowerMHKernel, accepts, log_acceptance, mh_step

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
