"""The SGLang client engines: the HTTP server engine (:mod:`.http`, with :mod:`.transport`
and :mod:`.lognorm`) and the in-process ``sglang.Engine`` (:mod:`.inproc`). What runs
inside the server's processes is in :mod:`presto_sgl.server_side.sglang`."""
