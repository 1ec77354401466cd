"""``UKBuilder``: bodies, joints, user constraints, interactions and sensors of a
Udwadia-Kalaba system, checked and turned into a :class:`~.system.UKSystem`."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...system import check_stabilization
from ...tree.model import check_inertia
from . import potentials as pot
from .joint_rows import JOINT_KINDS
from .quaternion import dcm_NB, quat_rate
from .system import UKSystem

#: How the multipliers of eq. (14) are solved for (the module docstring of the package).
LINEAR_SOLVES = ("cholesky", "pinv")


@dataclass
class _Body:
    name: str
    mass: float
    inertia: np.ndarray
    r: np.ndarray
    q: np.ndarray
    v: np.ndarray
    w: np.ndarray
    fixed: bool
    radius: float


@dataclass
class _Joint:
    name: str
    kind: str
    B: str
    C: str
    numbers: dict


@dataclass
class _UserConstraint:
    name: str
    fn: Callable
    numbers: dict


def _vec(v, n, what):
    a = np.asarray(v, dtype=float)
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: expected {n} finite numbers, got {v!r}")
    return a


def _unit_quat(q, what):
    q = _vec(q, 4, what)
    n = np.linalg.norm(q)
    if abs(n - 1.0) > 1e-6:
        raise ValueError(f"{what}: quaternion must have unit norm (|q| = {n:.6g})")
    return q / n


def _perp_pair(a):
    """Two unit vectors completing unit ``a`` to a right-handed orthonormal basis."""
    t = np.array([1.0, 0, 0]) if abs(a[0]) < 0.9 else np.array([0, 1.0, 0])
    u = np.cross(a, t)
    u /= np.linalg.norm(u)
    return u, np.cross(a, u)


class UKBuilder:
    """Builds a :class:`UKSystem` body by body.

    >>> b = UKBuilder()
    >>> b.add_body("base", mass=1.0, inertia=np.eye(3) * 0.01, fixed=True)
    >>> b.add_body("arm", mass=1.0, inertia=np.eye(3) * 0.01, r=(0.2, 0, 0))
    >>> b.add_joint("hinge", "revolute", "base", "arm", at=(0.1, 0, 0), axis=(0, 0, 1))
    >>> system = b.build(stabilization="projection")

    Poses are given at the initial configuration: ``r`` (com in N), ``q`` (scalar-last
    ``{}^N q^B``), ``v`` (com velocity in N), ``omega`` (angular velocity in body axes).
    Joints are placed by a world point ``at`` (and a world ``axis``) in that configuration;
    the builder computes the body-fixed ``p_BC``, ``p_CB`` and axes of eqs. (17)-(19).
    """

    def __init__(self):
        self._bodies: list[_Body] = []
        self._joints: list[_Joint] = []
        self._user: list[_UserConstraint] = []
        self._inter: list[pot.Interaction] = []
        self._sensors: list[pot.Sensor] = []

    # ------------------------------------------------------------------ bodies
    def add_body(self, name, *, mass, inertia, r=(0.0, 0.0, 0.0), q=(0.0, 0.0, 0.0, 1.0),
                 v=(0.0, 0.0, 0.0), omega=(0.0, 0.0, 0.0), fixed=False, radius=None):
        what = f"body {name!r}"
        if not isinstance(name, str) or not name:
            raise ValueError("body name must be a non-empty string")
        if any(b.name == name for b in self._bodies):
            raise ValueError(f"{what}: duplicate body name")
        mass = float(mass)
        I = np.asarray(inertia, float)
        if I.shape != (3, 3) or not np.all(np.isfinite(I)):
            raise ValueError(f"{what} inertia: expected a finite 3x3 matrix, got shape {I.shape}")
        check_inertia(mass, np.zeros(3), I, what)
        if not fixed:
            if mass <= 0:
                raise ValueError(f"{what}: a moving body needs a positive mass, got {mass}")
            if np.linalg.eigvalsh(I).min() <= 1e-12 * max(np.abs(I).max(), 1e-300):
                raise ValueError(f"{what}: a moving body needs a positive definite inertia")
        if radius is None:
            radius = math.sqrt(max(np.trace(I), 1e-300) * 5.0 / (2.0 * mass)) if mass > 0 else 0.0
        if not (math.isfinite(radius) and radius >= 0):
            raise ValueError(f"{what} radius: must be finite and non-negative, got {radius}")
        self._bodies.append(_Body(name, mass, I, _vec(r, 3, what + " r"), _unit_quat(q, what + " q"),
                                  _vec(v, 3, what + " v"), _vec(omega, 3, what + " omega"),
                                  bool(fixed), float(radius)))
        return self

    def _body(self, name, what):
        for b in self._bodies:
            if b.name == name:
                return b
        raise ValueError(f"{what}: unknown body {name!r}; bodies are {[b.name for b in self._bodies]}")

    # ------------------------------------------------------------------ joints
    def add_joint(self, name, kind, body_b, body_c, *, at=None, p_bc=None, p_cb=None, axis=(0.0, 0.0, 1.0),
                  half_span=1.0, active=True):
        """A joint between ``body_b`` and ``body_c`` (eqs. 16-19).

        Place it either by the world point ``at`` (initial configuration) or by the body-fixed
        vectors ``p_bc`` (from B's com, B axes) and ``p_cb`` (from C's com, C axes) — then the
        initial poses must satisfy it. ``axis`` (world, initial configuration): the revolute
        axis, or the prismatic sliding direction. ``half_span``: the distance of the two
        spherical points of the revolute rows (eq. 19) from the joint point (the paper's unit
        ``a``). ``active=False`` builds the rows switched off (``params`` turns them on).
        """
        what = f"joint {name!r}"
        if not isinstance(name, str) or not name:
            raise ValueError("joint name must be a non-empty string")
        if any(j.name == name for j in self._joints) or any(u.name == name for u in self._user):
            raise ValueError(f"{what}: duplicate joint/constraint name")
        if kind not in JOINT_KINDS:
            raise ValueError(f"{what}: unknown joint kind {kind!r}; expected one of {list(JOINT_KINDS)}")
        B, C = self._body(body_b, what), self._body(body_c, what)
        if B is C:
            raise ValueError(f"{what}: joins body {body_b!r} to itself")
        if B.fixed and C.fixed:
            raise ValueError(f"{what}: joins two fixed bodies ({body_b!r}, {body_c!r})")
        QB, QC = np.asarray(dcm_NB(jnp.asarray(B.q))), np.asarray(dcm_NB(jnp.asarray(C.q)))
        if at is not None:
            if p_bc is not None or p_cb is not None:
                raise ValueError(f"{what}: give either at or p_bc/p_cb, not both")
            at = _vec(at, 3, what + " at")
            pB, pC = QB.T @ (at - B.r), QC.T @ (at - C.r)
        else:
            if p_bc is None or p_cb is None:
                raise ValueError(f"{what}: give the joint point: at (world) or both p_bc and p_cb")
            pB, pC = _vec(p_bc, 3, what + " p_bc"), _vec(p_cb, 3, what + " p_cb")
            gap = np.linalg.norm(B.r + QB @ pB - C.r - QC @ pC)
            if gap > 1e-6:
                raise ValueError(f"{what}: the initial poses violate the joint (points {gap:.3g} m apart)")
        ax = _vec(axis, 3, what + " axis")
        if np.linalg.norm(ax) < 1e-12:
            raise ValueError(f"{what} axis: must be non-zero")
        ax = ax / np.linalg.norm(ax)
        if not (math.isfinite(half_span) and half_span > 0):
            raise ValueError(f"{what} half_span: must be positive, got {half_span}")
        aB, aC = QB.T @ ax * half_span, QC.T @ ax * half_span
        u, w = _perp_pair(QB.T @ ax)
        rel = QB.T @ QC
        nums = {"pB": pB, "pC": pC, "aB": aB, "aC": aC, "uB": u, "wB": w, "rel": rel,
                "active": 1.0 if active else 0.0}
        self._joints.append(_Joint(name, kind, body_b, body_c, nums))
        return self

    def add_constraint(self, name, phi, numbers=None):
        """User rows ``phi(x, p) = 0``: ``x`` is the position state (``7 n`` moving-body
        entries, ``[r; q]`` per body in :attr:`UKSystem.moving_bodies` order), ``p`` =
        ``params["user"][name]`` (``numbers``). Derivatives come from autodiff."""
        if not callable(phi):
            raise ValueError(f"constraint {name!r}: phi must be callable")
        if any(j.name == name for j in self._joints) or any(u.name == name for u in self._user):
            raise ValueError(f"constraint {name!r}: duplicate joint/constraint name")
        self._user.append(_UserConstraint(name, phi, dict(numbers or {})))
        return self

    def add(self, interaction: pot.Interaction):
        """A force or potential (:mod:`diffmb.formulations.udwadia_kalaba.potentials`)."""
        if not isinstance(interaction, pot.Interaction):
            raise TypeError(f"add: expected a potentials.Interaction, got {type(interaction).__name__}")
        if any(i.name == interaction.name for i in self._inter):
            raise ValueError(f"interaction {interaction.name!r}: duplicate name")
        self._inter.append(interaction)
        return self

    def add_sensor(self, sensor: pot.Sensor):
        if any(s.name == sensor.name for s in self._sensors):
            raise ValueError(f"sensor {sensor.name!r}: duplicate name")
        sensor.check()
        self._body(sensor.body, f"sensor {sensor.name!r}")
        self._sensors.append(sensor)
        return self

    # ------------------------------------------------------------------ build
    def build(self, *, stabilization="projection", baumgarte=(0.0, 0.0), linear_solve="cholesky",
              analytic=True, projection_iterations=3, refine=2, eps=1e-10, solver=None) -> "UKSystem":
        """The System. ``linear_solve``: how eq. (14)'s ``(S + eps 1) mu = r`` is solved,
        one of :data:`LINEAR_SOLVES` (``solver=`` is the 0.1 spelling; ``solver`` now names
        only the integrator, :data:`diffmb.simulation.integrate.SOLVERS`)."""
        check_stabilization(stabilization)
        if solver is not None:
            warnings.warn(f"UKBuilder.build(solver={solver!r}) is now linear_solve={solver!r} (solver= goes in "
                          f"diffmb 0.3)", DeprecationWarning, stacklevel=2)
            linear_solve = solver
        if linear_solve not in LINEAR_SOLVES:
            raise ValueError(f"linear_solve: unknown {linear_solve!r}; expected one of {list(LINEAR_SOLVES)}")
        if not self._bodies or all(b.fixed for b in self._bodies):
            raise ValueError("UK system: needs at least one moving body")
        names = tuple(b.name for b in self._bodies)
        index = {n: i for i, n in enumerate(names)}
        moving = tuple(i for i, b in enumerate(self._bodies) if not b.fixed)
        fixed = tuple(i for i, b in enumerate(self._bodies) if b.fixed)
        inter = tuple(i.resolve(index) for i in self._inter)
        kinds = tuple(k for k in JOINT_KINDS if any(j.kind == k for j in self._joints))
        jstruct, jparams = [], {}
        for k in kinds:
            js = [j for j in self._joints if j.kind == k]
            jstruct.append((k, tuple(j.name for j in js), tuple(index[j.B] for j in js),
                            tuple(index[j.C] for j in js)))
            jparams[k] = {key: jnp.asarray(np.stack([np.asarray(j.numbers[key], float) for j in js]))
                          for key in js[0].numbers}
        a, bb = baumgarte
        f64 = lambda v: jnp.asarray(np.asarray(v, float))
        mov = [self._bodies[i] for i in moving]
        x0 = np.concatenate([np.concatenate([b.r, b.q]) for b in mov]
                            + [np.concatenate([b.v, np.asarray(quat_rate(jnp.asarray(b.q), jnp.asarray(b.w)))])
                               for b in mov])
        params = {
            "bodies": {"mass": f64([b.mass for b in self._bodies]),
                       "inertia": f64(np.stack([b.inertia for b in self._bodies])),
                       "radius": f64([b.radius for b in self._bodies])},
            "fixed_pose": f64(np.stack([np.concatenate([self._bodies[i].r, self._bodies[i].q]) for i in fixed])
                              if fixed else np.zeros((0, 7))),
            "x0": f64(x0),
            "joints": jparams,
            "user": {u.name: jax.tree.map(f64, u.numbers) for u in self._user},
            "interactions": {i.name: jax.tree.map(f64, i.defaults()) for i in inter},
            "baumgarte": {"a": f64(a), "b": f64(bb)},
            "sensors": {"point": f64(np.stack([s.point for s in self._sensors]) if self._sensors else np.zeros((0, 3))),
                        "normal": f64(np.stack([_unit_or_zero(s.normal) for s in self._sensors])
                                      if self._sensors else np.zeros((0, 3))),
                        "radius": f64([s.radius for s in self._sensors])},
        }
        user = tuple((u.name, u.fn) for u in self._user)
        user_rows = []
        for name, fn in user:
            try:
                out = jax.eval_shape(lambda x, p, fn=fn: fn(x, p), jnp.asarray(x0[: 7 * len(moving)]),
                                     params["user"][name])
            except Exception as e:
                raise ValueError(f"constraint {name!r}: phi(x, p) failed on the initial state: {e}") from None
            if len(out.shape) != 1:
                raise ValueError(f"constraint {name!r}: phi must return a 1-D array, got shape {out.shape}")
            user_rows.append(int(out.shape[0]))
        system = UKSystem(
            body_names=names, moving=moving, fixed=fixed, joints=tuple(jstruct), user=user,
            user_rows=tuple(user_rows), interactions=inter,
            sensors=tuple((s.name, index[s.body], s.normal is not None) for s in self._sensors),
            stabilization=stabilization, linear_solve=linear_solve, analytic=bool(analytic),
            projection_iterations=int(projection_iterations), refine=int(refine), eps=float(eps),
            params0=params)
        for name, fn in user:
            r = np.asarray(fn(params["x0"][: 7 * len(moving)], params["user"][name]))
            if np.max(np.abs(r), initial=0.0) > 1e-6:
                raise ValueError(f"constraint {name!r}: the initial state violates phi = 0 "
                                 f"(max |phi| = {np.max(np.abs(r)):.3g})")
        return system


def _unit_or_zero(n):
    if n is None:
        return np.zeros(3)
    n = np.asarray(n, float)
    return n / np.linalg.norm(n)
