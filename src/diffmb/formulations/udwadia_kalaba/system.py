"""``UKSystem``: the Udwadia-Kalaba fundamental equation with quaternions (Shoer & Peck
eq. 12), stabilization, projection, diagnostics and sensor events."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp
from ...system import System
from ...tree.body_frames import BodyFrames, from_quaternions
from .joint_rows import JOINT_ROWS, local_rows
from .quaternion import T_matrix, dcm_NB, effective_force, effective_mass, omega_body


class UKSystem(System):
    """Maximal-coordinate rigid multibody system (module docstring). Build with :class:`~.builder.UKBuilder`."""

    body_names: tuple = eqx.field(static=True)
    moving: tuple = eqx.field(static=True)
    fixed: tuple = eqx.field(static=True)
    joints: tuple = eqx.field(static=True)  # ((kind, names, iB, iC), ...)
    user: tuple = eqx.field(static=True)
    user_rows: tuple = eqx.field(static=True)
    interactions: tuple = eqx.field(static=True)
    sensors: tuple = eqx.field(static=True)  # ((name, body index, has normal), ...)
    stabilization: str = eqx.field(static=True)
    linear_solve: str = eqx.field(static=True)
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
    def coordinate_roles(self) -> dict:
        """Positions: each moving body's origin ``x, y, z`` (the quaternions are attitudes)."""
        return {"position": tuple(f"{b}_{a}" for b in self.moving_bodies for a in "xyz")}

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection"

    @property
    def joint_names(self) -> tuple:
        return tuple(n for _, names, _, _ in self.joints for n in names)

    @property
    def n_rows(self) -> int:
        return sum(JOINT_ROWS[k] * len(names) for k, names, _, _ in self.joints) + sum(self.user_rows)

    def body_states(self, x):
        """``(X, V)``, one row per moving body: ``[r, q]`` and ``[v, q_dot]``."""
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

    @sp.jit_per_form
    def body_frames(self, x, params) -> BodyFrames:
        """Every body's pose and rates at state ``x`` (:mod:`diffmb.tree.body_frames`)."""
        X, V = self.body_states(x)
        return from_quaternions(self.all_poses(X, params), self.all_rates(V), omega_body)

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
            fn = lambda xB, vB, xC, vC, p, kind=kind: local_rows(kind, xB, vB, xC, vC, p, self.analytic)
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
            f = lambda y, fn=fn, p=p: fn(y, p)
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
        """``mu`` with ``S mu = r`` for SPSD ``S`` (regularised Cholesky + refinement).
        The regularisation is ``eps`` of ``S``'s mean diagonal, and at least 100 round-offs
        of its dtype: redundant rows (two hinges on one line) make ``S`` singular, and
        ``1e-10`` is below float32's resolution, where the factor's pivot came out 0 and
        the accelerations NaN."""
        m = S.shape[0]
        tr = jnp.trace(S) / m
        rel = max(self.eps, 100.0 * float(jnp.finfo(S.dtype).eps))
        eps = jnp.where(tr > 0, rel * tr, 1.0)  # all rows switched off: S = 0, r = 0
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
        if self.linear_solve == "pinv":
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
        X, V = self.body_states(x)
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
        X, V = self.body_states(x)
        zeroV = jnp.zeros_like(V)

        def newton(_, X):
            X = self._normalize(X)
            A, _, phi = self.constraint_terms(X, zeroV, params, baumgarte=False)
            if not A.shape[0]:
                return X
            m = A.shape[0]
            MA = self.minv(A, X, params)
            S = A.reshape(m, -1) @ MA.reshape(m, -1).T
            return X - (MA.reshape(m, -1).T @ self._solve_sym(S, phi)).reshape(self.n, 7)

        # a loop, not unrolled: the program holds one iteration (a 4-body chain's run
        # compiled in 2/3 of the time)
        X = jax.lax.fori_loop(0, self.projection_iterations, newton, X)
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

    def body_momenta(self, X, V, params):
        """Each moving body's linear momentum and angular momentum about the origin of N
        (N axes), ``(nb, 3)`` each."""
        mv = np.asarray(self.moving, int)
        m, I = params["bodies"]["mass"][mv], params["bodies"]["inertia"][mv]
        w = omega_body(X[:, 3:], V[:, 3:])
        lin = m[:, None] * V[:, :3]
        return lin, sp.cross(X[:, :3], lin) + sp.mv(dcm_NB(X[:, 3:]), sp.mv(I, w))

    def momentum(self, X, V, params):
        """Total linear momentum and angular momentum about the origin of N, N axes."""
        lin, ang = self.body_momenta(X, V, params)
        return jnp.sum(lin, 0), jnp.sum(ang, 0)

    @sp.jit_per_form
    def diagnostics(self, x, params):
        X, V = self.body_states(x)
        T = self.kinetic_energy(X, V, params)
        U = self.potential(X, params)
        lin, ang = self.body_momenta(X, V, params)
        # momentum_scale: the bodies' angular momenta by magnitude, the natural scale of
        # their sum (which is near zero for a release from rest)
        return {"energy": T + U, "kinetic_energy": T, "potential_energy": U,
                "linear_momentum": jnp.sum(lin, 0), "angular_momentum": jnp.sum(ang, 0),
                "momentum_scale": jnp.sum(sp.safe_norm(ang))}

    @sp.jit_per_form
    def violation(self, x, params):
        X, V = self.body_states(x)
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
        X, _ = self.body_states(x)
        P = self.all_poses(X, params)
        idx = np.asarray([s[1] for s in self.sensors], int)
        Qn = dcm_NB(P[idx, 3:])
        pts = P[idx, :3] + sp.mv(Qn, params["sensors"]["point"])
        nrm = sp.mv(Qn, params["sensors"]["normal"])
        return pts, nrm

    def sensor_event(self, pairs, *, align_tol=None, armed_key="armed"):
        """An event ``g(t, x, params)`` for :func:`~diffmb.simulation.integrate.simulate` that crosses zero
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
        X, _ = self.body_states(jnp.asarray(x))
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
        h = np.asarray(_pair_gap(self, jnp.asarray(x), params, ia, ib, align_tol))
        rad = np.asarray(params["sensors"]["radius"])[ia] + np.asarray(params["sensors"]["radius"])[ib]
        return h <= 1e-6 * rad


@sp.jit_per_form
def _uk_project(system, x, params):
    return system._project(x, params)


@eqx.filter_jit
def _pair_gap(system, x, params, ia, ib, align_tol):
    """:meth:`UKSystem._pair_gap` as one compiled program per structure (the explorer asks it
    at every node: op by op it compiled a program per operation)."""
    return system._pair_gap(x, params, ia, ib, align_tol)
