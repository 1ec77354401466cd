"""The fit's residual: simulated sensor outputs minus the records, as a function of the
unknowns ``z``.

Unknowns, in order: the bound scenario parameters (some as ``log(value)``); the nuisance
parameters of the measurement chain (:class:`Unknowns`): marker placement offsets
``offset.<marker>.x|y|z`` [m] and gyro biases ``bias.<gyro>.x|y|z`` [rad/s], shared by the
records, and each record's start time ``t_offset`` [s] (the record's clock reads
``t_offset`` at release, so the model time of sample ``t_i`` is ``max(t_i - t_offset, 0)``:
before release the article rests at its initial state); then, with multiple shooting, the
segments' initial states.

The records are simulated together: one ``jax.vmap`` over records (each with its own
Binding, i.e. its own initial fold or stowage, and its own save times), so the compiled
size does not grow with the number of records. Save times are traced
(:func:`~diffmb.simulation.integrate.states_at`), which makes ``t_offset`` differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..simulation.integrate import states_at
from .binding import Binding
from .sensors import SensorModel

#: Default bounds of the nuisance parameters (a fit keeps them inside): marker offsets
#: [m], gyro biases [rad/s], start-time offsets [s].
NUISANCE_BOUNDS = {"offset": 0.05, "bias": 0.05, "t_offset": 0.5}


@dataclass(frozen=True)
class Unknowns:
    """Layout of ``z`` (module docstring): physics ``names``, markers whose offsets and
    gyros whose biases are fitted, whether each record's ``t_offset`` is, record labels."""

    physics: tuple
    offset_markers: tuple
    bias_gyros: tuple
    t_offset: bool
    labels: tuple

    @staticmethod
    def parse(names, sensor_model: SensorModel, labels) -> "Unknowns":
        phys, offs, bias, t_off = [], [], [], False
        for n in names:
            head, dot, rest = n.partition(".")
            if n == "t_offset":
                t_off = True
            elif head == "offset" and dot:
                if rest not in sensor_model.markers:
                    raise ValueError(f"parameter {n!r}: no marker {rest!r}; markers: "
                                     f"{', '.join(sensor_model.markers) or 'none'}")
                offs.append(rest)
            elif head == "bias" and dot:
                if rest not in sensor_model.gyros:
                    raise ValueError(f"parameter {n!r}: no gyro {rest!r}; gyros: "
                                     f"{', '.join(sensor_model.gyros) or 'none'}")
                bias.append(rest)
            else:
                phys.append(n)
        return Unknowns(tuple(phys), tuple(offs), tuple(bias), t_off, tuple(labels))

    @property
    def nuisance_names(self) -> tuple:
        out = [f"offset.{m}.{a}" for m in self.offset_markers for a in "xyz"]
        out += [f"bias.{g}.{a}" for g in self.bias_gyros for a in "xyz"]
        if self.t_offset:
            out += ["t_offset"] if len(self.labels) == 1 else [f"t_offset[{lab}]" for lab in self.labels]
        return tuple(out)

    @property
    def names(self) -> tuple:
        return self.physics + self.nuisance_names

    def nuisance_bounds(self, bounds=None) -> np.ndarray:
        b = {**NUISANCE_BOUNDS, **(bounds or {})}
        kinds = (["offset"] * 3 * len(self.offset_markers) + ["bias"] * 3 * len(self.bias_gyros)
                 + (["t_offset"] * len(self.labels) if self.t_offset else []))
        return np.asarray([b[k] for k in kinds], float)


class Residual(eqx.Module):
    """``r(z)``: weighted, masked output errors of every record, then shooting continuity."""

    bindings: Binding  # stacked: a leading record axis on every array
    sensors: SensorModel
    unknowns: Unknowns = eqx.field(static=True)
    col_index: tuple = eqx.field(static=True)  # per data column: index in the sensor outputs
    t: jnp.ndarray  # (R, M) record times
    y: jnp.ndarray  # (R, M, C)
    mask: jnp.ndarray  # (R, M, C) 1 where measured
    horizon: jnp.ndarray  # (R, M) 1 inside the current continuation stage
    weights: jnp.ndarray  # (C,) noise std per column
    t_end: float = eqx.field(static=True)  # integration span [0, t_end]
    settings: tuple = eqx.field(static=True)  # (dt, solver, rtol, atol)
    log_mask: tuple = eqx.field(static=True)
    segments: tuple = eqx.field(static=True, default=())  # shooting: ((t0, t1, times), ...)
    n_state: int = eqx.field(static=True, default=0)
    cont_scale: jnp.ndarray | float = 1e-3

    @property
    def n_params(self) -> int:
        return len(self.unknowns.physics)

    @property
    def n_nuisance(self) -> int:
        return len(self.unknowns.nuisance_names)

    def natural(self, z):
        """Physics values from ``z`` (``exp`` of the log-space ones)."""
        th = z[: self.n_params]
        mask = jnp.asarray(self.log_mask)
        return jnp.where(mask, jnp.exp(jnp.where(mask, th, 0.0)), th)

    def _nuisance(self, z):
        u, p = self.unknowns, self.n_params
        k = p + 3 * len(u.offset_markers)
        nz = self.sensors.zero_nuisance(z.dtype)
        if u.offset_markers:
            rows = np.asarray([self.sensors.markers.index(m) for m in u.offset_markers])
            nz = eqx.tree_at(lambda n: n.offsets, nz, nz.offsets.at[rows].set(z[p:k].reshape(-1, 3)))
        k2 = k + 3 * len(u.bias_gyros)
        if u.bias_gyros:
            rows = np.asarray([self.sensors.gyros.index(g) for g in u.bias_gyros])
            nz = eqx.tree_at(lambda n: n.bias, nz, nz.bias.at[rows].set(z[k:k2].reshape(-1, 3)))
        R = self.t.shape[0]
        t_off = z[k2: k2 + R] if u.t_offset else jnp.zeros(R, z.dtype)
        return nz, t_off

    def _outputs(self, system, params, ts, xs, nz):
        cols = np.asarray(self.col_index)
        return jax.vmap(lambda t, x: self.sensors(system, t, x, params, nz)[cols])(ts, xs)

    def _states(self, theta, t_off):
        """Each record's states ``(R, M, n)`` at its model times ``(R, M)``."""
        dt, solver, rtol, atol = self.settings

        def one(b, t, off):
            tm = jnp.clip(t - off, 0.0, self.t_end)
            xs, _ = states_at(b.system, tm, t1=self.t_end, params=b.params(theta), dt=dt, solver=solver,
                              rtol=rtol, atol=atol)
            return xs, tm

        return jax.vmap(one)(self.bindings, self.t, t_off)

    def _record_outputs(self, theta, nz, xs, tm):
        return jax.vmap(lambda b, x, t: self._outputs(b.system, b.params(theta), t, x, nz))(self.bindings, xs, tm)

    def predict(self, z):
        """Simulated columns ``(R, M, C)`` and, with shooting, the segments' end states."""
        theta = self.natural(z)
        nz, t_off = self._nuisance(z)
        if self.segments:
            dt, solver, rtol, atol = self.settings
            return self._shooting(z, theta, nz, dt, solver, rtol, atol)
        xs, tm = self._states(theta, t_off)
        return self._record_outputs(theta, nz, xs, tm), ()

    def linearized(self, z):
        """``(r(z), J(z))`` with tangents through the simulation for the physics only.

        The nuisance unknowns do not enter the dynamics: marker offsets and gyro biases
        act on the outputs, and a start offset moves the save times, along which the
        state changes at the vector field's rate (``d x(t_i - t_off) / d t_off =
        -f(x)``). So the states are differentiated for the ``p`` physical parameters
        (``p`` tangents through the solve, however many records and nuisances), and the
        residual's full Jacobian is that of its cheap dependence on the linearised
        states. Exact at ``z`` for the physics and the output nuisances; a start
        offset's column uses the vector field, from which the saved states' interpolant
        differs by the integration error."""
        p = self.n_params
        nz0, off0 = self._nuisance(z)
        theta0 = self.natural(z)

        def states(zp):
            xs, tm = self._states(self.natural(jnp.concatenate([zp, z[p:]])), off0)
            return xs, (xs, tm)

        dS, (xs0, tm0) = jax.jacfwd(states, has_aux=True)(z[:p])
        f = jax.vmap(lambda b, xr, tr: jax.vmap(lambda t, x: b.system.vector_field(t, x, b.params(theta0)))(tr, xr))(
            self.bindings, xs0, tm0)
        inside = ((self.t - off0[:, None] > 0.0) & (self.t - off0[:, None] < self.t_end)).astype(z.dtype)

        def lin(zz):
            nz, off = self._nuisance(zz)
            shift = ((off - off0)[:, None] * inside)[:, :, None]
            xs = xs0 + jnp.einsum("rmnp,p->rmn", dS, zz[:p] - z[:p]) - f * shift
            tm = jnp.clip(self.t - off[:, None], 0.0, self.t_end)
            return self._errors(self._record_outputs(self.natural(zz), nz, xs, tm))

        return lin(z), jax.jacfwd(lin)(z)

    def _errors(self, pred):
        return ((pred - self.y) / self.weights[None, None, :] * self.mask * self.horizon[:, :, None]).reshape(-1)

    def _shooting(self, z, theta, nz, dt, solver, rtol, atol):
        b = jax.tree.map(lambda a: a[0], self.bindings)
        params = b.params(theta)
        x0 = b.system.init_state(params)
        base = self.n_params + self.n_nuisance
        outs, ends = [], []
        for k, (t0, t1, ts) in enumerate(self.segments):
            if k > 0:
                x0 = z[base + (k - 1) * self.n_state: base + k * self.n_state]
            saves = np.asarray(ts + ((t1,) if t1 > ts[-1] else ()))
            xs, _ = states_at(b.system, saves, t0=t0, t1=t1, x0=x0, params=params, dt=dt, solver=solver,
                              rtol=rtol, atol=atol)
            outs.append(self._outputs(b.system, params, jnp.asarray(ts), xs[: len(ts)], nz))
            ends.append(xs[-1])
        return jnp.concatenate(outs)[None], ends

    def __call__(self, z):
        return self.residual_of(z, *self.predict(z))

    def residual_of(self, z, pred, ends):
        """The residual at ``z`` from its predictions ``(pred, ends)`` (:meth:`predict`)."""
        r = [self._errors(pred)]
        base = self.n_params + self.n_nuisance
        for k in range(1, len(self.segments)):
            x_start = z[base + (k - 1) * self.n_state: base + k * self.n_state]
            r.append((ends[k - 1] - x_start) / self.cont_scale)
        return jnp.concatenate(r)


@eqx.filter_jit
def residual_and_jacobian(res, z):
    """``(r, J)``: through :meth:`Residual.linearized`; with shooting (the nodes enter
    the dynamics) by forward mode through everything."""
    if res.segments:
        return res(z), jax.jacfwd(res)(z)
    return res.linearized(z)


@eqx.filter_jit
def residual_and_predictions(res, z):
    """``(r(z), simulated columns)``: one program for the fit's trial steps and its reports
    (two programs compiled the same simulation twice: 2 s more per fit of a 2-link arm)."""
    pred, ends = res.predict(z)
    return res.residual_of(z, pred, ends), pred


def residual_value(res, z):
    return residual_and_predictions(res, z)[0]


def predictions(res, z):
    return residual_and_predictions(res, z)[1]
