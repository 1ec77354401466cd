"""Benchmark: what one time step of a sweep's chunk program asks of an accelerator, read on
this machine (a CPU will do) from the compiled program, before and after the counted loops.

For each case (fold-4panel, map folds ``n x n``, Miura-ori ``n x n``) the chunk program of a
sweep of ``--members`` members (Baumgarte, RK4 at ``--dt``, ``saveat=11``) is compiled twice:

* ``diffrax/reduce``: diffrax's step loop, products reduced, LAPACK factor and solves
  (the form accelerators got before);
* ``scan/device``: the counted loops (:mod:`diffmb.simulation.fixed_steps`) in the
  ``"device"`` form (no library calls, :mod:`diffmb.math.small_cholesky`).

Printed per program (:class:`diffmb.design.chunk_census.StepCensus`): loops without a known
trip count in the time loop (each a host round trip per iteration on a GPU), library calls
and ``lax.linalg`` instructions per step, host callbacks, kernels launched per step
(fusions + dots + custom calls + copies; diffrax's loops of unknown trip count counted
once, so its stage loop's four runs are not multiplied in), compile time, and XLA's cost
model of one vector field (flops and bytes per member), the compute floor to set beside a
measured marginal cost. CPU fusion is not GPU fusion: the kernel counts are a proxy.

    python experiments/bench_census.py                 # fold4 map6 miura5
    python experiments/bench_census.py --cases fold4 --members 4

Writes ``out/bench_census.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
FORMS = (("diffrax", "reduce"), ("auto", "device"))


def _system(case, members):
    from diffmb.design.batch import member_values, scenario_batch
    from diffmb.scenarios import get

    if case == "fold4":
        name, fixed = "fold-4panel", {}
    else:
        kind = "map-fold" if case.startswith("map") else "miura"
        n = float(case.lstrip("mapiur"))
        name, fixed = kind, {"rows": n, "cols": n}
    ranges = {"K": (0.05, 0.2), "c": (0.0, 0.05)} if case == "fold4" else {"K": (0.005, 0.02), "c": (0.0, 0.01)}
    # the paper's model (contact off): the census's history is of its program
    vals = member_values(ranges, {"contact": 0.0, **fixed}, members, sample="random", seed=0)
    return scenario_batch(get(name), vals, "baumgarte")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=["fold4", "map6", "miura5"])
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=20, help="steps of the compiled run (2 per save interval)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_census.json")
    args = ap.parse_args(argv)

    import jax

    from diffmb.design.chunk_census import chunk_census

    rows = []
    hdr = (f"{'case':>7} {'nv':>4} {'loop/form':>15} {'unknown':>7} {'library':>7} {'linalg':>6} {'callbk':>6} "
           f"{'launch/step':>11} {'compile s':>9} {'kflop/eval':>10} {'KB/eval':>8}")
    print(f"device: {jax.devices()[0]}  cpu pressure: {cpu_pressure()}")
    print(hdr)
    print("-" * len(hdr))
    for case in args.cases:
        system, params = _system(case, args.members)
        for loop, form in FORMS:
            c = chunk_census(system, params, t1=args.steps * args.dt, dt=args.dt, form=form, loop=loop,
                             max_violation=1.0)
            row = {"case": case, "nv": system.model.nv, "loop": loop, "form": form, **c.__dict__}
            rows.append(row)
            print(f"{case:>7} {system.model.nv:>4} {loop + '/' + form:>15} {c.unknown_trip_loops:>7} "
                  f"{sum(c.library_calls.values()):>7.0f} {c.linalg_ops:>6} {c.callbacks:>6} "
                  f"{c.launches_per_step:>11.0f} {c.compile_s:>9.1f} {c.flops_per_eval / 1e3:>10.1f} "
                  f"{c.bytes_per_eval / 1e3:>8.0f}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(jax.devices()[0]), "python": platform.python_version(), "cpu_pressure": cpu_pressure(),
            "members": args.members, "dt": args.dt, "steps": args.steps}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
