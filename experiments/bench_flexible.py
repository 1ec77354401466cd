"""Benchmark of Banerjee & Lemak's two examples: wall time after compilation.

Solar sail (one flexible body, 44 modes, 300 s) and the four-body flexible chain (52 DOF,
10 s), each with customary and efficient generalized speeds (recursive formulation) and,
for reference, the dense "standard Kane" mass-matrix solve. Compile time (first call minus
the median run) is reported apart; run times are medians of ``--repeats`` runs of the whole
trajectory inside one jitted ``simulate``. Writes ``out/bench_flexible.json`` and prints a
table with the paper's CPU times beside ours (different machines and decades: the ratio
efficient/customary is the comparable number).

    python experiments/bench_flexible.py [--repeats 3] [--cases sail,four]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax

from diffmb.scenarios import get
from diffmb.simulation.integrate import simulate

PAPER = {"sail": {"standard Kane": 699.0, "customary": 667.0, "efficient": 140.0},
         "four": {"standard Kane": 10.2, "customary": 7.6, "efficient": 5.2}}
TARGET = {"sail": 5.0, "four": 0.5}
CASES = {"sail": ("solar-sail-slew", 300.0), "four": ("flex-4body", 10.0)}
VARIANTS = {"efficient": {"speeds": 0, "algorithm": 0}, "customary": {"speeds": 1, "algorithm": 0},
            "standard Kane": {"speeds": 1, "algorithm": 1}}


def time_case(name, t1, overrides, repeats):
    sc = get(name)
    system, params, _ = sc.make(overrides)

    def run():
        t = time.perf_counter()
        tr = simulate(system, t1=t1, dt=sc.dt, solver=sc.solver, params=params, saveat=101)
        jax.block_until_ready(tr)
        return time.perf_counter() - t, tr

    first, tr = run()
    times = [run()[0] for _ in range(repeats)]
    med = statistics.median(times)
    return {"wall_s": med, "compile_s": max(0.0, first - med), "runs_s": times,
            "steps": int(tr.n_steps), "status": tr.status, "final": tr.final}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default="sail,four")
    ap.add_argument("--variants", default="efficient,customary,standard Kane")
    ap.add_argument("--out", default="out/bench_flexible.json")
    a = ap.parse_args(argv)
    res = {"device": str(jax.devices()[0]), "cases": {}}
    rows = []
    for case in a.cases.split(","):
        name, t1 = CASES[case]
        res["cases"][case] = {}
        for var in a.variants.split(","):
            r = time_case(name, t1, VARIANTS[var], a.repeats)
            r["paper_s"] = PAPER[case][var]
            res["cases"][case][var] = r
            rows.append((name, var, r["wall_s"], r["compile_s"], r["paper_s"], TARGET[case], r["steps"]))
            print(f"{name:16s} {var:14s} wall {r['wall_s']:8.3f} s  compile {r['compile_s']:6.1f} s  "
                  f"paper {r['paper_s']:6.1f} s  target < {TARGET[case]} s  steps {r['steps']}", flush=True)
        c = res["cases"][case]
        if "efficient" in c and "customary" in c:
            c["customary_over_efficient"] = c["customary"]["wall_s"] / c["efficient"]["wall_s"]
            c["paper_customary_over_efficient"] = PAPER[case]["customary"] / PAPER[case]["efficient"]
            n = len(c["efficient"]["final"])
            ef, cu = c["efficient"]["final"], c["customary"]["final"]
            common = [k for k in ef if k in cu and "_eta" in k or k.endswith(("sigma1", "sigma2", "sigma3", "theta"))]
            c["max_final_coordinate_difference"] = max((abs(ef[k] - cu[k]) for k in common), default=None)
            del n
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2))
    print()
    print(f"{'case':16s} {'variant':14s} {'ours [s]':>9s} {'compile':>8s} {'paper [s]':>9s} {'target':>7s}")
    for r in rows:
        print(f"{r[0]:16s} {r[1]:14s} {r[2]:9.3f} {r[3]:8.1f} {r[4]:9.1f} {r[5]:7.1f}")
    for case, c in res["cases"].items():
        if "customary_over_efficient" in c:
            print(f"{case}: customary/efficient = {c['customary_over_efficient']:.2f} "
                  f"(paper {c['paper_customary_over_efficient']:.2f}); max final coordinate difference "
                  f"{c['max_final_coordinate_difference']}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
