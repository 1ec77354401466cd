"""Whether a model's mass matrix is regular: the check behind accepting massless links.

Real description files put massless "virtual" links between joints (three revolute
joints of a hip share one point) and zero-inertia point masses on the joint axis. Both
are fine as long as every coordinate still moves some inertia: the joint-space mass
matrix ``M(q)`` stays positive definite. Where it does not (a massless leaf on a moving
joint), ABA divides by zero, so such a model is refused with the joints that move nothing.

Two things are judged, both at generic poses and relative to the model's inertia scale
``s = max_i M_ii`` (the largest inertia a coordinate carries; CRBA round-off is about
``1e-16 s``):

- each joint's whole subtree: ``M_jj = S_j^T I^c_j S_j``, the composite inertia of every
  body the joint moves about its own axis (Featherstone, *Rigid Body Dynamics
  Algorithms*, 2008, eq. 6.11 with ``i = j``). A joint whose subtree carries no mass
  or inertia about it has ``M_jj <= RTOL s``: it is named alone.
- the whole matrix: joints whose motions move the same inertia (two coaxial joints over
  one body, a point mass turned about three concurrent axes) have ``M_jj > 0`` each but
  a combination that moves nothing; the smallest eigenvalues ``<= RTOL s`` name them.

A model is refused only when ``M`` is singular at generic poses: ``det M(q)`` is analytic
in ``q``, so a structural singularity shows at every pose, while one at a special pose
(the zero pose of a humanoid's neck, where a point-mass head sits in the plane of its roll
and yaw axes) is a kinematic singularity of a valid model, which Pinocchio and MuJoCo
load as well; for that a :class:`SingularPoseWarning` says where it is.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np

from . import crba

#: ``M`` is singular where an eigenvalue (or a joint's subtree inertia ``M_jj``) is at
#: most this fraction of the model's inertia scale ``max_i M_ii`` (module docstring).
RTOL = 1e-12
#: Seeds of the generic poses (uniform in [-1, 1] per coordinate) the check is made at.
GENERIC_POSES = (0, 1)


class SingularPoseWarning(UserWarning):
    """``M(q)`` is regular at generic poses but singular at the zero pose, where a
    simulation usually starts: forward dynamics there divides by (nearly) zero."""


def generic_poses(model) -> list:
    """The pseudo-random configurations of :data:`GENERIC_POSES`."""
    return [np.random.default_rng(s).uniform(-1.0, 1.0, model.nq) for s in GENERIC_POSES]


def _joints_of(model, coords) -> set:
    """Names of the joints owning any of the coordinate indices ``coords``."""
    out = set()
    for b, (s, e) in enumerate(model.body_slices):
        if any(s <= i < e for i in coords):
            out.add(model.joint_names[model.body_joint[b]])
    return out


def singular_at(M, model, rtol: float = RTOL) -> tuple[list[str], bool]:
    """Joints that move no inertia in ``M`` (one pose), and whether ``M`` is indefinite.

    First each joint's subtree (``M_jj``), then the null space of the whole matrix
    (module docstring), both against ``rtol * max_i M_ii``."""
    M = 0.5 * (np.asarray(M, float) + np.asarray(M, float).T)
    scale = max(float(np.max(np.diag(M))), 1e-300) if M.size else 1.0
    tol = rtol * scale
    bad = _joints_of(model, np.flatnonzero(np.diag(M) <= tol))
    ev, V = np.linalg.eigh(M)
    null = ev <= tol
    negative = bool(ev.size and ev.min() < -tol)
    if null.any():
        weight = np.abs(V[:, null]).max(axis=1)
        bad |= _joints_of(model, np.flatnonzero(weight > 1e-6))
    return sorted(bad), negative


def singular_joints(model, q=None, *, rtol: float = RTOL) -> tuple[list[str], bool]:
    """Joints whose coordinates move no inertia (``[]`` if ``M`` is regular), and whether
    ``M`` had a negative eigenvalue (an indefinite inertia kept).

    At ``q``, or, by default, at the generic poses (:func:`generic_poses`): the model is
    then singular only if ``M`` is singular at all of them (a structural singularity;
    module docstring), the joints named being those of any of them."""
    qs = generic_poses(model) if q is None else [q]
    found = [singular_at(crba.mass_matrix_at(model, jnp.asarray(qk, float)), model, rtol) for qk in qs]
    negative = any(n for _, n in found)
    if negative:
        return sorted({j for b, n in found if n for j in b}), True
    if all(b for b, _ in found):
        return sorted({j for b, _ in found for j in b}), False
    return [], False


def check_regular(model, where: str = "") -> None:
    """Raise ValueError naming the joints that move no inertia (see module doc); warn
    (:class:`SingularPoseWarning`) when ``M`` is regular but singular at ``q = 0``."""
    bad, negative = singular_joints(model)
    if bad and negative:
        raise ValueError(f"{where}the mass matrix is not positive definite: joint(s) "
                         f"{', '.join(repr(j) for j in bad)} move an invalid (indefinite) inertia; "
                         f"load with inertia='repair' for the nearest valid inertia")
    if bad:
        raise ValueError(f"{where}the mass matrix is singular: joint(s) {', '.join(repr(j) for j in bad)} "
                         f"move no mass or inertia (massless links, or point masses on the joint axis); give "
                         f"those links mass or rotational inertia, or make their joints fixed")
    at_zero, _ = singular_joints(model, np.zeros(model.nq))
    if at_zero:
        warnings.warn(f"{where}the mass matrix is singular at q = 0 (regular at generic poses): joint(s) "
                      f"{', '.join(repr(j) for j in at_zero)} move no independent inertia there (a kinematic "
                      f"singularity of point masses); forward dynamics at that pose divides by zero, so start "
                      f"a simulation away from it", SingularPoseWarning, stacklevel=3)
