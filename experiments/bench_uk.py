"""Cost of one vector-field evaluation vs number of bodies: Udwadia–Kalaba (quaternion
maximal coordinates, Shoer & Peck) vs the tree formulation (ABA / dense CRBA, TreeSystem)
on the same free-floating chain (revolute and spherical joints alternating).

For each N: compile time of the jitted vector field (first call minus a warm call), then
the median of ``--reps`` timed blocks of ``--inner`` calls each. JSON to
``out/bench_uk.json`` and a printed table.

    python experiments/bench_uk.py [--sizes 2 4 8 16 32] [--reps 7] [--inner 50]

``--drift``: instead, the 4-link chain (``uk-chain``) over ``--t1`` seconds with Dopri5 and
projection at the 0.1 settings (eps 1e-10, rtol 1e-10) beside the scenario's (eps
``CHAIN_EPS``, rtol ``CHAIN_RTOL``): angular-momentum drift, energy drift, steps, the poses'
distance from a tight Dopri8 tree reference, run and compile time (``out/bench_uk_drift.json``).

    python experiments/bench_uk.py --drift [--t1 10]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import diffmb
from diffmb.scenarios import modular_spacecraft as ms
from diffmb.scenarios.modular_spacecraft import chain_pair
from diffmb.simulation.integrate import compile_simulation


def timed(f, *args, reps, inner):
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    warm = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = f(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / inner)
    return max(first - warm, 0.0), statistics.median(times)


def drift(t1: float, out: Path):
    """The chain's conservation and cost at the old and the new defaults, in one run."""
    import numpy as np

    kw = dict(angles=0.3, rates=0.5, spin=0.4, stabilization="projection", baumgarte=(10.0, 10.0))
    _, tree = chain_pair(4, **kw)
    ref = diffmb.simulate(tree, t1=t1, solver="dopri8", rtol=1e-13, atol=1e-15, saveat=201)
    r_ref, _ = ms.chain_poses_tree(tree.model, ref.xs)
    rows = []
    for label, eps, rtol, atol in (("0.1 (eps 1e-10, rtol 1e-10)", 1e-10, 1e-10, 1e-12),
                                   (f"0.2 (eps {ms.CHAIN_EPS:g}, rtol {ms.CHAIN_RTOL:g})", ms.CHAIN_EPS,
                                    ms.CHAIN_RTOL, ms.CHAIN_ATOL)):
        uk, _ = chain_pair(4, eps=eps, **kw)
        run, compile_s = compile_simulation(uk, t1=t1, solver="dopri5", rtol=rtol, atol=atol, saveat=201)
        walls = []
        for _ in range(3):
            tic = time.perf_counter()
            tr = run()
            jax.block_until_ready(tr.xs)
            walls.append(time.perf_counter() - tic)
        L, E = np.asarray(tr.diagnostics["angular_momentum"]), np.asarray(tr.diagnostics["energy"])
        r_uk, _ = ms.chain_poses_uk(uk, tr.xs)
        rows.append({"settings": label, "steps": int(tr.n_steps), "rejected": int(tr.n_rejected),
                     "momentum_drift": float(np.nanmax(np.abs(L - L[0]))),
                     "energy_drift": float(np.nanmax(np.abs(E - E[0]))),
                     "pose_error_m": float(jnp.max(jnp.abs(r_uk - r_ref))),
                     "wall_s": statistics.median(walls), "compile_s": compile_s})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"t1": t1, "jax": jax.__version__, "backend": jax.default_backend(),
                               "rows": rows}, indent=2) + "\n")
    print(f"uk-chain, 4 bodies, {t1:g} s, Dopri5 + projection (median of 3 runs, compile apart)")
    print(f"{'settings':<30} {'|dL| N m s':>11} {'|dE| J':>10} {'steps':>6} {'pose err m':>11} "
          f"{'wall s':>7} {'compile s':>9}")
    for r in rows:
        print(f"{r['settings']:<30} {r['momentum_drift']:>11.2e} {r['energy_drift']:>10.2e} {r['steps']:>6} "
              f"{r['pose_error_m']:>11.2e} {r['wall_s']:>7.2f} {r['compile_s']:>9.2f}")
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drift", action="store_true", help="the 4-link chain's drift at the old and new defaults")
    ap.add_argument("--t1", type=float, default=10.0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("out/bench_uk.json"))
    a = ap.parse_args()
    if a.drift:
        return drift(a.t1, Path("out/bench_uk_drift.json"))
    rows = []
    for n in a.sizes:
        uk, tr = chain_pair(n, stabilization="none")
        res = {"n_bodies": n, "uk_rows": uk.n_rows, "uk_states": 14 * n, "tree_states": 2 * tr.model.nq}
        for name, s in (("uk", uk), ("tree", tr)):
            p = s.default_params()
            x = s.init_state(p)
            f = jax.jit(lambda t, x, p, s=s: s.vector_field(t, x, p))
            c, r = timed(f, jnp.asarray(0.0), x, p, reps=a.reps, inner=a.inner)
            res[f"{name}_compile_s"] = c
            res[f"{name}_eval_us"] = r * 1e6
        res["ratio_uk_over_tree"] = res["uk_eval_us"] / res["tree_eval_us"]
        rows.append(res)
        print(f"N={n:3d}  UK {res['uk_eval_us']:9.1f} us (compile {res['uk_compile_s']:.2f} s, "
              f"{res['uk_rows']} rows)   tree {res['tree_eval_us']:9.1f} us (compile {res['tree_compile_s']:.2f} s)"
              f"   UK/tree {res['ratio_uk_over_tree']:.2f}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "jax": jax.__version__,
            "backend": jax.default_backend(), "reps": a.reps, "inner": a.inner,
            "what": "median seconds per vector-field evaluation (one state), jitted, float64"}
    a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"\n{'N':>4} {'UK us':>10} {'tree us':>10} {'UK/tree':>8} {'UK compile s':>13} {'tree compile s':>15}")
    for r in rows:
        print(f"{r['n_bodies']:>4} {r['uk_eval_us']:>10.1f} {r['tree_eval_us']:>10.1f} {r['ratio_uk_over_tree']:>8.2f} "
              f"{r['uk_compile_s']:>13.2f} {r['tree_compile_s']:>15.2f}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
