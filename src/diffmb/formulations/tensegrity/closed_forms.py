"""The paper's closed forms (mass matrix, gravity, string forces, constraints, stiffness),
independent of the autodiff path: the test oracle of :mod:`.system`. Each takes the
:class:`~.structure.Structure` ``s``."""

from __future__ import annotations

import numpy as np


def _connectivity(members, n):
    C = np.zeros((len(members), n))
    for k, (i, j) in enumerate(members):
        C[k, i], C[k, j] = -1.0, 1.0
    return C


def _X(members, n, k, bar=False):
    """``X_k`` (eq. 2) / ``Y_k`` (eq. 4): ``(theta_k^T C) kron I_3``; ``bar=True``: ``X-bar_k`` (eq. 3)."""
    C = _connectivity(members, n)
    row = np.abs(C[k]) * 0.5 if bar else C[k]
    return np.kron(row[None, :], np.eye(3))


def closed_form_mass(s) -> np.ndarray:
    """``M = sum_k (m_k Xbar_k^T Xbar_k + I_k/l_k^2 X_k^T X_k) + sum m_p P_k^T P_k`` (eq. 10)."""
    n = s.n_nodes
    M = np.zeros((3 * n, 3 * n))
    for k in range(len(s.bars)):
        m, r, l = s.bar_mass[k], s.bar_radius[k], s.bar_length[k]
        I = m * (3 * r**2 + l**2) / 12
        Xb, X = _X(s.bars, n, k, bar=True), _X(s.bars, n, k)
        M += m * Xb.T @ Xb + I / l**2 * X.T @ X
    for i in range(n):
        if s.point_mass[i]:
            P = np.kron(np.eye(n)[i][None, :], np.eye(3))
            M += s.point_mass[i] * P.T @ P
    return M


def closed_form_gravity(s) -> np.ndarray:
    """``G^T = g^T (sum m_k Xbar_k + sum m_p P_k)`` (eq. 11)."""
    n = s.n_nodes
    G = np.zeros(3 * n)
    for k in range(len(s.bars)):
        G += s.bar_mass[k] * _X(s.bars, n, k, bar=True).T @ s.gravity
    for i in range(n):
        G[3 * i:3 * i + 3] += s.point_mass[i] * s.gravity
    return G


def closed_form_string_force(s, q) -> np.ndarray:
    """``dV_s/dq^T = (sigma^T kron I) Y^T q = sum_k sigma_k Y_k^T Y_k q`` (eq. 18), sigma of eq. 13
    (zero for slack strings)."""
    q = np.asarray(q, float)
    n = s.n_nodes
    out = np.zeros(3 * n)
    for k in range(len(s.strings)):
        Y = _X(s.strings, n, k)
        L = np.linalg.norm(Y @ q)
        sig = s.string_K[k] * (1 - s.string_rest[k] / L) if L > s.string_rest[k] else 0.0
        out += sig * Y.T @ Y @ q
    return out


def closed_form_constraints(s, q, qd):
    """``(R_q, xi_2)``: eq. 25 and ``[0; 2 qd^T X_k^T X_k qd]`` (rigid bars)."""
    q, qd = np.asarray(q, float), np.asarray(qd, float)
    n = s.n_nodes
    rows, xi2 = [s.A_lin], [np.zeros(s.A_lin.shape[0])]
    for k in range(len(s.bars)):
        X = _X(s.bars, n, k)
        rows.append((2 * q @ X.T @ X)[None, :])
        xi2.append(np.array([2 * qd @ X.T @ X @ qd]))
    return np.concatenate(rows, axis=0), np.concatenate(xi2)


def closed_form_stiffness(s, q, compressible=True) -> np.ndarray:
    """``K_sys`` of section 3.2: ``sum_k sigma_k Y_k^T Y_k + K_k l_0k / |s_k|^3 (Y_k^T Y_k q)
    (Y_k^T Y_k q)^T`` over taut strings, plus the same with ``Psi_j = K_bj (1 - l_0j / l_j)``,
    ``K_bj = E A / l_0j``, over compressible bars (full coordinates)."""
    q = np.asarray(q, float)
    n = s.n_nodes
    K = np.zeros((3 * n, 3 * n))
    terms = [(s.strings, s.string_K, s.string_rest, True)]
    if compressible:
        terms.append((s.bars, s.bar_E * np.pi * s.bar_radius**2 / s.bar_length, s.bar_length, False))
    for members, stiff, rest, tension_only in terms:
        for k in range(len(members)):
            X = _X(members, n, k)
            XX = X.T @ X
            L = np.linalg.norm(X @ q)
            if tension_only and L <= rest[k]:
                continue
            v = XX @ q
            K += stiff[k] * (1 - rest[k] / L) * XX + stiff[k] * rest[k] / L**3 * np.outer(v, v)
    return K
