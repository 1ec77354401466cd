"""float32 vs float64 batch sweeps on this machine's CPU (issue 30, item 5).

Precision is fixed at import (``DIFFMB_FLOAT32``), so each precision runs in its own
process; both are run by one invocation, one after the other, and each sweep three times
in its process (the median of the three, compilation excluded: ``SweepResult.wall_s``).
CPU pressure (``/proc/pressure/cpu``, ``some avg10``) is read before and after each.

    python experiments/bench_float32_sweep.py [--batch 64] [--t1 10] [--json out/bench_float32_sweep.json]

Cases: fold-4panel with its defaults (projection, Dopri5 at rtol 1e-10; float32 raises
it to 100 eps) and with the paper's RK4 1 ms + Baumgarte, members over K 0.05-0.2 and
c 0-0.05 (linspace).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from machine import cpu_pressure_avg10

CHILD = """
import json, sys, statistics
from diffmb.design.batch import sweep_scenario
batch, t1, solver, stab = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
kw = {} if solver == "default" else {"solver": solver, "dt": 1e-3}
walls, compile_s, counts = [], None, None
for _ in range(3):
    r = sweep_scenario("fold-4panel", {"K": (0.05, 0.2), "c": (0.0, 0.05)}, n=batch, t1=t1, saveat=101,
                       stabilization=None if stab == "default" else stab, **kw)
    walls.append(r.wall_s)
    compile_s = r.compile_s if compile_s is None else compile_s
    counts = r.status_counts
print(json.dumps({"walls": walls, "median_s": statistics.median(walls), "compile_s": compile_s,
                  "statuses": counts}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--t1", type=float, default=10.0)
    ap.add_argument("--json", default="out/bench_float32_sweep.json")
    args = ap.parse_args()
    out = []
    for solver, stab, batch in (("default", "default", args.batch), ("rk4", "baumgarte", max(args.batch // 4, 1))):
        for f32 in (True, False):
            env = {**os.environ, "DIFFMB_FLOAT32": "1" if f32 else "0"}
            before = cpu_pressure_avg10()
            p = subprocess.run([sys.executable, "-c", CHILD, str(batch), str(args.t1), solver, stab],
                               env=env, capture_output=True, text=True, check=True)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r.update(case=f"{solver}/{stab}", batch=batch, float32=f32, pressure_before=before,
                     pressure_after=cpu_pressure_avg10(), member_s_per_s=batch * args.t1 / r["median_s"])
            out.append(r)
            print(f"{r['case']:18s} batch {batch:3d} {'float32' if f32 else 'float64'}: "
                  f"median {r['median_s']:.3f} s of {['%.3f' % w for w in r['walls']]} "
                  f"({r['member_s_per_s']:.0f} member-s/s, compile {r['compile_s']:.1f} s) "
                  f"{r['statuses']} cpu pressure {before} -> {r['pressure_after']}", flush=True)
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
