"""Library code calls what a protocol declares (issue 39: a kernel's ``ends``, a planner's ``offer``
and ``time_model``, a method's ``planner``, an engine's ``check`` and ``inner``, a task's ``errors``
were found by ``getattr``/``hasattr``). No probe, by name, of a member a library protocol
declares, and none at all on an object that a protocol types (a kernel, planner, engine, method,
sampler, scheduler, task or predictor, by the name it goes by): what a caller needs is declared
and every implementation has it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "presto_sgl"
TYPED = {"kernel", "planner", "engine", "inner", "method", "sampler", "scheduler", "task", "predictor"}
"""The names protocol-typed objects go by in the library (``self.kernel``, ``engine``, ...)."""


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(isinstance(b, (ast.Name, ast.Attribute)) and ast.unparse(b).endswith("Protocol") for b in node.bases)


def _protocol_members(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Each library protocol's declared members (methods, properties, annotated attributes)."""
    out: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and _is_protocol(node):
                names = set()
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                out[node.name] = {n for n in names if not n.startswith("__")}
    return out


def _probes(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, the object's name, the attribute) of every getattr/hasattr with a literal attribute."""
    return [
        (node.lineno, ast.unparse(node.args[0]).rsplit(".", 1)[-1], node.args[1].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ]


def test_the_protocols_are_found():
    members = _protocol_members(_trees())
    assert {"Kernel", "Planner", "Engine", "Method", "Task"} <= set(members)
    assert {"ends", "prefetch_cut"} <= members["Kernel"] and {"offer", "time_model"} <= members["Planner"]
    assert "planner" in members["Method"] and "errors" in members["Task"]


def test_no_library_code_probes_a_protocol():
    trees = _trees()
    declared = {name for names in _protocol_members(trees).values() for name in names}
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {obj}.{name}"
        for path, tree in trees.items()
        for line, obj, name in _probes(tree)
        if name in declared or obj in TYPED
    ]
    assert not found, "probes of protocol members (declare the member, then call it):\n" + "\n".join(found)


def test_the_probe_finder_finds_probes():
    tree = ast.parse('x = getattr(self.kernel, "ends", False)\nif hasattr(planner, "offer"):\n    pass\n')
    assert _probes(tree) == [(1, "kernel", "ends"), (2, "planner", "offer")]
