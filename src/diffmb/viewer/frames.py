"""Poses and joint series of the frames a page shows, from any System with bodies."""

from __future__ import annotations

import jax
import numpy as np

from .scene import dcm_to_quat


def body_poses(system, params, xs: np.ndarray) -> np.ndarray:
    """``(F, N, 7)`` float64 poses (origin, quaternion ``xyzw`` body -> world) of every
    body of ``system`` (``System.body_frames``) at the states ``xs (F, nx)``."""
    frames = jax.jit(jax.vmap(lambda x: system.body_frames(x, params)))(np.asarray(xs))
    rot, pos = np.asarray(frames.rot, float), np.asarray(frames.pos, float)
    return np.concatenate([pos, dcm_to_quat(rot)], -1)


def rotate(quat: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` rotated by unit quaternions ``quat (..., 4)`` (``xyzw``)."""
    u, w = quat[..., :3], quat[..., 3:4]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def world_points(pose: np.ndarray, p) -> np.ndarray:
    """World position of the point ``p`` (body frame) for poses ``(..., 7)``."""
    return pose[..., :3] + rotate(pose[..., 3:], np.asarray(p, float))


def hinge_series(system, xs: np.ndarray):
    """``(angles (F, H), rates (F, H), bodies (H,))`` of a tree system's revolute joints
    (rad, rad/s) and the index of the body each one moves."""
    model = system.model
    names = list(system.state_names)
    cols, bodies = [], []
    for b, ((s, _), kind) in enumerate(zip(model.body_slices, model.joint_kinds)):
        if kind == "revolute":
            cols.append(s)
            bodies.append(b)
    vel = [names.index(model.velocity_names[c]) for c in cols]
    xs = np.asarray(xs, float)
    return xs[:, cols], xs[:, vel], np.asarray(bodies, int)
