"""Which tier, and which test in it, catches each deliberately wrong sampler (issue 13's mutation
table, by tier since issue 38).

    python -m benchmarks.mutations [--only NAME,...] [--tiers 1,2] [--jobs N] [--json FILE]

For every mutant of ``tests/support/mutants.py`` this runs the pytest selection of tier 1 of
``scripts/test.sh`` (no servers, static checks aside) with ``PRESTO_SGL_MUTANT=NAME`` and ``-x``, and
when tier 1 does not catch it, tier 2's; it records the tier and the first test that failed, and the
seconds to it. A mutant no tier catches is a hole in the proof. Prints a Markdown table; ``--json``
keeps the rows. Tier 3 (real servers) is not run: the proof must not need it.
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

from tests.support.mutants import MUTANTS

REPO = Path(__file__).resolve().parents[1]


def tier_markers() -> dict[int, str]:
    """Tier -> its ``-m`` expression, read from scripts/test.sh (the one place they are written)."""
    text = (REPO / "scripts" / "test.sh").read_text()
    out = {}
    for n in (1, 2):
        found = re.search(rf'^TIER{n}="([^"]+)"', text, re.MULTILINE)
        if found is None:
            raise SystemExit(f"scripts/test.sh defines no TIER{n} marker expression")
        out[n] = found.group(1)
    return out


def catch(name: str, tier: int, timeout_s: float, jobs: int) -> dict[str, object]:
    """Run tier ``tier``'s tests under mutant ``name`` until the first failure."""
    env = {**os.environ, "PRESTO_SGL_MUTANT": name}
    marker = tier_markers()[tier]
    argv = [sys.executable, "-m", "pytest", "-m", marker, "-x", "-q", "-p", "no:cacheprovider", "-n", str(jobs)]
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
        "tier": tier if failed else None,
        "caught_by": failed.group(1) if failed else None,
        "rc": rc,
        "seconds": round(seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="comma-separated mutant names (default: all)")
    ap.add_argument("--tiers", default="1,2", help="the tiers to try, in order (default: 1,2)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pytest-xdist workers (default: every core)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per mutant and tier (default: 3600)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    names = list(MUTANTS) if args.only is None else args.only.split(",")
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        ap.error(f"--only: no mutants {unknown}; choose from {', '.join(MUTANTS)}")
    tiers = [int(t) for t in args.tiers.split(",")]
    if not set(tiers) <= {1, 2}:
        ap.error(f"--tiers: {args.tiers!r}; choose from 1 and 2")
    rows = []
    print("| mutant | what is wrong | tier | first test that fails | seconds in that tier |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    for name in names:
        for tier in tiers:
            row = catch(name, tier, args.timeout, args.jobs)
            if row["caught_by"]:
                break
        rows.append(row)
        verdict = (
            f"`{row['caught_by']}`"
            if row["caught_by"]
            else ("**none (timed out)**" if row["rc"] is None else "**none**")
        )
        print(f"| {name} | {row['what']} | {row['tier'] or '-'} | {verdict} | {row['seconds']} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["caught_by"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
