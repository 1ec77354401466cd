"""Run files for the viewer tests, made without integrating: the scenario's System and
its initial state, moved along a prescribed path and saved as ``diffmb run`` saves a run
(same arrays, same metadata). The viewer only reads states, so this tests it in a second
instead of a JIT-compiled simulation."""

from __future__ import annotations

import os

import numpy as np

from diffmb import scenarios
from diffmb.simulation.trajectory import Trajectory

ARM_URDF = """<?xml version="1.0"?>
<robot name="arm2">
  <link name="base"><visual><geometry><cylinder radius="0.08" length="0.1"/></geometry></visual></link>
  <link name="upper">
    <inertial><origin xyz="0.25 0 0"/><mass value="1.0"/>
      <inertia ixx="1e-3" iyy="0.021" izz="0.021" ixy="0" ixz="0" iyz="0"/></inertial>
    <visual><origin xyz="0.25 0 0"/><geometry><box size="0.5 0.05 0.05"/></geometry></visual>
  </link>
  <link name="fore">
    <inertial><origin xyz="0.2 0 0"/><mass value="0.8"/>
      <inertia ixx="1e-3" iyy="0.011" izz="0.011" ixy="0" ixz="0" iyz="0"/></inertial>
    <visual><origin xyz="0.2 0 0" rpy="0 1.5707963 0"/><geometry><cylinder radius="0.025" length="0.4"/></geometry></visual>
  </link>
  <link name="tool"><visual><geometry><sphere radius="0.04"/></geometry></visual></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/><origin xyz="0 0 0.05"/>
    <axis xyz="0 -1 0"/><limit lower="-3" upper="3" effort="10" velocity="5"/></joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="fore"/><origin xyz="0.5 0 0"/>
    <axis xyz="0 -1 0"/><limit lower="-3" upper="3" effort="10" velocity="5"/></joint>
  <joint name="tool" type="fixed"><parent link="fore"/><child link="tool"/><origin xyz="0.4 0 0"/></joint>
</robot>
"""


def save_run(path, name, system, xs, ts, values, stabilization, model=None):
    """Save states ``xs`` at ``ts`` as ``diffmb run`` would (``complete`` run)."""
    xs, ts = np.asarray(xs, float), np.asarray(ts, float)
    traj = Trajectory(
        ts=ts, xs=xs, diagnostics={}, violation={}, t_final=np.asarray(ts[-1]), x_final=xs[-1],
        n_steps=np.asarray(len(ts) - 1), n_rejected=np.asarray(0), status_code=np.asarray(0),
        event_mask=np.zeros(1, bool), state_names=tuple(system.state_names),
        coordinate_names=tuple(system.coordinate_names), solver="dopri5",
        roles=tuple(getattr(system, "coordinate_roles", {}).items()),
    )
    meta = {"scenario": name, "model": model, "parameters": values, "solver": "dopri5", "dt": None,
            "rtol": 1e-8, "atol": 1e-10, "t1": float(ts[-1]), "stabilization": stabilization, "chunks": 1,
            "complete": True, "chunks_done": 1}
    return traj.save(path, meta=meta)


def fold_run(path, name="fold-4panel", t1=2.0, n=81, overrides=None, target=None):
    """An origami run that takes every hinge from its stowed angle to ``target`` (default
    flat) over ``t1``, the hub slowly turning: a prescribed path, of the paper's model
    unless ``overrides`` turn contact on (``{"contact": 1}``)."""
    sc = scenarios.get(name)
    system, params, values = sc.make({"contact": 0.0, **(overrides or {})})
    x0 = np.asarray(system.init_state(params), float)
    nq = system.model.nq
    ts = np.linspace(0.0, t1, n)
    s = 0.5 - 0.5 * np.cos(np.pi * ts / t1)
    xs = np.repeat(x0[None], n, 0)
    hinges = np.arange(6, nq)
    start = x0[hinges] if target is None or "start" not in target else np.asarray(target["start"], float)
    end = np.zeros_like(start) if target is None else np.asarray(target["end"], float)
    xs[:, hinges] = start + (end - start) * s[:, None]
    xs[:, nq + hinges] = (end - start) * (0.5 * np.pi / t1 * np.sin(np.pi * ts / t1))[:, None]
    xs[:, 2] = 0.1 * s  # a slow tumble of the hub (MRP sigma3)
    return save_run(path, name, system, xs, ts, values, sc.stabilization)


def arm_run(folder, t1=1.0, n=51):
    """A two-link URDF arm (box, cylinder, merged sphere tip) swinging both joints (ending
    elsewhere than it starts)."""
    urdf = folder / "arm2.urdf"
    urdf.write_text(ARM_URDF)
    sc = scenarios.get(str(urdf))
    system, params, values = sc.make({})
    ts = np.linspace(0.0, t1, n)
    q = np.stack([1.2 * np.sin(1.5 * np.pi * ts / t1), 0.8 * np.sin(3 * np.pi * ts / t1)], 1)
    qd = np.gradient(q, ts, axis=0)
    return save_run(folder / "arm2.npz", sc.name, system, np.concatenate([q, qd], 1), ts, values,
                    sc.stabilization, model=os.path.abspath(urdf))


def tbar_run(path, t1=1.0, n=51):
    """The T-bar with its nodes swaying (the strings' tensions change with it)."""
    sc = scenarios.get("tbar")
    system, params, values = sc.make({})
    x0 = np.asarray(system.init_state(params), float)
    ts = np.linspace(0.0, t1, n)
    n3 = 3 * system.n_nodes
    xs = np.repeat(x0[None], n, 0)
    wave = np.sin(1.5 * np.pi * ts / t1)[:, None]
    xs[:, 0:n3:3] += 0.05 * wave * np.linspace(-1, 1, system.n_nodes)[None]
    return save_run(path, "tbar", system, xs, ts, values, sc.stabilization)


def sail_run(path, t1=1.0, n=21):
    """The solar sail (one flexible body) drifting along x while its first mode grows."""
    sc = scenarios.get("solar-sail-slew")
    system, params, values = sc.make({})
    x0 = np.asarray(system.init_state(params), float)
    ts = np.linspace(0.0, t1, n)
    xs = np.repeat(x0[None], n, 0)
    names = list(system.state_names)
    xs[:, names.index("sail_eta1")] = 0.1 * ts / t1
    xs[:, names.index("sail_sigma3")] = 0.2 * ts / t1
    return save_run(path, "solar-sail-slew", system, xs, ts, values, sc.stabilization)


def robot_run(folder, urdf, t1=2.0, n=41):
    """A robot file's joints turning by up to 0.6 rad (``urdf``: e.g. one of
    ``tests/robots.py``'s ``robot_urdfs()``)."""
    sc = scenarios.get(str(urdf))
    system, params, values = sc.make({})
    x0 = np.asarray(system.init_state(params), float)
    ts = np.linspace(0.0, t1, n)
    xs = np.repeat(x0[None], n, 0)
    nq = len(system.coordinate_names)
    xs[:, :nq] += 0.6 * np.sin(0.5 * np.pi * ts / t1)[:, None] * np.linspace(1.0, -1.0, nq)[None]
    return save_run(folder / f"{sc.name}.npz", sc.name, system, xs, ts, values, sc.stabilization,
                    model=os.path.abspath(urdf))
