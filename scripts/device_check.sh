#!/usr/bin/env bash
# GPU device check (issue 25 item 6): in a few minutes on one GPU, with nothing but this
# repository (the committed tiny-adder model, presto_sgl/assets/tiny-adder; no hub, no weights
# download), check on the embedded engine on the device
#   (a) coupling: sequential PowerMH and every PreSTO rule, with the same keys, visit the same
#       states (tokens and accept/reject decisions identical, transition by transition), as
#       tests/exactness/test_coupling.py checks on the CPU, for the fixed-length target and
#       the EOS-terminated one (ending='eos': rows of a call end at different positions);
#   (b) fork batching: one call of N = 1, 4, 10, 20 forks of a state at keyed uniform cuts vs
#       its longest request alone (benchmarks/engines.py's part F);
# and print the machine (nvidia-smi -L, torch.version.cuda, CPU) with the results.
#
#   bash scripts/device_check.sh                     # on the GPU machine
#   DEVICE=cpu PROMPTS=1 SEEDS=0 bash scripts/device_check.sh   # CPU smoke test
#
# Environment:
#   DEVICE   cuda (default) or cpu
#   PYTHON   the interpreter (default python3). Used as is when it runs inside a virtual
#            environment and imports torch (e.g. PYTHON=.venv/bin/python); otherwise a venv
#            .cache/venv-device is made from it with --system-site-packages (it must import
#            torch, with CUDA for DEVICE=cuda) and presto-sgl installed there with --no-deps.
#   MODEL    the embedded model (default tiny-adder; a folder works too)
#   DTYPE    float32 (default; the coupling tolerance is float32's)
#   SEEDS    coupling seeds (default 0,1,2)    PROMPTS  fork-batching prompts (default 5)
#   TARGETS  coupling targets (default fixed,eos)
#   TORCH_THREADS  torch threads with DEVICE=cpu (default 1: the model is tiny)
#   OUT      if set, device_check.log and device_check.json are written there
#   BUDGET_S the whole run's bound in seconds (default 470): each step's `timeout` is the
#            smaller of its own limit and what is left
# Exit status: 0 all checks passed; 1 a check failed; 2 the environment is not usable.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
DEVICE="${DEVICE:-cuda}"
PY="${PYTHON:-python3}"
MODEL="${MODEL:-tiny-adder}"
DTYPE="${DTYPE:-float32}"
SEEDS="${SEEDS:-0,1,2}"
TARGETS="${TARGETS:-fixed,eos}"
PROMPTS="${PROMPTS:-5}"
RESULTS="$(mktemp -d)"
trap 'rm -rf "$RESULTS"' EXIT
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/device_check.log") 2>&1
fi
T0=$SECONDS
BUDGET_S="${BUDGET_S:-470}"
say() { echo "[device_check +$((SECONDS - T0))s] $*"; }
# cap N: N, or the seconds left of BUDGET_S if fewer (at least 1)
cap() { local left=$((BUDGET_S - (SECONDS - T0))); [ "$left" -lt "$1" ] && echo $((left > 1 ? left : 1)) || echo "$1"; }
die() { echo "device_check: $*" >&2; exit 2; }
case "$DEVICE" in cuda|cpu) ;; *) die "DEVICE must be cuda or cpu (got '$DEVICE')";; esac

# --- the machine -----------------------------------------------------------------------------
say "machine"
echo "host: $(uname -srm); CPUs: $(nproc); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //')"
echo "memory: $(free -g 2>/dev/null | awk '/^Mem:/{print $2 " GiB"}')"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 20 nvidia-smi -L || echo "nvidia-smi -L failed"
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
else
  echo "nvidia-smi: not found"
fi

# --- the Python environment ------------------------------------------------------------------
say "python environment"
command -v "$PY" >/dev/null 2>&1 || die "PYTHON=$PY not found"
NEED_CUDA=$([ "$DEVICE" = cuda ] && echo 1 || echo 0)
TORCH_OK="import sys, torch; sys.exit(0 if (not $NEED_CUDA or torch.cuda.is_available()) else 3)"
timeout "$(cap 60)" "$PY" -c "$TORCH_OK"
rc=$?
if [ $rc -ne 0 ]; then
  if [ $rc -eq 3 ]; then
    die "$PY imports torch $("$PY" -c 'import torch; print(torch.__version__)'), but torch.cuda.is_available() is False.
Fix: PYTHON=/path/to/python-with-CUDA-torch bash scripts/device_check.sh (or DEVICE=cpu for a CPU run)."
  fi
  die "$PY does not import torch. Fix: point PYTHON at an interpreter whose site-packages hold torch
(with CUDA for DEVICE=cuda), e.g. PYTHON=/opt/conda/bin/python bash scripts/device_check.sh;
or install it there: $PY -m pip install torch"
fi
IN_VENV=$("$PY" -c 'import sys; print(int(sys.prefix != sys.base_prefix))')
if [ "$IN_VENV" = 1 ]; then
  VPY="$PY"
  echo "using $PY as is (a virtual environment that imports torch)"
else
  VENV=.cache/venv-device
  if [ ! -x "$VENV/bin/python" ]; then
    timeout "$(cap 60)" "$PY" -m venv "$VENV" --system-site-packages || die "$PY -m venv $VENV --system-site-packages failed
(Debian/Ubuntu: apt-get install python3-venv; or PYTHON=a-venv-python-with-torch)"
  fi
  VPY="$VENV/bin/python"
  # presto-sgl itself, without touching the torch stack; if the build backend (setuptools >= 77)
  # is not there offline, the checkout is imported from the source tree instead.
  if timeout "$(cap 90)" "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . \
      >"$RESULTS/pip.log" 2>&1; then
    echo "presto-sgl installed (editable, --no-deps) in $VENV"
  else
    echo "pip install -e . --no-deps failed (last lines below); importing the checkout from $REPO instead"
    tail -n 3 "$RESULTS/pip.log"
  fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
MISSING=$(timeout "$(cap 60)" "$VPY" - <<'EOF'
import importlib.util
need = ["numpy", "torch", "transformers", "safetensors", "tokenizers"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$MISSING" ]; then
  echo "missing: $MISSING; trying pip (needs an index or a wheel cache)"
  # shellcheck disable=SC2086
  timeout "$(cap 120)" "$VPY" -m pip install --quiet --disable-pip-version-check ${MISSING/transformers/transformers>=4.56,<6} \
    || die "cannot install $MISSING. Fix: $VPY -m pip install numpy 'transformers>=4.56,<6' safetensors
(the embedded extra less torch), or PYTHON=an interpreter that has them"
fi
timeout "$(cap 60)" "$VPY" - <<'EOF' || die "the environment does not import presto_sgl with torch (see above)"
import platform, torch, transformers, numpy, presto_sgl
print(f"python {platform.python_version()}  torch {torch.__version__}  torch.version.cuda {torch.version.cuda}  "
      f"cuda available {torch.cuda.is_available()}  transformers {transformers.__version__}  numpy {numpy.__version__}")
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i} {p.name}  {p.total_memory / 2**30:.1f} GiB  capability {p.major}.{p.minor}")
print("presto_sgl from", presto_sgl.__file__)
EOF

export DEVICE MODEL DTYPE SEEDS TARGETS PROMPTS RESULTS
# The engine, shared by both checks: embedded_engine(MODEL, device, dtype) where the signature
# has dtype (older ones load float32 always).
cat >"$RESULTS/engine.py" <<'EOF'
import inspect
import os

from presto_sgl.models import embedded_engine


def make_engine():
    if os.environ["DEVICE"] == "cpu":
        # a tiny model: intra-op threads only contend (the tests run it on one thread too)
        import torch
        torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))
    kw = {"device": os.environ["DEVICE"]}
    if "dtype" in inspect.signature(embedded_engine).parameters:
        kw["dtype"] = os.environ["DTYPE"]
    engine = embedded_engine(os.environ["MODEL"], **kw)
    print(f"engine: {type(engine).__name__} {os.environ['MODEL']} {kw} seeded={engine.capabilities.seeded}", flush=True)
    return engine
EOF

# --- (a) coupling on the device ---------------------------------------------------------------
LIMIT=$(cap 300)
say "(a) coupling: sequential vs PreSTO, same keys, $MODEL on $DEVICE (at most ${LIMIT} s)"
timeout "$LIMIT" "$VPY" - <<'EOF'
import json, os, sys, time
sys.path.insert(0, os.environ["RESULTS"])
from engine import make_engine
from presto_sgl import Sampler, sampling_configs

engine = make_engine()
prompt = engine.text.prompt_ids("Q:47+385=", chat=False)
seeds = [int(s) for s in os.environ["SEEDS"].split(",")]
# tests/exactness/test_coupling.py's tiny-adder case: T = 16 in blocks of 8, K = 6, alpha 4,
# tau 3 (the tiny model is nearly deterministic: at tau = 1/alpha almost every proposal is
# accepted), budgets 2 and 20. EntropyCut is left out there too: its cut law depends on the
# state's values, so only a bit-exact engine couples it bit for bit.
schedule = {"alpha": 4.0, "tau": 3.0, "max_new_tokens": 16, "block_size": 8, "steps": 6}
kernels = {"powermh": {}, "multitry": {"try_temperatures": (1.5, 3.0)}}
rules = [("bfs", "path", False), ("predictive", "path", False), ("step", "step", False), ("step", "step", True)]


def run(rule, keying, budget, cost_aware, kernel, params, seed):
    cfg, presto = sampling_configs(rule, keying=keying, budget=budget, cost_aware=cost_aware,
                                   kernel=kernel, ending=target, **params, **schedule)
    seen = []
    result = Sampler(engine, cfg, presto).run(
        prompt, seed=seed, on_transition=lambda stage, k, st, tr: seen.append((stage, k, st, tr.accepted)))
    return seen, result


rows, failures, t0 = [], [], time.perf_counter()
for target, kernel in [(t, k) for t in os.environ["TARGETS"].split(",") for k in kernels]:
    params = kernels[kernel]
    for keying in ("path", "step"):
        seqs = {s: run("sequential", keying, 1, False, kernel, params, s) for s in seeds}
        for rule, rkeying, cost_aware in rules:
            if rkeying != keying:
                continue
            for budget in (2, 20):
                name = f"{target}-{kernel}-{rule}{'+cost' if cost_aware else ''}-N{budget}"
                worst, calls, seq_calls, outcomes = 0.0, 0, 0, set()
                for seed in seeds:
                    seq, seq_res = seqs[seed]
                    pre, pre_res = run(rule, keying, budget, cost_aware, kernel, params, seed)
                    outcomes |= {acc for *_, acc in seq}
                    calls += pre_res.metrics.model_calls
                    seq_calls += seq_res.metrics.model_calls
                    if len(seq) != len(pre):
                        failures.append(f"{name} seed {seed}: {len(pre)} transitions vs {len(seq)}")
                        continue
                    for (s1, k1, a, acc1), (s2, k2, b, acc2) in zip(seq, pre):
                        if (s1, k1, acc1, a.prompt, a.tokens) != (s2, k2, acc2, b.prompt, b.tokens):
                            failures.append(f"{name} seed {seed}: stage {s1} step {k1} differs "
                                            f"(accepted {acc1} vs {acc2}, tokens {a.tokens} vs {b.tokens})")
                            break
                        worst = max([worst, *(abs(x - y) for x, y in zip(a.logq + a.logp, b.logq + b.logp))])
                    if pre_res.state.tokens != seq_res.state.tokens:
                        failures.append(f"{name} seed {seed}: final tokens differ")
                if calls >= seq_calls:
                    failures.append(f"{name}: {calls} model calls, not fewer than sequential's {seq_calls}")
                rows.append({"case": name, "seeds": len(seeds), "model_calls": calls, "sequential_calls": seq_calls,
                             "both_outcomes": outcomes == {True, False}, "max_abs_logprob_diff": worst})
                print(f"  {name:34s} calls {calls:3d} vs sequential {seq_calls:3d}  accept+reject seen "
                      f"{outcomes == {True, False}}  max |dlogp| {worst:.2e}", flush=True)
                json.dump({"rows": rows, "failures": failures, "complete": False},
                          open(os.path.join(os.environ["RESULTS"], "coupling.json"), "w"))
if not any(r["both_outcomes"] for r in rows):
    failures.append("no case saw both accepted and rejected proposals (the equality would be trivial)")
loose = [r["case"] for r in rows if r["max_abs_logprob_diff"] > 1e-4]
if loose:
    print(f"  note: log-probs differ by more than 1e-4 (the CPU test's tolerance) in {loose}")
print(f"coupling: {len(rows)} cases x {len(seeds)} seeds in {time.perf_counter() - t0:.1f} s: "
      f"{'FAILED' if failures else 'identical chains'}")
for f in failures:
    print("  FAIL", f)
json.dump({"rows": rows, "failures": failures, "complete": True}, open(os.path.join(os.environ["RESULTS"], "coupling.json"), "w"))
sys.exit(1 if failures else 0)
EOF
COUPLING=$?
[ $COUPLING -eq 124 ] && echo "coupling: timed out after $LIMIT s"

# --- (b) fork batching: one call of N forks vs the longest alone --------------------------------
LIMIT=$(cap 150)
say "(b) fork batching: 1/4/10/20 forks vs one request, $MODEL on $DEVICE (at most ${LIMIT} s)"
timeout "$LIMIT" "$VPY" - <<'EOF'
import argparse, json, os, sys
sys.path.insert(0, os.environ["RESULTS"])
from engine import make_engine
from benchmarks.engines import FORKS, part_f

engine = make_engine()
n = int(os.environ["PROMPTS"])
if os.environ["MODEL"] == "tiny-adder":  # its context is 128 tokens: T = 64 after a ~10-token prompt
    prompts = [engine.text.prompt_ids(f"Q:{11 * i + 3}+{37 * i + 5}=", chat=False) for i in range(n)]
else:
    from benchmarks.compare import PROMPTS
    prompts = [engine.chat_prompt(p) for p in PROMPTS[:n]]
rows = part_f(os.environ["DEVICE"], engine, prompts, argparse.Namespace(alpha=4.0, T=64))
json.dump({"forks": list(FORKS), "T": 64, "prompts": n, "rows": rows},
          open(os.path.join(os.environ["RESULTS"], "forks.json"), "w"))
r20 = rows[-1]["vs_longest_alone"]["median"]
print(f"fork batching: a call of {FORKS[-1]} forks costs {r20:.2f}x its longest request alone (median of {n} prompts)")
EOF
FORKS_RC=$?
[ $FORKS_RC -eq 124 ] && echo "fork batching: timed out after $LIMIT s"

# --- summary -----------------------------------------------------------------------------------
say "done"
export COUPLING FORKS_RC
timeout 60 "$VPY" - <<'EOF'
import json, os, subprocess
res = os.environ["RESULTS"]
def load(name):
    try:
        return json.load(open(os.path.join(res, name)))
    except OSError:
        return None
try:
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.strip()
except (OSError, subprocess.SubprocessError):
    gpus = ""
import torch
summary = {"device": os.environ["DEVICE"], "model": os.environ["MODEL"], "dtype": os.environ["DTYPE"],
           "gpus": gpus, "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cpus": os.cpu_count(),
           "coupling_rc": int(os.environ["COUPLING"]), "forks_rc": int(os.environ["FORKS_RC"]),
           "coupling": load("coupling.json"), "fork_batching": load("forks.json")}
out = os.environ.get("OUT")
if out:
    json.dump(summary, open(os.path.join(out, "device_check.json"), "w"), indent=2)
    print("wrote", os.path.join(out, "device_check.json"), "and device_check.log")
EOF
echo "coupling: $([ $COUPLING -eq 0 ] && echo PASS || echo "FAIL (rc $COUPLING)");" \
     "fork batching: $([ $FORKS_RC -eq 0 ] && echo OK || echo "FAIL (rc $FORKS_RC)")"
[ $COUPLING -eq 0 ] && [ $FORKS_RC -eq 0 ]
