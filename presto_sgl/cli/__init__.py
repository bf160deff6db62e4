"""The ``presto-sgl`` command line (console script ``presto_sgl.cli:main``); see :mod:`.main`."""

from .common import PROG
from .engines import ENGINES
from .main import build_parser, main

__all__ = ["ENGINES", "PROG", "build_parser", "main"]
