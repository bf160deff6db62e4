"""MH kernels behind one seam (:mod:`.base`); PowerMH is :mod:`.powermh`."""

from .base import Kernel, Proposal, SuffixDraw, Transition
from .powermh import PowerMHKernel, accepts, log_acceptance, mh_step

__all__ = ["Kernel", "PowerMHKernel", "Proposal", "SuffixDraw", "Transition", "accepts", "log_acceptance", "mh_step"]
