"""Code that runs inside the SGLang and vLLM server processes.

The servers import these modules, never the client: SGLang loads
:mod:`.sglang.plugin` (entry point ``presto_raw_logprob`` in ``sglang.srt.plugins``) in its
launcher, scheduler and detokenizer processes, and it installs :mod:`.sglang.attention`,
:mod:`.sglang.sampling` and :mod:`.sglang.profile` when their switches are set; vLLM loads
:mod:`.vllm.plugin` (``presto_onepass`` in ``vllm.general_plugins``) in every process.
These modules may import sglang, vllm and torch (inside functions: each must also import
without them).

The boundary: the client engines (:mod:`presto_sgl.engines`: HTTP clients and the
in-process engine) never import this package, and this package imports nothing of
presto-sgl's but itself and :mod:`presto_sgl.wire`, the one leaf module that holds the
wire format both sides share (key names, the vLLM logprobs layout, the score-temperature
variable). ``tests/unit/test_imports.py`` checks both directions. Nothing is imported
here: a server process loads the plugin module alone.
"""
