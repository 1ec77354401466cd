"""Spatial algebra and attitude parameterisations (diffmb.math.spatial)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.math import spatial as sp
from helpers import random_rotation, random_unit

RNG_SEEDS = range(6)


def _rand_quat(rng):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return q * np.sign(q[3])


def _quat_from_axis_angle(e, phi):
    return np.concatenate([e * np.sin(phi / 2), [np.cos(phi / 2)]])


def _skew_np(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])


# ------------------------------------------------------------------------ 3-D basics


def test_skew_and_cross_match_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=3), rng.normal(size=3)
    np.testing.assert_allclose(sp.skew(jnp.asarray(a)), _skew_np(a), atol=0)
    np.testing.assert_allclose(sp.cross(jnp.asarray(a), jnp.asarray(b)), np.cross(a, b), atol=1e-15)
    A, B = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    np.testing.assert_allclose(sp.mm(jnp.asarray(A), jnp.asarray(B)), A @ B, atol=1e-14)
    np.testing.assert_allclose(sp.mv(jnp.asarray(A), jnp.asarray(a)), A @ a, atol=1e-14)
    np.testing.assert_allclose(sp.mtv(jnp.asarray(A), jnp.asarray(a)), A.T @ a, atol=1e-14)


def test_safe_norm_value_and_gradient():
    v = jnp.array([3.0, 4.0, 12.0])
    assert float(sp.safe_norm(v)) == pytest.approx(13.0)
    np.testing.assert_allclose(jax.grad(sp.safe_norm)(v), np.array([3.0, 4.0, 12.0]) / 13.0)
    g0 = jax.grad(sp.safe_norm)(jnp.zeros(3))
    assert np.all(np.isfinite(g0))
    np.testing.assert_array_equal(g0, np.zeros(3))
    # also through jacfwd and a second derivative
    assert np.all(np.isfinite(jax.jit(jax.jacfwd(sp.safe_norm))(jnp.zeros(3))))
    assert np.all(np.isfinite(jax.jit(jax.hessian(sp.safe_norm))(jnp.zeros(3))))


# ------------------------------------------------------------------------ rotations


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_axis_angle_quat_mrp_dcm_agree(seed):
    rng = np.random.default_rng(seed)
    e = random_unit(rng)
    phi = rng.uniform(-np.pi, np.pi)
    C = np.asarray(sp.axis_angle_dcm(jnp.asarray(e), jnp.asarray(phi)))
    # orthonormal, proper, and e is its eigenvector with eigenvalue 1
    np.testing.assert_allclose(C @ C.T, np.eye(3), atol=1e-14)
    assert np.linalg.det(C) == pytest.approx(1.0)
    np.testing.assert_allclose(C @ e, e, atol=1e-14)
    # Schaub & Junkins: [BN] = cos I - sin [e~] + (1 - cos) e e^T, i.e. the transpose of the
    # active rotation matrix (Rodrigues): C^T v rotates v by +phi about e.
    v = rng.normal(size=3)
    rot_v = v * np.cos(phi) + np.cross(e, v) * np.sin(phi) + e * (e @ v) * (1 - np.cos(phi))
    np.testing.assert_allclose(C.T @ v, rot_v, atol=1e-14)
    q = _quat_from_axis_angle(e, phi)
    np.testing.assert_allclose(sp.quat_to_dcm(jnp.asarray(q)), C, atol=1e-14)
    sigma = e * np.tan(phi / 4)
    np.testing.assert_allclose(sp.mrp_to_dcm(jnp.asarray(sigma)), C, atol=1e-14)
    np.testing.assert_allclose(sp.quat_to_mrp(jnp.asarray(q)), sigma, atol=1e-14)
    np.testing.assert_allclose(sp.mrp_to_quat(jnp.asarray(sigma)), q, atol=1e-14)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_rotation_round_trips(seed):
    rng = np.random.default_rng(seed)
    q = _rand_quat(rng)
    C = sp.quat_to_dcm(jnp.asarray(q))
    np.testing.assert_allclose(sp.dcm_to_quat(C), q, atol=1e-13)
    sigma = sp.quat_to_mrp(jnp.asarray(q))
    assert float(jnp.linalg.norm(sigma)) <= 1.0 + 1e-15
    np.testing.assert_allclose(sp.mrp_to_dcm(sigma), C, atol=1e-13)
    np.testing.assert_allclose(sp.dcm_to_mrp(C), sigma, atol=1e-13)
    np.testing.assert_allclose(sp.mrp_to_quat(sigma), q, atol=1e-13)
    # -q is the same attitude: conversions to MRP pick the short branch
    np.testing.assert_allclose(sp.quat_to_mrp(jnp.asarray(-q)), sigma, atol=1e-14)
    # a random DCM (not built by diffmb) round-trips through both parameterisations
    R = random_rotation(rng)
    np.testing.assert_allclose(sp.quat_to_dcm(sp.dcm_to_quat(jnp.asarray(R))), R, atol=1e-13)
    np.testing.assert_allclose(sp.mrp_to_dcm(sp.dcm_to_mrp(jnp.asarray(R))), R, atol=1e-13)


@pytest.mark.parametrize("axis_idx", [0, 1, 2, None])
@pytest.mark.parametrize("dphi", [0.0, 1e-9, 1e-5])
def test_rotation_round_trips_near_180(axis_idx, dphi):
    rng = np.random.default_rng(7)
    e = np.eye(3)[axis_idx] if axis_idx is not None else random_unit(rng)
    phi = np.pi - dphi
    C = np.asarray(sp.axis_angle_dcm(jnp.asarray(e), jnp.asarray(phi)))
    q = np.asarray(sp.dcm_to_quat(jnp.asarray(C)))
    assert q[3] >= 0
    assert np.linalg.norm(q) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(sp.quat_to_dcm(jnp.asarray(q)), C, atol=1e-12)
    qref = _quat_from_axis_angle(e, phi)
    # at exactly 180 deg q and -q both have q4 = 0; compare up to sign
    s = np.sign(q @ qref)
    np.testing.assert_allclose(q, s * qref, atol=1e-8)
    sigma = np.asarray(sp.dcm_to_mrp(jnp.asarray(C)))
    assert np.linalg.norm(sigma) <= 1.0 + 1e-12
    np.testing.assert_allclose(sp.mrp_to_dcm(jnp.asarray(sigma)), C, atol=1e-12)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_mrp_shadow_set_same_dcm(seed):
    rng = np.random.default_rng(seed)
    e = random_unit(rng)
    phi = rng.uniform(0.1, np.pi)
    sigma = jnp.asarray(e * np.tan(phi / 4))  # |sigma| < 1
    shadow = sp.mrp_shadow(sigma)
    # shadow = e tan((phi - 2 pi) / 4): the long way round
    np.testing.assert_allclose(shadow, e * np.tan((phi - 2 * np.pi) / 4), rtol=1e-12)
    assert float(jnp.linalg.norm(shadow)) >= 1.0
    np.testing.assert_allclose(sp.mrp_to_dcm(shadow), sp.mrp_to_dcm(sigma), atol=1e-13)
    np.testing.assert_allclose(sp.mrp_shadow(shadow), sigma, rtol=1e-13)
    # switching keeps |sigma| <= 1 and the attitude
    np.testing.assert_allclose(sp.mrp_switch(shadow), sigma, rtol=1e-13)
    np.testing.assert_allclose(sp.mrp_switch(sigma), sigma, rtol=0)
    # the MRP short branch of the shadow's quaternion is sigma again
    np.testing.assert_allclose(sp.quat_to_mrp(sp.mrp_to_quat(shadow)), sigma, atol=1e-13)
    # shadow of zero is finite (guarded division)
    assert np.all(np.isfinite(sp.mrp_shadow(jnp.zeros(3))))


def test_quat_multiply_composes_dcms():
    rng = np.random.default_rng(3)
    for _ in range(5):
        p, q = _rand_quat(rng), _rand_quat(rng)
        pq = sp.quat_multiply(jnp.asarray(p), jnp.asarray(q))
        np.testing.assert_allclose(
            sp.quat_to_dcm(pq), sp.quat_to_dcm(jnp.asarray(p)) @ sp.quat_to_dcm(jnp.asarray(q)),
            atol=1e-13,
        )
        assert float(jnp.linalg.norm(pq)) == pytest.approx(1.0)


def test_rpy_dcm_is_transpose_of_urdf_rotation():
    rng = np.random.default_rng(4)
    r, p, y = rng.uniform(-np.pi, np.pi, 3)

    def Rx(a):
        return np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])

    def Ry(a):
        return np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])

    def Rz(a):
        return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])

    R = Rz(y) @ Ry(p) @ Rx(r)
    np.testing.assert_allclose(sp.rpy_dcm(jnp.array([r, p, y])), R.T, atol=1e-14)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_mrp_kinematics_matches_dcm_kinematics(seed):
    """sigma_dot = B(sigma) omega (F&S eq. 3) reproduces d/dt [BN] = -[omega~] [BN]."""
    rng = np.random.default_rng(seed)
    e = random_unit(rng)
    sigma = e * np.tan(rng.uniform(0.05, np.pi) / 4)
    if seed % 2:
        sigma = np.asarray(sp.mrp_shadow(jnp.asarray(sigma)))  # also valid on the long branch
    omega = rng.normal(size=3)
    sdot = np.asarray(sp.mrp_B(jnp.asarray(sigma))) @ omega
    h = 1e-6
    Cp = np.asarray(sp.mrp_to_dcm(jnp.asarray(sigma + h * sdot)))
    Cm = np.asarray(sp.mrp_to_dcm(jnp.asarray(sigma - h * sdot)))
    Cdot_fd = (Cp - Cm) / (2 * h)
    C = np.asarray(sp.mrp_to_dcm(jnp.asarray(sigma)))
    np.testing.assert_allclose(Cdot_fd, -_skew_np(omega) @ C, atol=1e-8)
    # same check with forward-mode AD (exact up to round-off)
    _, Cdot = jax.jvp(sp.mrp_to_dcm, (jnp.asarray(sigma),), (jnp.asarray(sdot),))
    np.testing.assert_allclose(Cdot, -_skew_np(omega) @ C, atol=1e-12)


def test_mrp_B_closed_form_and_inverse():
    """B of F&S eq. (3) and its known inverse B^-1 = 16/(1+s^2)^2 B^T."""
    sigma = np.array([0.3, -0.2, 0.5])
    s2 = sigma @ sigma
    Bref = 0.25 * ((1 - s2) * np.eye(3) + 2 * _skew_np(sigma) + 2 * np.outer(sigma, sigma))
    B = np.asarray(sp.mrp_B(jnp.asarray(sigma)))
    np.testing.assert_allclose(B, Bref, atol=1e-15)
    np.testing.assert_allclose(B @ (16 / (1 + s2) ** 2 * B.T), np.eye(3), atol=1e-14)


# ------------------------------------------------------------------------ 6-D algebra


def _rand_xform(rng):
    return jnp.asarray(random_rotation(rng)), jnp.asarray(rng.normal(size=3))


def _rand_inertia6(rng):
    from helpers import random_inertia

    return sp.spatial_inertia(
        jnp.asarray(rng.uniform(0.5, 2.0)), jnp.asarray(rng.normal(size=3)),
        jnp.asarray(random_inertia(rng)),
    )


@pytest.mark.parametrize("seed", range(4))
def test_plucker_transform_identities(seed):
    rng = np.random.default_rng(seed)
    E, r = _rand_xform(rng)
    X = np.asarray(sp.xform_matrix(E, r))
    Ez, rz = np.asarray(E), np.asarray(r)
    # Featherstone: X = [[E, 0], [-E r~, E]]
    np.testing.assert_allclose(X[:3, :3], Ez, atol=0)
    np.testing.assert_allclose(X[:3, 3:], 0, atol=0)
    np.testing.assert_allclose(X[3:, :3], -Ez @ _skew_np(rz), atol=1e-14)
    m = jnp.asarray(rng.normal(size=6))
    f = jnp.asarray(rng.normal(size=6))
    np.testing.assert_allclose(sp.xform_motion(E, r, m), X @ np.asarray(m), atol=1e-13)
    np.testing.assert_allclose(sp.xform_force_T(E, r, f), X.T @ np.asarray(f), atol=1e-13)
    np.testing.assert_allclose(
        sp.xform_motion_inv(E, r, m), np.linalg.solve(X, np.asarray(m)), atol=1e-12
    )
    np.testing.assert_allclose(sp.xform_motion_inv(E, r, sp.xform_motion(E, r, m)), m, atol=1e-13)
    # physics of the transform: a pure force F applied at B's origin has moment r x F about A's
    F_B = rng.normal(size=3)
    fa = np.asarray(sp.xform_force_T(E, r, jnp.concatenate([jnp.zeros(3), jnp.asarray(F_B)])))
    F_A = Ez.T @ F_B
    np.testing.assert_allclose(fa[3:], F_A, atol=1e-14)
    np.testing.assert_allclose(fa[:3], np.cross(rz, F_A), atol=1e-14)
    # power is invariant: (X^T f) . m_A == f . (X m_A)
    assert float(jnp.dot(sp.xform_force_T(E, r, f), m)) == pytest.approx(
        float(jnp.dot(f, sp.xform_motion(E, r, m))), rel=1e-12
    )
    # composition
    E2, r2 = _rand_xform(rng)
    Ec, rc = sp.xform_compose(E2, r2, E, r)
    np.testing.assert_allclose(
        sp.xform_matrix(Ec, rc), np.asarray(sp.xform_matrix(E2, r2)) @ X, atol=1e-13
    )


@pytest.mark.parametrize("seed", range(4))
def test_inertia_to_parent_is_XT_I_X(seed):
    rng = np.random.default_rng(seed)
    E, r = _rand_xform(rng)
    I = _rand_inertia6(rng)
    X = np.asarray(sp.xform_matrix(E, r))
    np.testing.assert_allclose(sp.inertia_to_parent(E, r, I), X.T @ np.asarray(I) @ X, atol=1e-12)
    # a general symmetric (non-rigid-body) 6x6 as well
    A = rng.normal(size=(6, 6))
    A = jnp.asarray(A + A.T)
    np.testing.assert_allclose(sp.inertia_to_parent(E, r, A), X.T @ np.asarray(A) @ X, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_cross_products(seed):
    rng = np.random.default_rng(seed)
    v, m, f = (jnp.asarray(rng.normal(size=6)) for _ in range(3))
    np.testing.assert_allclose(sp.cross_motion(v, m), np.asarray(sp.crm(v)) @ np.asarray(m), atol=1e-14)
    np.testing.assert_allclose(sp.cross_force(v, f), np.asarray(sp.crf(v)) @ np.asarray(f), atol=1e-14)
    np.testing.assert_allclose(sp.crf(v), -np.asarray(sp.crm(v)).T, atol=0)
    # Featherstone's crm(v) = [[w~, 0], [u~, w~]]
    w, u = np.asarray(v[:3]), np.asarray(v[3:])
    ref = np.block([[_skew_np(w), np.zeros((3, 3))], [_skew_np(u), _skew_np(w)]])
    np.testing.assert_allclose(sp.crm(v), ref, atol=0)
    # v x v = 0; and the duality (v x m) . f = -m . (v x* f)
    np.testing.assert_allclose(sp.cross_motion(v, v), 0, atol=1e-14)
    assert float(jnp.dot(sp.cross_motion(v, m), f)) == pytest.approx(
        -float(jnp.dot(m, sp.cross_force(v, f))), rel=1e-12
    )
    # transforms commute with the cross product: X (v x m) = (X v) x (X m)
    E, r = _rand_xform(rng)
    np.testing.assert_allclose(
        sp.xform_motion(E, r, sp.cross_motion(v, m)),
        sp.cross_motion(sp.xform_motion(E, r, v), sp.xform_motion(E, r, m)),
        atol=1e-12,
    )


@pytest.mark.parametrize("seed", range(4))
def test_spatial_inertia_formula_and_physics(seed):
    rng = np.random.default_rng(seed)
    from helpers import random_inertia

    mass = rng.uniform(0.5, 2.0)
    c = rng.normal(size=3)
    Ic = random_inertia(rng)
    I = np.asarray(sp.spatial_inertia(jnp.asarray(mass), jnp.asarray(c), jnp.asarray(Ic)))
    C = _skew_np(c)
    ref = np.block([[Ic + mass * C @ C.T, mass * C], [mass * C.T, mass * np.eye(3)]])
    np.testing.assert_allclose(I, ref, atol=1e-14)
    np.testing.assert_allclose(I, I.T, atol=0)
    assert np.linalg.eigvalsh(I).min() > 0
    # physics: momentum about the origin and kinetic energy of the rigid body
    w, v0 = rng.normal(size=3), rng.normal(size=3)
    vc = v0 + np.cross(w, c)  # velocity of the com
    h = I @ np.concatenate([w, v0])
    np.testing.assert_allclose(h[3:], mass * vc, atol=1e-13)
    np.testing.assert_allclose(h[:3], Ic @ w + np.cross(c, mass * vc), atol=1e-13)
    T = 0.5 * np.concatenate([w, v0]) @ h
    assert T == pytest.approx(0.5 * mass * vc @ vc + 0.5 * w @ Ic @ w, rel=1e-13)
    # a cloud of point masses: sum of point spatial inertias == formula with its com / Ic
    pts, ms = rng.normal(size=(5, 3)), rng.uniform(0.1, 1.0, 5)
    Icloud = sum(
        np.asarray(sp.spatial_inertia(jnp.asarray(mk), jnp.asarray(pk), jnp.zeros((3, 3))))
        for mk, pk in zip(ms, pts)
    )
    M = ms.sum()
    com = (ms[:, None] * pts).sum(0) / M
    d = pts - com
    Icom = sum(mk * (dk @ dk * np.eye(3) - np.outer(dk, dk)) for mk, dk in zip(ms, d))
    np.testing.assert_allclose(
        Icloud, sp.spatial_inertia(jnp.asarray(M), jnp.asarray(com), jnp.asarray(Icom)), atol=1e-12
    )


# ------------------------------------------------------- batching (leading axes)


def _batched_calls():
    rng = np.random.default_rng(11)
    n = 4
    E = jnp.asarray(np.stack([random_rotation(rng) for _ in range(n)]))
    r = jnp.asarray(rng.normal(size=(n, 3)) * 0.3)
    v = jnp.asarray(rng.normal(size=(n, 6)))
    qs = jnp.asarray(np.stack([_rand_quat(rng) for _ in range(n)]))
    axes = jnp.asarray(np.stack([random_unit(rng) for _ in range(n)]))
    from helpers import random_inertia

    Ics = jnp.asarray(np.stack([random_inertia(rng) for _ in range(n)]))
    I6 = jax.jit(jax.vmap(sp.spatial_inertia, in_axes=(None, 0, 0)))(jnp.asarray(1.0), r, Ics)
    return {
        "axis_angle_dcm": (axes, jnp.asarray(rng.normal(size=n))),
        "rpy_dcm": (jnp.asarray(rng.normal(size=(n, 3))),),
        "mrp_to_dcm": (r,),
        "mrp_B": (r,),
        "mrp_shadow": (r,),
        "mrp_switch": (r * 5.0,),
        "quat_to_dcm": (qs,),
        "dcm_to_quat": (E,),
        "quat_to_mrp": (qs,),
        "mrp_to_quat": (r,),
        "dcm_to_mrp": (E,),
        "quat_multiply": (qs, qs[::-1]),
        "xform_motion": (E, r, v),
        "xform_motion_inv": (E, r, v),
        "xform_force_T": (E, r, v),
        "xform_matrix": (E, r),
        "inertia_to_parent": (E, r, I6),
        "cross_motion": (v, v[::-1]),
        "cross_force": (v, v[::-1]),
        "crm": (v,),
        "spatial_inertia": (jnp.asarray(rng.uniform(0.5, 2, n)), r, Ics),
        "safe_norm": (r,),
    }


_BATCHED = _batched_calls()


@pytest.mark.parametrize("name", sorted(_BATCHED))
def test_leading_batch_axis_matches_vmap(name):
    """Spatial functions accept leading batch axes (``...``) and agree with vmap.

    Run under ``jax_numpy_rank_promotion="raise"`` (the test configuration, conftest.py):
    implicit rank broadcasting inside diffmb is a bug there.
    """
    fn = getattr(sp, name)
    args = _BATCHED[name]
    ref = jax.jit(jax.vmap(fn))(*args)
    with jax.numpy_rank_promotion("raise"):   # traced (and so checked) under the setting
        out = jax.jit(fn)(*args)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-13), out, ref)
