"""Write a diffmb tree (and its loop closures) as MuJoCo MJCF, and map states across.

For running the same mechanism in MuJoCo — the peer that the benchmarks and cross-checks
compare against. Each body becomes a nested ``<body>`` placed by the joint frame
(``tree_pos``, ``tree_rot``), with an ``<inertial>`` element (mass, centre of mass, full
inertia) and no geoms (no contacts). Joints: ``revolute`` -> ``hinge``, ``prismatic`` ->
``slide``, ``spherical`` -> ``ball``, ``free`` -> ``freejoint``; joint springs and dampers
(``stiffness``/``damping``, rest angle as ``springref``) carry over. Each loop closure
becomes MuJoCo ``connect`` equalities: a point closure one, a hinge closure two (at the
node and one unit along its free axis, so together they leave exactly the rotation about
that axis), a weld a ``weld`` equality; each names a ``site`` on both bodies, so the
closure need not hold at the zero configuration. A coordinate coupling becomes a
``joint`` equality with the same ``polycoef`` (diffmb's coordinates are MuJoCo's
``qpos - qpos0``, and the exported ``qpos0`` is zero). MuJoCo's equalities are soft (``solref``,
``solimp``); diffmb's are exact.

Thin plates' inertias sit on the triangle inequality that MuJoCo checks; their two
smaller principal moments are raised by 1e-9 of the largest (:func:`_triangle_safe`).

MuJoCo's state conventions differ: a free joint's ``qpos`` is ``[position (world);
quaternion w, x, y, z (body -> world)]`` and ``qvel`` ``[linear velocity (world); angular
velocity (body)]``; a ball joint's ``qpos`` is a quaternion. :func:`to_mujoco_state`
converts ``(q, qd)``.
"""

from __future__ import annotations

import numpy as np

from ..math import spatial as sp
from ..tree.api import forward_kinematics

KIND = {"revolute": "hinge", "prismatic": "slide", "spherical": "ball"}


def _f(v):
    return " ".join(f"{float(x):.17g}" for x in np.ravel(v))


def _quat_wxyz(R):
    """MuJoCo quaternion (w, x, y, z) of the rotation matrix ``R`` (child -> parent)."""
    q = np.asarray(sp.dcm_to_quat(np.asarray(R).T))  # diffmb: scalar-last, of [B N] = R^T
    return np.array([q[3], q[0], q[1], q[2]])


def to_mjcf(model, closures=None, *, timestep: float = 1e-3, integrator: str = "RK4",
            solver: str = "Newton", name: str = "diffmb", solref=None, solimp=None) -> str:
    """MJCF text of ``model`` with ``closures`` (:class:`~diffmb.closures.nodes.LoopClosures`).

    ``solref``/``solimp``: MuJoCo's constraint softness for the equalities (its defaults
    when ``None``); e.g. ``solref=(2 * timestep, 1)``, ``solimp=(0.9999, 0.9999, 0.001)``
    make them nearly hard.
    """
    children = [[] for _ in range(model.n_bodies)]
    roots = []
    for i, p in enumerate(model.parents):
        (roots if p < 0 else children[p]).append(i)
    axis = np.asarray(model.axis)
    mass, com, inertia = np.asarray(model.mass), np.asarray(model.com), np.asarray(model.inertia)
    tree_rot, tree_pos = np.asarray(model.tree_rot), np.asarray(model.tree_pos)
    K, D, rest, A = (np.asarray(x) for x in (model.stiffness, model.damping, model.rest, model.armature))
    sites = [[] for _ in range(model.n_bodies)]
    eq = []
    if closures is not None:
        ref = "" if solref is None else f' solref="{_f(solref)}"'
        ref += "" if solimp is None else f' solimp="{_f(solimp)}"'
        coef = None if closures.coef is None else np.asarray(closures.coef)
        coord_joint = {model.body_slices[i][0]: model.joint_names[model.body_joint[i]]
                       for i in range(model.n_bodies)}
        for k, c in enumerate(closures.closures):
            if c.coords:
                pair = [f'joint1="{coord_joint[c.coords[0]]}"']
                if len(c.coords) > 1:
                    pair.append(f'joint2="{coord_joint[c.coords[1]]}"')
                eq.append(f'    <joint name="{c.name}" {" ".join(pair)} polycoef="{_f(coef[k])}"{ref}/>')
                continue
            nodes = []
            for side, bi in (("a", c.body_a), ("b", c.body_b)):
                R = np.asarray(getattr(closures, f"rot_{side}"))[k]
                p = np.asarray(getattr(closures, f"pos_{side}"))[k]
                nodes.append((bi, R, p))
            free = c.free_rotations
            if len(free) == 0:
                pts = [(0.0, None)]
            elif len(free) == 1:
                pts = [(0.0, free[0]), (1.0, free[0])]
            elif len(free) == 3:
                pts = [(0.0, None)]
            else:
                raise ValueError(f"to_mjcf: closure {c.name!r} frees {len(free)} rotations; "
                                 "MuJoCo connects express 0, 1 or 3")
            for j, (off, f) in enumerate(pts):
                names = []
                for side, (bi, R, p) in zip("ab", nodes):
                    x = p if f is None else p + off * R[f]   # node axis f in body coordinates
                    nm = f"{c.name}_{side}{j}"
                    sites[bi].append(f'<site name="{nm}" pos="{_f(x)}" quat="{_f(_quat_wxyz(R.T))}"/>')
                    names.append(nm)
                tag = "weld" if len(free) == 0 else "connect"
                eq.append(f'    <{tag} name="{c.name}_{j}" site1="{names[0]}" site2="{names[1]}"{ref}/>')
    lines = []

    def body(i, depth):
        pad = "  " * depth
        kind = model.joint_kinds[i]
        R = tree_rot[i].T  # child (joint frame) -> parent
        lines.append(f'{pad}<body name="{model.body_names[i]}" pos="{_f(tree_pos[i])}" '
                     f'quat="{_f(_quat_wxyz(R))}">')
        I = _triangle_safe(inertia[i])
        lines.append(f'{pad}  <inertial pos="{_f(com[i])}" mass="{mass[i]:.17g}" '
                     f'fullinertia="{_f([I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]])}"/>')
        s, _ = model.body_slices[i]
        jname = model.joint_names[model.body_joint[i]]
        if kind == "free":
            lines.append(f'{pad}  <freejoint name="{jname}"/>')
        elif kind in KIND:
            extra = ""
            if kind in ("revolute", "prismatic"):
                extra = (f' stiffness="{K[s]:.17g}" damping="{D[s]:.17g}" springref="{rest[s]:.17g}"'
                         f' axis="{_f(axis[i])}"')
            elif np.any(D[s:s + 3] != 0):
                extra = f' damping="{D[s]:.17g}"'
            if A[s] != 0:
                extra += f' armature="{A[s]:.17g}"'
            lines.append(f'{pad}  <joint name="{jname}" type="{KIND[kind]}"{extra}/>')
        else:
            raise ValueError(f"to_mjcf: body {model.body_names[i]!r}: joint kind {kind!r} has no "
                             "MuJoCo equivalent here (use revolute, prismatic, spherical or free)")
        for st in sites[i]:
            lines.append(f"{pad}  {st}")
        for c in children[i]:
            body(c, depth + 1)
        lines.append(f"{pad}</body>")

    for r in roots:
        body(r, 2)
    g = np.asarray(model.gravity)
    head = [f'<mujoco model="{name}">',
            f'  <option timestep="{timestep:.17g}" integrator="{integrator}" solver="{solver}" '
            f'gravity="{_f(g)}">',
            '    <flag contact="disable" energy="enable"/>',
            '  </option>',
            '  <worldbody>']
    tail = ['  </worldbody>'] + (['  <equality>'] + eq + ['  </equality>'] if eq else []) + ['</mujoco>']
    return "\n".join(head + lines + tail)


def _triangle_safe(I, slack: float = 1e-9):
    """``I`` with its two smaller principal moments raised just enough (``slack`` of the
    largest) to satisfy MuJoCo's triangle-inequality check: a thin plate sits exactly on
    it (``Ixx + Iyy = Izz``), which that check can refuse by a round-off. (MuJoCo's own
    ``balanceinertia`` would instead replace all three moments by their mean.)"""
    I = np.asarray(I, float)
    w, V = np.linalg.eigh(I)
    if w[2] <= 0 or w[0] + w[1] >= w[2] * (1 + slack):
        return I
    bump = 0.5 * (w[2] * (1 + slack) - w[0] - w[1])
    w = w + np.array([bump, bump, 0.0])
    return V @ np.diag(w) @ V.T


def to_mujoco_state(model, q, qd=None):
    """``(qpos, qvel)`` in MuJoCo's conventions (see module docstring) from diffmb's."""
    q = np.asarray(q, float)
    qd = np.zeros_like(q) if qd is None else np.asarray(qd, float)
    dcm, pos = (np.asarray(x) for x in forward_kinematics(model, q))
    qpos, qvel = [], []
    for i in _depth_first(model):
        s, e = model.body_slices[i]
        kind = model.joint_kinds[i]
        if kind == "free":
            qpos += list(pos[i]) + list(_quat_wxyz(dcm[i].T))
            qvel += list(dcm[i].T @ qd[s + 3:e]) + list(qd[s:s + 3])
        elif kind == "spherical":
            R = np.asarray(sp.mrp_to_dcm(q[s:e])).T  # child -> joint frame
            qpos += list(_quat_wxyz(R))
            qvel += list(qd[s:e])
        else:
            qpos += list(q[s:e])
            qvel += list(qd[s:e])
    return np.array(qpos), np.array(qvel)


def _depth_first(model):
    children = [[] for _ in range(model.n_bodies)]
    roots = []
    for i, p in enumerate(model.parents):
        (roots if p < 0 else children[p]).append(i)
    out = []

    def visit(i):
        out.append(i)
        for c in children[i]:
            visit(c)

    for r in roots:
        visit(r)
    return out
