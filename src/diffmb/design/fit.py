"""Fit scenario parameters (hinge stiffness, damping, tape-spring moments, rest angles,
inertia scale, ...) to measured deployments, and synthesise such measurements.

The data are deployment records (:mod:`diffmb.design.records`) whose columns are sensor outputs
(:mod:`diffmb.design.sensors`: photogrammetry markers, gyros, accelerometers, coordinates). The
loss is the weighted squared error of the simulated outputs at the record times,
``sum_r sum_i sum_c ((y_rc(t_i; z) - d_ric) / sigma_c)^2`` (:mod:`diffmb.design.fit_residual`),
with ``sigma_c`` the sensor's declared noise. It is a nonlinear least-squares problem with
few unknowns, solved by Levenberg-Marquardt (:mod:`diffmb.design.least_squares`): the residual
Jacobian comes from forward-mode differentiation through the simulation (one tangent per
unknown), and the same Jacobian gives standard errors, correlations and an
identifiability warning. Nuisance parameters of the measurement chain (marker offsets, gyro
biases, each record's start time) are fitted with the physics, inside bounds.

Several records (different initial folds or stowage states, each with its own scenario
``overrides``) share the physical parameters and are simulated in one ``vmap``.
Multiple shooting (``shooting=S``, one record) splits a long record into ``S`` segments;
segment ``k > 0`` starts from its own unknown state and continuity residuals
``(x_end_{k-1} - x_start_k) / continuity_scale`` tie them together.
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

from .. import scenarios
from ..simulation.integrate import simulate
from .binding import Binding, _same_structure, bind, run_options
from .data import Data, default_columns, sample_times, state_units
from .fit_residual import NUISANCE_BOUNDS, Residual, Unknowns, predictions, residual_and_jacobian, residual_value
from .goodness import failures, goodness_of_fit, leverages
from .least_squares import IdentifiabilityWarning, identifiability, levenberg_marquardt, noise_covariance
from .records import as_records, resolve_sensors, stack
from .sensors import Sensor, SensorModel, column_units

if TYPE_CHECKING:
    from ..scenarios import Scenario
    from .records import Record


@dataclass
class FitResult:
    """Fitted ``params`` with ``stderr`` (same units; physics and nuisance), ``rms`` of the
    residual (data units), ``correlation`` and ``condition`` of the fitted unknowns,
    identifiability ``warnings``, a per-record report (residual RMS per sensor, in its
    units), the fitted outputs ``predictions (R, M, C)`` on ``columns`` and the ``noise``
    (standard deviation) each column was weighted by, declared or estimated.

    Standard errors: ``stderr_noise`` assumes the residual is the declared noise;
    ``stderr_scaled`` is it times ``sqrt`` of the reduced chi-square (what the residual
    says the noise is); ``stderr`` is the one ``stderr_basis`` names: ``"noise"`` when the
    goodness-of-fit check passes, ``"scaled"`` when it fails or no noise was declared.
    ``goodness``: the chi-square test per sensor and over the fit
    (:func:`diffmb.design.goodness.goodness_of_fit`)."""

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
    correlation: list = field(default_factory=list)
    condition: float = 1.0
    warnings: list = field(default_factory=list)
    records: list = field(default_factory=list)
    columns: tuple = ()
    predictions: object = None
    noise: dict = field(default_factory=dict)
    interrupted: bool = False
    stderr_noise: dict = field(default_factory=dict)
    stderr_scaled: dict = field(default_factory=dict)
    stderr_basis: str = "noise"
    goodness: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"params": self.params, "stderr": self.stderr, "stderr_basis": self.stderr_basis,
                "stderr_noise": self.stderr_noise, "stderr_scaled": self.stderr_scaled,
                "goodness": self.goodness, "rms": self.rms,
                "interrupted": self.interrupted,
                "initial": {"params": self.initial, "rms": self.initial_rms},
                "iterations": self.iterations, "converged": self.converged,
                "correlation": {"names": list(self.names), "matrix": self.correlation},
                "condition": self.condition, "warnings": self.warnings, "records": self.records,
                "noise": self.noise,
                "history": self.history, "wall_s": self.wall_s, "compile_s": self.compile_s}


#: Most re-estimations of undeclared sensor noise (each followed by a fit stage); they
#: stop when the estimate moves less than 5 %.
REWEIGHT_ROUNDS = 4
#: A continuation stage fits the unknowns whose sensitivity over its horizon is at least
#: this fraction of their sensitivity over the whole records.
STAGE_SENSITIVITY = 1e-2


def default_t_offset_bound(span: float) -> float:
    """Default half-width of a record's fitted start time: :data:`NUISANCE_BOUNDS`'s, or a
    quarter of the record's span when that is longer (a release late in a long record)."""
    return max(NUISANCE_BOUNDS["t_offset"], 0.25 * span)


#: Root-mean-square of the noise-weighted residual above which the data are said not to
#: be explained by the model: Gaussian noise of the declared size gives 1.
MISFIT = 3.0
#: A physical parameter whose whole value, changed, moves the noise-weighted predictions by
#: less than this many round-offs of their size is not determined by the data, whatever
#: standard error the Jacobian's round-off gives it (measured: a force-free chain's uniform
#: mass moves them by 0.03 round-offs in float64 and 1.9 in float32; a fold's damping over
#: 0.5 s by 36 in float32, 2e10 in float64).
ROUNDOFF_MOVES = 10.0


def _is_nuisance(name: str) -> bool:
    return name == "t_offset" or name.startswith(("offset.", "bias."))


def _bindings(scenario, records, physics, overrides, stabilization):
    """One Binding per record (its own overrides), stacked on a leading record axis."""
    if isinstance(scenario, Binding):
        if len(records) > 1 or any(r.overrides for r in records):
            raise ValueError("a bare Binding fits one record without per-record overrides")
        bs = [scenario]
    else:
        bs = [bind(scenario, physics, {**(overrides or {}), **r.overrides}, stabilization) for r in records]
    for r, b in zip(records[1:], bs[1:]):
        if not _same_structure(bs[0], b):
            raise ValueError(f"{r.data.path}: record settings {r.overrides} change the structure of "
                             f"the scenario; records fitted together must share it")
    arrays = [eqx.partition(b, eqx.is_array)[0] for b in bs]
    static = eqx.partition(bs[0], eqx.is_array)[1]
    return bs[0], eqx.combine(jax.tree.map(lambda *a: jnp.stack(a), *arrays), static)


def _column_weights(columns, sensor_model, weights):
    """Noise std per column: ``weights`` (per column, or ``{sensor or column: sigma}``),
    else the sensor's declared ``sigma``, else 1 (and the column is re-weighted by its
    residual after the fit; see :func:`fit`)."""
    by_col = {c: s for s in sensor_model.sensors for c in s.columns}
    if weights is not None and not isinstance(weights, dict):
        w = np.asarray(weights, float)
        if w.shape != (len(columns),) or not np.all(w > 0):
            raise ValueError(f"weights: expected {len(columns)} positive numbers (one per column)")
        return w, np.ones(len(columns), bool)
    given = weights or {}
    w, known = np.ones(len(columns)), np.zeros(len(columns), bool)
    for j, c in enumerate(columns):
        s = by_col[c]
        v = given.get(c, given.get(s.name, s.sigma))
        if v is not None:
            if not v > 0:
                raise ValueError(f"weights: sensor {s.name!r}: sigma must be positive, got {v}")
            w[j], known[j] = float(v), True
    return w, known


@dataclass
class Problem:
    """A fit set up: the residual ``res`` with its unknowns' start ``z`` and box
    ``[lower, upper]``, the records stacked on ``columns`` (``t``, ``y``, ``mask``), the
    noise ``weights`` per column (``known``: declared, not to be re-estimated)."""

    res: Residual
    z: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log_mask: tuple
    physics: tuple
    start: np.ndarray
    records: list
    sensors: SensorModel
    columns: tuple
    t: np.ndarray
    y: np.ndarray
    mask: np.ndarray
    weights: np.ndarray
    known: np.ndarray


def problem(scenario, data, names, *, sensors=None, overrides=None, stabilization=None, dt=None, solver=None,
            rtol=None, atol=None, weights=None, bounds=None, shooting=1, continuity_scale=1e-3,
            log=None) -> Problem:
    """Set up the fit of ``names`` to ``data`` (arguments as :func:`fit`) without solving it."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    records = as_records(data)
    names = tuple(names)
    physics = tuple(n for n in names if not _is_nuisance(n))
    if not physics:
        raise ValueError("no physical parameters to fit (give at least one scenario parameter)")
    for rec in records:
        clash = sorted(set(rec.overrides) & set(physics))
        if clash:
            raise ValueError(f"{rec.data.path}: the record sets {', '.join(clash)}, which the fit estimates")
    b0, stacked = _bindings(scenario, records, physics, overrides, stabilization)
    st = run_options(scenario, dt=dt, solver=solver, rtol=rtol, atol=atol)
    system = b0.system
    model = SensorModel.of(resolve_sensors(system, records, sensors), system)
    unknowns = Unknowns.parse(names, model, [r.label for r in records])
    names = unknowns.names
    columns = tuple(dict.fromkeys(c for r in records for c in r.data.names))
    col_index = tuple(model.columns.index(c) for c in columns)
    w, known = _column_weights(columns, model, weights)
    t, y, mask = stack(records, list(columns))
    if shooting > 1 and (len(records) > 1 or unknowns.t_offset):
        raise ValueError("shooting: one record without a fitted t_offset")

    p = len(physics)
    log = () if log is None else tuple(log)
    lmask = tuple(n in log for n in physics)
    v0 = np.asarray(b0.values, float)
    for n, v, m in zip(physics, v0, lmask):
        if m and not v > 0:
            raise ValueError(f"parameter {n!r}: log-space fit needs a positive start, got {v:g}")
    informative = int(sum(max(r.data.t.size - 1, 0) for r in records))
    if informative < len(names):
        raise ValueError(f"{', '.join(str(r.data.path) for r in records)}: {informative} sample time"
                         f"{'s' if informative != 1 else ''} after the first (which the initial state "
                         f"fixes), fewer than the {len(names)} unknowns ({', '.join(names)}): the fit "
                         f"cannot determine them; give a longer record")
    span = float(np.max(t[:, -1] - t[:, 0]))
    nb = unknowns.nuisance_bounds({"t_offset": default_t_offset_bound(span), **(bounds or {})})
    lower = np.concatenate([[0.0 if (v >= 0 and not m) else -math.inf for v, m in zip(v0, lmask)], -nb])
    upper = np.concatenate([np.full(p, math.inf), nb])
    z = np.concatenate([np.where(lmask, np.log(np.where(lmask, v0, 1.0)), v0), np.zeros(nb.size)])
    t_end = float(t.max()) + (float(nb[-1]) if unknowns.t_offset else 0.0)
    res = Residual(bindings=stacked, sensors=model, unknowns=unknowns, col_index=col_index,
                   t=jnp.asarray(t), y=jnp.asarray(y), mask=jnp.asarray(mask), horizon=jnp.ones(t.shape),
                   weights=jnp.asarray(w), t_end=t_end,
                   settings=(st["dt"], st["solver"], float(st["rtol"]), float(st["atol"])), log_mask=lmask,
                   cont_scale=jnp.asarray(continuity_scale, float))
    if shooting > 1:
        res, z, lower, upper = _with_shooting(res, records[0].data, z, lower, upper, shooting, b0, st)
    return Problem(res=res, z=z, lower=lower, upper=upper, log_mask=lmask, physics=physics, start=v0,
                   records=records, sensors=model, columns=columns, t=t, y=y, mask=mask, weights=w, known=known)


def fit(scenario: Scenario | str | Binding, data: Data | Record | Sequence[Data | Record],
        names: Sequence[str], *, sensors: Sequence[Sensor] | None = None, overrides: dict | None = None,
        stabilization: str | None = None, dt: float | None = None, solver: str | None = None,
        rtol: float | None = None, atol: float | None = None, weights: dict | None = None,
        bounds: dict | None = None, shooting: int = 1, continuity_scale: float = 1e-3,
        log: bool | Sequence[str] | None = None, continuation: bool = True, iterations: int = 100,
        tol: float = 1e-8, lm_lambda: float = 1e-3, callback: Callable | None = None,
        stop: Callable[[], bool] | None = None, max_iterations: int | None = None) -> FitResult:
    """Fit ``names`` to ``data`` (module docstring).

    ``scenario``: a Scenario, its name, or a :class:`~diffmb.design.binding.Binding`; the starting
    values are the scenario's as modified by ``overrides``. ``data``: a
    :class:`~diffmb.design.data.Data`, a :class:`~diffmb.design.records.Record` or a list of them.
    ``sensors``: :class:`~diffmb.design.sensors.Sensor` declarations (columns naming a coordinate
    need none). ``names``: scenario parameters (``K``, ``K.theta_2``, ``ts_Mpeak``, ...)
    and nuisance parameters ``offset.<marker>``, ``bias.<gyro>``, ``t_offset``
    (per record). ``bounds``: ``{"offset": m, "bias": rad/s, "t_offset": s}`` half-widths
    (:data:`~diffmb.design.fit_residual.NUISANCE_BOUNDS`; ``t_offset`` by default also at least a
    quarter of the longest record, :func:`default_t_offset_bound`). ``weights``: noise std
    per column (or per sensor, a dict), else the sensors' declared ``sigma``; when columns
    of more than one sensor kind lack one (markers in m and gyros in rad/s), a second stage
    weighs each kind by its own residual RMS, so that mixed units are weighted by their
    noise and the standard errors hold. Parameters that start at or above zero are kept
    there (a bound, not a log transform); ``log``: names to fit as ``log(value)``.
    ``continuation``: fit growing prefixes of the records (10, 25, 50, 100 %; off with
    shooting; ``False``: all at once; or a tuple of fractions). ``iterations``: at most
    that many Levenberg-Marquardt iterations for the whole fit (``max_iterations=`` is the
    0.1 spelling), shared by its stages (each stage may
    use what the earlier ones left, keeping one for every later stage; with fewer than
    there are stages, only the longest horizons are fitted). A stage stops when the
    relative decrease of the cost or the step falls below ``tol``.
    ``callback(k, cost, params, horizon)`` after every iteration, ``horizon`` the stage's
    fraction of the records (the cost of a stage covers only its horizon: it grows from
    one stage to the next). ``stop()``: checked after every iteration; when it returns
    True the fit ends there, ``interrupted``, with the values reached.

    The result says when it is not to be trusted (``warnings``, ``converged = False``): a
    parameter that ends at a bound (its standard error is then meaningless), a standard
    error that is not finite, a residual far above the declared noise (:data:`MISFIT`).
    Every sensor with a declared noise is tested (:mod:`diffmb.design.goodness`): one whose
    residual exceeds its noise beyond chance is named in a :class:`FitWarning`, and the
    standard errors shown are then the scaled ones (:class:`FitResult`).
    """
    pb = problem(scenario, data, names, sensors=sensors, overrides=overrides, stabilization=stabilization,
                 dt=dt, solver=solver, rtol=rtol, atol=atol, weights=weights, bounds=bounds, shooting=shooting,
                 continuity_scale=continuity_scale, log=log)
    if max_iterations is not None:
        warnings.warn("fit(max_iterations=) is now fit(iterations=) (max_iterations= goes in diffmb 0.3)",
                      DeprecationWarning, stacklevel=2)
        iterations = max_iterations
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    if shooting > 1:
        continuation = False if continuation is True else continuation
    lm = _Solver(pb, tol=tol, lm_lambda=lm_lambda, callback=callback,
                 stopped=(lambda: False) if stop is None else stop, left=int(iterations))
    t_loop = time.perf_counter()
    res, z, r, J, initial_rms = _continuation(lm, pb, continuation, iterations)
    res, z, r, J, w = _reweighted(lm, pb, res, z, r, J)
    result, unidentified = _result(lm, pb, res, z, r, J, w, initial_rms, iterations, t_loop)
    _warn(result.warnings, unidentified)
    return result


@dataclass
class _Solver:
    """The Levenberg-Marquardt stages of one fit: they share its iteration budget
    (``left``), its ``history`` and its ``callback``, and each linearises first
    (``compile_s``: the first linearisation, the program's compile)."""

    pb: Problem
    tol: float
    lm_lambda: float
    callback: object
    stopped: object
    left: int
    converged: bool = False
    history: list = field(default_factory=list)
    compile_s: float = 0.0
    seen_full: object = None

    def stage(self, res, z, horizon_label, iterations):
        """Fit from ``z`` with ``res`` for at most ``iterations``; returns ``(z, r, J)``."""
        tic = time.perf_counter()
        r, J = _linearised(res, z)
        if self.compile_s == 0.0:
            self.compile_s = time.perf_counter() - tic
        if iterations < 1 or self.stopped():
            return z, r, J
        # a continuation stage moves only what its horizon sees (1 % of the whole
        # record's sensitivity): a tape spring's peak moment, reached late in a
        # deployment, must not wander while the first second is fitted
        seen = np.linalg.norm(J, axis=0)
        active = seen >= STAGE_SENSITIVITY * self.seen_full if self.seen_full is not None else None
        names, p = self.pb.res.unknowns.names, len(self.pb.physics)

        def on_step(zz, cost):
            theta = _named(res, zz, names)
            self.history.append({"iteration": len(self.history) + 1, "horizon": horizon_label, "cost": cost,
                                 "params": theta})
            if self.callback is not None:
                self.callback(len(self.history), cost, theta, horizon_label)

        z, r, J, its, self.converged = levenberg_marquardt(
            lambda zz: residual_value(res, jnp.asarray(zz)),
            lambda zz: _linearised(res, zz), z, r, J,
            lower=self.pb.lower, upper=self.pb.upper,
            log_mask=np.concatenate([self.pb.log_mask, np.zeros(len(z) - p, bool)]),
            max_iterations=iterations, tol=self.tol, lam=self.lm_lambda, active=active, on_step=on_step,
            stop=self.stopped)
        self.left -= its
        return z, r, J


def _linearised(res, z):
    """``(r, J)`` at ``z`` as NumPy arrays, refused when not finite: a Levenberg-Marquardt
    step from a NaN would be rejected as no decrease and the fit reported converged."""
    r, J = map(np.asarray, residual_and_jacobian(res, jnp.asarray(z)))
    if np.all(np.isfinite(r)) and np.all(np.isfinite(J)):
        return r, J
    names = res.unknowns.names
    at = ", ".join(f"{n} = {v:.6g}" for n, v in zip(names, np.asarray(res.natural(jnp.asarray(z)))))
    bad = [n for n, col in zip(names, J.T) if not np.all(np.isfinite(col))]
    if not np.all(np.isfinite(np.asarray(predictions(res, jnp.asarray(z))))):
        raise ValueError(f"the simulation at {at} does not stay finite (a diverging run): start the "
                         f"fit from other values (--set)")
    raise FloatingPointError(f"the simulation's derivatives with respect to {', '.join(bad) or 'the unknowns'} "
                             f"are not finite at {at}, where the simulation itself is")


def _continuation(lm, pb, continuation, iterations):
    """Fit growing prefixes of the records (:func:`_stages`; only the longest horizons
    when the budget is short, each stage keeping one iteration for every later one).
    Returns ``(res, z, r, J, initial_rms)``."""
    res, z, t = pb.res, pb.z, pb.t
    initial_rms = None
    stages = _stages(continuation)[-int(iterations):]
    if len(stages) > 1:
        tic = time.perf_counter()
        lm.seen_full = np.linalg.norm(_linearised(res, z)[1], axis=0)
        lm.compile_s = time.perf_counter() - tic
    for k, frac in enumerate(stages):
        span = t[:, -1:] - t[:, :1]
        res = eqx.tree_at(lambda r_: r_.horizon, res, jnp.asarray((t <= t[:, :1] + frac * span + 1e-12).astype(float)))
        if initial_rms is None:
            initial_rms = _rms(np.asarray(predictions(res, jnp.asarray(z))), pb.y, pb.mask)
        z, r, J = lm.stage(res, z, float(frac), lm.left - (len(stages) - 1 - k))
    return res, z, r, J, initial_rms


def _reweighted(lm, pb, res, z, r, J):
    """Where columns of more than one sensor kind (or some of them) lack a declared noise,
    weigh each kind by its own residual RMS and fit again, until the estimate settles
    (:data:`REWEIGHT_ROUNDS`). Returns ``(res, z, r, J, weights)``."""
    w = pb.weights
    groups = _noise_groups(pb.known, pb.columns, pb.sensors)
    if len(groups) > 1 or (groups and pb.known.any()):  # mixed units: weigh each by its own noise
        lm.seen_full = None
        for _ in range(REWEIGHT_ROUNDS):  # the first estimate carries the unweighted fit's error
            w_new = _estimated_noise(w, groups, np.asarray(predictions(res, jnp.asarray(z))), pb.y, pb.mask)
            settled = np.allclose(w_new, w, rtol=0.05)
            w = w_new
            res = eqx.tree_at(lambda r_: r_.weights, res, jnp.asarray(w))
            if settled or lm.left < 1 or lm.stopped():
                break
            z, r, J = lm.stage(res, z, "reweighted", lm.left)
        r, J = _linearised(res, z)
    return res, z, r, J, w


def _within_round_off(Jn, theta, start, pred, w, mask) -> np.ndarray:
    """Which physical parameters (the first ``len(theta)`` columns of ``Jn``, natural
    units) move the noise-weighted predictions, for a change of their whole value (or of
    their start, where the value is 0), by less than :data:`ROUNDOFF_MOVES` round-offs of
    the predictions' size: the motion does not depend on them (a free chain's uniform
    mass), so the data cannot determine them."""
    on = mask > 0
    size = np.linalg.norm((pred / w)[on]) * float(np.finfo(pred.dtype).eps)
    scale = np.maximum(np.abs(theta), np.abs(np.asarray(start, float)[: len(theta)]))
    moved = np.linalg.norm(Jn[:, : len(theta)], axis=0) * scale
    return (scale > 0) & (moved < ROUNDOFF_MOVES * size)


def _standard_errors(Jn, r, J, gof, n_fit, names):
    """``(se_noise, se_scaled, identifiability)`` from the Jacobian ``Jn`` in natural
    units: the noise-only errors, and those scaled by the reduced chi-square."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        se_noise = np.sqrt(np.maximum(np.diag(noise_covariance(Jn))[:n_fit], 0.0))
        reduced = (gof["total"]["reduced_chi2"] if gof["total"] is not None
                   else float(r @ r) / max(1, r.size - J.shape[1]))
        se_scaled = se_noise * math.sqrt(max(reduced, 0.0))
        ident = identifiability(Jn[:, :n_fit], names)
    return se_noise, se_scaled, ident


def _result(lm, pb, res, z, r, J, w, initial_rms, iterations, t_loop):
    """The :class:`FitResult` at ``z`` (values, standard errors on the basis the
    goodness-of-fit test picks, the warnings that say what not to trust) and the
    identifiability warnings among its ``warnings``."""
    names, p, lmask = res.unknowns.names, len(pb.physics), pb.log_mask
    y, mask, columns, model, known = pb.y, pb.mask, pb.columns, pb.sensors, pb.known
    theta = np.asarray(res.natural(jnp.asarray(z)))
    scale = np.concatenate([np.where(lmask, theta, 1.0), np.ones(len(z) - p)])
    Jn = J / scale[None, :]
    n_fit = len(names)
    pred = np.asarray(predictions(res, jnp.asarray(z)))
    gof = goodness_of_fit((pred - y) / w, mask, leverages(J)[: pred.size].reshape(pred.shape),
                          _sensor_columns(model, columns), known)
    se_noise, se_scaled, ident = _standard_errors(Jn, r, J, gof, n_fit, names)
    unmoved = np.zeros(n_fit, bool)
    unmoved[:p] = _within_round_off(Jn, theta, pb.start, pred, w, mask)
    se_noise[unmoved], se_scaled[unmoved] = np.inf, np.inf
    basis = "noise" if gof["total"] is not None and gof["passed"] else "scaled"
    se = se_noise if basis == "noise" else se_scaled
    values = np.concatenate([theta, z[p:n_fit]])
    start = np.concatenate([np.asarray(pb.start, float), np.zeros(n_fit - p)])
    trust = _trust(names, values, se, z[:n_fit], pb.lower[:n_fit], pb.upper[:n_fit], lmask,
                   _weighted_rms(pred, y, mask, w, known), start) + failures(gof)
    stopped = lm.stopped
    units = column_units(model.sensors, state_units(res.bindings.system))
    result = FitResult(
        names=names, params=dict(zip(names, map(float, values))),
        stderr=dict(zip(names, map(float, se))), rms=_rms(pred, y, mask),
        initial={**dict(zip(pb.physics, map(float, pb.start))), **{n: 0.0 for n in names[p:]}},
        initial_rms=initial_rms, iterations=int(iterations) - lm.left,
        converged=bool(lm.converged) and not trust_breaks(trust) and not stopped(),
        history=lm.history, wall_s=time.perf_counter() - t_loop - lm.compile_s, compile_s=lm.compile_s,
        correlation=ident["correlation"].tolist(), condition=ident["condition"],
        warnings=ident["warnings"] + trust, records=_report(pb.records, model, columns, pred, y, mask, units),
        columns=columns, predictions=pred, noise=dict(zip(columns, map(float, w))),
        interrupted=bool(stopped()), stderr_noise=dict(zip(names, map(float, se_noise))),
        stderr_scaled=dict(zip(names, map(float, se_scaled))), stderr_basis=basis, goodness=gof)
    return result, ident["warnings"]


def _warn(messages, unidentified):
    """Issue the fit's warnings: those in ``unidentified`` as
    :class:`IdentifiabilityWarning`, the others as :class:`FitWarning` (stacklevel 3: the
    caller of :func:`fit`)."""
    for message in messages:
        warnings.warn(message, IdentifiabilityWarning if message in unidentified else FitWarning,
                      stacklevel=3)


class FitWarning(UserWarning):
    """A fitted value or its standard error is not to be trusted (:func:`_trust`)."""


#: The start of every :func:`_trust` message that makes a fit "not converged".
_AT_BOUND, _NO_SE, _UNDETERMINED = "ended at its bound", "has no finite standard error", "is not determined"
#: A standard error above this many times the larger of a parameter's value and its
#: start: the data leave it anywhere in a range a hundred times its size, and the
#: optimiser, which sees almost no slope, may have carried it there from its start
#: (fold-2x4's stowed creases' ``K`` over its first 3 s, which only crease 7 moves:
#: from 0.08 to 1.1e7, +- 2.9e11).
UNDETERMINED = 100.0


def trust_breaks(messages) -> bool:
    """Whether any of ``messages`` says a value is not an estimate (at a bound, no error,
    undetermined)."""
    return any(_AT_BOUND in m or _NO_SE in m or _UNDETERMINED in m for m in messages)


def _trust(names, values, se, z, lower, upper, lmask, misfit, start=None) -> list:
    """Warnings about the fitted values: those that end at a bound of the box (the data
    pull them further; the Gauss-Newton standard error assumes an interior minimum and
    means nothing there), those without a finite standard error or with one
    :data:`UNDETERMINED` times their size (the larger of the value and ``start``, where
    that is not 0), and a residual ``misfit`` times the declared noise (None: no
    declared noise)."""
    out = []
    for i, n in enumerate(names):
        log = i < len(lmask) and lmask[i]
        for b, side in ((lower[i], "lower"), (upper[i], "upper")):
            if log or not math.isfinite(b) or abs(z[i] - b) > 1e-9 * (1.0 + abs(b)):
                continue
            if _is_nuisance(n):
                out.append(f"parameter {n} {_AT_BOUND} ({side}, {values[i]:.6g}): the data pull it "
                           f"further, so the value is the bound's, not an estimate, and its standard "
                           f"error means nothing (widen the {n.split('.')[0]} bound)")
            else:
                out.append(f"parameter {n} ended at 0, the least it can be: the data may want it "
                           f"negative, which it physically cannot be; its standard error is one-sided")
        size = max(abs(values[i]), abs(start[i])) if start is not None else 0.0
        if not math.isfinite(se[i]) or se[i] > 1e12 * max(abs(values[i]), 1.0):
            out.append(f"parameter {n} {_NO_SE}: the data do not determine it")
        elif size > 0 and se[i] > UNDETERMINED * size:
            out.append(f"parameter {n} {_UNDETERMINED} by the data: its standard error {se[i]:.3g} is "
                       f"{se[i] / size:.3g}x its value ({values[i]:.6g}; start {start[i]:.6g}), and the "
                       f"records hardly depend on it (fix it with --set, or fit it to records it moves)")
    if misfit is not None and misfit > MISFIT:
        out.append(f"the residual is {misfit:.3g}x the declared sensor noise (a good fit gives about 1): "
                   f"the model does not explain the data (a parameter at a bound, a wrong start, "
                   f"missing physics), and its standard errors, noise-only or scaled by the residual, "
                   f"are not to be trusted")
    return out


def _weighted_rms(pred, y, mask, w, known):
    """RMS of the noise-weighted residual over the columns with a declared noise (1 for
    a model that explains the data up to that noise), or None without such columns."""
    if not np.any(known):
        return None
    m = mask[..., known] > 0
    e = ((pred - y)[..., known] / w[known])[m]
    return float(np.sqrt(np.mean(e * e))) if e.size else None


def _noise_groups(known, columns, model) -> list:
    """Columns without a declared noise, grouped by what measures them: one noise level per
    sensor kind (the cameras, the gyros, the accelerometers, the coordinates)."""
    by_col = {c: s for s in model.sensors for c in s.columns}
    groups = {}
    for j, c in enumerate(columns):
        if not known[j]:
            groups.setdefault(by_col[c].kind, []).append(j)
    return list(groups.values())


def _estimated_noise(w, groups, pred, y, mask):
    """Each group's residual RMS as its noise (the weights of a second fit stage)."""
    out = w.copy()
    for js in groups:
        e = np.concatenate([(pred[..., j] - y[..., j])[mask[..., j] > 0] for j in js])
        out[js] = max(float(np.sqrt(np.mean(e * e))), 1e-300)
    return out


def _named(res, z, names):
    zz = np.asarray(z)
    theta = np.asarray(res.natural(jnp.asarray(zz)))
    return dict(zip(names, map(float, np.concatenate([theta, zz[len(theta): len(names)]]))))


def _rms(pred, y, mask):
    e = (pred - y) * mask
    return math.sqrt(float(np.sum(e * e)) / max(float(mask.sum()), 1.0))


def _sensor_columns(model, columns) -> dict:
    """``{sensor name: [indices in columns]}``."""
    by_sensor = {}
    for j, c in enumerate(columns):
        s = next(s for s in model.sensors if c in s.columns)
        by_sensor.setdefault(s.name, []).append(j)
    return by_sensor


def _report(records, model, columns, pred, y, mask, units):
    """Per record: residual RMS per sensor in its unit (``units``: per column) and the
    sample count."""
    by_sensor = _sensor_columns(model, columns)
    out = []
    for k, rec in enumerate(records):
        rms = {}
        for name, js in by_sensor.items():
            e = np.concatenate([(pred[k, :, j] - y[k, :, j])[mask[k, :, j] > 0] for j in js])
            if e.size:
                rms[name] = float(np.sqrt(np.mean(e * e)))
        out.append({"label": rec.label, "file": str(rec.data.path), "samples": int(rec.data.t.size),
                    "overrides": rec.overrides, "rms": rms,
                    "units": {name: units.get(columns[js[0]]) for name, js in by_sensor.items()}})
    return out


def _with_shooting(res, data, z, lower, upper, shooting, b0, st):
    """Shooting segments and their initial states (from the initial-guess run, and from
    the data where a column is a coordinate, its rate ``<column>_dot`` by differences)."""
    segs = _segments(data.t, shooting)
    t = data.t
    starts = (0.0,) + tuple(float(t[s[0]]) for s in segs[1:])
    segments = []
    for k, s in enumerate(segs):
        t1 = starts[k + 1] if k + 1 < len(starts) else float(t[s[-1]])
        segments.append((starts[k], t1, tuple(float(x) for x in t[s])))
    system = b0.system
    guess = simulate(system, t1=starts[-1], params=b0.params(b0.values), dt=st["dt"], solver=st["solver"],
                     rtol=st["rtol"], atol=st["atol"], saveat=np.asarray(starts), diagnostics=False)
    nodes = np.array(guess.xs)
    names_x = list(system.state_names)
    for j, col in enumerate(data.names):
        if col not in names_x:
            continue
        i0 = names_x.index(col)
        rate = np.gradient(data.values[:, j], data.t)
        for k in range(1, shooting):
            row = int(segs[k][0])
            nodes[k, i0] = data.values[row, j]
            if col + "_dot" in names_x:
                nodes[k, names_x.index(col + "_dot")] = rate[row]
    nx = len(names_x)
    res = dataclasses.replace(res, segments=tuple(segments), n_state=nx)
    extra = np.concatenate([nodes[k] for k in range(1, shooting)])
    return (res, np.concatenate([z, extra]), np.concatenate([lower, np.full(extra.size, -math.inf)]),
            np.concatenate([upper, np.full(extra.size, math.inf)]))


def _segments(t, shooting):
    if shooting < 1 or shooting > len(t) // 2:
        raise ValueError(f"shooting: need 1 <= segments <= {len(t) // 2} for {len(t)} samples, got {shooting}")
    return [np.asarray(s) for s in np.array_split(np.arange(len(t)), shooting)]


def _stages(continuation):
    """Horizons (fractions of each record) of the continuation stages: the fit is first
    made on the start of the records (where the response is nearly linear in the
    parameters) and then extended, which keeps a factor-of-3 error in a stiffness (a
    period off by sqrt 3) out of the wrong basin of the single-shot problem."""
    if not continuation:
        return [1.0]
    return list((0.1, 0.25, 0.5, 1.0) if continuation is True else tuple(continuation))


def synth(scenario, overrides=None, *, stabilization=None, t1=None, dt=None, solver=None, rtol=None,
          atol=None, columns=None, sensors=None, samples=None, noise=None, t_offset=0.0, seed=0) -> tuple:
    """Synthetic measurements: simulate the scenario with ``overrides`` and sample, at
    ``samples`` equally spaced record times on ``[0, t1]`` (default: every 10 ms, at most
    1001), the ``sensors``' outputs (:mod:`diffmb.design.sensors`) and the coordinates
    ``columns`` (default without sensors: the hinge angles,
    :func:`~diffmb.design.data.default_columns`). The record's clock reads ``t_offset`` at release
    (before it the article rests in its initial state). Gaussian noise of standard
    deviation ``noise`` (column units) on every column, or, when ``noise`` is None, each
    sensor's declared ``sigma``; from ``seed``. Returns ``(Data, trajectory)``."""
    if isinstance(scenario, str):
        scenario = scenarios.get(scenario)
    system, params, _ = scenario.make(overrides, stabilization)
    st = scenario.run_settings(t1=t1, dt=dt, solver=solver, rtol=rtol, atol=atol)
    t1, dt, solver = st["t1"], st["dt"], st["solver"]
    if samples is None:
        samples = min(1001, max(2, int(round(t1 / 0.01)) + 1))
    ts = sample_times(t1, int(samples))
    if not (math.isfinite(t_offset) and 0 <= t_offset < t1):
        raise ValueError(f"t_offset must be in [0, t1) = [0, {t1:g}) s, got {t_offset:g}")
    tm = np.maximum(ts - t_offset, 0.0)
    tr = simulate(system, t1=t1, dt=dt, params=params, solver=solver, rtol=st["rtol"],
                  atol=st["atol"], saveat=tm, diagnostics=False)
    if tr.status != "success":
        raise ValueError(f"synth: the run stopped early ({tr.message}); no data written")
    sensors = tuple(sensors or ())
    columns = tuple(columns) if columns else (() if sensors else default_columns(system))
    unknown = [c for c in columns if c not in system.state_names]
    if unknown:
        raise ValueError(f"synth: unknown column(s) {', '.join(unknown)}; states: {', '.join(system.state_names)}")
    if noise is not None and not (noise >= 0 and math.isfinite(noise)):
        raise ValueError(f"noise must be a non-negative number, got {noise}")
    model = SensorModel.of(sensors + tuple(Sensor(c, "angle", coordinate=c) for c in columns), system)
    y = np.asarray(jax.vmap(lambda t, x: model(system, t, x, params))(jnp.asarray(tm), tr.xs))
    sigma = np.asarray([(noise if noise is not None else (s.sigma or 0.0)) for s in model.sensors
                        for _ in s.columns])
    y = y + sigma * np.random.default_rng(int(seed)).standard_normal(y.shape)
    return Data(t=np.asarray(ts), names=model.columns, values=y, path="<synth>"), tr
