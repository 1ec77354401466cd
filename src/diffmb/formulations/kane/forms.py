"""The two forms of a cut-joint system: Kane's method on independent speeds
(:class:`KaneSystem`) and the multiplier DAE (:class:`MultiplierSystem`), and
:func:`build` choosing one."""


from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .cuts import _greedy_partition, _lu_pivot_ratio
from .system import CutJointSystem

FORMULATIONS = ("kane", "dae")


class KaneSystem(CutJointSystem):
    """Kane's equations for constrained systems, eq. (6): an ODE in ``u``, no multipliers.

    See the module docstring; the constructor is :class:`CutJointSystem`'s.
    """

    formulation = "kane"

    def partition(self, C):
        """``(perm, lu_piv of C_D, repartitioned)`` at the current state.

        The build-time partition is kept while its ``C_D`` pivot ratio stays above
        ``repartition_tol``; otherwise a greedy column pivoting of ``C`` picks a new one.
        """
        p = self.n_independent
        perm0 = jnp.asarray(np.asarray(self.perm))
        lu0 = jax.scipy.linalg.lu_factor(C[:, np.asarray(self.perm[p:])])
        if self.repartition_tol == 0.0:
            return perm0, lu0, jnp.zeros((), C.dtype)
        ill = _lu_pivot_ratio(lu0[0]) < self.repartition_tol

        def repartition(_):
            perm = _greedy_partition(C)
            return perm, jax.scipy.linalg.lu_factor(jnp.take(C, perm[p:], axis=1))

        perm, lu = jax.lax.cond(ill, repartition, lambda _: (perm0, lu0), None)
        return perm, lu, ill.astype(C.dtype)

    def kane_matrices(self, t, q, u, params):
        """The quantities of eqs. (2)-(6) and (13) at one state, in the partition order.

        Returns a dict: ``perm`` (independent speeds first), ``A`` (eq. 13), ``A1``
        (eq. 5), ``A2`` (eq. 2), ``T`` and ``rhs`` (eq. 6: ``T u_dot[perm] = rhs``), and
        ``M``, ``nl``, ``F``, ``lu`` (LU of ``C_D``), ``repartitioned``.
        """
        n, p = self.n, self.n_independent
        ws, M, nl, F, C = self.terms(t, q, u, params)
        perm, lu, switched = self.partition(C)
        Cp = jnp.take(C, perm, axis=1)
        A = -jax.scipy.linalg.lu_solve(lu, Cp[:, :p])                   # eq. (13)
        # A_dot u_I (eq. 5) = -C_D^-1 C_dot [u_I; A u_I]; evaluated with the state's u
        # (equal on C u = 0), which makes u_dot independent of the partition off the
        # velocity manifold too: the rows say C u_dot = -C_dot u for any partition.
        Adot_uI = -jax.scipy.linalg.lu_solve(lu, self._velocity_product(ws, params))
        eye_m = jnp.eye(n - p, dtype=q.dtype)
        A1 = jnp.concatenate([-A, eye_m], axis=1)                         # eq. (5)
        A2 = jnp.concatenate([jnp.eye(p, dtype=q.dtype), A.T], axis=1)   # eq. (2)
        Mp = jnp.take(jnp.take(M, perm, axis=0), perm, axis=1)
        rp = jnp.take(F - nl, perm)
        T = jnp.concatenate([A1, A2 @ Mp], axis=0)                        # eq. (6)
        rhs = jnp.concatenate([Adot_uI, A2 @ rp])
        return {"perm": perm, "A": A, "A1": A1, "A2": A2, "T": T, "rhs": rhs, "M": M,
                "nl": nl, "F": F, "lu": lu, "repartitioned": switched}

    def accelerations(self, t, q, u, params):
        p = self.n_independent
        k = self.kane_matrices(t, q, u, params)
        perm = k["perm"]
        udot = jnp.zeros_like(u).at[perm].set(jnp.linalg.solve(k["T"], k["rhs"]))  # eq. (6)
        # reactions on demand: eq. (7) F_cr = M u_dot + nl - F, eq. (10) F_cr = -C^T lambda
        F_cr = k["M"] @ udot + k["nl"] - k["F"]
        lam = -jax.scipy.linalg.lu_solve(k["lu"], jnp.take(F_cr, perm)[p:], trans=1)
        return udot, lam, {"repartitioned": k["repartitioned"]}


class MultiplierSystem(CutJointSystem):
    """The Lagrange-multiplier DAE form of the same system, eq. (11) (index-1 form, eq. 9)."""

    formulation = "dae"

    def accelerations(self, t, q, u, params):
        ws, M, nl, F, D = self.terms(t, q, u, params)
        gamma = -self._velocity_product(ws, params)                       # eq. (9)
        if self.stabilization == "baumgarte":
            a, b = params["baumgarte"]["a"], params["baumgarte"]["b"]
            gamma = gamma - 2.0 * a * (D @ u) - b**2 * self.closure(q, params)
        L = jnp.linalg.cholesky(M)
        sol = jax.scipy.linalg.cho_solve((L, True), jnp.concatenate([(F - nl)[:, None], D.T], axis=1))
        a_free, Y = sol[:, 0], sol[:, 1:]
        lam = jnp.linalg.solve(D @ Y, D @ a_free - gamma)                  # Schur complement of eq. (11)
        udot = a_free - Y @ lam
        return udot, lam, {}


def build(formulation: str, *args, **kwargs) -> CutJointSystem:
    """``KaneSystem`` (``"kane"``) or ``MultiplierSystem`` (``"dae"``) with the same arguments."""
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation: unknown {formulation!r}; expected one of {list(FORMULATIONS)}")
    cls = KaneSystem if formulation == "kane" else MultiplierSystem
    return cls(*args, **kwargs)
