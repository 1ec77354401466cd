"""Linearization of tensegrity dynamics (Hsu et al., sections 2.5 and 3.3), minimal
realization on the constraint manifold, and the system norms of Table 2.

``linearize`` differentiates the accelerations ``qdd = xi(q, qd, sigma, Psi, f)`` (eq. 22,
or the KKT solve of eq. 58 for compressible bars) with ``jax.jacfwd`` at an equilibrium:

    A = [[0, I], [dxi/dq, dxi/dqd]]          (eq. 49)
    B_sigma = [0; dxi/dsigma]                (eq. 50, dxi_1/dsigma = -Y-hat, eq. 48)
    B_u = [B_sigma, B_Psi]                   (eq. 59, compressible bars)
    B_f = [0; dxi/df]                        (eq. 51)

``dsigma``/``dPsi`` perturb the string/bar force densities about their equilibrium values
(the paper's control inputs); ``df`` the node forces.

``minimal_realization`` removes what the constraints take away (eq. 52 "is not a minimum
realization, due to the algebraic constraints on dq"): positions and velocities are
restricted to the null space of ``R_q`` at the equilibrium (there ``Q = 0`` since
``qd = 0``), then the uncontrollable part is dropped (orthonormal Krylov basis of
``(A, B)``); with the paper's output ``y = x`` everything left is observable.

``h2_norm`` solves the controllability Lyapunov equation; ``hinf_norm`` bisects on the
imaginary-axis eigenvalues of the Hamiltonian matrix (Boyd-Balakrishnan). Both return
``inf`` for a system that is not asymptotically stable (e.g. no damping).

``stiffness`` is ``K_sys`` of section 3.2 (the Hessian of ``V_s + V_b`` at the equilibrium,
restricted to the free coordinates); its inverse is the compliance matrix of Fig. 19.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sla

from .system import TensegritySystem


def _unforced(params):
    """Params with the external loading switched off (``f_0 = 0``)."""
    return {**params, "forcing": jax.tree.map(jnp.zeros_like, params["forcing"])}


def static_residual(system: TensegritySystem, params, q, lam):
    """``[-dV/dq + R_q^T lambda; R(q)]``: eq. 21 at rest (``qd = qdd = 0``, ``f = 0``)."""
    g = -jax.grad(system.potential)(q, params)
    R_fn = lambda x: system.residual(x, params)
    Rq = jax.jacfwd(R_fn)(q)
    return jnp.concatenate([g + Rq.T @ lam, R_fn(q)])


def equilibrium(system: TensegritySystem, params=None, q=None, *, tol=1e-10, max_iter=50):
    """Static equilibrium ``(q_eq, lambda)`` near ``q`` (default: the initial nodes) by
    Newton's method on :func:`static_residual` (least-squares steps), until the residual
    is below ``tol`` (relative) or the position step is at round-off. Raises ValueError
    if it does not converge."""
    params = system.default_params() if params is None else params
    q = params["q0"] if q is None else jnp.asarray(q)
    m = system.residual(q, params).shape[0]
    lam = jnp.zeros(m, q.dtype)
    F = jax.jit(lambda z: static_residual(system, params, z[: q.shape[0]], z[q.shape[0]:]))
    J = jax.jit(jax.jacfwd(lambda z: static_residual(system, params, z[: q.shape[0]], z[q.shape[0]:])))
    z = jnp.concatenate([q, lam])
    # initial multipliers: least squares on the force balance
    Rq = np.asarray(jax.jacfwd(lambda x: system.residual(x, params))(q))
    g = np.asarray(-jax.grad(system.potential)(q, params))
    if m:
        z = z.at[q.shape[0]:].set(jnp.asarray(np.linalg.lstsq(Rq.T, -g, rcond=None)[0]))
    scale = 1.0 + float(np.max(np.abs(g)))
    res = np.inf
    for _ in range(max_iter):
        r = np.asarray(F(z))
        res = float(np.max(np.abs(r)))
        if res <= tol * scale:
            n3 = q.shape[0]
            return z[:n3], z[n3:]
        step = np.linalg.lstsq(np.asarray(J(z)), -r, rcond=None)[0]
        z = z + jnp.asarray(step)
        n3 = q.shape[0]
        if np.max(np.abs(step[:n3])) <= 1e-13 * (1.0 + float(np.max(np.abs(np.asarray(q))))):
            return z[:n3], z[n3:]  # converged to round-off (stiff structures)
    raise ValueError(f"equilibrium: Newton did not converge (residual {res:.3g} after {max_iter} iterations)")


def linearize(system: TensegritySystem, params=None, q_eq=None):
    """``{"A", "B_sigma", "B_psi" (compressible), "B_u", "B_f", "q_eq"}`` at ``(q_eq, 0)`` (eqs. 47-51, 59)."""
    params = system.default_params() if params is None else params
    p = _unforced(params)
    q_eq = params["q0"] if q_eq is None else jnp.asarray(q_eq)
    n3 = q_eq.shape[0]
    ns, nb = len(system.strings), len(system.bars)
    zeros = (jnp.zeros(n3, q_eq.dtype), jnp.zeros(ns, q_eq.dtype), jnp.zeros(nb, q_eq.dtype),
             jnp.zeros(n3, q_eq.dtype))

    def xi(q, qd, ds, dp, df):
        return system.accelerations(0.0, q, qd, p, ds, dp if system.compressible else None, df)[0]

    Jq, Jqd, Js, Jp, Jf = jax.jit(jax.jacfwd(xi, argnums=(0, 1, 2, 3, 4)))(q_eq, *zeros)
    Z, I = np.zeros((n3, n3)), np.eye(n3)
    A = np.block([[Z, I], [np.asarray(Jq), np.asarray(Jqd)]])
    pad = lambda B: np.vstack([np.zeros((n3, B.shape[1])), np.asarray(B)])
    out = {"A": A, "B_sigma": pad(Js), "B_f": pad(Jf), "q_eq": np.asarray(q_eq)}
    if system.compressible:
        out["B_psi"] = pad(Jp)
        out["B_u"] = np.hstack([out["B_sigma"], out["B_psi"]])
    else:
        out["B_u"] = out["B_sigma"]
    return out


def stiffness(system: TensegritySystem, params, q_eq) -> np.ndarray:
    """``K_sys`` (section 3.2: ``sum sigma_k Y_k^T Y_k + K_k l_0k / |s_k|^3 (...)`` plus the
    bar terms) as the Hessian of the potential, in the free coordinates ``Z^T K Z``."""
    Z = np.asarray(params["Z_lin"])
    H = np.asarray(jax.jit(jax.hessian(system.potential))(jnp.asarray(q_eq), params))
    return Z.T @ H @ Z


def compliance_eigenvalues(system: TensegritySystem, params, q_eq) -> np.ndarray:
    """Eigenvalues of the compliance matrix ``K_sys^-1`` (Fig. 19), largest first [m/N]."""
    ev = np.linalg.eigvalsh(stiffness(system, params, q_eq))
    if ev[0] <= 0:
        raise ValueError(f"stiffness: K_sys is not positive definite at this equilibrium "
                         f"(smallest eigenvalue {ev[0]:.3g}); the structure is not stable")
    return np.sort(1.0 / ev)[::-1]


INPUTS = ("force_densities", "forces")
OUTPUTS = ("state", "positions")


def io_matrices(lin: dict, params, inputs="force_densities", outputs="state"):
    """``(B, C)`` on the full state ``x = [dq; dqd]``: ``inputs`` ``force_densities`` is the
    paper's ``B_u`` (eq. 59: ``dsigma``, and ``dPsi`` for compressible bars), ``forces``
    is ``B_f`` on every free coordinate; ``outputs`` ``state`` is the paper's ``y = x``,
    ``positions`` is ``y = dq`` (the deflections of Fig. 18)."""
    if inputs not in INPUTS:
        raise ValueError(f"inputs: expected one of {list(INPUTS)}, got {inputs!r}")
    if outputs not in OUTPUTS:
        raise ValueError(f"outputs: expected one of {list(OUTPUTS)}, got {outputs!r}")
    B = lin["B_u"] if inputs == "force_densities" else lin["B_f"] @ np.asarray(params["Z_lin"])
    n = lin["A"].shape[0]
    C = np.eye(n) if outputs == "state" else np.eye(n)[: n // 2]
    return B, C


def _orth(M, tol):
    if M.size == 0:
        return np.zeros((M.shape[0], 0))
    U, s, _ = np.linalg.svd(M, full_matrices=False)
    return U[:, s > tol * max(1.0, s[0] if s.size else 0.0)]


def minimal_realization(system: TensegritySystem, params, lin: dict, B=None, *, tol=1e-9):
    """``(A_min, B_min, V)`` with ``x ~= V z``: the constraint manifold's tangent space
    (null space of ``R_q(q_eq)`` for positions and velocities), then the controllable
    subspace of ``(A, B)`` (default ``B_u``). ``V`` has orthonormal columns, so with the
    paper's output ``y = x`` the output matrix of the minimal system is the identity."""
    q_eq = jnp.asarray(lin["q_eq"])
    Rq = np.asarray(jax.jacfwd(lambda x: system.residual(x, params))(q_eq))
    n3 = q_eq.shape[0]
    if Rq.shape[0]:
        _, s, Vt = np.linalg.svd(Rq)
        rank = int(np.sum(s > tol * max(1.0, s[0])))
        T = Vt[rank:].T
    else:
        T = np.eye(n3)
    P = np.block([[T, np.zeros_like(T)], [np.zeros_like(T), T]])
    A = P.T @ lin["A"] @ P
    B = P.T @ (lin["B_u"] if B is None else B)
    # controllable subspace (block Krylov with re-orthogonalisation)
    V = _orth(B, tol)
    new = V
    while new.shape[1] and V.shape[1] < A.shape[0]:
        W = A @ new
        W = W - V @ (V.T @ W)
        W = W - V @ (V.T @ W)
        new = _orth(W, tol * max(1.0, np.linalg.norm(A, 2)))
        V = np.hstack([V, new])
    return V.T @ A @ V, V.T @ B, P @ V


def _stable(A, tol=1e-9):
    ev = np.linalg.eigvals(A)
    return ev.size == 0 or float(np.max(ev.real)) < -tol * max(1.0, float(np.max(np.abs(ev))))


def h2_norm(A, B, C=None) -> float:
    """``||G||_2 = sqrt(trace(C P C^T))``, ``A P + P A^T + B B^T = 0``; inf if not stable."""
    C = np.eye(A.shape[0]) if C is None else C
    if not _stable(A):
        return math.inf
    P = sla.solve_continuous_lyapunov(A, -B @ B.T)
    return float(math.sqrt(max(np.trace(C @ P @ C.T), 0.0)))


def _sigma_max(A, B, C, w):
    return float(np.linalg.svd(C @ np.linalg.solve(1j * w * np.eye(A.shape[0]) - A, B), compute_uv=False)[0])


def hinf_norm(A, B, C=None, *, rtol=1e-6) -> float:
    """``||G||_inf`` (``D = 0``) by bisection on the Hamiltonian test; inf if not stable."""
    C = np.eye(A.shape[0]) if C is None else C
    if not _stable(A):
        return math.inf
    ev = np.linalg.eigvals(A)
    ws = np.concatenate([[0.0], np.abs(ev.imag), np.logspace(-3, 4, 200)])
    lo = max(_sigma_max(A, B, C, w) for w in ws)
    if lo == 0.0:
        return 0.0

    def imag_eigs(g):
        H = np.block([[A, B @ B.T / g**2], [-C.T @ C, -A.T]])
        e = np.linalg.eigvals(H)
        return np.any(np.abs(e.real) < 1e-8 * max(1.0, np.max(np.abs(e))))

    hi = 2.0 * lo
    while imag_eigs(hi):
        lo, hi = hi, 2.0 * hi
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if imag_eigs(mid):
            lo = mid
        else:
            hi = mid
    return float(hi)


def linearize_report(system: TensegritySystem, params=None, *, find_equilibrium=True,
                     inputs="force_densities", outputs="state") -> dict:
    """What ``diffmb linearize`` writes: ``A_shape``, ``eigenvalues`` (of the minimal
    realization, ``[re, im]`` pairs), ``h2_norm``, ``hinf_norm`` (``None`` where infinite:
    a system that is not asymptotically stable, said in ``norms_infinite_because``) for the chosen
    ``inputs``/``outputs``
    (:func:`io_matrices`; the defaults are the paper's), plus ``minimal_order``,
    ``equilibrium_shift`` (how far the equilibrium lies from the initial nodes) and
    ``compliance_eigenvalues`` (Fig. 19; ``None`` if ``K_sys`` is not positive definite)."""
    if not isinstance(system, TensegritySystem):
        raise TypeError(f"linearize: expected a TensegritySystem, got {type(system).__name__}")
    params = system.default_params() if params is None else params
    q0 = params["q0"]
    q_eq = equilibrium(system, params)[0] if find_equilibrium else q0
    lin = linearize(system, params, q_eq)
    B_full, C_full = io_matrices(lin, params, inputs, outputs)
    A, B, V = minimal_realization(system, params, lin, B_full)
    C = C_full @ V
    h2, hinf = h2_norm(A, B, C), hinf_norm(A, B, C)
    try:
        comp = [float(c) for c in compliance_eigenvalues(system, params, q_eq)]
    except ValueError:
        comp = None
    ev = np.linalg.eigvals(A)
    ev = ev[np.lexsort((ev.imag, ev.real))]
    fin = lambda v: None if not math.isfinite(v) else v
    reason = None
    if not (math.isfinite(h2) and math.isfinite(hinf)):
        top = float(np.max(ev.real)) if ev.size else 0.0
        reason = (f"not asymptotically stable: the largest eigenvalue real part is {top:.3g} "
                  f"(an undamped structure oscillates forever, so the norms are unbounded; "
                  f"add damping, e.g. --set damping=1)")
    return {
        "A_shape": list(lin["A"].shape),
        "B_u_shape": list(lin["B_u"].shape),
        "minimal_order": int(A.shape[0]),
        "eigenvalues": [[float(e.real), float(e.imag)] for e in ev],
        "h2_norm": fin(h2),
        "hinf_norm": fin(hinf),
        "equilibrium_shift": float(np.max(np.abs(np.asarray(q_eq) - np.asarray(q0)))),
        "inputs": inputs, "outputs": outputs,
        "compliance_eigenvalues": comp,
        "norms_infinite_because": reason,
    }
