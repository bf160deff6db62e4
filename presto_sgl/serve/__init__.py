"""``presto-sgl serve``: power sampling behind an OpenAI-compatible HTTP endpoint.

Modules: :mod:`.fieldtable` (each request field declared once), :mod:`.schema` (a declared
schema's check), :mod:`.parse` (a request body -> a validated job, 400 naming the field),
:mod:`.openapi` (the document, from the declarations), :mod:`.tokens` (prompts to token
ids), :mod:`.service` (chains to choices), :mod:`.responses` (the OpenAI shapes),
:mod:`.prometheus` (the metrics), :mod:`.app` (the Starlette app); the pool of chains is
:mod:`presto_sgl.scheduling.pool`. Needs the ``serve`` extra
(starlette, uvicorn); docs/serve.md.
"""
