"""Levenberg-Marquardt for small nonlinear least-squares problems, and what the final
Jacobian says about the answer: standard errors, correlations, identifiability.

The fit's residual ``r(z)`` comes with its Jacobian ``J`` from forward-mode
differentiation through the simulation (one tangent per unknown). Damped Gauss-Newton
with Marquardt's diagonal scaling: ``(J^T J + lambda diag(J^T J)) dz = -J^T r``.

Statistics (Gaussian noise, the Gauss-Newton / Fisher approximation): with the rows
weighted by the declared noise, ``cov = (J^T J)^-1`` (noise only); scaled by the reduced
chi-square ``s^2 = RSS / (m - p)`` when the residual exceeds that noise; correlations
``rho_ij = cov_ij / sqrt(cov_ii cov_jj)``. The data cannot tell parameters apart when
``J^T J``, scaled to a unit diagonal, is ill-conditioned: its smallest eigenvector then
names the combination the data does not see.
"""

from __future__ import annotations

import math

import numpy as np


class IdentifiabilityWarning(UserWarning):
    """The data cannot tell some fitted parameters apart (see :func:`identifiability`)."""


#: Largest change of a log-space parameter per iteration (a factor of e).
MAX_LOG_STEP = 1.0
#: Condition number of the unit-diagonal Gauss-Newton matrix beyond which a fit warns.
ILL_CONDITIONED = 1e8
#: Correlation beyond which two parameters are reported as hard to tell apart.
HIGH_CORRELATION = 0.99


def levenberg_marquardt(residual, jacobian, z, r, J, *, lower, upper, log_mask, max_iterations, tol,
                        lam, active=None, on_step=None, stop=None):
    """Minimise ``|r(z)|^2`` from ``z`` (with ``r``, ``J`` there) inside the box
    ``[lower, upper]``; ``log_mask`` marks unknowns whose step is capped at
    :data:`MAX_LOG_STEP`. ``residual(z)``, ``jacobian(z) -> (r, J)``. Stops when the
    relative decrease of the cost or the step falls below ``tol``, or when no damped
    step decreases the cost (a minimum at this precision), or when ``stop()`` says so
    after an iteration (an interrupt: not converged). Returns
    ``(z, r, J, iterations, converged)``."""
    cost, converged, it = float(r @ r), False, 0
    log_mask = np.asarray(log_mask, float)
    act = np.ones(len(z), bool) if active is None else np.asarray(active, bool)
    if not act.any():
        return z, r, J, 0, False
    for it in range(1, max_iterations + 1):
        Ja = J[:, act]
        A, g = Ja.T @ Ja, Ja.T @ r
        D = np.diag(np.maximum(np.diag(A), 1e-12 * max(np.max(np.diag(A)), 1e-300)))
        accepted = False
        for _ in range(16):
            step = np.zeros(len(z))
            step[act] = -np.linalg.solve(A + lam * D, g)
            big = np.max(np.abs(step) * log_mask) if log_mask.any() else 0.0
            if big > MAX_LOG_STEP:  # a parameter the data barely sees must not run off to 0 or inf
                step = step * (MAX_LOG_STEP / big)
            z_try = np.clip(z + step, lower, upper)
            r_try = np.asarray(residual(z_try))
            c_try = float(r_try @ r_try) if np.all(np.isfinite(r_try)) else math.inf
            if c_try < cost:
                accepted = True
                break
            lam *= 4.0
        if not accepted:
            converged = True
            break
        rel = (cost - c_try) / max(cost, 1e-300)
        small = np.max(np.abs(z_try - z)) < tol * (1 + np.max(np.abs(z)))
        z, cost, lam = z_try, c_try, max(lam / 4.0, 1e-9)
        if on_step is not None:
            on_step(z, cost)
        r, J = map(np.asarray, jacobian(z))
        if rel < tol or small:
            converged = True
            break
        if stop is not None and stop():
            break
    return z, r, J, it, converged


#: Ridge (relative to a unit diagonal) of the inverted Gauss-Newton matrix: below it the
#: matrix is singular, and the inverse then shows the unseen direction (huge standard
#: errors, correlation -1 for two parameters with equal effects) instead of hiding it
#: as a pseudo-inverse would.
RIDGE = 1e-15


def _inverse(A):
    d = np.sqrt(np.maximum(np.diag(A), 1e-300))
    An = A / np.outer(d, d)
    return np.linalg.inv(An + RIDGE * np.eye(len(d))) / np.outer(d, d)


def noise_covariance(J):
    """``(J^T J)^-1`` (see :data:`RIDGE`): the covariance when the residual rows are
    weighted by the true noise (``J`` is then the Jacobian in noise units)."""
    return _inverse(J.T @ J)


def covariance(r, J):
    """``s^2 (J^T J)^-1`` with ``s^2 = |r|^2 / (m - p)`` (see :data:`RIDGE`): the
    noise-only covariance scaled by the reduced chi-square of the residual."""
    dof = max(1, r.size - J.shape[1])
    return float(r @ r) / dof * noise_covariance(J)


def identifiability(J, names) -> dict:
    """Correlations, the condition number of the unit-diagonal ``J^T J`` and warnings
    naming parameters the data cannot tell apart (module docstring)."""
    A = J.T @ J
    d = np.sqrt(np.maximum(np.diag(A), 1e-300))
    An = A / np.outer(d, d)
    w, V = np.linalg.eigh(An)
    cond = float(w[-1] / max(w[0], 1e-300 * w[-1])) if w[-1] > 0 else math.inf
    C = _inverse(A)
    s = np.sqrt(np.maximum(np.diag(C), 1e-300))
    corr = C / np.outer(s, s)
    warnings = []
    names = list(names)
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            if abs(corr[i, j]) > HIGH_CORRELATION:
                warnings.append(f"parameters {names[i]} and {names[j]} are correlated {corr[i, j]:+.4f}: "
                                f"this data barely tells them apart")
    if cond > ILL_CONDITIONED:
        v = V[:, 0]
        lead = [k for k in np.argsort(-np.abs(v)) if abs(v[k]) > 0.2][:4]
        combo = " ".join(f"{v[k]:+.2f}*{names[k]}" for k in lead)
        warnings.append(f"the Gauss-Newton matrix is ill-conditioned (condition {cond:.2e} > "
                        f"{ILL_CONDITIONED:.0e}): the data does not determine {combo}")
    return {"correlation": corr, "condition": cond, "warnings": warnings}
