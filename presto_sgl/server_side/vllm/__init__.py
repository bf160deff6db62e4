"""What runs inside a vLLM server's processes: the one-pass plugin (:mod:`.plugin`).
Nothing is imported here: vLLM's processes load the plugin module alone."""
