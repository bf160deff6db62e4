"""docs/design.md §9 (the package map) names every module of the library: a row of its own, or
its file named in the row of its folder (``presto_sgl/planners/`` ... ``loadmodel.py``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rows(doc: str) -> list[tuple[str, str]]:
    """(path, role) of each row of §9's table."""
    section = doc[doc.index("## §9 Package map") :]
    return [(m[1], m[2]) for m in re.finditer(r"^\| `([^`]+)` \| (.*) \|$", section, re.M)]


def listed(module: str, table: list[tuple[str, str]]) -> bool:
    """``module`` (a path from the root) has a row, or its folder's row names it."""
    for path, role in table:
        if path == module:
            return True
        if path.endswith("/") and module.startswith(path):
            name = module[len(path) :]
            if re.search(r"(^|[\s(`/])" + re.escape(name) + r"\b", role):
                return True
    return False


def test_every_module_is_in_the_package_map():
    table = rows((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    modules = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / "presto_sgl").rglob("*.py"))
        if p.name != "__init__.py" or p.parent.name == "presto_sgl"
    ]
    assert len(modules) > 50 and len(table) > 20
    missing = [m for m in modules if not listed(m, table)]
    assert not missing, f"docs/design.md §9 does not list: {missing}"


def test_a_module_missing_from_the_map_is_found():
    table = [
        ("presto_sgl/planners/", "`base.py` (the protocol), `step.py`"),
        ("presto_sgl/scheduling/pool.py", "the pool"),
    ]
    assert listed("presto_sgl/planners/step.py", table) and listed("presto_sgl/scheduling/pool.py", table)
    assert not listed("presto_sgl/planners/loadmodel.py", table) and not listed("presto_sgl/execution/offers.py", table)
