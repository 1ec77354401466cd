"""Udwadia–Kalaba equations with quaternion states (Shoer & Peck, section III).

Maximal coordinates: every moving body ``B`` carries ``x_B = [r_B; q_B]`` (eq. 4) — its
centre of mass in N and the scalar-last quaternion ``{}^N q^B`` — and the rates
``[r_B_dot; q_B_dot]``. The state is ``x = [r_1, q_1, ..., r_n, q_n, rd_1, qd_1, ...]``.
Inertially fixed bodies carry no state: their pose is a number in ``params["fixed_pose"]``.

Equations of motion
-------------------
Per body, the effective mass and force of eqs. (12)-(13): ``m_B 1_3`` and ``f_B`` for the
translation (eq. 5); for the rotation ``M~_B = T^T I_B T`` and
``F~_B = T^T (tau_B - (T qd) x I_B (T qd) - I_B T_dot qd)`` (eq. 10) with
``T(q) = 2 [q4 1_3 - q123^x, -q123]`` (eq. 7, ``omega_B = T qd``). (``T_dot(qd) qd = 0``
identically, so the last term vanishes; it is kept in the docstrings only.)
``1/2 qd^T M~ qd`` is the rotational kinetic energy (eq. 11).

The constraints ``A x_ddot = b`` (eq. 1) are the quaternion-norm rows (eq. 15), the joint
rows (eqs. 16-19) and user rows from ``phi(x) = 0``. The system's acceleration is the
Udwadia–Phohomsiri solution (eq. 14)

    x_ddot = [ (1 - A^+ A) M_eff ; A ]^+ [ F_eff ; b ],

which, when ``[M_eff; A]`` has full column rank, is the unique ``x_ddot`` with
``M_eff x_ddot = F_eff + A^T mu`` and ``A x_ddot = b`` for some ``mu``. We solve that
system without a dense pseudo-inverse, exploiting its structure:

1. ``M~_B q = 0`` (``T q = 0``): the singular direction of each body's effective mass is
   its own quaternion, exactly the direction the norm row ``q^T q_ddot = -qd^T qd``
   (eq. 15) fixes. Each joint/user row ``a`` is first made orthogonal to ``q_B`` by adding
   a multiple of body B's norm row (``a_q -= (a_q.q/|q|^2) q``, ``b`` changed alike): the
   constraint set is unchanged, and afterwards the norm rows carry no multiplier. The
   same projection is applied to every generalized force on ``q`` (``-dU/dq`` from
   autodiff has a component along ``q`` when ``U`` is written with a non-normalised DCM).
2. The norm rows are then absorbed into an augmented, block-diagonal, positive definite
   mass ``M^_B = M~_B + k q q^T`` whose inverse is closed form: with the orthogonal
   ``E = [T / (2|q|); q^T / |q|]``, ``M^_B^-1 = T^T I^-1 T / (16 |q|^4) + q q^T / (k |q|^4)``.
   The unconstrained acceleration of the augmented system satisfies the norm row
   exactly (``k`` cancels).
3. The joint and user rows are enforced by the range-space (Schur complement) method
   with ``S = A M^-1 A^T``. The paper's revolute rows (eq. 19, 6 rows for 5 constraints)
   and closed loops make ``S`` singular, so ``mu`` solves ``(S + eps 1) mu = r`` by
   Cholesky with ``refine`` steps of iterative refinement — the Tikhonov-regularised
   least-squares solution, which converges to the minimum-norm one for consistent
   ``r``, is differentiable everywhere (an SVD/eigh pseudo-inverse has NaN gradients at
   repeated zero singular values) and costs one ``m x m`` Cholesky.
   ``solver="pinv"`` evaluates eq. (14) literally with ``jnp.linalg.pinv`` (a dense SVD
   fallback, used by the tests to check the structured solve).

Joints (eq. 16 template; each joint's rows touch only its two bodies):

``spherical``  eq. (17)-(18): ``r_B + Q_B p_BC = r_C + Q_C p_CB`` (3 rows, analytic A, b).
``revolute``   eq. (19), the errata form: two spherical joints at ``p +- a`` along the
               axis (6 rows, 5 independent — the redundancy is absorbed by the solve).
``fixed``      weld: the spherical rows plus the rotation vector of the attitude error
               ``E = rel^T {}^B Q^C`` (6 rows).
``prismatic``  relative attitude fixed (3 rows) and the joint point of C on the line
               along ``a`` through the joint point of B (2 rows).
user rows      ``phi(x, p) = 0`` over the position state; ``A = dphi/dx`` by ``jax.jacfwd``
               and ``b = -x_dot^T (d2 phi/dx2) x_dot`` by nested forward-mode derivatives
               (the fixed/prismatic joints use the same machinery locally).

Every joint has a numeric ``active`` in ``params["joints"][kind]["active"]`` (1 on, 0 off:
rows multiplied by 0 are handled like redundant rows), so joint layouts can be switched
and vmapped without recompiling (the reconfiguration explorer relies on it).

Drift control: ``stabilization="baumgarte"`` replaces ``b`` by
``b - 2 alpha phi_dot - beta^2 phi`` (also for the norm rows), with Baumgarte's gains
``alpha, beta`` named ``a``, ``b`` in the params as in every formulation; ``"projection"`` applies,
after every step, Gauss–Newton corrections of the positions onto ``phi = 0`` and
``|q| = 1`` in the metric ``M^`` and then the velocity projection onto ``A x_dot = 0`` in
the same metric (which keeps the total momentum, the joint impulses being internal).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import spatial as sp
from ..model import check_inertia
from ..system import System, check_stabilization
from . import potentials as pot

SOLVERS = ("cholesky", "pinv")
JOINT_KINDS = ("spherical", "revolute", "fixed", "prismatic")
JOINT_ROWS = {"spherical": 3, "revolute": 6, "fixed": 6, "prismatic": 5}
_I3 = np.eye(3)


# ============================================================================ kinematics
def T_matrix(q):
    """``T(q) = 2 [q4 1_3 - q123^x, -q123]`` (eq. 7): ``{}^B omega^{B/N} = T(q) q_dot``."""
    v, w = q[..., :3], q[..., 3]
    eye = jnp.broadcast_to(jnp.eye(3, dtype=q.dtype), v.shape[:-1] + (3, 3))
    left = w[..., None, None] * eye - sp.skew(v)
    return 2.0 * jnp.concatenate([left, -v[..., :, None]], axis=-1)


def dcm_NB(q):
    """``{}^N Q^B`` (body components -> N components); ``spatial.quat_to_dcm`` gives ``[BN]``."""
    return jnp.swapaxes(sp.quat_to_dcm(q), -1, -2)


def omega_body(q, qd):
    """Body-axes angular velocity ``T(q) q_dot`` (eq. 7)."""
    return jnp.sum(T_matrix(q) * qd[..., None, :], axis=-1)


def quat_rate(q, omega):
    """``q_dot = T(q)^T omega / (4 |q|^2)`` — the inverse of eq. (7) on ``q^T q_dot = 0``."""
    T = T_matrix(q)
    return jnp.sum(T * omega[..., :, None], axis=-2) / (4.0 * jnp.sum(q * q, -1, keepdims=True))


def effective_mass(q, inertia):
    """``M~_B = T^T I_B T`` (eq. 10), a singular 4x4 (``M~ q = 0``)."""
    T = T_matrix(q)
    return jnp.swapaxes(T, -1, -2) @ inertia @ T


def effective_force(q, qd, inertia, tau):
    """``F~_B = T^T (tau - (T qd)^x I (T qd) - I T_dot qd)`` (eq. 10; ``T_dot qd = 0``)."""
    T = T_matrix(q)
    w = sp.mv(T, qd)
    rhs = tau - sp.cross(w, sp.mv(inertia, w))
    return sp.mtv(T, rhs)


# ============================================================================ joint rows
def _point_rows(xB, vB, pB, xC, vC, pC):
    """Spherical-joint rows for one point pair (eq. 18 with the errata's ``{}^N Q`` factors).

    Returns ``(A_B (3, 7), A_C (3, 7), b (3,), phi (3,))`` for ``r_B + Q_B p_BC = r_C + Q_C p_CB``.
    """
    qB, qC = xB[3:], xC[3:]
    QB, QC = dcm_NB(qB), dcm_NB(qC)
    TB, TC = T_matrix(qB), T_matrix(qC)
    sB, sC = sp.mv(QB, pB), sp.mv(QC, pC)
    wB = sp.mv(QB, sp.mv(TB, vB[3:]))  # omega in N
    wC = sp.mv(QC, sp.mv(TC, vC[3:]))
    I3 = jnp.eye(3, dtype=xB.dtype)
    A_B = jnp.concatenate([I3, -sp.skew(sB) @ QB @ TB], axis=1)
    A_C = jnp.concatenate([-I3, sp.skew(sC) @ QC @ TC], axis=1)
    b = sp.cross(wC, sp.cross(wC, sC)) - sp.cross(wB, sp.cross(wB, sB))
    phi = xB[:3] + sB - xC[:3] - sC
    return A_B, A_C, b, phi


def _rows_spherical(xB, vB, xC, vC, jp):
    return _point_rows(xB, vB, jp["pB"], xC, vC, jp["pC"])


def _rows_revolute(xB, vB, xC, vC, jp):
    """Eq. (19), errata form: spherical rows at ``p_BC + a`` and ``p_BC - a``."""
    r1 = _point_rows(xB, vB, jp["pB"] + jp["aB"], xC, vC, jp["pC"] + jp["aC"])
    r2 = _point_rows(xB, vB, jp["pB"] - jp["aB"], xC, vC, jp["pC"] - jp["aC"])
    return tuple(jnp.concatenate([u, v], axis=0) for u, v in zip(r1, r2))


def _rotvec_error(xB, xC, rel):
    """Rotation-vector-like attitude error of ``E = rel^T {}^B Q^C`` (zero when aligned)."""
    E = rel.T @ sp.quat_to_dcm(xB[3:]) @ dcm_NB(xC[3:])
    return 0.5 * jnp.stack([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])


def _phi_spherical(xB, xC, jp):
    return xB[:3] + sp.mv(dcm_NB(xB[3:]), jp["pB"]) - xC[:3] - sp.mv(dcm_NB(xC[3:]), jp["pC"])


def _phi_revolute(xB, xC, jp):
    a = dict(jp, pB=jp["pB"] + jp["aB"], pC=jp["pC"] + jp["aC"])
    b = dict(jp, pB=jp["pB"] - jp["aB"], pC=jp["pC"] - jp["aC"])
    return jnp.concatenate([_phi_spherical(xB, xC, a), _phi_spherical(xB, xC, b)])


def _phi_fixed(xB, xC, jp):
    return jnp.concatenate([_phi_spherical(xB, xC, jp), _rotvec_error(xB, xC, jp["rel"])])


def _phi_prismatic(xB, xC, jp):
    d = xC[:3] + sp.mv(dcm_NB(xC[3:]), jp["pC"]) - xB[:3] - sp.mv(dcm_NB(xB[3:]), jp["pB"])
    QB = dcm_NB(xB[3:])
    u, w = sp.mv(QB, jp["uB"]), sp.mv(QB, jp["wB"])
    return jnp.concatenate([_rotvec_error(xB, xC, jp["rel"]), jnp.stack([jnp.dot(u, d), jnp.dot(w, d)])])


PHI = {"spherical": _phi_spherical, "revolute": _phi_revolute, "fixed": _phi_fixed,
       "prismatic": _phi_prismatic}
ANALYTIC = {"spherical": _rows_spherical, "revolute": _rows_revolute}


def autodiff_rows(phi_fn, xB, vB, xC, vC, jp):
    """``A_B, A_C, b, phi`` of ``phi(x_B, x_C) = 0`` from forward-mode autodiff.

    ``A = dphi/dx`` and ``b = -x_dot^T (d2 phi / dx2) x_dot`` (the second derivative of the
    constraint along the motion, eq. 1)."""
    def f(y):
        return phi_fn(y[:7], y[7:], jp)

    y = jnp.concatenate([xB, xC])
    yd = jnp.concatenate([vB, vC])
    J = jax.jacfwd(f)(y)
    curv = jax.jvp(lambda z: jax.jvp(f, (z,), (yd,))[1], (y,), (yd,))[1]
    return J[:, :7], J[:, 7:], -curv, f(y)


def local_rows(kind, xB, vB, xC, vC, jp, analytic=True):
    if analytic and kind in ANALYTIC:
        return ANALYTIC[kind](xB, vB, xC, vC, jp)
    return autodiff_rows(PHI[kind], xB, vB, xC, vC, jp)


# ============================================================================ builder
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
        """A force or potential (:mod:`diffmb.formulations.potentials`)."""
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
    def build(self, *, stabilization="projection", baumgarte=(0.0, 0.0), solver="cholesky",
              analytic=True, projection_iterations=3, refine=2, eps=1e-10) -> "UKSystem":
        check_stabilization(stabilization)
        if solver not in SOLVERS:
            raise ValueError(f"solver: unknown {solver!r}; expected one of {list(SOLVERS)}")
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
        f64 = lambda v: jnp.asarray(np.asarray(v, float))  # noqa: E731
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
            except Exception as e:  # noqa: BLE001
                raise ValueError(f"constraint {name!r}: phi(x, p) failed on the initial state: {e}") from None
            if len(out.shape) != 1:
                raise ValueError(f"constraint {name!r}: phi must return a 1-D array, got shape {out.shape}")
            user_rows.append(int(out.shape[0]))
        system = UKSystem(
            body_names=names, moving=moving, fixed=fixed, joints=tuple(jstruct), user=user,
            user_rows=tuple(user_rows), interactions=inter,
            sensors=tuple((s.name, index[s.body], s.normal is not None) for s in self._sensors),
            stabilization=stabilization, solver=solver, analytic=bool(analytic),
            projection_iterations=int(projection_iterations), refine=int(refine), eps=float(eps),
            params0=params)
        for name, fn in user:
            r = np.asarray(fn(params["x0"][: 7 * len(moving)], params["user"][name]))
            if np.max(np.abs(r), initial=0.0) > 1e-6:
                raise ValueError(f"constraint {name!r}: the initial state violates phi = 0 (max |phi| = {np.max(np.abs(r)):.3g})")
        return system


def _unit_or_zero(n):
    if n is None:
        return np.zeros(3)
    n = np.asarray(n, float)
    return n / np.linalg.norm(n)


# ============================================================================ system
class UKSystem(System):
    """Maximal-coordinate rigid multibody system (module docstring). Build with :class:`UKBuilder`."""

    body_names: tuple = eqx.field(static=True)
    moving: tuple = eqx.field(static=True)
    fixed: tuple = eqx.field(static=True)
    joints: tuple = eqx.field(static=True)  # ((kind, names, iB, iC), ...)
    user: tuple = eqx.field(static=True)
    user_rows: tuple = eqx.field(static=True)
    interactions: tuple = eqx.field(static=True)
    sensors: tuple = eqx.field(static=True)  # ((name, body index, has normal), ...)
    stabilization: str = eqx.field(static=True)
    solver: str = eqx.field(static=True)
    analytic: bool = eqx.field(static=True)
    projection_iterations: int = eqx.field(static=True)
    refine: int = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    params0: dict

    # ------------------------------------------------------------------ protocol
    def default_params(self):
        return self.params0

    def init_state(self, params):
        return params["x0"]

    @property
    def n(self) -> int:
        return len(self.moving)

    @property
    def moving_bodies(self) -> tuple:
        return tuple(self.body_names[i] for i in self.moving)

    @property
    def state_names(self) -> tuple:
        pos = tuple(f"{b}_{s}" for b in self.moving_bodies for s in ("x", "y", "z", "q1", "q2", "q3", "q4"))
        vel = tuple(f"{b}_{s}" for b in self.moving_bodies
                    for s in ("vx", "vy", "vz", "q1_dot", "q2_dot", "q3_dot", "q4_dot"))
        return pos + vel

    @property
    def coordinate_names(self) -> tuple:
        return self.state_names[: 7 * self.n]

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection"

    @property
    def joint_names(self) -> tuple:
        return tuple(n for _, names, _, _ in self.joints for n in names)

    @property
    def n_rows(self) -> int:
        return sum(JOINT_ROWS[k] * len(names) for k, names, _, _ in self.joints) + sum(self.user_rows)

    def split(self, x):
        n7 = 7 * self.n
        return x[:n7].reshape(self.n, 7), x[n7:].reshape(self.n, 7)

    # ------------------------------------------------------------------ all bodies
    def all_poses(self, X, params):
        """``(N_all, 7)`` poses of every body (fixed ones from ``params["fixed_pose"]``)."""
        out = jnp.zeros((len(self.body_names), 7), X.dtype)
        out = out.at[np.asarray(self.moving, int)].set(X)
        if self.fixed:
            out = out.at[np.asarray(self.fixed, int)].set(params["fixed_pose"].astype(X.dtype))
        return out

    def all_rates(self, V):
        out = jnp.zeros((len(self.body_names), 7), V.dtype)
        return out.at[np.asarray(self.moving, int)].set(V)

    def _moving_index(self):
        """Moving-body index of every body (``n`` for fixed ones: dropped by scatters)."""
        m = np.full(len(self.body_names), self.n, dtype=int)
        m[np.asarray(self.moving, int)] = np.arange(self.n)
        return m

    # ------------------------------------------------------------------ forces
    def potential(self, X, params):
        """Total potential energy ``U`` of all conservative interactions."""
        P = self.all_poses(X, params)
        U = jnp.zeros((), X.dtype)
        for it in self.interactions:
            if hasattr(it, "energy"):
                U = U + it.energy(P[:, :3], P[:, 3:], params["interactions"][it.name], params["bodies"])
        return U

    def applied(self, t, X, V, params):
        """``(f (n, 3) in N, tau (n, 3) body axes)`` of the non-potential interactions."""
        P, Vall = self.all_poses(X, params), self.all_rates(V)
        Wall = omega_body(P[:, 3:], Vall[:, 3:])
        N = len(self.body_names)
        F = jnp.zeros((N, 3), X.dtype)
        Tau = jnp.zeros((N, 3), X.dtype)
        for it in self.interactions:
            if hasattr(it, "force"):
                f, tq = it.force(t, P[:, :3], P[:, 3:], Vall[:, :3], Wall,
                                 params["interactions"][it.name], params["bodies"])
                F, Tau = F + f, Tau + tq
        mv = np.asarray(self.moving, int)
        return F[mv], Tau[mv]

    def generalized_forces(self, t, X, V, params):
        """``F_eff`` of eq. (12) per moving body, ``(n, 7)``: ``[f_B; F~_B]`` plus ``-dU/dx``."""
        I = params["bodies"]["inertia"][np.asarray(self.moving, int)]
        q, qd = X[:, 3:], V[:, 3:]
        f, tau = self.applied(t, X, V, params)
        Fq = effective_force(q, qd, I, tau)
        G = -jax.grad(self.potential)(X, params)
        F = jnp.concatenate([f + G[:, :3], Fq + G[:, 3:]], axis=1)
        return self._tangent(F, q)

    @staticmethod
    def _tangent(Y, q):
        """Remove from the quaternion blocks of ``Y (..., n, 7)`` their component along ``q``."""
        yq = Y[..., 3:]
        c = jnp.sum(yq * q, -1, keepdims=True) / jnp.sum(q * q, -1, keepdims=True)
        return jnp.concatenate([Y[..., :3], yq - c * q], axis=-1)

    def minv(self, Y, X, params):
        """``M^-1 Y`` for tangent ``Y (..., n, 7)``: ``y_r / m`` and ``T^T I^-1 T y_q / (16 |q|^4)``."""
        mv = np.asarray(self.moving, int)
        m, I = params["bodies"]["mass"][mv], params["bodies"]["inertia"][mv]
        q = X[:, 3:]
        T = T_matrix(q)
        Iinv = jnp.linalg.inv(I)
        q2 = jnp.sum(q * q, -1)
        w = jnp.einsum("nij,...nj->...ni", T, Y[..., 3:])
        w = jnp.einsum("nij,...nj->...ni", Iinv, w)
        yq = jnp.einsum("nji,...nj->...ni", T / (16.0 * q2**2)[:, None, None], w)
        yr = jnp.einsum("n,...ni->...ni", 1.0 / m, Y[..., :3])
        return jnp.concatenate([yr, yq], axis=-1)

    # ------------------------------------------------------------------ constraints
    def _joint_blocks(self, X, V, params):
        """Per kind: local rows of every joint, scattered into ``A (m, n, 7)``, ``b``, ``phi``."""
        P, Vall = self.all_poses(X, params), self.all_rates(V)
        mi = self._moving_index()
        As, bs, phis = [], [], []
        for kind, names, iB, iC in self.joints:
            jp = params["joints"][kind]
            ib, ic = np.asarray(iB, int), np.asarray(iC, int)
            fn = lambda xB, vB, xC, vC, p, kind=kind: local_rows(kind, xB, vB, xC, vC, p, self.analytic)  # noqa: E731
            A_B, A_C, b, phi = jax.vmap(fn)(P[ib], Vall[ib], P[ic], Vall[ic], jp)
            act = jp["active"].astype(X.dtype)[:, None]
            A_B, A_C = A_B * act[:, :, None], A_C * act[:, :, None]
            b, phi = b * act, phi * act
            nj, mk = b.shape
            A = jnp.zeros((nj, mk, self.n + 1, 7), X.dtype)
            rows = np.arange(nj)
            A = A.at[rows, :, mi[ib]].set(A_B).at[rows, :, mi[ic]].set(A_C)
            As.append(A[:, :, : self.n].reshape(nj * mk, self.n, 7))
            bs.append(b.reshape(-1))
            phis.append(phi.reshape(-1))
        for (name, fn), rows in zip(self.user, self.user_rows):
            p = params["user"][name]
            x = X.reshape(-1)
            v = V.reshape(-1)
            f = lambda y, fn=fn, p=p: fn(y, p)  # noqa: E731
            J = jax.jacfwd(f)(x)
            curv = jax.jvp(lambda z: jax.jvp(f, (z,), (v,))[1], (x,), (v,))[1]
            As.append(J.reshape(rows, self.n, 7))
            bs.append(-curv)
            phis.append(f(x))
        if not As:
            z = jnp.zeros((0,), X.dtype)
            return jnp.zeros((0, self.n, 7), X.dtype), z, z
        return jnp.concatenate(As), jnp.concatenate(bs), jnp.concatenate(phis)

    def _norm_rhs(self, X, V, params, baumgarte):
        """Right side of the norm rows ``q^T q_ddot = beta_n`` (eq. 15, halved)."""
        q, qd = X[:, 3:], V[:, 3:]
        beta = -jnp.sum(qd * qd, -1)
        if baumgarte:
            a, b = params["baumgarte"]["a"], params["baumgarte"]["b"]
            beta = beta - 2 * a * jnp.sum(q * qd, -1) - b**2 * 0.5 * (jnp.sum(q * q, -1) - 1.0)
        return beta

    def constraint_terms(self, X, V, params, baumgarte=None):
        """``(A', b', phi)``: joint + user rows made orthogonal to the quaternions (step 1)."""
        baumgarte = self.stabilization == "baumgarte" if baumgarte is None else baumgarte
        A, b, phi = self._joint_blocks(X, V, params)
        if baumgarte:
            al, be = params["baumgarte"]["a"], params["baumgarte"]["b"]
            phid = jnp.sum(A * V[None], axis=(1, 2))
            b = b - 2 * al * phid - be**2 * phi
        q = X[:, 3:]
        c = jnp.sum(A[..., 3:] * q[None], -1) / jnp.sum(q * q, -1)[None]  # (m, n)
        A = self._tangent(A, q[None])
        b = b - jnp.sum(c * self._norm_rhs(X, V, params, baumgarte)[None], -1)
        return A, b, phi

    def _solve_sym(self, S, r):
        """``mu`` with ``S mu = r`` for SPSD ``S`` (regularised Cholesky + refinement)."""
        m = S.shape[0]
        tr = jnp.trace(S) / m
        eps = jnp.where(tr > 0, self.eps * tr, 1.0)  # all rows switched off: S = 0, r = 0
        L = jnp.linalg.cholesky(S + eps * jnp.eye(m, dtype=S.dtype))
        mu = jax.scipy.linalg.cho_solve((L, True), r)
        for _ in range(self.refine):
            mu = mu + jax.scipy.linalg.cho_solve((L, True), r - S @ mu)
        return mu

    def accelerations(self, t, X, V, params):
        """``(x_ddot (n, 7), mu)``: eq. (14) by the structured solve of the module docstring."""
        q = X[:, 3:]
        F = self.generalized_forces(t, X, V, params)
        baum = self.stabilization == "baumgarte"
        beta_n = self._norm_rhs(X, V, params, baum)
        qn = q * (beta_n / jnp.sum(q * q, -1))[:, None]
        a = self.minv(F, X, params).at[:, 3:].add(qn)
        if self.solver == "pinv":
            return self._pinv_accel(t, X, V, params), jnp.zeros(0, X.dtype)
        A, b, _ = self.constraint_terms(X, V, params)
        if A.shape[0] == 0:
            return a, jnp.zeros(0, X.dtype)
        MA = self.minv(A, X, params)
        m = A.shape[0]
        Af, MAf = A.reshape(m, -1), MA.reshape(m, -1)
        S = Af @ MAf.T
        r = b - Af @ a.reshape(-1)
        mu = self._solve_sym(S, r)
        return a + (MAf.T @ mu).reshape(self.n, 7), mu

    def _pinv_accel(self, t, X, V, params):
        """Eq. (14) literally: ``[(1 - A^+ A) M_eff; A]^+ [F_eff; b]`` with dense pseudo-inverses.

        ``A`` holds the norm rows (eq. 15) and the joint/user rows as built (no
        orthogonalisation); ``F_eff`` is eq. (12) (the ``q``-component of ``-dU/dq`` is
        removed, as a potential of the attitude has none)."""
        mv = np.asarray(self.moving, int)
        m, I = params["bodies"]["mass"][mv], params["bodies"]["inertia"][mv]
        q, qd = X[:, 3:], V[:, 3:]
        n7 = 7 * self.n
        M = jnp.zeros((n7, n7), X.dtype)
        for k in range(self.n):
            s = 7 * k
            M = M.at[s:s + 3, s:s + 3].set(m[k] * jnp.eye(3, dtype=X.dtype))
            M = M.at[s + 3:s + 7, s + 3:s + 7].set(effective_mass(q[k], I[k]))
        F = self.generalized_forces(t, X, V, params).reshape(-1)
        An = jnp.zeros((self.n, n7), X.dtype)
        for k in range(self.n):
            An = An.at[k, 7 * k + 3:7 * k + 7].set(2.0 * q[k])
        bn = -2.0 * jnp.sum(qd * qd, -1)
        Aj, bj, _ = self._joint_blocks(X, V, params)
        A = jnp.concatenate([An, Aj.reshape(Aj.shape[0], n7)])
        b = jnp.concatenate([bn, bj])
        P = jnp.eye(n7, dtype=X.dtype) - jnp.linalg.pinv(A) @ A
        lhs = jnp.concatenate([P @ M, A])
        return (jnp.linalg.pinv(lhs) @ jnp.concatenate([F, b])).reshape(self.n, 7)

    def state_derivative(self, t, x, params):
        X, V = self.split(x)
        acc, _ = self.accelerations(t, X, V, params)
        return jnp.concatenate([V.reshape(-1), acc.reshape(-1)])

    # ------------------------------------------------------------------ projection
    def _normalize(self, X):
        q = X[:, 3:]
        return jnp.concatenate([X[:, :3], q / jnp.sqrt(jnp.sum(q * q, -1, keepdims=True))], axis=1)

    def project(self, x, params):
        if self.stabilization != "projection":
            return x
        return _uk_project(self, x, params)

    def _project(self, x, params):
        X, V = self.split(x)
        zeroV = jnp.zeros_like(V)
        for _ in range(self.projection_iterations):
            X = self._normalize(X)
            A, _, phi = self.constraint_terms(X, zeroV, params, baumgarte=False)
            if A.shape[0]:
                m = A.shape[0]
                MA = self.minv(A, X, params)
                S = A.reshape(m, -1) @ MA.reshape(m, -1).T
                X = X - (MA.reshape(m, -1).T @ self._solve_sym(S, phi)).reshape(self.n, 7)
        X = self._normalize(X)
        q = X[:, 3:]
        V = self._tangent(V, q)  # q^T q_dot = 0
        A, _, _ = self.constraint_terms(X, zeroV, params, baumgarte=False)
        if A.shape[0]:
            m = A.shape[0]
            MA = self.minv(A, X, params)
            S = A.reshape(m, -1) @ MA.reshape(m, -1).T
            w = A.reshape(m, -1) @ V.reshape(-1)
            V = V - (MA.reshape(m, -1).T @ self._solve_sym(S, w)).reshape(self.n, 7)
        return jnp.concatenate([X.reshape(-1), V.reshape(-1)])

    # ------------------------------------------------------------------ outputs
    def kinetic_energy(self, X, V, params):
        """``sum 1/2 m |r_dot|^2 + 1/2 q_dot^T M~ q_dot`` (eq. 11 for the rotation)."""
        mv = np.asarray(self.moving, int)
        m, I = params["bodies"]["mass"][mv], params["bodies"]["inertia"][mv]
        qd = V[:, 3:]
        Mt = effective_mass(X[:, 3:], I)
        rot = 0.5 * jnp.sum(qd * sp.mv(Mt, qd))
        return 0.5 * jnp.sum(m * jnp.sum(V[:, :3] ** 2, -1)) + rot

    def momentum(self, X, V, params):
        """Total linear momentum and angular momentum about the origin of N, N axes."""
        mv = np.asarray(self.moving, int)
        m, I = params["bodies"]["mass"][mv], params["bodies"]["inertia"][mv]
        w = omega_body(X[:, 3:], V[:, 3:])
        lin = m[:, None] * V[:, :3]
        ang = sp.cross(X[:, :3], lin) + sp.mv(dcm_NB(X[:, 3:]), sp.mv(I, w))
        return jnp.sum(lin, 0), jnp.sum(ang, 0)

    def diagnostics(self, x, params):
        X, V = self.split(x)
        T = self.kinetic_energy(X, V, params)
        U = self.potential(X, params)
        lin, ang = self.momentum(X, V, params)
        return {"energy": T + U, "kinetic_energy": T, "potential_energy": U,
                "linear_momentum": lin, "angular_momentum": ang}

    def violation(self, x, params):
        X, V = self.split(x)
        q, qd = X[:, 3:], V[:, 3:]
        A, _, phi = self._joint_blocks(X, jnp.zeros_like(V), params)
        pos = jnp.abs(jnp.sum(q * q, -1) - 1.0)
        vel = jnp.abs(jnp.sum(q * qd, -1))
        if phi.shape[0]:
            pos = jnp.concatenate([pos, jnp.abs(phi)])
            vel = jnp.concatenate([vel, jnp.abs(jnp.sum(A * V[None], axis=(1, 2)))])
        return {"position": jnp.max(pos), "velocity": jnp.max(vel)}

    # ------------------------------------------------------------------ helpers
    def body_index(self, name: str) -> int:
        if name not in self.body_names:
            raise ValueError(f"unknown body {name!r}; bodies are {list(self.body_names)}")
        return self.body_names.index(name)

    def sensor_index(self, name: str) -> int:
        names = [s[0] for s in self.sensors]
        if name not in names:
            raise ValueError(f"unknown sensor {name!r}; sensors are {names}")
        return names.index(name)

    def sensor_state(self, x, params):
        """World positions ``(S, 3)`` and unit face normals ``(S, 3)`` of every sensor."""
        X, _ = self.split(x)
        P = self.all_poses(X, params)
        idx = np.asarray([s[1] for s in self.sensors], int)
        Qn = dcm_NB(P[idx, 3:])
        pts = P[idx, :3] + sp.mv(Qn, params["sensors"]["point"])
        nrm = sp.mv(Qn, params["sensors"]["normal"])
        return pts, nrm

    def sensor_event(self, pairs, *, align_tol=None, armed_key="armed"):
        """An event ``g(t, x, params)`` for :func:`~diffmb.integrate.simulate` that crosses zero
        when any armed sensor pair meets (section IV, step 4.2.2).

        ``pairs``: tuple of ``(sensor_a, sensor_b)`` names. A pair *meets* when the sensor
        points are closer than the sum of their radii and, with ``align_tol`` [rad], when
        their face normals are also anti-parallel within ``align_tol`` (the faces align,
        section IV.A). ``params["sensors"][armed_key]`` (one 0/1 per pair, default all 1)
        arms the pairs; a pair that already meets at the start should be disarmed.
        """
        idx = []
        for a, b in pairs:
            ia, ib = self.sensor_index(a), self.sensor_index(b)
            if align_tol is not None and not (self.sensors[ia][2] and self.sensors[ib][2]):
                raise ValueError(f"sensor pair ({a!r}, {b!r}): face alignment needs a normal on both sensors")
            idx.append((ia, ib))
        if not idx:
            raise ValueError("sensor_event: no sensor pairs given")
        ia = np.asarray([i for i, _ in idx], int)
        ib = np.asarray([j for _, j in idx], int)

        def g(t, x, params):
            h = self._pair_gap(x, params, ia, ib, align_tol)
            armed = params["sensors"].get(armed_key, jnp.ones(len(idx), x.dtype))
            return jnp.min(jnp.where(armed > 0.5, h, jnp.inf))

        g.pairs = tuple(pairs)
        return g

    def _pair_gap(self, x, params, ia, ib, align_tol):
        """Per pair: negative when the pair meets (the event function of each pair)."""
        pts, nrm = self.sensor_state(x, params)
        d = sp.safe_norm(pts[ia] - pts[ib])
        rad = params["sensors"]["radius"][ia] + params["sensors"]["radius"][ib]
        h = d - rad
        if align_tol is not None:
            # inside the proximity radius (much wider than the alignment band) the
            # function is the smooth alignment error, so the root finder sees no kink
            tol = 1.0 - math.cos(align_tol)
            align = (1.0 + jnp.sum(nrm[ia] * nrm[ib], -1) - tol) * rad
            h = jnp.where(h < 0, align, jnp.maximum(h, align))
        return h

    def rebase_welds(self, x, params):
        """``params`` with every ``fixed`` joint's reference (``p_CB`` and the relative
        attitude) taken from state ``x``, so the weld holds the current relative pose
        (used to lock a joint site wherever it is)."""
        if "fixed" not in params["joints"]:
            return params
        X, _ = self.split(jnp.asarray(x))
        P = self.all_poses(X, params)
        (_, _, iB, iC), = [j for j in self.joints if j[0] == "fixed"]
        ib, ic = np.asarray(iB, int), np.asarray(iC, int)
        jp = dict(params["joints"]["fixed"])
        QB, QC = dcm_NB(P[ib, 3:]), dcm_NB(P[ic, 3:])
        at = P[ib, :3] + jnp.einsum("nij,nj->ni", QB, jp["pB"])
        jp["pC"] = jnp.einsum("nji,nj->ni", QC, at - P[ic, :3])
        jp["rel"] = jnp.einsum("nki,nkj->nij", QB, QC)
        return {**params, "joints": {**params["joints"], "fixed": jp}}

    def pair_meets(self, x, params, pairs, align_tol=None):
        """Host-side: which sensor pairs meet at state ``x`` (numpy bools). A pair on the
        boundary (where an event stopped a run) counts as meeting (margin ``1e-6 rad``)."""
        ia = np.asarray([self.sensor_index(a) for a, _ in pairs], int)
        ib = np.asarray([self.sensor_index(b) for _, b in pairs], int)
        h = np.asarray(self._pair_gap(jnp.asarray(x), params, ia, ib, align_tol))
        rad = np.asarray(params["sensors"]["radius"])[ia] + np.asarray(params["sensors"]["radius"])[ib]
        return h <= 1e-6 * rad


@eqx.filter_jit
def _uk_project(system, x, params):
    return system._project(x, params)
