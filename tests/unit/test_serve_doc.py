"""docs/serve.md's request-field table is the request model's: every field the server takes,
with its endpoints and what it does, as presto_sgl/serve/fieldtable.py declares them."""

from __future__ import annotations

from presto_sgl.serve.fieldtable import fields, request_fields
from tests.support.docs import SERVE_MD, with_table


def test_the_field_table_is_generated_from_the_declarations():
    text = SERVE_MD.read_text()
    assert text == with_table(text), "docs/serve.md's field table is stale: run `python -m tests.support.docs`"


def test_every_accepted_field_has_a_row():
    text = SERVE_MD.read_text()
    for kind in ("completions", "chat"):
        for name in fields(kind):
            assert f"`{name}`" in text, name
        assert all(f.doc for f in request_fields(kind))
