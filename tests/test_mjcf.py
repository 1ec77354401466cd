"""MuJoCo as an independent engine: diffmb models written by diffmb.formats.mjcf run in MuJoCo.

* Open trees (free and fixed bases; hinge, slide and ball joints; branches, merged fixed
  links): MuJoCo's ``mj_forward`` accelerations equal diffmb's forward dynamics.
* A Miura-ori closed by two ``connect`` equalities per cut crease, made nearly hard in
  MuJoCo: the two engines' motions agree to 1e-8 rad.
"""

import mujoco
import numpy as np
import pytest

import diffmb
from diffmb.formats.mjcf import to_mjcf, to_mujoco_state
from helpers import make_random_model, random_state


def _mujoco_qacc(model, q, qd, qdd):
    """diffmb's ``qdd`` in MuJoCo's convention (free joint: [d/dt v_world; d/dt omega_body])."""
    dcm, _ = (np.asarray(x) for x in diffmb.forward_kinematics(model, q))
    out = []
    for i in range(model.n_bodies):  # bodies are in depth-first order for these trees
        s, e = model.body_slices[i]
        if model.joint_kinds[i] == "free":
            w, v = qd[s:s + 3], qd[s + 3:e]
            wd, vd = qdd[s:s + 3], qdd[s + 3:e]
            out += list(dcm[i].T @ (vd + np.cross(w, v))) + list(wd)
        else:
            out += list(qdd[s:e])
    return np.array(out)


@pytest.mark.parametrize("seed,base", [(0, "free"), (1, "free"), (2, "fixed"), (3, "fixed")])
def test_open_tree_accelerations_match_mujoco(seed, base):
    model = make_random_model(seed, n_bodies=6, base=base,
                              kinds=("revolute", "prismatic", "spherical", "revolute"))
    q, qd = random_state(model, seed)
    rng = np.random.default_rng(seed)
    tau = rng.standard_normal(model.nv)
    for i, k in enumerate(model.joint_kinds):
        if k == "free":  # generalized forces on the free joint use other axes in MuJoCo
            s, e = model.body_slices[i]
            tau[s:e] = 0.0
    qdd = np.asarray(diffmb.forward_dynamics(model, q, qd, tau))
    m = mujoco.MjModel.from_xml_string(to_mjcf(model))
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = to_mujoco_state(model, q, qd)
    order = _mujoco_dofs(model)
    d.qfrc_applied[:] = tau[order]
    mujoco.mj_forward(m, d)
    expect = _mujoco_qacc(model, q, qd, qdd)[_body_dof_order(model)]
    np.testing.assert_allclose(d.qacc, expect, rtol=1e-9, atol=1e-9)


def _depth_first(model):
    from diffmb.formats.mjcf import _depth_first

    return _depth_first(model)


def _mujoco_dofs(model):
    """diffmb velocity indices in MuJoCo's dof order (bodies depth first)."""
    idx = []
    for i in _depth_first(model):
        s, e = model.body_slices[i]
        idx += list(range(s, e))
    return np.array(idx)


def _body_dof_order(model):
    """Permutation from the per-body concatenation of ``_mujoco_qacc`` to MuJoCo's order."""
    offsets, o = {}, 0
    for i in range(model.n_bodies):
        s, e = model.body_slices[i]
        offsets[i] = (o, o + e - s)
        o += e - s
    return np.concatenate([np.arange(*offsets[i]) for i in _depth_first(model)])


@pytest.mark.slow  # ~10 s; the other MuJoCo cross-checks of this file stay in the default job
def test_closed_miura_fold_matches_mujoco_with_hard_connects():
    """A 3x3 Miura-ori, partially folded (a generic, one-degree-of-freedom state; the
    folded-flat map fold would start at a bifurcation), unfolding under its hinge springs."""
    from diffmb.scenarios import get

    sc = get("miura")
    system, params = sc.build(sc.resolve({"K": 0.05, "K_zig": 0.05}), "projection")
    model = system.model
    tr = diffmb.simulate(system, params=params, t1=0.5, dt=1e-3, saveat=6)
    # nearly hard equalities: MuJoCo's default softness (solimp 0.9-0.95) weakens the
    # constraint forces themselves by 5-10 %, which changes the motion by that much
    m = mujoco.MjModel.from_xml_string(to_mjcf(model, system.closures, timestep=1e-3,
                                               solref=(0.002, 1.0), solimp=(0.9999, 0.9999, 0.001)))
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = to_mujoco_state(model, np.asarray(params["q0"]))
    a, b = np.array(m.eq_obj1id), np.array(m.eq_obj2id)
    hinges = [i for i, k in enumerate(model.joint_kinds) if k == "revolute"]
    viol = 0.0
    for _ in range(500):
        mujoco.mj_step(m, d)
        viol = max(viol, float(np.linalg.norm(d.site_xpos[a] - d.site_xpos[b], axis=1).max()))
    ours = np.array([float(tr.x_final[model.body_slices[i][0]]) for i in hinges])
    theirs = np.array([d.qpos[m.jnt_qposadr[m.joint(model.joint_names[model.body_joint[i]]).id]]
                       for i in hinges])
    moved = np.abs(ours - np.array([float(params["q0"][model.body_slices[i][0]]) for i in hinges]))
    assert moved.max() > 1e-3  # the fold moves
    assert viol < 1e-8  # the (nearly hard) connects hold
    # measured: the hinge angles agree to 4e-11 rad after 0.5 s, of 0.04 rad of motion
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-8)
    assert tr.summary()["violation"]["position_max"] < 1e-10
