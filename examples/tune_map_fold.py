"""Baumgarte gains for a 10 x 10 map fold at a coarse RK4 step (10 ms), tuned by gradient.

The small origami cases hold their closures below the integrator's own error with the
gains tried (``diffmb tune fold-4panel`` stops at once: "floor"; a 4 x 4 fold at 10 ms
starts below it too). A large fold does not: a closure of the 10 x 10 fold closes a
loop of up to 19 joints (11 on average; 5 at 3 x 3), so the joint errors of a coarse step
add up, over lever arms of metres, to a drift of the closure points above the
step-halving error of the motion itself (the floor, :func:`diffmb.design.tune.integrator_floor`).
Started from the textbook gains a = b = 5 (a common choice for
``w_dot + 2 a w + b^2 phi = 0``), Adam descends the time integral of the squared violation
through the whole 1,000-step run, gradients through every step. The fold is the paper's
model (``contact=0``): fixed 10 ms steps do not resolve contact's barriers.

Measured (2-core CPU, 10 iterations): loss 5.0e-16 -> 1.1e-17 (45x) at a = 74, b = 75,
3.7x the floor (3.0e-18); largest violation 9.3 nm -> 0.50 nm (the defaults: 2.7 nm).

Prints the loss before and after, the floor, the largest violation and the cost per step
for the textbook gains, the tuned ones and the scenario's defaults (a = 40, b = 0), and writes
``out/tune_map_fold.json``:

    python examples/tune_map_fold.py [--rows 10] [--cols 10] [--dt 0.01] [--t1 10] [--steps 10]

The violations are nanometres: float64 and the paper's soft hinges (K = 0.01 N m/rad)
keep them small in absolute terms; what the tuning buys is the factor, at no cost per
step (the gains are numbers in the same compiled run).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from diffmb import scenarios
from diffmb.design.tune import tune
from diffmb.simulation.integrate import compile_simulation


def measure(overrides, gains, *, dt, t1, repeats=3):
    """``(largest closure violation [m], median seconds per step)`` of the run with ``gains``."""
    system, params, _ = scenarios.get("map-fold").make({**overrides, "a": gains[0], "b": gains[1]}, "baumgarte")
    run, _ = compile_simulation(system, t1=t1, dt=dt, solver="rk4", params=params, saveat=201)
    times = []
    for _ in range(repeats):
        tic = time.perf_counter()
        tr = run()
        viol = float(np.nanmax(np.abs(np.asarray(tr.violation["position"]))))
        times.append(time.perf_counter() - tic)
    return viol, float(np.median(times)) / round(t1 / dt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--cols", type=int, default=10)
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--t1", type=float, default=10.0)
    ap.add_argument("--start", default="5,5", help="starting gains a,b (default: the textbook 5,5)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--json", default="out/tune_map_fold.json")
    ap.add_argument("--no-measure", action="store_true", help="skip the violation and cost-per-step runs")
    args = ap.parse_args(argv)
    a0, b0 = (float(x) for x in args.start.split(","))
    # the paper's model: a fixed 10 ms step does not resolve contact's barriers (on by default)
    shape = {"rows": args.rows, "cols": args.cols, "contact": 0.0}
    res = tune("map-fold", ["a", "b"], overrides={**shape, "a": a0, "b": b0}, solver="rk4", dt=args.dt,
               t1=args.t1, iterations=args.steps, learning_rate=args.lr,
               callback=lambda i, loss, p: print(f"{i:3d}  loss {loss:.3e}  a={p['a']:.4g}  b={p['b']:.4g}",
                                                 flush=True))
    out = {"case": {**shape, "dt": args.dt, "t1": args.t1, "solver": "rk4"}, "floor": res.floor,
           "stopped": res.stopped, "iterations": len(res.history), "wall_s": res.wall_s,
           "compile_s": res.compile_s, "start": {"gains": res.initial, "loss": res.initial_loss},
           "tuned": {"gains": res.best, "loss": res.best_loss}}
    print(f"floor (step-halving error of the motion) {res.floor:.3e}")
    print(f"start a={a0:g} b={b0:g}: loss {res.initial_loss:.3e}")
    print(f"tuned a={res.best['a']:.4g} b={res.best['b']:.4g}: loss {res.best_loss:.3e} "
          f"({res.initial_loss / res.best_loss:.1f}x lower, {res.best_loss / res.floor:.1f}x the floor; "
          f"{len(res.history)} iterations, {res.wall_s:.0f} s + {res.compile_s:.0f} s compile, stopped: {res.stopped})")
    if not args.no_measure:
        for key, gains in (("start", (a0, b0)), ("tuned", (res.best["a"], res.best["b"])), ("default", (40.0, 0.0))):
            viol, per_step = measure(shape, gains, dt=args.dt, t1=args.t1)
            out.setdefault(key, {"gains": dict(zip("ab", gains))}).update(max_violation_m=viol, s_per_step=per_step)
            print(f"{key:6s} a={gains[0]:.4g} b={gains[1]:.4g}: largest violation {viol:.3e} m, "
                  f"{per_step * 1e6:.0f} us/step")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
