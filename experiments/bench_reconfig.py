"""The reconfiguration explorer (Shoer & Peck, section IV) with its candidates one at a time
and a thread per core: wall time of a whole exploration, compile apart.

Each thread count runs in a process of its own (``DIFFMB_CANDIDATE_THREADS``), which
explores twice: the first exploration compiles the transit program and the explorer's
small programs, the second reuses them, so ``compile ~ first - second``. The graph of
every row must be the same (nodes, edges, rejections): a row that differs is marked.
JSON to ``out/bench_reconfig.json`` and a printed table.

    python experiments/bench_reconfig.py [--scenario uk-imaging] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_pressure

CHILD = """
import json, sys, time
from diffmb import scenarios
from diffmb.formulations.udwadia_kalaba import reconfig
problem = reconfig.get_problem(scenarios.get(sys.argv[1]))
walls = []
for _ in range(2):
    t = time.perf_counter()
    G = reconfig.explore(problem)
    walls.append(time.perf_counter() - t)
print(json.dumps({"walls": walls, "nodes": G.number_of_nodes(), "edges": G.number_of_edges(),
                  "rejected": G.graph["rejected"],
                  "states": [G.nodes[v]["state"] for v in G.nodes]}))
"""


def one(scenario: str, threads: int) -> dict:
    env = dict(os.environ, DIFFMB_CANDIDATE_THREADS=str(threads), PYTHONUNBUFFERED="1")
    out = subprocess.run([sys.executable, "-c", CHILD, scenario], env=env, capture_output=True, text=True,
                         check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    first, second = r["walls"]
    return {"threads": threads, "explore_s": second, "compile_s": max(first - second, 0.0), "first_s": first,
            "nodes": r["nodes"], "edges": r["edges"], "rejected": r["rejected"], "states": r["states"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="uk-imaging")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="out/bench_reconfig.json")
    args = ap.parse_args(argv)
    rows = []
    for n in args.threads:
        pressure = cpu_pressure()
        row = one(args.scenario, n)
        row["cpu_pressure_before"] = pressure
        rows.append(row)
        print(f"threads {n}: explore {row['explore_s']:.1f} s, compile {row['compile_s']:.1f} s", flush=True)
    ref = rows[0]
    for r in rows:
        r["same_graph"] = all(r[k] == ref[k] for k in ("nodes", "edges", "rejected", "states"))
    print(f"\n{args.scenario} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    print(f"{'threads':>8} {'explore s':>10} {'compile s':>10} {'speed-up':>9} {'nodes':>6} {'edges':>6} same graph")
    for r in rows:
        print(f"{r['threads']:>8} {r['explore_s']:>10.1f} {r['compile_s']:>10.1f} "
              f"{ref['explore_s'] / r['explore_s']:>9.2f} {r['nodes']:>6} {r['edges']:>6} {r['same_graph']}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"scenario": args.scenario, "date": time.strftime("%Y-%m-%d"),
                                "machine": platform.platform(), "cores": os.cpu_count(),
                                "rows": [{k: v for k, v in r.items() if k != "states"} for r in rows]}, indent=1))
    return 0 if all(r["same_graph"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
