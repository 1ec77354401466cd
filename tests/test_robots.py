"""Every real robot of ``example-robot-data`` that Pinocchio loads, loaded by diffmb and
compared with Pinocchio: mass matrix, inverse and forward dynamics at random states,
fixed and floating base. A few representative files run in the default job (each one a
real-file idiom the loader must handle); all of them in the slow job.

A robot is either a match (to 1e-9, relative to the largest entry) or refused because
its mass matrix is singular, which is then checked to be singular in Pinocchio as well
(at a generic pose: ``tests/test_regularity.py`` has the humanoid singular only at zero).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from robots import compare, robot_urdfs

ALL = robot_urdfs()


def _id(path):
    return "/".join(path.parts[-3:]).replace("_description/urdf", "")


#: one file per idiom: a zero-mass fixed child with inertia (bolt, once a wrong answer),
#: massless virtual links between hip joints (human), a root link named world (ur5), a
#: singular model refused (romeo_laas_small); placeholder inertias fixed to the base
#: (anymal), indefinite microgram placeholders (tiago) and a 32-joint humanoid (talos)
#: run with every other file in the slow job
REPRESENTATIVE = ("bolt.urdf", "human.urdf", "ur5_robot.urdf", "romeo_laas_small.urdf")


def _check(path, floating):
    r = compare(path, floating)
    if r["status"] == "pin-refused":  # a broken file (ur3.urdf has no robot name): no peer to compare
        import diffmb

        try:
            diffmb.load_urdf(path, floating_base=floating)
        except ValueError as e:
            assert str(path) in str(e)  # refused naming the file
        return
    if r["status"] == "no-dof":
        return
    if r["status"] == "refused":
        assert "mass matrix is singular" in r["why"], r["why"]
        pmodel = (pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating
                  else pin.buildModelFromUrdf(str(path)))
        # at a generic pose: the neutral one can be a kinematic singularity of a valid
        # model (iCub's point-mass head at q = 0), which diffmb loads with a warning
        pin.seed(0)
        q = pin.randomConfiguration(pmodel, -np.ones(pmodel.nq), np.ones(pmodel.nq))
        M = pin.crba(pmodel, pmodel.createData(), q)
        M = np.triu(M) + np.triu(M, 1).T
        ev = np.linalg.eigvalsh(M)
        assert ev.min() < 1e-12 * ev.max(), "diffmb refused a model whose mass matrix Pinocchio finds regular"
        return
    assert r["status"] == "match", r


@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "floating"])
@pytest.mark.parametrize("path", [p for p in ALL if p.name in REPRESENTATIVE], ids=_id)
def test_representative_robots_match_pinocchio(path, floating):
    _check(path, floating)


@pytest.mark.slow
@pytest.mark.parametrize("floating", [False, True], ids=["fixed", "floating"])
@pytest.mark.parametrize("path", ALL, ids=_id)
def test_every_robot_matches_pinocchio(path, floating):
    _check(path, floating)


def test_the_package_ships_the_robots():
    assert len(ALL) >= 60
