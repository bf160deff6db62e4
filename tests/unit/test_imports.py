"""The library's shape: every module imports (without optional heavy dependencies), the
intra-project import graph is acyclic, and no library file outgrows the size limit.

The graph is read from the source (AST), not from ``sys.modules``: every ``import`` and
``from ... import`` anywhere in a file counts -- inside functions and under
``if TYPE_CHECKING:`` too -- so a lazy import that would close a cycle is caught as well.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("presto_sgl", "radix")

MAX_LINES = 600
"""A generous bound on a library file as ruff formats it (``ruff format --check`` runs in tier 1, so
lines cannot be packed to fit): a module past it holds more than one idea. Line shape is the
formatter's job, not this test's."""
OVERSIZED: dict[str, str] = {}
"""Library files allowed past MAX_LINES, {path relative to the repository: reason}."""


def module_files() -> dict[str, Path]:
    """Module name -> source file of every module of the library packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        base = ROOT / package
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def walked_modules() -> list[str]:
    """The modules ``pkgutil`` finds under the packages (the packages included)."""
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.append(package)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
    return names


def imported_modules(name: str, path: Path, modules: set[str]) -> set[str]:
    """Project modules that ``name`` (source ``path``) imports, anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def project(target: str) -> str | None:
        """``target`` or its longest prefix that is a project module."""
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (found := project(alias.name)) is not None:
                    out.add(found)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    raise AssertionError(f"{path}: relative import beyond the top-level package")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:  # `from pkg import module`
                    out.add(f"{target}.{alias.name}")
                elif (found := project(target)) is not None:
                    out.add(found)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    modules = set(files)
    return {name: imported_modules(name, path, modules) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (iterative DFS, sorted order)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                state[node] = 2
                stack.pop()
                continue
            nxt = todo.pop(0)
            if state.get(nxt) == 1:
                path = [n for n, _ in stack]
                return path[path.index(nxt) :] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, sorted(graph.get(nxt, ()))))
    return None


def test_pkgutil_finds_every_source_file():
    assert set(walked_modules()) == set(module_files())


@pytest.mark.parametrize("name", sorted(m for m in module_files() if not m.endswith(".__main__")))
def test_every_module_imports(name):
    """Every module imports without its optional dependencies (sglang is imported inside
    the plugin's ``register`` and ``power_gen`` only). ``__main__`` modules run the command
    line on import; tests/integration/test_cli.py runs them."""
    importlib.import_module(name)


def fresh(code: str) -> str:
    """The stdout of ``code`` run in a fresh interpreter (which must succeed)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


UNITS = sorted(
    {".".join(m.split(".")[:2]) for m in module_files() if m.startswith("presto_sgl.")} - {"presto_sgl.__main__"}
)


@pytest.mark.parametrize("unit", UNITS)
def test_each_unit_imports_first_and_then_sees_every_builtin(unit):
    """Imported first in a fresh interpreter, each unit loads (no import-order cycle), and the
    registry's tables then hold every built-in: the rules and baselines load on first read."""
    out = fresh(f"import {unit}; from presto_sgl import registry; print(list(registry.RULES), registry.methods())")
    rules, methods = out.strip().split("] (")
    assert rules == "['sequential', 'bfs', 'predictive', 'step'"
    assert methods == "'powermh', 'entropycut', 'multitry', 'lowtemp', 'bestofn', 'powersmc')"


def test_optional_heavy_dependencies_are_imported_lazily():
    """The package, its planners and predictor, the plugin and the frontend import without
    loading sglang (optional) or scikit-learn (fitting only), in a fresh interpreter."""
    code = (
        "import sys, presto_sgl, presto_sgl.planners, presto_sgl.predictor, presto_sgl.server_side.sglang.plugin, "
        "presto_sgl.server_side.vllm.plugin, presto_sgl.program.frontend, presto_sgl.cli; "
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'sglang', 'sklearn', 'vllm'}); "
        "assert not loaded, f'imported at import time: {loaded}'"
    )
    fresh(code)


PLUGIN_MODULES = 10
"""The most presto_sgl modules importing a server plugin may load: it runs inside the user's
SGLang scheduler / vLLM worker processes, so it loads the wire format, the row statistics and the
target check (``server_side.rowstats``, ``server_side.targets``; vLLM's generator rewind), not the library."""


@pytest.mark.parametrize("plugin", ["presto_sgl.server_side.sglang.plugin", "presto_sgl.server_side.vllm.plugin"])
def test_a_server_plugin_loads_only_what_it_uses(plugin):
    """In a fresh interpreter: the package root is lazy (PEP 562), so the plugin loads the
    root, its own package, the wire format and the version, nothing of the library."""
    code = (
        f"import sys, {plugin}; "
        "print(sorted(m for m in sys.modules if m == 'presto_sgl' or m.startswith('presto_sgl.')))"
    )
    loaded = ast.literal_eval(fresh(code).strip())
    assert plugin in loaded and "presto_sgl.wire" in loaded
    assert len(loaded) <= PLUGIN_MODULES, f"importing {plugin} loads {len(loaded)} presto_sgl modules: {loaded}"


def test_the_package_root_is_lazy_and_complete():
    """``import presto_sgl`` loads only the version; each public name imports its module on
    first read, and every name of ``__all__`` resolves."""
    code = (
        "import sys, presto_sgl; "
        "before = sorted(m for m in sys.modules if m.startswith('presto_sgl')); "
        "names = {n: getattr(presto_sgl, n) for n in presto_sgl.__all__}; "
        "print(before, len(names), presto_sgl.Sampler.__module__)"
    )
    import presto_sgl

    names = str(len(presto_sgl.__all__))
    assert fresh(code).split() == ["['presto_sgl',", "'presto_sgl.version']", names, "presto_sgl.samplers"]

    with pytest.raises(AttributeError, match="no attribute 'PowerMH'"):
        presto_sgl.PowerMH  # noqa: B018


SERVER_SIDE = "presto_sgl.server_side"
WIRE = "presto_sgl.wire"


def test_server_side_boundary():
    """Code run inside the SGLang / vLLM servers (``presto_sgl.server_side``) and the rest of
    the library meet only in ``presto_sgl.wire`` (the shared wire format, a leaf): no module
    outside the server-side package imports it, and it imports nothing of the project but
    itself and the wire module (anywhere in a file, lazy imports included)."""
    graph = import_graph()
    assert any(m.startswith(SERVER_SIDE + ".") for m in graph), "no server-side modules found"
    inside = {m for m in graph if m == SERVER_SIDE or m.startswith(SERVER_SIDE + ".")}
    into = {m: sorted(graph[m] & inside) for m in sorted(set(graph) - inside) if graph[m] & inside}
    assert not into, f"modules outside {SERVER_SIDE} import it: {into}"
    out = {m: sorted(graph[m] - inside - {WIRE}) for m in sorted(inside) if graph[m] - inside - {WIRE}}
    assert not out, f"server-side modules import the library beyond {WIRE}: {out}"
    assert graph[WIRE] == set(), f"{WIRE} must stay a leaf: {sorted(graph[WIRE])}"


def test_the_library_imports_no_dev_tooling():
    """The wheel ships ``presto_sgl`` and ``radix`` only (``pyproject.toml``), so no library module
    imports the test or benchmark helpers (``tests``, ``benchmarks``), anywhere in a file."""
    found = []
    for name, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [f"{name}: {t}" for t in targets if t.split(".")[0] in ("tests", "benchmarks")]
    assert not found, f"library modules import dev tooling: {found}"
    assert 'include = ["presto_sgl*", "radix*"]' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_graph_reads_relative_lazy_and_type_checking_imports():
    """Guard for the parser itself, on modules whose imports are known."""
    graph = import_graph()
    assert "presto_sgl.planners" in graph["presto_sgl.execution.executor"]  # `from .planners import Planner, ...`
    assert "presto_sgl.planners.base" not in graph["presto_sgl.execution.executor"]  # (names, not modules)
    assert "presto_sgl.chain.keys" in graph["presto_sgl.kernels.base"]  # `from ..keys import` (level 2)
    assert "presto_sgl.predictor" in graph["presto_sgl.samplers"]  # lazy, inside make_planner
    assert any(m == "presto_sgl.cli" or m.startswith("presto_sgl.cli.") for m in graph["presto_sgl.__main__"])
    assert "radix.tree" in graph["radix"]
    assert "radix" in graph["presto_sgl.engines.embedded"]  # absolute import of another top-level package


def test_graph_parser_on_a_synthetic_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n"
        "def f():\n    from . import c\n    import pkg.sub.b as bb\n"
    )
    (pkg / "c.py").write_text("from .sub.b import name\nfrom pkg import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import c\nfrom ..a import f\nimport os\n")
    modules = {"pkg", "pkg.a", "pkg.c", "pkg.sub", "pkg.sub.b"}
    files = {
        "pkg": pkg / "__init__.py",
        "pkg.a": pkg / "a.py",
        "pkg.c": pkg / "c.py",
        "pkg.sub": pkg / "sub" / "__init__.py",
        "pkg.sub.b": pkg / "sub" / "b.py",
    }
    graph = {n: imported_modules(n, p, modules) for n, p in files.items()}
    assert graph == {
        "pkg": {"pkg.a"},
        "pkg.a": {"pkg.sub.b", "pkg.c"},
        "pkg.c": {"pkg.sub.b", "pkg.a"},
        "pkg.sub": set(),
        "pkg.sub.b": {"pkg.c", "pkg.a"},
    }
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) >= 3
    assert all(b in graph[a] for a, b in itertools.pairwise(cycle))
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": set()}) is None


def test_import_graph_is_acyclic():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_library_files_stay_small():
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in module_files().values()
    }
    stale = sorted(set(OVERSIZED) - set(sizes))
    assert not stale, f"OVERSIZED names files that do not exist: {stale}"
    over = {p: n for p, n in sorted(sizes.items()) if n > MAX_LINES and p not in OVERSIZED}
    assert not over, f"library files over {MAX_LINES} lines (split them, or allow-list with a reason): {over}"


MAX_POSITIONAL = 4
"""The most parameters a library constructor takes by position: past them, keywords only."""


def positional_capacity(cls: ast.ClassDef) -> tuple[int, list[str]] | None:
    """(how many arguments ``cls`` takes by position, their names), from its ``__init__`` or
    its dataclass fields (up to a ``KW_ONLY`` marker or ``kw_only=True``); None if neither."""
    init = next((b for b in cls.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
    if init is not None:
        names = [a.arg for a in (*init.args.posonlyargs, *init.args.args)][1:]
        return len(names), names
    dataclass_decorators = [
        d
        for d in cls.decorator_list
        if (isinstance(d, ast.Call) and getattr(d.func, "id", None) == "dataclass")
        or getattr(d, "id", None) == "dataclass"
    ]
    if not dataclass_decorators:
        return None
    flags = {k.arg: k.value for d in dataclass_decorators if isinstance(d, ast.Call) for k in d.keywords}
    if any(getattr(flags.get(k), "value", None) is v for k, v in (("kw_only", True), ("init", False))):
        return 0, []
    names = []
    for b in cls.body:
        if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
            if ast.unparse(b.annotation) == "KW_ONLY":
                break
            if not ast.unparse(b.annotation).startswith("ClassVar"):
                names.append(b.target.id)
    return len(names), names


def test_constructors_take_at_most_four_arguments_by_position():
    """Every class of the library takes at most MAX_POSITIONAL arguments by position (its
    ``__init__``'s, or a dataclass's fields before ``KW_ONLY``): the rest by keyword."""
    over = []
    for name, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (found := positional_capacity(node)) and found[0] > MAX_POSITIONAL:
                over.append(f"{name}.{node.name}: {found[1]}")
    assert not over, f"constructors taking more than {MAX_POSITIONAL} arguments by position: {over}"


def test_positional_capacity_reads_inits_and_dataclasses():
    tree = ast.parse(
        "from dataclasses import KW_ONLY, dataclass\n"
        "class A:\n    def __init__(self, a, b, *, c): ...\n"
        "@dataclass\nclass B:\n    a: int\n    b: int\n    _: KW_ONLY\n    c: int\n"
        "@dataclass(frozen=True, kw_only=True)\nclass C:\n    a: int\n"
        "class D: ...\n"
    )
    classes = {c.name: positional_capacity(c) for c in tree.body if isinstance(c, ast.ClassDef)}
    assert classes == {"A": (2, ["a", "b"]), "B": (2, ["a", "b"]), "C": (0, []), "D": None}
