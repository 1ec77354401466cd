"""Gradient-based tuning of stabilization gains and other scenario parameters (optax).

Fulton & Schaub tuned their Baumgarte gains by hand (section 4.2: ``a = 100, b = 0`` for
the 4-panel fold, "trial and error") and found none for the 3x3 grid. :func:`tune` makes
that a minimisation: the parameters (any scenario ``--set`` names, bound to the System's
params by :mod:`diffmb.design.binding`) are optimised by Adam on a loss of the simulated
trajectory, with gradients through :func:`~diffmb.simulation.integrate.simulate`. Adam descends
``log(loss)``, whose gradient is scale-free. The gradient is taken in forward mode (one
tangent per tuned value carried along the run, no tape) for up to :data:`FORWARD_MAX`
values, the usual case of a few gains, and in reverse mode (the memory-bounded
recursive-checkpoint adjoint) beyond: for two gains of the four-bar the forward program
compiles in half the time of the reverse one and runs 1.5x faster, with the same gradient.

Losses (``loss=``):

``"violation"`` (default)  ``int (|Phi|^2 + w_v |Phi_dot|^2) dt`` with ``|.|`` the largest
    constrained row (the trajectory's ``violation``), plus optional
    ``w_e int ((E - E0) / |E0|)^2 dt`` and ``w_h int |H - H0|^2 dt`` (energy and
    angular-momentum drift: the paper's trade-off between constraint and energy error);
``"deploy"``  a deployment objective: ``int sum_i theta_i^2 dt / T`` over the hinge
    coordinates (distance from flat, a smooth stand-in for the time to reach flat) plus
    ``w_rate * relu(max |omega_hub| - rate_bound)^2`` (a bound on the peak hub rate);
``"vibration"``  ``int sum_i eta_i^2 dt / T`` over the elastic (modal) coordinates: the
    structural excitation of a manoeuvre, e.g. a flexible spacecraft's slew (Banerjee &
    Lemak) shaped so its appendages ring least;
a loss of the scenario's own (``Scenario.losses``: ``solar-sail-slew``'s ``slew``, the
pointing error left at the end of a slew of required angle within the horizon), or any
callable ``loss(trajectory, params) -> scalar``.

A run that diverges stops early (the divergence event); its loss is the part it ran plus
``divergence_penalty`` times the fraction of the horizon it did not reach, so gradients
still point towards stable gains. Positive parameters are optimised as ``log(value)``; a
zero initial value starts at ``zero_start``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import scenarios
from ..simulation.integrate import FIXED_SOLVERS, RunSettings
from .binding import Binding, resolve
from .data import unit_kinds

if TYPE_CHECKING:
    from ..scenarios import Scenario

LOSSES = ("violation", "deploy", "vibration")

#: Tuned values up to which :func:`tune` differentiates in forward mode (see module doc).
FORWARD_MAX = 8


def _trapezoid(y, ts, valid):
    y = jnp.where(valid, y, 0.0)
    dt = jnp.diff(jnp.where(valid, ts, 0.0))
    both = valid[1:] & valid[:-1]
    return jnp.sum(jnp.where(both, 0.5 * (y[1:] + y[:-1]) * dt, 0.0))


def _reached(tr, t0, t1):
    valid = jnp.isfinite(tr.ts)
    t_end = jnp.max(jnp.where(valid, tr.ts, t0))
    return valid, jnp.clip((t1 - t_end) / (t1 - t0), 0.0, 1.0)


def _squared(v, valid):
    """Per save point, the squared violation: ``v**2`` for a scalar series (the worst row,
    as trees report it) or the sum over rows for a per-row series (tensegrity)."""
    v = jnp.reshape(v, (v.shape[0], -1))
    return jnp.sum(jnp.where(valid[:, None], v, 0.0) ** 2, -1)


def violation_loss(tr, params, *, w_velocity=1.0, w_energy=0.0, w_momentum=0.0):
    """Time-integrated squared constraint violation (+ optional drift terms); see module doc."""
    if not tr.violation:
        raise ValueError("loss 'violation': the system has no constraints to violate")
    valid = jnp.isfinite(tr.ts)
    ts = jnp.where(valid, tr.ts, 0.0)
    out = _trapezoid(_squared(tr.violation["position"], valid), ts, valid)
    if "velocity" in tr.violation:
        out = out + w_velocity * _trapezoid(_squared(tr.violation["velocity"], valid), ts, valid)
    if w_energy and "energy" in tr.diagnostics:
        e = tr.diagnostics["energy"]
        e0 = e[0]
        rel = (e - e0) / jnp.maximum(jnp.abs(e0), 1e-12)
        out = out + w_energy * _trapezoid(jnp.where(valid, rel, 0.0) ** 2, ts, valid)
    if w_momentum and "angular_momentum" in tr.diagnostics:
        h = tr.diagnostics["angular_momentum"]
        dh = jnp.where(valid[:, None], h - h[:1], 0.0)
        out = out + w_momentum * _trapezoid(jnp.sum(dh**2, -1), ts, valid)
    return out


def role_columns(tr, role, loss) -> np.ndarray:
    """Columns of the coordinates the system declares in ``role`` (its ``coordinate_roles``)."""
    idx = tr.role_columns(role)
    if not idx.size:
        raise ValueError(f"the {loss} loss needs coordinates of role {role!r}, and this system "
                         f"declares none (roles: {sorted(dict(tr.roles))})")
    return idx


def _mean_square(tr, idx):
    """``int sum_i x_i^2 dt / T`` over the columns ``idx`` (the part of the run it reached)."""
    valid = jnp.isfinite(tr.ts)
    ts = jnp.where(valid, tr.ts, 0.0)
    x = jnp.where(valid[:, None], tr.xs[:, idx], 0.0)
    T = jnp.max(ts) - ts[0]
    return _trapezoid(jnp.sum(x**2, -1), ts, valid) / jnp.maximum(T, 1e-12)


def deploy_loss(tr, params, *, rate_bound=0.05, w_rate=100.0):
    """Distance from flat integrated over the run plus a penalty on the peak hub rate."""
    valid = jnp.isfinite(tr.ts)
    out = _mean_square(tr, role_columns(tr, "hinge", "deploy"))
    hub = tr.role_columns("hub_rate")
    if hub.size:  # free-flying hub: its body angular rate
        w = jnp.where(valid[:, None], tr.xs[:, hub], 0.0)
        peak = jnp.sqrt(jnp.max(jnp.sum(w**2, -1)) + 1e-30)
        out = out + w_rate * jax.nn.relu(peak - rate_bound) ** 2
    return out


def vibration_loss(tr, params):
    """Mean squared elastic amplitude over the run (see module doc)."""
    return _mean_square(tr, role_columns(tr, "elastic", "vibration"))


def named_loss(loss, scenario=None, **weights) -> Callable:
    """``loss(trajectory, params)`` from a name in :data:`LOSSES`, one of ``scenario``'s
    own ``losses``, or a callable."""
    if callable(loss):
        return loss
    own = getattr(scenario, "losses", None) or {}
    if loss in own:
        return lambda tr, p: own[loss](tr, p, **weights)
    if loss == "violation":
        return lambda tr, p: violation_loss(tr, p, **weights)
    if loss == "deploy":
        return lambda tr, p: deploy_loss(tr, p, **weights)
    if loss == "vibration":
        return lambda tr, p: vibration_loss(tr, p, **weights)
    raise ValueError(f"loss: unknown {loss!r}; expected one of {list(LOSSES) + list(own)} or a callable")


@dataclass
class TuneResult:
    """Outcome of :func:`tune`. ``history``: one dict per iteration (``loss``, ``params``)."""

    names: tuple
    initial: dict
    initial_loss: float
    best: dict
    best_loss: float
    history: list = field(default_factory=list)
    stopped: str = ""
    wall_s: float = 0.0
    compile_s: float = 0.0
    floor: float | None = None
    #: the gradient's mode, ``"forward"`` or ``"reverse"``
    derivatives: str = ""
    #: what not to trust (:func:`_gradient_warnings`), also issued as :class:`TuneWarning`
    warnings: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"initial": {"params": self.initial, "loss": self.initial_loss},
                "final": {"params": self.best, "loss": self.best_loss},
                "history": self.history, "stopped": self.stopped, "floor": self.floor,
                "wall_s": self.wall_s, "compile_s": self.compile_s, "derivatives": self.derivatives,
                "warnings": self.warnings}


class TuneWarning(UserWarning):
    """A tuning result not to be trusted (:func:`_gradient_warnings`)."""


def _gradient_warnings(history) -> list:
    """A warning when the gradient was not finite at an iteration whose loss was: Adam
    skips such a step (``optax.zero_nans``, for a trial run that diverges), so a gradient
    that is never finite would end the tuning as a plateau, silently. Forward mode
    through contact's step check once did that."""
    bad = [h for h in history if not h["gradient_finite"] and math.isfinite(h["loss"])]
    if not bad:
        return []
    first = bad[0]
    at = ", ".join(f"{k}={v:.6g}" for k, v in first["params"].items())
    return [f"the gradient was not finite at {len(bad)} of {len(history)} iterations whose loss was (first at "
            f"iteration {first['iteration']}, {at}): those steps were skipped, so the tuning did not move "
            f"there; a finite loss with a gradient that is not is a defect in diffmb (report it)"]


class _Objective(eqx.Module):
    """``loss(theta)`` for a binding and run settings (an equinox Module so jit caches it)."""

    binding: Binding
    settings: RunSettings
    loss: Callable = eqx.field(static=True)
    penalty: float = eqx.field(static=True)
    log_mask: tuple = eqx.field(static=True)
    #: ``"forward"`` (runs with the direct adjoint, which forward mode needs) or ``"reverse"``
    derivatives: str = eqx.field(static=True, default="reverse")

    def natural(self, z):
        mask = jnp.asarray(self.log_mask)
        return jnp.where(mask, jnp.exp(jnp.where(mask, z, 0.0)), z)

    def __call__(self, z):
        params = self.binding.params(self.natural(z))
        adjoint = "direct" if self.derivatives == "forward" else "checkpoint"
        tr = self.settings.run(self.binding.system, params, adjoint=adjoint)
        _, missed = _reached(tr, 0.0, self.settings.t1)
        return self.loss(tr, params) + self.penalty * missed

    def log_loss(self, z):
        """``log(loss)``: what Adam descends. Violation losses of a good run are round-off
        small (1e-18); Adam's ``eps`` would swamp their raw gradients, the log's gradient
        ``grad L / L`` is scale-free."""
        return jnp.log(self(z) + 1e-300)


def integrator_floor(binding: Binding, settings: RunSettings, values, *, w_velocity=1.0,
                     with_run: bool = False):
    """The violation loss below which tuning gains nothing: the integrator's own error.

    The run at the starting values is repeated with half the step (adaptive solvers:
    1/100 of the tolerances); the difference of the two is the integrator's error of the
    motion (step halving, as in Richardson extrapolation). The floor is that error put
    through the violation loss, ``int (|e_q|^2 + w_v |e_qd|^2) dt``, with ``|.|`` the
    largest position-level coordinate that is an angle or a length (radians weigh as
    metres: a structure of unit size) and the largest rate. A constraint already held
    below the accuracy at which the motion itself is computed cannot be improved in any
    way that shows in the motion. ``with_run``: also return the run at ``settings``
    (``(floor, trajectory)``), from which :func:`tune` takes its initial loss.
    """

    params = binding.params(jnp.asarray(values, float))
    fine = (dataclasses.replace(settings, dt=settings.dt / 2) if settings.dt is not None
            and settings.solver in FIXED_SOLVERS else
            dataclasses.replace(settings, rtol=settings.rtol / 100, atol=settings.atol / 100))
    a = settings.run(binding.system, params)
    b = fine.run(binding.system, params)
    names = list(binding.system.state_names)
    coords = set(binding.system.coordinate_names)
    kinds = unit_kinds(binding.system)
    pos = [i for i, n in enumerate(names) if (kinds.get(n) in ("angle", "length") if kinds else n in coords)]
    vel = [i for i, n in enumerate(names) if (kinds.get(n) in ("rate", "speed") if kinds else n not in coords)]
    ts = np.asarray(a.ts)
    ok = np.isfinite(ts) & np.isfinite(np.asarray(b.ts))
    e = np.abs(np.asarray(a.xs) - np.asarray(b.xs))[ok]
    eq = e[:, pos].max(axis=1) if pos else np.zeros(ok.sum())
    ev = e[:, vel].max(axis=1) if vel else np.zeros(ok.sum())
    y = eq**2 + w_velocity * ev**2
    floor = float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(ts[ok])))
    return (floor, a) if with_run else floor


@eqx.filter_jit
def _value_and_grad(obj, z):
    """``(loss, grad log(loss))`` in ``obj.derivatives``' mode."""
    if obj.derivatives == "forward":
        g, val = jax.jacfwd(lambda z_: (obj.log_loss(z_),) * 2, has_aux=True)(z)
    else:
        val, g = jax.value_and_grad(obj.log_loss)(z)
    return jnp.exp(val), g


def _derivatives(n, derivatives):
    """The differentiation mode for ``n`` tuned values: ``"auto"`` is forward up to
    :data:`FORWARD_MAX` values, reverse beyond."""
    if derivatives == "auto":
        return "forward" if n <= FORWARD_MAX else "reverse"
    if derivatives not in ("forward", "reverse"):
        raise ValueError(f"derivatives: unknown {derivatives!r}; expected auto, forward or reverse")
    return derivatives


@eqx.filter_jit
def _value(obj, z):
    return obj(z)


def tune(scenario: Scenario | str | Binding, names: Sequence[str], *, overrides: dict | None = None,
         stabilization: str | None = None, t1: float | None = None, dt: float | None = None,
         solver: str | None = None, rtol: float | None = None, atol: float | None = None,
         saveat: int = 201, loss: str | Callable = "violation", loss_weights: dict | None = None,
         iterations: int = 50, learning_rate: float = 0.1, clip: float = 1.0, patience: int = 15,
         min_rel_improvement: float = 1e-3, log: bool | Sequence[str] | None = None,
         zero_start: float = 0.1, divergence_penalty: float = 1e3, max_violation: float = 1.0,
         callback: Callable | None = None, progress: bool = False, stop_at_floor: bool = True,
         stop: Callable[[], bool] | None = None, derivatives: str = "auto",
         steps: int | None = None) -> TuneResult:
    """Minimise ``loss`` over scenario parameters ``names`` with Adam (see module doc).

    ``scenario``: a :class:`~diffmb.scenarios.Scenario` (or its name) or a ready
    :class:`~diffmb.design.binding.Binding`. Run settings default to the scenario's, and so does
    ``stabilization``, except that tuning one of the scenario's Baumgarte ``gains`` runs
    with ``baumgarte``. ``log``:
    names optimised in log space (default: every name whose initial value is >= 0).
    Early stop when the best loss has not improved by ``min_rel_improvement`` for
    ``patience`` iterations. ``callback(i, loss, params_dict)`` is called every iteration.
    ``stop_at_floor`` (the ``violation`` loss without drift weights): stop, with
    ``stopped = "floor"``, as soon as the loss is at or below :func:`integrator_floor` —
    at once, without iterating, when the starting values already are. ``stop()``:
    checked after every iteration; when it returns True tuning ends there with
    ``stopped = "interrupted"`` and the best values so far. ``derivatives``: ``"forward"``,
    ``"reverse"`` or ``"auto"`` (forward up to :data:`FORWARD_MAX` values; module doc).
    ``iterations``: at most that many Adam steps (``steps=`` is the 0.1 spelling).
    """
    if steps is not None:
        warnings.warn("tune(steps=) is now tune(iterations=) (steps= goes in diffmb 0.3)", DeprecationWarning,
                      stacklevel=2)
        iterations = steps
    scenario, b, st = _bind(scenario, names, overrides, stabilization, t1=t1, dt=dt, solver=solver,
                            rtol=rtol, atol=atol)
    names = b.names
    v0 = np.asarray(b.values, float)
    mask, start = _log_space(names, v0, log, zero_start)
    settings = RunSettings(**st, saveat=int(saveat),
                           max_violation=None if max_violation is None else float(max_violation))
    obj = _Objective(binding=b, settings=settings, loss=named_loss(loss, scenario, **(loss_weights or {})),
                     penalty=float(divergence_penalty), log_mask=mask,
                     derivatives=_derivatives(len(names), derivatives))
    floor, initial_loss = _initial_loss(obj, v0, loss, loss_weights or {}, stop_at_floor)
    initial = dict(zip(names, map(float, v0)))
    if floor is not None and initial_loss <= floor:
        return TuneResult(names=names, initial=initial, initial_loss=initial_loss, best=initial,
                          best_loss=initial_loss, history=[], stopped="floor", floor=floor,
                          derivatives=obj.derivatives)
    opt = optax.chain(optax.zero_nans(), optax.clip_by_global_norm(clip), optax.adam(learning_rate))
    tic = time.perf_counter()
    history, best, best_loss, stopped, compile_s = _descend(
        obj, jnp.asarray(start), opt, steps=iterations, patience=patience, min_rel_improvement=min_rel_improvement,
        floor=floor, callback=callback, progress=progress, stop=stop)
    if initial_loss < best_loss:
        best, best_loss = initial, initial_loss
    wall = time.perf_counter() - tic - compile_s
    said = _gradient_warnings(history)
    for message in said:
        warnings.warn(message, TuneWarning, stacklevel=2)
    return TuneResult(names=names, initial=initial, initial_loss=initial_loss, best=best,
                      best_loss=best_loss, history=history, stopped=stopped,
                      wall_s=wall, compile_s=compile_s, floor=floor, derivatives=obj.derivatives, warnings=said)


def _bind(scenario, names, overrides, stabilization, **run):
    """``(scenario, binding, run settings)``: tuning one of a Scenario's Baumgarte
    ``gains`` runs with ``baumgarte`` unless another stabilization is asked for."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    gains = set(getattr(scenario, "gains", ()))   # a Scenario declares them; a Binding is bound already
    if stabilization is None and gains & set(names) and "baumgarte" in scenario.stabilizations:
        stabilization = "baumgarte"
    b, st = resolve(scenario, names, overrides, stabilization, **run)
    if st["t1"] is None:
        raise ValueError("t1: give the horizon to tune over")
    return scenario, b, st


def _log_space(names, v0, log, zero_start):
    """``(log_mask, start)``: which parameters are optimised as ``log(value)`` (default:
    those starting at or above zero) and the optimiser's start (a zero start in log space
    at ``zero_start``)."""
    log = tuple(n for n, v in zip(names, v0) if v >= 0) if log is None else tuple(log)
    for n in log:
        if n not in names:
            raise ValueError(f"log: {n!r} is not one of the tuned parameters {list(names)}")
    mask = tuple(n in log for n in names)
    start = np.array([math.log(v if v > 0 else zero_start) if m else v for v, m in zip(v0, mask)])
    return mask, start


def _initial_loss(obj, v0, loss, weights, stop_at_floor):
    """``(floor, initial loss)``: the integrator's floor (:func:`integrator_floor`; None
    unless ``stop_at_floor`` applies: the violation loss without drift weights) and the
    loss at the starting values ``v0``."""
    b, settings = obj.binding, obj.settings
    if stop_at_floor and loss == "violation" and not (weights.get("w_energy") or weights.get("w_momentum")):
        floor, run0 = integrator_floor(b, settings, v0, w_velocity=weights.get("w_velocity", 1.0), with_run=True)
        # the floor's own run at the starting values gives the initial loss: no second compile
        _, missed = _reached(run0, 0.0, settings.t1)
        return floor, float(obj.loss(run0, b.params(jnp.asarray(v0))) + obj.penalty * missed)
    plain = _Objective(**{f: getattr(obj, f) for f in obj.__dataclass_fields__ if f != "log_mask"},
                       log_mask=(False,) * len(obj.log_mask))
    return None, float(_value(plain, jnp.asarray(v0)))


def _descend(obj, z, opt, *, steps, patience, min_rel_improvement, floor, callback, progress, stop):
    """Adam on ``log(loss)`` from ``z`` for at most ``steps`` iterations; it stops early on
    a plateau (no relative improvement of ``min_rel_improvement`` in ``patience``
    iterations), at the ``floor`` or when ``stop()`` says so. Returns ``(history, best
    params, best loss, why it stopped, compile seconds)``."""
    names = obj.binding.names
    with jax.numpy_dtype_promotion("standard"):
        state = opt.init(z)
    to_dict = lambda z_: dict(zip(names, map(float, np.asarray(obj.natural(z_)))))
    history, best, best_loss, since, stopped = [], to_dict(z), math.inf, 0, "steps"
    compile_s = 0.0
    bar = _bar(steps, progress)
    for i in range(steps):
        t_it = time.perf_counter()
        val, g = _value_and_grad(obj, z)
        val = float(val)
        if i == 0:
            compile_s = time.perf_counter() - t_it
        params_now = to_dict(z)
        history.append({"iteration": i, "loss": val, "params": params_now,
                        "gradient_finite": bool(np.all(np.isfinite(np.asarray(g))))})
        if callback is not None:
            callback(i, val, params_now)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{val:.3e}")
        if math.isfinite(val) and val < best_loss * (1 - min_rel_improvement):
            best, best_loss, since = params_now, val, 0
        else:
            since += 1
            if math.isfinite(val) and val < best_loss:
                best, best_loss = params_now, val
        why = _why_stop(since, patience, val, floor, stop)
        if why is not None:
            stopped = why
            break
        with jax.numpy_dtype_promotion("standard"):  # optax mixes its int step count with floats
            updates, state = opt.update(g, state, z)
            z = optax.apply_updates(z, updates)
    if bar is not None:
        bar.close()
    return history, best, best_loss, stopped, compile_s


def _why_stop(since, patience, val, floor, stop) -> str | None:
    """Why tuning stops after this iteration (``"plateau"``, ``"floor"``,
    ``"interrupted"``), or None to go on."""
    if since >= patience:
        return "plateau"
    if floor is not None and val <= floor:
        return "floor"
    if stop is not None and stop():
        return "interrupted"
    return None


def _bar(total, enabled):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc="tune", unit="it")
