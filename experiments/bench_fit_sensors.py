"""Benchmark: fitting hinge models to deployment records as tests record them (issue 16).

Cases (``--cases``, default all), the 2x2 map fold (fold-4panel), sensors from
``examples/fold4_sensors.json`` (three panel-corner markers, 0.5 mm noise; a hub gyro,
0.01 deg/s):

``mujoco``   records made by MuJoCo (the pattern as MJCF, two ``connect`` equalities for
             the cut crease, nearly hard), 5 s at 50 Hz; K and c from a 3x-off start.
             Target: within 2 % and inside 3 standard errors.
``tape``     a tape-spring hinge on diffmb's own model, 10 s at 10 Hz, two markers; the
             peak and plateau moments from a 1.3x / 1.2x-off start. Target: peak within 5 %.
``records``  two records (one released with a 0.03 rad/s tip-off spin), each started at
             an unknown time on its clock, one marker 12 mm off its nominal point, a gyro
             bias: K, c, both start times, the offset and the bias in one vmapped fit.

For each: recovered value, error, standard error, error / standard error, iterations,
compile and fit wall time. Writes ``out/bench_fit_sensors.json`` and prints a table.

    python experiments/bench_fit_sensors.py --cases mujoco tape
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from diffmb import scenarios
from diffmb.design.data import Data
from diffmb.design.fit import fit, synth
from diffmb.design.mujoco_record import mujoco_record
from diffmb.design.records import Record
from diffmb.design.sensors import read_sensors
from machine import cpu_pressure

ROOT = Path(__file__).resolve().parents[1]
CASES = ("mujoco", "tape", "records")


def _noisy(data, sensors, seed):
    sigma = np.array([s.sigma for s in sensors for _ in s.columns])
    vals = data.values + sigma * np.random.default_rng(seed).standard_normal(data.values.shape)
    return Data(data.t, data.names, vals, data.path)


def case_mujoco(sensors):
    truth, paper = {"K": 0.1, "c": 0.05}, {"contact": 0.0}   # the paper's model, as MuJoCo runs it
    system, params, _ = scenarios.get("fold-4panel").make({**truth, **paper}, None)
    tic = time.perf_counter()
    ref = mujoco_record(system, params, sensors, t1=5.0, rate=50, path="mujoco")
    mj_s = time.perf_counter() - tic
    ours, _ = synth("fold-4panel", {**truth, **paper}, sensors=sensors, t1=5.0, samples=251, noise=0.0)
    agree = float(np.abs(ours.values - ref.values).max())
    res = fit("fold-4panel", _noisy(ref, sensors, 0), ["K", "c"], sensors=sensors,
              overrides={"K": 0.3, "c": 0.15, **paper})
    return res, truth, {"mujoco_record_s": mj_s, "mujoco_vs_diffmb_max_abs": agree}


def case_tape(sensors):
    sc = scenarios.get("fold-4panel")
    setting = {"hinge": 1.0, "ts_damping": 0.05}
    v = sc.resolve(setting)
    two = sensors[:2]
    data, _ = synth(sc, setting, sensors=two, t1=10.0, samples=101, seed=2)
    res = fit(sc, data, ["ts_Mpeak", "ts_Mplat"], sensors=two,
              overrides={**setting, "ts_Mpeak": 1.3 * v["ts_Mpeak"], "ts_Mplat": 1.2 * v["ts_Mplat"]})
    return res, {"ts_Mpeak": v["ts_Mpeak"], "ts_Mplat": v["ts_Mplat"]}, {}


def case_records(sensors):
    sc = scenarios.get("fold-4panel")
    truth = {"K": 0.1, "c": 0.05}
    nominal = (sensors[0], sensors[1], sensors[3])
    delta = np.array([0.012, -0.008, 0.005])
    bias = np.array([2e-3, -1e-3, 5e-4])
    placed = (type(sensors[0])(**{**sensors[0].__dict__, "point": tuple(np.asarray(sensors[0].point) + delta)}),
              sensors[1], sensors[3])
    records, offsets = [], (0.15, 0.05)
    for k, (spin, t_off) in enumerate(zip((0.0, 0.03), offsets)):
        data, _ = synth(sc, {**truth, "spin": spin}, sensors=placed, t1=3.0, samples=61, t_offset=t_off, seed=10 + k)
        vals = data.values.copy()
        vals[:, -3:] += bias
        records.append(Record(Data(data.t, data.names, vals, f"run{k}.csv"), {"spin": spin}))
    res = fit(sc, records, ["K", "c", "t_offset", "offset.tip_j", "bias.hub"], sensors=nominal,
              overrides={"K": 0.2, "c": 0.1})
    true = {**truth, "t_offset[run0]": offsets[0], "t_offset[run1]": offsets[1],
            **{f"offset.tip_j.{a}": v for a, v in zip("xyz", delta)},
            **{f"bias.hub.{a}": v for a, v in zip("xyz", bias)}}
    return res, true, {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_fit_sensors.json")
    args = ap.parse_args()
    system, _, _ = scenarios.get("fold-4panel").make({}, None)
    sensors = read_sensors(ROOT / "examples" / "fold4_sensors.json", system)
    out = {"machine": platform.processor() or platform.machine(),
           "cpu_pressure": cpu_pressure(), "cases": {}}
    rows = []
    for name in args.cases:
        res, true, extra = globals()[f"case_{name}"](sensors)
        params = {}
        for p, v in true.items():
            err = res.params[p] - v
            params[p] = {"true": v, "fitted": res.params[p], "error": err,
                         "rel_error": err / v if v else None, "stderr": res.stderr[p],
                         "sigmas": err / res.stderr[p] if res.stderr[p] > 0 else None}
            rel = f"{100 * err / v:+.3f} %" if v else f"{err:+.2e}"
            rows.append((name, p, f"{v:.6g}", f"{res.params[p]:.6g}", rel, f"{res.stderr[p]:.2e}",
                         f"{err / res.stderr[p]:+.2f}"))
        out["cases"][name] = {"params": params, "iterations": res.iterations, "converged": res.converged,
                              "compile_s": res.compile_s, "fit_wall_s": res.wall_s,
                              "records": res.records, "warnings": res.warnings, **extra}
        rows.append((name, f"-> {res.iterations} iterations", f"compile {res.compile_s:.1f} s",
                     f"fit {res.wall_s:.1f} s", "", "", ""))
        print(f"{name}: done ({res.iterations} iterations, compile {res.compile_s:.1f} s, fit {res.wall_s:.1f} s)",
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    head = ("case", "parameter", "true", "fitted", "error", "stderr", "err/se")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
