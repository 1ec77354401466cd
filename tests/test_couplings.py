"""Coordinate couplings (MuJoCo joint equalities, URDF ``<mimic>``, gears): constrained
accelerations equal reduced-coordinate dynamics built from MuJoCo's own mass matrix and
bias forces, and Pinocchio's mimic-joint model (a synthetic arm and the Panda's fingers);
a coupled run keeps its coupling and its energy; the coefficients carry gradients; the
coupling survives the round trip to MJCF; bad specs are named."""

from __future__ import annotations

import dataclasses
import json
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pinocchio as pin
import pytest

import diffmb
from diffmb.closures import dynamics as cs
from diffmb.closures.couplings import coupling
from diffmb.closures.nodes import loop_closures, position_residual
from diffmb.formats.loops import closed_system
from diffmb.formats.mjcf import to_mjcf
from diffmb.formats.mjcf_import import load_mjcf
from diffmb.formats.urdf import mimic_closures
from robots import robot_urdfs

COEF = np.array([0.1, 0.5, -0.3, 0.2, 0.05])

# Three joints with reference angles (qpos0 != 0), joint 3 a quartic of joint 2 (MuJoCo:
# y - y0 = sum a_k (x - x0)^k), joint 4 a slide held at a0 by a one-joint equality.
ARM = f'''<mujoco><option gravity="0.2 -0.5 -9.81"/><worldbody>
<body name="l1"><joint name="j1" type="hinge" axis="0 1 0" ref="0.2"/>
  <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.03" mass="1.0"/>
  <body name="l2" pos="0.5 0 0" quat="0.9 0.1 0 0.2"><joint name="j2" type="hinge" axis="0 1 0.3" ref="-0.3"/>
    <geom type="box" size="0.2 0.05 0.03" pos="0.2 0.02 0" mass="0.7"/>
    <body name="l3" pos="0.4 0 0"><joint name="j3" type="hinge" axis="1 0 0.2" ref="0.4" pos="0.02 0 0"/>
      <geom type="box" size="0.1 0.04 0.02" pos="0.1 0 0.01" mass="0.4"/>
      <body name="l4" pos="0.2 0 0"><joint name="j4" type="slide" axis="0 0 1"/>
        <geom type="sphere" size="0.03" mass="0.2"/></body>
    </body></body></body></worldbody>
<equality><joint name="gear" joint1="j3" joint2="j2" polycoef="{' '.join(map(str, COEF))}"/>
  <joint name="lock" joint1="j4" polycoef="0.05 0 0 0 0"/></equality></mujoco>'''


def _poly(c, x):
    p = sum(a * x**k for k, a in enumerate(c))
    dp = sum(k * a * x ** (k - 1) for k, a in enumerate(c) if k)
    ddp = sum(k * (k - 1) * a * x ** (k - 2) for k, a in enumerate(c) if k > 1)
    return p, dp, ddp


def _coupled_state(rng):
    """MuJoCo ``(qpos, qvel)`` on the couplings of ARM, and the map to independent rates."""
    m = mujoco.MjModel.from_xml_string(ARM)
    x = 0.6 * rng.normal()
    p, dp, ddp = _poly(COEF, x)
    qpos = m.qpos0 + np.array([0.7 * rng.normal(), x, p, 0.05])
    w1, w2 = rng.normal(size=2)
    qvel = np.array([w1, w2, dp * w2, 0.0])
    T = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, dp], [0.0, 0.0]])   # qd = T s_dot
    c = np.array([0.0, 0.0, ddp * w2**2, 0.0])                       # qdd = T s_ddot + c
    return m, qpos, qvel, T, c


# evaluated as one program each (operation by operation they compiled ~500 small ones)
_accel = eqx.filter_jit(cs.constrained_acceleration)
_residual = eqx.filter_jit(position_residual)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_joint_equality_matches_reduced_mujoco_dynamics(seed):
    rng = np.random.default_rng(seed)
    m, qpos, qvel, T, c = _coupled_state(rng)
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(m, d)
    M = np.zeros((m.nv, m.nv))
    for k in range(m.nv):  # MuJoCo's mass matrix, column by column
        col = np.zeros(m.nv)
        mujoco.mj_mulM(m, d, col, np.eye(m.nv)[k].copy())
        M[:, k] = col
    sdd = np.linalg.solve(T.T @ M @ T, T.T @ (-d.qfrc_bias - M @ c))
    ref = T @ sdd + c

    imp = load_mjcf(ARM)
    assert [cl.name for cl in imp.closures.closures] == ["gear", "lock"]
    assert imp.closures.labels == ["gear:q", "lock:q"]
    q, qd = jnp.asarray(qpos - m.qpos0), jnp.asarray(qvel)
    assert np.abs(np.asarray(_residual(imp.model, q, imp.closures))).max() < 1e-14
    qdd, _ = _accel(imp.model, q, qd, jnp.zeros(4), imp.closures)
    np.testing.assert_allclose(np.asarray(qdd), ref, atol=1e-10 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("stab", [
    "none",  # the coupling held by the dynamics alone: the sharpest of the three
    # each stabilization compiles a dopri8 run of its own (~4 s): the other two in the slow job
    pytest.param("projection", marks=pytest.mark.slow), pytest.param("baumgarte", marks=pytest.mark.slow)])
def test_coupled_run_keeps_coupling_and_energy(stab):
    xml = ARM.replace("</mujoco>", '<keyframe><key name="k" qpos="0.5 0.1 {} 0.05" qvel="1 -2 {} 0"/>'
                      '</keyframe></mujoco>')
    m = mujoco.MjModel.from_xml_string(ARM)
    x = 0.1 - m.qpos0[1]
    p, dp, _ = _poly(COEF, x)
    xml = xml.format(p + m.qpos0[2], -2.0 * dp)
    imp = load_mjcf(xml)
    tr = diffmb.simulate(imp.system(stabilization=stab, baumgarte=(5.0, 5.0)), t1=2.0,
                         solver="dopri8", rtol=1e-10, atol=1e-12, saveat=41)
    s = tr.summary()
    assert tr.status == "success"
    assert s["violation"]["position_max"] < 1e-8, s["violation"]
    assert s["energy"]["max_abs_change"] < 1e-7, s["energy"]
    qs = np.asarray(tr.xs[:, :4])
    assert np.ptp(qs[:, 1]) > 1.0   # it moved: the coupling held over a large swing
    np.testing.assert_allclose(qs[:, 2], _poly(COEF, qs[:, 1])[0], atol=1e-8)
    np.testing.assert_allclose(qs[:, 3], 0.05, atol=1e-9)  # held at a0 by "lock"


def test_coupling_coefficients_carry_gradients():
    imp = load_mjcf(ARM)
    rng = np.random.default_rng(3)
    m, qpos, qvel, _, _ = _coupled_state(rng)
    q, qd = jnp.asarray(qpos - m.qpos0), jnp.asarray(qvel)

    def accel(a1):
        loops = dataclasses.replace(imp.closures, coef=imp.closures.coef.at[0, 1].set(a1))
        return jnp.sum(jnp.sin(cs.constrained_acceleration(imp.model, q, qd, jnp.zeros(4), loops)[0]))

    g = float(jax.jit(jax.grad(accel))(COEF[1]))
    h = 1e-6
    accel = jax.jit(accel)
    fd = (float(accel(COEF[1] + h)) - float(accel(COEF[1] - h))) / (2 * h)
    assert abs(g) > 1e-3
    assert g == pytest.approx(fd, rel=1e-7)


def test_couplings_survive_the_round_trip_to_mjcf():
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_body("a", "world", "revolute", axis=(0, 1, 0), mass=1.0, com=(0.3, 0, 0), inertia=np.diag([0.01, 0.03, 0.03]))
    b.add_body("b", "a", "revolute", axis=(0, 0, 1), pos=(0.6, 0, 0), mass=0.5, com=(0.2, 0, 0),
               inertia=np.diag([0.01, 0.02, 0.02]))
    b.add_body("c", "b", "prismatic", axis=(1, 0, 0), pos=(0.4, 0, 0), mass=0.2, inertia=np.diag([1e-3] * 3))
    model = b.build()
    loops = loop_closures(model, [coupling("gear", 1, 0, (0.0, -2.0, 0.3)), coupling("hold", 2, None, (0.1,))])
    back = load_mjcf(to_mjcf(model, loops))
    np.testing.assert_allclose(np.asarray(back.closures.coef), np.asarray(loops.coef), atol=1e-15)
    assert [c.coords for c in back.closures.closures] == [(1, 0), (2,)]
    q, qd = jnp.array([0.3, -0.6 + 0.027, 0.1]), jnp.array([0.5, -1.0 + 0.09, 0.0])
    a1 = _accel(model, q, qd, jnp.zeros(3), loops)[0]
    a2 = _accel(back.model, q, qd, jnp.zeros(3), back.closures)[0]
    np.testing.assert_allclose(np.asarray(a2), np.asarray(a1), atol=1e-12)


# ------------------------------------------------------------------ URDF <mimic>


def _inertial(mass, xyz="0.3 0.05 0"):
    return (f"<inertial><origin xyz='{xyz}' rpy='0.1 0.2 0.3'/><mass value='{mass}'/><inertia ixx='0.02' "
            f"ixy='0.001' ixz='0' iyy='0.03' iyz='0.002' izz='0.04'/></inertial>")


def _joint(name, parent, child, axis="0 0 1", jtype="revolute", extra=""):
    return (f"<joint name='{name}' type='{jtype}'><parent link='{parent}'/><child link='{child}'/>"
            f"<origin xyz='0.5 0 0' rpy='0.2 0 0.1'/><axis xyz='{axis}'/>"
            f"<limit lower='-3' upper='3' effort='1' velocity='1'/>{extra}</joint>")


MIMIC_ARM = ("<robot name='r'><link name='base'/>" + "".join(
    f"<link name='{n}'>{_inertial(m)}</link>" for n, m in (("a", 1.0), ("b", 0.7), ("c", 0.4)))
    + _joint("j1", "base", "a") + _joint("j2", "a", "b", axis="0 1 0")
    + _joint("j3", "b", "c", axis="1 0 0.2", jtype="prismatic",
             extra="<mimic joint='j2' multiplier='-0.6' offset='0.1'/>") + "</robot>")


def _pin_mimic_check(path_or_xml, seed, *, from_file):
    pmodel = (pin.buildModelFromUrdf(str(path_or_xml), mimic=True) if from_file
              else pin.buildModelFromXML(path_or_xml, mimic=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = diffmb.load_urdf(path_or_xml)
    specs = mimic_closures(path_or_xml)
    loops = diffmb.close_loops(model, specs)
    pmodel.gravity.linear = np.asarray(model.gravity)
    mimic = {s["joint"]: s for s in specs}
    primary = [n for n in model.joint_names if n not in mimic]
    assert pmodel.nv == len(primary)
    rng = np.random.default_rng(seed)
    q, qd = np.zeros(model.nq), np.zeros(model.nv)
    qp, vp = np.zeros(pmodel.nq), np.zeros(pmodel.nv)
    for n in primary:
        i = model.joint_names.index(n)
        j = pmodel.joints[pmodel.getJointId(n)]
        q[i], qd[i] = rng.uniform(-0.5, 0.5), rng.normal()
        qp[j.idx_q], vp[j.idx_v] = q[i], qd[i]
    for n, s in mimic.items():
        i, k = model.joint_names.index(n), model.joint_names.index(s["of"])
        q[i], qd[i] = s["ratio"] * q[k] + s["offset"], s["ratio"] * qd[k]
    data = pmodel.createData()
    M = pin.crba(pmodel, data, qp)
    M = np.triu(M) + np.triu(M, 1).T
    ref = np.linalg.solve(M, -pin.nle(pmodel, data, qp, vp))
    qdd, _ = _accel(model, jnp.asarray(q), jnp.asarray(qd), jnp.zeros(model.nv), loops)
    qdd = np.asarray(qdd)
    for n in primary:
        j = pmodel.joints[pmodel.getJointId(n)]
        assert qdd[model.joint_names.index(n)] == pytest.approx(ref[j.idx_v], abs=1e-9 * max(1.0, np.abs(ref).max()))
    for n, s in mimic.items():
        assert qdd[model.joint_names.index(n)] == pytest.approx(s["ratio"] * qdd[model.joint_names.index(s["of"])],
                                                                abs=1e-12)
    return np.abs(ref).max()


@pytest.mark.parametrize("seed", [0, 1])
def test_urdf_mimic_matches_pinocchio_mimic_model(seed):
    assert mimic_closures(MIMIC_ARM) == [{"name": "mimic_j3", "kind": "joint", "joint": "j3", "of": "j2",
                                          "ratio": -0.6, "offset": 0.1}]
    assert _pin_mimic_check(MIMIC_ARM, seed, from_file=False) > 0.1


# slow job: a second robot for the mimic cross-check (~4 s); Pinocchio's mimic model stays in the
# default job (test_urdf_mimic_matches_pinocchio_mimic_model)
@pytest.mark.slow
def test_panda_fingers_mimic_matches_pinocchio():
    (path,) = [p for p in robot_urdfs() if p.name == "panda.urdf"]
    assert [s["joint"] for s in mimic_closures(path)] == ["panda_finger_joint2"]
    _pin_mimic_check(path, 0, from_file=True)


def test_joint_closures_in_a_loop_file(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = diffmb.load_urdf(MIMIC_ARM)
    path = tmp_path / "mimic.json"
    path.write_text(json.dumps({"closures": [{"name": "m", "kind": "mimic", "joint": "j3", "of": "j2",
                                              "ratio": -0.6, "offset": 0.1}],
                                "initial": {"q": {"j2": 0.4}, "fixed": ["j2"], "rates": {"j2": 1.5}}}))
    system = closed_system(model, path)
    assert float(system.q0[2]) == pytest.approx(-0.6 * 0.4 + 0.1, abs=1e-12)
    assert float(system.qd0[2]) == pytest.approx(-0.6 * 1.5, abs=1e-12)
    poly = diffmb.close_loops(model, [{"kind": "joint", "joint": "j3", "of": "j2", "poly": [0.1, -0.6]}])
    np.testing.assert_array_equal(np.asarray(poly.coef), np.asarray(system.closures.coef))


@pytest.mark.parametrize("spec, words", [
    ({"kind": "joint", "of": "j2"}, ["missing 'joint'"]),
    ({"kind": "joint", "joint": "j9", "of": "j2"}, ["'joint' names 'j9'", "joints: j1, j2, j3"]),
    ({"kind": "joint", "joint": "j3", "of": "j3"}, ["cannot be coupled to itself"]),
    ({"kind": "joint", "joint": "j3", "of": "j2", "ratio": "two"}, ["'ratio' must be a finite number"]),
    ({"kind": "joint", "joint": "j3", "of": "j2", "poly": [1, 2, 3, 4, 5, 6]}, ["'poly' must be 1 to 5"]),
    ({"kind": "joint", "joint": "j3", "of": "j2", "poly": [1], "ratio": 2}, ["either 'poly' or 'ratio'"]),
    ({"kind": "joint", "joint": "j3", "a": "b"}, ["unknown key(s) 'a'", "valid keys: name, kind, joint"]),
])
def test_bad_coupling_specs_are_named(spec, words):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = diffmb.load_urdf(MIMIC_ARM)
    with pytest.raises(ValueError) as e:
        diffmb.close_loops(model, [spec])
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_ball_joint_equality_is_refused_on_one_line():
    ball = ('<mujoco><worldbody><body name="a"><joint name="j1" type="ball"/><geom size="0.1" mass="1"/>'
            '<body name="b" pos="0.3 0 0"><joint name="j2"/><geom size="0.1" mass="1"/></body></body></worldbody>'
            '<equality><joint name="couple" joint1="j1" joint2="j2"/></equality></mujoco>')
    with pytest.raises(ValueError) as e:   # MuJoCo's compiler refuses it first; its words, one line
        load_mjcf(ball)
    assert "MuJoCo's compiler" in str(e.value) and "'couple'" in str(e.value) and "\n" not in str(e.value)


def _arm_off_its_equalities():
    m = mujoco.MjModel.from_xml_string(ARM)
    qpos = m.qpos0 + np.array([0.3, 0.2, 0.5, 0.0])      # j3 off its polynomial by ~0.4
    return ARM.replace("</mujoco>", '<keyframe><key name="k" qpos="{}" qvel="1 2 0 0.3"/></keyframe>'
                       '</mujoco>'.format(" ".join(map(str, qpos))))


def test_a_keyframe_off_the_equalities_is_moved_onto_them_and_said():
    imp = load_mjcf(_arm_off_its_equalities())
    assert any("violated equality 'gear'" in n for n in imp.notes)
    assert any("initial velocities violated" in n for n in imp.notes)
    assert np.abs(np.asarray(_residual(imp.model, imp.q0, imp.closures))).max() < 1e-10
    G = np.asarray(eqx.filter_jit(diffmb.closures.nodes.jacobian)(imp.model, imp.q0, imp.closures))
    assert np.abs(G @ np.asarray(imp.qd0)).max() < 1e-10
    assert float(imp.q0[0]) == pytest.approx(0.3, abs=0.05)   # minimum-norm: j1 barely moves


@pytest.mark.slow  # a console-script process compiling the arm (~10 s); the notes themselves are
# checked in the default job (the test above)
def test_a_keyframe_off_the_equalities_is_said_by_the_cli_as_one_warning_line_each(tmp_path):
    from test_cli_robustness import _script

    path = tmp_path / "arm.xml"
    path.write_text(_arm_off_its_equalities())
    p = _script("run", str(path), "--t1", "0.01", "--quiet", "--no-plot", "--out", str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr
    err = [line for line in p.stderr.splitlines() if "warning" in line]
    assert any(line.startswith("diffmb: warning: ") and "violated equality 'gear'" in line for line in err)
    assert all(line.startswith("diffmb: warning: ") for line in err), err
