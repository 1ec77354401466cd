"""The regularity check behind accepting massless links: a joint is judged by the whole
subtree it moves, at generic poses, relative to the model's inertia scale; a file
Pinocchio loads with a regular mass matrix loads here too, and a joint that truly moves
nothing is refused by name."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import diffmb
from diffmb.tree.regularity import SingularPoseWarning, singular_joints
from robots import compare, robot_urdfs


def _inertial(m, com=(0, 0, 0), I=(0.0, 0.0, 0.0)):
    return (f'<inertial><origin xyz="{" ".join(map(str, com))}"/><mass value="{m}"/>'
            f'<inertia ixx="{I[0]}" iyy="{I[1]}" izz="{I[2]}" ixy="0" ixz="0" iyz="0"/></inertial>')


def _joint(name, parent, child, axis, xyz=(0, 0, 0)):
    return (f'<joint name="{name}" type="revolute"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{" ".join(map(str, xyz))}"/><axis xyz="{" ".join(map(str, axis))}"/></joint>')


def _robot(links, joints):
    return "<robot name='r'><link name='base'/>" + "".join(
        f"<link name='{n}'>{body}</link>" for n, body in links) + "".join(joints) + "</robot>"


#: roll (x) then yaw (z) about one point, a point-mass head (no rotational inertia) at
#: (0.1, 0, 0.2): at q = 0 the head lies in the plane of both axes, where they move it
#: along one line (singular there); at any other yaw they do not
NECK = _robot([("n", ""), ("head", _inertial(1.0, com=(0.1, 0, 0.2)))],
              [_joint("roll", "base", "n", (1, 0, 0)), _joint("yaw", "n", "head", (0, 0, 1))])


def test_a_massless_link_is_judged_by_the_subtree_it_moves():
    """The massless link ``n`` carries no inertia itself, but its joint moves the head:
    accepted. Singular only at the zero pose: said, naming both neck joints."""
    with pytest.warns(SingularPoseWarning, match=r"singular at q = 0 .*'roll', 'yaw'"):
        model = diffmb.load_urdf(NECK)
    assert singular_joints(model) == ([], False)
    assert singular_joints(model, np.zeros(2))[0] == ["roll", "yaw"]


def test_a_truly_massless_joint_is_refused_by_name():
    """``j2`` moves a massless leaf: its subtree has no mass or inertia at any pose; the
    refusal names it and not ``j1``, which moves a body."""
    xml = _robot([("a", _inertial(1.0, com=(0, 0, -0.5), I=(0.1, 0.1, 0.1))), ("b", "")],
                 [_joint("j1", "base", "a", (0, 1, 0)), _joint("j2", "a", "b", (0, 1, 0), xyz=(0, 0, -1))])
    with pytest.raises(ValueError, match=r"mass matrix is singular: joint\(s\) 'j2' move no mass"):
        diffmb.load_urdf(xml)


def test_two_coaxial_joints_over_one_body_are_refused_together():
    """Each joint alone moves the body (``M_jj > 0``), their difference moves nothing."""
    xml = _robot([("a", ""), ("b", _inertial(1.0, com=(0.3, 0, 0), I=(0.1, 0.1, 0.1)))],
                 [_joint("j1", "base", "a", (0, 0, 1)), _joint("j2", "a", "b", (0, 0, 1))])
    with pytest.raises(ValueError, match=r"singular: joint\(s\) 'j1', 'j2' move no mass"):
        diffmb.load_urdf(xml)


@pytest.mark.parametrize("scale", [1e-8, 1.0, 1e8])
def test_the_tolerance_is_relative_to_the_models_inertia(scale):
    """The same arm in any units: a 1e-6 lighter wrist is a real inertia, not a zero."""
    xml = _robot([("a", _inertial(scale, com=(0, 0, -0.5), I=(scale, scale, scale))),
                  ("b", _inertial(1e-6 * scale, com=(0, 0, -0.1), I=(1e-8 * scale,) * 3))],
                 [_joint("j1", "base", "a", (0, 1, 0)), _joint("j2", "a", "b", (1, 0, 0), xyz=(0, 0, -1))])
    model = diffmb.load_urdf(xml)
    assert singular_joints(model) == ([], False)


def test_a_humanoid_with_a_two_joint_neck_matches_pinocchio():
    """iCub (example-robot-data): once refused ("joint(s) 'neck_roll', 'neck_yaw' move no
    mass or inertia"), as its point-mass head sits in the plane of the roll and yaw axes
    at q = 0. Pinocchio's mass matrix is regular at generic poses, and so is ours: mass
    matrix, inverse and forward dynamics agree at random states (measured: 1.1e-10
    relative to the largest entry; floating base, in the slow job's every-robot test:
    M to 1.6e-15, forward dynamics judged by its backward error as M's condition is 5e8)."""
    path = next(p for p in robot_urdfs() if p.name == "icub.urdf")
    r = compare(path, False)
    assert r["status"] == "match" and r["nv"] == 32, r
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diffmb.load_urdf(path)
    said = [str(w.message) for w in caught if issubclass(w.category, SingularPoseWarning)]
    assert len(said) == 1 and "'neck_roll', 'neck_yaw'" in said[0]
