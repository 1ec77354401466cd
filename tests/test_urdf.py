"""URDF loader: conventions checked against closed forms and hand-built models."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb.formats.urdf import ROOT_JOINT


def _inertial(m, com=(0, 0, 0), rpy=(0, 0, 0), I=(0.1, 0.1, 0.1, 0, 0, 0)):
    ixx, iyy, izz, ixy, ixz, iyz = I
    return (
        f'<inertial><origin xyz="{" ".join(map(str, com))}" rpy="{" ".join(map(str, rpy))}"/>'
        f'<mass value="{m}"/><inertia ixx="{ixx}" iyy="{iyy}" izz="{izz}" ixy="{ixy}" '
        f'ixz="{ixz}" iyz="{iyz}"/></inertial>'
    )


def _joint(name, parent, child, jtype="revolute", xyz=(0, 0, 0), rpy=(0, 0, 0), axis=(0, 1, 0), extra=""):
    return (
        f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{" ".join(map(str, xyz))}" rpy="{" ".join(map(str, rpy))}"/>'
        f'<axis xyz="{" ".join(map(str, axis))}"/>{extra}</joint>'
    )


# ------------------------------------------------------------------ double pendulum

M1, M2, L1, C1, C2, I1, I2 = 1.3, 0.7, 0.9, 0.4, 0.35, 0.05, 0.02


def _pendulum_xml(reverse=False):
    links = (
        '<link name="base"/>'
        f'<link name="link1">{_inertial(M1, (0, 0, -C1), I=(I1 + 0.01, I1, 0.01, 0, 0, 0))}</link>'
        f'<link name="link2">{_inertial(M2, (0, 0, -C2), I=(I2 + 0.01, I2, 0.01, 0, 0, 0))}</link>'
    )
    j1 = _joint("j1", "base", "link1", extra='<dynamics damping="0.3"/><limit lower="-1" upper="2" effort="7" velocity="1"/>')
    j2 = _joint("j2", "link1", "link2", jtype="continuous", xyz=(0, 0, -L1))
    joints = j2 + j1 if reverse else j1 + j2
    return f'<robot name="dp">{links}{joints}</robot>'


def _pendulum_mass_matrix(q2):
    c = np.cos(q2)
    m11 = I1 + M1 * C1**2 + I2 + M2 * (L1**2 + C2**2 + 2 * L1 * C2 * c)
    m12 = I2 + M2 * (C2**2 + L1 * C2 * c)
    m22 = I2 + M2 * C2**2
    return np.array([[m11, m12], [m12, m22]])


def test_double_pendulum_mass_matrix_closed_form():
    model = diffmb.load_urdf(_pendulum_xml())
    assert model.joint_names == ("j1", "j2")
    for q in ([0.0, 0.0], [0.3, -1.1], [2.0, 2.5]):
        M = diffmb.mass_matrix(model, jnp.asarray(q))
        np.testing.assert_allclose(M, _pendulum_mass_matrix(q[1]), atol=1e-12)


def test_double_pendulum_gravity_torque():
    """Static torques: tau = g (m1 c1 + m2 l1) sin q1 + g m2 c2 sin(q1 + q2) about +y."""
    model = diffmb.load_urdf(_pendulum_xml())
    q = jnp.asarray([0.4, 0.7])
    tau = diffmb.inverse_dynamics(model, q, jnp.zeros(2), jnp.zeros(2))
    g = 9.81
    t2 = g * M2 * C2 * np.sin(q[0] + q[1])
    t1 = g * (M1 * C1 + M2 * L1) * np.sin(q[0]) + t2
    np.testing.assert_allclose(tau, [t1, t2], atol=1e-12)


def test_joint_fields_and_document_order():
    """q follows the <joint> document order even when it is not topological."""
    fwd = diffmb.load_urdf(_pendulum_xml())
    rev = diffmb.load_urdf(_pendulum_xml(reverse=True))
    assert rev.joint_names == ("j2", "j1")
    assert rev.coordinate_names == ("j2", "j1")
    q = jnp.asarray([0.3, -1.1])
    M = np.asarray(diffmb.mass_matrix(fwd, q))
    np.testing.assert_allclose(diffmb.mass_matrix(rev, q[::-1]), M[::-1, ::-1], atol=1e-12)
    qd, tau = jnp.asarray([0.5, -0.2]), jnp.asarray([0.1, 0.3])
    np.testing.assert_allclose(
        diffmb.forward_dynamics(rev, q[::-1], qd[::-1], tau[::-1]),
        np.asarray(diffmb.forward_dynamics(fwd, q, qd, tau))[::-1],
        atol=1e-12,
    )
    np.testing.assert_allclose(rev.damping, [0.0, 0.3])
    np.testing.assert_allclose(rev.lower, [-np.inf, -1.0])
    np.testing.assert_allclose(rev.upper, [np.inf, 2.0])
    np.testing.assert_allclose(rev.effort_limit, [np.inf, 7.0])


def test_path_source(tmp_path):
    p = tmp_path / "dp.urdf"
    p.write_text(_pendulum_xml())
    for src in (p, str(p)):
        model = diffmb.load_urdf(src)
        np.testing.assert_allclose(diffmb.mass_matrix(model, jnp.zeros(2)), _pendulum_mass_matrix(0.0), atol=1e-12)


# ----------------------------------------------------------------- conventions


def _rpy_matrix(r, p, y):
    """URDF's R = Rz(y) Ry(p) Rx(r), mapping child components to parent components."""
    cr, sr, cp, sp_, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp_], [0, 1, 0], [-sp_, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def test_joint_origin_rpy_convention():
    """rpy=(0,0,pi/2): a point on the child x axis lies along world y."""
    xml = (
        '<robot name="r"><link name="base"/>'
        f'<link name="a">{_inertial(1.0)}</link><link name="tip"/>'
        + _joint("j", "base", "a", xyz=(1, 0, 0), rpy=(0, 0, np.pi / 2), axis=(0, 0, 1))
        + _joint("f", "a", "tip", jtype="fixed", xyz=(0.5, 0, 0))
        + "</robot>"
    )
    model = diffmb.load_urdf(xml)
    E, r = diffmb.frame_pose(model, jnp.zeros(1), "tip")
    np.testing.assert_allclose(r, [1.0, 0.5, 0.0], atol=1e-12)
    # a quarter turn of the joint about its z axis carries the tip to world -x of the joint
    _, r = diffmb.frame_pose(model, jnp.asarray([np.pi / 2]), "tip")
    np.testing.assert_allclose(r, [0.5, 0.0, 0.0], atol=1e-12)


def test_general_rpy_matches_urdf_rotation():
    rpy = (0.3, -0.7, 1.9)
    xml = (
        '<robot name="r"><link name="base"/>'
        f'<link name="a">{_inertial(1.0)}</link>'
        + _joint("j", "base", "a", xyz=(0.1, 0.2, 0.3), rpy=rpy, axis=(0, 0, 1))
        + "</robot>"
    )
    model = diffmb.load_urdf(xml)
    E, r = diffmb.frame_pose(model, jnp.zeros(1), "a")
    np.testing.assert_allclose(np.asarray(E).T, _rpy_matrix(*rpy), atol=1e-12)
    np.testing.assert_allclose(r, [0.1, 0.2, 0.3], atol=1e-12)


def test_inertial_rpy_rotates_inertia_into_link_axes():
    """Inertial frame yawed by 90 deg: its x (ixx) is the link's y."""
    xml = (
        '<robot name="r"><link name="base"/>'
        f'<link name="a">{_inertial(2.0, com=(0.1, 0, 0), rpy=(0, 0, np.pi / 2), I=(1.0, 2.0, 2.5, 0, 0, 0))}</link>'
        + _joint("j", "base", "a")
        + "</robot>"
    )
    model = diffmb.load_urdf(xml)
    np.testing.assert_allclose(model.inertia[0], np.diag([2.0, 1.0, 2.5]), atol=1e-12)
    np.testing.assert_allclose(model.com[0], [0.1, 0.0, 0.0])


# --------------------------------------------------------------------- fixed joints


def _merged_xml(middle="fixed"):
    """base -j1-> a -f-> b (rotated origin, rotated inertial) -j2-> c."""
    return (
        '<robot name="m"><link name="base">' + _inertial(5.0) + "</link>"
        f'<link name="a">{_inertial(1.0, (0.1, 0.0, -0.2), (0.2, 0.1, 0.3), (0.05, 0.06, 0.07, 0.001, 0.0, 0.002))}</link>'
        f'<link name="b">{_inertial(0.8, (0.0, 0.15, -0.1), (-0.4, 0.5, 1.0), (0.03, 0.04, 0.05, 0.0, 0.003, 0.0))}</link>'
        f'<link name="c">{_inertial(0.6, (0.0, 0.0, -0.3), I=(0.02, 0.02, 0.01, 0, 0, 0))}</link>'
        + _joint("j2", "b", "c", xyz=(0.0, 0.0, -0.4), rpy=(0.1, 0.0, -0.2), axis=(1, 0, 0))
        + _joint("f", "a", "b", jtype=middle, xyz=(0.2, -0.1, -0.5), rpy=(0.4, -0.3, 0.8), axis=(0, 0, 1))
        + _joint("j1", "base", "a", rpy=(0.0, 0.2, 0.0))
        + "</robot>"
    )


def test_fixed_joint_merges_mass_and_inertia():
    """Merging a fixed link equals locking a prismatic joint at 0 (dynamics on the rest)."""
    merged = diffmb.load_urdf(_merged_xml())
    locked = diffmb.load_urdf(_merged_xml("prismatic"))
    assert merged.joint_names == ("j2", "j1")
    assert merged.body_names == ("a", "c")
    assert "b" in merged.frame_names
    np.testing.assert_allclose(jnp.sum(merged.mass), 1.0 + 0.8 + 0.6)
    keep = [locked.joint_names.index(n) for n in merged.joint_names]
    rng = np.random.default_rng(0)
    for _ in range(3):
        q = rng.normal(size=2)
        qd = rng.normal(size=2)
        qL = np.zeros(3)
        qdL = np.zeros(3)
        qL[keep], qdL[keep] = q, qd
        ML = np.asarray(diffmb.mass_matrix(locked, jnp.asarray(qL)))
        np.testing.assert_allclose(diffmb.mass_matrix(merged, jnp.asarray(q)), ML[np.ix_(keep, keep)], atol=1e-12)
        bL = np.asarray(diffmb.bias_forces(locked, jnp.asarray(qL), jnp.asarray(qdL)))
        np.testing.assert_allclose(diffmb.bias_forces(merged, jnp.asarray(q), jnp.asarray(qd)), bL[keep], atol=1e-12)
        # the merged frame sits where the locked body is
        Em, rm = diffmb.frame_pose(merged, jnp.asarray(q), "b")
        El, rl = diffmb.frame_pose(locked, jnp.asarray(qL), "b")
        np.testing.assert_allclose(Em, El, atol=1e-12)
        np.testing.assert_allclose(rm, rl, atol=1e-12)


def test_fixed_merge_by_hand():
    """Two point-like masses welded on one link: total mass, com and inertia by hand."""
    xml = (
        '<robot name="h"><link name="base"/>'
        f'<link name="a">{_inertial(1.0, (0, 0, -1), I=(0.0, 0.0, 0.0, 0, 0, 0))}</link>'
        f'<link name="b">{_inertial(3.0, (0, 0, 0), I=(0.0, 0.0, 0.0, 0, 0, 0))}</link>'
        + _joint("j", "base", "a", axis=(0, 1, 0))
        + _joint("w", "a", "b", jtype="fixed", xyz=(0, 0, -2), rpy=(0.3, 0.2, 0.1))
        + "</robot>"
    )
    model = diffmb.load_urdf(xml)
    np.testing.assert_allclose(model.mass, [4.0])
    np.testing.assert_allclose(model.com[0], [0, 0, -1.75], atol=1e-12)
    # pendulum about y: M = sum m_i d_i^2 = 1*1 + 3*4
    np.testing.assert_allclose(diffmb.mass_matrix(model, jnp.asarray([0.7])), [[13.0]], atol=1e-12)


# -------------------------------------------------------------------- floating base


def test_floating_base_layout_and_free_fall():
    model = diffmb.load_urdf(_merged_xml(), floating_base=True)
    assert model.nq == 6 + 2
    assert model.joint_names == (ROOT_JOINT, "j2", "j1")
    assert model.joint_kinds[0] == "free" and model.body_names[0] == "base"
    assert model.coordinate_names[:6] == tuple(f"{ROOT_JOINT}_{s}" for s in ("sigma1", "sigma2", "sigma3", "x", "y", "z"))
    np.testing.assert_allclose(jnp.sum(model.mass), 5.0 + 1.0 + 0.8 + 0.6)
    # at rest, with no torques, the whole robot falls rigidly: joints do not accelerate
    sigma = np.array([0.2, -0.1, 0.3])
    q = jnp.concatenate([jnp.asarray(sigma), jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray([0.4, -0.6])])
    qdd = diffmb.forward_dynamics(model, q, jnp.zeros(8), jnp.zeros(8))
    E = np.asarray(diffmb.math.spatial.mrp_to_dcm(jnp.asarray(sigma)))
    np.testing.assert_allclose(qdd[:3], 0.0, atol=1e-12)
    np.testing.assert_allclose(qdd[3:6], E @ np.array([0.0, 0.0, -9.81]), atol=1e-12)
    np.testing.assert_allclose(qdd[6:], 0.0, atol=1e-12)


# ---------------------------------------------------------------------- bad input

_A = f'<link name="base"/><link name="a">{_inertial(1.0)}</link>'
_B = f'<link name="b">{_inertial(1.0)}</link>'
_LIM_ABC = "<limit lower='abc'/>"
_LIM_SWAP = "<limit lower='2' upper='1'/>"
_DAMP_NEG = "<dynamics damping='-1'/>"

BAD = [
    ('<robot name="x"><link name="a"></robot>', "XML parse error"),
    ('<model name="x"/>', "top-level element is <model>, expected <robot>"),
    ('<robot name="x"></robot>', "no <link>"),
    (f'<robot>{_A}<joint name="j1" type="revolute"><child link="a"/></joint></robot>', "joint 'j1': missing <parent"),
    (f'<robot>{_A}<joint name="j1" type="revolute"><parent link="base"/></joint></robot>', "joint 'j1': missing <child"),
    (f'<robot>{_A}<joint name="j1"><parent link="base"/><child link="a"/></joint></robot>', "joint 'j1': missing attribute 'type'"),
    (f'<robot>{_A}{_joint("j1", "base", "zz")}</robot>', "joint 'j1' <child> names unknown link 'zz'"),
    (f'<robot>{_A}{_joint("j1", "qq", "a")}</robot>', "joint 'j1' <parent> names unknown link 'qq'"),
    (f'<robot>{_A}{_B}{_joint("j1", "base", "a")}{_joint("j2", "b", "a")}</robot>', "link 'a' has two parents"),
    (f'<robot>{_A}{_B}{_joint("j1", "a", "b")}{_joint("j2", "b", "a")}</robot>', r"cycle through links \['a', 'b'\]"),
    (f'<robot>{_A}{_B}<link name="c"/>{_joint("j1", "base", "a")}{_joint("j2", "b", "c")}{_joint("j3", "c", "b")}</robot>',
     r"cycle through links \['b', 'c'\]"),
    (f'<robot><link name="a"/><link name="b"/>{_joint("j1", "a", "b")}{_joint("j2", "b", "a")}</robot>', "cycle"),
    (f'<robot>{_A}{_B}{_joint("j1", "base", "a")}</robot>', r"more than one root link.*\['base', 'b'\]"),
    (f'<robot>{_A}{_joint("j1", "base", "a", xyz=("1", "x", "2"))}</robot>', "joint 'j1' <origin>: attribute 'xyz'='1 x 2'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", axis=(0, 0))}</robot>', "joint 'j1' <axis>: attribute 'xyz'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", axis=(0, 0, 0))}</robot>', "joint 'j1' <axis>.*non-zero"),
    (f'<robot>{_A}{_joint("j1", "base", "a", extra=_LIM_ABC)}</robot>', "joint 'j1' <limit>: attribute 'lower'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", extra=_LIM_SWAP)}</robot>', "joint 'j1' <limit>: lower"),
    (f'<robot>{_A}{_joint("j1", "base", "a", extra=_DAMP_NEG)}</robot>', "joint 'j1' <dynamics>: damping"),
    (f'<robot><link name="base"/><link name="a">{_inertial(-1.0)}</link>{_joint("j1", "base", "a")}</robot>',
     "link 'a' <mass>: mass must be non-negative"),
    (f'<robot><link name="base"/><link name="a">{_inertial("heavy")}</link>{_joint("j1", "base", "a")}</robot>',
     "link 'a' <mass>: attribute 'value'='heavy'"),
    (f'<robot><link name="base"/><link name="a"/>{_joint("j1", "base", "a")}</robot>',
     "mass matrix is singular: joint.*'j1'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", jtype="floating")}</robot>', "joint 'j1': unsupported joint type 'floating'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", jtype="planar")}</robot>', "joint 'j1': unsupported joint type 'planar'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", jtype="hinge")}</robot>', "joint 'j1': unsupported joint type 'hinge'"),
    (f'<robot>{_A}{_joint("j1", "base", "a", jtype="fixed")}</robot>', "no movable joints.*floating_base=True"),
    ('<robot><link name="base"/></robot>', "no movable joints.*floating_base=True"),
    (f'<robot><link name="base"/><link name="world">{_inertial(1.0)}</link>{_joint("j1", "base", "world")}</robot>',
     "link 'world' is not the root"),
    (f'<robot>{_A}{_A}</robot>', "duplicate <link name='base'>"),
    (f'<robot>{_A}{_B}{_joint("j1", "base", "a")}{_joint("j1", "a", "b")}</robot>', "duplicate <joint name='j1'>"),
]


@pytest.mark.parametrize("xml,match", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_raises(xml, match):
    with pytest.raises(ValueError, match=match):
        diffmb.load_urdf(xml)


def test_bad_file_names_the_file(tmp_path):
    p = tmp_path / "broken.urdf"
    p.write_text(f'<robot>{_A}{_joint("j1", "base", "a", jtype="planar")}</robot>')
    with pytest.raises(ValueError, match=re.escape(str(p)) + ".*joint 'j1'.*planar"):
        diffmb.load_urdf(p)


# ---------------------------------------------------------------------- real-file idioms

_TRIANGLE = f'<robot><link name="base"/><link name="a">{_inertial(1.0, I=(1.0, 1.0, 3.0, 0, 0, 0))}</link>{_joint("j1", "base", "a")}</robot>'
_INDEFINITE = f'<robot><link name="base"/><link name="a">{_inertial(1.0, I=(1.0, -2.0, 1.5, 0, 0, 0))}</link>{_joint("j1", "base", "a")}</robot>'


@pytest.mark.parametrize("xml, problem", [(_TRIANGLE, "triangle"), (_INDEFINITE, "positive")])
def test_invalid_inertia_policy_warn_error_repair(xml, problem):
    with pytest.warns(UserWarning, match=f"URDF string: body 'a': .*{problem}.*kept as given"):
        if xml is _INDEFINITE:  # kept, it makes M indefinite about the joint axis: refused
            with pytest.raises(ValueError, match="not positive definite.*'j1'.*inertia='repair'"):
                diffmb.load_urdf(xml)
        else:
            kept = diffmb.load_urdf(xml)
            assert float(kept.inertia[0][2, 2]) == 3.0  # as written
    with pytest.raises(ValueError, match=f"body 'a': .*{problem}.*inertia='repair'"):
        diffmb.load_urdf(xml, inertia="error")
    with pytest.warns(UserWarning, match="nearest valid inertia"):
        fixed = diffmb.load_urdf(xml, inertia="repair")
    a, b, c = np.linalg.eigvalsh(np.asarray(fixed.inertia[0]))
    assert a >= 0 and a + b >= c - 1e-12  # valid now
    # nearest: no valid tensor is closer than the projection (checked against a scan)
    I0 = np.diag([1.0, 1.0, 3.0]) if xml is _TRIANGLE else np.diag([1.0, -2.0, 1.5])
    rng = np.random.default_rng(0)
    d = np.linalg.norm(np.asarray(fixed.inertia[0]) - I0)
    for _ in range(2000):
        ev = np.sort(rng.uniform(0, 4, 3))
        if ev[0] + ev[1] >= ev[2]:
            assert np.linalg.norm(np.diag(ev) - np.diag(np.linalg.eigvalsh(I0))) >= d - 1e-12


def test_invalid_placeholder_merged_into_a_valid_body_is_accepted():
    """A microgram placeholder with an indefinite tensor, fixed to a real link, vanishes
    in the merge: no warning."""
    xml = (f'<robot><link name="base"/><link name="a">{_inertial(2.0)}</link>'
           f'<link name="tip">{_inertial(1e-9, I=(1e-9, -2e-9, 1.5e-9, 0, 0, 0))}</link>'
           f'{_joint("j1", "base", "a")}{_joint("f", "a", "tip", jtype="fixed")}</robot>')
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diffmb.load_urdf(xml)


def test_point_mass_round_off_is_not_indefinite():
    xml = (f'<robot><link name="base"/><link name="a">{_inertial(1.0, com=(0, 0, -1), I=(0, 0, 0, 2.4e-35, 0, 0))}'
           f'</link>{_joint("j1", "base", "a")}</robot>')
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = diffmb.load_urdf(xml)
    assert float(diffmb.mass_matrix(model, jnp.zeros(1))[0, 0]) == pytest.approx(1.0)  # m l^2


def test_massless_virtual_links_of_a_three_axis_hip():
    """Three revolute joints through one point with two massless links between them: the
    mass matrix is the one of a single link on a spherical joint (regular)."""
    I = (0.3, 0.2, 0.1, 0, 0, 0)
    xml = (f'<robot><link name="base"/><link name="v1"/><link name="v2"/><link name="leg">{_inertial(2.0, com=(0, 0, -0.5), I=I)}</link>'
           f'{_joint("hx", "base", "v1", axis=(1, 0, 0))}{_joint("hy", "v1", "v2", axis=(0, 1, 0))}'
           f'{_joint("hz", "v2", "leg", axis=(0, 0, 1))}</robot>')
    model = diffmb.load_urdf(xml)
    M = np.asarray(diffmb.mass_matrix(model, jnp.zeros(3)))
    # at q = 0 the three axes are the leg's body axes: M = I_o (inertia about the hip point)
    I_o = np.diag([0.3, 0.2, 0.1]) + 2.0 * (0.25 * np.eye(3) - np.outer([0, 0, -0.5], [0, 0, -0.5]))
    np.testing.assert_allclose(M, I_o, atol=1e-12)
    a = diffmb.forward_dynamics(model, jnp.zeros(3), jnp.zeros(3), jnp.ones(3))
    np.testing.assert_allclose(np.asarray(a), np.linalg.solve(I_o, np.ones(3) - np.asarray(
        diffmb.inverse_dynamics(model, jnp.zeros(3), jnp.zeros(3), jnp.zeros(3)))), atol=1e-12)


def test_massless_fixed_child_with_inertia_is_merged():
    """A fixed child of zero mass but nonzero rotational inertia (Bolt's placeholders):
    its inertia adds to the parent's; it used to be dropped."""
    Ic = (0.01, 0.02, 0.03, 0, 0, 0)
    xml = (f'<robot><link name="base"/><link name="a">{_inertial(1.0, com=(0, 0, -1))}</link>'
           f'<link name="wheel">{_inertial(0.0, I=Ic)}</link>'
           f'{_joint("j1", "base", "a", axis=(0, 0, 1))}{_joint("f", "a", "wheel", jtype="fixed", xyz=(0, 0, -1))}</robot>')
    model = diffmb.load_urdf(xml)
    # about the z axis: the link's own 0.1 + m d^2 with d = 0 (com on the axis) + the wheel's 0.03
    assert float(diffmb.mass_matrix(model, jnp.zeros(1))[0, 0]) == pytest.approx(0.1 + 0.03, abs=1e-14)


def test_root_link_named_world():
    xml = (f'<robot><link name="world"/><link name="base">{_inertial(2.0)}</link><link name="a">{_inertial(1.0)}</link>'
           f'{_joint("fix", "world", "base", jtype="fixed")}{_joint("j1", "base", "a")}</robot>')
    fixed = diffmb.load_urdf(xml)
    assert fixed.nq == 1
    floating = diffmb.load_urdf(xml, floating_base=True)
    assert floating.body_names[0] == "world_link" and floating.nv == 7
    assert float(floating.mass[0]) == pytest.approx(2.0)  # base merged into the free body


_MIMIC = "<mimic joint='j1' multiplier='1'/>"


def test_mimic_is_reported_not_ignored():
    xml = (f'<robot><link name="base"/><link name="a">{_inertial(1.0)}</link><link name="b">{_inertial(1.0)}</link>'
           f'{_joint("j1", "base", "a")}{_joint("j2", "a", "b", extra=_MIMIC)}</robot>')
    with pytest.warns(UserWarning, match="joint 'j2' <mimic joint='j1'> is not enforced"):
        model = diffmb.load_urdf(xml)
    assert model.nq == 2
