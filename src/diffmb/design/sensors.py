"""Measurement models: what a deployment test records, computed from a simulated state.

A deployment test of a folded array does not record hinge angles. It records:

* ``marker``: the world position [m] of a photogrammetry target, a point fixed on a
  named body (given in that body's frame). Columns ``<name>_x``, ``<name>_y``, ``<name>_z``.
* ``gyro``: the angular rate [rad/s] of a named body in its own axes. Columns
  ``<name>_x``, ``<name>_y``, ``<name>_z``.
* ``accel``: an accelerometer at a point on a body [m/s^2]: the point's acceleration
  minus gravity (the specific force), in the body's axes. Columns as for the gyro.
* ``angle``: a coordinate of the System (a hinge angle, as ``diffmb fit`` always read).
  One column, named like the sensor (default: the coordinate).

Every output is a function of the state through ``System.body_frames``
(:mod:`diffmb.tree.body_frames`), so it exists for every formulation whose System exposes its
bodies (trees, Kane's cut-joint systems, Udwadia-Kalaba). The accelerometer
differentiates the point's velocity along the vector field (one ``jax.jvp``).

Sensors are declared in a JSON file::

    {"sensors": [
      {"name": "tip", "type": "marker", "body": "l", "point": [-1.0, 1.0, 0.0]},
      {"name": "hub", "type": "gyro", "body": "r"}
    ]}

or one per comment line in a CSV record's header,
``# sensor: {"name": "hub", "type": "gyro", "body": "r"}``.

Nuisance parameters (:class:`Nuisance`) enter here: a marker's placement offset (body
axes, added to its nominal point) and a gyro's constant bias (body axes, added to its
rate).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .data import header_lines

KINDS = ("marker", "gyro", "accel", "angle")
AXES = ("x", "y", "z")
#: Column units by sensor kind (``angle`` takes its coordinate's unit).
UNITS = {"marker": "m", "gyro": "rad/s", "accel": "m/s^2"}


@dataclass(frozen=True)
class Sensor:
    """One declared sensor (module docstring). ``point``: body-frame position [m] of a
    marker or accelerometer; ``coordinate``: the state an ``angle`` sensor reads."""

    name: str
    kind: str
    body: str | None = None
    point: tuple = (0.0, 0.0, 0.0)
    coordinate: str | None = None
    sigma: float | None = None  # noise standard deviation (column units): the fit's weight

    @property
    def columns(self) -> tuple:
        if self.kind == "angle":
            return (self.name,)
        return tuple(f"{self.name}_{a}" for a in AXES)

    def to_json(self) -> dict:
        d = {"name": self.name, "type": self.kind}
        if self.kind == "angle":
            d["coordinate"] = self.coordinate
        else:
            d["body"] = self.body
        if self.kind in ("marker", "accel"):
            d["point"] = list(self.point)
        if self.sigma is not None:
            d["sigma"] = self.sigma
        return d


def parse_sensors(items, system, source: str = "<sensors>") -> tuple:
    """Validate sensor declarations (dicts) against ``system``; errors name ``source``,
    the sensor and the field."""
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"{source}: expected a non-empty list of sensors under \"sensors\"")
    bodies = tuple(system.body_names)
    states = tuple(system.state_names)
    out, seen = [], set()
    for k, it in enumerate(items):
        where = f"{source}: sensor {k + 1}"
        if not isinstance(it, dict):
            raise ValueError(f"{where}: expected an object with \"name\" and \"type\", got {it!r}")
        name = it.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in " ,[]"):
            raise ValueError(f"{where}: field 'name': a name without spaces, commas or brackets is required")
        where = f"{source}: sensor {name!r}"
        kind = it.get("type")
        if kind not in KINDS:
            raise ValueError(f"{where}: field 'type': {kind!r} is not one of {', '.join(KINDS)}")
        unknown = sorted(set(it) - {"name", "type", "body", "point", "coordinate", "sigma"})
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if name in seen:
            raise ValueError(f"{where}: declared twice")
        seen.add(name)
        sigma = it.get("sigma")
        if sigma is not None:
            if (isinstance(sigma, bool) or not isinstance(sigma, int | float)
                    or not (sigma > 0 and math.isfinite(sigma))):
                raise ValueError(f"{where}: field 'sigma': the noise standard deviation must be a "
                                 f"positive number (column units), got {sigma!r}")
            sigma = float(sigma)
        if kind == "angle":
            coord = it.get("coordinate", name)
            if coord not in states:
                raise ValueError(f"{where}: field 'coordinate': {coord!r} is not a state; "
                                 f"states: {', '.join(states)}")
            out.append(Sensor(name, kind, coordinate=coord, sigma=sigma))
            continue
        if not bodies:
            raise ValueError(f"{where}: a {kind} needs body poses, which this "
                             f"{type(system).__name__} does not expose")
        body = it.get("body")
        if body not in bodies:
            raise ValueError(f"{where}: field 'body': {body!r} is not a body; bodies: {', '.join(bodies)}")
        point = (0.0, 0.0, 0.0)
        if kind in ("marker", "accel"):
            point = it.get("point", point if kind == "accel" else None)
            try:
                point = tuple(float(v) for v in point)
            except (TypeError, ValueError):
                point = ()
            if len(point) != 3 or not all(math.isfinite(v) for v in point):
                raise ValueError(f"{where}: field 'point': expected 3 finite numbers [m] in "
                                 f"body {body!r}'s frame, got {it.get('point')!r}")
        elif "point" in it:
            raise ValueError(f"{where}: field 'point': a gyro reads a whole body, not a point")
        out.append(Sensor(name, kind, body=body, point=point, sigma=sigma))
    cols = [c for s in out for c in s.columns]
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise ValueError(f"{source}: column name(s) {', '.join(dup)} produced by two sensors")
    return tuple(out)


def read_sensors(path, system) -> tuple:
    """Sensors of a JSON file ``{"sensors": [...]}`` (module docstring)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"sensor file not found: {path}")
    try:
        with open(path) as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(doc, dict) or "sensors" not in doc:
        raise ValueError(f"{path}: expected an object with a \"sensors\" list")
    return parse_sensors(doc["sensors"], system, path)


def header_sensors(path) -> list:
    """Sensor declarations on ``# sensor: {...}`` comment lines of a CSV (dicts)."""
    out = []
    for i, text in header_lines(path, "sensor"):
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: row {i}: sensor declaration is not valid JSON ({e.msg})") from None
    return out


def write_sensors(path, sensors) -> str:
    path = os.fspath(path)
    with open(path, "w") as f:
        json.dump({"sensors": [s.to_json() for s in sensors]}, f, indent=1)
        f.write("\n")
    return path


def column_units(sensors, state_units: dict) -> dict:
    """``{column: unit}`` of the sensors' columns (``angle``: its coordinate's unit)."""
    out = {}
    for s in sensors:
        for c in s.columns:
            out[c] = state_units.get(s.coordinate) if s.kind == "angle" else UNITS[s.kind]
    return out


class Nuisance(eqx.Module):
    """Numbers of the measurement chain, fitted with the physics: ``offsets (n_marker, 3)``
    marker placement errors [m] and ``bias (n_gyro, 3)`` gyro biases [rad/s], body axes."""

    offsets: jnp.ndarray
    bias: jnp.ndarray


class SensorModel(eqx.Module):
    """The sensors' outputs at one state: ``model(system, t, x, params, nuisance)`` is the
    vector of every sensor column in ``columns`` order."""

    sensors: tuple = eqx.field(static=True)
    body_index: tuple = eqx.field(static=True)  # per sensor (-1 for angles)
    state_index: tuple = eqx.field(static=True)  # per sensor (-1 for body sensors)

    @staticmethod
    def of(sensors, system) -> "SensorModel":
        bodies = list(system.body_names)
        states = list(system.state_names)
        return SensorModel(sensors=tuple(sensors),
                           body_index=tuple(bodies.index(s.body) if s.body else -1 for s in sensors),
                           state_index=tuple(states.index(s.coordinate) if s.kind == "angle" else -1
                                             for s in sensors))

    @property
    def columns(self) -> tuple:
        return tuple(c for s in self.sensors for c in s.columns)

    def _of_kind(self, kind):
        return [k for k, s in enumerate(self.sensors) if s.kind == kind]

    @property
    def markers(self) -> tuple:
        return tuple(self.sensors[k].name for k in self._of_kind("marker"))

    @property
    def gyros(self) -> tuple:
        return tuple(self.sensors[k].name for k in self._of_kind("gyro"))

    def zero_nuisance(self, dtype=jnp.float64) -> Nuisance:
        return Nuisance(jnp.zeros((len(self.markers), 3), dtype), jnp.zeros((len(self.gyros), 3), dtype))

    def __call__(self, system, t, x, params, nuisance: Nuisance | None = None):
        if nuisance is None:
            nuisance = self.zero_nuisance(x.dtype)
        out = {}
        needs_frames = any(s.kind != "angle" for s in self.sensors)
        frames = system.body_frames(x, params) if needs_frames else None
        mk = self._of_kind("marker")
        if mk:
            b = np.asarray([self.body_index[k] for k in mk])
            p = jnp.asarray([self.sensors[k].point for k in mk], x.dtype) + nuisance.offsets
            pos = frames.points(b, p)
            out.update({k: pos[j] for j, k in enumerate(mk)})
        gy = self._of_kind("gyro")
        if gy:
            w = frames.omega[np.asarray([self.body_index[k] for k in gy])] + nuisance.bias
            out.update({k: w[j] for j, k in enumerate(gy)})
        ac = self._of_kind("accel")
        if ac:
            b = np.asarray([self.body_index[k] for k in ac])
            p = jnp.asarray([self.sensors[k].point for k in ac], x.dtype)
            xdot = system.vector_field(t, x, params)
            _, acc = jax.jvp(lambda y: system.body_frames(y, params).point_velocities(b, p), (x,), (xdot,))
            model = params.get("model") if isinstance(params, dict) else None
            g = getattr(model, "gravity", None)
            if g is not None:
                acc = acc - g[None, :]
            f = jnp.einsum("kij,kj->ki", frames.rot[b], acc)
            out.update({k: f[j] for j, k in enumerate(ac)})
        for k, s in enumerate(self.sensors):
            if s.kind == "angle":
                out[k] = x[self.state_index[k]][None]
        return jnp.concatenate([out[k] for k in range(len(self.sensors))])
