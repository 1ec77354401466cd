"""``diffmb run SCENARIO|MODEL-FILE [options]``: simulate, write npz / CSV / JSON / plots.

How a run works
---------------
The run is :mod:`diffmb.simulation.resumable`'s: the horizon is split into ``--segments N`` time
segments (default: about 1000 steps a segment, at most 20 segments, never more than
50 000 steps a segment), each a whole number of steps of ``dt``, one compilation for them
all; the step never changes with the segmenting, and ``--segments`` above the step count
is refused (a segment needs a step). That module says how the segments and the saved
points are laid out.

Before compiling, the run says (stderr, unless ``--quiet``) how many steps of which size
it takes in how many segments; after the first segment, when more than
``ESTIMATE_AFTER_S`` (10 s) seem to be left, how long the first segment took and about how
long the rest will.

After the first segment, and then at most once a second, the run so far is written to
``<out>/<scenario>.partial.npz``. Ctrl-C keeps that file, brought up to the last finished
segment (exit code 130; the segment in flight finishes first, a second Ctrl-C stops at
once) and ``--resume`` continues from it when its scenario, model file, parameters,
solver, dt, t1 (and stabilization, rtol, atol and segment count) match; when they do not,
``--resume`` is refused (exit 2, naming what differs) unless ``--discard`` is also given
(then it starts fresh). A partial file is never replaced unasked: a run into a folder
that holds one, given neither ``--resume`` nor ``--discard``, is refused before any work
(exit 2), naming the file, the time it holds and both ways on; ``--discard`` alone
removes it and starts fresh.

Output paths are checked before any work. At the end ``<out>/<scenario>.npz``
(``complete=True``), ``<out>/<scenario>.csv`` and the plots ``<out>/<scenario>_*.png``
are written and the partial file is removed (``--animate``: also ``<out>/<scenario>.gif``,
origami scenarios only; ``--view``: also ``<out>/<scenario>.html``, see ``diffmb view``).
When ``<out>/<scenario>.npz`` already holds the run of another
scenario, model file (two files with one stem: ``fourbar.urdf``, ``fourbar.xml``) or other
parameters, one warning line says so before any work (it is still replaced: give another
``--out`` to keep both); a re-run of the same case (whatever its t1, dt or solver)
replaces it quietly. A segment that ends with an event or a divergence stops the run:
what was computed is kept and written as usual.

Timing: ``build_s`` is building the system from the scenario's numbers (the model, the
closures' start state, an origami pattern's start check), its few small programs' compile
included; ``compile_s`` is the ahead-of-time compile of the segment (trace, lower, XLA
compile: :func:`~diffmb.simulation.integrate.compile_simulation`), done once before the first
segment (``compile_cached``: how many of its programs were read back from the command
line's persistent compilation cache instead, :mod:`diffmb.simulation.compile_cache`); ``wall_s``
is the time of the compiled segments, i.e. the simulation alone.
Nothing is run twice. File writing and plotting are not included. After ``--resume``
both cover only this process, while ``steps`` counts the whole trajectory.

Status: ``success`` (reached ``t1``), ``suspect`` (reached ``t1``, but the energy or
angular momentum jumped in one save interval: :mod:`diffmb.simulation.health`; or a
closed chain is locked at its start state, mobility 0: nothing could fold; or, in an
origami run, a crease folded past 180 degrees or two panels passed through each other:
:mod:`diffmb.origami.contact`, the JSON's ``contact``; the JSON's
``warnings`` say where and by how much, and they are printed), ``event`` (a termination event stopped it) or
``diverged`` (non-finite state, violation above bound, step-size collapse — and also
diffrax's ``max_steps``, which a fixed-step segment never reaches and an adaptive segment
reaches only when its step size has collapsed). Exit code 0 for ``success``,
``suspect`` and ``event``, 1 for ``diverged``, 2 for bad input, 130 when interrupted.
"""


from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .. import scenarios
from ..origami.start_state import LockedPattern, PatternNote
from ..scenarios.origami import outlines
from ..simulation import compile_cache, health, resumable, trajectory
from ..simulation.integrate import FIXED_SOLVERS
from ..simulation.resumable import (
    PartialRunExists,
    ResumeMismatch,
    SegmentedRun as RunResult,
    Start,
    default_segments,
    fixed_steps,
)
from . import _common
from ._common import (
    UsageError,
    check_outputs,
    deprecated,
    fail,
    finite,
    json_arg,
    out_arg,
    parse_sets,
    quiet_arg,
    run_args,
    run_settings,
    scenario_args,
    scenario_of,
    stabilization_arg,
    table,
    write_json,
)

#: After the first segment, the remaining wall time is estimated when it is at least this.
ESTIMATE_AFTER_S = 10.0


def add_parser(sub):
    r = sub.add_parser("run", help="simulate a scenario", description=(
        "Simulate a scenario (defaults from the scenario; see `diffmb list`) in resumable time "
        "segments. Writes <out>/<scenario>.npz, .csv and plots; --json writes a summary."))
    scenario_args(r, model_files=True)
    run_args(r, help_dt="step [s] (fixed-step solvers) or first step (adaptive)")
    stabilization_arg(r)
    out_arg(r)
    json_arg(r, "a summary")
    quiet_arg(r, "no progress bar, no summary table")
    r.add_argument("--no-plot", action="store_true", help="do not write plots")
    r.add_argument("--animate", action="store_true",
                   help="write <out>/<scenario>.gif, a 3-D animation (origami scenarios)")
    r.add_argument("--view", action="store_true",
                   help="write <out>/<scenario>.html, the run in 3-D as one web page (diffmb view)")
    r.add_argument("--segments", type=int, metavar="N",
                   help="split the run into N time segments, each a whole number of steps of dt, kept "
                        "in <out>/<scenario>.partial.npz as they finish (at most the step count; "
                        "default: automatic, at most 50000 steps a segment)")
    deprecated(r, "--chunks", "--segments", type=int, metavar="N")
    r.add_argument("--resume", action="store_true",
                   help="continue from <out>/<scenario>.partial.npz; refused (exit 2) when its "
                        "settings differ from this run's (add --discard to start fresh then)")
    r.add_argument("--discard", action="store_true",
                   help="replace <out>/<scenario>.partial.npz: start fresh (with --resume: only "
                        "when it does not match). Without --resume or --discard a run into a "
                        "folder holding a partial file is refused")


# --------------------------------------------------------------------------- resolve
@dataclass
class RunConfig:
    name: str
    system: object
    params: object
    values: dict
    t1: float
    dt: float | None
    solver: str
    rtol: float
    atol: float
    stabilization: str
    out: Path
    json_path: Path | None
    plot: bool
    quiet: bool
    segments: int
    segments_given: bool
    resume: bool
    animate: bool = False
    discard: bool = False
    conserved: tuple | None = None  # diagnostics the physics conserves (health checks)
    view: bool = False
    #: a MODEL-FILE run's source: the file's absolute path (and ``--closures``, ``--key``);
    #: None for a registered scenario
    model: str | None = None
    #: what the build said: ``(is_warning, sentence)`` (a crease pattern's notes, a locked pattern)
    notes: tuple = ()
    #: seconds spent building the system (``sc.make``), its small programs' compile included
    build_s: float = 0.0

    @property
    def plan(self) -> resumable.Plan:
        return resumable.Plan(t1=self.t1, dt=self.dt, solver=self.solver, rtol=self.rtol, atol=self.atol,
                              segments=self.segments)

    @property
    def identity(self) -> dict:
        """What the run is (its files record it, ``--resume`` compares it)."""
        return {"scenario": self.name, "model": self.model, "parameters": self.values,
                "stabilization": self.stabilization}

    @property
    def partial_path(self) -> Path:
        return resumable.partial_path(self.out, self.name)

    @property
    def fixed(self) -> bool:
        return self.plan.fixed

    @property
    def steps(self) -> int | None:
        """The fixed steps of the whole run (None for adaptive solvers)."""
        return self.plan.steps

    def meta(self, **extra) -> dict:
        return resumable.metadata(self.plan, self.identity, **extra)


def resolve(args) -> RunConfig:
    """Scenario defaults + options -> a validated RunConfig (ValueError/UsageError on bad input)."""
    sc = scenario_of(args)
    stabilization = args.stabilization or sc.stabilization
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PatternNote)
        system, params, values = sc.make(parse_sets(args.sets), stabilization)
    build_s = time.perf_counter() - start
    notes = []
    for w in caught:
        if issubclass(w.category, PatternNote):
            notes.append((w.category is LockedPattern, str(w.message)))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    st = run_settings(args, sc)
    t1, dt, solver = st["t1"], st["dt"], st["solver"]
    if args.segments is not None and args.segments < 1:
        raise UsageError(f"--segments must be at least 1, got {args.segments}")
    fixed = dt is not None and solver in FIXED_SOLVERS
    if fixed and args.segments is not None and args.segments > fixed_steps(t1, dt):
        n = fixed_steps(t1, dt)
        raise UsageError(f"--segments {args.segments} is more than the {n} steps of this run "
                         f"(t1 {t1:g} s in steps of dt {dt:g} s): a segment holds whole steps; give at most "
                         f"--segments {n}, or a smaller --dt")
    check_outputs(out_dir=args.out, json_path=args.json)
    segments = args.segments or default_segments(t1, dt if fixed else None)
    return RunConfig(
        name=sc.name, system=system, params=params, values=values, t1=t1, dt=dt,
        solver=solver, rtol=st["rtol"], atol=st["atol"], stabilization=stabilization,
        out=args.out, json_path=args.json, plot=not args.no_plot, quiet=args.quiet,
        segments=int(segments), segments_given=args.segments is not None, resume=args.resume,
        animate=bool(getattr(args, "animate", False)), discard=bool(getattr(args, "discard", False)),
        conserved=tuple(sc.conserved(values)), model=model_source(args),
        view=bool(getattr(args, "view", False)), notes=tuple(notes), build_s=build_s,
    )


def model_source(args) -> str | None:
    """What a MODEL-FILE run was made from (``<abs path>[ --closures <abs path>][ --key K]``),
    recorded in the metadata; None for a registered scenario."""
    name = str(args.scenario)
    if name in scenarios.REGISTRY or not name.lower().endswith((".urdf", ".xml", ".fold", ".svg")):
        return None
    closures, key = getattr(args, "closures", None), getattr(args, "key", None)
    start = "".join(f" --{flag} {getattr(args, k)}" for k, flag in
                    (("frame", "frame"), ("fold_fraction", "fold-fraction"), ("drive", "drive"))
                    if getattr(args, k, None) is not None)
    return (os.path.abspath(name) + (f" --closures {os.path.abspath(closures)}" if closures else "")
            + (f" --key {key}" if key is not None else "") + start)


def _note(cfg: RunConfig, msg: str):
    if not cfg.quiet:
        print(f"diffmb: {msg}", file=sys.stderr)


def check_partial(cfg: RunConfig):
    """Refuse (UsageError) a run into a folder holding a partial file when neither
    ``--resume`` nor ``--discard`` says what to do with it."""
    if cfg.resume or cfg.discard:
        return
    try:
        resumable.check_partial(cfg.out, cfg.name, cfg.plan, cfg.identity, segments_given=cfg.segments_given)
    except PartialRunExists as e:
        raise UsageError(f"{e.path} holds {e.held}; add --resume to continue it{e.why}, or --discard to "
                         f"replace it (or give another --out to keep it)") from None


def _shown(model: str | None, scenario) -> str:
    if model is None:
        return f"scenario {scenario}"
    return model.replace(os.getcwd() + os.sep, "")


def warn_replaced(cfg: RunConfig):
    """One warning line when ``<out>/<name>.npz`` holds the run of another scenario, model
    file or other parameters (it will be replaced); nothing for a re-run of the same case."""
    path = resumable.final_path(cfg.out, cfg.name)
    if not path.exists():
        return
    peek = resumable.peek(path)
    if peek is None:
        there, here = "not a diffmb trajectory", f"this run of {_shown(cfg.model, cfg.name)}"
    else:
        meta, want = peek[0], cfg.meta()
        if "model" not in meta:  # written before the model file was recorded
            meta = {**meta, "model": want["model"]}
        if (meta.get("scenario"), meta.get("model")) != (want["scenario"], want["model"]):
            there = f"from {_shown(meta.get('model'), meta.get('scenario'))}"
            here = f"this run of {_shown(want['model'], want['scenario'])}"
        elif meta.get("parameters") != want["parameters"]:
            old, new = meta.get("parameters") or {}, want["parameters"]
            keys = [k for k in new if old.get(k) != new[k]] + [k for k in old if k not in new]
            show = lambda v: f"{v:g}" if isinstance(v, int | float) else repr(v)
            there = ", ".join(f"{k}={show(old.get(k))}" for k in keys)
            here = "this run with " + ", ".join(f"{k}={show(new.get(k))}" for k in keys)
        else:
            return
    print(f"diffmb: warning: {path} ({there}) will be replaced by {here}, with its .csv and plots; "
          f"give another --out to keep both", file=sys.stderr)


def load_partial(cfg: RunConfig) -> Start:
    """Where ``--resume`` starts: the matching partial file (the run's segment count becomes
    its own unless ``--segments`` was given), or t = 0; refused (UsageError) when the
    partial file does not match unless ``--discard``."""
    try:
        start = resumable.load_partial(cfg.out, cfg.name, cfg.plan, cfg.identity,
                                       segments_given=cfg.segments_given, discard=cfg.discard)
    except ResumeMismatch as e:
        raise UsageError(f"--resume: {e.path} does not match this run ({e.why}); run with the same "
                         f"settings, or add --discard to replace it") from None
    cfg.segments = start.plan.segments
    prefix = "--resume --discard: " if start.discarded else "--resume: " if start.traj is None else ""
    _note(cfg, prefix + start.note)
    return start


def _progress(cfg, start_t):
    return tqdm(total=cfg.t1, initial=start_t, disable=cfg.quiet, desc=cfg.name, file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t = {n:.4g}/{total:.4g} s "
                           "[{elapsed}<{remaining}]")


def _duration(s: float) -> str:
    return f"{s:.2g} s" if s < 90 else f"{s / 60:.2g} min" if s < 5400 else f"{s / 3600:.2g} h"


def run_segments(cfg: RunConfig, start: Start | None = None) -> RunResult:
    """:func:`diffmb.simulation.resumable.run_segments` with a progress bar, the plan said up front
    and, after the first segment of a long run, an estimate of the time left; the first
    Ctrl-C stops it after the segment in flight."""
    if start is None:
        start = Start(None, 0, cfg.plan)
    bar = None
    try:
        with _common.interrupts() as interrupted:
            _note(cfg, resumable.describe(cfg.name, start.plan))
            bar = _progress(cfg, resumable.boundary(start.plan, start.segments_done)[1])
            first = []

            def on_segment(k, seg, seconds):
                bar.update(float(seg.t_final) - bar.n)
                if not first:
                    first.append(seconds)
                    _estimate(cfg, bar, seconds, start.plan.segments - k - 1)

            return resumable.run_segments(cfg.system, cfg.params, start, out_dir=cfg.out, name=cfg.name,
                                          identity=cfg.identity, stop=interrupted, on_segment=on_segment)
    finally:
        if bar is not None:
            bar.close()


def _estimate(cfg, bar, first_s: float, left: int):
    """After the first segment: how long the rest will take, when that is long."""
    rest = first_s * left
    if cfg.quiet or left < 1 or rest < ESTIMATE_AFTER_S:
        return
    steps = (f"{cfg.steps:,} steps of {cfg.t1 / cfg.steps:.6g} s" if cfg.fixed
             else f"{cfg.segments:,} segments of adaptive steps")
    bar.write(f"diffmb: {steps}; the first segment took {_duration(first_s)}: about "
              f"{_duration(rest)} to go ({left:,} segments; Ctrl-C stops after the segment in flight)",
              file=sys.stderr)


# --------------------------------------------------------------------------- outputs
def json_status(traj, warnings=()) -> str:
    """``success`` | ``suspect`` (reached t1, but a health check failed: see ``warnings``)
    | ``event`` | ``diverged`` (diffrax's max_steps counts as diverged)."""
    s = traj.status
    if s == "success" and warnings:
        return "suspect"
    return s if s in ("success", "event") else "diverged"


def report(cfg: RunConfig, res: RunResult) -> dict:
    """The ``--json`` object (see the module docstring). Every key is always present:
    ``null`` where it does not apply (no momentum, no constraints) or is not a finite
    number (a diverged state)."""
    traj = res.traj
    summ = traj.summary()
    conserved = getattr(cfg, "conserved", None) or ()
    warnings = health.check(traj, conserved, energy_name=summ.get("energy", {}).get("quantity", "energy"),
                            stabilization=cfg.stabilization, solver=cfg.solver,
                            system=getattr(cfg, "system", None), params=getattr(cfg, "params", None))
    warnings = [*warnings, *fixed_step_contact(cfg, traj)]
    v = summ.get("violation")
    mobility = mobility_of(getattr(cfg, "system", None))
    if mobility is not None and mobility["locked"]:   # nothing can fold: not the run that was asked for
        warnings = [*warnings, {"kind": "locked", "t": 0.0, "message": (
            f"{mobility['text']}: the panels cannot fold relative to each other, so the run shows the "
            "sheet moving as one rigid body only")}]
    out = {
        "scenario": cfg.name,
        "t1": cfg.t1,
        "dt": cfg.dt,
        "solver": cfg.solver,
        "steps": int(traj.n_steps),
        "wall_s": res.wall_s,
        "build_s": getattr(cfg, "build_s", None),
        "compile_s": res.compile_s,
        "compile_cached": res.compile_cached,
        "energy": summ.get("energy"),
        "angular_momentum": ({"max_abs_change": summ["angular_momentum"]["max_abs_change"]}
                             if "angular_momentum" in summ else None),
        "violation": (None if v is None else
                      {"position_max": v.get("position_max"), "velocity_max": v.get("velocity_max")}),
        "final": traj.final,
        "contact": contact_summary(getattr(cfg, "system", None), getattr(cfg, "params", None), traj),
        "mobility": mobility,
        "notes": [text for _, text in getattr(cfg, "notes", ())],
        "status": json_status(traj, warnings),
        "warnings": warnings,
    }
    return finite(out)


def fixed_step_contact(cfg, traj) -> list:
    """A warning for a fixed-step run with contact on that diverged: a barrier stops a
    crease within a milliradian and a panel within a thousandth of its size, in less time
    than a millisecond step spans (the paper's fold-4panel member under RK4 at 1 ms,
    ``--set K=0.1975 --set c=0.0492``, diverges where its crease reaches flat)."""
    elements = getattr(getattr(cfg, "system", None), "elements", ())
    if (traj.status != "diverged" or cfg.solver not in FIXED_SOLVERS or "crease_angle" not in traj.diagnostics
            or not any(e.applies_forces for e in elements)):
        return []
    return [{"kind": "contact_fixed_step", "t": float(traj.t_final), "message": (
        f"contact was on and the run took fixed steps of {cfg.dt:g} s ({cfg.solver}), longer than a "
        "crease or a panel takes to stop in its barrier: rerun with the adaptive default (--solver dopri5) "
        "or with the paper's model (--set contact=0)")}]


def mobility_of(system) -> dict | None:
    """The closed chain's mobility at its start state
    (:class:`~diffmb.closures.mobility.Mobility`), or ``null`` without closures."""
    report = getattr(getattr(system, "closures", None), "report", None)
    m = getattr(report, "mobility", None)
    return None if m is None else m.as_dict()


def contact_summary(system, params, traj) -> dict | None:
    """The panels' detector and contact figures of an origami run (``null`` otherwise):
    the largest crease angle and the crease, the deepest overlap of two panels and the
    pair, and with contact on the smallest margins, the contact energy and the margins
    the run's largest energy certifies (:func:`~diffmb.origami.contact.certified_margins`)."""
    elements = getattr(system, "elements", ())
    if not elements or "crease_angle" not in traj.diagnostics:
        return None
    e, p = elements[0], params["elements"][0]
    valid = np.isfinite(np.asarray(traj.ts))
    z0 = system.element_states(np.asarray(traj.xs[0]))[0]
    m, certified = e.summary(traj.diagnostics, valid, p, z0)
    m = {k: float(v) for k, v in m.items()}
    out = {"contact": bool(e.applies_forces), "max_crease_angle_deg": float(np.degrees(m["max_crease_angle"])),
           "crease_overfold_rad": m["crease_overfold"]}
    if "panel_overlap" in traj.diagnostics:
        ov = np.where(valid, np.asarray(traj.diagnostics["panel_overlap"], float), -np.inf)
        k = int(np.argmax(ov))
        out.update(max_panel_overlap_m=float(ov[k]),
                   overlap_panels=e.pair_labels[int(np.asarray(traj.diagnostics["panel_overlap_pair"])[k])],
                   overlap_tolerance_m=float(p["overlap_tolerance"]))
    for key in ("min_contact_gap", "min_crease_margin", "peak_contact_force", "peak_crease_torque",
                "contact_events", "contact_overflow"):
        if key in m:
            out[key] = m[key]
    if "contact_energy" in traj.diagnostics:
        out["max_contact_energy_j"] = float(np.nanmax(np.asarray(traj.diagnostics["contact_energy"])))
    out.update({k: float(v) for k, v in certified.items()})   # (contact on only)
    return out


def panels_text(c: dict) -> str:
    """The summary's line of :func:`contact_summary`: how close the panels came to
    passing through each other, and with contact on what held them apart."""
    parts = [f"largest crease {c['max_crease_angle_deg']:.8g} deg"]
    if "max_panel_overlap_m" in c:
        parts.append(f"deepest overlap {max(c['max_panel_overlap_m'], 0.0):.3g} m"
                     + (f" ({c['overlap_panels']})" if c["max_panel_overlap_m"] > 0 else "")
                     + f", a crossing beyond {c['overlap_tolerance_m']:.3g} m")
    if c["contact"]:
        gap = c.get("min_contact_gap")
        parts.append("contact on: least gap " + ("inf (no armed pair)" if gap is None or not math.isfinite(gap)
                                                 else f"{gap:.3g} m"))
        if c.get("min_crease_margin") is not None:
            parts.append(f"least crease margin {c['min_crease_margin']:.3g} rad")
        certified = [f"{c[k]:.3g} {unit}" for k, unit in (("certified_crease_margin_rad", "rad"),
                                                           ("certified_gap_m", "m")) if c.get(k) is not None]
        if certified:
            parts.append("certified by the energy " + " and ".join(certified))
    else:
        parts.append("contact off (--set contact=1 keeps panels apart)")
    return "; ".join(parts)


def write_outputs(cfg: RunConfig, res: RunResult) -> tuple[dict, list[Path]]:
    """Final npz (:func:`diffmb.simulation.resumable.finish`: removes the partial file) + CSV (+ plots,
    + JSON)."""
    traj = res.traj
    files = [resumable.finish(res, cfg.out, cfg.name, cfg.identity)]
    files.append(traj.to_csv(cfg.out / f"{cfg.name}.csv"))
    if cfg.plot:
        from ..viewer.plots import plot_trajectory  # matplotlib, loaded only when asked

        files += plot_trajectory(traj, cfg.out, title=cfg.name, prefix=f"{cfg.name}_", system=cfg.system)
    if cfg.animate:
        panels = outlines(cfg.name, cfg.values)
        if panels is None:
            print(f"diffmb: --animate: scenario {cfg.name!r} has no panel outlines (not origami); skipped",
                  file=sys.stderr)
        else:
            from ..origami.animate import animate  # matplotlib, loaded only when asked

            files.append(animate(cfg.system, traj, panels, cfg.out / f"{cfg.name}.gif", title=cfg.name))
    if cfg.view:
        from ..viewer import write_view

        try:
            files.append(write_view(files[0], cfg.out / f"{cfg.name}.html"))
        except ValueError as e:
            print(f"diffmb: --view: {' '.join(str(e).split())}; skipped", file=sys.stderr)
    obj = report(cfg, res)
    if cfg.json_path is not None:
        write_json(cfg.json_path, obj)
        files.append(cfg.json_path)
    return obj, files


def print_summary(cfg: RunConfig, res: RunResult, obj: dict, files: list[Path]):
    traj = res.traj
    e, v = obj.get("energy"), obj.get("violation")
    rows = [
        ("status", f"{obj['status']} ({traj.message})"),
        ("t reached", f"{float(traj.t_final):.6g} s of {cfg.t1:.6g} s"),
        ("steps", f"{obj['steps']} ({cfg.solver}, dt = {cfg.dt if cfg.dt is not None else 'adaptive'}, "
                  f"{res.segments_done} segment{'s' if res.segments_done != 1 else ''})"),
        ("wall", f"{res.wall_s:.3g} s simulation"),
        ("build", f"{cfg.build_s:.3g} s (the system, its start state and checks)"),
        ("compile", f"{res.compile_s:.3g} s" + (
            f" ({res.compile_cached} program{'s' if res.compile_cached != 1 else ''} read from the "
            f"compilation cache {compile_cache.folder()})" if res.compile_cached else "")),
        ("energy", "n/a" if e is None else
         f"max |E - E0| = {e['max_abs_change']:.3g}" + (
             f" (relative {e['max_rel_change']:.3g})" if e["max_rel_change"] is not None else
             " (E0 = 0: no relative change)") + (
             f"; tracked: {e['quantity']}" if e["quantity"] != trajectory.ENERGY else "")),
    ]
    if obj.get("mobility") is not None:
        rows.append(("mobility", obj["mobility"]["text"]))
    if obj["angular_momentum"] is not None:
        rows.append(("momentum", f"max |h - h0| = {obj['angular_momentum']['max_abs_change']:.3g}"))
    rows.append(("violation", "no constraints" if v is None else
                 ", ".join(f"{k} {x:.3g}" for k, x in v.items() if x is not None)))
    if obj.get("contact") is not None:
        rows.append(("panels", panels_text(obj["contact"])))
    rows += [("warning", w["message"]) for w in obj["warnings"]]
    rows.append(("files", f"{cfg.out}/: " + ", ".join(
        str(p.relative_to(cfg.out)) if p.is_relative_to(cfg.out) else str(p) for p in files)))
    print(table(rows, header=None))


def main(args) -> int:
    try:
        cfg = resolve(args)
        check_partial(cfg)
        start = load_partial(cfg) if cfg.resume else Start(None, 0, cfg.plan)
    except (ValueError, TypeError, UsageError) as e:
        return fail(e)
    warn_replaced(cfg)
    for is_warning, text in cfg.notes:   # before anything compiles
        if is_warning or not cfg.quiet:
            print(f"diffmb: {'warning' if is_warning else 'note'}: {text}", file=sys.stderr)
    if start.traj is None and cfg.discard and cfg.partial_path.exists():
        held = resumable.discard_partial(cfg.out, cfg.name)
        _note(cfg, f"--discard: removed {cfg.partial_path}" + (f" (it held {held:.6g} s)" if held is not None
                                                                else ""))
    _common.stop_if_interrupted()
    res = run_segments(cfg, start)
    if res.interrupted:
        where = (f"partial results up to t = {float(res.traj.t_final):.6g} s kept in {cfg.partial_path}; "
                 f"continue with --resume") if res.traj is not None else "nothing was saved"
        print(f"diffmb: interrupted; {where}", file=sys.stderr)
        return 130
    obj, files = write_outputs(cfg, res)
    if obj["status"] == "suspect":
        for w in obj["warnings"]:
            print(f"diffmb: warning: {w['message']}", file=sys.stderr)
    elif obj["status"] != "success":
        print(f"diffmb: {res.traj.message}", file=sys.stderr)
    if not cfg.quiet:
        print_summary(cfg, res, obj, files)
    return 1 if obj["status"] == "diverged" else 0


