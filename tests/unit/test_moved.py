"""The modules that moved into subpackages (presto_sgl/moved.py): every old name still imports,
as the new module itself, and says where it went."""

from __future__ import annotations

import subprocess
import sys

import pytest

from presto_sgl.moved import MOVED
from tests.unit.test_imports import module_files


def test_every_old_name_points_at_a_module_that_exists_and_no_longer_at_its_old_place():
    modules = set(module_files())
    assert set(MOVED.values()) <= modules
    assert not set(MOVED) & modules


@pytest.mark.parametrize("old", ["presto_sgl.frontend", "presto_sgl.samplers", "presto_sgl.serve.metrics"])
def test_an_old_name_is_the_new_module_with_a_deprecation(old):
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        "print([str(w.message) for w in seen if w.category is DeprecationWarning])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"{old} moved to {MOVED[old]}" in out
