"""Fold-pattern generators: rectangular map folds and the paper's three grids.

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

from .pattern import Crease, CreasePattern, Panel

# Table 1 / Table 5 of Fulton & Schaub: a 2 m panel of 1 kg. The tabulated inertia is that
# of a 2 m x 0.1 m x 0.1 m bar, not of a plate; the scenarios keep the paper's numbers.
PAPER_PANEL_INERTIA = np.diag([0.3342, 0.3342, 0.0017])
PAPER_HUB_INERTIA = np.diag([66.7, 66.7, 66.7])


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


def fold_4panel(k: float = 0.1, damping: float = 0.0) -> CreasePattern:
    """Section 4.2, Tables 1-4: four 1 kg, 2 m panels; root ``r``; cut between ``l``, ``m``.

    Layout (flat): ``l m`` over ``j r``. The paper's Table 4 folds ``m`` and ``l`` to
    ``-pi`` and ``j`` to ``+pi`` — here the horizontal creases (``r-m``, ``j-l``) are
    ``-pi`` and the vertical crease ``r-j`` is ``+pi``, which is the same folded map.
    """
    names = [["j", "r"], ["l", "m"]]
    return map_fold(2, 2, panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_PANEL_INERTIA,
                    k_row=k, k_col=k, damping=damping, names=names, row_sign=-1.0, col_sign=1.0)


def fold_2x4(k: float = 0.01, k7: float = 0.03, hub_mass: float = 100.0, damping: float = 0.0) -> CreasePattern:
    """Section 4.3.1, Tables 5-8: the 2 x 4 map (panels 1-7 and the 100 kg hub ``r``).

    Two chains (``7 5 3 1`` hanging from ``r`` through the vertical crease ``r-7``, and
    ``6 4 2``); cut creases 1-2, 3-4, 5-6 (eq. 20: n_p = 3). Mountain folds 1, 2, 5, 6, 7 at
    ``+pi``, valley folds 3, 4 at ``-pi`` (Table 8). ``K = 0.01`` N m/rad, ``0.03`` for 7.
    """
    return map_fold(4, 2, panel_mass=1.0, hub_mass=hub_mass, panel_inertia=PAPER_PANEL_INERTIA,
                    hub_inertia=PAPER_HUB_INERTIA, k_row=k, k_col=k7, damping=damping,
                    row_sign=1.0, col_sign=1.0)


def fold_3x3(k: float = 0.01, k_col: float = 0.03, hub_mass: float = 100.0, damping: float = 0.0) -> CreasePattern:
    """The three-chain 3 x 3 map of Fig. 13 with all four closures (1-2, 2-3, 4-5, 5-6);
    panels 2 and 5 each carry two closure pairs — the case the paper could not run."""
    return map_fold(3, 3, panel_mass=1.0, hub_mass=hub_mass, panel_inertia=PAPER_PANEL_INERTIA,
                    hub_inertia=PAPER_HUB_INERTIA, k_row=k, k_col=k_col, damping=damping)
