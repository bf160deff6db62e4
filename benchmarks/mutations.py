"""Which exactness test catches each deliberately wrong sampler (issue 13's mutation table).

    python -m benchmarks.mutations [--only NAME,...] [--json FILE]

For every mutant of ``presto_sgl/testing/mutants.py`` this runs ``pytest -m exactness -x`` with
``PRESTO_SGL_MUTANT=NAME`` over the exactness suites (enumerated law, coupling, resume,
deep unseeded law, unit invariants, in that order), and records the first test that
fails (or that none did) and how long that took. A mutant nothing catches is a hole in the
proof. Prints a Markdown table; ``--json`` keeps the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from presto_sgl.testing.mutants import MUTANTS

REPO = Path(__file__).resolve().parents[1]

SUITES = [
    "tests/exactness/test_enumerated_target.py",
    "tests/exactness/test_coupling.py",
    "tests/exactness/test_resume.py",
    "tests/integration/test_cli_resume.py",
    "tests/exactness/test_deep_law.py",
    "tests/unit",
]
"""In the order they run: the first failure stops the run (-x)."""


def catch(name: str, timeout_s: float, suites: list[str] = SUITES) -> dict[str, object]:
    env = {**os.environ, "PRESTO_SGL_MUTANT": name}
    argv = [sys.executable, "-m", "pytest", "-m", "exactness", "-x", "-q", "-p", "no:cacheprovider", *suites]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        out, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), None
    seconds = time.perf_counter() - t0
    failed = re.search(r"^FAILED (\S+)", out, re.MULTILINE)
    return {
        "mutant": name,
        "what": MUTANTS[name][0],
        "caught_by": failed.group(1) if failed else None,
        "rc": rc,
        "seconds": round(seconds, 1),
        "suites": suites,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated mutant names (default: all)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per mutant (default: 1800)")
    ap.add_argument(
        "--suites",
        default=None,
        help="comma-separated test paths, run in this order (default: every exactness suite, law first)",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names = list(MUTANTS) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        ap.error(f"--only: no mutants {unknown}; choose from {', '.join(MUTANTS)}")
    rows = []
    print("| mutant | what is wrong | first test that fails | seconds |\n|---|---|---|---|", flush=True)
    for name in names:
        row = catch(name, args.timeout, SUITES if args.suites is None else args.suites.split(","))
        rows.append(row)
        verdict = (
            f"`{row['caught_by']}`"
            if row["caught_by"]
            else ("**none (timed out)**" if row["rc"] is None else "**none**")
        )
        print(f"| {name} | {row['what']} | {verdict} | {row['seconds']} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["caught_by"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
