"""Large crease patterns (150-200 panels) as a user runs them: a FOLD file in, ``diffmb run``.

For each case the pattern is written as a FOLD file, then timed the way a user meets it:
loading and building in this process (the build includes the closure analysis and the
mobility probe), and ``diffmb run FILE --t1 T`` in a fresh process (its JSON gives the
compile time, the simulation wall time and the steps; its progress bar and estimate after
the first segment are on stderr). Targets (issue 56): build <= 5 s, 1 s of simulation
<= 60 s on the 2-core CPU. Median of ``--repeat`` builds; one run per case (a run is the
minute being measured). JSON to ``out/bench_large_pattern.json``.

    python experiments/bench_large_pattern.py [--t1 1] [--cases miura-12x13,map-12x13,miura-14x14]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import platform

from diffmb.formats.fold import load_fold, to_fold
from diffmb.origami import build
from diffmb.origami.generators import map_fold, miura
from machine import cpu_pressure

CASES = {
    "miura-12x13": lambda: miura(12, 13, fold=1.0),
    "map-12x13": lambda: map_fold(12, 13),
    "miura-14x14": lambda: miura(14, 14, fold=1.0),
}


def time_build(path: str, repeat: int) -> dict:
    loads, builds = [], []
    for _ in range(repeat):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            pattern = load_fold(path)
            loads.append(time.perf_counter() - t)
            t = time.perf_counter()
            _, info = build(pattern)
            builds.append(time.perf_counter() - t)
    return {"panels": len(pattern.panels), "creases": len(pattern.creases), "cut": info.n_p,
            "load_s": statistics.median(loads), "build_s": statistics.median(builds),
            "build_first_s": builds[0], "mobility": str(info.mobility)}


def time_run(path: str, t1: float, out: str) -> dict:
    js = os.path.join(out, os.path.basename(path) + ".json")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "diffmb", "run", path, "--t1", str(t1), "--no-plot",
                           "--out", out, "--json", js], capture_output=True, text=True)
    total = time.perf_counter() - t
    if proc.returncode not in (0, 1) or not os.path.exists(js):
        return {"run_error": proc.stderr.strip().splitlines()[-1:] or ["(no output)"], "process_s": total}
    r = json.load(open(js))
    estimate = next((line for line in proc.stderr.replace("\r", "\n").splitlines() if "to go" in line), None)
    return {"process_s": total, "compile_s": r["compile_s"], "wall_s": r["wall_s"], "steps": r["steps"],
            "status": r["status"], "violation": (r.get("violation") or {}).get("position_max"),
            "estimate_line": estimate}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--t1", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default="out/bench_large_pattern")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.cases.split(","):
        path = os.path.join(args.out, f"{name}.fold")
        with open(path, "w") as f:
            json.dump(to_fold(CASES[name]()), f)
        row = {"case": name, **time_build(path, args.repeat), **time_run(path, args.t1, args.out)}
        rows.append(row)
        print(f"{name:12s} panels {row['panels']:4d} creases {row['creases']:4d} cut {row['cut']:4d}  "
              f"build {row['build_s']:.2f} s (first {row['build_first_s']:.2f})  "
              f"compile {row.get('compile_s', 0):.1f} s  "
              f"run {row.get('wall_s', float('nan')):.1f} s for {args.t1:g} s ({row.get('steps', '-')} steps)  "
              f"{row.get('status', row.get('run_error'))}", flush=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (CPU)",
              "cpu_pressure": cpu_pressure(), "t1": args.t1, "rows": rows}
    with open(os.path.join(os.path.dirname(args.out) or ".", "bench_large_pattern.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"machine: {result['machine']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
