"""The vLLM engine: ``python -m vllm.entrypoints.openai.api_server`` through ``/v1/completions``
(:mod:`.http`, reading the plugin's fields with :mod:`.layout`). The server-side one-pass
plugin is :mod:`presto_sgl.server_side.vllm.plugin`."""
