"""Fold-pattern generators: rectangular map folds, Miura-ori and Scheel's rings (the
paper's own grids and numbers are scenarios: :mod:`diffmb.scenarios.origami`).

:func:`map_fold` lays out ``rows x cols`` rectangular panels (row 0 at the bottom,
column 0 at the left) with the root ``r`` at the bottom-right corner, the tree of the
paper's Figs. 3 and 13 — the bottom row chained into the root and every column a chain
hanging from its bottom panel — and the remaining horizontal neighbours as cut creases,
so that ``n_p = (n_h - 1)(n_b/n_h - 1)`` (eq. 20) with ``n_h = cols`` chains.

The initial state is the map folded flat: an accordion of the rows (horizontal creases
at ``+-pi``, alternating) folded in turn column by column (vertical creases ``+-pi``).
"""

from __future__ import annotations

import numpy as np

from . import topology as topo
from .pattern import Crease, CreasePattern, Panel, _info
from .polygon import polygon_area


def grid_names(rows: int, cols: int) -> list:
    """Paper-style names: numbered row-major from the top-left, ``r`` at the bottom-right."""
    names = [[None] * cols for _ in range(rows)]
    k = 1
    for r in reversed(range(rows)):
        for c in range(cols):
            if r == 0 and c == cols - 1:
                names[r][c] = "r"
            else:
                names[r][c] = str(k)
                k += 1
    return names


def map_fold(rows: int, cols: int, *, width: float = 2.0, height: float = 2.0,
             panel_mass: float = 1.0, hub_mass: float = 1.0, panel_inertia=None,
             hub_inertia=None, k_row: float = 0.01, k_col: float = 0.01, damping: float = 0.0,
             names=None, row_sign: float = 1.0, col_sign: float = 1.0,
             fold: float = np.pi) -> CreasePattern:
    """A ``rows x cols`` map fold around the root panel ``r`` (see module docstring).

    ``k_row``: stiffness of the horizontal creases (between rows), ``k_col``: vertical
    creases. ``fold``: magnitude of the initial fold angles (``pi`` = folded flat).
    ``row_sign``/``col_sign``: sign of the first row/column crease (they alternate).
    """
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise ValueError(f"map fold needs at least two panels (got {rows} x {cols})")
    names = names or grid_names(rows, cols)
    panels = []
    for r in range(rows):
        for c in range(cols):
            x0, y0 = c * width, r * height
            v = np.array([[x0, y0, 0], [x0 + width, y0, 0], [x0 + width, y0 + height, 0], [x0, y0 + height, 0]], float)
            hub = names[r][c] == "r"
            inertia = hub_inertia if hub else panel_inertia
            panels.append(Panel(names[r][c], v, hub_mass if hub else panel_mass, inertia))
    creases, cut = [], []
    for r in range(rows):
        for c in range(cols):
            if r > 0:  # horizontal crease below panel (r, c): tree edge (column chain)
                sign = row_sign * (-1) ** (r - 1)
                creases.append(Crease(names[r - 1][c], names[r][c], (c * width, r * height, 0),
                                      ((c + 1) * width, r * height, 0), sign * fold, k_row, damping))
            if c < cols - 1:  # vertical crease right of panel (r, c)
                sign = col_sign * (-1) ** (cols - 2 - c)
                creases.append(Crease(names[r][c], names[r][c + 1], ((c + 1) * width, r * height, 0),
                                      ((c + 1) * width, (r + 1) * height, 0), sign * fold, k_col, damping))
                if r > 0:
                    cut.append((names[r][c], names[r][c + 1]))
    return CreasePattern(panels, creases, root="r", cut=tuple(cut))


# ----------------------------------------------------------------- Miura and Scheel


def topology_info(pattern: CreasePattern):
    """The :class:`~diffmb.origami.pattern.OrigamiInfo` (chains, closure pairs and the counts
    ``n_b, n_h, n_p, n_c``) that :func:`~diffmb.origami.pattern.build` reports for
    ``pattern``, from the graph alone: no model, no closure check, no compile."""
    tp = topo.spanning_tree([(c.a, c.b) for c in pattern.creases], pattern.root,
                            method=pattern.method, cut=pattern.cut)
    return _info(tp)


def miura_straight_angle(zigzag: float, angle_deg: float = 60.0) -> float:
    """Fold angle of the straight creases of a Miura-ori whose zig-zag creases are folded by
    ``zigzag`` (rad), for the pattern (sector) angle ``angle_deg``:
    ``tan(rho_s / 2) = cos(gamma) tan(rho_z / 2)`` — the degree-4 flat-foldable vertex
    relation (Huffman; Tachi) for sector angles ``gamma, pi - gamma, pi - gamma, gamma``.
    At ``gamma = 90`` deg (a map fold) the straight creases stay flat while the zig-zag
    line folds; at ``zigzag = +-pi`` both reach ``+-pi`` (folded flat)."""
    g = np.radians(angle_deg)
    return float(2 * np.arctan(np.cos(g) * np.tan(zigzag / 2)))


def miura(rows: int, cols: int, *, angle_deg: float = 60.0, a: float = 1.0, b: float = 1.0,
          fold: float = np.pi / 3, panel_mass: float = 1.0, hub_mass: float | None = None,
          panel_inertia=None, hub_inertia=None, stiffness: float = 0.01,
          k_zigzag: float | None = None, damping: float = 0.0) -> CreasePattern:
    """A ``rows x cols`` Miura-ori of parallelogram panels (Fulton & Schaub Fig. 3).

    Geometry (flat, ``z = 0``): panel ``(r, c)`` (row 0 at the bottom) is the parallelogram
    with horizontal sides of length ``a`` and slanted sides of length ``b`` at the pattern
    angle ``gamma = angle_deg`` to them; the slant alternates from row to row, so the
    horizontal lines ``y = r b sin(gamma)`` are the *straight* creases and the crease lines
    between columns are the *zig-zag* creases. Every interior vertex has sector angles
    ``gamma, pi - gamma, pi - gamma, gamma``.

    Tree and cuts: as :func:`map_fold` — root ``r`` at the bottom-right corner, the bottom
    row chained into it through zig-zag creases, each column a chain through the straight
    creases, and the zig-zag creases above the bottom row cut; so eqs. (20)-(21) hold with
    ``n_h = cols``, ``n_b = rows * cols``.

    Initial state: a partially folded rigid-folding state, exact to round-off (closed
    form, no projection): every zig-zag crease at ``+-fold`` — uniform along each
    zig-zag line, alternating between lines, line 0 a valley for ``fold > 0`` — and the
    straight creases at ``+-miura_straight_angle(fold, angle_deg)``, alternating along
    each straight line and between lines (sign ``(-1)^(r + c)``), as Maekawa's theorem
    requires at each vertex. ``fold = 0`` is flat, ``fold = +-pi`` folded flat; a
    negative ``fold`` gives the mirror image (all assignments swapped).

    ``stiffness``: linear hinge stiffness of the straight creases; ``k_zigzag`` of the
    zig-zag creases (default: ``stiffness``). ``hub_mass``/``hub_inertia``: the root
    panel's (default: a panel's). ``panel_inertia``: ``None`` = thin plate.
    """
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise ValueError(f"miura: needs at least two panels (got {rows} x {cols})")
    if not 0.0 < angle_deg < 180.0:
        raise ValueError(f"miura: angle_deg must lie in (0, 180), got {angle_deg}")
    if a <= 0 or b <= 0:
        raise ValueError(f"miura: panel sides a, b must be positive (got {a}, {b})")
    if abs(fold) > np.pi:
        raise ValueError(f"miura: |fold| must not exceed pi (got {fold})")
    g = np.radians(angle_deg)
    h = b * np.sin(g)
    shift = [0.0 if r % 2 == 0 else b * np.cos(g) for r in range(rows + 1)]
    rho_z, rho_s = float(fold), miura_straight_angle(fold, angle_deg)
    k_zigzag = stiffness if k_zigzag is None else k_zigzag
    names = grid_names(rows, cols)
    panels, creases, cut = [], [], []
    for r in range(rows):
        for c in range(cols):
            v = np.array([[c * a + shift[r], r * h, 0], [(c + 1) * a + shift[r], r * h, 0],
                          [(c + 1) * a + shift[r + 1], (r + 1) * h, 0],
                          [c * a + shift[r + 1], (r + 1) * h, 0]], float)
            hub = names[r][c] == "r"
            mass = (hub_mass if hub_mass is not None else panel_mass) if hub else panel_mass
            inertia = (hub_inertia if hub_inertia is not None else panel_inertia) if hub else panel_inertia
            panels.append(Panel(names[r][c], v, mass, inertia))
    for r in range(rows):
        for c in range(cols):
            if r > 0:  # straight crease below panel (r, c): tree edge of column c
                creases.append(Crease(names[r - 1][c], names[r][c], (c * a + shift[r], r * h, 0),
                                      ((c + 1) * a + shift[r], r * h, 0),
                                      (-1) ** (r + c) * rho_s, stiffness, damping))
            if c < cols - 1:  # zig-zag crease right of panel (r, c)
                creases.append(Crease(names[r][c], names[r][c + 1], ((c + 1) * a + shift[r], r * h, 0),
                                      ((c + 1) * a + shift[r + 1], (r + 1) * h, 0),
                                      (-1) ** c * rho_z, k_zigzag, damping))
                if r > 0:
                    cut.append((names[r][c], names[r][c + 1]))
    return CreasePattern(panels, creases, root="r", cut=tuple(cut))


def scheel(n_sectors: int, n_rings: int, *, hub_radius: float = 1.0, ring_width: float = 1.0,
           panel_density: float = 1.0, hub_mass: float = 100.0, hub_inertia=None,
           stiffness: float = 0.01, k_ring: float | None = None, damping: float = 0.0) -> CreasePattern:
    """A radial (Scheel-type) pattern around a hub (Fulton & Schaub Figs. 4-5).

    Geometry (flat): the hub ``r`` is the regular ``n_sectors``-gon of circumradius
    ``hub_radius`` (the disk of Fig. 4); ring ``j = 1..n_rings`` lies between the radii
    ``hub_radius + (j - 1) ring_width`` and ``hub_radius + j ring_width`` measured along
    the rays through the hub's corners, and panel ``"s{s}_{j}"`` is the trapezoid of
    sector ``s`` in ring ``j`` (mass ``panel_density * area``, thin-plate inertia).
    Creases: sector ``s``'s ring-1 panel to the hub along hub edge ``s``; ring ``j - 1``
    to ring ``j`` within a sector (ring creases, stiffness ``k_ring``, default
    ``stiffness``); and neighbouring sectors along the rays (radial creases).

    Tree and cuts — the grid adaptation of Fig. 5: one chain per sector hanging from
    the hub (``n_h = n_sectors`` chains of ``L = n_rings`` panels), every radial crease
    cut, *including* the closing pairs between the last sector and the first (the
    "repeated left edge chain"). Counts for this radially closed grid, with
    ``n_b = n_h L + 1`` bodies (hub included):

    * ``n_p = n_h L = (n_h - 1) L + L = n_b - 1``: the open grid's ``(n_h - 1) L``
      pairs (eq. 20 with the hub as the chains' common base) plus ``L`` closing pairs;
    * ``n_c = n_b - 1``: every panel but the hub carries a closure node (eq. 21 counts
      ``n_b - n_h`` for the open grid, whose first chain has none).

    Initial state: flat. Rigidly, this closed ring cannot fold at all: each hub corner
    is a degree-3 vertex (hub, two ring-1 panels), which is rigid, so ring 1 stays flat
    on the hub, and then every ring-``j`` vertex has a flat crease and is rigid too. The
    real Scheel wrap relies on panel bending; here the model is the hinged graph of
    Figs. 4-5 with its constraint structure (a state other than flat is rejected by
    :func:`build`). Perturb it through initial rates (``qd0``) or forcing.
    """
    if n_sectors < 3:
        raise ValueError(f"scheel: needs at least 3 sectors (got {n_sectors})")
    if n_rings < 1:
        raise ValueError(f"scheel: needs at least 1 ring (got {n_rings})")
    if hub_radius <= 0 or ring_width <= 0:
        raise ValueError("scheel: hub_radius and ring_width must be positive")

    k_ring = stiffness if k_ring is None else k_ring
    ang = 2 * np.pi * np.arange(n_sectors) / n_sectors
    u = np.stack([np.cos(ang), np.sin(ang), np.zeros(n_sectors)], axis=1)  # corner rays
    radius = [hub_radius + j * ring_width for j in range(n_rings + 1)]
    name = lambda s, j: "r" if j == 0 else f"s{s % n_sectors}_{j}"
    panels = [Panel("r", radius[0] * u, hub_mass, hub_inertia)]
    creases, cut = [], []
    for s in range(n_sectors):
        s1 = (s + 1) % n_sectors
        for j in range(1, n_rings + 1):
            v = np.array([radius[j - 1] * u[s], radius[j - 1] * u[s1], radius[j] * u[s1], radius[j] * u[s]])
            panels.append(Panel(name(s, j), v, panel_density * polygon_area(v)))
            creases.append(Crease(name(s, j - 1), name(s, j), radius[j - 1] * u[s], radius[j - 1] * u[s1],
                                  0.0, stiffness if j == 1 else k_ring, damping))
    for s in range(n_sectors):
        s1 = (s + 1) % n_sectors
        for j in range(1, n_rings + 1):
            creases.append(Crease(name(s, j), name(s1, j), radius[j - 1] * u[s1], radius[j] * u[s1],
                                  0.0, stiffness, damping))
            cut.append((name(s, j), name(s1, j)))
    return CreasePattern(panels, creases, root="r", cut=tuple(cut))
