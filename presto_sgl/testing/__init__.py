"""Helpers for testing and measuring presto-sgl (like ``numpy.testing``): shared by the test
suite (tests/) and the benchmarks (``python -m benchmarks.NAME``), shipped with the package.

- :mod:`.forward`: the transformers fp32 forward that engine results are checked against;
- :mod:`.mutants`: deliberately wrong samplers (``PRESTO_SGL_MUTANT``) and the ``presto-sgl``
  argv under the session's mutant;
- :mod:`.servers`: starting, killing and restarting the project's SGLang / vLLM servers
  (scripts/*_server.sh of a repository checkout) and free ports;
- :mod:`.serving`: ``presto-sgl serve`` on a uvicorn thread or in a subprocess, and an
  ``openai`` client for it (needs the ``serve`` and ``test`` extras);
- :mod:`.wiretap`: a counting HTTP proxy, the wire's count of what a server answered.

Importing this package imports none of them; none imports torch, transformers or sglang
at import time. Helpers only the tests use stay in tests/support.
"""
