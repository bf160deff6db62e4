"""MH kernels behind one seam (:mod:`.base`): PowerMH (:mod:`.powermh`), EntropyCut
(:mod:`.entropycut`)."""

from .base import Kernel, Proposal, SuffixDraw, Transition
from .entropycut import EntropyCutKernel
from .powermh import PowerMHKernel, accepts, log_acceptance, mh_step

__all__ = ["EntropyCutKernel", "Kernel", "PowerMHKernel", "Proposal", "SuffixDraw", "Transition", "accepts", "log_acceptance", "mh_step"]
