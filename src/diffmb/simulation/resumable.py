"""Resumable runs: a simulation split into time segments, kept on disk as they finish, so
that a run stopped at any point (Ctrl-C, a crash, a killed job) continues from the last
finished segment instead of from t = 0.

::

    from diffmb import resumable
    res = resumable.run(system, params, t1=600.0, dt=1e-3, out_dir="runs", name="fold")
    # interrupted: res.interrupted, runs/fold.partial.npz holds every finished segment
    res = resumable.run(system, params, t1=600.0, dt=1e-3, out_dir="runs", name="fold", resume=True)
    res.traj, res.path  # the whole run, and runs/fold.npz

``diffmb run`` is this module with a progress bar, plots and a JSON summary on top.

Segments
--------
The horizon ``[0, t1]`` is split into ``N`` segments. Every segment is one compiled
:func:`~diffmb.simulation.integrate.simulate` call with the same save-point count and the same
``max_steps``; ``t0``, ``t1``, the save times and ``x0`` are passed as numbers, so only the
first segment compiles.

Fixed-step solvers take ``n = t1 / dt`` steps of exactly ``dt`` (when ``t1`` is not a whole
number of steps: ``ceil(t1 / dt)`` equal steps of ``t1 / n``, as :func:`simulate` does).
Segmenting never changes the step: segment ``k`` holds the steps ``floor(k n / N)`` to
``floor((k+1) n / N)``, a whole number of steps, so when ``N`` does not divide ``n`` the
segments differ by one step; ``N`` above ``n`` is refused (a segment needs a step).
Default ``N`` (:func:`default_segments`): about ``STEPS_PER_SEGMENT`` (1000) steps a
segment, at most ``MAX_DEFAULT_SEGMENTS`` (20) segments, and never more than
``MAX_STEPS_PER_SEGMENT`` (50 000) steps a segment however many segments that takes (a
count that divides ``n`` within 2x is preferred, for equal segments). A stop request is
honoured between segments, so that bound is the longest wait: 0.4 s of a pendulum's RK4
steps, ~10 s of a 4x4 map fold's; the 1e9 steps of ``t1 = 1, dt = 1e-9`` make 20 000
segments. Saved points: every step while the run has at most ``SAVE_INTERVALS``
(20 000) steps; beyond that ``SAVE_INTERVALS / N`` save intervals a segment, each a whole
number of steps (equal ones when a divisor of the segment's steps allows), and at least
the segment's two ends: at most ``max(SAVE_INTERVALS, N) + 1`` points in all, every one at
the end of a step of ``dt``. Adaptive solvers: 20 segments by default (their step count is
not known ahead), each of equal length with ``1000 / N + 1`` (at least 11) save points.

Files
-----
After the first segment, and then after any segment that ends at least
``PARTIAL_EVERY_S`` (1 s) after the last write, the run so far is written atomically to
``<out_dir>/<name>.partial.npz`` (``complete=False``, ``segments_done``); a stop request or
a KeyboardInterrupt brings it up to the last finished segment. At the end (``t1``
reached, or an event or a divergence stopped the run) ``<out_dir>/<name>.npz`` is written
(``complete=True``) and the partial file removed.

The metadata of both files is the run's ``identity`` (what is run: the command line
records the scenario, model file, parameters and stabilization; by default the System's
class and a digest of ``params``) and its :class:`Plan` (``solver, dt, rtol, atol, t1,
segments``). ``resume`` continues a partial file only when all of these match; when one
differs the resume is refused (:class:`ResumeMismatch`, naming each difference) unless
``discard`` (then the run starts fresh). A partial file is never replaced unasked: a run
given neither ``resume`` nor ``discard`` into a folder that holds one is refused
(:class:`PartialRunExists`) before any work. Files written before the segments had their
name (keys ``chunks`` and ``chunks_done``) resume as well.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import numpy as np

from . import compile_cache
from .integrate import FIXED_SOLVERS, compile_simulation, fixed_step_bound
from .trajectory import Trajectory, concatenate

if TYPE_CHECKING:
    from ..system import System
    from .integrate import PyTree

#: Default segmenting of fixed-step runs (module docstring).
STEPS_PER_SEGMENT = 1000
MAX_DEFAULT_SEGMENTS = 20
MAX_STEPS_PER_SEGMENT = 50_000
#: Save intervals of a whole fixed-step run (or one a segment, when it has more segments).
SAVE_INTERVALS = 20_000
ADAPTIVE_SAVE_POINTS = 1000
#: The partial file is rewritten after a segment when this long has passed since the last write.
PARTIAL_EVERY_S = 1.0


class PartialRunExists(ValueError):
    """``out_dir`` holds a partial run and neither ``resume`` nor ``discard`` was given.
    ``held`` says what it holds, ``differences`` what keeps ``resume`` from continuing it."""

    def __init__(self, path: Path, held: str, differences: list[str]):
        self.path, self.held, self.differences = path, held, differences
        #: the differences as the message's parenthesis ("" when there are none)
        self.why = f" (not with this run's settings: {', '.join(differences)})" if differences else ""
        super().__init__(f"{path} holds {held}; resume=True continues it{self.why}, discard=True replaces it")


class ResumeMismatch(ValueError):
    """The partial file is not this run's (``why`` names each difference)."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(f"{path} does not match this run ({why}); run with the same settings, "
                         f"or discard=True to replace it")


# --------------------------------------------------------------------------- the plan
def fixed_steps(t1: float, dt: float) -> int:
    """Steps of a fixed-step run over ``[0, t1]``: :func:`simulate`'s count."""
    return max(1, math.ceil(t1 / dt - 1e-6))


def default_segments(t1: float, dt: float | None) -> int:
    """About STEPS_PER_SEGMENT steps a segment and at most MAX_DEFAULT_SEGMENTS segments,
    but never more than MAX_STEPS_PER_SEGMENT steps a segment; a count that divides the
    steps (within 2x) is preferred. ``dt=None`` (adaptive): MAX_DEFAULT_SEGMENTS."""
    if dt is None:
        return MAX_DEFAULT_SEGMENTS
    steps = fixed_steps(t1, dt)
    target = max(min(math.ceil(steps / STEPS_PER_SEGMENT), MAX_DEFAULT_SEGMENTS),
                 math.ceil(steps / MAX_STEPS_PER_SEGMENT))
    for n in range(target, min(2 * target, target + 10_000) + 1):  # equal segments
        if steps % n == 0:
            return n
    return target


@dataclass(frozen=True)
class Plan:
    """How a run is integrated and split: the horizon, the solver settings (``dt`` is the
    fixed step, or the first step of an adaptive solver, or None) and the segment count."""

    t1: float
    dt: float | None
    solver: str = "rk4"
    rtol: float = 1e-8
    atol: float = 1e-10
    segments: int = 1

    @property
    def fixed(self) -> bool:
        return self.dt is not None and self.solver in FIXED_SOLVERS

    @property
    def steps(self) -> int | None:
        """The fixed steps of the whole run (None for adaptive solvers)."""
        return fixed_steps(self.t1, self.dt) if self.fixed else None

    def settings(self) -> dict:
        """What the files record of the plan (and a resume compares)."""
        return {"solver": self.solver, "dt": self.dt, "rtol": self.rtol, "atol": self.atol,
                "t1": self.t1, "segments": self.segments}


def plan(t1: float, dt: float | None = None, solver: str = "rk4", rtol: float = 1e-8, atol: float = 1e-10,
         segments: int | None = None) -> Plan:
    """A checked :class:`Plan` (ValueError naming the argument); ``segments=None``: the
    default count (:func:`default_segments`)."""
    if not (math.isfinite(t1) and t1 > 0):
        raise ValueError(f"t1 must be a positive number, got {t1}")
    if dt is not None and not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number, got {dt}")
    if solver in FIXED_SOLVERS and dt is None:
        raise ValueError(f"solver {solver!r} takes fixed steps: give dt")
    fixed = dt is not None and solver in FIXED_SOLVERS
    if segments is not None:
        if segments < 1:
            raise ValueError(f"segments must be at least 1, got {segments}")
        if fixed and segments > fixed_steps(t1, dt):
            raise ValueError(f"segments={segments} is more than the {fixed_steps(t1, dt)} steps of this run: "
                             f"a segment holds whole steps")
    n = default_segments(t1, dt if fixed else None) if segments is None else segments
    return Plan(t1=float(t1), dt=dt, solver=solver, rtol=rtol, atol=atol, segments=int(n))


def boundary(p: Plan, k: int) -> tuple[int | None, float]:
    """``(step index, time)`` where segment ``k`` starts (``k = p.segments``: the end, t1).
    Fixed steps: a whole number of steps of ``t1 / n`` (= dt); adaptive: ``t1 k / N``."""
    if k >= p.segments:
        return p.steps, p.t1
    if not p.fixed:
        return None, p.t1 * k / p.segments
    b = k * p.steps // p.segments
    return b, b * (p.t1 / p.steps)


def _save_intervals(shortest: int, longest: int, segments: int) -> int:
    """Save intervals a fixed-step segment keeps (module docstring): every step while the
    run has at most SAVE_INTERVALS, else SAVE_INTERVALS / segments (at least 1), a divisor
    of the segment's steps when one lies within 2x below that (equal intervals)."""
    cap = max(1, SAVE_INTERVALS // segments)
    if shortest <= cap:
        return shortest
    if shortest == longest:
        for d in range(cap, cap // 2, -1):
            if shortest % d == 0:
                return d
    return cap


def segment_settings(p: Plan) -> dict:
    """Save-point count and max_steps, identical for every segment (one compilation), and
    the segments' fixed-step counts (``steps``: the longest, ``shortest``; None if adaptive).

    Each fixed-step segment is passed the step ``(t1_k - t0_k) / S_k`` of its own ``S_k``
    steps rather than ``dt`` itself (equal up to rounding): diffrax counts
    ``ceil((t1 - t0) / dt)`` steps, and a segment such as ``[0.2, 0.30000000000000004]``
    with ``dt = 1e-3`` would otherwise take 101 steps of 0.99 ms.
    """
    if not p.fixed:
        return {"steps": None, "shortest": None, "max_steps": None,
                "saveat": max(11, ADAPTIVE_SAVE_POINTS // p.segments + 1)}
    longest, shortest = -(-p.steps // p.segments), p.steps // p.segments
    return {"steps": longest, "shortest": shortest,
            "saveat": _save_intervals(shortest, longest, p.segments) + 1,
            "max_steps": fixed_step_bound(longest + 1)}


def segment_args(p: Plan, settings: dict, k: int, x0, params) -> dict:
    """The :func:`simulate` arguments of segment ``k`` starting from ``x0``."""
    (b0, t0), (b1, t1) = boundary(p, k), boundary(p, k + 1)
    if settings["steps"] is None:
        dt, saveat = p.dt, settings["saveat"]
    else:  # save times on step ends: the same count in every segment, whatever its steps
        n = b1 - b0
        idx = np.round(np.linspace(0, n, settings["saveat"])).astype(np.int64)
        saveat = (b0 + idx) * (p.t1 / p.steps)
        saveat[0], saveat[-1] = t0, t1
        dt = (t1 - t0) / n
    return dict(t0=t0, t1=t1, x0=x0, params=params, dt=dt, solver=p.solver, rtol=p.rtol,
                atol=p.atol, saveat=saveat, max_steps=settings["max_steps"])


def describe(name: str, p: Plan) -> str:
    """What the run takes, in words (said before it compiles)."""
    s = segment_settings(p)
    n = f"{p.segments:,} segment{'s' if p.segments != 1 else ''}"
    if s["steps"] is None:
        return f"{name}: adaptive steps ({p.solver}) up to t = {p.t1:g} s in {n}"
    per = f"{s['steps']:,}" if s["steps"] == s["shortest"] else f"{s['shortest']:,}-{s['steps']:,}"
    return f"{name}: {p.steps:,} steps of {p.t1 / p.steps:.6g} s ({p.solver}) in {n} of {per} steps"


# --------------------------------------------------------------------------- files
def partial_path(out_dir, name: str) -> Path:
    return Path(out_dir) / f"{name}.partial.npz"


def final_path(out_dir, name: str) -> Path:
    return Path(out_dir) / f"{name}.npz"


def default_identity(system, params) -> dict:
    """What a Python run is, when the caller does not say: the System's class and a SHA-1
    of ``params`` (every leaf's shape, dtype and bytes)."""
    h = hashlib.sha1()
    for leaf in jax.tree_util.tree_leaves(params):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return {"system": f"{type(system).__module__}.{type(system).__qualname__}", "params_sha1": h.hexdigest()}


def metadata(p: Plan, identity: dict, **extra) -> dict:
    """A file's metadata: ``identity``, then the plan's settings, then ``extra``."""
    return {**identity, **p.settings(), **extra}


def _current(meta: dict) -> dict:
    """``meta`` with the keys of files written before the segments had their name."""
    if "segments" not in meta and "chunks" in meta:
        meta = {**meta, "segments": meta["chunks"], "segments_done": meta.get("chunks_done")}
    return meta


def peek(path) -> tuple[dict, float] | None:
    """``(metadata, t_final)`` of a trajectory file, reading nothing else; None if it is
    not one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return _current(json.loads(str(z["meta"]))), float(z["t_final"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def differences(held: dict, want: dict, *, held_only: bool = False) -> list[str]:
    """``"KEY X there, Y here"`` for each key of ``want`` whose value ``held`` does not
    hold, and with ``held_only`` for each key only ``held`` has (what a file holds beside
    its settings, such as the segments done, is left out by default)."""
    keys = list(want) + ([k for k in held if k not in want] if held_only else [])
    return [f"{k} {held.get(k)!r} there, {want.get(k)!r} here" for k in keys if held.get(k) != want.get(k)]


def check_partial(out_dir, name: str, p: Plan, identity: dict, *, segments_given: bool = True):
    """Refuse (:class:`PartialRunExists`) a run into a folder holding a partial file when
    the caller gave neither ``resume`` nor ``discard``. ``segments_given=False``: the
    plan's segment count is the default one, and a resume would take the partial's (so it
    is not named as a difference)."""
    path = partial_path(out_dir, name)
    if not path.exists():
        return
    held = peek(path)
    if held is None:
        raise PartialRunExists(path, "an unreadable partial run", [])
    meta, t = held
    t1 = meta.get("t1")
    what = (f"an interrupted run: {t:.6g} s of {t1:.6g} s" if isinstance(t1, int | float)
            else f"an interrupted run up to t = {t:.6g} s")
    segments = meta.get("segments")
    if not segments_given and isinstance(segments, int) and segments >= 1:
        p = replace(p, segments=segments)
    raise PartialRunExists(path, what, differences(meta, metadata(p, identity)))


@dataclass
class Start:
    """Where a run starts: ``traj`` and ``segments_done`` of the partial file it continues
    (None, 0: from t = 0), the ``plan`` it runs (a resume without a given segment count
    takes the partial's), and a ``note`` saying what was found (None when nothing was
    asked for). ``discarded``: a partial file that did not match is to be replaced."""

    traj: Trajectory | None
    segments_done: int
    plan: Plan
    note: str | None = None
    discarded: bool = False


def load_partial(out_dir, name: str, p: Plan, identity: dict, *, segments_given: bool = True,
                 discard: bool = False) -> Start:
    """The partial run to continue, when it matches ``identity`` and ``p``; a missing or
    unreadable file starts fresh (said in ``note``). A partial file of other settings is
    refused (:class:`ResumeMismatch`, naming each difference) unless ``discard``."""
    path = partial_path(out_dir, name)
    if not path.exists():
        return Start(None, 0, p, f"no partial file {path}; starting fresh")
    try:
        traj, meta = Trajectory.load(path)
    except ValueError as e:
        return Start(None, 0, p, f"{e}; starting fresh")
    meta = _current(meta)
    given = p
    if not segments_given and isinstance(meta.get("segments"), int) and meta["segments"] >= 1:
        p = replace(p, segments=meta["segments"])
    why = ", ".join(differences(meta, metadata(p, identity)))
    done = meta.get("segments_done")
    if not why and (meta.get("complete") or traj.status != "success" or not isinstance(done, int)
                    or not 0 < done <= p.segments):
        why = "it is not a resumable partial run"
    if not why and p.fixed and p.segments > p.steps:
        why = f"its {p.segments} segments are more than the run's {p.steps} steps"
    if not why and abs(float(traj.t_final) - boundary(p, done)[1]) > 1e-9 * p.t1:
        why = (f"it ends at t = {float(traj.t_final):.9g} s, not where its segment {done} ends "
               f"(t = {boundary(p, done)[1]:.9g} s): written by another segmenting")
    if why:
        if not discard:
            raise ResumeMismatch(path, why)
        return Start(None, 0, given, f"{path} does not match this run ({why}); starting fresh", discarded=True)
    return Start(traj, done, p, f"resuming from {path} at t = {float(traj.t_final):.6g} s")


def discard_partial(out_dir, name: str) -> float | None:
    """Remove the partial file; the time it held (None when there was none or it was
    unreadable)."""
    path = partial_path(out_dir, name)
    if not path.exists():
        return None
    held = peek(path)
    path.unlink()
    return None if held is None else held[1]


# --------------------------------------------------------------------------- the run
@dataclass
class SegmentedRun:
    """What a run did: ``traj`` (the whole run so far, resumed part included),
    ``segments_done``, each segment's wall ``times`` in this process, ``compile_s`` (the
    ahead-of-time compile), ``compile_cached`` (how many of its programs were read back
    from the persistent compilation cache, :mod:`diffmb.simulation.compile_cache`), ``wall_s`` (the
    compiled segments: the simulation alone),
    ``interrupted`` (a stop request or a KeyboardInterrupt ended it after a segment),
    ``plan`` and ``path`` (the file written: the run's npz, or its partial file when
    interrupted)."""

    traj: Trajectory | None = None
    segments_done: int = 0
    times: list = field(default_factory=list)
    compile_s: float = 0.0
    compile_cached: int = 0
    wall_s: float = 0.0
    interrupted: bool = False
    plan: Plan | None = None
    path: Path | None = None


def _joined(parts: list):
    if len(parts) > 1:
        parts[:] = [concatenate(parts)]
    return parts[0] if parts else None


def save_partial(out_dir, name: str, identity: dict, res: SegmentedRun) -> Path:
    return res.traj.save(partial_path(out_dir, name),
                         meta=metadata(res.plan, identity, complete=False, segments_done=res.segments_done))


def run_segments(system, params, start: Start, *, out_dir, name: str, identity: dict,
                 stop: Callable[[], bool] | None = None,
                 on_segment: Callable[[int, Trajectory, float], None] | None = None) -> SegmentedRun:
    """Compile once ahead of time, then run the segments from ``start``, writing the
    partial file after the first and then at most every PARTIAL_EVERY_S. Stops early on an
    event or a divergence, and after the segment in flight when ``stop()`` turns true or a
    KeyboardInterrupt arrives (the partial file then holds every finished segment).
    ``on_segment(k, segment, seconds)`` is called after segment ``k`` (0-based)."""
    p = start.plan
    res = SegmentedRun(traj=start.traj, segments_done=start.segments_done, plan=p)
    settings = segment_settings(p)
    parts = [] if res.traj is None else [res.traj]  # joined when written: no copy per segment
    written, written_at = res.segments_done, None
    stopped = stop or (lambda: False)
    try:
        x0 = system.init_state(params) if res.traj is None else res.traj.x_final
        compiled = None
        for k in range(res.segments_done, p.segments):
            args = segment_args(p, settings, k, x0, params)
            if compiled is None:
                hits = compile_cache.hits()
                compiled, res.compile_s = compile_simulation(system, **args)
                res.compile_cached = compile_cache.hits() - hits
            if stopped():
                raise KeyboardInterrupt
            tic = time.perf_counter()
            tr = jax.block_until_ready(compiled(**args))
            res.times.append(time.perf_counter() - tic)
            parts.append(tr)
            res.segments_done = k + 1
            if written_at is None or time.perf_counter() - written_at >= PARTIAL_EVERY_S:
                res.traj = _joined(parts)
                save_partial(out_dir, name, identity, res)
                written, written_at = res.segments_done, time.perf_counter()
            if on_segment is not None:
                on_segment(k, tr, res.times[-1])
            if stopped():
                raise KeyboardInterrupt
            if tr.status != "success":
                break
            x0 = tr.x_final
    except KeyboardInterrupt:
        res.interrupted = True
    res.traj = _joined(parts)
    if res.interrupted and res.segments_done > written:
        save_partial(out_dir, name, identity, res)  # every finished segment is kept
    if res.interrupted and res.traj is not None:
        res.path = partial_path(out_dir, name)
    res.wall_s = sum(res.times)
    return res


def finish(res: SegmentedRun, out_dir, name: str, identity: dict) -> Path:
    """Write the run as ``<out_dir>/<name>.npz`` (``complete=True``) and remove its partial
    file; the npz's path."""
    res.path = res.traj.save(final_path(out_dir, name),
                             meta=metadata(res.plan, identity, complete=True, segments_done=res.segments_done))
    partial_path(out_dir, name).unlink(missing_ok=True)
    return res.path


def run(system: System, params: PyTree | None = None, *, t1: float, out_dir: str | os.PathLike,
        name: str = "run", dt: float | None = None, solver: str = "rk4", rtol: float = 1e-8,
        atol: float = 1e-10, segments: int | None = None,
        resume: bool = False, discard: bool = False, identity: dict | None = None,
        stop: Callable[[], bool] | None = None,
        on_segment: Callable[[int, Trajectory, float], None] | None = None) -> SegmentedRun:
    """Simulate ``system`` over ``[0, t1]`` in segments kept in ``out_dir`` (module
    docstring), and return the :class:`SegmentedRun`.

    ``resume``: continue ``<out_dir>/<name>.partial.npz`` (a missing file starts fresh; one
    of other settings raises :class:`ResumeMismatch` unless ``discard``). ``discard``:
    replace a partial file. Neither, with a partial file there: :class:`PartialRunExists`.
    ``identity``: JSON values saying what is run, recorded and compared on resume
    (default: :func:`default_identity`). ``stop()``: checked between segments; true stops
    the run after the segment in flight, as does a KeyboardInterrupt (``interrupted``; the
    partial file keeps the finished segments). Done (or stopped by an event or a
    divergence): ``<out_dir>/<name>.npz``, in ``path``.
    """
    params = system.default_params() if params is None else params
    identity = default_identity(system, params) if identity is None else identity
    p = plan(t1, dt, solver, rtol, atol, segments)
    given = segments is not None
    if not (resume or discard):
        check_partial(out_dir, name, p, identity, segments_given=given)
    start = (load_partial(out_dir, name, p, identity, segments_given=given, discard=discard) if resume
             else Start(None, 0, p))
    if start.traj is None and discard:
        discard_partial(out_dir, name)
    res = run_segments(system, params, start, out_dir=out_dir, name=name, identity=identity, stop=stop,
                       on_segment=on_segment)
    if not res.interrupted:
        finish(res, out_dir, name, identity)
    return res
