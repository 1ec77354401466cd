"""``TensegritySystem``: the Cartesian Lagrangian of Hsu et al. (eqs. 20-37) with bar
constraints, direct correction, energy bookkeeping and diagnostics."""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp
from ...system import System, check_stabilization
from .structure import _AXES, Structure

#: The stabilizations the tensegrity formulation accepts (of :data:`diffmb.system.STABILIZATIONS`).
TENSEGRITY_STABILIZATIONS = ("none", "projection")


class TensegritySystem(System):
    """A tensegrity structure as a :class:`~diffmb.system.System` (module docstring).

    ``compressible``: bars elastic (section 3) instead of length-constrained.
    ``stabilization``: ``none`` or ``projection`` (the direct correction, Algorithm 1).
    ``energy_correction``: include the energy row (eq. 43) in the correction.
    ``force``: external node forces, a callable ``(t, q, forcing, n_nodes) -> (3n,)``
    (e.g. :class:`NodeForce`) with its numbers in ``forcing``.
    ``gamma``: correction threshold; ``correction_passes``: the most correction passes per
    step (each applied only while the violation exceeds ``gamma``).
    """

    n_nodes: int = eqx.field(static=True)
    bars: tuple = eqx.field(static=True)
    strings: tuple = eqx.field(static=True)
    compressible: bool = eqx.field(static=True)
    stabilization: str = eqx.field(static=True)
    energy_correction: bool = eqx.field(static=True)
    correction_passes: int = eqx.field(static=True)
    force: Callable | None = eqx.field(static=True)
    params0: dict

    def __init__(self, structure: Structure, *, compressible=False, stabilization="projection",
                 energy_correction=True, force=None, forcing=None, qd0=None, gamma=1e-12,
                 correction_passes=3, slack_width=0.0):
        if not isinstance(structure, Structure):
            raise TypeError(f"TensegritySystem: expected a Structure, got {type(structure).__name__}")
        check_stabilization(stabilization, TENSEGRITY_STABILIZATIONS)
        if not (gamma > 0 and math.isfinite(gamma)):
            raise ValueError(f"gamma: the correction threshold must be positive, got {gamma}")
        if not (slack_width >= 0 and math.isfinite(slack_width)):
            raise ValueError(f"slack_width: must be >= 0 (0: the paper's hard switch), got {slack_width}")
        if int(correction_passes) < 1:
            raise ValueError(f"correction_passes must be at least 1, got {correction_passes}")
        s = structure
        self.n_nodes = s.n_nodes
        self.bars = s.bars
        self.strings = s.strings
        self.compressible = bool(compressible)
        self.stabilization = stabilization
        self.energy_correction = bool(energy_correction)
        self.correction_passes = int(correction_passes)
        self.force = force
        if self.compressible:
            full = s.fixed.all(axis=1)
            for k, (i, j) in enumerate(s.bars):
                if not (full[i] or full[j]) and (s.point_mass[i] == 0 or s.point_mass[j] == 0):
                    raise ValueError(
                        f"bar {k} (nodes {i}-{j}): a compressible bar with two free ends needs point "
                        f"masses on both: its symmetric stretch carries no kinetic energy in "
                        f"T = 1/2 qd^T M qd - T_f (section 3.1)")
        n3 = 3 * s.n_nodes
        qd0 = np.zeros(n3) if qd0 is None else np.asarray(qd0, float)
        if qd0.shape != (n3,):
            raise ValueError(f"qd0: expected shape ({n3},), got {qd0.shape}")
        f64 = lambda a: jnp.asarray(np.asarray(a, float))
        self.params0 = {
            "q0": f64(s.q0), "qd0": f64(qd0),
            "bar_mass": f64(s.bar_mass), "bar_radius": f64(s.bar_radius),
            "bar_length": f64(s.bar_length), "bar_E": f64(s.bar_E), "bar_nu": f64(s.bar_nu),
            "string_K": f64(s.string_K), "string_rest": f64(s.string_rest),
            "string_damping": f64(s.string_damping), "point_mass": f64(s.point_mass),
            "gravity": f64(s.gravity), "A_lin": f64(s.A_lin), "b_lin": f64(s.b_lin),
            "Z_lin": f64(null_space(s.A_lin, n3)),
            "gamma": f64(gamma), "slack_width": f64(slack_width),
            "forcing": jax.tree.map(f64, dict(forcing or {})),
        }

    # ------------------------------------------------------------------ protocol
    def default_params(self):
        return self.params0

    def init_state(self, params):
        return jnp.concatenate([params["q0"], params["qd0"], jnp.zeros(1, params["q0"].dtype)])

    @property
    def state_names(self) -> tuple:
        pos = tuple(f"{a}{i + 1}" for i in range(self.n_nodes) for a in _AXES)
        return pos + tuple("v" + p for p in pos) + ("W_f",)

    @property
    def coordinate_names(self) -> tuple:
        return self.state_names[: 3 * self.n_nodes]

    @property
    def coordinate_roles(self) -> dict:
        """Every coordinate is a node position (Cartesian formulation)."""
        return {"position": self.coordinate_names}

    @property
    def has_projection(self) -> bool:
        return self.stabilization == "projection"

    def unpack(self, x):
        """``(q, qd, W_f)``: node positions, velocities and the work of the forces."""
        n3 = 3 * self.n_nodes
        return x[:n3], x[n3:2 * n3], x[2 * n3]

    # ------------------------------------------------------------------ members
    def _incidence(self, members) -> np.ndarray:
        """``(m, n_nodes)`` incidence matrix ``C`` of ``members`` (node pairs ``(i, j)``):
        ``-1`` at ``i``, ``+1`` at ``j``, so ``C N`` are the member vectors ``N_j - N_i``
        and ``C^T f`` the node forces of member forces ``f`` (the paper's ``Y_k``, eq. 15).
        A constant matrix product instead of indexing: the gradient of an indexed read is
        a scatter, which XLA on a CPU runs as a loop over the indices."""
        C = np.zeros((len(members), self.n_nodes))
        for k, (i, j) in enumerate(members):
            C[k, i] -= 1.0
            C[k, j] += 1.0
        return C

    def _vec(self, N, members):
        return jnp.asarray(self._incidence(members), N.dtype) @ N

    def _node_forces(self, N, members, fk):
        """``sum_k Y_k^T f_k``: member forces ``fk (m, 3)`` (on node ``j``, minus on ``i``) as
        node forces ``(3 n,)``."""
        return (jnp.asarray(self._incidence(members), N.dtype).T @ fk).reshape(-1)

    def _midpoints(self, N, members):
        """``(N_i + N_j) / 2`` of every member."""
        return jnp.asarray(np.abs(self._incidence(members)) / 2, N.dtype) @ N

    # ------------------------------------------------------------------ energies
    def kinetic(self, q, qd, p):
        """``T``: eq. 10 (rigid bars), section 3.1 (compressible: ``1/2 qd^T M qd - T_f``
        with ``I = m (3 r^2 + l^2)/12`` at the current length and Poisson radius
        ``r = r0 (l / l0)^-nu``, the solution of ``rdot = -nu r ldot / l``), plus point masses."""
        N, Nd = q.reshape(-1, 3), qd.reshape(-1, 3)
        T = 0.5 * jnp.sum(p["point_mass"] * jnp.sum(Nd * Nd, axis=1))
        if not self.bars:
            return T
        b, bd = self._vec(N, self.bars), self._vec(Nd, self.bars)
        cd = self._midpoints(Nd, self.bars)
        m = p["bar_mass"]
        trans = 0.5 * m * jnp.sum(cd * cd, axis=1)
        bd2 = jnp.sum(bd * bd, axis=1)
        if not self.compressible:
            l = p["bar_length"]
            I = m * (3.0 * p["bar_radius"] ** 2 + l**2) / 12.0
            rot = 0.5 * I / l**2 * bd2
        else:
            l2 = jnp.sum(b * b, axis=1)
            l = jnp.sqrt(l2)
            r = p["bar_radius"] * (l / p["bar_length"]) ** (-p["bar_nu"])
            I = m * (3.0 * r**2 + l2) / 12.0
            ldot = jnp.sum(b * bd, axis=1) / l
            rot = 0.5 * I / l2 * bd2 - 0.5 * I / l2 * ldot**2  # 1/2 qd^T M_b qd - T_f
        return T + jnp.sum(trans + rot)

    def _string_stretch(self, q, p):
        """``(s, |s|, effective stretch, taut weight)`` of every string (:func:`taut_stretch`)."""
        s = self._vec(q.reshape(-1, 3), self.strings)
        L = _safe_norm(s)
        eff, weight = taut_stretch(L - p["string_rest"], p["slack_width"])
        return s, L, eff, weight

    def string_force_density(self, q, p):
        """``sigma_k = K_k (1 - l_k / |s_k|)`` while taut, else 0 (eq. 13); with a
        ``slack_width`` the derivative of the smoothed ``V_s`` divided by ``|s_k|``."""
        if not self.strings:
            return jnp.zeros(0, q.dtype)
        _, L, eff, weight = self._string_stretch(q, p)
        return p["string_K"] * eff * weight / jnp.where(L > 0, L, 1.0)

    def potential(self, q, p):
        """``V = V_g + V_s (+ V_b)``: gravity (eq. 11), tension-only strings (eq. 12,
        ``1/2 K max(|s| - l0, 0)^2``), compressible bar elasticity (``K_b = E A / l0``)."""
        N = q.reshape(-1, 3)
        g = p["gravity"]
        Vg = -jnp.sum(p["point_mass"] * (N @ g))
        if self.bars:
            Vg = Vg - jnp.sum(p["bar_mass"] * (self._midpoints(N, self.bars) @ g))
        V = Vg
        if self.strings:
            eff = self._string_stretch(q, p)[2]
            V = V + 0.5 * jnp.sum(p["string_K"] * eff**2)
        if self.compressible and self.bars:
            l = _safe_norm(self._vec(N, self.bars))
            l0 = p["bar_length"]
            Kb = p["bar_E"] * jnp.pi * p["bar_radius"] ** 2 / l0
            V = V + 0.5 * jnp.sum(Kb * (l - l0) ** 2)
        return V

    def energy(self, q, qd, p):
        """Total mechanical energy ``E = T + V`` (eq. 34)."""
        return self.kinetic(q, qd, p) + self.potential(q, p)

    # ------------------------------------------------------------------ forces
    def damper_force(self, q, qd, p):
        """``f_d = sum_k Y_k^T f_d,k``, ``f_d,k = -c (sdot.s) s / (s.s)`` while taut (eqs. 15-17)."""
        if not self.strings:
            return jnp.zeros_like(q)
        N, Nd = q.reshape(-1, 3), qd.reshape(-1, 3)
        s, L, _, weight = self._string_stretch(q, p)
        sd = self._vec(Nd, self.strings)
        coef = -weight * p["string_damping"] * jnp.sum(s * sd, axis=1) / jnp.where(L > 0, L * L, 1.0)
        return self._node_forces(N, self.strings, coef[:, None] * s)

    def jump_times(self, params):
        """Where the external force switches (:meth:`NodeForce.jump_times`), if anywhere."""
        if self.force is None or not hasattr(self.force, "jump_times"):
            return None
        return self.force.jump_times(params["forcing"])

    def external_force(self, t, q, p):
        if self.force is None:
            return jnp.zeros_like(q)
        return self.force(t, q, p["forcing"], self.n_nodes)

    def nonconservative_force(self, t, q, qd, p):
        """``f = f_ext + f_d`` (section 2.6, item 3)."""
        return self.external_force(t, q, p) + self.damper_force(q, qd, p)

    # ------------------------------------------------------------------ constraints
    def residual(self, q, p):
        """``R(q)`` of eq. 24: ``A q - b`` and ``|b_k|^2 - l_k^2`` (rigid bars only)."""
        parts = [p["A_lin"] @ q - p["b_lin"]]
        if not self.compressible and self.bars:
            b = self._vec(q.reshape(-1, 3), self.bars)
            parts.append(jnp.sum(b * b, axis=1) - p["bar_length"] ** 2)
        return jnp.concatenate(parts)

    def constraint_terms(self, q, qd, p):
        """``(R, R_q, xi_2)``: eq. 24, eq. 25 and ``xi_2 = [qd^T H_i qd]`` (eq. 20), by JAX."""
        R_fn = lambda x: self.residual(x, p)
        R = R_fn(q)
        Rq = jax.jacfwd(R_fn)(q)
        xi2 = jax.jvp(lambda x: jax.jvp(R_fn, (x,), (qd,))[1], (q,), (qd,))[1]
        return R, Rq, xi2

    # ------------------------------------------------------------------ dynamics
    def mass_matrix(self, q, p):
        """``M = d2T/dqd2`` (eq. 10; ``M_qdd`` of eq. 54 for compressible bars), by JAX."""
        qd = jnp.zeros_like(q)
        return jax.jacfwd(jax.grad(self.kinetic, argnums=1), argnums=1)(q, qd, p)

    def xi1(self, t, q, qd, p, dsigma=None, dpsi=None, df=None):
        """Right-hand side of eq. 19 / eq. 56 from the Lagrangian:
        ``-dV/dq + dT/dq - (d2T/dqd dq) qd + f``; ``dsigma``/``dpsi``/``df`` are additive
        perturbations of the string/bar force densities and node forces (linearisation)."""
        dTdqd = jax.grad(self.kinetic, argnums=1)
        rhs = -jax.grad(self.potential)(q, p) + self.nonconservative_force(t, q, qd, p)
        if self.compressible:
            rhs = rhs + jax.grad(self.kinetic, argnums=0)(q, qd, p)
            rhs = rhs - jax.jvp(lambda x: dTdqd(x, qd, p), (q,), (qd,))[1]
        N = q.reshape(-1, 3)
        if dsigma is not None and self.strings:
            rhs = rhs - self._node_forces(N, self.strings, dsigma[:, None] * self._vec(N, self.strings))
        if dpsi is not None and self.bars:
            rhs = rhs - self._node_forces(N, self.bars, dpsi[:, None] * self._vec(N, self.bars))
        if df is not None:
            rhs = rhs + df
        return rhs

    def accelerations(self, t, q, qd, p, dsigma=None, dpsi=None, df=None):
        """``(qdd, lambda)`` from the KKT system eq. 21.

        The linear constraints ``A q = b`` are eliminated with the constant orthonormal
        null-space basis ``Z`` of ``A`` (``params["Z_lin"]``, ``qdd = Z ydd``; for fixed
        coordinates ``Z`` just selects the free ones), which is eq. 21 with its linear rows
        solved exactly. What remains is eq. 21 in ``(ydd, lambda)`` with ``M_r = Z^T M Z``
        and the bar rows ``R_b = R_q Z``, ``[[M_r, R_b^T], [R_b, 0]] [ydd; -lambda] =
        [Z^T xi_1; -xi_2]``, solved as one system: its solution is eqs. 22-23's, and one
        LU factorisation of a matrix this small costs less than the two Cholesky factors
        and four triangular solves of the Schur-complement route.
        ``lambda`` holds the bar-constraint multipliers.
        """
        M = self.mass_matrix(q, p)
        xi1 = self.xi1(t, q, qd, p, dsigma, dpsi, df)
        Z = p["Z_lin"]
        Mr = Z.T @ M @ Z
        f = Z.T @ xi1
        if self.compressible or not self.bars:
            return Z @ jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(Mr), True), f), jnp.zeros(0, q.dtype)
        Rb, xi2 = self._bar_terms(q, qd, p)
        Rr = Rb @ Z
        m, nf = Rr.shape
        K = jnp.block([[Mr, Rr.T], [Rr, jnp.zeros((m, m), q.dtype)]])
        sol = jnp.linalg.solve(K, jnp.concatenate([f, -xi2]))
        return Z @ sol[:nf], -sol[nf:]

    def _bar_terms(self, q, qd, p):
        """Bar rows of ``R_q`` (eq. 25) and of ``xi_2`` (eq. 20), by JAX from ``R``."""
        Rb_fn = lambda x: self._bar_residual(x, p)
        Rb = jax.jacfwd(Rb_fn)(q)
        xi2 = jax.jvp(lambda x: jax.jvp(Rb_fn, (x,), (qd,))[1], (q,), (qd,))[1]
        return Rb, xi2

    def state_derivative(self, t, x, params):
        q, qd, _ = self.unpack(x)
        qdd, _ = self.accelerations(t, q, qd, params)
        wdot = jnp.dot(self.nonconservative_force(t, q, qd, params), qd)  # eq. 37
        return jnp.concatenate([qd, qdd, wdot[None]])

    # ------------------------------------------------------------------ correction
    def _bar_residual(self, x, p):
        """The rigid bars' rows of ``R(q)`` (eq. 24): ``|b_k|^2 - l_k^2``."""
        bv = self._vec(x.reshape(-1, 3), self.bars)
        return jnp.sum(bv * bv, axis=1) - p["bar_length"] ** 2

    def _violation(self, q, qd, W, E0, p):
        """``(R, R_q Z, R_q qd, E0 - E + W_f, violation norm)``: the bar constraints
        (rigid bars), their rates and the energy error (eq. 43), what Algorithm 1 tests
        against ``gamma``."""
        Z = p["Z_lin"]
        R = Rq = vel = de = None
        viol = jnp.zeros((), q.dtype)
        if not self.compressible and self.bars:
            R = self._bar_residual(q, p)
            Rq = jax.jacfwd(lambda x: self._bar_residual(x, p))(q) @ Z
            vel = Rq @ (Z.T @ qd)
            viol = jnp.maximum(jnp.linalg.norm(R), jnp.linalg.norm(vel))
        if self.energy_correction:
            de = E0 - self.energy(q, qd, p) + W  # eq. 43
            viol = jnp.maximum(viol, jnp.abs(de))
        return R, Rq, vel, de, viol

    def _correction_system(self, q, qd, terms, p):
        """``(A_c, b_c)`` of eq. 44 (eq. 33 without the energy row), in the coordinates
        ``dq = Z dy``, ``dqd = Z dyd`` of the linear constraints' null space (which the
        integration never leaves), so the rows are the bar constraints (rigid bars) and
        the energy; ``Z`` is orthonormal, so the minimum-norm solution is the paper's.
        ``terms``: :meth:`_violation` at ``(q, qd)``."""
        Z = p["Z_lin"]
        nf = Z.shape[1]
        R, Rq, vel, de, _ = terms
        rows, rhs = [], []
        if R is not None:
            Q = jax.jacfwd(lambda x: jax.jvp(lambda y: self._bar_residual(y, p), (x,), (qd,))[1])(q) @ Z
            m = R.shape[0]                                    # (dR_q/dq dq) qd = Q dq
            Zm = jnp.zeros((m, nf), q.dtype)
            z1 = jnp.zeros((m, 1), q.dtype)
            rows += [jnp.concatenate([Rq, Zm, z1], axis=1), jnp.concatenate([Q, Rq, z1], axis=1)]
            rhs += [-R, -vel]
        if de is not None:
            gq, gqd = jax.grad(self.energy, argnums=(0, 1))(q, qd, p)  # eqs. 40-42
            rows.append(jnp.concatenate([Z.T @ gq, Z.T @ gqd, -jnp.ones(1, q.dtype)])[None, :])
            rhs.append(de[None])
        return jnp.concatenate(rows, axis=0), jnp.concatenate(rhs)

    def correct(self, q, qd, W, p, passes: int | None = None):
        """Algorithm 1: up to ``passes`` (default ``correction_passes``) minimum-norm
        corrections (eq. 45), each applied only while ``max(|R|, |R_q qd|, |E - E0 - W_f|)
        > gamma``. A pass below ``gamma`` skips building and solving eq. 44 (a branch, not
        a mask, outside ``vmap``): after the first pass the state usually holds to
        round-off."""
        Z = p["Z_lin"]
        nf = Z.shape[1]
        if not self.energy_correction and (self.compressible or not self.bars):
            return q, qd, W  # nothing to correct: the linear constraints hold exactly
        E0 = self.energy(p["q0"], p["qd0"], p) if self.energy_correction else None

        def update(carry, terms):
            q, qd, W = carry
            Ac, bc = self._correction_system(q, qd, terms, p)
            S = Ac @ Ac.T
            d = Ac.T @ jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(S), True), bc)  # eq. 45
            return q + Z @ d[:nf], qd + Z @ d[nf:2 * nf], W + d[2 * nf]

        def one(_, carry):
            # a loop, not passes unrolled to stop at the first below gamma: the T-bar's 10 s
            # run took 45-46 ms unrolled against 47-48, but its first call compiled 0.35 s
            # longer, and the reverse-mode gradient test took 27.7 s against 20.3 s
            terms = self._violation(*carry, E0, p)
            return jax.lax.cond(terms[-1] > p["gamma"], update, lambda c, _: c, carry, terms)

        return jax.lax.fori_loop(0, passes or self.correction_passes, one, (q, qd, W))

    def project(self, x, params, passes: int | None = None):
        if self.stabilization != "projection":
            return x
        q, qd, W = self.unpack(x)
        q, qd, W = self.correct(q, qd, W, params, passes)
        return jnp.concatenate([q, qd, jnp.reshape(W, (1,))])

    def project_interpolated(self, x, params):
        """One correction pass: a save point inside a step is on the manifold to the
        solver's tolerance, and one pass of eq. 45 (a Newton step) leaves it at the square
        of that, far below ``gamma``, where a second pass would be skipped."""
        return self.project(x, params, passes=1)

    # ------------------------------------------------------------------ outputs
    @sp.jit_per_form
    def diagnostics(self, x, params):
        q, qd, W = self.unpack(x)
        E = self.energy(q, qd, params)
        return {"energy": E - W, "mechanical_energy": E, "work": W,
                "bar_length": _safe_norm(self._vec(q.reshape(-1, 3), self.bars))
                if self.bars else jnp.zeros(0, q.dtype)}

    @sp.jit_per_form
    def violation(self, x, params):
        q, qd, W = self.unpack(x)
        A = params["A_lin"]
        pos = [A @ q - params["b_lin"]]
        vel = [A @ qd]
        if not self.compressible and self.bars:
            b = self._vec(q.reshape(-1, 3), self.bars)
            bd = self._vec(qd.reshape(-1, 3), self.bars)
            l = _safe_norm(b)
            pos.append(l - params["bar_length"])
            vel.append(jnp.sum(b * bd, axis=1) / l)
        E0 = self.energy(params["q0"], params["qd0"], params)
        return {"position": jnp.concatenate(pos), "velocity": jnp.concatenate(vel),
                "energy": (self.energy(q, qd, params) - E0 - W)[None]}


def null_space(A, n):
    """Orthonormal basis of ``{dq : A dq = 0}`` (columns); a column selection when ``A``
    fixes coordinates."""
    A = np.asarray(A, float).reshape(-1, n)
    if A.shape[0] == 0:
        return np.eye(n)
    unit = np.all((A == 0) | (A == 1), axis=1) & (np.sum(A, axis=1) == 1)
    if unit.all():
        free = np.ones(n, bool)
        free[np.argmax(A, axis=1)] = False
        return np.eye(n)[:, free]
    _, sv, Vt = np.linalg.svd(A)
    rank = int(np.sum(sv > 1e-12 * sv[0]))
    return Vt[rank:].T


def taut_stretch(stretch, width):
    """``(effective stretch, taut weight)`` of a tension-only string of ``stretch = |s| - l0``.

    ``width == 0``: ``max(stretch, 0)`` and ``[stretch > 0]``, the paper's switch (eqs. 12-17).
    It is not smooth: a damped string that goes slack switches its damping force off at
    once, so gradients of a run through such a switch miss the change of the switching time
    (a run of ``tbar-compressible``, where strings are slack a third of the time, gave d/d(amplitude)
    7 % off finite differences). ``width > 0``: ``w softplus(stretch / w)`` and its
    derivative ``sigmoid(stretch / w)``, a smooth model (``V_s = 1/2 K eff^2``, damping
    weighted alike) whose gradients are exact, equal to the switch to ``O(w)``.
    """
    smooth = width > 0
    w = jnp.where(smooth, width, 1.0)
    z = stretch / w
    eff = jnp.where(smooth, w * jax.nn.softplus(z), jnp.maximum(stretch, 0.0))
    weight = jnp.where(smooth, jax.nn.sigmoid(z), (stretch > 0).astype(stretch.dtype))
    return eff, weight


def _safe_norm(v):
    """Row norms with a finite gradient at zero (a slack bar's zero length must not put
    NaN into reverse mode)."""
    s = jnp.sum(v * v, axis=-1)
    pos = s > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)
