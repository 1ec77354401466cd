"""What real MJCF files carry beyond bodies and joints, against MuJoCo itself: armature
(set through default classes), several free bodies (a forest), fixed tendons with springs,
dampers and an equality, site-based ``connect``/``weld``, fluid forces (the inertia-box
model, with wind), and the notes for what is not carried over (the ellipsoid fluid model,
spatial tendons, tendon limits)."""

from __future__ import annotations

import equinox as eqx
import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.formats.mjcf_import import load_mjcf, velocity_map
from test_mjcf_import import _accelerations_both, _random_mujoco_state, _with_key

_residual = eqx.filter_jit(diffmb.closures.nodes.position_residual)  # one program, not one per operation

ARMATURE_AND_FOREST = '''<mujoco><option gravity="0.3 -1 -9.81"><flag contact="disable"/></option>
<default><joint armature="0.05"/><default class="geared"><joint armature="0.4" damping="0.3"/></default></default>
<worldbody>
<body name="servicer" pos="0.1 0.2 0.3" quat="0.9 0.1 0.2 0.3"><freejoint name="root"/>
  <geom type="box" size="0.2 0.1 0.05" mass="2"/>
  <body name="arm" pos="0.3 0 0"><joint name="shoulder" class="geared" axis="0 1 0" pos="0.05 0 0"/>
    <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="0.7"/>
    <body name="hand" pos="0.4 0 0"><joint name="wrist" type="ball" damping="0.1"/>
      <geom type="box" size="0.05 0.04 0.03" pos="0.05 0.01 0" mass="0.3"/>
      <body name="finger" pos="0.1 0 0"><joint name="slide" type="slide" axis="1 0 0.2"/>
        <geom type="sphere" size="0.02" mass="0.1"/></body></body></body></body>
<body name="target" pos="1 0.5 0.2"><freejoint name="target_root"/>
  <geom type="box" size="0.1 0.15 0.2" mass="1.5"/>
  <body name="flap" pos="0 0.15 0"><joint name="flap_hinge" axis="1 0 0" stiffness="2" springref="10"/>
    <geom type="box" size="0.1 0.1 0.01" pos="0 0.1 0" mass="0.2"/></body></body>
</worldbody></mujoco>'''


@pytest.mark.parametrize("seed", [0, 1])
def test_armature_and_two_free_bodies_match_mujoco(seed):
    m, d, imp, qdd, expect = _accelerations_both(ARMATURE_AND_FOREST, seed)
    assert imp.notes == []  # nothing dropped: armature, both free bodies, damping, springs
    assert imp.model.free_roots == (0, 4) and imp.model.floating_base
    np.testing.assert_allclose(np.asarray(imp.model.armature), m.dof_armature[[3, 4, 5, 0, 1, 2, 6, 7, 8, 9, 10,
                                                                              14, 15, 16, 11, 12, 13, 17]])
    np.testing.assert_allclose(qdd, expect, rtol=1e-9, atol=1e-9)
    # the armature's kinetic energy is MuJoCo's too (enable its energy)
    m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    mujoco.mj_forward(m, d)
    assert abs(float(diffmb.kinetic_energy(imp.model, imp.q0, imp.qd0)) - d.energy[1]) < 1e-12 * max(1, d.energy[1])


# slow job: a dopri8 run (~5 s) of what the default job pins at single states against MuJoCo
# (test_armature_and_two_free_bodies_match_mujoco) and over a run on one free body (test_simulate)
@pytest.mark.slow
def test_a_forest_of_free_bodies_keeps_its_momentum_without_gravity():
    xml = ARMATURE_AND_FOREST.replace('gravity="0.3 -1 -9.81"', 'gravity="0 0 0"').replace(
        'armature="0.05"', 'armature="0"').replace('armature="0.4" ', "")
    m = mujoco.MjModel.from_xml_string(xml)
    qpos, qvel = _random_mujoco_state(m, np.random.default_rng(3))
    imp = load_mjcf(_with_key(xml, qpos, qvel), key="k")
    tr = diffmb.simulate(imp.system(), t1=0.5, solver="dopri8", rtol=1e-11, atol=1e-12, saveat=11)
    h = np.asarray(tr.diagnostics["angular_momentum"])
    # the damped joints take energy, never momentum: both bodies exchange it through nothing
    assert np.abs(h - h[0]).max() < 1e-10 * np.abs(np.asarray(tr.diagnostics["momentum_scale"])).max()
    assert float(tr.diagnostics["energy"][-1]) < float(tr.diagnostics["energy"][0])


def test_fluid_forces_match_mujocos_inertia_box_model():
    """Density, viscosity and wind on the forest above, plus a massive body welded to the
    flap (it keeps its own box): MuJoCo's passive forces and smooth accelerations."""
    xml = ARMATURE_AND_FOREST.replace('<option gravity="0.3 -1 -9.81">',
                                      '<option gravity="0.3 -1 -9.81" density="1000" viscosity="0.5" wind="0.3 -0.2 1">')
    xml = xml.replace('pos="0 0.1 0" mass="0.2"/></body>', 'pos="0 0.1 0" mass="0.2"/><body name="tag" pos="0 0.2 0.05" '
                      'euler="10 20 30"><geom type="box" size="0.03 0.05 0.02" pos="0.01 0 0" mass="0.1"/></body></body>')
    for seed in (0, 1):
        m, d, imp, qdd, expect = _accelerations_both(xml, seed)
        assert imp.notes == [] and imp.fluid.body == (0, 1, 2, 3, 4, 5, 5)  # the tag's box on the flap
        system = imp.system()
        tau = np.asarray(eqx.filter_jit(system.generalized_force)(0.0, imp.q0, imp.qd0, system.default_params()))
        T = velocity_map(m, d.qpos)
        passive = np.linalg.solve(T.T, d.qfrc_passive)   # generalized forces: qd = T qvel
        assert np.abs(passive).max() > 10.0                # the medium pushes hard here
        np.testing.assert_allclose(tau, passive, rtol=1e-12, atol=1e-11)
        np.testing.assert_allclose(qdd, expect, rtol=1e-9, atol=1e-9)


TENDONS = '''<mujoco><option gravity="0 0 -9.81"><flag contact="disable"/></option><worldbody>
<body name="a"><joint name="j1" axis="0 1 0" ref="10" armature="0.02"/><geom size="0.1" pos="0 0 -0.3" mass="1"/>
  <body name="b" pos="0 0 -0.3"><joint name="j2" axis="0 1 0"/><geom size="0.1" pos="0 0 -0.3" mass="1"/>
    <body name="c" pos="0 0 -0.3"><joint name="j3" axis="0 1 0"/><geom size="0.05" pos="0 0 -0.2" mass="0.5"/>
    </body></body></body>
<body name="d" pos="1 0 0"><joint name="j4" axis="1 0 0"/><geom type="box" size="0.1 0.2 0.05" mass="1"/></body>
</worldbody>
<tendon>
  <fixed name="cable" stiffness="3" damping="0.2" springlength="0.1 0.4"><joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/></fixed>
  <fixed name="spring" stiffness="5" springlength="0.2"><joint joint="j2" coef="1"/><joint joint="j3" coef="1"/></fixed>
  <fixed name="t4"><joint joint="j4" coef="2"/></fixed><fixed name="t3"><joint joint="j3" coef="1"/></fixed>
</tendon>
<equality><tendon name="gear" tendon1="t4" tendon2="t3" polycoef="0.01 1 0.5 0 0"/></equality></mujoco>'''


def test_fixed_tendons_springs_dampers_and_an_equality_match_mujoco():
    """Springs with a dead band, a damper and a tendon equality (a gear between two joints),
    against MuJoCo's passive forces, smooth accelerations, energy and constraint residual."""
    m = mujoco.MjModel.from_xml_string(TENDONS)
    d = mujoco.MjData(m)
    imp = load_mjcf(TENDONS)
    assert imp.tendons.names == ("cable", "spring")  # t3, t4 carry no spring: only the gear uses them
    # a0 = 0.01 of the gear is off at qpos0: moved onto it, and said
    assert imp.notes == ["the initial state violated equality 'gear' by 0.005; moved onto it (minimum-norm change)"]
    assert [c.name for c in imp.closures.closures] == ["gear"]
    system = imp.system()
    params = system.default_params()
    passive, diagnostics = eqx.filter_jit(system.generalized_force), eqx.filter_jit(system.diagnostics)
    rng = np.random.default_rng(0)
    for _ in range(3):
        q, qd = 0.5 * rng.normal(size=m.nq), rng.normal(size=m.nv)
        d.qpos[:], d.qvel[:] = m.qpos0 + q, qd
        m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
        mujoco.mj_forward(m, d)
        tau = np.asarray(passive(0.0, q, qd, params))
        np.testing.assert_allclose(tau, d.qfrc_passive, rtol=1e-12, atol=1e-12)
        free = np.asarray(diffmb.forward_dynamics(imp.model, q, qd, tau))  # no closure: qacc_smooth
        np.testing.assert_allclose(free, d.qacc_smooth, rtol=1e-9, atol=1e-9)
        E = float(diagnostics(np.concatenate([q, qd]), params)["energy"])
        assert abs(E - d.energy.sum()) < 1e-12 * max(1.0, abs(E))
        # MuJoCo's residual L_t4 - L_t4(0) - p(L_t3 - L_t3(0)) = 2 q4 - p(q3): ours is q4 - p(q3)/2
        res = np.asarray(_residual(imp.model, q, imp.closures)).reshape(-1)
        np.testing.assert_allclose(2 * res[np.asarray(imp.closures.rows)], d.efc_pos, rtol=1e-12, atol=1e-14)


def test_a_tendon_run_in_a_medium_agrees_with_mujoco_over_half_a_second():
    """Without the equality (MuJoCo's equalities are soft), the open tree with armature,
    tendon springs and dampers, in a viscous, dense medium, follows MuJoCo's RK4 at 0.1 ms
    to 1e-8 over 0.5 s."""
    xml = TENDONS.replace('<equality><tendon name="gear" tendon1="t4" tendon2="t3" polycoef="0.01 1 0.5 0 0"/>'
                          '</equality>', "").replace('<option gravity="0 0 -9.81">',
                                                      '<option gravity="0 0 -9.81" density="1.2" viscosity="0.02">')
    rng = np.random.default_rng(1)
    m = mujoco.MjModel.from_xml_string(xml)
    qpos, qvel = m.qpos0 + 0.5 * rng.normal(size=m.nq), rng.normal(size=m.nv)
    m.opt.timestep, m.opt.integrator = 1e-4, mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_step(m, d, nstep=5000)
    imp = load_mjcf(_with_key(xml, qpos, qvel), key="k")
    tr = diffmb.simulate(imp.system(), t1=0.5, solver="dopri8", rtol=1e-12, atol=1e-13, saveat=2)
    np.testing.assert_allclose(np.asarray(tr.xs[-1, :m.nq]) + m.qpos0, d.qpos, atol=1e-8)
    np.testing.assert_allclose(np.asarray(tr.xs[-1, m.nq:]), d.qvel, atol=1e-8)


SITES = '''<mujoco><option><flag contact="disable"/></option><worldbody>
<body name="a" pos="0 0 1"><joint name="a1" axis="1 0 0" pos="0.05 0 0"/><joint name="a2" axis="0 1 0"/>
  <joint name="a3" axis="0 0 1" pos="0 0.02 0"/><geom type="box" size="0.2 0.1 0.1" pos="0.2 0 0" mass="1"/>
  <site name="weld_a" pos="0.4 0.05 0" euler="0 20 30"/><site name="pin_a" pos="0.4 0 0.1"/></body>
<body name="b" pos="0.5 0.05 1"><joint name="b1" axis="0 1 1"/><joint name="b2" type="slide" axis="1 0 0"/>
  <geom type="box" size="0.1 0.1 0.1" mass="1"/><site name="weld_b" pos="-0.1 0 0" euler="0 20 30"/>
  <site name="pin_b" pos="-0.1 -0.05 0.1"/></body>
<body name="c" pos="0 1 1"><joint name="c1" axis="0 1 0"/><geom size="0.1" mass="1"/><site name="tip" pos="0.1 0 0"/></body>
<site name="anchor" pos="0.1 1 1"/></worldbody>
<equality><weld name="weld" site1="weld_a" site2="weld_b"/><connect name="pin" site1="pin_a" site2="pin_b"/>
<connect name="hook" site1="anchor" site2="tip"/></equality></mujoco>'''


def test_site_based_connect_and_weld_measure_what_mujoco_measures():
    """MuJoCo 3's site form: the residual of each closure at random states has MuJoCo's
    size (positions: the gap between the sites; the weld's rotation: MuJoCo's half-angle
    quaternion part is sin(theta/2), ours sin(theta)), and is zero where MuJoCo's is."""
    m = mujoco.MjModel.from_xml_string(SITES)
    d = mujoco.MjData(m)
    imp = load_mjcf(SITES)
    assert imp.notes == [] and [c.name for c in imp.closures.closures] == ["weld", "pin", "hook"]
    rows = np.asarray(imp.closures.rows)
    rng = np.random.default_rng(0)
    for scale in (0.0, 0.3, 0.3):
        q = scale * rng.normal(size=m.nq)
        d.qpos[:] = m.qpos0 + q
        mujoco.mj_forward(m, d)
        ours = np.asarray(_residual(imp.model, q, imp.closures)).reshape(-1)[rows]
        theirs = d.efc_pos
        norm = lambda v: float(np.linalg.norm(v))
        assert abs(norm(ours[0:3]) - np.sin(2 * np.arcsin(norm(theirs[3:6])))) < 1e-12  # weld rotation
        for a, b in ((slice(3, 6), slice(0, 3)), (slice(6, 9), slice(6, 9)), (slice(9, 12), slice(9, 12))):
            assert abs(norm(ours[a]) - norm(theirs[b])) < 1e-12
        if scale == 0.0:
            assert np.abs(ours).max() < 1e-12


@pytest.mark.parametrize("extra, words", [
    ('<option density="1000"/><default><geom fluidshape="ellipsoid"/></default>',
     ["body 'a': the ellipsoid fluid model (fluidshape) is not carried over"]),
    ('<tendon><spatial name="rope"><site site="s1"/><site site="s2"/></spatial></tendon>',
     ["tendon 'rope'", "spatial tendon not carried over"]),
    ('<tendon><fixed name="lim" limited="true" range="-1 1" frictionloss="0.1"><joint joint="j" coef="1"/>'
     '</fixed></tendon>', ["tendon 'lim': limit not carried over", "tendon 'lim': frictionloss"]),
])
def test_what_is_not_carried_over_is_named(extra, words):
    xml = ('<mujoco><worldbody><site name="s1"/><body name="a"><joint name="j"/><geom size="0.1" mass="1"/>'
           '<site name="s2" pos="0 0 0.1"/></body></worldbody>' + extra + "</mujoco>")
    notes = " | ".join(load_mjcf(xml).notes)
    for w in words:
        assert w in notes, (w, notes)


def test_a_lone_tendon_over_two_joints_couples_them_as_a_gripper_does():
    """``<tendon tendon1="coupling"/>`` over two joints (dm_control's manipulator couples
    its thumb and finger so): ``c1 q1 + c2 q2 = a0``, MuJoCo's residual is ours times c1;
    disabled gravity and dampers are taken out as MuJoCo does."""
    xml = ('<mujoco><option><flag gravity="disable" damper="disable"/></option><worldbody>'
           '<body name="a"><joint name="thumb" axis="0 1 0" damping="3"/><geom size="0.1" pos="0.2 0 0" mass="1"/></body>'
           '<body name="b" pos="0 0.5 0"><joint name="finger" axis="0 1 0"/><geom size="0.1" pos="0.2 0 0" mass="1"/>'
           '</body></worldbody><tendon><fixed name="coupling"><joint joint="thumb" coef="-.5"/>'
           '<joint joint="finger" coef=".5"/></fixed></tendon>'
           '<equality><tendon name="grip" tendon1="coupling" polycoef="0.1 0 0 0 0"/></equality></mujoco>')
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    imp = load_mjcf(xml)
    assert float(np.abs(np.asarray(imp.model.gravity)).max()) == 0.0 and float(imp.model.damping[0]) == 0.0
    for q in ([0.3, -0.2], [1.0, 0.5]):
        d.qpos[:] = np.asarray(q) + m.qpos0
        mujoco.mj_forward(m, d)
        res = np.asarray(_residual(imp.model, np.asarray(q), imp.closures)).reshape(-1)
        np.testing.assert_allclose(-0.5 * res[np.asarray(imp.closures.rows)], d.efc_pos, atol=1e-14)


def test_a_tendon_equality_over_several_joints_is_refused_by_name():
    xml = TENDONS.replace('tendon1="t4" tendon2="t3"', 'tendon1="t4" tendon2="spring"')
    with pytest.raises(ValueError, match="tendon 'spring' spans 2 joints; tendon equalities are carried over"):
        load_mjcf(xml)
