"""URDF loader: ``load_urdf(source) -> Model``.

Follows the ROS URDF XML specification (http://wiki.ros.org/urdf/XML): ``<link>``
elements become bodies named by the link name, ``<joint>`` elements become joints named
by the joint name.

* Joint types: ``revolute`` and ``continuous`` (one angle each, diffmb ``revolute``),
  ``prismatic`` and ``fixed`` (merged into the nearest moving ancestor at build time and
  kept as a named frame, see :class:`diffmb.tree.model.ModelBuilder`). ``floating``, ``planar``
  and anything else raise ``ValueError``.
* ``<origin xyz rpy>`` of a joint is the pose of the joint (= child link) frame in the
  parent link frame: URDF's rotation ``R(rpy)`` maps child components to parent
  components, so the builder's DCM ``[J parent]`` is ``R^T = spatial.rpy_dcm(rpy)``.
* ``<inertial>``: ``com`` is the inertial origin ``xyz``; the inertia tensor, given in the
  inertial frame rotated by the origin ``rpy``, is rotated into link axes as
  ``I_link = R I R^T``. A link without ``<inertial>`` has mass 0.
* ``<axis xyz>`` defaults to ``(1, 0, 0)`` and is normalised.
* ``<limit lower upper effort>`` give ``lower``/``upper``/``effort_limit``; a missing
  ``lower``/``upper`` attribute (and every continuous joint) means unbounded — a deliberate
  departure from the specification's default of 0, which would lock the joint.
  ``velocity`` is validated but not stored. ``<dynamics damping>`` gives the viscous
  joint damping; ``friction`` is validated but not stored (diffmb has no Coulomb model).
* Base: with ``floating_base=False`` the root link (the one link that is never a child) is
  the fixed world: its frame is the world frame and its own mass is dropped. With
  ``floating_base=True`` the root link is a body on a 6-DOF ``free`` joint named
  :data:`ROOT_JOINT` (``q = [sigma; p]``, ``qd = [omega; v]`` body frame).
* Inertias are validated after fixed links are merged into their moving ancestor (real
  files carry invalid placeholders that vanish once merged); one still invalid then is
  kept with a warning naming the body and the links merged into it (``inertia="warn"``,
  the default), refused (``"error"``) or replaced by the nearest valid inertia
  (``"repair"``). Massless links (virtual links between the joints of a 3-axis hip) and
  point masses are accepted wherever the mass matrix stays regular
  (:mod:`diffmb.tree.regularity`); otherwise the error names the joints that move nothing.
* ``<mimic>`` is reported (a warning) and not enforced by :func:`load_urdf`: the joint
  stays an independent coordinate, as in Pinocchio's default model. :func:`mimic_closures`
  turns the file's mimic tags into coordinate couplings (``joint = multiplier * of +
  offset``, exact) for :func:`diffmb.close_loops`.
* A root link named ``world`` is the world frame (fixed base) or, with
  ``floating_base=True``, the free body, renamed ``world_link`` (the free joint carries the
  root link, as in Pinocchio). A non-root link named ``world`` is refused.
* Coordinate order: the movable joints in document order of the ``<joint>`` elements
  (the free root joint first), whatever the tree order; see :func:`diffmb.tree.model.reorder_joints`.

Every malformed input raises ``ValueError`` naming the file (for a path), the element,
the link or joint and the field.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import warnings
import xml.etree.ElementTree as ET
from collections import deque
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from ..math import spatial as sp
from ..tree.model import NO_MOVABLE_JOINTS, Model, ModelBuilder, reorder_joints

ROOT_JOINT = "root_joint"
"""Name of the free joint that carries the root link when ``floating_base=True``."""

_KIND = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic", "fixed": "fixed"}


@dataclass(frozen=True)
class _Link:
    name: str
    mass: float
    com: np.ndarray
    inertia: np.ndarray


@dataclass(frozen=True)
class _Joint:
    name: str
    kind: str
    parent: str
    child: str
    pos: np.ndarray
    rot: np.ndarray
    axis: np.ndarray
    lower: float
    upper: float
    effort: float
    damping: float


# ------------------------------------------------------------------ attribute parsing


def _floats(el, attr, n, default, where):
    """``n`` floats from a space-separated attribute, or ``default`` when absent."""
    text = el.get(attr) if el is not None else None
    if text is None:
        return np.asarray(default, dtype=float)
    try:
        vals = [float(t) for t in text.split()]
    except ValueError:
        vals = None
    if vals is None or len(vals) != n or not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{where}: attribute {attr!r}={text!r} must be {n} finite number(s)")
    return np.asarray(vals if n > 1 else vals[0], dtype=float)


def _float(el, attr, default, where, *, allow_inf=False):
    text = el.get(attr) if el is not None else None
    if text is None:
        return float(default)
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if math.isnan(v) or (math.isinf(v) and not allow_inf):
        raise ValueError(f"{where}: attribute {attr!r}={text!r} is not a finite number")
    return v


def _origin(el, where):
    """``(xyz, rpy)`` of the ``<origin>`` child of ``el`` (identity when absent)."""
    o = el.find("origin")
    w = f"{where} <origin>"
    return _floats(o, "xyz", 3, (0.0, 0.0, 0.0), w), _floats(o, "rpy", 3, (0.0, 0.0, 0.0), w)


def _rpy_dcm(rpy):
    """DCM [child parent] of an rpy origin (:func:`diffmb.math.spatial.rpy_dcm`) as numpy."""
    return np.asarray(sp.rpy_dcm(jnp.asarray(rpy, dtype=float)))


# ---------------------------------------------------------------------- elements


def _parse_link(el, where) -> _Link:
    name = el.get("name")
    if not name:
        raise ValueError(f"{where}: <link> without a 'name' attribute")
    w = f"{where}: link {name!r}"
    inertial = el.find("inertial")
    if inertial is None:
        return _Link(name, 0.0, np.zeros(3), np.zeros((3, 3)))
    xyz, rpy = _origin(inertial, f"{w} <inertial>")
    mass_el = inertial.find("mass")
    if mass_el is None or mass_el.get("value") is None:
        raise ValueError(f"{w} <inertial>: missing <mass value=...>")
    mass = _float(mass_el, "value", 0.0, f"{w} <mass>")
    if mass < 0:
        raise ValueError(f"{w} <mass>: mass must be non-negative, got {mass}")
    ie = inertial.find("inertia")
    c = {k: _float(ie, k, 0.0, f"{w} <inertia>") for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    I_in = np.array(
        [
            [c["ixx"], c["ixy"], c["ixz"]],
            [c["ixy"], c["iyy"], c["iyz"]],
            [c["ixz"], c["iyz"], c["izz"]],
        ]
    )
    R = _rpy_dcm(rpy).T
    inertia = R @ I_in @ R.T
    # validated after fixed links are merged (ModelBuilder.build): placeholders that are
    # invalid alone are often fine once folded into their moving ancestor
    return _Link(name, mass, xyz, inertia)


def _parse_joint(el, where) -> _Joint:
    name = el.get("name")
    if not name:
        raise ValueError(f"{where}: <joint> without a 'name' attribute")
    w = f"{where}: joint {name!r}"
    jtype = el.get("type")
    if jtype is None:
        raise ValueError(f"{w}: missing attribute 'type'")
    if jtype not in _KIND:
        raise ValueError(
            f"{w}: unsupported joint type {jtype!r} (supported: {', '.join(_KIND)})"
        )
    ends = {}
    for tag in ("parent", "child"):
        e = el.find(tag)
        if e is None or not e.get("link"):
            raise ValueError(f"{w}: missing <{tag} link=...>")
        ends[tag] = e.get("link")
    xyz, rpy = _origin(el, w)
    axis = _floats(el.find("axis"), "xyz", 3, (1.0, 0.0, 0.0), f"{w} <axis>")
    if jtype != "fixed":
        n = np.linalg.norm(axis)
        if n < 1e-12:
            raise ValueError(f"{w} <axis>: attribute 'xyz' must be non-zero")
        axis = axis / n
    lim = el.find("limit")
    lw = f"{w} <limit>"
    lower = _float(lim, "lower", -np.inf, lw, allow_inf=True)
    upper = _float(lim, "upper", np.inf, lw, allow_inf=True)
    effort = _float(lim, "effort", np.inf, lw, allow_inf=True)
    _float(lim, "velocity", np.inf, lw, allow_inf=True)
    if jtype == "continuous":
        lower, upper = -np.inf, np.inf
    if lower > upper:
        raise ValueError(f"{lw}: lower={lower} exceeds upper={upper}")
    if effort < 0:
        raise ValueError(f"{lw}: effort must be non-negative, got {effort}")
    dyn = el.find("dynamics")
    damping = _float(dyn, "damping", 0.0, f"{w} <dynamics>")
    _float(dyn, "friction", 0.0, f"{w} <dynamics>")
    if damping < 0:
        raise ValueError(f"{w} <dynamics>: damping must be non-negative, got {damping}")
    return _Joint(
        name=name,
        kind=_KIND[jtype],
        parent=ends["parent"],
        child=ends["child"],
        pos=xyz,
        rot=_rpy_dcm(rpy),
        axis=axis,
        lower=lower,
        upper=upper,
        effort=effort,
        damping=damping,
    )


# ---------------------------------------------------------------------- topology


def _tree(links: dict, joints: list, where):
    """Root link and joints in topological (breadth-first) order; validates the tree."""
    by_child = {}
    for j in joints:
        for tag, ln in (("parent", j.parent), ("child", j.child)):
            if ln not in links:
                raise ValueError(f"{where}: joint {j.name!r} <{tag}> names unknown link {ln!r}")
        if j.parent == j.child:
            raise ValueError(f"{where}: joint {j.name!r} connects link {j.child!r} to itself")
        if j.child in by_child:
            raise ValueError(
                f"{where}: link {j.child!r} has two parents (joints "
                f"{by_child[j.child].name!r} and {j.name!r})"
            )
        by_child[j.child] = j
    roots = [n for n in links if n not in by_child]
    if not roots:
        raise ValueError(f"{where}: the joints form a cycle; no root link (every link is a child)")
    if len(roots) > 1:
        raise ValueError(f"{where}: more than one root link (links that are never a child): {roots}")
    root = roots[0]
    children = {n: [] for n in links}
    for j in joints:
        children[j.parent].append(j)
    order, queue = [], deque([root])
    while queue:
        for j in children[queue.popleft()]:
            order.append(j)
            queue.append(j.child)
    if len(order) != len(joints):
        reached = {j.child for j in order} | {root}
        loop = [n for n in links if n not in reached]
        raise ValueError(f"{where}: the joints form a cycle through links {loop}")
    return root, order


# ---------------------------------------------------------------------- public API


def _read(source):
    """``(root element, description)`` from a path or an XML string."""
    if isinstance(source, str) and source.lstrip().startswith("<"):
        where, text = "URDF string", source
    elif isinstance(source, (str, pathlib.Path)):
        path = pathlib.Path(source)
        where, text = f"URDF file {str(path)!r}", path.read_text()
    else:
        raise TypeError(f"load_urdf: source must be a path or an XML string, got {type(source)}")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"{where}: XML parse error: {e}") from None
    if root.tag != "robot":
        raise ValueError(f"{where}: top-level element is <{root.tag}>, expected <robot>")
    return root, where


def load_urdf(source: str | os.PathLike, *, floating_base: bool = False,
              gravity: tuple[float, float, float] = (0.0, 0.0, -9.81),
              inertia: str = "warn") -> Model:
    """Build a :class:`~diffmb.tree.model.Model` from a URDF path or XML string.

    ``source``: a ``str``/``pathlib.Path`` path, or the XML itself (a string whose first
    non-blank character is ``<``). ``floating_base``: put the root link on a free joint
    named :data:`ROOT_JOINT` (first in ``q``) instead of fixing it to the world.
    ``inertia``: what to do with a body whose inertia is physically invalid after fixed
    links are merged (real files carry such placeholders): ``"warn"`` (default: keep it,
    warn naming the link), ``"error"`` (refuse), ``"repair"`` (nearest valid inertia, with
    a warning). See the module docstring for the conventions.
    """
    robot, where = _read(source)
    links = {}
    for el in robot.findall("link"):
        link = _parse_link(el, where)
        if link.name in links:
            raise ValueError(f"{where}: duplicate <link name={link.name!r}>")
        links[link.name] = link
    joints = [_parse_joint(el, where) for el in robot.findall("joint")]
    seen = set()
    for j in joints:
        if j.name in seen or (floating_base and j.name == ROOT_JOINT):
            raise ValueError(f"{where}: duplicate <joint name={j.name!r}>")
        seen.add(j.name)
    if not links:
        raise ValueError(f"{where}: <robot> has no <link> elements")
    root, order = _tree(links, joints, where)
    if "world" in links:
        if root != "world":
            raise ValueError(f"{where}: link 'world' is not the root link; the name 'world' is "
                             f"reserved for the fixed world frame: rename that link")
        if floating_base:  # the free joint carries the root link, as in Pinocchio: rename it
            links = {("world_link" if n == "world" else n): l for n, l in links.items()}
            root = "world_link"
            joints = [dataclasses.replace(j, parent="world_link") if j.parent == "world" else j for j in joints]
            order = [dataclasses.replace(j, parent="world_link") if j.parent == "world" else j for j in order]
    _warn_mimic(robot, where)
    if not floating_base and all(j.kind == "fixed" for j in joints):
        raise ValueError(f"{where}: {NO_MOVABLE_JOINTS}")

    b = ModelBuilder(gravity=tuple(float(g) for g in gravity))
    if floating_base:
        r = links[root]
        b.add_body(root, "world", "free", joint_name=ROOT_JOINT, mass=r.mass, com=r.com, inertia=r.inertia)
    for j in order:
        link = links[j.child]
        parent = "world" if (j.parent == root and not floating_base) else j.parent
        try:
            b.add_body(
                link.name,
                parent,
                j.kind,
                joint_name=j.name,
                axis=j.axis if j.kind != "fixed" else (1.0, 0.0, 0.0),
                pos=j.pos,
                rot=j.rot,
                mass=link.mass,
                com=link.com,
                inertia=link.inertia,
                damping=j.damping,
                effort_limit=j.effort,
                lower=j.lower,
                upper=j.upper,
            )
        except ValueError as e:
            raise ValueError(f"{where}: joint {j.name!r} -> link {link.name!r}: {e}") from None
    try:
        model = b.build(inertia=inertia, where=f"{where}: ", check_regular=True)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None
    public = ([ROOT_JOINT] if floating_base else []) + [j.name for j in joints if j.kind != "fixed"]
    return reorder_joints(model, public)


def _warn_mimic(robot, where):
    """``<mimic>`` couples a joint to another; :func:`load_urdf` keeps it an independent
    coordinate (as Pinocchio's default model does). Say so rather than ignore it silently."""
    for el in robot.findall("joint"):
        m = el.find("mimic")
        if m is not None:
            warnings.warn(f"{where}: joint {el.get('name')!r} <mimic joint={m.get('joint')!r}> is not "
                          f"enforced: {el.get('name')!r} is an independent coordinate (drive it, or "
                          f"enforce it with diffmb.close_loops(model, diffmb.formats.urdf.mimic_closures(file)) "
                          f"or a loop-file closure of kind 'joint')", stacklevel=3)


def mimic_closures(source) -> list:
    """The file's ``<mimic>`` tags as closure specs for :func:`diffmb.close_loops`:
    ``{"name": "mimic_<joint>", "kind": "joint", "joint", "of", "ratio", "offset"}``
    (``joint = multiplier * of + offset``, URDF's defaults 1 and 0)."""
    robot, where = _read(source)
    out = []
    for el in robot.findall("joint"):
        m = el.find("mimic")
        if m is None:
            continue
        name = el.get("name")
        w = f"{where}: joint {name!r} <mimic>"
        if not m.get("joint"):
            raise ValueError(f"{w}: missing attribute 'joint'")
        out.append({"name": f"mimic_{name}", "kind": "joint", "joint": name, "of": m.get("joint"),
                    "ratio": _float(m, "multiplier", 1.0, w), "offset": _float(m, "offset", 0.0, w)})
    return out
