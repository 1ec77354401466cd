"""``simulate``: integrate any :class:`~diffmb.system.System` with diffrax.

* Fixed-step RK4 (the papers' integrator) and Euler; adaptive Dopri5, Tsit5, Dopri8;
  the stiff implicit Kvaerno5.
* ``System.project`` runs after every accepted step inside the solver
  (:class:`ProjectedSolver` wraps the diffrax solver), which is where MRP shadow switching,
  quaternion renormalisation and constraint projection happen.
* Termination events: user functions of ``(t, x, params)`` (a real value crossing zero,
  located by a Newton root find, or a boolean), plus a divergence guard (non-finite state,
  or a constraint violation above ``max_violation``). A diverged run keeps everything saved
  before the failure; :class:`~diffmb.simulation.trajectory.Trajectory` reports the status and time.
* Differentiable end to end: ``jax.grad`` of any scalar of the trajectory w.r.t.
  ``params`` or ``x0`` (recursive checkpointing keeps memory bounded on long horizons),
  and ``jax.vmap`` over ``x0`` and ``params``.

A run is two jitted calls: the integration (:func:`_solve`, states at the save points) and
the diagnostics at those points (:func:`_diagnose`, shared by every run of the same system
structure and save-point count, skipped with ``diagnostics=False``). The structure (system
type, solver, save-grid length, ``max_steps``) is static; every number (``t0``, ``t1``,
``dt``, ``x0``, ``params``) is traced, so new numbers never recompile.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from diffrax import AbstractERK, AbstractRungeKutta, ButcherTableau, ThirdOrderHermitePolynomialInterpolation
from jax.typing import ArrayLike

from ..math import spatial
from ..math.tracing import outside_any_trace
from ..system import System
from . import _diffrax_ulps, fixed_steps
from .trajectory import STATUS_CODES, Trajectory

#: A pytree of arrays (a System's params).
PyTree = Any

_diffrax_ulps.install()  # diffrax's t1 - 100 ULPs in one operation (0.5 s of every compile)

_rk4_tableau = ButcherTableau(
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.zeros(4),
    c=np.array([0.5, 0.5, 1.0]),
)


#: Save points at which :meth:`~diffmb.system.System.sampled_diagnostics` (costly ones:
#: the closure rank) are evaluated, evenly spaced over the run's save grid.
SAMPLED_POINTS = 21


class RK4(AbstractERK):
    """The classical fourth-order Runge-Kutta method (fixed step; no error estimate)."""

    tableau: ClassVar[ButcherTableau] = _rk4_tableau
    interpolation_cls: ClassVar = ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


FIXED_SOLVERS = {"rk4": RK4, "euler": dfx.Euler}
ADAPTIVE_SOLVERS = {"dopri5": dfx.Dopri5, "tsit5": dfx.Tsit5, "dopri8": dfx.Dopri8, "kvaerno5": dfx.Kvaerno5}
SOLVERS = tuple(FIXED_SOLVERS) + tuple(ADAPTIVE_SOLVERS)


class _SnapInterpolation(dfx.AbstractLocalInterpolation):
    """The wrapped solver's dense output, carried onto the projected state at the step end.

    A projection moves the step's end by a small correction ``d = y1 - inner(t1)`` (a
    constraint projection: of the order of the violation); it is blended in linearly,
    ``inner(t) + s d`` with ``s = (t - t0) / (t1 - t0)``, so the dense output is continuous,
    ends exactly on the projected state and keeps the inner slope (event root finding
    needs it). Components that jump (an MRP shadow-set switch: ``|d|`` of order one) are
    not blended across the step: they follow the inner interpolant and snap to ``y1`` at
    the step end.
    """

    t0: jnp.ndarray
    t1: jnp.ndarray
    inner: dfx.AbstractLocalInterpolation
    y1: jnp.ndarray

    def evaluate(self, t0, t1=None, left=True):
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        span = self.t1 - self.t0
        y = self.inner.evaluate(t0)
        d = self.y1 - self.inner.evaluate(self.t1)
        jump = jnp.abs(d) > 1e-2 * (1.0 + jnp.abs(self.y1))
        s = (t0 - self.t0) / jnp.where(span == 0, 1.0, span)
        at_end = jnp.abs(t0 - self.t1) <= 1e-9 * jnp.abs(span)
        return jnp.where(jump, jnp.where(at_end, self.y1, y), y + s * d)


#: ``system.project`` through one inner jit per structure (and form): a run calls it at
#: every step and at the save points, and diffrax traces a step several times (its
#: output structure, the first step, the loop); the jit traces the projection once.
@spatial.jit_per_form
def _project(system, x, params):
    return system.project(x, params)


@spatial.jit_per_form
def _project_and_plan(system, x, params):
    return system.project_and_plan(x, params)


@spatial.jit_per_form
def _project_interpolated(system, x, params):
    return system.project_interpolated(x, params)


class StepOnceSolver(dfx.AbstractWrappedSolver):
    """Wrap a diffrax solver so that its step is traced once per structure.

    diffrax traces a solver's step four times in one solve (the dense output's structure,
    the loop state's twice, then the loop's body); here the step is one inner jit
    (:func:`_step`), whose later traces reuse the first one's jaxpr (fold-4panel's
    solve: trace 1.2 -> 1.0 s). The computation is the wrapped solver's, unchanged.
    """

    solver: dfx.AbstractSolver

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    @property
    def scan_kind(self):
        # DirectAdjoint looks at this through isinstance forwarding; the inner solver is
        # built with scan_kind="bounded" for that adjoint (see _solve).
        return getattr(self.solver, "scan_kind", "bounded")

    @property
    def root_finder(self):
        # an implicit solver's (diffrax sets its tolerances through this path)
        return self.solver.root_finder

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        return _step(self.solver, terms, t0, t1, y0, args, solver_state, made_jump)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


class ProjectedSolver(StepOnceSolver):
    """Wrap a diffrax solver so ``system.project`` is applied to every step's result
    (a step traced once, as :class:`StepOnceSolver`).

    The wrapped solver always sees ``made_jump=True`` so first-same-as-last methods
    re-evaluate the vector field at the projected state (an MRP shadow switch changes the
    state discontinuously). Dense output: see :class:`_SnapInterpolation`.
    """

    solver: dfx.AbstractSolver
    system: System
    #: whether an adaptive controller limits the steps (:class:`_LimitedSteps`): the step
    #: then reports its admitted fraction with its error, and its plans carry derivatives
    limited: bool = eqx.field(static=True, default=False)

    @property
    def interpolation_cls(self):
        inner_cls = self.solver.interpolation_cls

        def make(*, t0, t1, projected, **dense):
            return _SnapInterpolation(t0, t1, inner_cls(t0=t0, t1=t1, **dense), projected)

        return make

    def init(self, terms, t0, t1, y0, args):
        state = self.solver.init(terms, t0, t1, y0, args)
        return (state, self.system.plan_of(args)) if self.system.plans_steps else state

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        return _projected_step(self.solver, self.system, terms, t0, t1, y0, args, solver_state, self.limited)


@spatial.jit_per_form
def _step(solver, terms, t0, t1, y0, args, solver_state, made_jump):
    return solver.step(terms, t0, t1, y0, args, solver_state, made_jump)


@spatial.jit_per_form
def _projected_step(solver, system, terms, t0, t1, y0, args, solver_state, limited):
    """A step, its end projected; with a plan (:meth:`~diffmb.system.System.step_plan`), the
    stages read the one the solver state carries, made at the step's start, and the
    step's end makes the next (a rejected step's is dropped with its state). With
    ``limited`` (the controller limits the steps), the error comes out as ``(error,
    admitted fraction)`` (:meth:`~diffmb.system.System.step_fraction` of the two plans),
    which :class:`_LimitedSteps` takes apart; otherwise nothing differentiates the plan
    (the stages only decide by it)."""
    if not system.plans_steps:
        y1, err, dense, state, result = solver.step(terms, t0, t1, y0, args, solver_state, True)
        y1p = _project(system, y1, args)
        return y1p, err, dict(dense, projected=y1p), state, result
    state, plan0 = solver_state
    y1, err, dense, state, result = solver.step(terms, t0, t1, y0, system.planned(args, plan0), state, True)
    y1p, plan = _project_and_plan(system, y1, args)
    if limited:   # the step check from the two ends' plans, with the error to the controller
        err = (err, system.step_fraction(plan0, plan, y0, args))
    else:
        plan = jax.lax.stop_gradient(plan)
    return y1p, err, dict(dense, projected=y1p), (state, plan), result


class _GridSteps(dfx.AbstractStepSizeController):
    """Fixed steps whose end times are read from ``grid``, computed once before the solve.

    Equal steps like :class:`diffrax.ConstantStepSize` (``t0 + (t1 - t0) k / n``, ``n``
    traced), but not recomputed inside the loop. Reverse mode through
    ``RecursiveCheckpointAdjoint`` re-runs steps from checkpoints in the backward pass,
    in another compiled loop, where XLA may round ``t0 + (t1 - t0) k / n`` differently
    (by one ulp: constant folding of a ``t1``/``dt`` known at trace time, as inside a
    jitted loss). A save time on a step end is then attributed to step ``k`` in one pass
    and to step ``k + 1`` in the other (diffrax saves ``ts[i]`` in the step with
    ``ts[i] <= tnext``), and its cotangent is dropped: the gradient came out 0.5 % to 12 %
    off. Read from one array, every pass sees the same step ends, and save times on step
    ends are snapped onto them (:func:`_snap_to_grid`). Entries past ``n`` are ``t1``
    (the loop stops there), so the array's length follows ``max_steps``, not the step
    count, and a new ``dt`` does not recompile.
    """

    grid: jnp.ndarray

    def wrap(self, direction):
        return self

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.grid[1], jnp.asarray(2, jnp.int32)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order,
                        controller_state):
        k = jnp.minimum(controller_state, self.grid.shape[0] - 1)
        return True, t1, self.grid[k], False, controller_state + 1, dfx.RESULTS.successful


def _snap_to_grid(ts, grid, t0, dt0):
    """Save times within 1e-9 of a step of a step end moved onto it exactly (value only:
    the derivative with respect to ``ts`` is kept, for :func:`states_at`)."""
    k = jnp.clip(jnp.round((ts - t0) / dt0), 0, grid.shape[0] - 1).astype(jnp.int32)
    g = grid[k]
    on = jnp.abs(ts - g) <= 1e-9 * dt0
    return jnp.where(on, ts + jax.lax.stop_gradient(g - ts), ts)


def save_grid(t0: float, t1: float, dt: float | None, saveat) -> np.ndarray:
    """Save times: an explicit array, a count, or (None) up to 1001 points on step ends."""
    if saveat is not None and not isinstance(saveat, int | np.integer):
        ts = np.asarray(saveat, dtype=float)
        if ts.ndim != 1 or ts.size == 0:
            raise ValueError("saveat: expected a 1-D array of times or a point count")
        if np.any(np.diff(ts) < 0) or ts[0] < t0 - 1e-12 or ts[-1] > t1 + 1e-12:
            raise ValueError(f"saveat: times must be increasing within [t0, t1] = [{t0}, {t1}]")
        return ts
    if saveat is not None:
        if saveat < 2:
            raise ValueError("saveat: need at least 2 save points")
        return np.linspace(t0, t1, int(saveat))
    if dt is None:
        return np.linspace(t0, t1, 501)
    steps = max(1, round((t1 - t0) / dt))
    n = steps
    if n > 1000:
        n = max((d for d in range(1, 1001) if steps % d == 0), default=1)
        if n < 200:
            n = 1000
    return np.linspace(t0, t1, n + 1)


def _on_step_ends(ts, t0: float, dt: float) -> bool:
    """Whether every save time is the end of a fixed step of size ``dt`` from ``t0``."""
    k = (np.asarray(ts) - t0) / dt
    return bool(np.all(np.abs(k - np.round(k)) < 1e-9))


def _next_pow2(n: int) -> int:
    return 1 << max(4, math.ceil(math.log2(max(n, 1))))


#: The fewest steps a fixed-step run with the checkpointed adjoint is compiled for: runs
#: of one structure with up to this many steps share a program, whatever their horizon
#: and step (the bound sizes the step grid and reverse mode's checkpoints, and a run's
#: forward loop stops at its last step). The direct adjoint keeps the tightest power of
#: two: its bounded loop, vmapped (a fit's records), runs every one of its ``max_steps``
#: iterations.
MIN_CHECKPOINTED_STEPS = 1024


def fixed_step_bound(n_steps: int, adjoint: str = "checkpoint") -> int:
    """``max_steps`` of a fixed-step run of ``n_steps`` steps: the next power of two above
    it, at least :data:`MIN_CHECKPOINTED_STEPS` with the checkpointed adjoint."""
    bound = _next_pow2(n_steps + 1)
    return max(bound, MIN_CHECKPOINTED_STEPS) if adjoint == "checkpoint" else bound


def _adjoint(name):
    if name == "checkpoint":
        return dfx.RecursiveCheckpointAdjoint()
    if name == "direct":
        return dfx.DirectAdjoint()
    if name == "backsolve":
        return dfx.BacksolveAdjoint()
    raise ValueError(f"adjoint: unknown {name!r}; expected checkpoint, direct or backsolve")


def simulate(
    system: System,
    *,
    t1: float,
    t0: float = 0.0,
    x0: ArrayLike | None = None,
    params: PyTree | None = None,
    dt: float | None = None,
    solver: str = "rk4",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    saveat: int | ArrayLike | None = None,
    max_steps: int | None = None,
    events: Callable | Sequence[Callable] | None = None,
    progress: bool = False,
    max_violation: float | None = None,
    adjoint: str = "checkpoint",
    diagnostics: bool = True,
    loop: str = "diffrax",
    _compile_only: bool = False,
) -> Trajectory:
    """Integrate ``system`` from ``t0`` to ``t1`` and return a :class:`Trajectory`.

    ``solver``: ``rk4`` | ``euler`` (fixed step ``dt``, required) or ``dopri5`` | ``tsit5``
    | ``dopri8`` | ``kvaerno5`` (adaptive, ``rtol``/``atol``; ``dt`` is the first step).
    ``saveat``: ``None`` (up to 1001 points, on step ends for fixed steps), a count, or
    an array of times. ``events``: a callable or list of callables ``g(t, x, params)``
    returning a real (the run stops where it crosses zero, located by Newton's method) or
    a bool (stops on the first step where it is true). ``max_violation``: stop as
    diverged when the system's constraint violation exceeds it. ``adjoint``:
    ``checkpoint`` (memory-bounded recursive checkpointing, default), ``direct`` (supports
    forward-mode) or ``backsolve``. ``diagnostics=False`` leaves the trajectory's
    ``diagnostics`` and ``violation`` empty and skips their program: for a loss that reads
    states only (it compiles and runs faster). ``loop``: ``diffrax`` (diffrax's step loop),
    ``scan`` (a fixed-step run as loops of known trip count, :mod:`~diffmb.simulation.fixed_steps`:
    save points evenly spaced on step ends, no events, no progress bar, the checkpointed or
    direct adjoint) or ``auto`` (``scan`` where the run allows it, else ``diffrax``).
    """
    args = _prepare(system, t1=t1, t0=t0, x0=x0, params=params, dt=dt, solver=solver, rtol=rtol,
                    atol=atol, saveat=saveat, max_steps=max_steps, events=events,
                    progress=progress, max_violation=max_violation, adjoint=adjoint, loop=loop)
    if _compile_only:
        return args
    tr = _solve(*args)
    return _with_diagnostics(tr, system, args.params, args.x0) if diagnostics else tr


#: XLA's options for a run's programs on a CPU (the solve and the two diagnostics
#: programs): the backend's optimisation level 1 instead of 2 compiles them in 12-18 %
#: less time and runs them as fast (2-core CPU, 2026-12-04, with contact: fold-2x4's
#: solve 4.69 -> 4.05 s of XLA compile, a 0.3 s run 24 -> 21 ms; the 10x10 map fold's
#: 7.30 -> 6.22 s, 761 -> 724 ms; its RK4 program 275 -> 291 ms for 100 steps, within
#: this machine's noise; the diagnostics block 1.60 -> 1.16 s and 1.97 -> 1.55 s).
#: Level 0 compiles faster still but runs the 10x10 fold's diagnostics at half the
#: speed. Other backends keep their defaults (unmeasured there).
COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}


class _RunProgram:
    """``eqx.filter_jit(fn)``, with :data:`COMPILER_OPTIONS` where it is compiled as a
    program of its own on a CPU. Inside another trace (a fit's loss, a batch) it is
    inlined into the caller's program, which takes none (JAX refuses options on a nested
    jit). Built on first use, when the backend is known (importing diffmb starts none)."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self._plain = eqx.filter_jit(fn)
        self._tuned = None

    def _top(self):
        if self._tuned is None:
            options = COMPILER_OPTIONS if jax.default_backend() == "cpu" else {}
            self._tuned = eqx.filter_jit(self.__wrapped__, compiler_options=options) if options else self._plain
        return self._tuned

    def __call__(self, *args, **kwargs):
        return (self._top() if outside_any_trace() else self._plain)(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._top().lower(*args, **kwargs)


class _Prepared(NamedTuple):
    """The validated arguments of the jitted solve, in :func:`_solve`'s order."""

    run: _Run
    system: System
    params: PyTree
    x0: jax.Array
    t0: jax.Array
    t1: jax.Array
    dt0: jax.Array | None
    ts: jax.Array
    max_violation: jax.Array
    #: the first step's plan, made at ``x0`` (:meth:`~diffmb.system.System.start_plan`), or None
    plan: PyTree = None


def _prepare(system, *, t1, t0, x0, params, dt, solver, rtol, atol, saveat, max_steps, events,
             progress, max_violation, adjoint, loop="diffrax") -> _Prepared:
    """Validated arguments of the jitted solve (see :class:`_Prepared`)."""
    solver, t0f, t1f, events = _check_run(system, t1=t1, t0=t0, dt=dt, solver=solver, rtol=rtol, atol=atol,
                                          events=events)
    fixed = solver in FIXED_SOLVERS
    if system.limits_steps and not (system.has_projection and system.plans_steps):
        # (the step check reads the plans the projected solver makes at a step's two ends)
        raise ValueError(f"{type(system).__name__}: its steps are limited (limits_steps) but not planned "
                         "(plans_steps, through a projection): an element that limits the steps must plan them")
    params, x0, plan = _initial_values(system, params, x0)
    ts = save_grid(t0f, t1f, None if dt is None else float(dt), saveat)
    if max_steps is None:
        max_steps = fixed_step_bound(math.ceil((t1f - t0f) / float(dt) * (1 + 1e-9)), adjoint) if fixed else 1 << 20
    dtype = x0.dtype
    # tolerances below the state's resolution collapse the step size (float32 at the
    # origami defaults' rtol 1e-10): raise them to 100 eps of its dtype
    resolution = 100 * float(jnp.finfo(dtype).eps)
    rtol, atol = max(float(rtol), resolution), max(float(atol), resolution * 1e-2)
    if fixed:
        # Equal steps that land on t1 exactly: diffrax would otherwise take ceil(span/dt)
        # steps of dt and a sliver, and float round-off in span/dt adds a step.
        n_fixed = max(1, math.ceil((t1f - t0f) / float(dt) - 1e-6))
        dt = (t1f - t0f) / n_fixed
    steps_per_save = _counted_loop(loop, fixed and n_fixed, ts, t0f, t1f, events, progress, adjoint)
    dt0 = None if dt is None else jnp.asarray(dt, dtype)
    run = _Run(
        solver=solver,
        # a fixed step reads no tolerance: runs that differ only in them share a program
        rtol=0.0 if fixed else float(rtol),
        atol=0.0 if fixed else float(atol),
        max_steps=int(max_steps),
        n_events=len(events),
        progress=bool(progress),
        check_violation=max_violation is not None,
        project_saves=system.has_projection and not (fixed and _on_step_ends(ts, t0f, dt)),
        adjoint=adjoint,
        events=events,
        form=spatial.contraction_form(),
        steps_per_save=steps_per_save,
    )
    _adjoint(adjoint)  # validate before tracing
    return _Prepared(run, system, params, x0, jnp.asarray(t0f, dtype), jnp.asarray(t1f, dtype), dt0,
                     jnp.asarray(ts, dtype), jnp.asarray(np.inf if max_violation is None else max_violation, dtype),
                     plan)


LOOPS = ("auto", "diffrax", "scan")


def _counted_loop(loop, n_steps, ts, t0, t1, events, progress, adjoint) -> int:
    """Steps per save interval of a run in counted loops (:mod:`~diffmb.simulation.fixed_steps`),
    0 for diffrax's loop: ``loop="scan"`` where the run cannot be one says why."""
    if loop not in LOOPS:
        raise ValueError(f"loop: unknown {loop!r}; expected one of {list(LOOPS)}")
    if loop == "diffrax":
        return 0
    why = ("an adaptive solver" if not n_steps else "events" if events else "a progress bar" if progress
           else f"the {adjoint} adjoint" if adjoint == "backsolve" else None)
    k = None if why else fixed_steps.scan_fits(n_steps, ts, t0, t1)
    if k is None and why is None:
        why = f"save points that are not evenly spaced ends of its {n_steps} steps"
    if why is not None and loop == "scan":
        raise ValueError(f"loop='scan': a run with {why} needs diffrax's loop (loop='diffrax')")
    return k or 0


def _check_run(system, *, t1, t0, dt, solver, rtol, atol, events):
    """``(solver, t0, t1, events)`` checked: a System, a known solver (lower case), a
    finite span, a step for a fixed-step solver, positive tolerances, callable events."""
    if not isinstance(system, System):
        raise TypeError(f"simulate: expected a diffmb System, got {type(system).__name__}")
    solver = solver.lower() if isinstance(solver, str) else solver
    if solver not in SOLVERS:
        raise ValueError(f"solver: unknown {solver!r}; expected one of {list(SOLVERS)}")
    t0f, t1f = float(t0), float(t1)
    if not (math.isfinite(t0f) and math.isfinite(t1f)) or t1f <= t0f:
        raise ValueError(f"t1 must be finite and greater than t0 (got t0={t0}, t1={t1})")
    if solver in FIXED_SOLVERS and dt is None:
        raise ValueError(f"solver {solver!r} is fixed-step: give dt")
    if dt is not None and not (float(dt) > 0 and math.isfinite(float(dt))):
        raise ValueError(f"dt must be positive and finite, got {dt}")
    if not (rtol > 0 and atol > 0):
        raise ValueError("rtol and atol must be positive")
    if events is not None and callable(events):
        events = [events]
    events = tuple(events or ())
    for e in events:
        if not callable(e):
            raise TypeError(f"events: {e!r} is not callable")
    return solver, t0f, t1f, events


def _initial_values(system, params, x0):
    """``(params, x0, plan)``: the system's defaults where not given; ``x0`` one entry per
    state; the first step's plan made there (``None`` where the system makes none)."""
    if params is None:
        params = system.default_params()
    plan = None
    if x0 is None:
        x0, plan = system.start_and_plan(params)
    x0 = jnp.asarray(x0)
    n_names = len(system.state_names)
    if x0.ndim != 1 or x0.shape[0] != n_names:
        raise ValueError(f"x0: expected shape ({n_names},), got {x0.shape}")
    if plan is None:
        plan = system.start_plan(x0, params)
    return params, x0, plan


def states_at(system: System, ts, *, t1: float, params, x0=None, t0: float = 0.0, dt=None,
              solver: str = "rk4", rtol: float = 1e-8, atol: float = 1e-10):
    """States at the times ``ts`` (non-decreasing, within ``[t0, t1]``), which may be traced:
    ``jax.jacfwd`` through it differentiates with respect to the save times too (a record's
    unknown start time, :mod:`diffmb.design.fit`). ``t1`` fixes the integration span (and the
    fixed-step count). Returns ``(xs (len(ts), n), status code)``; forward-mode adjoint."""
    n = int(jnp.shape(ts)[0])
    args = _prepare(system, t1=t1, t0=t0, x0=x0, params=params, dt=dt, solver=solver, rtol=rtol,
                    atol=atol, saveat=np.linspace(float(t0), float(t1), n), max_steps=None,
                    events=None, progress=False, max_violation=None, adjoint="direct")
    run = dataclasses.replace(args.run, project_saves=system.has_projection)
    tr = _solve(*args._replace(run=run, ts=jnp.asarray(ts, args.ts.dtype)))
    return tr.xs, tr.status_code


def compile_simulation(system: System, **kwargs):
    """Compile :func:`simulate` ahead of time (trace, lower, XLA compile) without running it.

    Returns ``(run, seconds)``: ``run(**changes)`` performs the simulation with the
    arguments given here, updated by ``changes`` (new numbers such as ``t0``, ``t1``,
    ``x0``, ``dt``, ``params`` of the same structure), and returns the
    :class:`~diffmb.simulation.trajectory.Trajectory`; ``seconds`` is the compile time, measured on
    its own instead of as a first call minus a second one. A change that alters the
    compiled structure (another solver, save-point count or step count) raises ValueError.

    The solve's XLA compile runs on a worker thread while this one traces the diagnostics
    programs, whose XLA compiles run on a second worker: XLA releases the GIL, so on two
    cores they overlap (fold-4panel: 4.6 -> 3.9 s with the solve alone on a worker; its
    RK4 run 2.3-2.7 -> 2.1-2.3 s with the diagnostics' compiles on a worker too; a second
    worker each, three compiles at once, slowed a large solve). ``diagnostics=False``: no
    diagnostics programs, compiled or run (as :func:`simulate`). The diagnostics are the
    blocked programs of an eager run (:func:`_diagnose_in_blocks`), whose shapes do not
    depend on the run's length: a run of the same structure with any save-point count,
    compiled ahead or not, shares them.
    """
    args = simulate(system, _compile_only=True, **kwargs)
    diagnosed = kwargs.get("diagnostics", True)
    start = time.perf_counter()
    lowered = _solve.lower(*args)
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="diffmb-compile")
    try:
        solve_compiled = pool.submit(lowered.compile)
        diagnosing = [pool.submit(low.compile) for low in _lower_diagnostics(system, args.params, args.x0,
                                                                              args.run.form)] if diagnosed else []
        compiled = solve_compiled.result()
        diagnose = tuple(f.result() for f in diagnosing)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    seconds = time.perf_counter() - start

    def run(**changes):
        new = simulate(system, _compile_only=True, **{**kwargs, **changes}) if changes else args
        if new.run != args.run or jax.tree.structure(new[1:]) != jax.tree.structure(args[1:]):
            raise ValueError(f"compile_simulation: {sorted(changes)} change the compiled structure")
        tr = compiled(*new)
        return _with_diagnostics(tr, system, new.params, new.x0, diagnose, args.run.form) if diagnosed else tr

    return run, seconds


class RunSettings(eqx.Module):
    """Options of a :func:`simulate` call held as static fields, so a Module that carries
    them (an objective, a batch member) is a jit cache key: ``settings.run(system, params)``."""

    t1: float = eqx.field(static=True)
    dt: float | None = eqx.field(static=True, default=None)
    solver: str = eqx.field(static=True, default="rk4")
    rtol: float = eqx.field(static=True, default=1e-8)
    atol: float = eqx.field(static=True, default=1e-10)
    saveat: int = eqx.field(static=True, default=1001)
    max_violation: float | None = eqx.field(static=True, default=None)
    loop: str = eqx.field(static=True, default="auto")

    def run(self, system, params, x0=None, **kw):
        return simulate(system, t1=self.t1, dt=self.dt, params=params, solver=self.solver,
                        rtol=self.rtol, atol=self.atol, saveat=self.saveat, x0=x0,
                        max_violation=self.max_violation, loop=self.loop, **kw)


class _Run(eqx.Module):
    """Static options of one simulate call (hashed into the jit cache key)."""

    solver: str = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    n_events: int = eqx.field(static=True)
    progress: bool = eqx.field(static=True)
    check_violation: bool = eqx.field(static=True)
    adjoint: str = eqx.field(static=True)
    events: tuple = eqx.field(static=True)
    project_saves: bool = eqx.field(static=True, default=True)
    #: the small products' form the program is traced in (:func:`diffmb.math.spatial.written_out`)
    form: str = eqx.field(static=True, default="reduce")
    #: steps per save interval in counted loops (:mod:`~diffmb.simulation.fixed_steps`); 0: diffrax's loop
    steps_per_save: int = eqx.field(static=True, default=0)


@_RunProgram
def _solve(run: _Run, system, params, x0, t0, t1, dt0, ts, max_violation, plan=None):
    """The integration: states at the save points ``ts``, with the run's status (see
    :func:`simulate`; ``max_violation`` is traced, ``inf`` when not checked; ``plan``: the
    first step's, made at ``x0``, :meth:`~diffmb.system.System.start_plan`)."""
    if system.plans_steps and plan is None:
        plan = system.start_plan(x0, params)
    if run.steps_per_save:
        return fixed_steps.solve(run, system, params, x0, t0, t1, dt0, ts, max_violation,
                                 steps_per_save=run.steps_per_save, solver_cls=FIXED_SOLVERS[run.solver],
                                 project=_project, project_and_plan=_project_and_plan)
    solver = _solver(run, system)
    controller, ts = _step_control(run, system, params, t0, t1, dt0, ts)
    event = _event(run, system, max_violation)
    sol = dfx.diffeqsolve(
        dfx.ODETerm(_VectorField(system)),
        solver,
        t0,
        t1,
        dt0,
        x0,
        # (the first step's plan, where the system plans its steps: the solver's state takes
        # it from here, and diffrax's check of the term traces the vector field as the
        # steps call it, so that the steps reuse that trace)
        system.planned(params, plan),
        saveat=dfx.SaveAt(ts=ts, t1=True),
        stepsize_controller=controller,
        adjoint=_adjoint(run.adjoint),
        event=event,
        max_steps=run.max_steps,
        throw=False,
        progress_meter=dfx.TqdmProgressMeter() if run.progress else dfx.NoProgressMeter(),
    )
    return _trajectory(run, system, params, x0, ts, sol, t1)


def _solver(run, system):
    """The diffrax solver, wrapped in :class:`ProjectedSolver` when the system projects,
    else in :class:`StepOnceSolver`."""
    fixed = run.solver in FIXED_SOLVERS
    cls = (FIXED_SOLVERS if fixed else ADAPTIVE_SOLVERS)[run.solver]
    rk = issubclass(cls, AbstractRungeKutta)
    inner = cls(scan_kind="bounded") if (rk and run.adjoint == "direct") else cls()
    return ProjectedSolver(inner, system, limited=not fixed and system.limits_steps) if system.has_projection \
        else StepOnceSolver(inner)


def _step_control(run, system, params, t0, t1, dt0, ts):
    """``(step-size controller, save times)``: fixed steps read from a grid (save times on
    step ends snapped onto it, :class:`_GridSteps`), or a PID controller that steps onto
    the system's jump times."""
    fixed = run.solver in FIXED_SOLVERS
    if fixed and run.adjoint != "backsolve":
        # (backsolve integrates the adjoint backwards with this controller: a grid of
        # increasing times cannot serve it, and it recomputes nothing from checkpoints)
        grid = fixed_steps.step_grid(t0, t1, dt0, run.max_steps)
        return _GridSteps(grid), _snap_to_grid(ts, grid, t0, dt0)
    if fixed:
        return dfx.ConstantStepSize(), ts
    weighed = _weighed_states(system)
    norm = {"norm": _WeighedStatesNorm(weighed)} if len(weighed) < len(system.state_names) else {}
    controller = dfx.PIDController(
        rtol=run.rtol, atol=run.atol, dtmin=(t1 - t0) * 1e-13, force_dtmin=False,
        jump_ts=system.jump_times(params), **norm,
    )
    return (_LimitedSteps(controller, system) if system.limits_steps else controller), ts


def _weighed_states(system) -> tuple:
    """Indices of the states a step's error norm weighs: all but the force elements'
    :attr:`~diffmb.tree.force_element.ForceElement.unweighted_states` (each element's own
    states follow the tree's, in the elements' order)."""
    elements = getattr(system, "elements", ())
    n = len(system.state_names)
    start, left = n - sum(len(e.state_names) for e in elements), set()
    for e in elements:
        left |= {start + i for i in e.unweighted_states}
        start += len(e.state_names)
    return tuple(i for i in range(n) if i not in left)


class _WeighedStatesNorm(eqx.Module):
    """The RMS of a step's scaled error over the states it weighs (:func:`_weighed_states`).
    Contact's arming flags carry no error; averaged in, they loosened the tolerance (the
    20x20 map fold's 2.0 times, and 8.2 times while each pair had a state of its own).
    An augmented state (backsolve's adjoint) is weighed whole."""

    weighed: tuple = eqx.field(static=True)

    def __call__(self, y):
        if isinstance(y, jax.Array) and y.ndim == 1 and y.shape[0] > max(self.weighed):
            return optx.rms_norm(y[np.asarray(self.weighed)])
        return optx.rms_norm(y)


class _LimitedSteps(dfx.AbstractAdaptiveStepSizeController):
    """An adaptive controller that takes a step only as far as the system admits it
    (:meth:`~diffmb.system.System.step_fraction` of the step from its start to its
    candidate end, which :func:`_projected_step` reports beside the step's error, as
    ``(error, fraction)``: the plans it is formed from live in the solver's state, which
    a controller does not see): a step the system does not admit whole is rejected and retried at
    ``SAFETY`` times the admitted fraction, and the next step after an accepted one is
    kept within ``SAFETY`` times the fraction it had to spare (a contact barrier cannot
    be jumped over: it acts only within its reach, where the step-size control sees it).
    Its tolerances are the inner controller's: an implicit solver's root find takes them
    from here, as from any adaptive controller."""

    inner: dfx.AbstractAdaptiveStepSizeController
    system: System
    SAFETY = 0.9

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm

    def wrap(self, direction):
        return _LimitedSteps(self.inner.wrap(direction), self.system)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, next_t0, next_t1, made_jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error[0], error_order, controller_state)
        fraction = y_error[1]   # (the step's own, :func:`_projected_step`)
        fraction = jnp.where(jnp.isnan(fraction), jnp.inf, fraction)   # a non-finite candidate is the error's to reject
        admitted = fraction >= 1.0
        # differentiated where it limits the step (a limited step ends where the geometry
        # says, as an event would), and with a zero tangent where nothing limits it: an
        # inf times the step's tangent is NaN, and min/max pass a NaN tangent on
        limited = jnp.isfinite(fraction)
        room = jnp.where(limited, self.SAFETY * jnp.where(limited, fraction, 1.0) * (t1 - t0), jnp.inf)
        # admitted: the next step within the room this one left; else a retry from t0
        next_t0 = jnp.where(admitted, next_t0, t0)
        next_t1 = jnp.minimum(next_t1, next_t0 + room)
        return keep & admitted, next_t0, next_t1, made_jump, state, result


class _VectorField(eqx.Module):
    """The diffrax vector field ``vf(t, x, params)`` of ``system``: a Module, so that the
    system's arrays are arguments of a jitted step, not constants closed over."""

    system: System

    def __call__(self, t, x, p):
        return self.system.vector_field(t, x, p)


def _event(run, system, max_violation):
    """The run's termination event: divergence (a non-finite state, or a violation above
    ``max_violation`` when checked) first, then the user's events (real ones located by
    a Newton root find)."""

    def diverged(t, y, args, **kw):
        bad = ~jnp.all(jnp.isfinite(y))
        if run.check_violation:
            viol = system.violation(y, args)
            worst = jnp.max(jnp.stack([jnp.max(jnp.abs(v)) for v in viol.values()])) if viol else 0.0
            bad = bad | (worst > max_violation)
        return bad

    def wrap(g):
        return lambda t, y, args, **kw: g(t, y, args)

    cond = [diverged] + [wrap(g) for g in run.events]
    root = optx.Newton(rtol=1e-12, atol=1e-12) if run.n_events else None
    return dfx.Event(cond, root_finder=root)


def _status(run, sol, mask, reached_t1):
    """The run's :data:`~diffmb.simulation.trajectory.STATUS_CODES` entry from diffrax's result and
    the event mask (``mask[0]``: divergence).

    diffrax checks the *next* step size against ``dtmin`` after every accepted step,
    including the one that lands on ``t1``; that step may be a sliver (diffrax rounds a
    step onto ``t1`` only within 100 ULPs of it, and ``dtmin`` is ``1e-13`` of the span:
    at ``t1 = 0.030000000000000006`` after a step ending at ``0.03`` the next proposal fell
    below it), so ``dt_min_reached`` with ``t1`` reached is a completed run."""
    div_event = mask[0]
    user_event = jnp.any(jnp.stack(mask[1:])) if run.n_events else False
    R = dfx.RESULTS
    done = (sol.result == R.successful) | ((sol.result == R.dt_min_reached) & reached_t1)
    return jnp.where(
        done,
        STATUS_CODES["success"],
        jnp.where(
            sol.result == R.event_occurred,
            jnp.where(div_event, STATUS_CODES["diverged"],
                      jnp.where(user_event, STATUS_CODES["event"], STATUS_CODES["success"])),
            jnp.where(sol.result == R.max_steps_reached, STATUS_CODES["max_steps"],
                      STATUS_CODES["diverged"]),
        ),
    )


def _trajectory(run, system, params, x0, ts, sol, t1) -> Trajectory:
    """The :class:`~diffmb.simulation.trajectory.Trajectory` of a solve: the save points it reached
    (projected where they come from dense output; NaN after the end), its end state,
    step counts and status."""
    # diffrax stores the final (t1 or event) entry right after the last save point
    # it reached, so it sits at index n only for a run that went all the way.
    n = ts.shape[0]
    last = jnp.sum(jnp.isfinite(sol.ts)) - 1
    t_final, x_final = sol.ts[last], sol.ys[last]
    xs = sol.ys[:n]
    mask = sol.event_mask
    status = _status(run, sol, mask, t_final >= t1)
    valid = jnp.arange(n) < last
    safe_xs = jnp.where(valid[:, None], xs, x0[None, :])
    if run.project_saves:
        # save points inside a step come from the dense output, which is on the state
        # manifold only to the solver's tolerance: project them (a fixed-step run whose
        # save points are all step ends skips this: they are the projected step ends
        # already), with the fewer iterations a state that close needs
        # (lax.map, not vmap: a vmapped batch of projections deadlocked XLA's CPU runtime
        # intermittently on a repeated call; one projection per save point is cheap)
        safe_xs = jax.lax.map(lambda x: _project_interpolated(system, x, params), safe_xs)
        xs = jnp.where(valid[:, None], safe_xs, xs)
    nan = jnp.asarray(jnp.nan, xs.dtype)
    return Trajectory(
        ts=jnp.where(valid, sol.ts[:n], nan),
        xs=jnp.where(valid[:, None], xs, nan),
        diagnostics={},
        violation={},
        t_final=t_final,
        x_final=x_final,
        n_steps=sol.stats["num_accepted_steps"],
        n_rejected=sol.stats["num_rejected_steps"],
        status_code=status,
        event_mask=jnp.stack(mask),
        state_names=tuple(system.state_names),
        coordinate_names=tuple(system.coordinate_names),
        solver=run.solver,
        roles=tuple(system.coordinate_roles.items()),
    )


@eqx.filter_jit
def _diagnose(system, params, ts, xs, x0, form="reduce"):
    """The system's diagnostics and constraint violation at every save point the run
    reached (NaN elsewhere); ``form`` keys the program on the form it is traced in
    (:func:`diffmb.math.spatial.written_out`). A program of its own, apart from :func:`_solve`: it depends
    only on the system's structure and the save-point count, so runs that differ in solver,
    horizon, events or adjoint share it, and a run that needs only states (a fit's
    residuals) never compiles it. A run outside any trace calls it in blocks
    (:func:`_diagnose_in_blocks`) instead."""
    diag, viol = _pointwise(system, params, ts, xs, x0, one_at_a_time=True)
    n = xs.shape[0]
    sample = np.arange(0, n, max(1, math.ceil(n / SAMPLED_POINTS)))
    nan = jnp.asarray(jnp.nan, xs.dtype)
    for k, v in _sampled(system, params, ts[sample], xs[sample], x0).items():
        diag[k] = jnp.full((n,) + v.shape[1:], nan, v.dtype).at[sample].set(v)
    return diag, viol


def _blank(valid, a):
    return jnp.where(valid.reshape(valid.shape + (1,) * (a.ndim - 1)), a, jnp.asarray(jnp.nan, a.dtype))


def _pointwise(system, params, ts, xs, x0, one_at_a_time=False):
    """``(diagnostics, violation)`` at every save point (NaN where ``ts`` is).
    ``one_at_a_time``: the save points in a counted loop rather than side by side, so the
    program holds one save point's temporaries, not all of them (a batch chunk's 6x6 map
    fold held 22.6 MB a member at 11 save points, nearly all the panel detector's pairs)."""
    valid = jnp.isfinite(ts)
    safe = jnp.where(valid[:, None], xs, x0[None, :])  # finite inputs keep gradients finite
    at = lambda x: (system.diagnostics(x, params), system.violation(x, params))
    diag, viol = jax.lax.map(at, safe) if one_at_a_time else jax.vmap(at)(safe)
    return {k: _blank(valid, v) for k, v in diag.items()}, {k: _blank(valid, v) for k, v in viol.items()}


def _sampled(system, params, ts, xs, x0):
    """:meth:`~diffmb.system.System.sampled_diagnostics` at the given save points."""
    valid = jnp.isfinite(ts)
    safe = jnp.where(valid[:, None], xs, x0[None, :])
    return {k: _blank(valid, v) for k, v in jax.vmap(lambda x: system.sampled_diagnostics(x, params))(safe).items()}


#: Save points per call of the blocked diagnostics program (:func:`_diagnose_in_blocks`).
DIAGNOSED_BLOCK = 64


@_RunProgram
def _diagnose_block(system, params, ts, xs, x0, form="reduce"):
    return _pointwise(system, params, ts, xs, x0)


@_RunProgram
def _diagnose_sample(system, params, ts, xs, x0, form="reduce"):
    return _sampled(system, params, ts, xs, x0)


def _lower_diagnostics(system, params, x0, form):
    """``(block, sample)``: :func:`_diagnose_block` and :func:`_diagnose_sample` lowered
    for ``system``, to be compiled ahead of time (for :func:`_diagnose_in_blocks`). Their
    shapes come from NumPy arrays: a device array would compile a program of its own."""
    dtype = jnp.result_type(x0)
    return tuple(fn.lower(system, params, np.zeros(n, dtype), np.zeros((n, x0.shape[0]), dtype), x0, form)
                 for fn, n in ((_diagnose_block, DIAGNOSED_BLOCK), (_diagnose_sample, SAMPLED_POINTS)))


def _diagnose_in_blocks(system, params, ts, xs, x0, form, programs=None):
    """:func:`_diagnose`'s numbers from two programs whose shapes do not depend on the
    run's length: the pointwise diagnostics over blocks of :data:`DIAGNOSED_BLOCK` save
    points (the last padded) and the sampled ones at :data:`SAMPLED_POINTS` points (padded
    likewise). Runs of one system structure with any save-point count share them (the
    default test job compiled the per-length program 98 times). ``programs``: the two
    compiled ahead (:func:`_lower_diagnostics`)."""
    block, sampled = programs or (_diagnose_block, _diagnose_sample)
    ts, xs = np.asarray(ts), np.asarray(xs)
    n, B = xs.shape[0], DIAGNOSED_BLOCK
    nb = max(1, math.ceil(n / B))
    pad_t = np.concatenate([ts, np.full(nb * B - n, np.nan, ts.dtype)])
    pad_x = np.concatenate([xs, np.zeros((nb * B - n, xs.shape[1]), xs.dtype)])
    blocks = [block(system, params, pad_t[i * B:(i + 1) * B], pad_x[i * B:(i + 1) * B], x0, form)
              for i in range(nb)]
    join = lambda parts: np.concatenate([np.asarray(a) for a in parts])[:n]
    diag = {k: join([b[0][k] for b in blocks]) for k in blocks[0][0]}
    viol = {k: join([b[1][k] for b in blocks]) for k in blocks[0][1]}
    sample = np.arange(0, n, max(1, math.ceil(n / SAMPLED_POINTS)))
    S = SAMPLED_POINTS
    st = np.concatenate([ts[sample], np.full(S - sample.size, np.nan, ts.dtype)])
    sx = np.concatenate([xs[sample], np.zeros((S - sample.size, xs.shape[1]), xs.dtype)])
    for k, v in sampled(system, params, st, sx, x0, form).items():
        v = np.asarray(v)
        diag[k] = np.full((n,) + v.shape[1:], np.nan, v.dtype)
        diag[k][sample] = v[: sample.size]
    return ({k: jnp.asarray(v) for k, v in diag.items()}, {k: jnp.asarray(v) for k, v in viol.items()})


def _with_diagnostics(tr: Trajectory, system, params, x0, diagnose=None, form=None) -> Trajectory:
    """``tr`` with its diagnostics: inside a trace as part of the traced program, else in
    blocks (by ``diagnose``, the block programs compiled ahead, when given)."""
    form = form or spatial.contraction_form()
    if isinstance(tr.xs, jax.core.Tracer):
        diag, viol = _diagnose(system, params, tr.ts, tr.xs, x0, form)
    else:
        diag, viol = _diagnose_in_blocks(system, params, tr.ts, tr.xs, x0, form, diagnose)
    return dataclasses.replace(tr, diagnostics=diag, violation=viol)
