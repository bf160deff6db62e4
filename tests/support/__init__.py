"""Helpers of the test suite and the benchmarks (``python -m benchmarks.NAME`` runs from the
repository root), never shipped: the library imports none of them (tests/unit/test_imports.py).

Shared with the benchmarks: :mod:`.forward` (the transformers fp32 forward engine results are
checked against), :mod:`.mutants` (deliberately wrong samplers, ``PRESTO_SGL_MUTANT``),
:mod:`.servers` (the scripts/*_server.sh servers: start, kill, restart; free ports),
:mod:`.serving` (``presto-sgl serve`` in a thread or a subprocess, an ``openai`` client),
:mod:`.wiretap` (a counting HTTP proxy), :mod:`.hub` (a Hugging Face cache standing in for the
hub: ``python -m tests.support.hub``). The rest are the tests' own (cases, coupling, exact laws,
stand-in servers, timing stubs). Importing this package imports none of them.
"""
