"""Fit scenario parameters (hinge stiffness, damping, rest angles, inertia scale, ...) to
measured deployments, and synthesise such measurements from known parameters.

The loss is the weighted squared error of the simulated columns at the data times
(diffrax ``saveat``): ``sum_i sum_c ((y_c(t_i; theta) - d_ic) / w_c)^2``. It is a
nonlinear least-squares problem with few parameters, so it is solved by
Levenberg–Marquardt (damped Gauss–Newton) rather than a first-order optimiser: the
residual Jacobian comes from forward-mode differentiation through
:func:`~diffmb.integrate.simulate` (one tangent per parameter), and the same Jacobian gives
the standard errors: ``cov = s^2 (J^T J)^-1`` with ``s^2 = RSS / (m - p)`` (the
Gauss–Newton / Fisher approximation for Gaussian noise). Parameters that start
non-negative are bounded below by 0.

Multiple shooting (``shooting=S``) splits a long record into ``S`` segments; segment
``k > 0`` starts from its own unknown state (initialised from the initial-guess run), and
continuity residuals ``(x_end_{k-1} - x_start_k) / continuity_scale`` tie them together.
It keeps a long, sensitive record (a snap-through, a chaotic tumble) from making the
single-shot residual a wildly nonlinear function of the parameters.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import scenarios
from .binding import Binding, resolve
from .data import Data, default_columns, sample_times
from .integrate import simulate


@dataclass
class FitResult:
    """Fitted ``params`` with ``stderr`` (same units), ``rms`` of the residual (data units)."""

    names: tuple
    params: dict
    stderr: dict
    rms: float
    initial: dict
    initial_rms: float
    iterations: int
    converged: bool
    history: list = field(default_factory=list)
    wall_s: float = 0.0
    compile_s: float = 0.0

    def to_json(self) -> dict:
        return {"params": self.params, "stderr": self.stderr, "rms": self.rms,
                "initial": {"params": self.initial, "rms": self.initial_rms},
                "iterations": self.iterations, "converged": self.converged,
                "history": self.history, "wall_s": self.wall_s, "compile_s": self.compile_s}


class _Residual(eqx.Module):
    """Residual vector of the fit as a function of the unknowns ``z``."""

    binding: Binding
    t_data: tuple = eqx.field(static=True)  # per segment: the data times (tuple of tuples)
    y_data: jnp.ndarray
    cols: tuple = eqx.field(static=True)
    weights: jnp.ndarray
    mask: jnp.ndarray  # (m,) 1 for data rows inside the current horizon (continuation)
    starts: tuple = eqx.field(static=True)  # segment start times
    n_params: int = eqx.field(static=True)
    n_state: int = eqx.field(static=True)
    log_mask: tuple = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)
    solver: str = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    cont_scale: jnp.ndarray
    lower: tuple = eqx.field(static=True, default=())  # lower bounds of the natural parameters

    def natural(self, z):
        th = z[: self.n_params]
        mask = jnp.asarray(self.log_mask)
        return jnp.where(mask, jnp.exp(jnp.where(mask, th, 0.0)), th)

    def run(self, z):
        """Simulated columns at the data times, per segment, and the segment end states."""
        params = self.binding.params(self.natural(z))
        system = self.binding.system
        x0 = system.init_state(params)
        outs, ends = [], []
        for k, ts in enumerate(self.t_data):
            t0 = self.starts[k]
            if k > 0:
                x0 = z[self.n_params + (k - 1) * self.n_state: self.n_params + k * self.n_state]
            t1 = self.starts[k + 1] if k + 1 < len(self.starts) else ts[-1]
            saves = np.asarray(ts + ((t1,) if t1 > ts[-1] else ()))
            tr = simulate(system, t0=t0, t1=t1, x0=x0, params=params, dt=self.dt,
                          solver=self.solver, rtol=self.rtol, atol=self.atol,
                          saveat=saves, adjoint="direct")
            outs.append(tr.xs[: len(ts)][:, np.asarray(self.cols)])
            ends.append(tr.x_final)
        return outs, ends

    def __call__(self, z):
        outs, ends = self.run(z)
        err = (jnp.concatenate(outs, 0) - self.y_data) / self.weights[None, :]
        r = [(err * self.mask[:, None]).reshape(-1)]
        for k in range(1, len(self.t_data)):
            x_start = z[self.n_params + (k - 1) * self.n_state: self.n_params + k * self.n_state]
            r.append((ends[k - 1] - x_start) / self.cont_scale)
        return jnp.concatenate(r)


@eqx.filter_jit
def _res_jac(res, z):
    return res(z), jax.jacfwd(res)(z)


@eqx.filter_jit
def _res(res, z):
    return res(z)


def _segments(t, shooting):
    if shooting < 1 or shooting > len(t) // 2:
        raise ValueError(f"shooting: need 1 <= segments <= {len(t) // 2} for {len(t)} samples, got {shooting}")
    return [np.asarray(s) for s in np.array_split(np.arange(len(t)), shooting)]


def fit(scenario, data: Data, names, *, overrides=None, stabilization=None, dt=None, solver=None,
        rtol=None, atol=None, weights=None, shooting=1, continuity_scale=1e-3, log=None,
        continuation=True, max_iterations=30, tol=1e-8, lm_lambda=1e-3, callback=None) -> FitResult:
    """Fit scenario parameters ``names`` to ``data`` (see module doc).

    ``scenario``: a Scenario, its name, or a :class:`~diffmb.binding.Binding`; the starting
    values are the scenario's as modified by ``overrides``. ``weights``: per column
    (default 1: plain least squares in the data's units). Parameters that start at or
    above zero are kept there (a bound, not a log transform: ``log(c)`` would make a
    damping the data barely sees early in the record run off to 0, where its gradient
    vanishes). ``log``: names to fit as ``log(value)`` instead. ``continuation``: fit growing prefixes
    of the record (10, 25, 50, 100 % by default without shooting, off with it; ``False``:
    the whole record at once; or a tuple of fractions). Shooting nodes start from the
    data where a column measures a state (its rate, named ``<column>_dot``, from finite
    differences) and from the initial-guess run elsewhere. Each stage stops when the relative decrease of the cost or the
    step falls below ``tol``, or after ``max_iterations``.
    """
    b, st = resolve(scenario, names, overrides, stabilization, dt=dt, solver=solver, rtol=rtol, atol=atol)
    names = b.names
    system = b.system
    missing = [n for n in data.names if n not in system.state_names]
    if missing:
        raise ValueError(f"{data.path}: column(s) {', '.join(missing)} are not states of this system")
    solver, dt, rtol, atol = st["solver"], st["dt"], st["rtol"], st["atol"]
    v0 = np.asarray(b.values, float)
    log = () if log is None else tuple(log)
    mask = tuple(n in log for n in names)
    for n, v, m in zip(names, v0, mask):
        if m and not v > 0:
            raise ValueError(f"parameter {n!r}: log-space fit needs a positive start, got {v:g}")
    w = np.ones(len(data.names)) if weights is None else np.asarray(weights, float)
    if w.shape != (len(data.names),) or not np.all(w > 0):
        raise ValueError(f"weights: expected {len(data.names)} positive numbers (one per column)")
    segs = _segments(data.t, shooting)
    t_data = tuple(tuple(float(x) for x in data.t[s]) for s in segs)
    starts = (0.0,) + tuple(float(data.t[s[0]]) for s in segs[1:])
    nx = len(system.state_names)
    z_par = np.where(mask, np.log(np.where(mask, v0, 1.0)), v0)
    res = _Residual(binding=b, t_data=t_data, y_data=jnp.asarray(data.values), cols=tuple(int(i) for i in data.columns_in(system.state_names)),
                    weights=jnp.asarray(w), mask=jnp.ones(len(data.t)), starts=starts, n_params=len(names), n_state=nx,
                    log_mask=mask, dt=dt, solver=solver, rtol=float(rtol), atol=float(atol),
                    cont_scale=jnp.asarray(continuity_scale, float),
                    lower=tuple(0.0 if (v >= 0 and not m) else -math.inf for v, m in zip(v0, mask)))
    z = np.asarray(z_par, float)
    if shooting > 1:  # shooting nodes from the initial-guess run
        guess = simulate(system, t1=starts[-1], params=b.params(jnp.asarray(v0)), dt=dt, solver=solver,
                         rtol=rtol, atol=atol, saveat=np.asarray(starts))
        nodes = np.array(guess.xs)
        names_x = list(system.state_names)
        for j, col in enumerate(data.names):  # measured states from the data, rates by differences
            i0 = names_x.index(col)
            rate = np.gradient(data.values[:, j], data.t)
            for k in range(1, shooting):
                row = int(segs[k][0])
                nodes[k, i0] = data.values[row, j]
                if col + "_dot" in names_x:
                    nodes[k, names_x.index(col + "_dot")] = rate[row]
        z = np.concatenate([z] + [nodes[k] for k in range(1, shooting)])
        continuation = False if continuation is True else continuation

    m_data = data.values.size
    stages = _stages(data.t, continuation)
    history, it_total, compile_s, converged = [], 0, 0.0, False
    t_loop = time.perf_counter()
    initial_rms = None
    for k, t_end in enumerate(stages):
        res = eqx.tree_at(lambda r: r.mask, res, jnp.asarray((data.t <= t_end + 1e-12).astype(float)))
        tic = time.perf_counter()
        r, J = map(np.asarray, _res_jac(res, jnp.asarray(z)))
        if k == 0:
            compile_s = time.perf_counter() - tic
        if initial_rms is None:
            initial_rms = _rms(np.asarray(_res(eqx.tree_at(lambda r_: r_.mask, res, jnp.ones(len(data.t))),
                                               jnp.asarray(z))), m_data)
        z, r, J, its, converged = _levenberg_marquardt(res, z, r, J, max_iterations, tol, lm_lambda,
                                                        history, names, t_end, callback)
        it_total += its
    theta = np.asarray(res.natural(jnp.asarray(z)))
    # standard errors in natural units: d theta / d z = theta for log parameters
    scale = np.concatenate([np.where(mask, theta, 1.0), np.ones(len(z) - len(names))])
    Jn = J / scale[None, :]
    dof = max(1, r.size - len(z))
    s2 = float(r @ r) / dof
    cov = s2 * np.linalg.pinv(Jn.T @ Jn)
    se = np.sqrt(np.maximum(np.diag(cov)[: len(names)], 0.0))
    rms = _rms(r * np.concatenate([np.repeat(w[None, :], len(data.t), 0).reshape(-1),
                                   np.ones(r.size - m_data)]), m_data)
    return FitResult(names=names, params=dict(zip(names, map(float, theta))),
                     stderr=dict(zip(names, map(float, se))), rms=rms,
                     initial=dict(zip(names, map(float, v0))), initial_rms=initial_rms,
                     iterations=it_total, converged=converged, history=history,
                     wall_s=time.perf_counter() - t_loop - compile_s, compile_s=compile_s)


def _rms(r, m_data):
    return math.sqrt(float(np.sum(r[:m_data] ** 2)) / m_data)


def _stages(t, continuation):
    """Horizons of the continuation stages: the fit is first made on the start of the
    record (where the response is nearly linear in the parameters) and then extended,
    which keeps a factor-of-3 error in a stiffness (a period off by sqrt 3) out of the
    wrong basin of the single-shot least-squares problem."""
    if not continuation:
        return [float(t[-1])]
    span = float(t[-1] - t[0])
    fr = (0.1, 0.25, 0.5, 1.0) if continuation is True else tuple(continuation)
    return [float(t[0] + f * span) for f in fr]


#: Largest change of a log-space parameter per iteration (a factor of e).
MAX_LOG_STEP = 1.0


def _levenberg_marquardt(res, z, r, J, max_iterations, tol, lam, history, names, horizon, callback):
    """Damped Gauss-Newton with Marquardt's diagonal scaling; returns ``(z, r, J, its, ok)``."""
    cost, converged, it = float(r @ r), False, 0
    log_mask = np.asarray(res.log_mask, float)
    for it in range(1, max_iterations + 1):
        A, g = J.T @ J, J.T @ r
        D = np.diag(np.maximum(np.diag(A), 1e-12 * max(np.max(np.diag(A)), 1e-300)))
        accepted = False
        for _ in range(16):
            step = -np.linalg.solve(A + lam * D, g)
            big = np.max(np.abs(step[: res.n_params]) * log_mask) if any(res.log_mask) else 0.0
            if big > MAX_LOG_STEP:  # a parameter the data barely sees must not run off to 0 or inf
                step = step * (MAX_LOG_STEP / big)
            z_try = z + step
            z_try[: res.n_params] = np.maximum(z_try[: res.n_params], np.asarray(res.lower))
            r_try = np.asarray(_res(res, jnp.asarray(z_try)))
            c_try = float(r_try @ r_try) if np.all(np.isfinite(r_try)) else math.inf
            if c_try < cost:
                accepted = True
                break
            lam *= 4.0
        if not accepted:  # no decrease left at this precision: a minimum
            converged = True
            break
        rel = (cost - c_try) / max(cost, 1e-300)
        small = np.max(np.abs(step)) < tol * (1 + np.max(np.abs(z)))
        z, cost, lam = z_try, c_try, max(lam / 4.0, 1e-9)
        theta = dict(zip(names, map(float, np.asarray(res.natural(jnp.asarray(z))))))
        history.append({"iteration": len(history) + 1, "horizon": horizon, "cost": cost, "params": theta})
        if callback is not None:
            callback(len(history), cost, theta)
        r, J = map(np.asarray, _res_jac(res, jnp.asarray(z)))
        if rel < tol or small:
            converged = True
            break
    return z, r, J, it, converged


def synth(scenario, overrides=None, *, stabilization=None, t1=None, dt=None, solver=None, rtol=None,
          atol=None, columns=None, samples=None, noise=0.0, seed=0) -> tuple:
    """Synthetic measurements: simulate the scenario with ``overrides`` and sample
    ``columns`` (default: hinge angles, see :func:`~diffmb.data.default_columns`) at
    ``samples`` equally spaced times (default: every 10 ms, at most 1001), adding
    Gaussian noise of standard deviation ``noise`` (column units) from ``seed``.
    Returns ``(Data, trajectory)``."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    system, params, _ = scenario.make(overrides, stabilization)
    t1 = float(t1 if t1 is not None else scenario.t1)
    dt = dt if dt is not None else scenario.dt
    solver = solver or scenario.solver
    if samples is None:
        samples = min(1001, max(2, int(round(t1 / 0.01)) + 1))
    ts = sample_times(t1, int(samples))
    tr = simulate(system, t1=t1, dt=dt, params=params, solver=solver,
                  rtol=rtol if rtol is not None else scenario.rtol,
                  atol=atol if atol is not None else scenario.atol, saveat=ts)
    if tr.status != "success":
        raise ValueError(f"synth: the run stopped early ({tr.message}); no data written")
    columns = tuple(columns) if columns else default_columns(system)
    unknown = [c for c in columns if c not in system.state_names]
    if unknown:
        raise ValueError(f"synth: unknown column(s) {', '.join(unknown)}; states: {', '.join(system.state_names)}")
    if not (noise >= 0 and math.isfinite(noise)):
        raise ValueError(f"noise must be a non-negative number, got {noise}")
    idx = [list(system.state_names).index(c) for c in columns]
    y = np.asarray(tr.xs)[:, idx]
    y = y + noise * np.random.default_rng(int(seed)).standard_normal(y.shape)
    return Data(t=np.asarray(ts), names=columns, values=y, path="<synth>"), tr
