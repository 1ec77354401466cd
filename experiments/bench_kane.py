"""Benchmark Kane's constrained form (eq. 6) against the multiplier DAE form (eq. 11).

For ``slider-crank`` (RK4, dt = 1 ms, 5 s) and ``dual-arm-grasp`` (RK4, dt = 50 ms, the
full 600 s mission), each form:

* cost per RK4 step: a run saving only its end point, (wall - compile) / steps;
* cost per vector-field evaluation: 1000 evaluations inside one jitted ``lax.scan``;
* the full run as the CLI's scenario settings make it (slider-crank 501 save points, the
  mission 601), diagnostics (reactions, control outputs) included — wall time after
  compilation and compile time apart;
* energy drift (slider-crank) and the largest constraint violation.

Compile time = first call minus the median of the repeats; run times are medians.
Writes ``out/bench_kane.json`` and prints a table.

    python experiments/bench_kane.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax
import numpy as np

import diffmb  # noqa: F401  (float64, XLA flags)
from diffmb import simulate
from diffmb.scenarios import REGISTRY


def timed(fn, repeats: int):
    t = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t)
    run = statistics.median(runs)
    return max(first - run, 0.0), run, out


def vf_cost(system, params, n_evals: int, repeats: int) -> float:
    """Seconds per vector-field evaluation (1000 in one jitted scan, states perturbed)."""
    x0 = system.init_state(params)

    @jax.jit
    def many(x0, params):
        def body(x, _):
            f = system.vector_field(0.0, x, params)
            return x + 1e-9 * f, None

        return jax.lax.scan(body, x0, None, length=n_evals)[0]

    _, run, _ = timed(lambda: many(x0, params), repeats)
    return run / n_evals


def measure(name: str, formulation: float, stabilization: str, t1: float, repeats: int) -> dict:
    sc = REGISTRY[name]
    system, params, _ = sc.make({"formulation": formulation}, stabilization)
    dt = sc.dt
    steps = round(t1 / dt)
    comp_step, run_step, _ = timed(
        lambda: simulate(system, t1=t1, dt=dt, solver=sc.solver, params=params, saveat=2).x_final,
        repeats)
    n_save = 601 if name == "dual-arm-grasp" else 501
    comp_full, run_full, tr = timed(
        lambda: simulate(system, t1=t1, dt=dt, solver=sc.solver, params=params, saveat=n_save),
        repeats)
    summ = tr.summary()
    out = {
        "scenario": name,
        "formulation": "kane" if formulation == 0.0 else "dae",
        "stabilization": stabilization,
        "n_coordinates": len(system.coordinate_names),
        "n_independent": system.n_independent if system.formulation == "kane" else None,
        "n_closure_rows": len(system.kept_rows),
        "t1": t1,
        "dt": dt,
        "steps": steps,
        "status": tr.status,
        "us_per_step": 1e6 * run_step / steps,
        "us_per_vector_field": 1e6 * vf_cost(system, params, 1000, repeats),
        "compile_s": comp_full,
        "compile_s_no_diagnostics": comp_step,
        "wall_s": run_full,
        "wall_s_no_diagnostics": run_step,
        "violation_position_max": summ.get("violation", {}).get("position_max"),
        "violation_velocity_max": summ.get("violation", {}).get("velocity_max"),
        "energy_max_rel_change": summ.get("energy", {}).get("max_rel_change"),
    }
    if name == "dual-arm-grasp":
        d = {k: np.asarray(v) for k, v in tr.diagnostics.items()}
        out["final_distance_m"] = float(d["distance"][-1])
        out["target_rate_deg_s_at_180s"] = float(d["target_rate_deg_s"][180])
        out["target_rate_deg_s_final"] = float(d["target_rate_deg_s"][-1])
        out["max_bus_torque_Nm"] = float(np.abs(d["bus_torque"]).max())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="slider-crank only, no projection runs")
    ap.add_argument("--out", type=Path, default=Path("out/bench_kane.json"))
    args = ap.parse_args(argv)
    cases = [("slider-crank", f, s, 5.0) for s in ("none", "projection") for f in (0.0, 1.0)]
    if args.quick:
        cases = cases[:2]
    else:
        cases += [("dual-arm-grasp", f, "none", 600.0) for f in (0.0, 1.0)]
    rows = []
    for case in cases:
        r = measure(*case, repeats=args.repeats)
        rows.append(r)
        print(f"  {r['scenario']} {r['formulation']} {r['stabilization']}: "
              f"{r['us_per_step']:.1f} us/step, wall {r['wall_s']:.3g} s", flush=True)
    meta = {"cpu_count": os.cpu_count(), "jax": jax.__version__, "device": str(jax.devices()[0]),
            "note": "medians of --repeats runs after one compiling call; 2-core shared CPU"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
    hdr = ("scenario", "form", "stab", "n", "p", "us/step", "us/vf", "wall s", "compile s", "|Phi| max", "dE/E")
    print("  ".join(f"{h:>14}" for h in hdr))
    for r in rows:
        vals = (r["scenario"], r["formulation"], r["stabilization"], r["n_coordinates"],
                r["n_independent"] if r["n_independent"] is not None else "-",
                f"{r['us_per_step']:.1f}", f"{r['us_per_vector_field']:.1f}", f"{r['wall_s']:.3f}",
                f"{r['compile_s']:.1f}", f"{r['violation_position_max']:.2e}",
                "-" if r["energy_max_rel_change"] is None else f"{r['energy_max_rel_change']:.2e}")
        print("  ".join(f"{str(v):>14}" for v in vals))
    by = {(r["scenario"], r["formulation"], r["stabilization"]): r for r in rows}
    for sc in ("slider-crank", "dual-arm-grasp"):
        k, d = by.get((sc, "kane", "none")), by.get((sc, "dae", "none"))
        if k and d:
            print(f"{sc}: Kane / DAE cost per step = {k['us_per_step'] / d['us_per_step']:.2f}")
    m = by.get(("dual-arm-grasp", "kane", "none"))
    if m:
        print(f"dual-arm-grasp mission (600 s): {m['wall_s']:.2f} s wall after compilation "
              f"(target < 10 s), compile {m['compile_s']:.1f} s; final distance "
              f"{m['final_distance_m']:.6f} m, target rate at 180 s {m['target_rate_deg_s_at_180s']:.2e} deg/s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
