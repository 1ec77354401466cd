"""Read crease patterns drawn as SVG (Origami Simulator's colour convention) into FOLD.

:func:`svg_to_fold` turns an SVG drawing into an edge-only FOLD dict (a planar
straight-line graph: ``vertices_coords``, ``edges_vertices``, ``edges_assignment``,
``edges_foldAngle``, no ``faces_vertices``); :func:`load_svg` hands it to
:func:`diffmb.formats.fold.load_fold`. The SVG is parsed with ``svgelements``, which
applies ``transform`` attributes (of the element and of its groups), the root
``viewBox``/``width``/``height`` mapping, ``<use>`` references, CSS ``style`` and
inherited presentation attributes, as a browser would draw the file.

What is read:

* every *stroked* ``<line>``, ``<polyline>``, ``<polygon>``, ``<rect>`` and ``<path>``
  (a stroked ``<circle>`` or ``<ellipse>`` is refused as curved). A path is read
  segment by segment: move-to starts a new sub-path, line-to (``L``, ``H``, ``V``) and
  close-path (``Z``) are crease segments; an arc or a Bezier segment (or a rounded
  ``<rect>``) is an error naming the element — crease patterns are straight;
* an element with no stroke (``stroke="none"``, the SVG default) is *ignored*: fills are
  not creases. Text, images and everything inside ``<defs>`` (unless referenced by ``<use>``) are
  ignored as well; ``display="none"`` elements are skipped.

Elements are named in messages by their ``id`` (``<path id="c3">``) or, without one, by
their tag and 0-based index among all shapes of that tag (stroked or not) in document
order (``<line>[4]``).

Colours (Origami Simulator, ``js/pattern.js`` of amandaghassaei/OrigamiSimulator:
``typeForStroke`` maps exactly these six colours and warns about and ignores any other;
the FOLD letters are its ``edges_assignment`` comment "B = boundary, M = mountain,
V = valley, C = cut, F = facet, U = hinge"):

=========  ===========  ====  ==========================================================
stroke     name         FOLD  meaning
=========  ===========  ====  ==========================================================
#ff0000    red          M     mountain fold (target angle ``-180 * opacity`` degrees)
#0000ff    blue         V     valley fold (target angle ``+180 * opacity`` degrees)
#000000    black        B     border (boundary of the sheet)
#00ff00    green        C     cut (a slit: two boundaries)
#ffff00    yellow       F     facet / triangulation line inside a rigid panel (flat)
#ff00ff    magenta      U     undriven crease (a free hinge, target 0)
=========  ===========  ====  ==========================================================

A stroke matches the nearest of the six by Euclidean distance in RGB scaled to
``[0, 1]`` per channel, if that distance is at most :data:`COLOR_TOL` (0.25; the six are
at least 1 apart, so the match is never ambiguous): dark red ``#cc0000`` is a mountain,
grey ``#888888`` or orange ``#ffa500`` is an error naming the element and its colour.
Origami Simulator itself matches only these exact colours (as hex, short hex, ``rgb()``
or keyword) and warns about and skips any other; this reader also accepts near colours
and refuses the others. One keyword is read by name, as Origami Simulator does:
``green`` is a cut, although CSS ``green`` is ``#008000``. (Origami Simulator also reads
only the top-level children of ``<svg>`` — "ungroup all" — where this reader follows
groups, applying their transforms.)

Other editors: ORIPA's SVG export (``CreasePatternToSvgConverter`` in oripa/oripa,
checked) draws mountains ``red``, valleys ``blue``, and its "cut" lines — the sheet's
outline and any slits — ``black``; so its mountain/valley/outline lines read as M/V/B
directly (a slit inside the sheet reads as B too: recolour it green for a cut). Its
unassigned lines (``orange``) and auxiliary lines (``gray``) are refused: recolour them
magenta (U), or delete auxiliary lines, before reading. Other editors that export the same
red/blue convention (Oriedita, for one — not checked here) read the same way.

Opacity (Origami Simulator's ``getOpacity``: the ``opacity`` attribute or style, else
``stroke-opacity``, default 1; a mountain's target angle is ``-opacity * pi``, a
valley's ``+opacity * pi``): here the opacity of a stroke is its ``stroke-opacity``
(or the alpha of an ``rgba``/8-digit colour) times its ``opacity`` — the same number
whenever a file sets only one of them — clamped to ``[0, 1]``; percentages are read.
The FOLD sign convention is kept (valley positive, mountain negative, degrees): ``M`` ->
``-180 * opacity``, ``V`` -> ``+180 * opacity``, every other assignment 0. These
*target* angles are always written to the namespaced field
``"diffmb:edges_targetAngle"``; ``edges_foldAngle`` (which :func:`load_fold` reads as
the *initial* state) is all zeros with ``angles="flat"`` (the default: a crease pattern
starts flat) and the target angles with ``angles="opacity"``.

Geometry: SVG's y axis points down; ``y -> -y`` maps the drawing into the usual
x-right / y-up frame, so the pattern is seen as drawn and a face traced counter-clockwise
on screen is counter-clockwise in the output (no translation is applied: a drawing in
``0 <= y <= h`` ends up in ``-h <= y <= 0``). ``scale`` [m per SVG user unit, after the
``viewBox`` mapping, i.e. CSS px where ``width``/``height`` are given] multiplies all
coordinates; the default is ``1 / max(width, height)`` of the drawing's bounding box, so
the sheet is 1 m across. For a drawing with physical ``width``/``height`` (``mm``,
``in``), ``scale=0.0254 / 96`` keeps its real size.

Cleaning, as crease-pattern editors do before folding (all in SVG user units, after
the flip, before scaling; ``merge_tol`` defaults to ``1e-3`` of the bounding box
diagonal, which absorbs the two-decimal rounding of editors' exports; Origami Simulator
merges within 3 user units, about ``5e-3`` of its 400-unit sheets, and of its 85 example
SVGs this default loads the most):

1. endpoints closer than ``merge_tol`` become one vertex (the first drawn keeps its
   coordinates); segments that collapse to a point are dropped;
2. a segment is split at every vertex that lies on it (within ``merge_tol``, away from
   its ends): T-junctions, and the ends of overlapping collinear segments;
3. two segments that cross get a new vertex at the crossing and are both split there
   (crossings within ``merge_tol`` of each other, or of a vertex, are one vertex);
4. overlapping collinear pieces are now the same edge: of the same assignment (and
   target angle) they are merged into one edge; of different ones the stronger is the
   edge (border, then cut, then mountain or valley, then undriven, then facet: a crease
   drawn over a facet line is a crease), and a mountain over a valley is an error naming
   both elements;
5. vertices no edge uses are dropped.

The result is a planar straight-line graph; pairwise checks are ``O(n^2)``, vectorised
with numpy (fine up to a few thousand segments).

Malformed input raises ValueError starting with the file path (or ``"SVG text"``) and
naming the element; a missing file: ``"SVG file not found: PATH"``.
"""

from __future__ import annotations

import io
import math
import os
import xml.etree.ElementTree as ET

import numpy as np
import svgelements as se
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

#: Origami Simulator's stroke colours (RGB 0-255) and the FOLD assignment of each.
COLORS = {
    "M": (255, 0, 0),      # red: mountain
    "V": (0, 0, 255),      # blue: valley
    "B": (0, 0, 0),        # black: border
    "C": (0, 255, 0),      # green: cut
    "F": (255, 255, 0),    # yellow: facet (triangulation of a panel)
    "U": (255, 0, 255),    # magenta: undriven crease (hinge)
}
_NAMES = {"M": "mountain", "V": "valley", "B": "border", "C": "cut", "F": "facet", "U": "undriven crease"}
#: Colour keywords Origami Simulator reads by name where CSS means another colour (CSS
#: ``green`` is #008000; Origami Simulator's ``typeForStroke`` takes it as a cut).
_KEYWORDS = {"green": "C"}
#: Largest RGB distance (channels in [0, 1]) from a stroke to its nearest convention colour.
COLOR_TOL = 0.25
_SVG_KEYS = ("scale", "merge_tol", "angles")
_ANGLES = ("flat", "opacity")
_REL_MERGE_TOL = 1e-3
#: Which of two collinear overlapping strokes is the edge: a border or cut over a crease,
#: a crease over an undriven crease, that over a facet line (mountain over valley: refused).
_PRECEDENCE = {"B": 5, "C": 4, "M": 3, "V": 3, "U": 2, "F": 1}
_CHUNK = 256


def svg_to_fold(src, *, scale: float | None = None, merge_tol: float | None = None,
                angles: str = "flat") -> dict:
    """An edge-only FOLD dict of the crease pattern drawn in an SVG file or text.

    ``src``: a path (str or PathLike) or SVG text (a str starting with ``<``).
    ``scale``: metres per SVG user unit (default: the larger side of the drawing's
    bounding box is 1 m); ``merge_tol``: endpoint merge / on-segment tolerance in SVG user
    units (default ``1e-3`` of the bounding box diagonal); ``angles``: ``"flat"`` (all
    ``edges_foldAngle`` 0) or ``"opacity"`` (``edges_foldAngle`` = the target angles from
    the stroke opacity). Strokeless elements are ignored (fills are not creases). See the
    module docstring for the colours, the opacity rule, the y flip and the cleaning.
    """
    shapes, where = _parse(src)
    try:
        _check_arguments(scale, merge_tol, angles)
        segs, assign, target, owner = _collect(shapes)
        size, diag = _extent(segs)
        tol = _REL_MERGE_TOL * diag if merge_tol is None else float(merge_tol)
        V, edges, eassign, etarget = _planar_graph(segs, assign, target, owner, tol)
        if not edges:
            raise ValueError("no crease segment left after cleaning (all of zero length)")
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    s = 1.0 / size if scale is None else float(scale)
    coords = [[float(x) * s + 0.0, float(y) * s + 0.0] for x, y in V]
    fold_angle = list(etarget) if angles == "opacity" else [0.0] * len(edges)
    return {"file_spec": 1.2, "file_creator": "diffmb (from SVG)", "frame_classes": ["creasePattern"],
            "vertices_coords": coords, "edges_vertices": [list(e) for e in edges],
            "edges_assignment": eassign, "edges_foldAngle": fold_angle,
            "diffmb:edges_targetAngle": list(etarget)}


def load_svg(src, **kwargs):
    """A :class:`~diffmb.origami.pattern.CreasePattern` from an SVG crease pattern.

    ``scale``, ``merge_tol`` and ``angles`` go to :func:`svg_to_fold`, every other
    keyword argument to :func:`diffmb.formats.fold.load_fold`; errors of the loader are
    prefixed with the SVG file path (or ``"SVG text"``).
    """
    from .fold import load_fold

    svg_kwargs = {k: kwargs.pop(k) for k in _SVG_KEYS if k in kwargs}
    data = svg_to_fold(src, **svg_kwargs)
    try:
        return load_fold(data, **kwargs)
    except ValueError as e:
        raise ValueError(f"{_where(src)}: {e}") from None


# --------------------------------------------------------------------------- reading


def _is_text(src) -> bool:
    return isinstance(src, str) and src.lstrip().startswith("<")


def _where(src) -> str:
    return "SVG text" if _is_text(src) else os.fspath(src)


def _parse(src):
    """``(shapes, where)``: the drawn shapes of the SVG (``svgelements`` objects,
    transforms applied) and the name used in messages (the path or ``"SVG text"``)."""
    if not isinstance(src, (str, os.PathLike)):
        raise TypeError(f"svg_to_fold: expected a path or SVG text, got {type(src).__name__}")
    where = _where(src)
    if _is_text(src):
        source = io.StringIO(src)
    else:
        if not os.path.isfile(where):
            raise ValueError(f"SVG file not found: {where}")
        source = where
    try:
        svg = se.SVG.parse(source)
    except ET.ParseError as e:
        raise ValueError(f"{where}: not valid XML ({e})") from None
    if not isinstance(svg, se.SVG):
        raise ValueError(f"{where}: no <svg> root element")
    return [e for e in svg.elements() if isinstance(e, se.Shape)], where


def _check_arguments(scale, merge_tol, angles):
    def number(x):
        return isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool) and math.isfinite(x)

    if scale is not None and not (number(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number (metres per SVG unit), got {scale!r}")
    if merge_tol is not None and not (number(merge_tol) and merge_tol >= 0):
        raise ValueError(f"merge_tol must be a non-negative number (SVG units), got {merge_tol!r}")
    if angles not in _ANGLES:
        raise ValueError(f"angles must be one of {_ANGLES}, got {angles!r}")


def _element_names(shapes) -> list:
    """Each shape's name for messages: ``<tag id="...">`` or ``<tag>[k]`` (``k`` its
    0-based index among the shapes of that tag, in document order)."""
    count, names = {}, []
    for e in shapes:
        tag = e.values.get("tag") or type(e).__name__.lower()
        k = count.get(tag, 0)
        count[tag] = k + 1
        names.append(f'<{tag} id="{e.id}">' if e.id else f"<{tag}>[{k}]")
    return names


def _collect(shapes):
    """``(segs, assign, target, owner)``: every stroked straight segment as an
    ``(n, 2, 2)`` array (y flipped), its assignment letter, its target angle [deg] and
    the name of its element."""
    segs, assign, target, owner = [], [], [], []
    for e, name in zip(shapes, _element_names(shapes)):
        letter = _assignment(e, name)
        if letter is None:
            continue
        angle = {"M": -180.0, "V": 180.0}.get(letter, 0.0) * _opacity(e, name)
        for a, b in _straight_segments(e, name):
            segs.append((a, b))
            assign.append(letter)
            target.append(angle + 0.0)
            owner.append(name)
    if not segs:
        raise ValueError("no stroked line, polyline, polygon, rect or path found "
                         "(elements without a stroke are ignored)")
    P = np.array(segs, dtype=float)
    P[..., 1] *= -1.0  # SVG's y points down
    return P, assign, target, owner


def _assignment(e, name) -> str | None:
    """The FOLD letter of a shape's stroke colour (nearest of :data:`COLORS` within
    :data:`COLOR_TOL`), ``None`` for no stroke; any other colour is an error."""
    raw = e.values.get("stroke")
    if isinstance(raw, str) and raw.strip().lower().startswith("url("):
        raise ValueError(f"{name}: stroke {raw.strip()!r} is a gradient or pattern, not a crease colour; "
                         f"{_convention()}")
    c = e.stroke
    if c is None or c.value is None:
        return None
    if isinstance(raw, str) and raw.strip().lower() in _KEYWORDS:
        return _KEYWORDS[raw.strip().lower()]
    rgb = np.array([c.red, c.green, c.blue], dtype=float) / 255.0
    letters = list(COLORS)
    ref = np.array([COLORS[k] for k in letters], dtype=float) / 255.0
    dist = np.linalg.norm(ref - rgb, axis=1)
    k = int(np.argmin(dist))
    if dist[k] > COLOR_TOL:
        raise ValueError(f"{name}: stroke colour #{c.red:02x}{c.green:02x}{c.blue:02x} is not a crease colour; "
                         f"{_convention()}")
    return letters[k]


def _convention() -> str:
    table = ", ".join(f"#{r:02x}{g:02x}{b:02x} {_NAMES[k]} ({k})" for k, (r, g, b) in COLORS.items())
    return f"expected one of (Origami Simulator's convention) {table}"


def _fraction(raw, key, name) -> float | None:
    """An opacity attribute value (number or percentage) clamped to [0, 1]; ``None`` if
    absent."""
    if raw is None:
        return None
    text = str(raw).strip()
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"{name}: {key} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}: {key} {text!r} is not a finite number")
    return min(max(value, 0.0), 1.0)


def _opacity(e, name) -> float:
    """The stroke's opacity: ``stroke-opacity`` (else the colour's alpha) times
    ``opacity``, in [0, 1]."""
    stroke = _fraction(e.values.get("stroke-opacity"), "stroke-opacity", name)
    if stroke is None:
        stroke = float(e.stroke.opacity)
    overall = _fraction(e.values.get("opacity"), "opacity", name)
    return min(max(stroke * (1.0 if overall is None else overall), 0.0), 1.0)


def _straight_segments(e, name) -> list:
    """The shape's line segments ``((x1, y1), (x2, y2))`` in SVG coordinates
    (transforms applied); a curved segment is an error."""
    out = []
    for seg in e.segments():
        if isinstance(seg, se.Move):
            continue
        if isinstance(seg, (se.Line, se.Close)):
            if seg.start is not None and seg.end is not None:
                out.append(((float(seg.start.x), float(seg.start.y)), (float(seg.end.x), float(seg.end.y))))
            continue
        kind = {"Arc": "an arc", "CubicBezier": "a cubic Bezier", "QuadraticBezier": "a quadratic Bezier"}
        what = kind.get(type(seg).__name__, f"a {type(seg).__name__}")
        raise ValueError(f"{name}: curved segment ({what}); a crease pattern is drawn with straight lines only")
    return out


# --------------------------------------------------------------------------- geometry


def _extent(segs) -> tuple[float, float]:
    """``(larger side, diagonal)`` of the bounding box of all segment endpoints."""
    pts = segs.reshape(-1, 2)
    span = pts.max(axis=0) - pts.min(axis=0)
    size, diag = float(span.max()), float(np.hypot(*span))
    if not size > 0:
        raise ValueError("the drawing has zero extent (all segment endpoints coincide)")
    return size, diag


def _clusters(points, tol) -> np.ndarray:
    """Each point's cluster representative: the lowest index of the points linked by
    distances ``<= tol`` (connected components of a k-d tree's close pairs)."""
    n = len(points)
    pairs = cKDTree(points).query_pairs(tol, output_type="ndarray")
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    lowest = np.full(label.max() + 1, n)
    np.minimum.at(lowest, label, np.arange(n))
    return lowest[label]


def _merge_endpoints(segs, tol):
    """``(V, ends)``: merged vertex coordinates and each segment's two vertex indices."""
    pts = segs.reshape(-1, 2)
    rep = _clusters(pts, tol)
    uniq, inverse = np.unique(rep, return_inverse=True)
    return pts[uniq], inverse.reshape(-1, 2)


def _cross(a, b):
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _vertices_on_segments(V, A, B, tol) -> list:
    """For each segment ``A[i]-B[i]``: the vertices within ``tol`` of it, more than
    ``tol`` from both its ends along it (the split points of T-junctions and overlaps)."""
    d = B - A
    L = np.linalg.norm(d, axis=1)
    hits = []
    for r0 in range(0, len(A), _CHUNK):
        r1 = min(r0 + _CHUNK, len(A))
        w = V[None, :, :] - A[r0:r1, None, :]
        Lc = L[r0:r1, None]
        along = (w * d[r0:r1, None, :]).sum(-1) / Lc
        off = np.abs(_cross(d[r0:r1, None, :], w)) / Lc
        mask = (off <= tol) & (along > tol) & (along < Lc - tol)
        hits.extend(np.nonzero(row)[0] for row in mask)
    return hits


def _crossings(A, B, tol):
    """``(i, j, points)``: pairs of segments ``i < j`` that properly cross (each one's
    ends farther than ``tol`` from the other's line, on opposite sides) and where."""
    d = B - A
    L = np.linalg.norm(d, axis=1)
    I, J, P = [], [], []
    for r0 in range(0, len(A), _CHUNK):
        r1 = min(r0 + _CHUNK, len(A))
        a, da, La = A[r0:r1, None, :], d[r0:r1, None, :], L[r0:r1, None]
        c, dc, Lc = A[None, :, :], d[None, :, :], L[None, :]
        # signed distances of segment j's ends from line i, and of i's ends from line j
        s_c = _cross(da, c - a) / La
        s_d = _cross(da, c + dc - a) / La
        s_a = _cross(dc, a - c) / Lc
        s_b = _cross(dc, a + da - c) / Lc
        straddles_i = ((s_c > tol) & (s_d < -tol)) | ((s_c < -tol) & (s_d > tol))
        straddles_j = ((s_a > tol) & (s_b < -tol)) | ((s_a < -tol) & (s_b > tol))
        proper = straddles_i & straddles_j
        proper &= np.arange(len(A))[None, :] > np.arange(r0, r1)[:, None]
        ii, jj = np.nonzero(proper)
        if len(ii):
            t = s_a[ii, jj] / (s_a[ii, jj] - s_b[ii, jj])
            I.append(ii + r0)
            J.append(jj)
            P.append(A[ii + r0] + t[:, None] * d[ii + r0])
    if not I:
        return np.zeros(0, int), np.zeros(0, int), np.zeros((0, 2))
    return np.concatenate(I), np.concatenate(J), np.concatenate(P)


def _planar_graph(segs, assign, target, owner, tol):
    """``(V, edges, assignment, target)``: the drawing's segments merged, split at
    T-junctions and crossings, zero-length pieces dropped and collinear overlaps merged
    (see the module docstring)."""
    V, ends = _merge_endpoints(segs, tol)
    keep = ends[:, 0] != ends[:, 1]
    idx = np.nonzero(keep)[0]
    ends = ends[keep]
    assign = [assign[i] for i in idx]
    target = [target[i] for i in idx]
    owner = [owner[i] for i in idx]
    if not len(ends):
        return V, [], [], []
    A, B = V[ends[:, 0]], V[ends[:, 1]]
    on_seg = _vertices_on_segments(V, A, B, tol)
    ci, cj, cp = _crossings(A, B, tol)
    # crossing points become vertices, merged with each other and with existing vertices
    n0 = len(V)
    allV = np.concatenate([V, cp]) if len(cp) else V
    rep = _clusters(allV, tol)
    uniq, inverse = np.unique(rep, return_inverse=True)
    V2 = allV[uniq]
    splits = [set(inverse[h].tolist()) for h in on_seg]
    for k, (i, j) in enumerate(zip(ci, cj)):
        splits[i].add(int(inverse[n0 + k]))
        splits[j].add(int(inverse[n0 + k]))
    return _edges(V2, inverse[ends], splits, assign, target, owner)


def _edges(V, ends, splits, assign, target, owner):
    """Each segment cut at its split vertices (sorted along it) into edges; the same
    edge drawn twice is kept once if it has the same assignment and target angle."""
    edges, eassign, etarget, eowner, seen = [], [], [], [], {}
    for s, (a, b) in enumerate(ends):
        pts = np.fromiter({int(a), int(b)} | splits[s], int)
        chain = pts[np.argsort((V[pts] - V[a]) @ (V[b] - V[a]), kind="stable")].tolist()
        for u, v in zip(chain[:-1], chain[1:]):  # distinct vertices: the chain is a set
            key = (min(u, v), max(u, v))
            if key in seen:
                k = seen[key]
                if {eassign[k], assign[s]} == {"M", "V"}:
                    raise ValueError(f"{eowner[k]} and {owner[s]} overlap (collinear) as a mountain and a valley")
                if eassign[k] != assign[s]:   # a line drawn over another: the stronger one is the edge
                    if _PRECEDENCE[assign[s]] > _PRECEDENCE[eassign[k]]:
                        eassign[k], etarget[k], eowner[k] = assign[s], target[s], owner[s]
                    continue
                if abs(etarget[k] - target[s]) > 1e-9:
                    raise ValueError(f"{eowner[k]} and {owner[s]} overlap (collinear) with different opacities "
                                     f"(target angles {etarget[k]:g} and {target[s]:g} deg)")
                continue
            seen[key] = len(edges)
            edges.append([u, v])
            eassign.append(assign[s])
            etarget.append(target[s])
            eowner.append(owner[s])
    E = np.array(edges, int).reshape(-1, 2)
    used = np.zeros(len(V), bool)
    used[E.ravel()] = True
    renum = np.cumsum(used) - 1
    return V[used], renum[E].tolist(), eassign, etarget
