"""A planar four-bar linkage: the smallest closed chain, with a one-coordinate reference.

Crank (length 1 m, 1 kg) pinned at the origin, coupler (2.5 m, 2 kg) pinned to the crank's
tip, rocker (2 m, 1.5 kg) pinned at (2.2, 0); uniform rods turning about +z, gravity along
-y (a Grashof crank-rocker). The tree is crank -> coupler and the rocker; the coupler-rocker
pin is a hinge closure (5 constrained rows, of which 2 are independent in the plane:
the others are reported as redundant). ``theta0``/``omega0`` set the crank; the coupler
and rocker start on the closure's position and velocity manifolds (open branch).
``kick`` adds a rocker-rate error that starts the run off the velocity manifold, to
exercise the stabilization (``a``, ``b``: Baumgarte gains, eq. 41 of Fulton & Schaub).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from ..closures.nodes import make_closures
from ..system import TreeSystem
from ..tree.model import ModelBuilder
from .scenario import Scenario, conserves, register

A, B, C, D = 1.0, 2.5, 2.0, 2.2  # crank, coupler, rocker, ground
M1, M2, M3 = 1.0, 2.0, 1.5
G = 9.81


def rod(m, l):
    return np.diag([1e-6 * m, m * l * l / 12, m * l * l / 12])


def assemble(theta):
    """Open-branch position analysis: coupler and rocker absolute angles."""
    ax, ay = A * math.cos(theta), A * math.sin(theta)
    dx, dy = D - ax, -ay
    r = math.hypot(dx, dy)
    base = math.atan2(dy, dx)
    gamma = math.acos((B * B + r * r - C * C) / (2 * B * r))
    phi = base + gamma
    bx, by = ax + B * math.cos(phi), ay + B * math.sin(phi)
    psi = math.atan2(by, bx - D)
    return phi, psi


def fourbar_system(theta0, omega0, stabilization="projection", gains=(0.0, 0.0), g=G, damping=0.0):
    b = ModelBuilder(gravity=(0.0, -g, 0.0))
    b.add_body("crank", "world", "revolute", axis=(0, 0, 1), mass=M1, com=(A / 2, 0, 0),
               inertia=rod(M1, A), damping=damping)
    b.add_body("coupler", "crank", "revolute", axis=(0, 0, 1), pos=(A, 0, 0), mass=M2,
               com=(B / 2, 0, 0), inertia=rod(M2, B), damping=damping)
    b.add_body("rocker", "world", "revolute", axis=(0, 0, 1), pos=(D, 0, 0), mass=M3,
               com=(C / 2, 0, 0), inertia=rod(M3, C), damping=damping)
    model = b.build()
    phi, psi = assemble(theta0)
    q0 = jnp.array([theta0, phi - theta0, psi])
    h = 1e-7  # rates consistent with the closure: differentiate the position analysis
    p1, s1 = assemble(theta0 + h)
    p0, s0 = assemble(theta0 - h)
    dphi, dpsi = (p1 - p0) / (2 * h), (s1 - s0) / (2 * h)
    qd0 = jnp.array([omega0, (dphi - 1.0) * omega0, dpsi * omega0])
    nodes = make_closures(model, q0, [dict(name="B", body_a="coupler", body_b="rocker",
                                           kind="hinge", axis=2, pos_a=(B, 0, 0), pos_b=(C, 0, 0))])
    return TreeSystem(model, q0, qd0, closures=nodes, stabilization=stabilization, baumgarte=gains)


def _build(v, stabilization):
    if not -math.pi < v["theta0"] < math.pi:
        raise ValueError(f"parameter 'theta0' must lie in (-pi, pi), got {v['theta0']:g}")
    system = fourbar_system(v["theta0"], v["omega0"], stabilization, (v["a"], v["b"]), g=v["g"],
                            damping=v["c"])
    params = system.default_params()
    params["qd0"] = params["qd0"].at[2].add(v["kick"])
    return system, params


register(Scenario(
    name="four-bar",
    description="planar four-bar linkage, one hinge closure (closed-chain smoke case)",
    paper="textbook case (Fulton & Schaub sec. 4.1 closures on the smallest loop)",
    build=_build,
    defaults={"theta0": 0.3, "omega0": 2.0, "g": G, "c": 0.0, "a": 5.0, "b": 5.0, "kick": 0.0},
    t1=3.0, dt=1e-2, solver="rk4", stabilizations=("none", "baumgarte", "projection"),
    stabilization="projection",
    conserved=conserves(energy_unless=("c", "kick")),
))
