"""Physics of the tree algorithms (diffmb.tree): ABA, RNEA, CRBA, energy, momentum.

Every check compares two independent routes to the same physics: closed forms, Euler's
equations, Lagrange's equations built from ``kinetic_energy``/``potential_energy`` by
autodiff, conservation laws, finite differences.

Cost note (2 shared CPU cores): XLA compile of the unrolled tree algorithms takes seconds
per function and structure (tens of seconds for ``jit(jacfwd(forward_dynamics))``), while
op-by-op (eager) execution of one call takes ~0.1-1.5 s and its per-primitive compile
cache is shared by every test. One-shot checks therefore run eagerly; ``jax.jit`` is
used where compilation is the subject (tracing count) or where one compiled function
is reused many times (finite differences).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from helpers import make_random_model, make_random_model_params, random_inertia, random_state

# ------------------------------------------------------------------ jitted kernels

FD = diffmb.forward_dynamics
ID = diffmb.inverse_dynamics
MM = diffmb.mass_matrix
BIAS = diffmb.bias_forces
FD_JIT = jax.jit(diffmb.forward_dynamics)  # for finite differences (many calls)


def _consistency(model, q, qd, tau):
    qdd = diffmb.forward_dynamics(model, q, qd, tau)
    M = diffmb.mass_matrix(model, q)
    C = diffmb.bias_forces(model, q, qd)
    tau_id = diffmb.inverse_dynamics(model, q, qd, qdd)
    T = diffmb.kinetic_energy(model, q, qd)
    # M from the kinetic energy alone (no CRBA): T is quadratic in qd, so by polarization
    # M_ij = T(e_i + e_j) - T(e_i) - T(e_j)
    n = model.nv
    eye = jnp.eye(n)
    pairs = (eye[:, None, :] + eye[None, :, :]).reshape(n * n, n)
    T_batch = jax.vmap(lambda v: diffmb.kinetic_energy(model, q, v))
    T_pairs = T_batch(pairs).reshape(n, n)
    T_diag = jnp.diagonal(T_pairs) / 4.0  # T(2 e_i) = 4 T(e_i)
    M_T = T_pairs - T_diag[:, None] - T_diag[None, :]
    return dict(qdd=qdd, M=M, C=C, tau_id=tau_id, T=T, M_T=M_T)


# The helpers below are jitted (one program per model structure): evaluated operation by
# operation, the power balance alone compiled ~400 single-operation programs (19 s).
@eqx.filter_jit
def _power(model, q, qd, tau):
    """dE/dt along the motion driven by ``tau + joint_forces`` (springs, dampers)."""
    qdd = diffmb.forward_dynamics(model, q, qd, tau + diffmb.joint_forces(model, q, qd))
    qdot = diffmb.coordinate_rates(model, q, qd)
    _, dE = jax.jvp(lambda q_, qd_: diffmb.energy(model, q_, qd_), (q, qd), (qdot, qdd))
    return dE, jnp.dot(qd, tau), jnp.dot(qd, model.damping * qd)


@eqx.filter_jit
def _momentum_rate(model, q, qd, tau):
    qdd = diffmb.forward_dynamics(model, q, qd, tau + diffmb.joint_forces(model, q, qd))
    qdot = diffmb.coordinate_rates(model, q, qd)
    (P, H), (dP, dH) = jax.jvp(lambda a, b: diffmb.momentum(model, a, b), (q, qd), (qdot, qdd))
    _, vcom = jax.jvp(lambda a: diffmb.center_of_mass(model, a), (q,), (qdot,))
    return P, H, dP, dH, vcom


@eqx.filter_jit
def _lagrange_residual(model, q, qd, tau):
    """Lagrange's equations in the coordinates q, from T and V alone.

    With ``qd = G(q) qdot`` (G inverts ``coordinate_rates``), ``T~(q, qdot) = T(q, G qdot)``
    and the generalized force on q is ``G^T Q`` (power ``qd.Q = qdot.G^T Q``). Returns
    ``d/dt dT~/dqdot - dT~/dq + dV/dq - G^T (tau - D qd)`` with ``qdd`` from the ABA.
    """
    qdd = diffmb.forward_dynamics(model, q, qd, tau + diffmb.joint_forces(model, q, qd))
    zeros = jnp.zeros_like(qd)

    def G(q_):
        R = jax.jacfwd(lambda v: diffmb.coordinate_rates(model, q_, v))(zeros)
        return jnp.linalg.inv(R)

    def Tt(q_, qdot_):
        return diffmb.kinetic_energy(model, q_, jnp.dot(G(q_), qdot_))

    def V(q_):
        return diffmb.potential_energy(model, q_)

    rates = lambda a, b: diffmb.coordinate_rates(model, a, b)
    qdot = rates(q, qd)
    _, qddot = jax.jvp(rates, (q, qd), (qdot, qdd))
    p = lambda a, b: jax.grad(Tt, argnums=1)(a, b)
    _, pdot = jax.jvp(p, (q, qdot), (qdot, qddot))
    lhs = pdot - jax.grad(Tt, argnums=0)(q, qdot) + jax.grad(V)(q)
    rhs = jnp.dot(G(q).T, tau - model.damping * qd)
    return lhs - rhs, qdd


@eqx.filter_jit
def _pose_rates(model, q, qd):
    """Pose derivatives along qdot = coordinate_rates, and the reported body velocities."""
    qdot = diffmb.coordinate_rates(model, q, qd)
    (dcm, pos), (ddcm, dpos) = jax.jvp(lambda a: diffmb.forward_kinematics(model, a), (q,), (qdot,))
    _, _, vel = diffmb.forward_kinematics(model, q, qd)
    return dcm, pos, ddcm, dpos, vel


@eqx.filter_jit
def _body_jacobians(model, q):
    """J (N, 6, nv): body spatial velocity (body coords) = J qd."""
    return jax.jacfwd(lambda v: diffmb.forward_kinematics(model, q, v)[2])(jnp.zeros(model.nv))


# ----------------------------------------------------------------------- models

# Three structures: free-floating tree, fixed-base forest, small all-1/2-DOF chain.
# Every random tree mixes revolute, prismatic, universal and spherical joints, has
# branches and a merged fixed link with a moving child.
STRUCTS = {
    "free": dict(seed=0, n_bodies=5, base="free"),
    "fixed": dict(seed=1, n_bodies=5, base="fixed"),
    "free_b": dict(seed=5, n_bodies=4, base="free"),
}


def _model(name, param_seed=None, **over):
    kw = dict(STRUCTS[name])
    seed = kw.pop("seed")
    kw.update(over)
    if param_seed is None:
        return make_random_model(seed, **kw)
    return make_random_model_params(seed, param_seed, **kw)


def _with(model, **fields):
    names = tuple(fields)
    return eqx.tree_at(
        lambda m: tuple(getattr(m, n) for n in names), model,
        tuple(jnp.asarray(fields[n], dtype=jnp.float64) for n in names),
    )


def _rand_tau(model, seed):
    return np.random.default_rng(seed + 77).uniform(-2.0, 2.0, model.nv)


def test_random_models_cover_all_joint_kinds():
    kinds = set()
    for name in STRUCTS:
        m = _model(name)
        kinds |= set(m.joint_kinds)
        assert len(set(m.parents)) < m.n_bodies  # some body has two children: a branch
    assert kinds == {"free", "revolute", "prismatic", "universal", "spherical"}
    assert _model("fixed").joint_kinds[0] != "free"
    assert _model("free").frame_names  # merged fixed links present


# ------------------------------------------------------------- analytic systems


def _pendulum(m=1.3, l=0.7, rod_I=(0.02, 0.05, 0.04), g=9.81):
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -g))
    b.add_body("rod", "world", "revolute", axis=(0, 1, 0), mass=m, com=(0, 0, -l),
               inertia=np.diag(rod_I))
    return b.build()


@pytest.mark.parametrize("theta", [0.0, 0.3, -1.1, np.pi / 2, 2.5, np.pi])
def test_simple_pendulum(theta):
    m, l, g = 1.3, 0.7, 9.81
    Iyy = 0.05
    model = _pendulum(m, l, (0.02, Iyy, 0.03), g)
    I_pivot = Iyy + m * l**2
    for thd in (0.0, 2.0):  # a single pendulum's qdd does not depend on its rate
        qdd = FD(model, jnp.array([theta]), jnp.array([thd]), jnp.zeros(1))
        assert float(qdd[0]) == pytest.approx(-m * g * l * np.sin(theta) / I_pivot, abs=1e-12)
    # with a motor torque
    qdd = FD(model, jnp.array([theta]), jnp.zeros(1), jnp.array([0.4]))
    assert float(qdd[0]) == pytest.approx((0.4 - m * g * l * np.sin(theta)) / I_pivot, abs=1e-12)
    # energy: T = 1/2 I_pivot thd^2, V = -m g l cos(theta)
    assert float(diffmb.kinetic_energy(model, jnp.array([theta]), jnp.array([2.0]))) == pytest.approx(
        0.5 * I_pivot * 4.0, rel=1e-12
    )
    assert float(diffmb.potential_energy(model, jnp.array([theta]))) == pytest.approx(
        -m * g * l * np.cos(theta), abs=1e-12
    )


def test_prismatic_mass_falls_at_g():
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_body("slider", "world", "prismatic", axis=(0, 0, 1), rpy=(0.3, 0.0, 0.0), mass=2.0,
               com=(0.1, 0.2, 0.0), inertia=np.diag([0.1, 0.2, 0.25]))
    model = b.build()
    # joint frame tilted by roll 0.3: the axis is z of a frame rotated about x
    axis_world = np.asarray(model.tree_rot[0]).T @ np.array([0.0, 0.0, 1.0])
    qdd = FD(model, jnp.array([0.5]), jnp.array([1.0]), jnp.array([3.0]))
    assert float(qdd[0]) == pytest.approx(3.0 / 2.0 + axis_world @ np.array([0, 0, -9.81]), rel=1e-12)


def _double_pendulum(m1, m2, l1, lc1, lc2, I1full, I2full, g):
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -g))
    b.add_body("link1", "world", "revolute", axis=(0, 1, 0), mass=m1, com=(0, 0, -lc1), inertia=I1full)
    b.add_body("link2", "link1", "revolute", axis=(0, 1, 0), pos=(0, 0, -l1), mass=m2,
               com=(0, 0, -lc2), inertia=I2full)
    return b.build()


def test_double_pendulum_closed_form():
    """Planar double pendulum (angles from the downward vertical, theta2 relative).

    M11 = m1 lc1^2 + m2 (l1^2 + lc2^2 + 2 l1 lc2 cos t2) + I1 + I2
    M12 = m2 (lc2^2 + l1 lc2 cos t2) + I2,  M22 = m2 lc2^2 + I2
    C1 = -m2 l1 lc2 sin t2 (2 t1d t2d + t2d^2) + g (m1 lc1 + m2 l1) sin t1 + g m2 lc2 sin(t1 + t2)
    C2 =  m2 l1 lc2 sin t2 t1d^2 + g m2 lc2 sin(t1 + t2)
    with I1, I2 the links' moments about their com along the (common) joint axis.
    Full (non-diagonal) link inertias: the out-of-plane products do not enter.
    """
    rng = np.random.default_rng(21)
    m1, m2, l1, lc1, lc2, g = 1.2, 0.8, 0.9, 0.4, 0.35, 9.81
    I1full, I2full = random_inertia(rng), random_inertia(rng)
    I1, I2 = I1full[1, 1], I2full[1, 1]
    model = _double_pendulum(m1, m2, l1, lc1, lc2, I1full, I2full, g)
    for k in range(4):
        t1, t2, t1d, t2d = rng.uniform(-3, 3, 4)
        q, qd = jnp.array([t1, t2]), jnp.array([t1d, t2d])
        c2 = np.cos(t2)
        M_ref = np.array(
            [
                [m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * c2) + I1 + I2,
                 m2 * (lc2**2 + l1 * lc2 * c2) + I2],
                [m2 * (lc2**2 + l1 * lc2 * c2) + I2, m2 * lc2**2 + I2],
            ]
        )
        h = m2 * l1 * lc2 * np.sin(t2)
        C_ref = np.array(
            [
                -h * (2 * t1d * t2d + t2d**2)
                + g * (m1 * lc1 + m2 * l1) * np.sin(t1) + g * m2 * lc2 * np.sin(t1 + t2),
                h * t1d**2 + g * m2 * lc2 * np.sin(t1 + t2),
            ]
        )
        np.testing.assert_allclose(MM(model, q), M_ref, atol=1e-12)
        np.testing.assert_allclose(BIAS(model, q, qd), C_ref, atol=1e-12)
        tau = jnp.asarray(rng.normal(size=2))
        np.testing.assert_allclose(
            FD(model, q, qd, tau), np.linalg.solve(M_ref, np.asarray(tau) - C_ref), atol=1e-11
        )


@pytest.mark.parametrize("gravity", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_free_rigid_body_euler_equations(seed, gravity):
    """Free joint, off-axis com, full inertia: Newton-Euler about the com.

    qd = [omega; v] with v the body-origin velocity in body axes, so the com acceleration
    in body axes is vdot + omegadot x c + omega x (v + omega x c). Body wrench
    tau = [n; f] about the origin: com accel = f/m + [BN] g and
    Ic omegadot + omega x Ic omega = n - c x f.
    """
    rng = np.random.default_rng(seed + 40)
    g = np.array([0.3, -1.0, -9.81]) if gravity else np.zeros(3)
    m, c, Ic = 1.7, rng.uniform(-0.5, 0.5, 3), random_inertia(rng, scale=1.0)
    b = diffmb.ModelBuilder(gravity=tuple(g))
    b.add_body("sat", "world", "free", mass=m, com=c, inertia=Ic)
    model = b.build()
    sigma = rng.normal(size=3)
    sigma *= 0.6 / np.linalg.norm(sigma)
    q = jnp.asarray(np.concatenate([sigma, rng.normal(size=3)]))
    w, v = rng.normal(size=3), rng.normal(size=3)
    qd = jnp.asarray(np.concatenate([w, v]))
    BN = np.asarray(diffmb.math.spatial.mrp_to_dcm(jnp.asarray(sigma)))
    for tau in (np.zeros(6), rng.normal(size=6)):
        n, f = tau[:3], tau[3:]
        qdd = np.asarray(FD(model, q, qd, jnp.asarray(tau)))
        wd, vd = qdd[:3], qdd[3:]
        np.testing.assert_allclose(Ic @ wd + np.cross(w, Ic @ w), n - np.cross(c, f), atol=1e-11)
        a_com = vd + np.cross(wd, c) + np.cross(w, v + np.cross(w, c))
        np.testing.assert_allclose(a_com, f / m + BN @ g, atol=1e-11)


# ---------------------------------------------------------------- random trees


@pytest.mark.parametrize("state_seed", [0, 1])
# free_b, a second free-base structure (~3.5 s), in the slow job: "free" has every joint kind
@pytest.mark.parametrize("name", ["free", "fixed", pytest.param("free_b", marks=pytest.mark.slow)])
def test_random_tree_aba_rnea_crba_agree(name, state_seed):
    model = _model(name)
    q, qd = random_state(model, state_seed)
    tau = _rand_tau(model, state_seed)
    out = {k: np.asarray(v) for k, v in jax.jit(_consistency)(model, q, qd, tau).items()}
    M, C, qdd = out["M"], out["C"], out["qdd"]
    np.testing.assert_allclose(M @ qdd + C, tau, atol=1e-10)
    np.testing.assert_allclose(out["tau_id"], tau, atol=1e-10)
    np.testing.assert_allclose(M, M.T, atol=1e-12)
    assert np.linalg.eigvalsh(M).min() > 1e-6
    assert out["T"] == pytest.approx(0.5 * qd @ M @ qd, rel=1e-12)
    np.testing.assert_allclose(M, out["M_T"], atol=1e-10)


@pytest.mark.parametrize("name", [
    # the floating root's own programs here (~6 s) in the slow job; the default job checks it
    # against the RNEA and CRBA (test_random_tree_aba_rnea_crba_agree) and for momentum
    pytest.param("free", marks=pytest.mark.slow), "fixed"])
def test_random_tree_satisfies_lagrange_equations(name):
    """ABA vs Lagrange's equations derived by autodiff from T and V (springs, dampers,
    gravity, MRP joints all included)."""
    model = _model(name, springs=True, dampers=True)
    for s in (0,):
        q, qd = random_state(model, s + 10)
        tau = _rand_tau(model, s)
        res, qdd = jax.jit(_lagrange_residual)(model, q, qd, tau)
        scale = max(1.0, float(np.abs(qdd).max()))
        np.testing.assert_allclose(res, 0.0, atol=1e-9 * scale)


@pytest.mark.parametrize("name", ["free", "fixed"])
def test_body_velocities_match_pose_derivatives(name):
    """forward_kinematics velocities vs d/dt of poses along coordinate_rates:
    d/dt [BN] = -[omega~] [BN] and v = [BN] d/dt p."""
    model = _model(name)
    q, qd = random_state(model, 3)
    dcm, pos, ddcm, dpos, vel = (np.asarray(x) for x in _pose_rates(model, q, qd))
    for i in range(model.n_bodies):
        w, v = vel[i, :3], vel[i, 3:]
        W = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
        np.testing.assert_allclose(ddcm[i], -W @ dcm[i], atol=1e-12)
        np.testing.assert_allclose(dcm[i] @ dpos[i], v, atol=1e-12)


# ------------------------------------------------------------- power balance


@pytest.mark.parametrize("name", ["free", "fixed"])
@pytest.mark.parametrize("case", ["no_gravity", "gravity", "springs", "dampers"])
def test_power_balance(name, case):
    """dE/dt = qd . tau (E: kinetic + gravity + spring potential); dampers: -qd.D.qd."""
    springs = case in ("springs", "dampers")
    model = _model(name, springs=springs, dampers=case == "dampers")
    if case == "no_gravity":
        model = _with(model, gravity=np.zeros(3))
    else:
        model = _with(model, gravity=np.array([0.4, -0.3, -9.81]))
    if springs:
        assert float(jnp.abs(model.stiffness).max()) > 0
    for s in (0, 1):
        q, qd = random_state(model, s + 20)
        tau = _rand_tau(model, s + 20)
        dE, p_tau, p_damp = (float(x) for x in _power(model, q, qd, tau))
        expected = p_tau - p_damp
        if case == "dampers":
            assert p_damp > 0
        else:
            assert p_damp == 0
        assert dE == pytest.approx(expected, abs=1e-10 * max(1.0, abs(expected)))
        # and with tau = 0 the only power is the dampers' dissipation
        dE0, _, p_damp0 = (float(x) for x in _power(model, q, qd, np.zeros(model.nv)))
        assert dE0 == pytest.approx(-p_damp0, abs=1e-10)


# ------------------------------------------------------------------ momentum


@pytest.mark.parametrize("name", ["free", "free_b"])
def test_momentum_conservation_free_floating(name):
    """No gravity, no root wrench: internal joint torques, springs and dampers leave the
    linear momentum and the angular momentum about the system com constant."""
    model = _with(_model(name, springs=True, dampers=True), gravity=np.zeros(3))
    assert model.joint_kinds[0] == "free"
    q, qd = random_state(model, 4)
    tau = _rand_tau(model, 4)
    tau[:6] = 0.0  # root wrench off; all other joint torques are internal
    P, H, dP, dH, vcom = (np.asarray(x) for x in _momentum_rate(model, q, qd, tau))
    assert np.abs(P).max() > 0.1 and np.abs(H).max() > 0.1  # non-trivial motion
    np.testing.assert_allclose(dP, 0.0, atol=1e-10)
    np.testing.assert_allclose(dH, 0.0, atol=1e-10)
    # P = total mass * com velocity
    np.testing.assert_allclose(P, float(jnp.sum(model.mass)) * vcom, atol=1e-12)
    # uniform gravity: dP/dt = m_tot g, still no torque about the com
    g = np.array([0.2, 0.5, -9.81])
    P, H, dP, dH, _ = (np.asarray(x) for x in _momentum_rate(_with(model, gravity=g), q, qd, tau))
    np.testing.assert_allclose(dP, float(jnp.sum(model.mass)) * g, atol=1e-10)
    np.testing.assert_allclose(dH, 0.0, atol=1e-10)


# ------------------------------------------------------------ external forces


@pytest.mark.parametrize("name", [
    # the floating root's own programs here (~6 s) in the slow job; the default job checks it
    # against the RNEA and CRBA (test_random_tree_aba_rnea_crba_agree) and for momentum
    pytest.param("free", marks=pytest.mark.slow), "fixed"])
def test_external_forces_equal_generalized_forces(name):
    model = _model(name)
    q, qd = random_state(model, 5)
    rng = np.random.default_rng(6)
    f_ext = rng.normal(size=(model.n_bodies, 6))
    qdd = rng.normal(size=model.nv)
    J = np.asarray(_body_jacobians(model, q))  # (N, 6, nv)
    Jt_f = np.einsum("bij,bi->j", J, f_ext)
    np.testing.assert_allclose(
        ID(model, q, qd, qdd, f_ext), np.asarray(ID(model, q, qd, qdd)) - Jt_f, atol=1e-10
    )
    tau = _rand_tau(model, 6)
    np.testing.assert_allclose(
        FD(model, q, qd, tau, f_ext), FD(model, q, qd, tau + Jt_f), atol=1e-10
    )
    # bias_forces carries -J^T f_ext
    np.testing.assert_allclose(
        diffmb.bias_forces(model, q, qd, f_ext),
        np.asarray(BIAS(model, q, qd)) - Jt_f, atol=1e-10,
    )


def test_external_force_on_free_body_is_newton_euler():
    """A world-fixed force through the com of a free body: com accel F/m, no spin-up."""
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    c = np.array([0.2, -0.1, 0.3])
    b.add_body("sat", "world", "free", mass=2.0, com=c, inertia=np.diag([1.0, 1.5, 2.0]))
    model = b.build()
    sigma = np.array([0.1, -0.3, 0.2])
    q = jnp.asarray(np.concatenate([sigma, [1.0, 2.0, 3.0]]))
    qd = jnp.zeros(6)
    BN = np.asarray(diffmb.math.spatial.mrp_to_dcm(jnp.asarray(sigma)))
    F_world = np.array([1.0, -2.0, 0.5])
    F = BN @ F_world
    f_ext = np.concatenate([np.cross(c, F), F])[None, :]  # about the body origin
    qdd = np.asarray(diffmb.forward_dynamics(model, q, qd, jnp.zeros(6), f_ext))
    np.testing.assert_allclose(qdd[:3], 0.0, atol=1e-13)
    np.testing.assert_allclose(BN.T @ qdd[3:], F_world / 2.0, atol=1e-13)


# ------------------------------------------------------------- fixed-link merging


# slow job: ~4 s; the default job keeps merged fixed links
# (test_urdf::test_fixed_joint_merges_mass_and_inertia) and Pinocchio's robots with fixed children
# (test_robots)
@pytest.mark.slow
def test_fixed_links_match_locked_revolute_joints():
    """A fixed link behaves as a revolute joint locked at q = 0: M and C of the merged
    model are the sub-blocks of the unlocked model's; frames sit at the locked poses."""
    rng = np.random.default_rng(8)

    def build(lock_kind):
        b = diffmb.ModelBuilder(gravity=(0.0, 0.3, -9.81))
        r = np.random.default_rng(9)
        ax = lambda: r.normal(size=3)

        def inert():
            return dict(mass=r.uniform(0.5, 2), com=r.uniform(-0.3, 0.3, 3),
                        inertia=random_inertia(r))

        def place():
            return dict(pos=r.uniform(-0.5, 0.5, 3), rpy=r.uniform(-3, 3, 3))

        b.add_body("a", "world", "revolute", axis=ax(), **place(), **inert())
        b.add_body("f", "a", lock_kind, axis=ax(), **place(), **inert())
        b.add_body("c", "f", "universal", axis=ax(), axis2=ax(), **place(), **inert())
        b.add_body("w", "world", lock_kind, axis=ax(), **place(), **inert())
        b.add_body("d", "w", "spherical", **place(), **inert())
        return b.build()

    merged, full = build("fixed"), build("revolute")
    assert merged.nq == 6 and full.nq == 8
    assert set(merged.frame_names) == {"f", "w"}
    # public order is declaration order: a, (f), c1, c2, (w), d1..d3
    keep = np.array([0, 2, 3, 5, 6, 7])
    lock = np.array([1, 4])
    q_m, qd_m = rng.normal(size=6) * 0.5, rng.normal(size=6)
    q_f = np.zeros(8)
    q_f[keep] = q_m
    qd_f = np.zeros(8)
    qd_f[keep] = qd_m
    M_f = np.asarray(diffmb.mass_matrix(full, q_f))
    np.testing.assert_allclose(diffmb.mass_matrix(merged, q_m), M_f[np.ix_(keep, keep)], atol=1e-12)
    C_f = np.asarray(diffmb.bias_forces(full, q_f, qd_f))
    np.testing.assert_allclose(diffmb.bias_forces(merged, q_m, qd_m), C_f[keep], atol=1e-12)
    assert np.abs(C_f[lock]).max() > 0  # the lock carries load: the test is not vacuous
    for name in ("f", "w"):
        Em, rm = diffmb.frame_pose(merged, q_m, name)
        Ef, rf = diffmb.frame_pose(full, q_f, name)
        np.testing.assert_allclose(Em, Ef, atol=1e-13)
        np.testing.assert_allclose(rm, rf, atol=1e-13)
    assert float(diffmb.kinetic_energy(merged, q_m, qd_m)) == pytest.approx(
        float(diffmb.kinetic_energy(full, q_f, qd_f)), rel=1e-12
    )
    # potential energies agree up to a constant (the world-fixed link's mass is dropped)
    q2_m = rng.normal(size=6) * 0.5
    q2_f = np.zeros(8)
    q2_f[keep] = q2_m
    dV_m = float(diffmb.potential_energy(merged, q_m) - diffmb.potential_energy(merged, q2_m))
    dV_f = float(diffmb.potential_energy(full, q_f) - diffmb.potential_energy(full, q2_f))
    assert dV_m == pytest.approx(dV_f, rel=1e-10, abs=1e-12)


# -------------------------------------------------------------- derivatives


def _central_fd(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = eps
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    return np.stack(cols, -1)


JAC_FD = jax.jit(jax.jacfwd(diffmb.forward_dynamics, argnums=(1, 2)))


def test_jacfwd_forward_dynamics_matches_finite_differences():
    model = _model("free", springs=True)
    q, qd = random_state(model, 7)
    tau = _rand_tau(model, 7)
    Jq, Jqd = (np.asarray(x) for x in JAC_FD(model, q, qd, tau))
    Jq_fd = _central_fd(lambda x: FD_JIT(model, x, qd, tau), q)
    Jqd_fd = _central_fd(lambda x: FD_JIT(model, q, x, tau), qd)
    np.testing.assert_allclose(Jq, Jq_fd, rtol=1e-6, atol=1e-6 * np.abs(Jq_fd).max())
    np.testing.assert_allclose(Jqd, Jqd_fd, rtol=1e-6, atol=1e-6 * np.abs(Jqd_fd).max())


def _param_loss(model, q, qd, tau, w):
    return jnp.dot(w, diffmb.forward_dynamics(model, q, qd, tau)) + diffmb.energy(model, q, qd)


PARAM_GRAD = jax.jit(jax.grad(_param_loss))
PARAM_LOSS = jax.jit(_param_loss)


def test_grad_wrt_model_parameters_matches_finite_differences():
    model = _model("fixed")
    q, qd = random_state(model, 8)
    tau = _rand_tau(model, 8)
    w = np.random.default_rng(9).normal(size=model.nv)
    g = PARAM_GRAD(model, q, qd, tau, w)
    loss = lambda m: float(PARAM_LOSS(m, q, qd, tau, w))
    eps = 1e-6

    def fd(where, idx):
        def pert(d):
            arr = np.array(where(model))
            arr[idx] += d
            return eqx.tree_at(where, model, jnp.asarray(arr))

        return (loss(pert(eps)) - loss(pert(-eps))) / (2 * eps)

    for k in (0, 3, model.n_bodies - 1):
        assert float(g.mass[k]) == pytest.approx(fd(lambda m: m.mass, (k,)), rel=1e-6, abs=1e-7)
    for k, j in ((1, 0),):
        assert float(g.com[k, j]) == pytest.approx(fd(lambda m: m.com, (k, j)), rel=1e-6, abs=1e-7)
    # a symmetric inertia perturbation E_01 + E_10: derivative g_01 + g_10
    k = 2

    def pert_I(d):
        I = np.array(model.inertia)
        I[k, 0, 1] += d
        I[k, 1, 0] += d
        return eqx.tree_at(lambda m: m.inertia, model, jnp.asarray(I))

    fd_I = (loss(pert_I(eps)) - loss(pert_I(-eps))) / (2 * eps)
    assert float(g.inertia[k, 0, 1] + g.inertia[k, 1, 0]) == pytest.approx(fd_I, rel=1e-6, abs=1e-7)
    assert float(g.gravity[2]) == pytest.approx(fd(lambda m: m.gravity, (2,)), rel=1e-6, abs=1e-7)
    assert np.abs(np.asarray(g.mass)).min() > 0  # every mass matters


# -------------------------------------------------------------------- vmap


# slow job: ~5 s; the default job keeps vmapped dynamics against one state at a time
# (test_vmap_over_stacked_parameter_sets_matches_loop, test_vectorize)
@pytest.mark.slow
def test_vmap_over_states_matches_loop():
    model = _model("fixed")
    states = [random_state(model, s) for s in range(4)]
    Q = np.stack([s[0] for s in states])
    QD = np.stack([s[1] for s in states])
    TAU = np.stack([_rand_tau(model, s) for s in range(4)])
    batched = jax.jit(jax.vmap(diffmb.forward_dynamics, in_axes=(None, 0, 0, 0)))(model, Q, QD, TAU)
    loop = np.stack([FD_JIT(model, Q[k], QD[k], TAU[k]) for k in range(4)])
    np.testing.assert_allclose(batched, loop, atol=1e-12)


def test_vmap_over_stacked_parameter_sets_matches_loop():
    models = [_model("fixed", param_seed=ps) for ps in (100, 101, 102)]
    assert len({jax.tree_util.tree_structure(m) for m in models}) == 1
    assert not np.allclose(models[0].mass, models[1].mass)
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *models)
    assert stacked.mass.shape == (3, models[0].n_bodies)
    q, qd = random_state(models[0], 0)
    tau = _rand_tau(models[0], 0)
    batched = eqx.filter_jit(eqx.filter_vmap(lambda m: diffmb.forward_dynamics(m, q, qd, tau)))(stacked)
    loop = np.stack([FD_JIT(m, q, qd, tau) for m in models])
    np.testing.assert_allclose(batched, loop, atol=1e-12)
    assert not np.allclose(loop[0], loop[1])


# -------------------------------------------------------------- compilation


def test_one_trace_per_structure():
    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(model, q, qd, tau):
        return diffmb.forward_dynamics(model, q, qd, tau)

    rng = np.random.default_rng(30)
    m1 = _double_pendulum(1.0, 2.0, 0.9, 0.4, 0.3, random_inertia(rng), random_inertia(rng), 9.81)
    m2 = _double_pendulum(1.5, 0.5, 0.7, 0.2, 0.5, random_inertia(rng), random_inertia(rng), 3.0)
    q, qd, tau = rng.normal(size=2), rng.normal(size=2), rng.normal(size=2)
    a = step(m1, q, qd, tau)
    b = step(m1, q + 0.01, qd * 2.0, tau)  # new state
    c = step(m2, q, qd, tau)  # new parameters
    d = step(_with(m2, gravity=np.zeros(3)), q, qd, tau)  # new gravity
    assert not np.allclose(a, b) and not np.allclose(a, c) and not np.allclose(c, d)
    # the counter does count: a new structure is a new trace
    with pytest.raises(RuntimeError):
        step(_pendulum(), jnp.zeros(1), jnp.zeros(1), jnp.zeros(1))


# ------------------------------------------------------------------ bad input


def test_wrong_shapes_raise_value_error():
    model = _model("free_b")
    n, N = model.nq, model.n_bodies
    q, qd = random_state(model, 0)
    tau = np.zeros(n)
    bad = np.zeros(n + 1)
    for call in (
        lambda: diffmb.forward_dynamics(model, bad, qd, tau),
        lambda: diffmb.forward_dynamics(model, q, bad, tau),
        lambda: diffmb.forward_dynamics(model, q, qd, bad),
        lambda: diffmb.forward_dynamics(model, q, qd, tau, np.zeros((N, 3))),
        lambda: diffmb.forward_dynamics(model, q, qd, tau, np.zeros((N + 1, 6))),
        lambda: diffmb.inverse_dynamics(model, q, qd, bad),
        lambda: diffmb.inverse_dynamics(model, q, qd, tau, np.zeros(6)),
        lambda: diffmb.mass_matrix(model, q[:-1]),
        lambda: diffmb.mass_matrix(model, q[None, :]),
        lambda: diffmb.energy(model, q, bad),
        lambda: diffmb.momentum(model, bad, qd),
        lambda: diffmb.forward_kinematics(model, bad),
        lambda: diffmb.coordinate_rates(model, q, bad),
        lambda: diffmb.joint_forces(model, bad, qd),
        lambda: FD(model, bad, qd, tau),  # also under jit, at trace time
    ):
        with pytest.raises(ValueError):
            call()


def _builder_with_root():
    b = diffmb.ModelBuilder()
    b.add_body("root", "world", "revolute", mass=1.0, inertia=np.eye(3) * 0.1)
    return b


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(name="badkind", parent="root", joint="hinge"),
        dict(name="orphan", parent="nowhere", joint="revolute"),
        dict(name="root", parent="world", joint="revolute"),  # duplicate name
        dict(name="neg", parent="root", joint="revolute", mass=-1.0),
        dict(name="notpd", parent="root", joint="revolute", mass=1.0,
             inertia=np.diag([1.0, 1.0, -0.1])),
        dict(name="triangle", parent="root", joint="revolute", mass=1.0,
             inertia=np.diag([0.1, 0.1, 1.0])),
        dict(name="asym", parent="root", joint="revolute", mass=1.0,
             inertia=np.array([[1.0, 0.2, 0], [0.0, 1, 0], [0, 0, 1]])),
        dict(name="floater", parent="root", joint="free", mass=1.0, inertia=np.eye(3)),
        dict(name="nanaxis", parent="root", joint="revolute", axis=(np.nan, 0, 1), mass=1.0,
             inertia=np.eye(3)),
        dict(name="zeroaxis", parent="root", joint="revolute", axis=(0, 0, 0), mass=1.0,
             inertia=np.eye(3)),
    ],
    ids=lambda kw: kw["name"],
)
def test_builder_rejects_bad_bodies_naming_them(kwargs):
    b = _builder_with_root()
    kwargs = dict(kwargs)
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=f"'{name}'"):
        b.add_body(name, **kwargs)
        b.build()


@pytest.mark.parametrize("case", ["zero_mass", "free_after_fixed_root"])
def test_build_rejects_bad_trees_naming_the_body(case):
    b = diffmb.ModelBuilder()
    name = "ghost" if case == "zero_mass" else "floater"
    with pytest.raises(ValueError, match=f"'{name}'"):
        if case == "zero_mass":
            b.add_body("root", "world", "revolute", mass=1.0, inertia=np.eye(3) * 0.1)
            b.add_body("ghost", "root", "revolute")  # zero mass, nothing merged into it
        else:
            b.add_body("base", "world", "fixed")
            b.add_body("floater", "base", "free", mass=1.0, inertia=np.eye(3) * 0.1)
        b.build()


def test_a_second_free_root_makes_a_forest_of_independent_trees():
    """A free body beside a hinged tree (a target floating by an arm): the forest's mass
    matrix is the two trees' blocks, and each one's accelerations are what it has alone."""
    def builder(parts):
        b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -9.81))
        if "arm" in parts:
            b.add_body("root", "world", "revolute", axis=(0, 1, 0), mass=1.0, com=(0.2, 0, 0),
                       inertia=np.diag([0.01, 0.1, 0.1]), armature=0.05)
        if "floater" in parts:
            b.add_body("floater", "world", "free", pos=(1, 0, 0), mass=2.0, com=(0.1, 0, 0),
                       inertia=np.diag([0.1, 0.2, 0.3]))
            b.add_body("flap", "floater", "revolute", axis=(1, 0, 0), mass=0.3, com=(0, 0.1, 0),
                       inertia=np.eye(3) * 0.01)
        return b.build()

    forest, arm, floater = builder(("arm", "floater")), builder(("arm",)), builder(("floater",))
    assert forest.free_roots == (1,) and not forest.floating_base  # the hinged tree is held
    q, qd = random_state(forest, 0)
    tau = _rand_tau(forest, 0)
    M = np.asarray(diffmb.mass_matrix(forest, q))
    np.testing.assert_allclose(M[:1, 1:], 0.0, atol=1e-15)
    np.testing.assert_allclose(M[:1, :1], np.asarray(diffmb.mass_matrix(arm, q[:1])), atol=1e-14)
    np.testing.assert_allclose(M[1:, 1:], np.asarray(diffmb.mass_matrix(floater, q[1:])), atol=1e-14)
    qdd = np.asarray(diffmb.forward_dynamics(forest, q, qd, tau))
    np.testing.assert_allclose(qdd[:1], np.asarray(diffmb.forward_dynamics(arm, q[:1], qd[:1], tau[:1])), atol=1e-12)
    np.testing.assert_allclose(qdd[1:], np.asarray(diffmb.forward_dynamics(floater, q[1:], qd[1:], tau[1:])),
                               atol=1e-12)


# ------------------------------------------------- strict configuration (conftest.py)


def test_tree_algorithms_under_rank_promotion_raise():
    """Tests run with jax_numpy_rank_promotion='raise' (conftest.py). Tracks the src fix
    (conftest.RANK_PROMOTION can become "raise" once this passes)."""
    model = _model("free_b")
    q, qd = random_state(model, 0)
    tau = _rand_tau(model, 0)
    ref = FD(model, q, qd, tau)
    with jax.numpy_rank_promotion("raise"):
        out = diffmb.forward_dynamics(model, q, qd, tau)
        diffmb.mass_matrix(model, q)
        diffmb.momentum(model, q, qd)
    np.testing.assert_allclose(out, ref, atol=1e-13)


@pytest.mark.parametrize("algorithm", ["recursive", "dense"])
def test_forward_dynamics_algorithms_agree_with_rnea(algorithm):
    """Both forward-dynamics algorithms invert the RNEA."""
    model = _model("free_b")
    q, qd = random_state(model, 2)
    tau = _rand_tau(model, 2)
    qdd = diffmb.forward_dynamics(model, q, qd, tau, algorithm=algorithm)
    np.testing.assert_allclose(ID(model, q, qd, qdd), tau, atol=1e-10)
