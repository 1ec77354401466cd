"""Cross-check the URDF loader and the tree algorithms against Pinocchio.

Random URDF trees (branches; revolute / continuous / prismatic / fixed joints; rotated
joint and inertial origins; random axes) are loaded in both engines and ABA, RNEA and
CRBA are compared at random states with gravity on. Pinocchio orders joints depth-first;
we map its coordinates to diffmb's (URDF document order) by joint name.
"""

import numpy as np
import pinocchio as pin  # the dev extra installs it: a missing peer fails, never skips
import pytest

import diffmb
from diffmb.formats.urdf import ROOT_JOINT
from robots import (
    from_pin_free as _from_pin_free,
    joint_maps as _joint_maps,
    pin_q as _pin_q,
    to_pin_free as _to_pin_free,
)

TOL = 1e-9


def _fmt(v):
    return " ".join(f"{x:.17g}" for x in v)


def _random_inertial(rng):
    m = rng.uniform(0.5, 3.0)
    d = rng.uniform(0.05, 0.5, 3)
    # principal moments from a box: always satisfy the triangle inequality
    I = m / 12 * np.array([d[1] ** 2 + d[2] ** 2, d[0] ** 2 + d[2] ** 2, d[0] ** 2 + d[1] ** 2])
    Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    full = Q @ np.diag(I) @ Q.T
    xyz, rpy = rng.uniform(-0.3, 0.3, 3), rng.uniform(-np.pi, np.pi, 3)
    return (
        f'<inertial><origin xyz="{_fmt(xyz)}" rpy="{_fmt(rpy)}"/><mass value="{m:.17g}"/>'
        f'<inertia ixx="{full[0,0]:.17g}" ixy="{full[0,1]:.17g}" ixz="{full[0,2]:.17g}" '
        f'iyy="{full[1,1]:.17g}" iyz="{full[1,2]:.17g}" izz="{full[2,2]:.17g}"/></inertial>'
    )


def random_urdf(rng, n_links):
    """A random URDF tree with ``n_links`` links; joints shuffled in the document."""
    links = [f'<link name="base">{_random_inertial(rng)}</link>']
    joints = []
    for k in range(1, n_links):
        parent = 0 if k == 1 else int(rng.integers(0, k))
        jtype = rng.choice(["revolute", "continuous", "prismatic", "fixed"], p=[0.35, 0.25, 0.25, 0.15])
        axis = rng.normal(size=3)
        lim = '<limit lower="-3" upper="3" effort="50" velocity="5"/>' if jtype in ("revolute", "prismatic") else ""
        links.append(f'<link name="l{k}">{_random_inertial(rng)}</link>')
        joints.append(
            f'<joint name="j{k}" type="{jtype}">'
            f'<parent link="{"base" if parent == 0 else f"l{parent}"}"/><child link="l{k}"/>'
            f'<origin xyz="{_fmt(rng.uniform(-0.5, 0.5, 3))}" rpy="{_fmt(rng.uniform(-np.pi, np.pi, 3))}"/>'
            f'<axis xyz="{_fmt(axis)}"/>{lim}</joint>'
        )
    rng.shuffle(joints)
    if all("fixed" in j for j in joints):
        joints[0] = joints[0].replace('type="fixed"', 'type="continuous"')
    return '<robot name="rand">' + "".join(links) + "".join(joints) + "</robot>"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fixed_base_random_tree(seed):
    rng = np.random.default_rng(seed)
    xml = random_urdf(rng, int(rng.integers(8, 13)))
    model = diffmb.load_urdf(xml)
    pmodel = pin.buildModelFromXML(xml)
    pmodel.gravity.linear = np.array([0.0, 0.0, -9.81])
    data = pmodel.createData()
    assert pmodel.nv == model.nq
    maps = _joint_maps(model, pmodel)
    perm = np.array([m[2] for m in maps])
    for _ in range(3):
        q = rng.uniform(-1.5, 1.5, model.nq)
        qd = rng.normal(size=model.nq)
        tau = rng.normal(size=model.nq) * 5
        qdd = rng.normal(size=model.nq)
        qp = _pin_q(maps, np.zeros(pmodel.nq), q)
        qdp, taup, qddp = (np.zeros(model.nq) for _ in range(3))
        qdp[perm], taup[perm], qddp[perm] = qd, tau, qdd

        M_ref = pin.crba(pmodel, data, qp).copy()
        M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T
        M = np.asarray(diffmb.mass_matrix(model, q))
        np.testing.assert_allclose(M, M_ref[np.ix_(perm, perm)], atol=TOL, rtol=0)

        tau_ref = pin.rnea(pmodel, data, qp, qdp, qddp)[perm]
        np.testing.assert_allclose(diffmb.inverse_dynamics(model, q, qd, qdd), tau_ref, atol=TOL, rtol=0)

        a_ref = pin.aba(pmodel, data, qp, qdp, taup)[perm]
        np.testing.assert_allclose(diffmb.forward_dynamics(model, q, qd, tau), a_ref, atol=TOL, rtol=0)


def test_fixed_base_kinematics_match():
    """Link placements (including links merged by fixed joints) agree with Pinocchio."""
    rng = np.random.default_rng(7)
    xml = random_urdf(rng, 10)
    model = diffmb.load_urdf(xml)
    pmodel = pin.buildModelFromXML(xml)
    data = pmodel.createData()
    q = rng.uniform(-1.5, 1.5, model.nq)
    qp = _pin_q(_joint_maps(model, pmodel), np.zeros(pmodel.nq), q)
    pin.framesForwardKinematics(pmodel, data, qp)
    for k in range(1, 10):
        name = f"l{k}"
        E, r = diffmb.frame_pose(model, q, name)
        oMf = data.oMf[pmodel.getFrameId(name)]
        np.testing.assert_allclose(r, oMf.translation, atol=TOL)
        np.testing.assert_allclose(np.asarray(E).T, oMf.rotation, atol=TOL)


def _free_state(rng, model):
    sigma = rng.uniform(-0.4, 0.4, 3)
    p = rng.normal(size=3)
    q = np.concatenate([sigma, p, rng.uniform(-1.5, 1.5, model.nq - 6)])
    qd = rng.normal(size=model.nq)
    return q, qd


# a second random structure (~4 s) in the slow job: the default job keeps seed 3 and the
# floating-base robots (test_robots)
@pytest.mark.parametrize("seed", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_floating_base_random_tree(seed):
    rng = np.random.default_rng(seed)
    xml = random_urdf(rng, int(rng.integers(8, 13)))
    model = diffmb.load_urdf(xml, floating_base=True)
    assert model.joint_names[0] == ROOT_JOINT
    pmodel = pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
    pmodel.gravity.linear = np.array([0.0, 0.0, -9.81])
    data = pmodel.createData()
    assert pmodel.nv == model.nq
    for _ in range(2):
        q, qd = _free_state(rng, model)
        tau = rng.normal(size=model.nq) * 5
        qdd = rng.normal(size=model.nq)
        qp, vp, taup = _to_pin_free(model, pmodel, q, qd, tau)
        _, _, qddp = _to_pin_free(model, pmodel, q, qd, qdd)

        # kinematics first: the attitude/position conversion is right
        pin.framesForwardKinematics(pmodel, data, qp)
        dcm, pos = diffmb.forward_kinematics(model, q)
        for name in model.body_names:
            oMf = data.oMf[pmodel.getFrameId(name)]
            i = model.body_index(name)
            np.testing.assert_allclose(pos[i], oMf.translation, atol=TOL)
            np.testing.assert_allclose(np.asarray(dcm[i]).T, oMf.rotation, atol=TOL)

        M_ref = pin.crba(pmodel, data, qp).copy()
        M_ref = np.triu(M_ref) + np.triu(M_ref, 1).T
        P = np.stack([_from_pin_free(model, pmodel, c) for c in np.eye(model.nq)], 1)  # P x_pin = x_diffmb
        M = np.asarray(diffmb.mass_matrix(model, q))
        np.testing.assert_allclose(M, P @ M_ref @ P.T, atol=TOL, rtol=0)

        tau_ref = _from_pin_free(model, pmodel, pin.rnea(pmodel, data, qp, vp, qddp))
        np.testing.assert_allclose(diffmb.inverse_dynamics(model, q, qd, qdd), tau_ref, atol=TOL, rtol=0)

        # Pinocchio's free-flyer acceleration is the time derivative of [v; omega] (local
        # frame), the same quantity as diffmb's d/dt [omega; v] up to the ordering.
        a_ref = _from_pin_free(model, pmodel, pin.aba(pmodel, data, qp, vp, taup))
        np.testing.assert_allclose(diffmb.forward_dynamics(model, q, qd, tau), a_ref, atol=TOL, rtol=0)
