"""Forces, potentials and sensors for the Udwadia–Kalaba formulation (Shoer & Peck).

Section II of the paper drives every reconfiguration step with a potential ``U(x)``
(gravity, gravity gradient, magnets, flux-pinned interfaces) plus "a small amount of
dissipation" (Fig. 5). Each object here is an *interaction*: a small frozen dataclass that
holds only static structure (names, and after :meth:`resolve` the body indices) and
declares its numbers in :meth:`defaults`; the numbers live in the System's params under
``params["interactions"][name]`` (so they can be differentiated, swept and vmapped — the
reconfiguration explorer switches potentials on and off through their ``weight``).

Arguments of the callbacks (all bodies, fixed ones included, in the system's body order):
``R (N, 3)`` centre-of-mass positions in N; ``Q (N, 4)`` scalar-last quaternions
``{}^N q^B`` (eq. 4; ``spatial.quat_to_dcm(q)`` is ``[BN]``); ``V (N, 3)`` velocities in N;
``W (N, 3)`` angular velocities ``{}^B omega^{B/N}`` in body axes (eq. 7); ``bodies``:
``{"mass": (N,), "inertia": (N, 3, 3)}``.

* ``energy(R, Q, p, bodies) -> U`` (conservative): the System takes the generalized
  forces from ``jax.grad`` of the sum of all energies (eq. 12's applied-force column).
* ``force(t, R, Q, V, W, p, bodies) -> (F (N, 3) in N, tau (N, 3) in body axes)``
  (applied forces/torques about the centres of mass, eqs. 5-6).

Sensors (section IV) are body-fixed points with a proximity radius; :class:`Sensor` pairs
become real-valued event functions for :func:`diffmb.simulation.integrate.simulate` (the run stops
where the function crosses zero), see
:meth:`diffmb.formulations.udwadia_kalaba.UKSystem.sensor_event`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp

MU0 = 4e-7 * math.pi


def _vec3(v, what):
    a = np.asarray(v, dtype=float)
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: expected 3 finite numbers, got {v!r}")
    return tuple(float(x) for x in a)


def _nonneg(v, what):
    v = float(v)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{what}: must be finite and non-negative, got {v}")
    return v


def _dcm_NB(q):
    """``{}^N Q^B`` (maps body components to N) from the scalar-last quaternion."""
    return jnp.swapaxes(sp.quat_to_dcm(q), -1, -2)


def world_point(R, Q, i, point):
    """World position of a body-fixed ``point`` (body axes, from the com) of body ``i``."""
    return R[i] + sp.mv(_dcm_NB(Q[i]), jnp.asarray(point, R.dtype))


@dataclass(frozen=True)
class Interaction:
    """Base: a named force/potential acting on some bodies (see module docstring)."""

    name: str
    bodies: tuple = ()
    index: tuple = ()  # filled by resolve()
    conservative = True
    dissipative = False

    def resolve(self, body_index: dict) -> "Interaction":
        idx = []
        for b in self.bodies:
            if b not in body_index:
                raise ValueError(f"{type(self).__name__} {self.name!r}: unknown body {b!r}; "
                                 f"bodies are {list(body_index)}")
            idx.append(body_index[b])
        return dataclasses.replace(self, index=tuple(idx))

    def defaults(self) -> dict:
        return {"weight": 1.0}

    def _sel(self, n):
        """Indices this interaction acts on (all bodies when ``bodies`` is empty)."""
        return np.asarray(self.index if self.bodies else range(n), dtype=int)


@dataclass(frozen=True)
class UniformGravity(Interaction):
    """``U = -sum_B m_B g . r_B`` (uniform field ``g`` in N; all bodies unless ``bodies``)."""

    g: tuple = (0.0, 0.0, -9.81)

    def defaults(self):
        return {"weight": 1.0, "g": _vec3(self.g, f"gravity {self.name!r} g")}

    def energy(self, R, Q, p, bodies):
        i = self._sel(R.shape[0])
        g = jnp.asarray(p["g"], R.dtype)
        return -p["weight"] * jnp.sum(bodies["mass"][i] * sp.mv(R[i], g))


@dataclass(frozen=True)
class GravityGradient(Interaction):
    """Gravity gradient (tidal) potential about a circular orbit of rate ``n`` [rad/s].

    Second-order expansion of ``-mu m / |R_orbit + s|`` about the orbit point ``origin``
    with the local vertical ``radial`` (unit, in N): per mass element
    ``-(n^2 / 2)(3 (e.s)^2 - |s|^2)``; summed over a rigid body with centre ``rho = r - origin``
    and inertia ``I_N = Q I Q^T`` this is
    ``-(n^2/2) m (3 (e.rho)^2 - |rho|^2) + (n^2/2)(3 e^T I_N e - tr I)`` — the modules are
    pulled apart along the vertical (the paper's green transitions, section IV.B) and each
    body's minimum axis of inertia turns to the vertical. The frame's rotation at ``n``
    (Coriolis, centrifugal) is not modelled: a quasi-static field, valid for steps much
    shorter than an orbit.
    """

    n: float = 1.1e-3
    radial: tuple = (1.0, 0.0, 0.0)
    origin: tuple = (0.0, 0.0, 0.0)

    def defaults(self):
        e = np.asarray(_vec3(self.radial, f"gravity gradient {self.name!r} radial"))
        if np.linalg.norm(e) < 1e-12:
            raise ValueError(f"gravity gradient {self.name!r}: radial must be non-zero")
        return {"weight": 1.0, "n": _nonneg(self.n, f"gravity gradient {self.name!r} n"),
                "radial": tuple(e / np.linalg.norm(e)),
                "origin": _vec3(self.origin, f"gravity gradient {self.name!r} origin")}

    def energy(self, R, Q, p, bodies):
        i = self._sel(R.shape[0])
        e = jnp.asarray(p["radial"], R.dtype)
        rho = R[i] - jnp.asarray(p["origin"], R.dtype)[None, :]
        m = bodies["mass"][i]
        er = sp.mv(rho, e)
        trans = -0.5 * m * (3.0 * er**2 - jnp.sum(rho * rho, axis=-1))
        eb = sp.mv(sp.quat_to_dcm(Q[i]), jnp.broadcast_to(e, rho.shape))  # e in body axes
        I = bodies["inertia"][i]
        rot = 0.5 * (3.0 * jnp.sum(eb * sp.mv(I, eb), -1) - jnp.trace(I, axis1=-2, axis2=-1))
        return p["weight"] * p["n"] ** 2 * jnp.sum(trans + rot)


@dataclass(frozen=True)
class DipoleDipole(Interaction):
    """Magnetic dipole–dipole interaction between a dipole on body A and one on body B.

    ``U = mu0 / (4 pi |r|^3) [m_a.m_b - 3 (m_a.r^)(m_b.r^)]`` with ``r`` from dipole A to
    dipole B; the dipoles ``moment_a``/``moment_b`` [A m^2] sit at ``point_a``/``point_b``
    (body axes, from each com) and turn with their bodies. ``body_a`` may be a fixed body
    (an electromagnet on an inertially fixed module).
    """

    point_a: tuple = (0.0, 0.0, 0.0)
    moment_a: tuple = (0.0, 0.0, 1.0)
    point_b: tuple = (0.0, 0.0, 0.0)
    moment_b: tuple = (0.0, 0.0, 1.0)
    mu0: float = MU0

    def defaults(self):
        w = f"dipole {self.name!r}"
        return {"weight": 1.0, "point_a": _vec3(self.point_a, w + " point_a"),
                "moment_a": _vec3(self.moment_a, w + " moment_a"),
                "point_b": _vec3(self.point_b, w + " point_b"),
                "moment_b": _vec3(self.moment_b, w + " moment_b"),
                "mu0": _nonneg(self.mu0, w + " mu0")}

    def energy(self, R, Q, p, bodies):
        a, b = self.index
        dt = R.dtype
        xa = world_point(R, Q, a, p["point_a"])
        xb = world_point(R, Q, b, p["point_b"])
        ma = sp.mv(_dcm_NB(Q[a]), jnp.asarray(p["moment_a"], dt))
        mb = sp.mv(_dcm_NB(Q[b]), jnp.asarray(p["moment_b"], dt))
        r = xb - xa
        d2 = jnp.sum(r * r)
        d = jnp.sqrt(d2)
        u = p["mu0"] / (4 * math.pi) * (jnp.dot(ma, mb) / (d2 * d)
                                        - 3.0 * jnp.dot(ma, r) * jnp.dot(mb, r) / (d2 * d2 * d))
        return p["weight"] * u


def _relative_dcm(Q, a, b):
    """``{}^A Q^B``: components in B -> components in A."""
    return sp.mm(sp.quat_to_dcm(Q[a]), _dcm_NB(Q[b]))


@dataclass(frozen=True)
class FluxPinningWell(Interaction):
    """The flux-pinned interface as a 6-DOF spring–damper well (section I, refs. 17-18).

    A superconductor on body A (pinning point ``pin_a``) holds a magnet on body B (point
    ``pin_b``) near an equilibrium relative pose: the magnet point at ``offset`` from the
    pinning point, in A's axes, and B's attitude relative to A equal to the DCM ``rel_eq``
    (``{}^A Q^B``, default identity). Potential (Fig. 3's well, linearised):
    ``U = k_t/2 |d|^2 + k_r (3 - tr(E))/2`` with ``d`` the magnet's displacement from its
    equilibrium point (in N) and ``E = rel_eq^T {}^A Q^B`` the attitude error
    (``(3 - tr E)/2 = 1 - cos(angle) ~ angle^2/2``). Damping (a dissipative force):
    ``-c_t d_dot`` on the magnet point and ``-c_r`` times the relative angular velocity
    as a torque pair. ``weight`` scales both (0 switches the interface off).
    """

    pin_a: tuple = (0.0, 0.0, 0.0)
    pin_b: tuple = (0.0, 0.0, 0.0)
    offset: tuple = (0.0, 0.0, 0.0)
    rel_eq: tuple = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    k_t: float = 100.0
    k_r: float = 1.0
    c_t: float = 0.0
    c_r: float = 0.0
    dissipative = True

    def defaults(self):
        w = f"flux-pinning well {self.name!r}"
        E = np.asarray(self.rel_eq, float)
        if E.shape != (3, 3) or not np.allclose(E @ E.T, np.eye(3), atol=1e-8) or np.linalg.det(E) < 0:
            raise ValueError(f"{w}: rel_eq must be a proper rotation (3x3 DCM)")
        return {"weight": 1.0, "pin_a": _vec3(self.pin_a, w + " pin_a"),
                "pin_b": _vec3(self.pin_b, w + " pin_b"), "offset": _vec3(self.offset, w + " offset"),
                "rel_eq": E, "k_t": _nonneg(self.k_t, w + " k_t"), "k_r": _nonneg(self.k_r, w + " k_r"),
                "c_t": _nonneg(self.c_t, w + " c_t"), "c_r": _nonneg(self.c_r, w + " c_r")}

    def _d(self, R, Q, p):
        a, b = self.index
        dt = R.dtype
        target = world_point(R, Q, a, jnp.asarray(p["pin_a"], dt) + jnp.asarray(p["offset"], dt))
        return world_point(R, Q, b, p["pin_b"]) - target

    def energy(self, R, Q, p, bodies):
        a, b = self.index
        d = self._d(R, Q, p)
        E = sp.mm(jnp.swapaxes(jnp.asarray(p["rel_eq"], R.dtype), 0, 1), _relative_dcm(Q, a, b))
        return p["weight"] * (0.5 * p["k_t"] * jnp.sum(d * d) + 0.5 * p["k_r"] * (3.0 - jnp.trace(E)))

    def force(self, t, R, Q, V, W, p, bodies):
        a, b = self.index
        dt = R.dtype
        n = R.shape[0]
        Na, Nb = _dcm_NB(Q[a]), _dcm_NB(Q[b])
        sa = sp.mv(Na, jnp.asarray(p["pin_a"], dt) + jnp.asarray(p["offset"], dt))
        sb = sp.mv(Nb, jnp.asarray(p["pin_b"], dt))
        wa, wb = sp.mv(Na, W[a]), sp.mv(Nb, W[b])  # in N
        ddot = (V[b] + sp.cross(wb, sb)) - (V[a] + sp.cross(wa, sa))
        f = -p["weight"] * p["c_t"] * ddot  # on B at its magnet point; -f on A at the target
        tq = -p["weight"] * p["c_r"] * (wb - wa)  # in N, on B; -tq on A
        F = jnp.zeros((n, 3), dt).at[b].add(f).at[a].add(-f)
        tau_b = sp.mv(sp.quat_to_dcm(Q[b]), tq + sp.cross(sb, f))
        tau_a = sp.mv(sp.quat_to_dcm(Q[a]), -tq - sp.cross(sa, f))
        Tau = jnp.zeros((n, 3), dt).at[b].add(tau_b).at[a].add(tau_a)
        return F, Tau


@dataclass(frozen=True)
class LinearDamping(Interaction):
    """Linear damping ``f = -c_v v``, ``tau = -c_w omega`` on each body (all unless
    ``bodies``): the "small amount of dissipation" of the paper's Fig. 5."""

    c_v: float = 0.0
    c_w: float = 0.01
    conservative = False
    dissipative = True

    def defaults(self):
        w = f"damping {self.name!r}"
        return {"weight": 1.0, "c_v": _nonneg(self.c_v, w + " c_v"), "c_w": _nonneg(self.c_w, w + " c_w")}

    def force(self, t, R, Q, V, W, p, bodies):
        n = R.shape[0]
        mask = jnp.zeros(n, R.dtype).at[self._sel(n)].set(1.0)[:, None]
        return -p["weight"] * p["c_v"] * V * mask, -p["weight"] * p["c_w"] * W * mask


@dataclass(frozen=True)
class AppliedForce(Interaction):
    """A user force/torque ``fn(t, R, Q, V, W, p) -> (f (3,) in N, tau (3,) in body axes)``
    on body ``bodies[0]``; ``numbers`` (a dict) are its parameters (``p``)."""

    fn: object = None
    numbers: tuple = ()
    conservative = False

    def defaults(self):
        if not callable(self.fn):
            raise ValueError(f"applied force {self.name!r}: fn must be callable")
        return {"weight": 1.0, **dict(self.numbers)}

    def force(self, t, R, Q, V, W, p, bodies):
        (i,) = self.index
        f, tau = self.fn(t, R, Q, V, W, p)
        n = R.shape[0]
        w = p["weight"]
        return (jnp.zeros((n, 3), R.dtype).at[i].set(w * f), jnp.zeros((n, 3), R.dtype).at[i].set(w * tau))


@dataclass(frozen=True)
class Sensor:
    """A body-fixed sensor (section IV): ``point`` and optional outward face ``normal`` in
    body axes (from the com), and a proximity ``radius`` [m]."""

    name: str
    body: str
    point: tuple = (0.0, 0.0, 0.0)
    normal: tuple | None = None
    radius: float = 0.01

    def check(self):
        w = f"sensor {self.name!r}"
        _vec3(self.point, w + " point")
        if self.normal is not None and np.linalg.norm(_vec3(self.normal, w + " normal")) < 1e-12:
            raise ValueError(f"{w}: normal must be non-zero")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"{w}: radius must be positive, got {self.radius}")
