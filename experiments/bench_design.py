"""Benchmark: the design tools against issue 5's targets (Fulton & Schaub scenarios).

Parts (``--parts``, default all):

``tune4``   tune fold-4panel's Baumgarte gains (a, b) over the paper's 10 s from the
            paper's hand-tuned a = 100, b = 0; target: loss down >= 10x.
``tune3x3`` fold-3x3 with Baumgarte: the paper's gains (a = 40, b = 0) for 30 s, then
            gains tuned on a shorter horizon (``--tune-t1``) and re-run for 30 s;
            target: the tuned run is stable for 30 s.
``fit``     fit fold-4panel hinge stiffness K and damping c to synthetic data (10 s,
            hinge angles every 10 ms, 1e-3 rad noise) from a start off by 3x;
            target: both within 1 %.
``sweep``   1024 fold-4panel configurations (K, c spread), 10 s, RK4, dt = 1 ms, one
            vmapped call vs sequential single runs (``--seq`` of them, extrapolated);
            target: >= 5x member-seconds per wall second. ``--sweep-scenario``,
            ``--ranges``, ``--sweep-set`` and ``--sweep-t1`` sweep another case, e.g.
            ``--sweep-scenario map-fold --sweep-set rows=6 cols=6 --ranges K=0.005:0.02
            --sweep-t1 1``.

Writes ``out/bench_design.json`` and prints a table. Times exclude compilation (reported
apart); a 2-core CPU shared with other work gives them roughly +-30 %.

    python experiments/bench_design.py --parts tune4 fit
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("tune4", "tune3x3", "fit", "sweep")


def log(msg):
    print(msg, flush=True)


def part_tune4(args):
    from diffmb.design.tune import tune

    res = tune("fold-4panel", ["a", "b"], t1=10.0, iterations=args.steps, learning_rate=0.3,
               callback=lambda i, l, p: log(f"    {i:3d} loss {l:.4e} a={p['a']:.4g} b={p['b']:.4g}"))
    return {"initial": res.initial, "initial_loss": res.initial_loss, "best": res.best,
            "best_loss": res.best_loss, "reduction": res.initial_loss / res.best_loss,
            "iterations": len(res.history), "stopped": res.stopped, "wall_s": res.wall_s,
            "compile_s": res.compile_s, "target": ">= 10x", "meets_target": res.initial_loss >= 10 * res.best_loss}


def _run(name, overrides, stabilization, t1):
    from diffmb import simulate
    from diffmb.scenarios import get

    system, params, _ = get(name).make(overrides, stabilization)
    tic = time.perf_counter()
    tr = simulate(system, t1=t1, dt=1e-3, params=params, solver="rk4", max_violation=1.0)
    wall = time.perf_counter() - tic
    s = tr.summary()
    return {"status": tr.status, "t_final": float(tr.t_final), "wall_s_incl_compile": wall,
            "violation_position_max": s.get("violation", {}).get("position_max"),
            "energy_max_rel_change": s["energy"]["max_rel_change"],
            "angular_momentum_max_abs_change": s.get("angular_momentum", {}).get("max_abs_change")}


def part_tune3x3(args):
    from diffmb.design.tune import tune

    paper = _run("fold-3x3", {"a": 40.0, "b": 0.0}, "baumgarte", 30.0)
    log(f"    paper gains a=40 b=0: {paper['status']} at t = {paper['t_final']:.3g} s")
    res = tune("fold-3x3", ["a", "b"], t1=args.tune_t1, iterations=args.steps, learning_rate=0.3,
               loss_weights={"w_energy": 1e-3},
               callback=lambda i, l, p: log(f"    {i:3d} loss {l:.4e} a={p['a']:.4g} b={p['b']:.4g}"))
    tuned = _run("fold-3x3", res.best, "baumgarte", 30.0)
    log(f"    tuned {res.best}: {tuned['status']} at t = {tuned['t_final']:.3g} s")
    return {"paper_gains": {"a": 40.0, "b": 0.0, **paper}, "tuned_gains": {**res.best, **tuned},
            "tune_t1": args.tune_t1, "initial_loss": res.initial_loss, "best_loss": res.best_loss,
            "iterations": len(res.history), "wall_s": res.wall_s, "compile_s": res.compile_s,
            "target": "stable 30 s", "meets_target": tuned["status"] == "success"}


def part_fit(args):
    from diffmb.design.fit import fit, synth

    truth = {"K": 0.1, "c": 0.02}
    data, _ = synth("fold-4panel", truth, noise=1e-3, seed=0)
    start = {"K": 3 * truth["K"], "c": 3 * truth["c"]}
    res = fit("fold-4panel", data, ["K", "c"], overrides=start,
              callback=lambda i, c, p: log(f"    {i:3d} cost {c:.4e} K={p['K']:.6g} c={p['c']:.6g}"))
    err = {k: abs(res.params[k] - v) / v for k, v in truth.items()}
    return {"truth": truth, "start": start, "params": res.params, "stderr": res.stderr,
            "rel_error": err, "rms": res.rms, "noise": 1e-3, "samples": int(data.t.size),
            "columns": list(data.names), "iterations": res.iterations, "converged": res.converged,
            "wall_s": res.wall_s, "compile_s": res.compile_s, "target": "within 1 %",
            "meets_target": all(e < 0.01 for e in err.values())}


def part_sweep(args):
    import jax

    from diffmb import simulate
    from diffmb.design.batch import member_values, scenario_batch, sweep
    from diffmb.scenarios import get

    sc = get(args.sweep_scenario)
    ranges = {k: tuple(float(x) for x in v.split(":")) for k, v in (r.split("=") for r in args.ranges)}
    fixed = {k: float(v) for k, v in (r.split("=") for r in args.sweep_set)}
    members = member_values(ranges, fixed, args.batch, sample="random")
    system, params = scenario_batch(sc, members)
    t1 = args.sweep_t1
    res = sweep(system, params, t1=t1, dt=1e-3, solver="rk4", chunk=args.chunk,
                members=members, progress=True)
    log(f"    batched: {res.batch} x {t1:g} s in {res.wall_s:.2f} s (+{res.compile_s:.1f} s compile)")
    # sequential single runs (same settings, one jitted call each), extrapolated
    times = []
    for i in range(args.seq + 1):
        s1, p1, _ = sc.make(members[i])
        tic = time.perf_counter()
        jax.block_until_ready(simulate(s1, t1=t1, dt=1e-3, params=p1, solver="rk4", saveat=1001))
        if i:  # the first call compiles
            times.append(time.perf_counter() - tic)
    single = statistics.median(times)
    seq_total = single * res.batch
    flat = res.table.get("time_to_flat")
    return {"scenario": args.sweep_scenario, "ranges": ranges, "fixed": fixed, "t1": t1,
            "device": str(jax.devices()[0]), "batch": res.batch, "chunk": args.chunk, "batched_wall_s": res.wall_s,
            "batched_compile_s": res.compile_s, "batched_member_s_per_s": res.throughput,
            "single_run_s_median": single, "single_runs_timed": len(times),
            "sequential_wall_s_extrapolated": seq_total,
            "sequential_member_s_per_s": t1 / single,
            "speedup": seq_total / res.wall_s, "target": ">= 5x",
            "meets_target": seq_total / res.wall_s >= 5,
            "statuses": {k: int((res.table["status"] == v).sum()) for k, v in (("success", 0), ("diverged", 2))},
            "time_to_flat_reached": int((flat == flat).sum()) if flat is not None else None}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--steps", type=int, default=40, help="tuning iterations")
    ap.add_argument("--tune-t1", type=float, default=5.0, help="fold-3x3 tuning horizon [s]")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=None,
                    help="members per compiled call (default: diffmb.design.batch.default_chunk)")
    ap.add_argument("--sweep-scenario", default="fold-4panel")
    ap.add_argument("--ranges", nargs="+", default=["K=0.05:0.2", "c=0:0.05"],
                    help="swept parameters, NAME=lo:hi, drawn at random")
    ap.add_argument("--sweep-set", nargs="*", default=[], help="fixed parameters, NAME=value")
    ap.add_argument("--sweep-t1", type=float, default=10.0, help="simulated seconds per member")
    ap.add_argument("--seq", type=int, default=8, help="sequential single runs timed")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_design.json")
    args = ap.parse_args(argv)

    import diffmb  # noqa: F401

    out = {"machine": platform.platform(), "cpu_count": os.cpu_count(), "parts": {}}
    if args.out.exists():  # keep parts measured by earlier invocations
        out["parts"] = json.loads(args.out.read_text()).get("parts", {})
    for part in args.parts:
        log(f"== {part}")
        tic = time.perf_counter()
        out["parts"][part] = {**globals()[f"part_{part}"](args), "elapsed_s": time.perf_counter() - tic,
                              "load_avg": os.getloadavg()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2, default=float) + "\n")
    print()
    for part, r in out["parts"].items():
        keys = [k for k in r if k not in ("statuses",)]
        print(f"{part}: " + ", ".join(f"{k}={_short(r[k])}" for k in keys))
    print(f"\nwrote {args.out}")


def _short(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    return str(v)


if __name__ == "__main__":
    main()
