"""What contact costs a sweep: the same batched fold sweep with ``contact=0`` (the paper's
model; the detector still runs at the save points) and ``contact=1`` (two-tier barriers),
in one process, alternating, so that the machine's load is shared (issue 58's target: a
sweep with contact keeps at least 50 % of the no-contact sweep's member-s/s).

Each member draws the hinge stiffness ``K`` and damping ``c`` at random (seed 0, the same
members for both), and runs ``--horizon`` seconds of fixed-step RK4 at ``--dt`` under
Baumgarte, or with ``--adaptive`` the scenario's default (projection + Dopri5), saving
``--saveat`` points (:func:`diffmb.design.batch.sweep`, chunked as a sweep chunks on this device).
Reported per case, batch and contact setting: compile time (ahead of time, apart), the
median wall time of ``--repeats`` runs (the two settings alternating run by run),
member-seconds simulated per wall second, the ratio with contact over without (of the
medians, and the median of the runs' paired ratios), the members' statuses, and whether every member
reports its contact columns (``min_crease_margin``, ``min_contact_gap``,
``contact_overflow``; with contact off ``crease_overfold``, ``panel_overlap``; the pair
columns only where some panels share no vertex). Writes ``out/bench_contact_sweep.json`` and prints a table.

    python experiments/bench_contact_sweep.py                      # fold4, map3, map4 x 16, 64
    python experiments/bench_contact_sweep.py --cases map6 --batches 256 --horizon 1
    python experiments/bench_contact_sweep.py --smoke              # seconds, for CI
    python experiments/bench_contact_sweep.py --cases map4 --batches 16 --horizon 1 --adaptive --saveat 1001
    python experiments/bench_contact_sweep.py --cases map4 --batches 16 --horizon 1 --adaptive --rest-damping 0

The cases, their scenarios and the members' ranges are ``bench_batch.py``'s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

from bench_batch import RANGES, SCENARIOS, _case
from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
#: what a member reports about its panels, with contact off and on
COLUMNS = {0: ("crease_overfold", "panel_overlap"), 1: ("min_crease_margin", "min_contact_gap", "contact_overflow")}
PAIR_COLUMNS = ("panel_overlap", "min_contact_gap", "contact_overflow")


def _setup(name, batch, contact, horizon, dt, adaptive=False, rest_damping=None):
    """The members, the batched system and its parameters, and the run's settings of one
    case and contact setting."""
    from diffmb import scenarios
    from diffmb.design.batch import member_values, scenario_batch

    kind, n = _case(name)
    fixed = ({"contact": float(contact)}
             | ({"contact_rest_damping": rest_damping} if contact and rest_damping is not None else {})
             | ({} if kind == "fold" else {"rows": float(n), "cols": float(n)}))
    members = member_values(RANGES[kind], fixed, batch, sample="random", seed=0)
    scenario = scenarios.get(SCENARIOS[kind])
    # fixed-step RK4 under Baumgarte, or the scenario's default (projection + Dopri5)
    system, params = scenario_batch(scenario, members, None if adaptive else "baumgarte")
    run = dict(scenario.run_settings(t1=horizon)) if adaptive else {"dt": dt, "solver": "rk4"}
    run.pop("t1", None)
    return system, params, members, run


def run_pair(name, batch, horizon, dt, repeats, adaptive=False, saveat=11, rest_damping=None):
    """Both contact settings of one case: each compiled by its first run, then timed
    ``repeats`` times, alternating (off, on, on, off, ...), so that the machine's load
    drifts alike over both. Two rows, off and on; the row with contact carries the median
    of the paired ratios (``paired_ratio``) beside the ratio of the medians."""
    import jax
    import numpy as np

    from diffmb.design.batch import sweep

    setups = {c: _setup(name, batch, c, horizon, dt, adaptive, rest_damping) for c in (0, 1)}

    def once(c):
        system, params, members, run = setups[c]
        return sweep(system, params, t1=horizon, saveat=saveat, members=members, max_violation=None, **run)

    first = {c: once(c) for c in (0, 1)}                      # the first run compiles
    walls = {0: [], 1: []}
    for i in range(max(1, repeats)):
        for c in ((0, 1) if i % 2 == 0 else (1, 0)):
            walls[c].append(once(c).wall_s)
    rows = []
    for c in (0, 1):
        system, res = setups[c][0], first[c]
        table = res.table
        # a pattern whose panels all share a vertex (fold-4panel) has no pair to report
        wanted = [k for k in COLUMNS[c] if system.elements[0].pairs or k not in PAIR_COLUMNS]
        reported = all(k in table and len(np.asarray(table[k])) == batch for k in wanted)
        wall = statistics.median(walls[c])
        gap = np.asarray(table["min_contact_gap"], float) if "min_contact_gap" in table else None
        rows.append({"case": name, "batch": batch, "contact": c, "panels": len(system.elements[0].panel_names),
                     "pairs": len(system.elements[0].pairs), "compile_s": res.compile_s, "wall_s": wall,
                     "walls_s": walls[c], "throughput": batch * horizon / wall, "statuses": res.status_counts,
                     "reports_contact": reported,
                     "min_gap_m": None if gap is None or not np.isfinite(gap).any() else float(np.nanmin(gap)),
                     "device": str(jax.devices()[0])})
    rows[1]["paired_ratio"] = statistics.median(a / b for a, b in zip(walls[0], walls[1]))
    return rows


def print_table(rows):
    print(f"{'case':8} {'batch':>6} {'contact':>7} {'compile s':>9} {'wall s':>8} {'member-s/s':>11} "
          f"{'ratio':>6} {'paired':>6}  statuses")
    base = {(r["case"], r["batch"]): r["throughput"] for r in rows if r["contact"] == 0}
    for r in rows:
        ratio = r["throughput"] / base[(r["case"], r["batch"])] if (r["case"], r["batch"]) in base else float("nan")
        r["ratio"] = ratio
        paired = f"{r['paired_ratio']:6.2f}" if "paired_ratio" in r else f"{'':6}"
        print(f"{r['case']:8} {r['batch']:6d} {r['contact']:7d} {r['compile_s']:9.2f} {r['wall_s']:8.3f} "
              f"{r['throughput']:11.1f} {ratio:6.2f} {paired}  {r['statuses']}"
              + ("" if r["reports_contact"] else "  (contact columns missing)"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["fold4", "map3", "map4"])
    ap.add_argument("--batches", nargs="+", type=int, default=[16, 64])
    ap.add_argument("--horizon", type=float, default=0.5)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--adaptive", action="store_true",
                    help="the scenario's default run (projection + Dopri5) instead of RK4 at --dt")
    ap.add_argument("--saveat", type=int, default=11, help="save points per member (a sweep's default: 1001)")
    ap.add_argument("--rest-damping", type=float, default=None,
                    help="contact_rest_damping of the members with contact (a damping ratio; default: the "
                         "scenarios' default)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (CI)")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_contact_sweep.json"))
    a = ap.parse_args(argv)
    if a.smoke:
        a.cases, a.batches, a.horizon, a.repeats = ["map3"], [4], 0.02, 1
    rows, out = [], Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in a.cases:
        for batch in a.batches:
            rows += run_pair(name, batch, a.horizon, a.dt, a.repeats, a.adaptive, a.saveat, a.rest_damping)
            # after every case, so that a run cut short keeps what it finished
            out.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                       "cpu_pressure": cpu_pressure(), "horizon": a.horizon, "dt": a.dt,
                                       "adaptive": a.adaptive, "saveat": a.saveat, "rest_damping": a.rest_damping,
                                       "repeats": a.repeats, "rows": rows}, indent=1))
    print_table(rows)
    print(f"wrote {out}  (cpu pressure: {cpu_pressure()})")
    return rows


if __name__ == "__main__":
    main()
