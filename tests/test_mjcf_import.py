"""MJCF import through MuJoCo's compiler: accelerations equal MuJoCo's ``mj_forward`` on
open trees (free root, several joints in one body with offset anchors, a ball joint, a
welded body, damping and springs), diffmb models survive the round trip to MJCF and
back, and a four-bar closed by a ``connect`` follows its one-coordinate model."""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.formats.mjcf import to_mjcf, to_mujoco_state
from diffmb.formats.mjcf_import import load_mjcf, velocity_map
from helpers import make_random_model, random_state
from test_closures import one_dof_reference as _reference

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

TREE = '''<mujoco><option gravity="0.3 -1 -9.81"/><worldbody>
<body name="base" pos="0.1 0.2 0.3" quat="0.9 0.1 0.2 0.3"><freejoint name="root"/>
  <geom type="box" size="0.2 0.1 0.05" mass="2"/>
  <body name="arm" pos="0.3 0 0" quat="0.8 0.3 0 0.1">
    <joint name="h1" type="hinge" axis="0 1 0" pos="0.05 0 0" ref="0.2" damping="0.3" stiffness="2" springref="0.5"/>
    <joint name="s1" type="slide" axis="1 0 0.2" pos="0 0.1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="0.7"/>
    <body name="hand" pos="0.4 0 0"><joint name="b1" type="ball" pos="0.02 0 0"/>
      <geom type="box" size="0.05 0.04 0.03" pos="0.05 0.01 0" mass="0.3"/>
      <body name="tool" pos="0.1 0 0" euler="10 20 30"><geom type="sphere" size="0.02" pos="0.02 0 0" mass="0.1"/></body>
    </body>
  </body>
</body></worldbody></mujoco>'''


def _random_mujoco_state(m, rng):
    qpos = m.qpos0.copy()
    for j in range(m.njnt):
        a = m.jnt_qposadr[j]
        if m.jnt_type[j] == 0:
            qpos[a:a + 3] = rng.normal(size=3)
            qq = rng.normal(size=4)
            qpos[a + 3:a + 7] = qq / np.linalg.norm(qq)
        elif m.jnt_type[j] == 1:
            qq = rng.normal(size=4)
            qpos[a:a + 4] = qq / np.linalg.norm(qq)
        else:
            qpos[a] += 0.5 * rng.normal()
    return qpos, rng.normal(size=m.nv)


def _accelerations_both(xml, seed):
    """MuJoCo's smooth ``qacc`` and diffmb's, in diffmb's velocity coordinates, at a random
    state set through a keyframe, with random applied joint forces."""
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    qpos, qvel = _random_mujoco_state(m, rng)
    tau = rng.normal(size=m.nv)
    d.qpos[:], d.qvel[:], d.qfrc_applied[:] = qpos, qvel, tau
    mujoco.mj_forward(m, d)
    imp = load_mjcf(_with_key(xml, qpos, qvel), key="k")
    T = velocity_map(m, qpos)
    np.testing.assert_allclose(np.asarray(imp.qd0), T @ qvel, atol=1e-13)
    system = imp.system()
    x = np.concatenate([imp.q0, imp.qd0])
    params = system.default_params()
    tau_d = np.linalg.solve(T.T, tau)
    qdd = np.asarray(eqx.filter_jit(system.accelerations)(0.0, x, params)[0]) + np.asarray(
        diffmb.forward_dynamics(imp.model, imp.q0, imp.qd0, tau_d)) - np.asarray(
        diffmb.forward_dynamics(imp.model, imp.q0, imp.qd0, np.zeros(m.nv)))
    expect = T @ d.qacc_smooth
    for j in range(m.njnt):  # d/dt (R^T v_world) in body axes
        if m.jnt_type[j] == 0:
            v = m.jnt_dofadr[j]
            expect[v + 3:v + 6] -= np.cross(qvel[v + 3:v + 6], T[v + 3:v + 6, v:v + 3] @ qvel[v:v + 3])
    return m, d, imp, qdd, expect


def _with_key(xml, qpos, qvel):
    fmt = lambda v: " ".join(f"{x:.17g}" for x in v)
    key = f'<keyframe><key name="k" qpos="{fmt(qpos)}" qvel="{fmt(qvel)}"/></keyframe>'
    return xml.replace("</mujoco>", key + "</mujoco>")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_open_tree_accelerations_match_mj_forward(seed):
    m, d, imp, qdd, expect = _accelerations_both(TREE, seed)  # the keyframe gives the same state
    model = imp.model
    assert model.joint_names == ("root", "h1", "s1", "b1")
    assert model.body_names == ("base", "arm/h1", "arm", "hand")  # two joints: one massless link between
    np.testing.assert_allclose(qdd, expect, rtol=1e-9, atol=1e-9)


# the free base's own programs (~6 s) in the slow job: the default job keeps the round trip on the
# fixed base and the free root's export and import against MuJoCo (test_mjcf's open trees,
# test_open_tree_accelerations_match_mj_forward)
@pytest.mark.parametrize("base", [pytest.param("free", marks=pytest.mark.slow), "fixed"])
def test_round_trip_through_mjcf_keeps_the_dynamics(base):
    model = make_random_model(4, n_bodies=6, base=base, kinds=("revolute", "prismatic", "spherical", "revolute"))
    q, qd = random_state(model, 4)
    # the state goes through MuJoCo's conventions (a keyframe), as a user's file would carry it
    imp = load_mjcf(_with_key(to_mjcf(model), *to_mujoco_state(model, q, qd)), key="k")
    back = imp.model
    # MuJoCo orders joints depth-first: map coordinates by joint name
    def cols(mdl, name):
        b = mdl.body_joint.index(mdl.joint_names.index(name))
        return list(range(*mdl.body_slices[b]))

    perm = np.concatenate([cols(model, n) for n in back.joint_names])  # back's order in model's coordinates
    q, qd = np.asarray(q), np.asarray(qd)
    np.testing.assert_allclose(np.asarray(imp.qd0), qd[perm], atol=1e-12)  # body-axis rates either way
    M = np.asarray(diffmb.mass_matrix(model, q))
    np.testing.assert_allclose(np.asarray(diffmb.mass_matrix(back, imp.q0)), M[np.ix_(perm, perm)], atol=1e-10)
    tau = np.random.default_rng(0).normal(size=model.nv)
    np.testing.assert_allclose(np.asarray(diffmb.forward_dynamics(back, imp.q0, imp.qd0, tau[perm])),
                               np.asarray(diffmb.forward_dynamics(model, q, qd, tau))[perm], atol=1e-9)


def test_closed_four_bar_follows_the_one_coordinate_model():
    imp = load_mjcf(EXAMPLES / "fourbar.xml")
    assert [c.name for c in imp.closures.closures] == ["pin"]
    system = imp.system()
    tr = diffmb.simulate(system, t1=3.0, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=31)
    ref = _reference(0.3, 2.0)
    # the XML draws the mechanism at crank angle 0.3: MuJoCo's (and diffmb's) q = 0 there
    np.testing.assert_allclose(0.3 + np.asarray(tr.xs[:, 0]), np.asarray(ref.xs[:, 0]), atol=1e-7)
    np.testing.assert_allclose(np.asarray(tr.xs[:, 3]), np.asarray(ref.xs[:, 1]), atol=1e-7)
    assert tr.summary()["violation"]["position_max"] < 1e-9


def test_weld_equality_holds_two_bodies_together():
    xml = '''<mujoco><worldbody>
      <body name="a"><joint name="ja" type="hinge" axis="0 0 1"/><geom type="box" size="0.2 0.1 0.1" pos="0.2 0 0" mass="1"/></body>
      <body name="b" pos="0.4 0.1 0" quat="0.9 0 0 0.3"><joint name="jb" type="hinge" axis="0 0 1" pos="-0.1 0 0"/>
        <geom type="box" size="0.1 0.1 0.1" mass="1"/></body></worldbody>
      <equality><weld body1="a" body2="b"/></equality></mujoco>'''
    imp = load_mjcf(xml)
    res = np.asarray(diffmb.closures.nodes.position_residual(imp.model, imp.q0, imp.closures))
    assert np.abs(res).max() < 1e-12  # closed at qpos0, where MuJoCo took the relative pose
    moved = np.asarray(diffmb.closures.nodes.position_residual(imp.model, imp.q0 + np.array([0.1, 0.0]), imp.closures))
    assert np.abs(moved).max() > 1e-3


@pytest.mark.parametrize("xml, key, words", [
    ('<mujoco><worldbody><body name="a"><joint name="j1"/><geom size="0.1" mass="1"/></body>'
     '<body name="b"><joint name="j2"/><geom size="0.1" mass="1"/></body></worldbody>'
     '<tendon><fixed name="t1"><joint joint="j1" coef="1"/><joint joint="j2" coef="1"/></fixed><fixed name="t2">'
     '<joint joint="j2" coef="1"/></fixed></tendon><equality><tendon name="couple" tendon1="t1" tendon2="t2"/>'
     '</equality></mujoco>', None,
     ["equality 'couple'", "tendon 't1' spans 2 joints", "fixed tendons of one joint each"]),
    ('<mujoco><worldbody><body name="a"><joint name="j1"/><geom size="0.1" mass="1"/></body></worldbody>'
     '<keyframe><key name="home" qpos="0.1"/></keyframe></mujoco>', "away", ["no key 'away'", "home"]),
    ('<mujoco><worldbody><body name="a"><joint name="j1"/><geom size="0.1" mass="1"/>'
     '</body></worldbody><bogus/></mujoco>', None, ["MuJoCo's compiler"]),
])
def test_bad_files_are_named(xml, key, words):
    with pytest.raises(ValueError) as e:
        load_mjcf(xml, key=key)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
