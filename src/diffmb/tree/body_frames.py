"""Where every body is and how it turns: the outputs a sensor reads.

Each formulation keeps its own state (joint coordinates, Kane's speeds, Udwadia-Kalaba's
positions and quaternions); a deployment test measures none of them directly but points
on the bodies (photogrammetry targets) and body rates (gyros). ``System.body_frames(x,
params)`` turns a state into one :class:`BodyFrames` for every formulation that has
bodies, and :mod:`diffmb.design.sensors` reads only that.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from ..math import spatial as sp
from .kinematics import Kinematics, body_velocities


class BodyFrames(eqx.Module):
    """Per body (the System's ``body_names`` order): ``rot (N, 3, 3)`` DCM [body world]
    (world components -> body components), ``pos (N, 3)`` body origin in the world,
    ``omega (N, 3)`` angular velocity in body axes, ``velocity (N, 3)`` the origin's
    velocity in world axes."""

    rot: jnp.ndarray
    pos: jnp.ndarray
    omega: jnp.ndarray
    velocity: jnp.ndarray

    def points(self, bodies, offsets):
        """World positions of points fixed on ``bodies`` at ``offsets (k, 3)`` (body axes)."""
        return self.pos[bodies] + sp.mtv(self.rot[bodies], offsets)

    def point_velocities(self, bodies, offsets):
        """World velocities of the same points: ``v_O + R^T (omega x p)``."""
        w = sp.cross(self.omega[bodies], offsets)
        return self.velocity[bodies] + sp.mtv(self.rot[bodies], w)


def from_kinematics(ws: Kinematics) -> BodyFrames:
    """The frames of a tree's (or forest's) kinematics workspace with velocities."""
    v = body_velocities(ws)
    return BodyFrames(rot=ws.rot, pos=ws.pos, omega=v[:, :3], velocity=sp.mtv(ws.rot, v[:, 3:]))


def from_quaternions(poses, rates, omega_fn) -> BodyFrames:
    """Frames of maximal-coordinate bodies: ``poses (N, 7)`` ``[r; q]`` (scalar-last
    quaternion, any norm), ``rates (N, 7)`` ``[r_dot; q_dot]``; ``omega_fn(q, q_dot)``
    gives the body-axes angular velocity."""
    q = poses[:, 3:]
    qn = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    return BodyFrames(rot=sp.quat_to_dcm(qn), pos=poses[:, :3], omega=omega_fn(q, rates[:, 3:]),
                      velocity=rates[:, :3])
