"""Joint constraint rows of the Udwadia-Kalaba form (Shoer & Peck eqs. 15-22): position
residuals ``phi`` per joint kind and their acceleration rows ``A x_ddot = b`` (analytic for
spherical and revolute joints, autodiff of ``phi`` otherwise)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...math import spatial as sp
from .quaternion import T_matrix, dcm_NB

JOINT_KINDS = ("spherical", "revolute", "fixed", "prismatic")
JOINT_ROWS = {"spherical": 3, "revolute": 6, "fixed": 6, "prismatic": 5}
_I3 = np.eye(3)


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
