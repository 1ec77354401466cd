"""Crease patterns of rigid panels, and their compilation into a closed-tree System.

A :class:`CreasePattern` is the flat (deployed) layout: panels as planar polygons in the
``z = 0`` plane and creases (hinges) between pairs of panels, each with the fold angle of
the initial state. :func:`build` turns it into the paper's tree-augmented model
(Fulton & Schaub sections 3-4): a root panel on a free (6-DOF) joint, a spanning tree of
the panel graph (:mod:`diffmb.origami.topology`) whose edges become revolute joints, and the cut
creases as hinge closures (5 constrained rows each) between node frames placed at the
crease midpoints with their ``x`` axis along the crease.

Frames and signs (the paper's tables leave them open; this is our choice):

* in the flat state every body frame is parallel to the world frame; a child panel's
  origin is the midpoint of the crease to its parent, the root's origin its centroid;
* a hinge axis runs along its crease, oriented so that a *positive* joint angle lifts the
  child panel towards ``+z`` — a *valley* fold in the FOLD convention (positive
  ``edges_foldAngle``), mountain folds are negative; ``+-pi`` is folded flat;
* hinge springs act as ``-K (theta - rest)``, rest 0 (flat) unless given.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ..closures.mobility import Mobility
from ..closures.nodes import analyse, make_closures
from ..system import TreeSystem
from ..tree.model import ModelBuilder
from . import rigid_repair, start_state, topology as topo
from .contact import check_panels, check_start, crease_inertias, cut_branches, panel_contact, start_diagnostics
from .polygon import plate_inertia, polygon_centroid


@dataclass
class Panel:
    """A rigid panel: ``vertices (k, 3)`` in the flat layout (``z = 0``), mass, and its
    3x3 inertia about the centroid in panel axes (``None``: thin plate from the polygon)."""

    name: str
    vertices: np.ndarray
    mass: float
    inertia: np.ndarray | None = None
    com: np.ndarray | None = None
    #: a thick panel: a slab of this thickness [m] whose bottom face is at ``base`` in the
    #: flat state (None: centred on the layout plane, ``-thickness / 2``)
    thickness: float = 0.0
    base: float | None = None

    @property
    def mid(self) -> float:
        """Height of the slab's mid-surface in the flat state (0 for a thin panel)."""
        return 0.0 if self.base is None else float(self.base) + self.thickness / 2

    @property
    def bottom(self) -> float:
        return self.mid - self.thickness / 2

    @property
    def top(self) -> float:
        return self.mid + self.thickness / 2

    def centroid(self) -> np.ndarray:
        """Centre of mass in the flat layout: ``com`` (or the polygon's centroid) in the
        layout plane, at the slab's mid-surface height."""
        c = np.array(self.com if self.com is not None else polygon_centroid(np.asarray(self.vertices, float)), float)
        c[2] += self.mid
        return c


@dataclass
class Crease:
    """A hinge between panels ``a`` and ``b`` along the segment ``p1 -> p2`` (flat layout).

    ``fold``: initial fold angle (rad; valley positive); ``stiffness``/``damping``/``rest``:
    the linear hinge of Fulton & Schaub eq. (11).
    """

    a: str
    b: str
    p1: np.ndarray
    p2: np.ndarray
    fold: float = 0.0
    stiffness: float = 0.0
    damping: float = 0.0
    rest: float = 0.0
    name: str | None = None
    assignment: str | None = None  # "M" / "V" / "U" as a file gives it; None: the fold's sign
    #: height [m] of the hinge line above the layout plane in the flat state: a thick
    #: panel's hinge sits on one of its faces (Chen, Peng & You 2015), 0 for thin panels
    height: float = 0.0

    @property
    def label(self) -> str:
        return self.name or f"{self.a}-{self.b}"

    @property
    def kind(self) -> str:
        """``M``, ``V`` or ``U``: the assignment, else the sign of the start fold."""
        if self.assignment is not None:
            return self.assignment
        return "V" if self.fold > 0 else "M" if self.fold < 0 else "U"


@dataclass
class CreasePattern:
    panels: list
    creases: list
    root: str
    cut: tuple = ()  # crease (a, b) pairs to cut; the rest of the tree is found by search
    method: str = "bfs"
    #: None: the folds are the start state (closed by build within ``closure_tol``); a
    #: tuple of crease labels: those are held and the others closed by the solve (``()``:
    #: one driver per degree of freedom, chosen by build)
    drive: tuple | None = None
    closure_tol: float | None = None  # relative to the pattern's size; None: start_state.CLOSURE_TOL
    notes: tuple = ()  # what the loader did on its own (warned by build as PatternNote)

    def panel(self, name) -> Panel:
        for p in self.panels:
            if p.name == name:
                return p
        raise ValueError(f"unknown panel {name!r}")


@dataclass(frozen=True)
class OrigamiInfo:
    """Chain matrix kappa (eq. 18, tip to base), closure pairs Gamma (eq. 19) and counts.

    ``hinge_names``: the tree hinges' coordinate names; ``panel_outlines``: one
    ``(body name, vertices)`` per panel, the vertices (tuples) in the body's own frame
    (for drawing: world = body origin + dcm^T @ vertex).
    """

    chains: tuple
    pairs: tuple
    n_b: int
    n_h: int
    n_p: int
    n_c: int
    hinge_names: tuple = field(default=())
    panel_outlines: tuple = field(default=())
    mobility: object = None  # diffmb.closures.mobility.Mobility at the start state
    repaired: str | None = None  # what the build did to a pattern its file's rounding locked


# ------------------------------------------------------------------------ build


def _validate(pattern: CreasePattern):
    names = [p.name for p in pattern.panels]
    if len(set(names)) != len(names):
        raise ValueError("duplicate panel names")
    for p in pattern.panels:
        v = np.asarray(p.vertices, float)
        if v.ndim != 2 or v.shape[1] != 3 or len(v) < 3:
            raise ValueError(f"panel {p.name!r}: vertices must be (k >= 3, 3)")
        if np.abs(v[:, 2]).max() > 1e-9:
            raise ValueError(f"panel {p.name!r}: the flat layout must lie in z = 0")
        if p.mass <= 0:
            raise ValueError(f"panel {p.name!r}: mass must be positive")
    for c in pattern.creases:
        for n in (c.a, c.b):
            if n not in names:
                raise ValueError(f"crease {c.label!r}: unknown panel {n!r}")
        if np.linalg.norm(np.asarray(c.p2, float) - np.asarray(c.p1, float)) < 1e-12:
            raise ValueError(f"crease {c.label!r}: zero length")
    if pattern.root not in names:
        raise ValueError(f"root panel {pattern.root!r} is not a panel")
    by_name = {p.name: p for p in pattern.panels}
    for p in pattern.panels:
        if not (np.isfinite(p.thickness) and p.thickness >= 0):
            raise ValueError(f"panel {p.name!r}: thickness must be a non-negative number, got {p.thickness!r}")
    for c in pattern.creases:
        for n in (c.a, c.b):
            q = by_name[n]
            if not q.bottom - 1e-12 <= c.height <= q.top + 1e-12:
                raise ValueError(f"crease {c.label!r}: its hinge at height {c.height:.6g} m is outside panel {n!r} "
                                 f"(a slab from {q.bottom:.6g} to {q.top:.6g} m); a hinge sits on or in its panels")


def _hinge_axis(crease: Crease, child: Panel) -> np.ndarray:
    """Unit crease direction oriented so a positive angle lifts ``child`` to +z."""
    p1, p2 = np.asarray(crease.p1, float), np.asarray(crease.p2, float)
    a = (p2 - p1) / np.linalg.norm(p2 - p1)
    d = child.centroid() - (p1 + p2) / 2
    return a if np.cross(a, d)[2] > 0 else -a


def _node_rot(axis: np.ndarray) -> np.ndarray:
    e3 = np.array([0.0, 0.0, 1.0])
    return np.stack([axis, np.cross(e3, axis), e3])


def build(pattern: CreasePattern, *, repair: bool = True, **options):
    """Compile ``pattern`` into a :class:`~diffmb.system.TreeSystem` with closures.

    Returns ``(system, info)``; ``info`` is an :class:`OrigamiInfo`. The initial state
    has the tree hinges at their creases' ``fold`` angles; the cut creases' folds must be
    consistent with them (checked: a ValueError names the closure that does not meet).
    ``tau_fn``/``forcing``/``potential_fn``: extra hinge models (see
    :mod:`diffmb.origami.hinges`), passed to the :class:`~diffmb.system.TreeSystem`.
    ``contact``: a :class:`~diffmb.origami.contact.ContactOptions` (``forces=False``: the
    detector alone, the paper's model exactly) or None (neither). ``repair``: a pattern
    that builds locked is moved to the nearest rigidly foldable geometry where that
    moves no vertex by more than the closure tolerance (files round their coordinates:
    :mod:`diffmb.origami.rigid_repair`); a note says by how much. Other keywords:
    ``free_root, stabilization, baumgarte, tau_fn, forcing, gravity,
    projection_iterations, potential_fn, contact``.
    """
    error = None
    try:
        (system, info), said = _recorded(_build, pattern, **options)
        locked = bool(info.n_p) and info.mobility.locked
    except start_state.CannotFold as e:   # asked to fold by drivers, and the probe finds no way
        locked, error, said = True, e, e.said
    if repair and locked:
        fixed, why, folds = _repaired(pattern)
        if fixed is not None:
            try:
                (system2, info2), again = _recorded(_build, fixed, probe=folds, **options)
            except start_state.CannotFold:
                info2 = None
            if info2 is not None and not info2.mobility.locked:
                # the loader's notes, what the repair did, then the repaired build's own
                loader = [w for w in again if str(w[0]) in fixed.notes]
                _replay([*loader, (why, start_state.PatternNote), *(w for w in again if w not in loader)])
                return system2, dataclasses.replace(info2, repaired=why)
            why = f"the nearest geometry that folds rigidly at three depths ({why}) still builds locked"
        if error is not None:
            _replay(said)
            raise start_state.CannotFold(f"{error}; {why}") from None
        said = [(start_state.LockedPattern(f"{m}; {why}") if issubclass(c, start_state.LockedPattern) else m, c)
                for m, c in said]
    _replay(said)
    if error is not None:
        raise error
    return system, info


def _recorded(fn, *args, **kwargs) -> tuple:
    """``(fn(...), [(message, category), ...])``: the warnings it gave, held back. If it
    raises, they are given first (a refusal still follows the loader's notes), except for
    :class:`~diffmb.origami.start_state.CannotFold`, which carries them (``said``) to a
    repair."""
    failure = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(*args, **kwargs)
        except start_state.CannotFold as e:
            e.said = [(w.message, w.category) for w in caught]
            raise
        except Exception as e:   # given back below, after its warnings
            failure = e
    said = [(w.message, w.category) for w in caught]
    if failure is not None:
        _replay(said)
        raise failure
    return out, said


def _replay(said) -> None:
    for message, category in said:
        warnings.warn(message, category, stacklevel=3)


def _repaired(pattern: CreasePattern) -> tuple:
    """``(pattern, what, folds)``: ``pattern`` moved to the nearest rigidly foldable
    geometry (:func:`~diffmb.origami.rigid_repair.nearest_rigid`), what that did and the
    folded states it found (each crease label: angle, the shallowest first), or ``(None, why not, None)``
    where that needs more than the closure tolerance or finds nothing."""
    if any(p.thickness or p.base is not None for p in pattern.panels):
        return None, "thick panels are not repaired", None
    index = {p.name: k for k, p in enumerate(pattern.panels)}
    side = {"M": -1.0, "V": 1.0}
    found = rigid_repair.nearest_rigid(
        [np.asarray(p.vertices, float) for p in pattern.panels],
        [(index[c.a], index[c.b], c.p1, c.p2, side.get(c.kind, 0.0)) for c in pattern.creases],
        index[pattern.root])
    size = _size(pattern)
    tol = start_state.CLOSURE_TOL if pattern.closure_tol is None else pattern.closure_tol
    if found is None:
        return None, "no nearby geometry that folds rigidly was found", None
    if found.moved > tol * size:
        return None, (f"the nearest geometry that folds rigidly moves a vertex by {found.moved:.3g} m, "
                      f"more than the closure tolerance {tol:g} x size {size:.4g} m (not applied)"), None
    against = sorted({c.label for state in found.folds for c, a in zip(pattern.creases, state)
                      if c.kind in side and a * side[c.kind] < -1e-6})
    if against:   # a square twist folds rigidly with another assignment, not with its own
        shown = ", ".join(against[:6]) + (" ..." if len(against) > 6 else "")
        return None, (f"the nearest geometry that folds rigidly does so only with crease(s) {shown} against "
                      "their mountain/valley assignment (not applied)"), None
    panels = []
    for p, v in zip(pattern.panels, found.vertices):
        shift = np.mean(v - np.asarray(p.vertices, float), axis=0)
        com = None if p.com is None else np.asarray(p.com, float) + shift
        panels.append(dataclasses.replace(p, vertices=v, com=com))
    creases = [dataclasses.replace(c, p1=found.point(c.p1), p2=found.point(c.p2)) for c in pattern.creases]
    what = (f"the pattern builds locked as its file gives it (its coordinates are rounded: its folded states "
            f"miss closing by {found.residual:.3g} m); moved its vertices by at most {found.moved:.3g} m "
            f"({found.moved / size:.2g} of its size) to the nearest rigidly foldable geometry")
    folds = [{c.label: f for c, f in zip(pattern.creases, state)} for state in found.folds]
    return dataclasses.replace(pattern, panels=panels, creases=creases), what, folds


def _build(pattern: CreasePattern, *, free_root: bool = True, stabilization: str = "projection",
           baumgarte=(0.0, 0.0), tau_fn=None, forcing=None, gravity=(0.0, 0.0, 0.0),
           projection_iterations: int = 3, potential_fn=None, contact=None, probe=None):
    """:func:`build` without the repair; ``probe``: folded states (each crease label:
    angle), the shallowest first, on the branch of the pattern's assignment: the mobility
    probe tries the first's direction first (else the assignment's), and a driven start
    that does not close from its guess is continued from them (:func:`start_state.close`)."""
    _validate(pattern)
    creases = {frozenset((c.a, c.b)): c for c in pattern.creases}
    if len(creases) != len(pattern.creases):
        raise ValueError("two creases join the same pair of panels")
    for note in pattern.notes:
        warnings.warn(note, start_state.PatternNote, stacklevel=2)
    tp = _tree(pattern)
    panels = {p.name: p for p in pattern.panels}
    if contact is not None:
        check_panels(panels, contact)   # before anything compiles
    origin = {pattern.root: panels[pattern.root].centroid()}
    b = ModelBuilder(gravity=gravity)
    hinge_names, q0 = [], []
    root = panels[pattern.root]
    b.add_body(root.name, "world", "free" if free_root else "fixed",
               pos=origin[root.name], mass=root.mass, com=root.centroid() - origin[root.name],
               inertia=_inertia(root), joint_name=f"{root.name}_free")
    q0 += [0.0] * 6 if free_root else []
    for parent, child in tp.tree_edges:
        c = creases[frozenset((parent, child))]
        p1, p2 = np.asarray(c.p1, float), np.asarray(c.p2, float)
        mid = (p1 + p2) / 2 + np.array([0.0, 0.0, c.height])
        origin[child] = mid
        axis = _hinge_axis(c, panels[child])
        b.add_body(child, parent, "revolute", axis=axis, pos=mid - origin[parent],
                   mass=panels[child].mass, com=panels[child].centroid() - mid,
                   inertia=_inertia(panels[child]), joint_name=f"theta_{child}",
                   stiffness=c.stiffness, damping=c.damping, rest=c.rest)
        hinge_names.append(f"theta_{child}")
        q0.append(c.fold)
    model = b.build()
    q0 = np.asarray(q0)
    pairs = []
    for a_name, b_name in tp.cut_edges:
        c = creases[frozenset((a_name, b_name))]
        p1, p2 = np.asarray(c.p1, float), np.asarray(c.p2, float)
        mid = (p1 + p2) / 2 + np.array([0.0, 0.0, c.height])
        axis = (p2 - p1) / np.linalg.norm(p2 - p1)
        R = _node_rot(axis)
        pairs.append(dict(name=c.label, body_a=a_name, body_b=b_name, kind="hinge", axis=0,
                          pos_a=mid - origin[a_name], pos_b=mid - origin[b_name], rot_a=R, rot_b=R))
    closures = make_closures(model, q0, pairs, analyse_rank=False) if pairs else None
    tree_creases = [creases[frozenset((p, ch))] for p, ch in tp.tree_edges]
    if closures is None:
        stabilization = "none"
        mobility = Mobility(dof=len(hinge_names), infinitesimal=len(hinge_names), rank=0, rows=0, n=len(hinge_names))
    else:
        joint_of = {c.label: name for c, name in zip(tree_creases, hinge_names)}
        side = {"M": -1.0, "V": 1.0}
        direction = np.zeros(model.nv)   # the folding motion the assignment points to, probed first
        for c, ch in zip(tree_creases, (ch for _, ch in tp.tree_edges)):
            direction[model.body_slices[model.body_index(ch)][0]] = (side.get(c.kind, 0.0) if probe is None
                                                                     else probe[0][c.label])
        seeds = []
        for state in probe or ():
            seed = np.array(q0, float)
            for c, ch in zip(tree_creases, (ch for _, ch in tp.tree_edges)):
                seed[model.body_slices[model.body_index(ch)][0]] = state[c.label]
            seeds.append(seed)
        q0, notes = start_state.close(
            model, closures, q0, size=_size(pattern), tol=pattern.closure_tol,
            hold=[f"{root.name}_free"] if free_root else [], joints=hinge_names,
            hinge_cols=[model.body_slices[model.body_index(ch)][0] for _, ch in tp.tree_edges],
            labels=[c.label for c in tree_creases], direction=direction, seeds=seeds,
            drive=None if pattern.drive is None else tuple(joint_of[d] for d in pattern.drive))
        for note in notes:
            warnings.warn(note, start_state.PatternNote, stacklevel=2)
        tol = start_state.CLOSURE_TOL if pattern.closure_tol is None else pattern.closure_tol
        toward = direction - q0 if probe is not None else direction
        closures = dataclasses.replace(closures, report=analyse(model, q0, closures, direction=toward,
                                                                check_tol=max(1e-6, tol * _size(pattern))))
        mobility = closures.report.mobility
        if mobility.locked:
            warnings.warn(f"{mobility} (the closure Jacobian has rank {mobility.rank} of {mobility.n} hinge rates, "
                          "and no probe found a closed state a small step away)", start_state.LockedPattern,
                          stacklevel=2)
    roles = {"hinge": tuple(hinge_names)}
    if model.floating_base:  # the hub: the free root's attitude MRPs and body angular rate
        s, _ = model.body_slices[0]
        roles["hub_rate"] = model.velocity_names[s:s + 3]
        roles["hub_attitude"] = model.coordinate_names[s:s + 3]
    kw = dict(closures=closures, stabilization=stabilization, baumgarte=baumgarte, tau_fn=tau_fn,
              forcing=forcing, projection_iterations=projection_iterations, potential_fn=potential_fn, roles=roles)
    system = TreeSystem(model, q0, np.zeros_like(q0), **kw)
    if contact is not None:
        # the detector sees each slab's mid-surface (thin panels as they are)
        lifted = {n: dataclasses.replace(p, vertices=_mid_surface(p), com=p.centroid(), inertia=_inertia(p),
                                         thickness=0.0, base=None) if p.thickness or p.mid else p
                  for n, p in panels.items()}
        parts = (lifted, tuple(tp.nodes), origin, model,
                 [(p, ch, creases[frozenset((p, ch))]) for p, ch in tp.tree_edges],
                 [creases[frozenset(e)] for e in tp.cut_edges], _hinge_axis, contact)
        element = panel_contact(*parts)
        start = {}
        if element.forces and (element.tree_creases or element.cut_creases):
            start["crease_inertia"] = crease_inertias(system, element, system.default_params())
        if element.cut_creases:
            start["cut_start"] = cut_branches(system, element, system.default_params())
        if start:
            element = panel_contact(*parts, **start)
        system = TreeSystem(model, q0, np.zeros_like(q0), elements=(element,), **kw)
        if contact.forces:
            check_start(system, element, system.default_params())
        params = system.default_params()
        d = start_diagnostics(system, element, params)
        kinds = {c.label: c.kind for c in pattern.creases}
        overlap = None
        if "panel_overlap" in d and float(d["panel_overlap"]) > float(params["elements"][0]["overlap_tolerance"]):
            overlap = (float(d["panel_overlap"]), element.pair_labels[int(d["panel_overlap_pair"])])
        for w in start_state.branch_warnings([(lab, kinds.get(lab, "U")) for lab in element.crease_labels],
                                             np.asarray(d.get("crease_angle", [])), overlap):
            warnings.warn(w, start_state.PatternNote, stacklevel=2)
    outlines = tuple(
        (name, tuple(tuple(float(c) for c in v) for v in _mid_surface(panels[name]) - origin[name]))
        for name in tp.nodes
    )
    return system, dataclasses.replace(_info(tp, tuple(hinge_names), outlines), mobility=mobility)


def _mid_surface(panel: Panel) -> np.ndarray:
    """The panel's outline at its mid-surface height (the layout plane for thin panels)."""
    return np.asarray(panel.vertices, float) + np.array([0.0, 0.0, panel.mid])


def _size(pattern: CreasePattern) -> float:
    """The pattern's bounding-box diagonal [m] (the closure tolerance scales with it)."""
    V = np.concatenate([np.asarray(p.vertices, float) for p in pattern.panels])
    return max(float(np.linalg.norm(np.ptp(V, axis=0))), 1e-300)


def _tree(pattern: CreasePattern) -> topo.Topology:
    """The spanning tree of the panel graph, with every driving crease in it: a driver
    the search cut is swapped for another crease of its loop (any edge of a fundamental
    cycle can be the cut one)."""
    edges = [(c.a, c.b) for c in pattern.creases]
    if not edges:   # one panel: a tree of one body
        g = nx.Graph()
        g.add_node(pattern.root)
        return topo.spanning_tree(g, pattern.root, method=pattern.method)
    tp = topo.spanning_tree(edges, pattern.root, method=pattern.method, cut=pattern.cut)
    by_label = {c.label: frozenset((c.a, c.b)) for c in pattern.creases}
    drivers = {by_label[d] for d in (pattern.drive or ()) if d in by_label}
    for _ in range(len(drivers)):
        cuts = [frozenset(e) for e in tp.cut_edges]
        k = next((i for i, e in enumerate(cuts) if e in drivers), None)
        if k is None:
            break
        loop = tp.cycles()[k]
        swap = next((frozenset(e) for e in zip(loop, loop[1:]) if frozenset(e) not in drivers), None)
        if swap is None:
            raise ValueError(f"drive: every crease of the loop through {sorted(cuts[k])} is a driver; "
                             "one of them must be left to close it")
        cuts[k] = swap
        tp = topo.spanning_tree(edges, pattern.root, method=pattern.method, cut=[tuple(e) for e in cuts])
    return tp


def _inertia(panel: Panel) -> np.ndarray:
    """The panel's inertia about its centre of mass: the mid-surface plate's (given, or
    from the polygon), plus a slab's ``m t^2 / 12`` about the in-plane axes."""
    plate = (np.asarray(panel.inertia, float) if panel.inertia is not None
             else plate_inertia(np.asarray(panel.vertices, float), panel.mass))
    return plate + panel.mass * panel.thickness ** 2 / 12 * np.diag([1.0, 1.0, 0.0])


def _info(tp: topo.Topology, hinge_names=(), outlines=()) -> OrigamiInfo:
    leaves = [n for i, n in enumerate(tp.nodes) if not tp.children[i]]
    chains = tuple(tp.path_to_root(n) for n in leaves)
    with_nodes = {n for e in tp.cut_edges for n in e}
    return OrigamiInfo(
        chains=chains,
        pairs=tuple(tuple(e) for e in tp.cut_edges),
        n_b=len(tp.nodes),
        n_h=len(chains),
        n_p=len(tp.cut_edges),
        n_c=len(with_nodes),
        hinge_names=hinge_names,
        panel_outlines=outlines,
    )
