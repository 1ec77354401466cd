"""Closed chains on a user's model: loop closures by name and a consistent initial state
(the JSON loop file that carries both: :mod:`diffmb.formats.loops`).

A loop is cut at one joint; the cut joint becomes a closure between two nodes, one on
each side (Fulton & Schaub sec. 2.3; Madonna's cut joints). Users name them as they name
joints::

    loops = diffmb.close_loops(model, [
        {"name": "B", "kind": "revolute", "a": "coupler", "b": "rocker",
         "point": [1.0, 0, 0], "point_b": [0.8, 0, 0], "axis": [0, 0, 1]},
    ])
    q0, qd0 = diffmb.assemble(model, loops, {"crank": 0.3}, fixed=["crank"], rates={"crank": 2.0})

Keys of a closure (anything else is an error):

``name``      optional label (default ``loop<k>``)
``kind``      ``revolute`` / ``hinge`` (rotation about ``axis`` free), ``spherical`` /
              ``point`` / ``ball`` (rotation free), ``weld`` / ``fixed`` (nothing free),
              ``prismatic`` / ``slider`` (translation along ``axis`` free)
``a``, ``b``  link (body) or frame names; a frame merged away by a fixed joint (a URDF
              ``coupler_tip`` link) places the node on its body; ``world`` is the ground
``point``     the node on ``a``, in ``a``'s frame (default the origin)
``point_b``   the node on ``b``, in ``b``'s frame (default: the point of ``b`` that
              coincides with ``point`` at the configuration ``q`` given to
              :func:`close_loops`, the model's zero pose by default)
``axis``      for revolute and prismatic: the joint axis, a vector in ``a``'s frame
``axis_b``    the same axis in ``b``'s frame (default: from ``q``, as ``point_b``)

A coordinate coupling (a gear, a URDF ``<mimic>``, MuJoCo's joint equality) is a closure
of kind ``joint`` (also ``mimic``, ``coupling``) between two revolute or prismatic joints:
``joint`` = ``offset + ratio * of`` (``ratio`` 1 and ``offset`` 0 by default), or ``poly``
``[a0, ..., a4]`` for ``joint = a0 + a1 of + ... + a4 of^4``; without ``of`` the joint is
held at ``offset`` (or ``a0``). Its keys: ``name``, ``kind``, ``joint``, ``of``,
``ratio``, ``offset``, ``poly``.

A loop file (JSON) holds ``{"closures": [...], "initial": {"q": {joint: value},
"fixed": [joint, ...], "rates": {joint: value}}}``: :func:`diffmb.formats.loops.read_loops`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from ..tree.api import forward_kinematics
from ..tree.model import Model
from . import nodes as cl
from .couplings import coupling

KINDS = {"revolute": "hinge", "hinge": "hinge", "spherical": "point", "point": "point",
         "ball": "point", "weld": "weld", "fixed": "weld", "prismatic": "slider", "slider": "slider"}
KEYS = ("name", "kind", "a", "b", "point", "point_b", "axis", "axis_b")
COUPLING_KINDS = ("joint", "mimic", "coupling")
COUPLING_KEYS = ("name", "kind", "joint", "of", "ratio", "offset", "poly")
WORLD = "world"


def _vector(spec, key, what, default=None):
    v = spec.get(key, default)
    if v is None:
        return None
    try:
        arr = np.asarray(v, float)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.shape != (3,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{what}: {key!r} must be 3 finite numbers, got {v!r}")
    return arr


def _basis(axis, what, key):
    """DCM ``[node, body]`` whose node x axis is ``axis`` (body components)."""
    n = np.linalg.norm(axis)
    if n < 1e-12:
        raise ValueError(f"{what}: {key!r} must be a non-zero vector")
    x = axis / n
    helper = np.eye(3)[int(np.argmin(np.abs(x)))]
    y = np.cross(x, helper)
    y /= np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)])


def _place(model: Model, name, what, key):
    """``(body index, DCM [frame body], origin in body)`` of a body, frame or the world."""
    if name == WORLD:
        return -1, np.eye(3), np.zeros(3)
    if name in model.body_names:
        return model.body_index(name), np.eye(3), np.zeros(3)
    if name in model.frame_names:
        k = model.frame_names.index(name)
        return (int(model.frame_bodies[k]), np.asarray(model.frame_rot[k], float),
                np.asarray(model.frame_pos[k], float))
    raise ValueError(f"{what}: {key!r} names {name!r}, which is neither a link, a frame nor "
                     f"'world'; links: {', '.join(model.body_names)}"
                     + (f"; frames: {', '.join(model.frame_names)}" if model.frame_names else ""))


def _world_pose(poses, body, rot, pos):
    """World DCM ``[node world]`` and origin of a node fixed on ``body`` (-1: world);
    ``poses``: every body's, as numpy arrays."""
    if body < 0:
        return rot, pos
    E, p = poses[0][body], poses[1][body]
    return rot @ E, p + E.T @ pos


def close_loops(model: Model, specs: list | dict, q: ArrayLike | None = None) -> cl.LoopClosures:
    """:class:`~diffmb.closures.nodes.LoopClosures` from closure descriptions (module doc).

    ``specs``: a list of dicts, or a loop-file dict with a ``closures`` list. ``q``: the
    configuration where nodes B are placed when ``point_b``/``axis_b`` are not given.
    """
    if isinstance(specs, dict):
        specs = specs.get("closures", None)
    if not isinstance(specs, list | tuple) or not specs:
        raise ValueError("closures: give a non-empty list of closures (dicts)")
    q = model.neutral() if q is None else jnp.asarray(q, float)
    poses = tuple(map(np.asarray, forward_kinematics(model, q)))   # one compiled program
    pairs, names = [], set()
    for k, spec in enumerate(specs):
        what = f"closure {k}"
        if not isinstance(spec, dict):
            raise ValueError(f"{what}: expected a dict with keys {', '.join(KEYS)}, got {spec!r}")
        name = str(spec.get("name", f"loop{k}"))
        what = f"closure {name!r}"
        if name in names:
            raise ValueError(f"{what}: duplicate name")
        names.add(name)
        if str(spec.get("kind", "")).lower() in COUPLING_KINDS:
            pairs.append(_coupling(model, spec, name, what))
            continue
        unknown = sorted(set(spec) - set(KEYS))
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(KEYS)}")
        for key in ("kind", "a", "b"):
            if key not in spec:
                raise ValueError(f"{what}: missing {key!r}")
        kind = KINDS.get(str(spec["kind"]).lower())
        if kind is None:
            raise ValueError(f"{what}: kind {spec['kind']!r} is not one of {', '.join((*KINDS, *COUPLING_KINDS))}")
        ba, Ra, pa = _place(model, spec["a"], what, "a")
        bb, Rb, pb = _place(model, spec["b"], what, "b")
        if ba == bb:
            raise ValueError(f"{what}: 'a' and 'b' are on the same body; a closure joins two bodies")
        point = _vector(spec, "point", what, (0.0, 0.0, 0.0))
        axis = _vector(spec, "axis", what)
        if kind in ("hinge", "slider") and axis is None:
            raise ValueError(f"{what}: a {spec['kind']} closure needs 'axis' (a vector in {spec['a']!r}'s frame)")
        if kind in ("point", "weld") and (axis is not None or "axis_b" in spec):
            raise ValueError(f"{what}: a {spec['kind']} closure has no axis")
        node_a = _basis(axis, what, "axis") if axis is not None else np.eye(3)
        rot_a, pos_a = node_a @ Ra, pa + Ra.T @ point       # in body a
        Ew, pw = _world_pose(poses, ba, rot_a, pos_a)         # node A in the world at q
        Eb, ob = _world_pose(poses, bb, np.eye(3), np.zeros(3))
        point_b = _vector(spec, "point_b", what)
        pos_b = Rb.T @ point_b + pb if point_b is not None else Eb @ (pw - ob)
        axis_b = _vector(spec, "axis_b", what)
        rot_b = _basis(axis_b, what, "axis_b") @ Rb if axis_b is not None else Ew @ Eb.T
        pairs.append(dict(name=name, body_a=ba, body_b=bb, kind=kind, axis=0,
                          rot_a=rot_a, pos_a=pos_a, rot_b=rot_b, pos_b=pos_b))
    return cl.loop_closures(model, pairs)


def _scalar_coordinate(model: Model, joint, what, key):
    """Coordinate index of a revolute or prismatic joint named by ``key``."""
    if not isinstance(joint, str) or joint not in model.joint_names:
        raise ValueError(f"{what}: {key!r} names {joint!r}, which is not a joint; joints: "
                         f"{', '.join(model.joint_names)}")
    b = model.body_joint.index(model.joint_names.index(joint))
    kind = model.joint_kinds[b]
    if kind not in ("revolute", "prismatic"):
        raise ValueError(f"{what}: joint {joint!r} is {kind}; a coupling joins revolute or prismatic joints")
    return model.body_slices[b][0]


def _number(spec, key, what, default):
    v = spec.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{what}: {key!r} must be a finite number, got {v!r}")
    return float(v)


def _coupling(model: Model, spec, name, what) -> dict:
    """A coordinate-coupling pair (:func:`diffmb.closures.nodes.coupling`) from a ``joint`` spec."""
    unknown = sorted(set(spec) - set(COUPLING_KEYS))
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {', '.join(map(repr, unknown))} for a {spec['kind']!r} "
                         f"closure; valid keys: {', '.join(COUPLING_KEYS)}")
    if "joint" not in spec:
        raise ValueError(f"{what}: missing 'joint' (the coupled joint)")
    y = _scalar_coordinate(model, spec["joint"], what, "joint")
    x = _scalar_coordinate(model, spec["of"], what, "of") if spec.get("of") is not None else None
    if "poly" in spec:
        if "ratio" in spec or "offset" in spec:
            raise ValueError(f"{what}: give either 'poly' or 'ratio'/'offset', not both")
        try:
            coef = np.asarray(spec["poly"], float).reshape(-1)
        except (TypeError, ValueError):
            coef = None
        if coef is None or not 1 <= coef.size <= 5 or not np.all(np.isfinite(coef)):
            raise ValueError(f"{what}: 'poly' must be 1 to 5 finite numbers [a0, ..., a4], got {spec['poly']!r}")
    else:
        coef = np.array([_number(spec, "offset", what, 0.0), _number(spec, "ratio", what, 1.0)])
    if x == y:
        raise ValueError(f"{what}: joint {spec['joint']!r} cannot be coupled to itself")
    return coupling(name, y, x, coef if x is not None else coef[:1])


def _joint_columns(model: Model, names, what):
    cols, slices = [], model.body_slices
    for n in names:
        if n not in model.joint_names:
            raise ValueError(f"{what}: unknown joint {n!r}; joints: {', '.join(model.joint_names)}")
        j = model.joint_names.index(n)
        b = model.body_joint.index(j)
        s, e = slices[b]
        cols += list(range(s, e))
    return cols


def coordinates(model: Model, guess, what) -> np.ndarray:
    """Joint coordinates from ``guess``: ``None`` (zeros), a dict by joint name (the rest
    zero) or a full vector; ``what`` names the input in errors."""
    if guess is None:
        return np.zeros(model.nq)
    if isinstance(guess, dict):
        q = np.zeros(model.nq)
        for n, v in guess.items():
            cols = _joint_columns(model, [n], what)
            vals = np.atleast_1d(np.asarray(v, float))
            if vals.size != len(cols) or not np.all(np.isfinite(vals)):
                raise ValueError(f"{what}: joint {n!r} takes {len(cols)} finite number(s), got {v!r}")
            q[cols] = vals
        return q
    q = np.asarray(guess, float)
    if q.shape != (model.nq,):
        raise ValueError(f"{what}: expected {model.nq} numbers or a dict by joint name, got shape {q.shape}")
    return q


def _rows_of_residual(model, loops, rows: tuple, q):
    return cl.position_residual(model, q, loops).reshape(-1)[np.asarray(rows, dtype=int)]


# module-level jits: assembling the same structure again reuses the compiled programs
_closure_residual = eqx.filter_jit(_rows_of_residual)
_closure_residual_jacobian = eqx.filter_jit(jax.jacfwd(_rows_of_residual, argnums=3))


@eqx.filter_jit
def _velocity_jacobian(model, loops, rows: tuple, q):
    return cl.jacobian(model, q, loops, np.asarray(rows, dtype=int))


def _near(model: Model, q, guess, free) -> np.ndarray:
    """``q`` with every moved revolute angle taken within half a turn of its guess: the
    same pose, on the branch the guess gave (a solve never returns a 2 pi jump)."""
    q = np.array(q, float)
    slices = model.body_slices   # a property that walks every body: once, not once a body
    revolute = {slices[b][0] for b, k in enumerate(model.joint_kinds) if k == "revolute"}
    for c in (int(i) for i in free if int(i) in revolute):
        q[c] = guess[c] + (q[c] - guess[c] + math.pi) % (2 * math.pi) - math.pi
    return q


#: A closure residual [m] accepted when Gauss-Newton stalls above ``tol`` at round-off.
ACCEPTED = 1e-9


def assemble(model: Model, loops: cl.LoopClosures, q_guess: ArrayLike | None = None, *,
             fixed: Sequence[str] = (), rates: dict | None = None,
             tol: float = 1e-12, max_iter: int = 50) -> tuple[Array, Array]:
    """A consistent initial state ``(q0, qd0)`` for a closed chain.

    ``q_guess``: joint values by name (others 0) or a full ``q``; the joints named in
    ``fixed`` keep their guessed values (the independent coordinates) and the others are
    moved by Gauss-Newton with minimum-norm steps until every closure holds to ``tol``.
    ``rates``: joint rates by name, held; the other rates are the minimum-norm solution of
    ``G qd = 0`` (so the velocity closes too). Every moved revolute angle comes back
    within half a turn of its guess (the same pose; never a 2 pi jump). Raises ValueError
    naming the closures that stay open.
    """
    q = coordinates(model, q_guess, "assemble: q_guess")
    guess = q.copy()
    hold = _joint_columns(model, fixed, "assemble: fixed")
    free = np.array([i for i in range(model.nq) if i not in hold], dtype=int)
    rows = np.asarray(loops.rows)

    key = tuple(int(r) for r in rows)
    residual = lambda q_: _closure_residual(model, loops, key, q_)
    jac = lambda q_: _closure_residual_jacobian(model, loops, key, q_)
    r = np.asarray(residual(q))
    for _ in range(max_iter):
        if np.abs(r).max() <= tol:
            break
        J = np.asarray(jac(q))[:, free]
        step = np.linalg.lstsq(J, -r, rcond=None)[0]
        q_new = q.copy()
        q_new[free] += step
        r_new = np.asarray(residual(q_new))
        t = 1.0
        while np.linalg.norm(r_new) > np.linalg.norm(r) and t > 1e-4:  # damped when it overshoots
            t /= 2
            q_new = q.copy()
            q_new[free] += t * step
            r_new = np.asarray(residual(q_new))
        if np.linalg.norm(r_new) >= np.linalg.norm(r) and np.abs(r).max() <= ACCEPTED:
            # round-off's floor, above ``tol`` for a large pattern: no step lowers it (a
            # 156-panel Miura-ori spent 50 steps of 10 halvings each, 1 s, at 1.5e-12)
            break
        q, r = q_new, r_new
    if not np.abs(r).max() <= max(tol, ACCEPTED):
        labels = cl.row_labels(loops.closures)
        open_ = np.flatnonzero(np.abs(r) > ACCEPTED)
        worst = list(dict.fromkeys(labels[i].split(":")[0] for i in open_[np.argsort(-np.abs(r[open_]))]))
        named = ", ".join(map(repr, worst[:6])) + (f" and {len(worst) - 6} more" if len(worst) > 6 else "")
        raise ValueError(f"assemble: closure(s) {named} stay open (residual "
                         f"{np.abs(r).max():.3g}) after {max_iter} Gauss-Newton steps; start from a "
                         f"guess nearer a closed configuration, or hold fewer joints fixed")
    q = _near(model, q, guess, free)
    qd = coordinates(model, rates, "assemble: rates")
    held = _joint_columns(model, list((rates or {}).keys()), "assemble: rates")
    if len(rows):
        G = np.asarray(_velocity_jacobian(model, loops, key, jnp.asarray(q)))
        other = np.array([i for i in range(model.nv) if i not in held], dtype=int)
        if other.size:
            qd[other] = np.linalg.lstsq(G[:, other], -G[:, held] @ qd[held], rcond=None)[0]
        if np.abs(G @ qd).max() > 1e-9 * max(1.0, np.abs(qd).max()):
            raise ValueError("assemble: the given rates do not fit the closed chain (G qd = "
                             f"{np.abs(G @ qd).max():.3g}); give fewer rates")
    return jnp.asarray(q), jnp.asarray(qd)
