"""Load crease patterns from FOLD files (and write them back).

FOLD (https://github.com/edemaine/fold) is JSON. What :func:`load_fold` reads:

* frames: the top level and ``file_frames`` with ``frame_inherit`` / ``frame_parent``
  (:mod:`diffmb.formats.fold_frames`); the crease-pattern frame is the first whose
  ``frame_classes`` says ``creasePattern`` (else the first flat one, else a folded form);
  ``frame=K`` starts the run from frame ``K`` (FOLD numbering: 0 the top level);
* ``vertices_coords``: 2-D or 3-D. A flat sheet may lie in any plane (fitted and rotated
  into ``z = 0``); a ``foldedForm`` frame, or 3-D coordinates that do not lie in one
  plane, is a folded form: developed into its crease pattern and the run starts folded
  as the file has it (:mod:`diffmb.formats.fold_develop`);
* ``faces_vertices``: each face's vertex indices in order (>= 3, non-zero area; a
  repeated vertex is a slit); without it, the faces of the planar graph of the edges
  (:mod:`diffmb.formats.planar_faces`). Every face becomes a rigid panel (mass
  ``density * area``, thin-plate inertia from :func:`~diffmb.origami.polygon.plate_inertia`);
* ``edges_vertices`` (without it, the faces' sides) and ``edges_assignment`` (without
  it, ``B`` on one face and ``U`` between two): ``B`` boundary, ``M`` mountain, ``V``
  valley, ``U`` unassigned (hinges: exactly two faces), ``F`` flat and ``J`` join
  (welded, below), ``C`` cut (a boundary on both sides, as FOLD 1.2 has it); the letters
  are case-insensitive;
* ``edges_foldAngle`` (optional): degrees in ``[-180, 180]``. The FOLD spec: "The fold
  angle is positive for valley folds, negative for mountain folds, and zero for flat,
  unassigned, and border folds" — the same sign as :mod:`diffmb.origami.pattern`
  (positive lifts a panel towards ``+z``, the side the counter-clockwise faces face), so
  the angle is used as it is, in radians. A sign that contradicts ``M``/``V`` is rejected.
* ``diffmb:faces_thickness`` [m], ``diffmb:faces_base`` [m] and ``diffmb:edges_height``
  [m] (optional): thick panels (:mod:`diffmb.origami.thick`): each face's slab thickness
  and the height of its bottom face in the flat state (null: centred), and each hinge's
  height.
* ``diffmb:edges_stiffness`` [N m/rad] and ``diffmb:edges_damping`` [N m s/rad]
  (optional; FOLD's namespaced custom fields): a crease's own hinge numbers, where the
  file gives them (``null`` entries, and creases of files without them, take the
  ``stiffness``/``damping`` arguments); non-negative, the same on collinear segments of
  one hinge.

Conventions chosen here:

* ``F`` (flat) edges are *welded*: the faces they join are merged into one rigid panel
  (union-find), with summed mass, the area-weighted centre of mass and the summed
  (parallel-axis) plate inertias; its polygon is the outer boundary of the merged faces.
  This is exact for a rigid panel drawn as several facets (e.g. a triangulated quad, as
  Origami Simulator exports them), and adds no stiff hinge to the dynamics.
* ``U`` (unassigned) edges are free hinges: fold angle from ``edges_foldAngle`` or 0.
* Initial fold angles: a folded form's, else frame ``frame``'s, else
  ``edges_foldAngle``, else 0 (flat). With ``fold_fraction`` given, every ``M`` crease
  starts at ``-pi * fold_fraction`` and every ``V`` crease at ``+pi * fold_fraction``
  (``U`` at 0); with ``drive`` (crease labels) only those are held there and the others
  are closed by the loop-closure solve from it. :func:`~diffmb.origami.pattern.build`
  closes the start state within ``closure_tol`` or refuses it naming the closure and the
  nearest rigid state (:mod:`diffmb.origami.start_state`).
* Root: the face (panel) of largest area (the first on ties) or the face index given;
  ``root="hub"`` is the same as the default — the root panel is the free-flying hub,
  with ``hub_mass`` (inertia scaled with it) when given. The remaining tree is breadth
  first; non-tree creases become hinge closures in :func:`build`.
* Names: panel ``f<i>`` (``i`` the lowest face index of a merged panel), crease
  ``e<i>`` (``i`` the FOLD edge index; for collinear edge segments between the same two
  panels, merged into one hinge, the lowest).

Malformed input raises ValueError naming the key and the index.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from ..origami.pattern import Crease, CreasePattern, Panel
from ..origami.polygon import plate_inertia, polygon_area, polygon_centroid, polygon_signed_area
from . import fold_develop as dev, fold_frames as ff, planar_faces as planar

ASSIGNMENT_ORDER = ("B", "M", "V", "F", "U", "C", "J")
ASSIGNMENTS = set(ASSIGNMENT_ORDER)
_TOL = 1e-9


def load_fold(path_or_dict, *, density: float = 1.0, root=None, hub_mass: float | None = None,
              stiffness: float = 0.01, damping: float = 0.0,
              fold_fraction: float | None = None, frame: int | None = None,
              drive=None, closure_tol: float | None = None) -> CreasePattern:
    """A :class:`~diffmb.origami.pattern.CreasePattern` from a FOLD file, JSON text or dict.

    ``density``: areal density [kg/m^2]; ``stiffness`` [N m/rad], ``damping``
    [N m s/rad]: every hinge's linear spring / damper (rest angle 0, i.e. flat);
    ``root``: ``None``/``"hub"`` (largest panel) or a face index; ``hub_mass``: the root
    panel's mass; ``fold_fraction``, ``frame``, ``drive``: the start state (module
    docstring); ``closure_tol``: how far the start state may miss closing, relative to
    the pattern's size, and still be closed by the solve (None: the default of
    :func:`~diffmb.origami.pattern.build`). What the loader did on its own (a plane
    fitted, a folded form developed, frames offered) is in the pattern's ``notes``.
    """
    data, where = _read(path_or_dict)
    try:
        return _load(data, density=density, root=root, hub_mass=hub_mass, stiffness=stiffness,
                     damping=damping, fold_fraction=fold_fraction, frame=frame, drive=drive,
                     closure_tol=closure_tol)
    except ValueError as e:
        raise ValueError(f"{where}: {e}" if where else str(e)) from None


# --------------------------------------------------------------------------- reading


def _read(src):
    if isinstance(src, dict):
        return src, ""
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if isinstance(src, str) and src.lstrip().startswith("{"):
            text, where = src, ""
        else:
            if not os.path.isfile(path):
                raise ValueError(f"FOLD file not found: {path}")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            where = path
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where or 'FOLD text'}: not valid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{where or 'FOLD text'}: expected a JSON object at the top level")
        return data, where
    raise TypeError(f"load_fold: expected a path, JSON text or dict, got {type(src).__name__}")


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int_list(value, key, i, n_max, min_len):
    if not isinstance(value, (list, tuple)) or len(value) < min_len:
        raise ValueError(f"{key}[{i}]: expected a list of at least {min_len} vertex indices, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{key}[{i}]: vertex index {v!r} is not an integer")
        if not 0 <= v < n_max:
            raise ValueError(f"{key}[{i}]: vertex index {v} out of range (there are {n_max} vertices)")
        out.append(v)
    return out


def _list(data, key, required=True):
    if key not in data:
        if required:
            raise ValueError(f"missing key {key!r}")
        return None
    value = data[key]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{key}: expected a list, got {type(value).__name__}")
    return value


def _load(data, *, density, root, hub_mass, stiffness, damping, fold_fraction, frame, drive, closure_tol):
    _check_arguments(density, hub_mass, stiffness, damping, fold_fraction)
    frames = ff.resolve_frames(data)
    cp = ff.pick(frames)
    geo = _geometry(frames, cp)
    notes = list(geo.notes)
    edges, assign, angles, edge_index = _read_edges(geo.frame, geo.faces, len(geo.V))
    border = _face_borders(geo.faces, edge_index, assign, notes)
    if geo.folded is not None:   # a folded form: its angles, the assignment giving flat folds their sign
        if _against(geo.V, geo.folded, geo.faces, edges, border, assign):
            geo.V[:, 1] *= -1.0
            notes.append("every mountain/valley crease of the folded form folds the other way from its faces' "
                         "orientation (the faces run clockwise seen from the valley side): read from the other side")
        angles = _angles_of_state(geo.V, geo.folded, geo.faces, edges, border, assign, "the folded form")
    offered = ff.folded_frames(frames, cp)
    if frame is not None:
        angles = _frame_angles(frames, frame, cp, geo, edges, border, assign)
        notes.append(f"started from {ff.where(frame)}")
    elif offered and geo.folded is None:
        notes.append(f"the file also holds folded states ({_frame_list(offered)}); start from one with "
                     f"frame=K (CLI: --frame K)")
    if fold_fraction is not None:
        angles = [math.pi * fold_fraction * {"M": -1.0, "V": 1.0}.get(a, 0.0) for a in assign]
    groups, panel_of, by_pair = _settle_panels(geo.faces, border, assign, geo.V, edges, notes)
    panels, areas = _panels(groups, geo.faces, geo.V, density)
    root_name = _root(root, panels, areas, panel_of, len(geo.faces), hub_mass)
    _thicken(panels, groups, geo.frame, len(geo.faces))
    own = {key: _per_edge(geo.frame, f"diffmb:edges_{key}", len(edges), default)
           for key, default in (("stiffness", stiffness), ("damping", damping))}
    own["height"] = _per_edge(geo.frame, "diffmb:edges_height", len(edges), 0.0, signed=True)
    creases = [_crease(pair, idx, geo.V, geo.faces, edges, angles, border, panel_of, panels, own, assign)
               for pair, idx in sorted(by_pair.items(), key=lambda kv: kv[1][0])]
    held = _drivers(drive, creases, edges, fold_fraction)
    return CreasePattern(list(panels.values()), creases, root=root_name, drive=held,
                         closure_tol=closure_tol, notes=tuple(notes))


def _frame_list(ks) -> str:
    ks = list(ks)
    return f"frame {ks[0]}" if len(ks) == 1 else (f"frames {ks[0]}-{ks[-1]}" if ks == list(range(ks[0], ks[-1] + 1))
                                                  else "frames " + ", ".join(map(str, ks)))


@dataclass
class _Geometry:
    """The crease pattern's vertices ``V`` (``z = 0``), its faces, the frame they came
    from, the folded form's vertices when the frame was one (else None), and notes."""

    V: np.ndarray
    faces: list
    frame: dict
    folded: np.ndarray | None
    notes: tuple


def _geometry(frames, cp) -> _Geometry:
    """The crease pattern of frame ``cp``: flat in any plane (rotated into ``z = 0``), or a
    folded form (2-D or 3-D) developed into it (:mod:`diffmb.formats.fold_develop`)."""
    f = frames[cp]
    V, dims = _read_vertices(f)
    faces = _read_faces(f, V)
    notes = []
    if faces is None:
        if dims == 3 and not np.allclose(V[:, 2], 0.0, atol=1e-9 * dev.size(V)):
            flat, note = dev.flat_sheet(V, [])
            if flat is None:
                raise ValueError("faces_vertices: missing, and the faces of a folded (non-planar) edge graph "
                                 "cannot be derived; give faces_vertices")
            V = flat
            notes.append(note)
        faces = planar.faces_of(V, _list(f, "edges_vertices"))
        _check_faces(faces, V)
        notes.append(f"faces_vertices: not in the file; {len(faces)} faces derived from the planar graph of its edges")
    folded_class = "foldedForm" in ff.classes(f) and "creasePattern" not in ff.classes(f)
    if not folded_class:
        flat, note = dev.flat_sheet(V, faces)
        if flat is not None:
            if note:
                notes.append(note)
            return _Geometry(flat, faces, f, None, tuple(notes))
    what = ("its frame_classes say foldedForm" if folded_class else "its vertices do not lie in one plane")
    V2, flipped = dev.develop(V, faces)
    if flipped:
        notes.append(f"faces {flipped[:5]}{' ...' if len(flipped) > 5 else ''} run clockwise against their "
                     "neighbours; laid out to match them")
    notes.append(f"{ff.where(cp)} is a folded form ({what}, {'2-D' if dims == 2 else '3-D'}): developed into its "
                 "crease pattern, and the run starts folded as the file has it")
    return _Geometry(V2, faces, f, V, tuple(notes))


def _against(V2, V3, faces, edges, border, assign) -> bool:
    """Whether most M/V creases not folded flat fold against their assignment (the file's
    faces are oriented from the other side)."""
    angles, flat = dev.fold_angles(V2, V3, faces, edges, border)
    signs = [(a == "V") == (ang > 0) for i, (ang, a) in enumerate(zip(angles, assign))
             if a in "MV" and i not in flat and abs(ang) > 1e-6]
    return bool(signs) and sum(not s for s in signs) > len(signs) / 2


def _angles_of_state(V2, V3, faces, edges, border, assign, what) -> list:
    """Fold angles [rad] of the folded state ``V3`` of crease pattern ``V2``; a crease
    folded flat takes its sign from ``M``/``V``; an angle against its assignment, or a
    crease folded flat with neither, is an error naming the edge."""
    angles, flat = dev.fold_angles(V2, V3, faces, edges, border)
    out = []
    for i, (ang, a) in enumerate(zip(angles, assign)):
        if a in "BCJ" or a == "F":
            if a in "FJ" and abs(ang) > 1e-6:
                raise ValueError(f"edges_assignment[{i}]: {a} edge folded by {math.degrees(ang):.6g} deg in {what} "
                                 "(an F or J edge stays flat)")
            out.append(0.0)
            continue
        if i in flat:
            if a not in "MV":
                raise ValueError(f"edges_assignment[{i}]: {a} crease folded flat (180 deg) in {what}; its "
                                 "direction cannot be read from the geometry: assign it M or V")
            ang = math.pi if a == "V" else -math.pi
        elif (a == "V" and ang < -1e-9) or (a == "M" and ang > 1e-9):
            raise ValueError(f"edges_assignment[{i}]: {a} crease folded by {math.degrees(ang):.6g} deg in {what} "
                             "(FOLD: valley positive, mountain negative)")
        out.append(float(ang))
    return out


def _frame_angles(frames, k, cp, geo, edges, border, assign) -> list:
    """The fold angles of frame ``k``: from its 3-D (or 2-D folded) vertices when it has
    them, else its ``edges_foldAngle``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < len(frames):
        raise ValueError(f"frame: {k!r} is not a frame of the file (frames 0-{len(frames) - 1})")
    f = frames[k]
    if k == cp and geo.folded is None:
        return [_fold_angle(a, i, assign[i]) for i, a in enumerate(f.get("edges_foldAngle") or [0.0] * len(edges))]
    if ff.has_geometry(f) and f.get("vertices_coords") is not geo.frame.get("vertices_coords"):
        V3, _ = _read_vertices(f, where=f"{ff.where(k)}: vertices_coords")
        if len(V3) != len(geo.V):
            raise ValueError(f"{ff.where(k)}: {len(V3)} vertices_coords for the crease pattern's {len(geo.V)}")
        return _angles_of_state(geo.V, V3, geo.faces, edges, border, assign, ff.where(k))
    if "edges_foldAngle" in f:
        raw = f["edges_foldAngle"]
        if not isinstance(raw, list) or len(raw) != len(edges):
            raise ValueError(f"{ff.where(k)}: edges_foldAngle: expected {len(edges)} numbers")
        return [_fold_angle(_wrapped(a), i, assign[i]) for i, a in enumerate(raw)]
    raise ValueError(f"{ff.where(k)}: neither vertices_coords nor edges_foldAngle; it is not a folded state")


def _wrapped(deg):
    """An angle in degrees brought into [-180, 180] (a run exported past flat keeps turning)."""
    if not _number(deg):
        return deg
    return deg - 360.0 * round(deg / 360.0) if abs(deg) > 180 + 1e-9 else deg


def _drivers(drive, creases, edges, fold_fraction):
    """``None`` (the start state as given) or the labels of the creases held while the
    others are closed by the solve (``()``: chosen by the build, one per degree of
    freedom). ``drive``: crease labels ``e<i>`` or edge indices."""
    if drive is None:
        return None
    labels = {c.label for c in creases}
    out = []
    for d in (drive.split(",") if isinstance(drive, str) else drive):
        d = str(d).strip()
        if not d:
            continue
        name = d if d.startswith("e") else f"e{d}"
        if name not in labels:
            raise ValueError(f"drive: {d!r} is not a crease (hinges: {', '.join(sorted(labels, key=_edge_number))})")
        out.append(name)
    if out and fold_fraction is None:
        raise ValueError("drive: give the fold fraction the driving creases are set to "
                         "(fold_fraction, CLI --fold-fraction)")
    return tuple(out)


def _edge_number(label) -> int:
    return int(label[1:]) if label[1:].isdigit() else 0


def _check_arguments(density, hub_mass, stiffness, damping, fold_fraction):
    """The numbers :func:`load_fold` is called with: finite, positive where they must be."""
    for name, v in (("density", density), ("stiffness", stiffness), ("damping", damping)):
        if not _number(v):
            raise ValueError(f"{name}: expected a number, got {v!r}")
    if density <= 0:
        raise ValueError(f"density must be positive, got {density}")
    if hub_mass is not None and not (_number(hub_mass) and hub_mass > 0):
        raise ValueError(f"hub_mass must be a positive number, got {hub_mass!r}")
    if fold_fraction is not None and not (_number(fold_fraction) and -1 <= fold_fraction <= 1):
        raise ValueError(f"fold_fraction must be a number in [-1, 1], got {fold_fraction!r}")


def _read_vertices(data, where="vertices_coords"):
    """``(V (n, 3), dims)``: ``vertices_coords`` (2-D or 3-D; a 2-D vertex has ``z = 0``)
    and the largest dimension given."""
    coords = _list(data, "vertices_coords")
    if len(coords) < 3:
        raise ValueError(f"{where}: expected at least 3 vertices, got {len(coords)}")
    V = np.zeros((len(coords), 3))
    dims = 2
    for i, c in enumerate(coords):
        if not isinstance(c, (list, tuple)) or len(c) not in (2, 3) or not all(_number(x) for x in c):
            raise ValueError(f"{where}[{i}]: expected 2 or 3 numbers, got {c!r}")
        V[i, :len(c)] = c
        dims = max(dims, len(c))
    return V, dims


def _read_faces(data, V):
    """``faces_vertices`` (None when the file has none): each face's vertex indices, a
    polygon of non-zero area whose sides do not cross (a repeated vertex is a slit)."""
    faces_raw = _list(data, "faces_vertices", required=False)
    if faces_raw is None:
        return None
    if not faces_raw:
        raise ValueError("faces_vertices: no faces")
    faces = [_int_list(f, "faces_vertices", i, len(V), 3) for i, f in enumerate(faces_raw)]
    _check_faces(faces, V)
    return faces


def _check_faces(faces, V):
    for i, f in enumerate(faces):
        twice = [v for k, v in enumerate(f) if v == f[(k + 1) % len(f)]]
        if twice:
            raise ValueError(f"faces_vertices[{i}]: vertex {twice[0]} repeated next to itself (a side of zero length)")
        poly = V[f]
        area = polygon_area(poly) if np.allclose(poly[:, 2], 0.0) else 0.5 * np.linalg.norm(dev._newell(poly))
        scale = max(float(np.ptp(poly, axis=0).max()), 1e-300)
        if area <= 1e-9 * scale * scale:
            raise ValueError(f"faces_vertices[{i}]: degenerate face (zero area)")
        if np.allclose(poly[:, 2], 0.0) and _self_intersecting(poly):
            raise ValueError(f"faces_vertices[{i}]: not a simple polygon (its sides cross)")


def _read_edges(data, faces, n_v):
    """``(edges, assign, angles, edge_index)``: each edge's two vertices, its assignment
    letter (upper case; without ``edges_assignment``: ``B`` on one face, ``U`` between
    two), its fold angle in radians (``edges_foldAngle``, else 0) and ``{frozenset of its
    vertices: edge index}``. Without ``edges_vertices`` (and no other ``edges_`` key) the
    edges are the faces' sides."""
    edges_raw = _list(data, "edges_vertices", required=False)
    if edges_raw is None:
        given = [k for k in ("edges_assignment", "edges_foldAngle") if k in data]
        if given:
            raise ValueError(f"missing key 'edges_vertices' ({given[0]} refers to it)")
        edges_raw = list({frozenset((f[k], f[(k + 1) % len(f)])): [f[k], f[(k + 1) % len(f)]]
                          for f in faces for k in range(len(f))}.values())
    assign_raw = _list(data, "edges_assignment", required=False)
    angles_raw = _list(data, "edges_foldAngle", required=False)
    for key, raw in (("edges_assignment", assign_raw), ("edges_foldAngle", angles_raw)):
        if raw is not None and len(raw) != len(edges_raw):
            raise ValueError(f"{key}: {len(raw)} entries for {len(edges_raw)} edges_vertices")
    edge_index = {}
    edges, assign, angles = [], [], []
    sides = Counter(frozenset((f[k], f[(k + 1) % len(f)])) for f in faces for k in range(len(f)))
    for i, e in enumerate(edges_raw):
        e = _int_list(e, "edges_vertices", i, n_v, 2)
        if len(e) != 2 or e[0] == e[1]:
            raise ValueError(f"edges_vertices[{i}]: expected two distinct vertex indices, got {e!r}")
        key = frozenset(e)
        if key in edge_index:
            raise ValueError(f"edges_vertices[{i}]: duplicate of edge {edge_index[key]}")
        edge_index[key] = i
        edges.append(e)
        a = assign_raw[i] if assign_raw is not None else ("U" if sides[key] == 2 else "B")
        if not isinstance(a, str) or a.upper() not in ASSIGNMENTS:
            raise ValueError(f"edges_assignment[{i}]: unknown assignment {a!r} (expected one of "
                             f"{', '.join(ASSIGNMENT_ORDER)})")
        a = a.upper()
        assign.append(a)
        angles.append(0.0 if angles_raw is None else _fold_angle(angles_raw[i], i, a))
    return edges, assign, angles, edge_index


def _fold_angle(ang, i, a) -> float:
    """Edge ``i``'s ``edges_foldAngle`` entry in radians (``null``: 0), checked against
    its assignment ``a`` (FOLD: valley positive, mountain negative, B and F flat)."""
    if ang is None:
        ang = 0.0
    if not _number(ang):
        raise ValueError(f"edges_foldAngle[{i}]: expected a number (degrees), got {ang!r}")
    if abs(ang) > 180 + 1e-9:
        raise ValueError(f"edges_foldAngle[{i}]: {ang} deg is outside [-180, 180]")
    if (a == "V" and ang < 0) or (a == "M" and ang > 0):
        raise ValueError(f"edges_foldAngle[{i}]: {ang} deg contradicts assignment {a!r} "
                         "(FOLD: valley positive, mountain negative)")
    if a in "BFCJ" and ang != 0:
        raise ValueError(f"edges_foldAngle[{i}]: {a!r} edge with non-zero fold angle {ang}")
    return math.radians(ang)


def _some(items, n: int = 6) -> str:
    items = list(items)
    return ", ".join(f"e{i}" for i in items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _face_borders(faces, edge_index, assign, notes):
    """``{edge: [faces it borders]}``; every face side is an edge, a boundary edge borders
    one face and every other edge two."""
    border = defaultdict(list)
    for fi, f in enumerate(faces):
        for k in range(len(f)):
            key = frozenset((f[k], f[(k + 1) % len(f)]))
            if key not in edge_index:
                raise ValueError(f"faces_vertices[{fi}]: side {f[k]}-{f[(k + 1) % len(f)]} "
                                 "is not in edges_vertices")
            border[edge_index[key]].append(fi)
    cuts, dangling = [], []
    for i, a in enumerate(assign):
        fs = border[i]
        n, slit = len(fs), len(fs) == 2 and fs[0] == fs[1]
        if a == "B" and n == 2 and not slit:   # a border drawn inside the sheet: a cut
            assign[i] = "C"
            cuts.append(i)
        elif a == "C" and n not in (1, 2):
            raise ValueError(f"edges_vertices[{i}]: cut edge (C) borders {n} faces, expected 1 or 2")
        elif a not in "BC" and slit:           # a crease that ends inside a face cannot fold
            assign[i] = "F"
            dangling.append(i)
        elif a == "B" and n != 1 and not slit:
            raise ValueError(f"edges_vertices[{i}]: boundary edge (B) borders {n} faces, expected 1")
        elif a not in "BC" and n != 2:
            raise ValueError(f"edges_vertices[{i}]: {a} crease borders {n} faces, expected exactly 2")
    if cuts:
        notes.append(f"boundary edges inside the sheet ({_some(cuts)}) separate two faces: read as cuts (C)")
    if dangling:
        notes.append(f"creases {_some(dangling)} end inside a face (both their sides are one face): a rigid panel "
                     "cannot fold along them; left out")
    return border


def _weld_flat_edges(faces, border, assign):
    """Faces joined by ``F`` edges welded into one panel (union-find): ``groups``
    (``{lowest face index: member faces}``) and ``panel_of`` (``{face: panel name}``)."""
    parent = list(range(len(faces)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, a in enumerate(assign):
        if a in "FJ":
            x, y = (find(f) for f in border[i])
            if x != y:
                parent[max(x, y)] = min(x, y)
    groups = defaultdict(list)
    for fi in range(len(faces)):
        groups[find(fi)].append(fi)
    panel_of = {fi: f"f{g}" for g, members in groups.items() for fi in members}
    return groups, panel_of


def _panels(groups, faces, V, density):
    """One rigid :class:`~diffmb.origami.pattern.Panel` per group of welded faces: summed
    mass, area-weighted centre of mass, summed (parallel-axis) plate inertias, the outer
    boundary as its polygon; and each panel's area."""
    panels, areas = {}, {}
    for g, members in sorted(groups.items()):
        polys = [V[faces[fi]] for fi in members]
        m = [density * polygon_area(p) for p in polys]
        c = [polygon_centroid(p) for p in polys]
        mass = sum(m)
        com = sum(mi * ci for mi, ci in zip(m, c)) / mass
        inertia = np.zeros((3, 3))
        for mi, ci, p in zip(m, c, polys):
            d = ci - com
            inertia += plate_inertia(p, mi) + mi * (d @ d * np.eye(3) - np.outer(d, d))
        outline = polys[0] if len(members) == 1 else _outline(faces, members, V, g)
        name = f"f{g}"
        panels[name] = Panel(name, outline, mass, inertia, com)
        areas[name] = mass / density
    return panels, areas


def _root(root, panels, areas, panel_of, n_faces, hub_mass) -> str:
    """The root panel's name (the largest, first on ties, or the panel of face ``root``),
    its mass set to ``hub_mass`` (inertia scaled with it) when given."""
    if root is None or root == "hub":
        root_name = max(panels, key=lambda n: (areas[n], -int(n[1:])))
    elif isinstance(root, (int, np.integer)) and not isinstance(root, bool):
        if not 0 <= root < n_faces:
            raise ValueError(f"root: face index {root} out of range (there are {n_faces} faces)")
        root_name = panel_of[int(root)]
    else:
        raise ValueError(f"root: expected None, 'hub' or a face index, got {root!r}")
    if hub_mass is not None:
        p = panels[root_name]
        p.inertia = p.inertia * (hub_mass / p.mass)
        p.mass = float(hub_mass)
    return root_name


def _hinge_pairs(assign, border, panel_of):
    """``({frozenset of two panels: [crease edges between them]}, inside)``: collinear
    segments between the same two panels become one hinge; ``inside``: the creases whose
    two faces are welded into one panel (they cannot fold)."""
    by_pair, inside = defaultdict(list), []
    for i, a in enumerate(assign):
        if a in "MVU":
            fa, fb = border[i]
            pa, pb = panel_of[fa], panel_of[fb]
            if pa == pb:
                inside.append(i)
                continue
            by_pair[frozenset((pa, pb))].append(i)
    return by_pair, inside


def _collinear(idx, V, edges) -> bool:
    """Whether the edges ``idx`` lie on one line (one hinge axis)."""
    i0 = idx[0]
    pts = np.array([V[v] for i in idx for v in edges[i]])
    d = V[edges[i0][1]] - V[edges[i0][0]]
    d = d / np.linalg.norm(d)
    off = pts - V[edges[i0][0]]
    return bool(np.abs(off[:, 0] * d[1] - off[:, 1] * d[0]).max() <= 1e-9 * max(1.0, np.abs(off).max()))


def _settle_panels(faces, border, assign, V, edges, notes):
    """``(groups, panel_of, by_pair)`` once every crease that cannot fold is left out:
    creases inside one welded panel, and creases between two panels that share another,
    non-collinear crease (two hinge axes hold the panels together: they are one rigid
    body, welded). Welding only merges, so this ends."""
    while True:
        groups, panel_of = _weld_flat_edges(faces, border, assign)
        by_pair, inside = _hinge_pairs(assign, border, panel_of)
        bent = [(pair, idx) for pair, idx in by_pair.items() if not _collinear(idx, V, edges)]
        if inside:
            notes.append(f"creases {_some(inside)} join faces welded into one panel by F/J edges: they cannot "
                         "fold; left out")
        for pair, idx in bent:
            notes.append(f"panels {sorted(pair)} share creases {_some(idx)} that are not on one line: two hinge "
                         "axes lock them together; welded into one panel")
        if not inside and not bent:
            return groups, panel_of, by_pair
        for i in inside + [i for _, idx in bent for i in idx]:
            assign[i] = "J"


def _crease(pair, idx, V, faces, edges, angles, border, panel_of, panels, own, assign) -> Crease:
    """The hinge ``e<idx[0]>`` between the two panels of ``pair`` along the crease edges
    ``idx``: collinear, one fold angle, one stiffness and damping (``own``: per edge),
    each panel's centre of mass on its own side of the hinge line."""
    i0 = idx[0]
    pts = np.array([V[v] for i in idx for v in edges[i]])
    d = V[edges[i0][1]] - V[edges[i0][0]]
    d = d / np.linalg.norm(d)
    off = pts - V[edges[i0][0]]
    if any(abs(angles[i] - angles[i0]) > 1e-12 for i in idx):
        raise ValueError(f"edges_foldAngle[{i0}]: collinear creases {idx} between the same "
                         "panels have different fold angles")
    s = off @ d
    p1, p2 = pts[np.argmin(s)], pts[np.argmax(s)]
    a_name, b_name = panel_of[border[i0][0]], panel_of[border[i0][1]]
    for name in (a_name, b_name):  # build() orients a hinge by the side the panel's CoM is on
        side = _side(p1, p2, panels[name].centroid())
        face_side = _side(p1, p2, polygon_centroid(V[faces[next(f for f in border[i0] if panel_of[f] == name)]]))
        if side * face_side <= 0:
            raise ValueError(f"edges_vertices[{i0}]: the centre of mass of panel {name!r} does not lie "
                             "on its side of the crease (non-convex panel); the hinge sign is ambiguous")
    for key, values in own.items():
        if any(values[i] != values[i0] for i in idx):
            raise ValueError(f"diffmb:edges_{key}[{i0}]: collinear creases {idx} between the same panels "
                             f"(one hinge) have different values {[values[i] for i in idx]}")
    return Crease(a_name, b_name, p1, p2, angles[i0], own["stiffness"][i0], own["damping"][i0], name=f"e{i0}",
                  assignment=assign[i0], height=own["height"][i0])


def _per_edge(data, key, n, default, *, signed=False, of="edges_vertices") -> list:
    """Per-edge (or per-face, ``of``) numbers of the optional list ``key``, non-negative
    unless ``signed`` (``null``: ``default``)."""
    raw = _list(data, key, required=False)
    if raw is None:
        return [default if default is None else float(default)] * n
    if len(raw) != n:
        raise ValueError(f"{key}: {len(raw)} entries for {n} {of}")
    out = []
    for i, v in enumerate(raw):
        if v is None:
            out.append(default if default is None else float(default))
        elif not _number(v) or (v < 0 and not signed):
            raise ValueError(f"{key}[{i}]: expected a {'' if signed else 'non-negative '}number or null, got {v!r}")
        else:
            out.append(float(v))
    return out


def _thicken(panels, groups, data, n_faces):
    """Thick panels from ``diffmb:faces_thickness`` [m] and ``diffmb:faces_base`` (the
    bottom face's height in the flat state; null: centred): the faces welded into one
    panel must agree."""
    thick = _per_edge(data, "diffmb:faces_thickness", n_faces, 0.0, of="faces_vertices")
    base = _per_edge(data, "diffmb:faces_base", n_faces, None, signed=True, of="faces_vertices")
    for g, members in groups.items():
        for key, values in (("thickness", thick), ("base", base)):
            if any(values[f] != values[members[0]] for f in members):
                raise ValueError(f"diffmb:faces_{key}[{members[0]}]: faces {members} welded into one panel have "
                                 f"different values {[values[f] for f in members]}")
        panels[f"f{g}"].thickness = thick[members[0]]
        panels[f"f{g}"].base = base[members[0]]


# --------------------------------------------------------------------------- geometry


def _side(p1, p2, x) -> float:
    d, r = p2 - p1, x - p1
    s = d[0] * r[1] - d[1] * r[0]
    return 0.0 if abs(s) < 1e-12 * max(1.0, np.linalg.norm(d) * np.linalg.norm(r)) else float(np.sign(s))


def _segments_cross(a, b, c, d) -> bool:
    def orient(p, q, r):
        v = (q[0] - p[0]) * (r[1] - p[1]) - (q[1] - p[1]) * (r[0] - p[0])
        return 0 if abs(v) < 1e-14 else (1 if v > 0 else -1)
    return orient(a, b, c) * orient(a, b, d) < 0 and orient(c, d, a) * orient(c, d, b) < 0


def _self_intersecting(poly) -> bool:
    n = len(poly)
    for i in range(n):
        for j in range(i + 2, n):
            if i == 0 and j == n - 1:
                continue
            if _segments_cross(poly[i], poly[(i + 1) % n], poly[j], poly[(j + 1) % n]):
                return True
    return False


def _outline(faces, members, V, g):
    """Outer boundary polygon of faces welded together (sides used by one member only)."""
    count = defaultdict(int)
    directed = {}
    for fi in members:
        f = faces[fi]
        if polygon_signed_area(V[f]) < 0:
            f = f[::-1]
        for k in range(len(f)):
            a, b = f[k], f[(k + 1) % len(f)]
            count[frozenset((a, b))] += 1
            directed[frozenset((a, b))] = (a, b)
    nxt = {}
    for key, n in count.items():
        if n == 1:
            a, b = directed[key]
            if a in nxt:
                raise ValueError(f"faces_vertices[{g}]: faces welded by F edges do not form a simple panel")
            nxt[a] = b
    start = next(iter(nxt))
    loop, v = [start], nxt[start]
    while v != start:
        loop.append(v)
        if len(loop) > len(nxt):
            break
        v = nxt[v]
    if len(loop) != len(nxt):
        raise ValueError(f"faces_vertices[{g}]: faces welded by F edges enclose a hole or are not one panel")
    return V[loop]


# --------------------------------------------------------------------------- writing


def to_fold(pattern: CreasePattern, *, title: str | None = None, digits: int = 12) -> dict:
    """A FOLD dict of ``pattern`` (flat ``vertices_coords`` 2-D, one face per panel,
    ``edges_foldAngle`` in degrees from the creases' ``fold``: ``V`` if positive, ``M``
    if negative, ``U`` if zero). Every crease must be a whole side of both its panels."""
    verts, index = [], {}

    def vid(p):
        key = tuple(round(float(x), digits) + 0.0 for x in np.asarray(p, float)[:2])
        if key not in index:
            index[key] = len(verts)
            verts.append(list(key))
        return index[key]

    faces = [[vid(p) for p in np.asarray(panel.vertices, float)] for panel in pattern.panels]
    side_faces = defaultdict(list)
    for fi, f in enumerate(faces):
        for k in range(len(f)):
            side_faces[frozenset((f[k], f[(k + 1) % len(f)]))].append(fi)
    names = [p.name for p in pattern.panels]
    crease_at = {}
    for c in pattern.creases:
        key = frozenset((vid(c.p1), vid(c.p2)))
        fs = sorted(names[f] for f in side_faces.get(key, []))
        if fs != sorted((c.a, c.b)):
            raise ValueError(f"to_fold: crease {c.label!r} is not a shared side of panels {c.a!r}, {c.b!r}")
        crease_at[key] = c
    edges, assign, angle = [], [], []
    for key, fs in side_faces.items():
        a, b = sorted(key)
        edges.append([a, b])
        c = crease_at.get(key)
        if c is None:
            if len(fs) != 1:
                raise ValueError(f"to_fold: panels {[names[f] for f in fs]} share a side with no crease")
            assign.append("B")
            angle.append(0.0)
        else:
            deg = round(math.degrees(c.fold), digits) + 0.0
            assign.append("V" if deg > 0 else "M" if deg < 0 else "U")
            angle.append(deg)
    out = {"file_spec": 1.1, "file_creator": "diffmb", "frame_classes": ["creasePattern"],
           "frame_attributes": ["2D"], "vertices_coords": verts, "faces_vertices": faces,
           "edges_vertices": edges, "edges_assignment": assign, "edges_foldAngle": angle}
    if any(p.thickness or p.base is not None for p in pattern.panels):
        out["diffmb:faces_thickness"] = [float(p.thickness) for p in pattern.panels]
        out["diffmb:faces_base"] = [None if p.base is None else float(p.base) for p in pattern.panels]
        height = {frozenset((vid(c.p1), vid(c.p2))): float(c.height) for c in pattern.creases}
        out["diffmb:edges_height"] = [height.get(frozenset(e), 0.0) for e in edges]
    if title:
        out["file_title"] = title
    return out
