"""Whether a model's mass matrix is regular: the check behind accepting massless links.

Real description files put massless "virtual" links between joints (three revolute
joints of a hip share one point) and zero-inertia point masses on the joint axis. Both
are fine as long as every coordinate still moves some inertia: the joint-space mass
matrix ``M(q)`` stays positive definite. Where it does not (a massless leaf on a moving
joint), ABA divides by zero, so such a model is refused with the joints that move nothing.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import crba
from .kinematics import kinematics


def mass_matrix(model, q):
    """``M(q)`` from the workspace and the CRBA (not :func:`diffmb.tree.mass_matrix`, which
    imports the model module that calls this check: no cycle)."""
    return crba.mass_matrix(model, kinematics(model, jnp.asarray(q, float)))


def singular_joints(model, q=None, *, rtol: float = 1e-12) -> tuple[list[str], bool]:
    """Joints whose coordinates span the null (or negative) space of ``M(q)`` (``[]`` if
    regular), and whether ``M`` had a negative eigenvalue (an indefinite inertia kept).

    ``q`` defaults to ``0`` and a fixed pseudo-random configuration (a massless link can
    be regular at one pose and singular at another; two generic poses catch both)."""
    qs = [np.zeros(model.nq), np.random.default_rng(0).uniform(-1.0, 1.0, model.nq)] if q is None else [q]
    bad, negative = set(), False
    for qk in qs:
        M = np.asarray(mass_matrix(model, qk))
        ev, V = np.linalg.eigh(0.5 * (M + M.T))
        null = ev <= rtol * max(ev.max(), 1e-300)
        if not null.any():
            continue
        negative |= bool(ev.min() < -rtol * max(ev.max(), 1e-300))
        weight = np.abs(V[:, null]).max(axis=1)
        for b, (s, e) in enumerate(model.body_slices):
            if weight[s:e].max() > 1e-6:
                bad.add(model.joint_names[model.body_joint[b]])
    return sorted(bad), negative


def check_regular(model, where: str = "") -> None:
    """Raise ValueError naming the joints that move no inertia (see module doc)."""
    bad, negative = singular_joints(model)
    if bad and negative:
        raise ValueError(f"{where}the mass matrix is not positive definite: joint(s) "
                         f"{', '.join(repr(j) for j in bad)} move an invalid (indefinite) inertia; "
                         f"load with inertia='repair' for the nearest valid inertia")
    if bad:
        raise ValueError(f"{where}the mass matrix is singular: joint(s) {', '.join(repr(j) for j in bad)} "
                         f"move no mass or inertia (massless links, or point masses on the joint axis); give "
                         f"those links mass or rotational inertia, or make their joints fixed")
