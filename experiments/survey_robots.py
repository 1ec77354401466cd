"""Load every URDF of the example-robot-data package in diffmb and Pinocchio and compare
the mass matrix, inverse and forward dynamics at random states, fixed and floating base.

Prints a table (robot, base, nv, status, worst difference) and writes out/survey_robots.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from robots import compare, robot_urdfs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", help="robot names (file stems) to survey")
    ap.add_argument("--json", default="out/survey_robots.json")
    args = ap.parse_args(argv)
    rows = []
    for path in robot_urdfs():
        if args.only and path.stem not in args.only:
            continue
        for floating in (False, True):
            t = time.perf_counter()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                r = compare(path, floating)
            r.update(robot=path.stem, base="floating" if floating else "fixed",
                     seconds=time.perf_counter() - t, warnings=len(w))
            rows.append(r)
            print(f"{path.stem:40s} {r['base']:8s} nv {r.get('nv', '-')!s:>3} {r['status']:10s} "
                  f"{r.get('worst', float('nan')):9.2e} {r['seconds']:5.1f}s  {r.get('why', '')[:90]}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("summary:", counts)


if __name__ == "__main__":
    main()
