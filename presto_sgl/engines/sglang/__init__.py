"""The SGLang engines: the HTTP server engine (:mod:`.http`), the in-process
``sglang.Engine`` (:mod:`.inproc`), the server monitor (:mod:`.monitor`) and the
one-pass plugin the server loads (:mod:`.plugin`). Nothing is imported here: SGLang's
processes load the plugin module alone."""
