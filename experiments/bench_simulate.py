"""Benchmark simulate(): RK4 steps per second, single trajectory and vmapped batches.

Cases: the double pendulum and a 16-body revolute chain (uniform rods under gravity),
RK4 at dt = 1e-3. Compile time is measured apart (first call minus the median of the
repeats); run times are medians. Writes ``out/bench_simulate.json`` and prints a table.

    python experiments/bench_simulate.py [--batch 1024] [--t1 1.0] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import diffmb  # noqa: F401  (float64, XLA flags)
from diffmb import TreeSystem, simulate
from diffmb.scenarios.pendulum import chain_model


def chain(n: int, algorithm: str = "auto") -> TreeSystem:
    model = chain_model([1.0 / n] * n, [1.0] * n, 9.81)
    q0 = np.full(n, 0.3 / n)
    q0[0] = 0.8
    return TreeSystem(model, q0=q0, algorithm=algorithm)


def timed(fn, repeats: int):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - t
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        runs.append(time.perf_counter() - t)
    run = statistics.median(runs)
    return max(first - run, 0.0), run


def measure(name: str, n: int, *, t1: float, dt: float, batch: int, repeats: int) -> dict:
    """Single trajectory with the default dynamics (dense for small trees), batch with the ABA."""
    system, batch_system = chain(n), chain(n, "recursive")
    steps = round(t1 / dt)
    params = system.default_params()
    x0 = system.init_state(params)

    def single():
        return simulate(system, t1=t1, dt=dt, saveat=2).x_final

    rng = np.random.default_rng(0)
    X0 = jnp.asarray(np.asarray(x0) + 0.05 * rng.standard_normal((batch, x0.shape[0])))
    batched = jax.jit(jax.vmap(lambda x: simulate(batch_system, t1=t1, dt=dt, saveat=2, x0=x).x_final))

    c1, r1 = timed(single, repeats)
    cb, rb = timed(lambda: batched(X0), repeats)
    return {
        "case": name, "bodies": system.model.n_bodies, "steps": steps, "batch": batch,
        "single_compile_s": c1, "single_run_s": r1, "single_steps_per_s": steps / r1,
        "batch_compile_s": cb, "batch_run_s": rb, "batch_steps_per_s": steps * batch / rb,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--t1", type=float, default=1.0)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="t1 = 0.2 s, batch 64")
    ap.add_argument("--out", default="out/bench_simulate.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.t1, args.batch = 0.2, 64
    cases = [("double-pendulum", 2), ("chain-16", 16)]
    rows = [measure(name, n, t1=args.t1, dt=args.dt, batch=args.batch, repeats=args.repeats) for name, n in cases]
    hdr = (f"{'case':16s} {'steps':>6s} {'single steps/s':>15s} {'compile s':>10s} {'batch':>6s} "
           f"{'batch steps/s':>14s} {'compile s':>10s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['case']:16s} {r['steps']:6d} {r['single_steps_per_s']:15.3g} {r['single_compile_s']:10.2f} "
              f"{r['batch']:6d} {r['batch_steps_per_s']:14.3g} {r['batch_compile_s']:10.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": str(jax.devices()[0]), "load_avg": os.getloadavg(), "t1": args.t1, "dt": args.dt}
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
