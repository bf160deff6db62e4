"""docs/serve.md's request-field table, written from the request model's declarations.

``python -m tests.support.docs`` rewrites the table between its markers (after a change to a
field in presto_sgl/serve/fieldtable.py or to a library parameter); tests/unit/test_serve_doc.py
fails while the file differs from what this writes.
"""

from __future__ import annotations

import pathlib

from presto_sgl.serve.fieldtable import field_table

SERVE_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "serve.md"
BEGIN = (
    "<!-- request fields: generated from presto_sgl/serve/fieldtable.py (python -m tests.support.docs writes it) -->\n"
)
END = "<!-- end of request fields -->\n"


def with_table(text: str) -> str:
    """``text`` (docs/serve.md) with the table between the markers written afresh."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + field_table() + "\n" + END + tail


if __name__ == "__main__":
    SERVE_MD.write_text(with_table(SERVE_MD.read_text()))
    print(f"wrote the request-field table of {SERVE_MD}")
