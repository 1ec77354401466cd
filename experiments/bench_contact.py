"""What contact costs: each origami case with ``contact=0`` (the paper's model; the
detector still runs at the save points) beside ``contact=1`` (two-tier barriers), in one
run of this script so that the machine's load is shared.

For every case: the time to build the system (``build_s``: the start state and, with a
pattern's panels, the start check), compile time (ahead of time,
:func:`diffmb.simulation.integrate.compile_simulation`),
the median time per fixed RK4 step over ``--repeats`` runs of ``--horizon`` seconds at
``--dt`` (the per-step cost of the vector field, contact term included), the ratio of the
two, and of the adaptive default (projection + Dopri5) over ``--adaptive`` seconds: steps,
compile and wall time, the largest crease angle, the deepest overlap and the status. The growth
exponent ``p`` of the contact term's extra cost per step ``~ panels^p`` is fitted over the
map folds. Writes ``out/bench_contact.json`` and prints a table.

    python experiments/bench_contact.py                   # fold-4panel, fold-2x4, map 4, 6, 10
    python experiments/bench_contact.py --maps 4 10 20 --horizon 0.05
    python experiments/bench_contact.py --maps 10 --start 1.5 --adaptive 0   # layers armed
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path

import jax


def _pressure():
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None


def case(name, values, contact, horizon, dt, repeats, adaptive, from_t=0.0):
    from diffmb import scenarios
    from diffmb.simulation import health
    from diffmb.simulation.integrate import compile_simulation

    sc = scenarios.get(name)
    start = time.perf_counter()
    system, params, _ = sc.make({**values, "contact": float(contact)})
    build_s = time.perf_counter() - start
    if from_t > 0:   # the per-step cost from where the default run is at ``from_t`` (pairs armed by then)
        from diffmb.simulation.integrate import simulate

        x = simulate(system, params=params, saveat=2, diagnostics=False, **sc.run_settings(t1=from_t)).xs[-1]
        q, qd = system.split(x)
        params = {**params, "q0": q, "qd0": qd}
    run, compile_s = compile_simulation(system, params=params, t1=horizon, dt=dt, solver="rk4", saveat=2,
                                        diagnostics=False)
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        tr = run()
        jax.block_until_ready(tr.xs)
        walls.append(time.perf_counter() - t)
    steps = max(1, int(tr.n_steps))
    row = {"case": name + "".join(f" {k}={v:g}" for k, v in values.items()), "contact": contact,
           "panels": len(system.elements[0].panel_names), "pairs": len(system.elements[0].pairs),
           "build_s": build_s, "compile_s": compile_s, "us_per_step": 1e6 * statistics.median(walls) / steps,
           "rk4_steps": steps}
    if adaptive > 0:
        run, row["adaptive_compile_s"] = compile_simulation(system, params=params, saveat=101,
                                                            **sc.run_settings(t1=adaptive))
        t = time.perf_counter()
        tr = run()
        jax.block_until_ready(tr.xs)
        row["adaptive_wall_s"] = time.perf_counter() - t
        row["adaptive_steps"] = int(tr.n_steps)
        warnings = health.check(tr, (), system=system, params=params)
        m = system.elements[0].metrics(tr.diagnostics, jax.numpy.isfinite(tr.ts), params["elements"][0])
        row["max_crease_deg"] = math.degrees(float(m.get("max_crease_angle", float("nan"))))
        row["overlap_m"] = float(m.get("panel_overlap", 0.0))
        row["status"] = "suspect" if any(w["kind"] in ("crease_overfold", "panel_overlap") for w in warnings) \
            else tr.status
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", type=int, nargs="*", default=[4, 6, 10])
    ap.add_argument("--horizon", type=float, default=0.1)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--adaptive", type=float, default=1.0, help="seconds of the default adaptive run (0: none)")
    ap.add_argument("--start", type=float, default=0.0,
                    help="time [s] of the default run from which the fixed steps start (0: the stowed start)")
    ap.add_argument("--out", default="out/bench_contact.json")
    a = ap.parse_args()
    cases = [("fold-4panel", {}), ("fold-2x4", {})] + [("map-fold", {"rows": float(n), "cols": float(n)})
                                                      for n in a.maps]
    before = _pressure()
    rows = []
    for name, values in cases:
        for contact in (0, 1):
            r = case(name, values, contact, a.horizon, a.dt, a.repeats, a.adaptive, a.start)
            rows.append(r)
            print(json.dumps(r), flush=True)
    pairs = [(rows[i], rows[i + 1]) for i in range(0, len(rows), 2)]
    maps = [(off, on) for off, on in pairs if off["case"].startswith("map-fold")]
    growth = None
    if len(maps) >= 2:
        xs = [math.log(off["panels"]) for off, _ in maps]
        ys = [math.log(max(on["us_per_step"] - off["us_per_step"], 1e-3)) for off, on in maps]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        growth = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    out = {"device": f"{platform.processor() or platform.machine()} ({jax.devices()[0].platform}, "
                     f"{len(jax.devices())} device)", "jax": jax.__version__,
           "date": time.strftime("%Y-%m-%d"), "start": a.start, "horizon": a.horizon, "dt": a.dt, "repeats": a.repeats,
           "pressure_before": before, "pressure_after": _pressure(), "rows": rows,
           "contact_term_growth_exponent": growth}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"\n{'case':24s} {'panels':>6s} {'us/step off':>11s} {'on':>9s} {'ratio':>6s} "
          f"{'build off':>9s} {'on':>5s} {'compile off':>11s} {'on':>6s} {'dopri5 steps, wall off/on':>28s} "
          f"{'crease deg off/on':>18s} "
          f"{'status off / on'}")
    for off, on in pairs:
        adapt = (f"{off.get('adaptive_steps', '-')}/{on.get('adaptive_steps', '-')} "
                 f"{off.get('adaptive_wall_s', float('nan')):.2f}/{on.get('adaptive_wall_s', float('nan')):.2f} s")
        crease = f"{off.get('max_crease_deg', float('nan')):.1f}/{on.get('max_crease_deg', float('nan')):.1f}"
        print(f"{off['case']:24s} {off['panels']:6d} {off['us_per_step']:11.0f} {on['us_per_step']:9.0f} "
              f"{on['us_per_step'] / off['us_per_step']:6.2f} {off['build_s']:9.1f} {on['build_s']:5.1f} "
              f"{off['compile_s']:11.1f} {on['compile_s']:6.1f} "
              f"{adapt:>28s} {crease:>18s} {off.get('status', '-')} / {on.get('status', '-')}")
    if growth is not None:
        print(f"contact term's extra cost per step ~ panels^{growth:.2f} over the map folds")
    print(f"device: {out['device']}; CPU pressure before: {before}; after: {out['pressure_after']}")


if __name__ == "__main__":
    main()
