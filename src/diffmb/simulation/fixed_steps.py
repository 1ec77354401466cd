"""Fixed-step runs as loops the compiler can count: the time loop of a ``rk4``/``euler`` run
written as ``lax.scan``, not diffrax's ``while``.

diffrax's step loop runs while ``tprev < t1``, its Runge-Kutta stage loop and its save
loop likewise, so XLA sees no trip count in any of them: on a GPU the host reads each
loop's predicate back once per iteration (about seven round trips per RK4 step), and no
loop can be captured as one device graph. A fixed-step run needs none of that. Here the
run is an outer ``scan`` over the save intervals around an inner ``scan`` over the steps
of one interval, and each step's stages are a ``scan`` over the rows of diffrax's Butcher
tableau (:data:`~diffmb.simulation.integrate.RK4`'s, or Euler's), one copy of the vector
field in the program; every loop has a known trip count.

* Steps end where :class:`~diffmb.simulation.integrate._GridSteps` puts them (the same
  grid), and ``System.project`` runs after every step, as in the diffrax loop: the states
  equal the diffrax path's to round-off.
* Divergence is a per-member flag carried through the loop and checked at the save
  points only (a non-finite state, or the violation above ``max_violation``): a member that
  diverged keeps its last good save point as its end state, and its later save points are
  NaN, as a diffrax run that stopped. The run's ``t_final`` is that save point's time,
  not the step at which it failed.
* Reverse mode differentiates through the loop with every step and every save interval
  rematerialised (``jax.checkpoint``): memory for the save points and one interval's
  steps, not for every step.

Used where the save points are evenly spaced on step ends (a sweep's ``saveat=11`` over
``t1 / dt`` steps divisible by 10), without user events or a progress bar
(:func:`scan_fits`).
"""

from __future__ import annotations

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from ..math import spatial as sp
from .trajectory import STATUS_CODES, Trajectory

#: The named scopes of the loops (the program's op names: :mod:`diffmb.simulation.program_census`).
SAVE_SCOPE = "diffmb_save_intervals"
STEP_SCOPE = "diffmb_time_steps"
STAGE_SCOPE = "diffmb_rk_stages"


def scan_fits(n_steps: int, ts: np.ndarray, t0: float, t1: float) -> int | None:
    """Steps per save interval when the save points ``ts`` are ``t0``, ``t1`` and evenly
    spaced step ends of an ``n_steps``-step run; ``None`` when they are not."""
    n_save = len(ts) - 1
    if n_save < 1 or n_steps % n_save:
        return None
    if not np.allclose(ts, np.linspace(t0, t1, n_save + 1), rtol=0, atol=1e-9 * (t1 - t0) / n_steps):
        return None
    return n_steps // n_save


def _tableau(solver_cls):
    """``(a (s, s), b (s,), c (s,))`` of an explicit one-step method (diffrax's tableau;
    Euler is one stage)."""
    if solver_cls is dfx.Euler:
        return np.zeros((1, 1)), np.ones(1), np.zeros(1)
    tab = solver_cls.tableau
    s = len(tab.b_sol)
    a = np.zeros((s, s))
    for i, row in enumerate(tab.a_lower):
        a[i + 1, : len(row)] = row
    return a, np.asarray(tab.b_sol), np.concatenate([[0.0], tab.c])


def rk_step(vf, a, b, c, t, h, y, args):
    """One explicit Runge-Kutta step ``y + h sum_i b_i k_i``, ``k_i = f(t + c_i h, y + h
    sum_j a_ij k_j)``: the stages a ``scan`` over the tableau's rows (one vector field in
    the program), the stage slopes in an ``(s, n)`` buffer."""
    s = len(b)
    dt = y.dtype
    rows = jnp.asarray(a, dt), jnp.asarray(c, dt), jnp.arange(s)

    def stage(ks, row):
        ai, ci, i = row
        k = vf(t + ci * h, y + h * sp.table_product(ai, ks), args)
        return ks.at[i].set(k), None

    with jax.named_scope(STAGE_SCOPE):
        ks, _ = jax.lax.scan(stage, jnp.zeros((s,) + y.shape, dt), rows)
    return y + h * sp.table_product(jnp.asarray(b, dt), ks)


def step_grid(t0, t1, dt0, max_steps: int):
    """``(max_steps + 2,)`` step ends ``t0 + (t1 - t0) k / n`` for ``k <= n``, then ``t1``;
    ``n = ceil((t1 - t0) / dt0)`` as diffrax's ConstantStepSize counts it. The barrier
    keeps XLA from folding ``t0, t1, dt0`` known at trace time into the arithmetic
    (rewritten, it rounds differently), so a run inside a jitted function (a sweep's
    members) steps to the same times as the same run called directly."""
    t0, t1, dt0 = jax.lax.optimization_barrier((t0, t1, dt0))
    n = jnp.ceil((t1 - t0) / jnp.nextafter(dt0, jnp.inf))
    k = jnp.arange(max_steps + 2, dtype=t0.dtype)
    return jnp.where(k < n, t0 + (t1 - t0) * (k / n), t1)


def solve(run, system, params, x0, t0, t1, dt0, ts, max_violation, *, steps_per_save, solver_cls, project,
          project_and_plan):
    """The :class:`~diffmb.simulation.trajectory.Trajectory` (states at the save points
    ``ts``) of a fixed-step run in counted loops (module docstring); ``project(system, y,
    params)``: the projection after every step; with a system that plans its steps
    (:meth:`~diffmb.system.System.step_plan`), ``project_and_plan`` projects and makes
    the next step's plan at each step's end (a save interval's first step has none: the
    plan is carried within an interval only)."""
    n_save = ts.shape[0] - 1
    n_steps = n_save * steps_per_save
    grid = step_grid(t0, t1, dt0, n_steps)[: n_steps + 1]
    starts = grid[:-1].reshape(n_save, steps_per_save)
    ends = grid[1:].reshape(n_save, steps_per_save)
    a, b, c = _tableau(solver_cls)
    vf = system.vector_field
    planning = system.has_projection and system.plans_steps

    @jax.checkpoint
    def step(carry, t):
        ta, tb = t
        y, plan = carry
        y1 = rk_step(vf, a, b, c, ta, tb - ta, y, system.planned(params, plan))
        if planning:   # (the stages only decide by the plan: nothing differentiates it)
            y1, plan = project_and_plan(system, y1, params)
            return (y1, jax.lax.stop_gradient(plan)), None
        return ((project(system, y1, params) if system.has_projection else y1), None), None

    @jax.checkpoint
    def interval(y, t):
        with jax.named_scope(STEP_SCOPE):
            (y, _), _ = jax.lax.scan(step, (y, system.step_plan(params) if planning else None), t)
        return y

    def bad(y):
        out = ~jnp.all(jnp.isfinite(y))
        if run.check_violation:
            viol = system.violation(y, params)
            if viol:
                worst = jnp.max(jnp.stack([jnp.max(jnp.abs(v)) for v in viol.values()]))
                out = out | ~(worst <= max_violation)
        return out

    def save(carry, t):
        y, last, alive = carry
        y1 = interval(y, t)
        alive = alive & ~bad(y1)
        y1 = jnp.where(alive, y1, last)           # a member that diverged stays at its last good point
        return (y1, y1, alive), (y1, alive)

    with jax.named_scope(SAVE_SCOPE):
        (_, x_last, alive), (ys, ok) = jax.lax.scan(save, (x0, x0, jnp.asarray(True)), (starts, ends))
    ok = jnp.concatenate([jnp.ones(1, bool), ok])
    xs = jnp.concatenate([x0[None], ys])
    nan = jnp.asarray(jnp.nan, xs.dtype)
    good = jnp.sum(ok) - 1                            # save intervals completed
    t_grid = jnp.concatenate([grid[:1], ends[:, -1]])
    status = jnp.where(alive, STATUS_CODES["success"], STATUS_CODES["diverged"])
    return Trajectory(
        ts=jnp.where(ok, t_grid, nan),
        xs=jnp.where(ok[:, None], xs, nan),
        diagnostics={},
        violation={},
        t_final=t_grid[good],
        x_final=x_last,
        n_steps=(good * steps_per_save).astype(jnp.int32),
        n_rejected=jnp.asarray(0, jnp.int32),
        status_code=status,
        event_mask=jnp.stack([~alive]),
        state_names=tuple(system.state_names),
        coordinate_names=tuple(system.coordinate_names),
        solver=run.solver,
        roles=tuple(system.coordinate_roles.items()),
    )
