"""``presto-sgl serve``: power sampling behind an OpenAI-compatible HTTP endpoint.

Modules: :mod:`.params` (a request body -> a validated job, 400 naming the field),
:mod:`.pool` (the bounded pool of chains, their cancellation tickets and the guarded
backend), :mod:`.service` (prompts to token ids, chains to choices), :mod:`.responses`
(the OpenAI shapes), :mod:`.app` (the Starlette app). Needs the ``serve`` extra
(starlette, uvicorn); docs/serve.md.
"""
