"""The vLLM engine: ``python -m vllm.entrypoints.openai.api_server`` through ``/v1/completions``
(:mod:`.http`), and the server-side one-pass plugin (:mod:`.plugin`)."""
