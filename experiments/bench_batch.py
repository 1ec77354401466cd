"""Benchmark: batched fold sweeps, diffmb beside MuJoCo MJX on the same crease patterns.

For each case (map folds ``n x n``, Miura-ori ``n x n``, ``fold4``: the four-panel fold of
Fulton & Schaub) and batch size, every engine runs the same members (hinge stiffness ``K``
and damping ``c`` drawn at random in the ranges below, the rest at the scenario's defaults)
for ``--horizon`` seconds at ``--dt`` with RK4, each engine in a fresh process that runs all
its cases one after another:

* ``diffmb-f64`` / ``diffmb-f32``: :func:`diffmb.design.batch.sweep` under Baumgarte (the
  scenario's gains), chunked as a sweep chunks on this device (CPU: blocks of
  :data:`diffmb.design.batch.DEFAULT_CHUNK` members, small products written out; accelerators:
  the whole batch); ``DIFFMB_FLOAT32=1`` for f32;
* ``mjx``: the pattern as MJCF (:func:`diffmb.formats.mjcf.to_mjcf`: two ``connect`` equalities
  per cut crease, hinge springs and dampers on the joints), MJX's default constraint
  solver (Newton) with MuJoCo's default soft constraints, RK4; per member
  ``jnt_stiffness`` and ``dof_damping`` set in a vmapped ``mjx.Model``; the whole batch
  in one ``jit(vmap)`` stepped ``horizon / dt`` times in a ``lax.scan``.

Reported per engine: member-seconds simulated per wall second (``throughput``, the median
of ``--repeats`` timed runs; with 0, the one run), compile time (ahead of time, apart from
the runs: tracing, lowering and XLA), peak memory (host RSS on a CPU; the
device's peak bytes in use on an accelerator), and the worst closure violation over the
run (diffmb: its position-level closure residual; MJX: the largest distance between the
two sites of a ``connect``, sampled every step). Both engines start from the same state.

    python experiments/bench_batch.py                    # CPU defaults (small batches)
    python experiments/bench_batch.py --cases map2 map4 --batches 1024 4096 --horizon 1

Writes ``out/bench_batch.json`` after every result and prints a table as results come.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
RANGES = {"map": {"K": (0.005, 0.02), "c": (0.0, 0.01)}, "miura": {"K": (0.005, 0.02), "c": (0.0, 0.01)},
          "fold": {"K": (0.05, 0.2), "c": (0.0, 0.05)}}
SCENARIOS = {"map": "map-fold", "miura": "miura", "fold": "fold-4panel"}
#: CPU batch per case (a 2-core laptop finishes the whole table in minutes)
CPU_BATCH = {"map2": 64, "map4": 16, "map6": 8, "map10": 2, "miura5": 8}
ENGINES = ("diffmb-f64", "diffmb-f32", "mjx")


def _case(name):
    """``map6`` -> ("map", 6); ``fold4`` -> ("fold", 4) (fold-4panel: no size to set)."""
    kind = next((k for k in RANGES if name.startswith(k)), None)
    if kind is None or not name[len(kind):].isdigit():
        raise ValueError(f"case {name!r}: expected map<n>, miura<n> or fold4")
    return kind, int(name[len(kind):])


def _members(kind, n, batch, seed=0):
    from diffmb.design.batch import member_values

    # the paper's model (contact off), as MJX runs it and as the fixed RK4 steps resolve it
    fixed = {"contact": 0.0} | ({} if kind == "fold" else {"rows": float(n), "cols": float(n)})
    return member_values(RANGES[kind], fixed, batch, sample="random", seed=seed)


def _scenario(kind):
    from diffmb.scenarios import get

    return get(SCENARIOS[kind])


def _peak_memory_mb():
    import resource

    import jax

    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        return stats.get("peak_bytes_in_use", 0) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_diffmb(case, batch, horizon, dt, repeats):
    import jax
    import numpy as np

    from diffmb.design.batch import scenario_batch, sweep

    kind, n = _case(case)
    members = _members(kind, n, batch)
    system, params = scenario_batch(_scenario(kind), members, "baumgarte")
    walls, compile_s, res = [], None, None
    for _ in range(max(1, repeats)):
        res = sweep(system, params, t1=horizon, dt=dt, solver="rk4", saveat=11, members=members,
                    max_violation=None)
        compile_s = res.compile_s if compile_s is None else compile_s
        walls.append(res.wall_s)  # the compile is timed apart (ahead of time): every run counts
    wall = statistics.median(walls)
    statuses = res.status_counts
    steps = max(1, round(horizon / dt))
    return {"case": case, "batch": batch, "nv": system.model.nv, "dtype": str(jax.numpy.zeros(()).dtype),
            "device": str(jax.devices()[0]), "compile_s": compile_s, "wall_s": wall, "chunk": res.chunks,
            "step_ms": 1e3 * wall / steps / max(1, res.chunks),
            "throughput": batch * horizon / wall, "peak_mb": _peak_memory_mb(),
            "violation": float(np.nanmax(res.table["max_violation"])), "statuses": statuses}


def worker_mjx(case, batch, horizon, dt, repeats):
    import jax
    import jax.numpy as jnp
    import mujoco
    import numpy as np
    from mujoco import mjx

    from diffmb.design.batch import scenario_batch
    from diffmb.formats.mjcf import to_mjcf, to_mujoco_state

    kind, n = _case(case)
    members = _members(kind, n, batch)
    system, params = scenario_batch(_scenario(kind), members, "none")
    model = system.model
    m = mujoco.MjModel.from_xml_string(to_mjcf(model, system.closures, timestep=dt, integrator="RK4"))
    m.opt.enableflags &= ~int(mujoco.mjtEnableBit.mjENBL_ENERGY)  # MJX computes no energy
    K = np.asarray(params["model"].stiffness)
    C = np.asarray(params["model"].damping)
    jid, dof, src = [], [], []
    for i, kind_i in enumerate(model.joint_kinds):
        if kind_i in ("revolute", "prismatic"):
            j = m.joint(model.joint_names[model.body_joint[i]]).id
            jid.append(j), dof.append(int(m.jnt_dofadr[j])), src.append(model.body_slices[i][0])
    jid, dof, src = (np.asarray(x) for x in (jid, dof, src))
    mx = mjx.put_model(m)
    stiff = jnp.asarray(np.repeat(np.asarray(m.jnt_stiffness)[None], batch, 0)).at[:, jid].set(K[:, src])
    damp = jnp.asarray(np.repeat(np.asarray(m.dof_damping)[None], batch, 0)).at[:, dof].set(C[:, src])
    models = jax.vmap(lambda k, c: mx.replace(jnt_stiffness=k, dof_damping=c))(stiff, damp)
    qpos, qvel = to_mujoco_state(model, np.asarray(params["q0"][0]))
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel))
    # jitted: op by op, forward is thousands of small dispatches (on an H200 a 2x2 map fold's
    # case spent ~50 s of its 72 s outside its compile and run)
    d0 = jax.jit(mjx.forward)(mx, d0)
    datas = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), d0)
    a, b = np.asarray(m.eq_obj1id), np.asarray(m.eq_obj2id)
    steps = max(1, round(horizon / dt))

    def run(models, datas):
        def body(carry, _):
            d, worst = carry
            d = jax.vmap(mjx.step)(models, d)
            gap = jnp.linalg.norm(d.site_xpos[:, a] - d.site_xpos[:, b], axis=-1)
            return (d, jnp.maximum(worst, jnp.max(gap, axis=-1))), None

        (d, worst), _ = jax.lax.scan(body, (datas, jnp.zeros(batch, d0.qpos.dtype)), None, length=steps)
        return d.qpos, worst

    tic = time.perf_counter()
    program = jax.jit(run).lower(models, datas).compile()
    compile_s = time.perf_counter() - tic
    walls = []
    for _ in range(max(1, repeats)):
        tic = time.perf_counter()
        qpos, worst = jax.block_until_ready(program(models, datas))
        walls.append(time.perf_counter() - tic)
    wall = statistics.median(walls)
    finite = bool(np.all(np.isfinite(np.asarray(qpos))))
    step_ms = 1e3 * wall / steps
    return {"case": case, "batch": batch, "nv": int(m.nv), "equalities": int(m.neq),
            "dtype": str(d0.qpos.dtype), "device": str(jax.devices()[0]), "integrator": "RK4",
            "solver": "Newton", "compile_s": compile_s, "wall_s": wall, "step_ms": step_ms,
            "throughput": batch * horizon / wall, "peak_mb": _peak_memory_mb(),
            "violation": float(np.max(np.asarray(worst))), "finite": finite}


def _spawn(engine, jobs, args, on_row):
    """Run ``jobs`` [(case, batch)] for ``engine`` in one fresh process (precision is fixed
    at import), calling ``on_row`` with each result as it comes; a job that fails, or is
    still running when ``--timeout`` seconds of the process are spent, gives an error row."""
    env = dict(os.environ)
    env.pop("DIFFMB_FLOAT32", None)
    if engine == "diffmb-f32":
        env["DIFFMB_FLOAT32"] = "1"
    job = {"engine": engine, "jobs": jobs, "horizon": args.horizon, "dt": args.dt, "repeats": args.repeats}
    err = tempfile.TemporaryFile("w+")  # a pipe left unread could fill and stall the worker
    proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(job)], stdout=subprocess.PIPE,
                            stderr=err, text=True, cwd=ROOT, env=env)
    timer = threading.Timer(args.timeout, proc.kill)
    timer.start()
    done = 0
    for line in proc.stdout:
        if line.startswith("{"):
            on_row({"engine": engine, **json.loads(line)})
            done += 1
    proc.wait()
    timer.cancel()
    err.seek(0)
    why = "timed out" if proc.returncode == -9 else ((err.read().strip().splitlines() or ["failed"])[-1][:300])
    for case, batch in jobs[done:]:
        on_row({"engine": engine, "case": case, "batch": batch, "error": why})


def _work(job):
    fn = worker_mjx if job["engine"] == "mjx" else worker_diffmb
    for case, batch in job["jobs"]:
        try:
            row = fn(case, batch, job["horizon"], job["dt"], job["repeats"])
        except Exception as e:
            row = {"case": case, "batch": batch, "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(row), flush=True)


def print_table(rows):
    hdr = (f"{'case':>7} {'batch':>6} {'engine':>11} {'member-s/s':>11} {'step ms':>8} {'compile s':>9} "
           f"{'peak MB':>8} {'violation':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        if "error" in r:
            print(f"{r['case']:>7} {r['batch']:>6} {r['engine']:>11}  error: {r['error']}")
            continue
        print(f"{r['case']:>7} {r['batch']:>6} {r['engine']:>11} {r['throughput']:>11.3g} "
              f"{r.get('step_ms', float('nan')):>8.3g} {r['compile_s']:>9.1f} {r['peak_mb']:>8.0f} "
              f"{r['violation']:>10.2e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(CPU_BATCH),
                    help="map<n>, miura<n> or fold4, e.g. map2 map4 map6 map10 miura5")
    ap.add_argument("--batches", type=int, nargs="*", default=None,
                    help="batch sizes for every case (default: CPU_BATCH per case)")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--horizon", type=float, default=1.0, help="simulated seconds")
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs (compilation is timed apart)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per engine (all its cases)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_batch.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _work(json.loads(args.worker))
        return
    for case in args.cases:
        try:
            _case(case)
        except ValueError as e:
            ap.error(str(e))
    jobs = [(case, batch) for case in args.cases for batch in (args.batches or [CPU_BATCH.get(case, 8)])]
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "horizon": args.horizon, "dt": args.dt, "repeats": args.repeats}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []

    def on_row(r):
        r["cpu_pressure_before"] = pressure
        rows.append(r)
        print_table([r])
        sys.stdout.flush()
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    for engine in args.engines:
        pressure = cpu_pressure()
        _spawn(engine, jobs, args, on_row)
    print()
    print_table(sorted(rows, key=lambda r: (jobs.index((r["case"], r["batch"])), ENGINES.index(r["engine"]))))
    print(f"wrote {args.out}")

if __name__ == "__main__":
    main()
