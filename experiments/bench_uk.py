"""Cost of one vector-field evaluation vs number of bodies: Udwadia–Kalaba (quaternion
maximal coordinates, Shoer & Peck) vs the tree formulation (ABA / dense CRBA, TreeSystem)
on the same free-floating chain (revolute and spherical joints alternating).

For each N: compile time of the jitted vector field (first call minus a warm call), then
the median of ``--reps`` timed blocks of ``--inner`` calls each. JSON to
``out/bench_uk.json`` and a printed table.

    python experiments/bench_uk.py [--sizes 2 4 8 16 32] [--reps 7] [--inner 50]
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

import diffmb  # noqa: F401  (x64, XLA flags)
from diffmb.scenarios.modular_spacecraft import chain_pair


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=50)
    ap.add_argument("--out", type=Path, default=Path("out/bench_uk.json"))
    a = ap.parse_args()
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
