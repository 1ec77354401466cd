"""Benchmark: closed chains at the scale of real deployables, beside MuJoCo.

Map folds ``n x n`` (the ``map-fold`` scenario: ``n^2`` panels around a 100 kg hub,
``(n - 1)^2`` cut creases of 5 hinge rows each) and Miura-ori ``n x n`` (the ``miura``
scenario), RK4 at dt = 1 ms for ``--horizon`` seconds (default 1), under Baumgarte and
under projection. For every case, in a fresh process:

* diffmb: build time (pattern -> System, closure analysis), compile time (ahead of time:
  trace, lower and XLA-compile :func:`diffmb.simulation.integrate.simulate`, measured on its own),
  run time per RK4 step, peak memory (resident set), the worst closure violation and the
  energy drift over the run;
* MuJoCo (when the ``peers`` extra is installed): the same pattern written by
  :func:`diffmb.formats.mjcf.to_mjcf` (two ``connect`` equalities per cut crease, RK4, Newton
  solver, soft constraints with MuJoCo's default ``solref``), its compile time
  (``MjModel.from_xml_string``), time per ``mj_step``, worst connect separation and energy
  drift over the same horizon.

The growth exponent ``p`` of ``time per step ~ panels^p`` is fitted (least squares in
log-log) over the map folds of 16 panels and more. Writes ``out/bench_scale.json`` and
prints a table; the CPU pressure (``/proc/pressure/cpu``) before and after is recorded,
as this machine is shared: compare diffmb and MuJoCo within one run.

    python experiments/bench_scale.py                        # map 2..20, Miura 3..10
    python experiments/bench_scale.py --sizes 2 4 6 --miura --horizon 0.2
    python experiments/bench_scale.py --sizes 10 --stabilizations baumgarte
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP_SIZES = (2, 4, 6, 8, 10, 14, 20)
MIURA_SIZES = (3, 5, 7, 10)
STABS = ("baumgarte", "projection")


def _pressure():
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None


def _scenario(kind, n):
    from diffmb.scenarios import get

    sc = get("map-fold" if kind == "map" else "miura")
    # the paper's model (contact off), as MuJoCo runs it
    return sc, sc.resolve({"rows": float(n), "cols": float(n), "contact": 0.0})


def worker_diffmb(kind, n, stab, horizon, dt, factor="auto"):
    import resource

    import jax

    from diffmb.closures import constraint_solve
    from diffmb.simulation.integrate import compile_simulation

    if factor == "dense":  # the dense Cholesky of M + rho G^T G at every size
        constraint_solve.plan_for = lambda lay, paths: None

    sc, values = _scenario(kind, n)
    t = time.perf_counter()
    system, params = sc.build(values, stab)
    build_s = time.perf_counter() - t
    run, compile_s = compile_simulation(system, params=params, t1=horizon, dt=dt, solver="rk4", saveat=11)
    t = time.perf_counter()
    tr = run()
    jax.block_until_ready(tr.xs)
    wall = time.perf_counter() - t
    s = tr.summary()
    steps = max(1, int(tr.n_steps))
    mom = s.get("angular_momentum") or {}
    from diffmb.closures.dynamics import plan

    p = plan(system.model, system.closures) if factor != "dense" else None
    return {"engine": "diffmb", "kind": kind, "n": n, "panels": n * n, "nv": system.model.nv,
            "factor": f"blocks {p.k}x{p.b}+{p.w}" if p else "dense", "factor_mode": factor,
            "closures": len(system.closures.closures), "rows": len(system.closures.rows),
            "stabilization": stab, "status": tr.status, "steps": steps, "build_s": build_s,
            "compile_s": compile_s, "wall_s": wall, "us_per_step": 1e6 * wall / steps,
            "violation": s["violation"]["position_max"],
            "energy_drift": s["energy"]["max_rel_change"],
            "momentum_change": mom.get("max_abs_change"),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def worker_mujoco(kind, n, horizon, dt):
    import numpy as np

    try:
        import mujoco
    except ImportError:
        return None
    from diffmb.formats.mjcf import to_mjcf, to_mujoco_state

    sc, values = _scenario(kind, n)
    system, params = sc.build(values, "none")
    xml = to_mjcf(system.model, system.closures, timestep=dt)
    t = time.perf_counter()
    m = mujoco.MjModel.from_xml_string(xml)
    compile_s = time.perf_counter() - t
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = to_mujoco_state(system.model, np.asarray(params["q0"]))
    mujoco.mj_forward(m, d)
    a, b = np.array(m.eq_obj1id), np.array(m.eq_obj2id)
    steps = max(1, round(horizon / dt))
    e0 = d.energy.sum()
    viol, drift, wall = 0.0, 0.0, 0.0
    chunk = 10
    done = 0
    while done < steps:
        k = min(chunk, steps - done)
        t = time.perf_counter()
        for _ in range(k):
            mujoco.mj_step(m, d)
        wall += time.perf_counter() - t
        done += k
        viol = max(viol, float(np.linalg.norm(d.site_xpos[a] - d.site_xpos[b], axis=1).max()))
        drift = max(drift, abs(d.energy.sum() - e0))
    scale = max(abs(e0), 1e-300)
    return {"engine": "mujoco", "kind": kind, "n": n, "panels": n * n, "nv": int(m.nv),
            "equalities": int(m.neq), "steps": steps, "compile_s": compile_s, "wall_s": wall,
            "us_per_step": 1e6 * wall / steps, "violation": viol,
            "energy_drift": drift / scale if abs(e0) > 0 else drift}


def _spawn(args):
    cmd = [sys.executable, __file__, "--worker", json.dumps(args)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1], **args}
    return json.loads(lines[-1])


def fit_exponent(rows):
    import numpy as np

    pts = [(r["panels"], r["us_per_step"]) for r in rows if r.get("us_per_step") and r["panels"] >= 16]
    if len(pts) < 2:
        return None
    x, y = np.log([p for p, _ in pts]), np.log([u for _, u in pts])
    return float(np.polyfit(x, y, 1)[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=list(MAP_SIZES), help="map folds n x n")
    ap.add_argument("--miura", type=int, nargs="*", default=list(MIURA_SIZES),
                    help="Miura-ori n x n (give the flag alone for none)")
    ap.add_argument("--horizon", type=float, default=1.0, help="simulated seconds per run")
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--stabilizations", nargs="+", choices=STABS, default=list(STABS))
    ap.add_argument("--factor", nargs="+", choices=("auto", "dense"), default=["auto"],
                    help="auto: block-tridiagonal factor where it pays (diffmb.math.block_tridiagonal); "
                         "dense: the dense Cholesky everywhere; both: one row each")
    ap.add_argument("--no-mujoco", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_scale.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        w = json.loads(args.worker)
        if w["engine"] == "mujoco":
            res = worker_mujoco(w["kind"], w["n"], w["horizon"], w["dt"])
        else:
            res = worker_diffmb(w["kind"], w["n"], w["stabilization"], w["horizon"], w["dt"], w.get("factor", "auto"))
        print(json.dumps(res))
        return

    cases = [("map", n) for n in args.sizes] + [("miura", n) for n in args.miura]
    pressure = [_pressure()]
    rows = []
    for kind, n in cases:
        for stab in args.stabilizations:
            for factor in args.factor:
                r = _spawn({"engine": "diffmb", "kind": kind, "n": n, "stabilization": stab,
                            "horizon": args.horizon, "dt": args.dt, "factor": factor})
                rows.append(r)
                _print_row(r)
        if not args.no_mujoco:
            r = _spawn({"engine": "mujoco", "kind": kind, "n": n, "horizon": args.horizon, "dt": args.dt})
            if r is not None:
                rows.append(r)
                _print_row(r)
    pressure.append(_pressure())
    exps = {}
    for eng, stab in [("diffmb", s) for s in args.stabilizations] + [("mujoco", None)]:
        sel = [r for r in rows if r and r.get("engine") == eng and r.get("kind") == "map"
               and (stab is None or r.get("stabilization") == stab)
               and r.get("factor_mode", args.factor[0]) == args.factor[0]]
        exps[f"{eng}" + (f"/{stab}" if stab else "")] = fit_exponent(sel)
    print()
    print(table(rows))
    print("\ngrowth exponent (time per step ~ panels^p, map folds >= 16 panels): " +
          ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} -" for k, v in exps.items()))
    print(f"CPU pressure before: {pressure[0]}\n             after:  {pressure[1]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "solver": "rk4", "dt": args.dt, "horizon": args.horizon, "machine": platform.platform(),
        "cpu_count": os.cpu_count(), "cpu_pressure": pressure, "growth_exponent": exps,
        "runs": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


def _print_row(r):
    if r is None:
        return
    if "error" in r:
        print(f"  {r['kind']} {r['n']}x{r['n']} {r.get('engine')} {r.get('stabilization', '')}: ERROR {r['error']}",
              flush=True)
        return
    print(f"  {r['kind']:<5} {r['n']:>2}x{r['n']:<2} {r['engine']:<6} {r.get('stabilization', ''):<10} "
          f"{r.get('factor', ''):<18} "
          f"{r['us_per_step']:10.1f} us/step  compile {r['compile_s']:7.3f} s  "
          f"viol {r['violation']:.1e}", flush=True)


def table(rows):
    f = lambda x, s="{:.3g}": "-" if x is None or (isinstance(x, float) and math.isnan(x)) else s.format(x)
    mj = {(r["kind"], r["n"]): r for r in rows if r and r.get("engine") == "mujoco" and "error" not in r}
    head = ("case", "panels", "nv", "rows", "stabilization", "factor", "status", "us/step", "compile s", "build s",
            "peak MB", "violation", "energy drift", "MuJoCo us/step", "MuJoCo compile ms",
            "MuJoCo violation", "ratio")
    body = []
    for r in rows:
        if not r or r.get("engine") != "diffmb":
            continue
        if "error" in r:
            body.append((f"{r['kind']} {r['n']}x{r['n']}", "-", "-", "-", r.get("stabilization", ""),
                         r.get("factor", "-"), "error") + ("-",) * 10)
            continue
        m = mj.get((r["kind"], r["n"]))
        body.append((f"{r['kind']} {r['n']}x{r['n']}", str(r["panels"]), str(r["nv"]), str(r["rows"]),
                     r["stabilization"], r["factor"], r["status"], f(r["us_per_step"], "{:.1f}"),
                     f(r["compile_s"], "{:.1f}"), f(r["build_s"], "{:.1f}"), f(r["peak_mb"], "{:.0f}"),
                     f(r["violation"], "{:.1e}"), f(r["energy_drift"], "{:.1e}"),
                     f(m and m["us_per_step"], "{:.1f}"), f(m and 1e3 * m["compile_s"], "{:.1f}"),
                     f(m and m["violation"], "{:.1e}"),
                     f(m and r["us_per_step"] / m["us_per_step"], "{:.2f}x")))
    w = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(k) for c, k in zip(row, w)).rstrip() for row in [head] + body)


if __name__ == "__main__":
    main()
