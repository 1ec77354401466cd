"""Pendulum and double pendulum: open-chain smoke cases with closed-form checks.

Uniform rods swinging in the x-z plane about +y revolute joints, gravity along -z,
potential-energy datum at the pivot. ``theta`` is measured from the downward vertical.
"""

from __future__ import annotations

import numpy as np

from ..system import TreeSystem
from ..tree.model import ModelBuilder
from .scenario import Scenario, conserves, register


def rod_inertia(mass: float, length: float, radius: float = 0.01) -> np.ndarray:
    """Inertia of a uniform solid rod along z about its centre."""
    ixx = mass * (3 * radius**2 + length**2) / 12.0
    return np.diag([ixx, ixx, mass * radius**2 / 2.0])


def chain_model(lengths, masses, g: float, damping: float = 0.0, names=None):
    """A planar chain of uniform rods hanging along -z, hinged about +y."""
    b = ModelBuilder(gravity=(0.0, 0.0, -g))
    parent, pos = "world", (0.0, 0.0, 0.0)
    names = names or [f"theta{i + 1}" for i in range(len(lengths))]
    for i, (l, m) in enumerate(zip(lengths, masses)):
        if l <= 0 or m <= 0:
            raise ValueError(f"link {i + 1}: length and mass must be positive (got l={l}, m={m})")
        b.add_body(f"link{i + 1}", parent, "revolute", axis=(0, 1, 0), pos=pos, mass=m,
                   com=(0, 0, -l / 2), inertia=rod_inertia(m, l), joint_name=names[i],
                   damping=damping)
        parent, pos = f"link{i + 1}", (0.0, 0.0, -l)
    return b.build()


def _pendulum(v, stabilization):
    model = chain_model([v["l"]], [v["m"]], v["g"], v["damping"], names=["theta"])
    system = TreeSystem(model, q0=[v["theta0"]], qd0=[v["omega0"]], roles={"hinge": ("theta",)})
    return system, system.default_params()


def _double(v, stabilization):
    model = chain_model([v["l1"], v["l2"]], [v["m1"], v["m2"]], v["g"], v["damping"])
    system = TreeSystem(model, q0=[v["theta1_0"], v["theta2_0"]], qd0=[v["omega1_0"], v["omega2_0"]],
                        roles={"hinge": ("theta1", "theta2")})
    return system, system.default_params()


register(Scenario(
    name="pendulum",
    description="single uniform rod on a revolute joint under gravity (energy check)",
    paper="textbook case (smoke test of the tree engine)",
    build=_pendulum,
    defaults={"l": 1.0, "m": 1.0, "g": 9.81, "theta0": 1.0, "omega0": 0.0, "damping": 0.0},
    t1=10.0, dt=1e-3, solver="rk4", rtol=1e-11, atol=1e-12,
    conserved=conserves(energy_unless=("damping",)),
))

register(Scenario(
    name="double-pendulum",
    description="two uniform rods, chaotic swing under gravity (energy check)",
    paper="textbook case (smoke test of the tree engine)",
    build=_double,
    defaults={"l1": 1.0, "l2": 1.0, "m1": 1.0, "m2": 1.0, "g": 9.81, "theta1_0": 1.0,
              "theta2_0": 0.5, "omega1_0": 0.0, "omega2_0": 0.0, "damping": 0.0},
    t1=10.0, dt=1e-3, solver="rk4", rtol=1e-11, atol=1e-12,
    conserved=conserves(energy_unless=("damping",)),
))
