"""``diffmb tune SCENARIO --params a,b [--iterations N] [--t1 S] [--loss violation|deploy|vibration] [--json FILE]``
-> JSON ``{initial: {params, loss}, final: {params, loss}, history: [...]}``."""

from __future__ import annotations

import math
import sys

from ..design.tune import LOSSES, tune
from ..simulation.integrate import FIXED_SOLVERS
from ._common import (
    INTERRUPTED,
    UsageError,
    check_kept,
    check_outputs,
    deprecated,
    design_args,
    emit,
    interrupts,
    names,
    one_line_errors,
    parse_sets,
    run_settings,
    scenario_of,
    stop_if_interrupted,
)


def add_parser(sub):
    t = sub.add_parser("tune", help="tune parameters by gradient descent", description=(
        "Tune scenario parameters (e.g. Baumgarte gains a,b) with Adam on a loss of the run."))
    design_args(t)
    t.add_argument("--params", required=True, metavar="A,B", help="parameters to tune")
    t.add_argument("--iterations", type=int, default=50, metavar="N",
                   help="at most N optimiser (Adam) iterations (default 50; tuning stops earlier at the "
                        "integrator's floor or when the loss stops improving)")
    deprecated(t, "--steps", "--iterations", type=int, metavar="N")
    t.add_argument("--learning-rate", type=float, default=0.1, metavar="RATE",
                   help="Adam's learning rate, in log space (default 0.1)")
    deprecated(t, "--lr", "--learning-rate", type=float, metavar="RATE")
    t.add_argument("--loss", default="violation", metavar="NAME",
                   help=f"{', '.join(LOSSES)}, or one of the scenario's own (solar-sail-slew: slew)")
    t.add_argument("--weight-energy", type=float, default=0.0, metavar="W",
                   help="the violation loss's weight on energy drift (default 0)")
    deprecated(t, "--w-energy", "--weight-energy", type=float, metavar="W")
    t.add_argument("--weight-momentum", type=float, default=0.0, metavar="W",
                   help="the violation loss's weight on angular-momentum drift (default 0)")
    deprecated(t, "--w-momentum", "--weight-momentum", type=float, metavar="W")


@one_line_errors
def main(args) -> int:
    check_outputs(json_path=args.json)
    check_kept(args)
    sc = scenario_of(args)
    st = run_settings(args, sc)
    if args.iterations < 1:
        raise UsageError(f"--iterations must be at least 1, got {args.iterations}")
    params = names(args.params)

    def show(i, loss, p):
        if not args.quiet:
            print(f"  {i:4d}  loss {loss:.6e}  " + "  ".join(f"{k}={v:.6g}" for k, v in p.items()),
                  file=sys.stderr, flush=True)

    stop_if_interrupted()
    with interrupts() as interrupted:
        res = tune(sc, params, overrides=parse_sets(args.sets), stabilization=args.stabilization,
                   iterations=args.iterations, learning_rate=args.learning_rate, loss=args.loss,
                   loss_weights=({"w_energy": args.weight_energy, "w_momentum": args.weight_momentum}
                                 if args.loss == "violation" else None), callback=show,
                   stop=interrupted, **st)
    obj = {"scenario": sc.name, **res.to_json()}
    if res.stopped == "floor" and not res.history:
        # (design.tune.integrator_floor: a fixed step halved, an adaptive run's tolerances / 100)
        how, lower = (("step-halving error", "a smaller --dt lowers") if st["solver"] in FIXED_SOLVERS else
                      ("error, against the run at 1/100 of its tolerances", "tighter --rtol and --atol lower"))
        emit(args, obj, [f"loss {res.initial_loss:.3e} at " + _fmt(res.initial) + " is already at the "
                         f"integrator's floor ({res.floor:.3e}: the run's own {how}): "
                         f"the constraints are held below what the integrator resolves; nothing "
                         f"to tune ({lower} the floor)"])
        return 0
    ratio = res.initial_loss / res.best_loss if res.best_loss > 0 else math.inf
    why = (f"reached the integrator's floor {res.floor:.3e}" if res.stopped == "floor" else res.stopped)
    emit(args, obj, [f"initial loss {res.initial_loss:.6e} at " + _fmt(res.initial),
                     f"best    loss {res.best_loss:.6e} at " + _fmt(res.best),
                     f"reduction {ratio:.3g}x in {len(res.history)} iterations ({why}); "
                     f"{res.wall_s:.1f} s + {res.compile_s:.1f} s compile"])
    if res.stopped == "interrupted":
        kept = f"; written to {args.json}" if args.json else ""
        print(f"diffmb: interrupted after {len(res.history)} iterations; the best values are "
              f"printed above{kept}", file=sys.stderr)
        return INTERRUPTED
    return 0


def _fmt(d):
    return ", ".join(f"{k}={v:.6g}" for k, v in d.items())
