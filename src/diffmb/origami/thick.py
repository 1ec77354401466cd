"""Thick panels: slabs whose hinges sit on their faces, after Chen, Peng & You (2015).

A thick panel is a slab (:attr:`~diffmb.origami.pattern.Panel.thickness`, its bottom face
at :attr:`~diffmb.origami.pattern.Panel.base` in the flat state) and a crease's hinge
line sits at :attr:`~diffmb.origami.pattern.Crease.height`, on a face of each of its two
panels. Moving the hinges off the mid-surface makes a vertex a spatial linkage: a
degree-4 vertex becomes a 4R loop whose consecutive axes are the panels' thicknesses
apart. It moves only when that loop is a Bennett linkage (opposite links equal,
``a_k / sin(sigma_k)`` the same for all four); otherwise it is over-constrained and
locked, which the build's mobility report says.

:func:`degree4_vertex` builds the flat-foldable degree-4 vertex (sector angles ``alpha,
beta, pi - alpha, pi - beta``) with thick panels: the panels between creases 1-2 and 3-4
``t1`` thick, between 2-3 and 4-1 ``t2``; hinge 1 on the top faces, hinges 2 and 4 at the
steps, hinge 3 on the bottom faces (heights ``0, -t1, -t1 - t2, -t2``), so that
consecutive axes are one panel thickness apart. :func:`bennett_t2` is the second
thickness that makes it a Bennett linkage, ``t2 = t1 sin(beta) / sin(alpha)``.
"""

from __future__ import annotations

import math

import numpy as np

from .pattern import Crease, CreasePattern, Panel


def bennett_t2(alpha: float, beta: float, t1: float) -> float:
    """The thickness of the ``beta`` panels that, with ``t1`` for the ``alpha`` panels,
    makes the thick degree-4 vertex a Bennett linkage (``t1 / sin alpha = t2 / sin beta``)."""
    return t1 * math.sin(beta) / math.sin(alpha)


def _ray_hit(phi: float, half: float) -> np.ndarray:
    d = np.array([math.cos(phi), math.sin(phi)])
    return d * min(half / abs(c) for c in d if abs(c) > 1e-12)


def degree4_vertex(alpha: float, beta: float, t1: float, t2: float | None = None, *, half: float = 1.0,
                   density: float = 1.0, folds=(0.0, 0.0, 0.0, 0.0), stiffness: float = 0.0,
                   thicknesses=None) -> CreasePattern:
    """The thick flat-foldable degree-4 vertex (module docstring) on the square
    ``[-half, half]^2``: panels ``A`` (creases 1-2, sector ``alpha``), ``B`` (2-3, ``beta``),
    ``C`` (3-4, ``pi - alpha``), ``D`` (4-1, ``pi - beta``), creases ``c1``..``c4`` with start
    ``folds``; ``density``: areal [kg/m^2], as every panel's. ``t2`` defaults to
    :func:`bennett_t2`; ``thicknesses`` (four numbers, A to D) overrides both, with the
    hinges kept one panel thickness apart from ``c1``'s: the hinge
    loop closes in height only when ``tA + tB = tC + tD`` (else ``build`` refuses the hinge
    of ``c1`` as outside panel ``D``)."""
    if t2 is None:
        t2 = bennett_t2(alpha, beta, t1)
    tA, tB, tC, tD = thicknesses if thicknesses is not None else (t1, t2, t1, t2)
    phis = (0.0, alpha, alpha + beta, math.pi + beta)
    heights = (0.0, -tA, -tA - tB, -tA - tB + tC)        # each hinge one panel thickness from the last
    hits = [_ray_hit(p, half) for p in phis]
    corners = [np.array(c, float) * half for c in ((1, 1), (-1, 1), (-1, -1), (1, -1))]
    panels = []
    for k, (name, t) in enumerate(zip("ABCD", (tA, tB, tC, tD))):
        lo, hi = phis[k], (phis[(k + 1) % 4] if k < 3 else 2 * math.pi)
        inside = sorted((math.atan2(c[1], c[0]) % (2 * math.pi), tuple(c)) for c in corners
                        if lo < math.atan2(c[1], c[0]) % (2 * math.pi) < hi)
        poly = [np.zeros(2), hits[k], *[np.array(c) for _, c in inside], hits[(k + 1) % 4]]
        v = np.array([[p[0], p[1], 0.0] for p in poly])
        area = 0.5 * abs(sum(v[i, 0] * v[(i + 1) % len(v), 1] - v[(i + 1) % len(v), 0] * v[i, 1]
                             for i in range(len(v))))
        base = min(heights[k], heights[(k + 1) % 4])
        panels.append(Panel(name, v, density * area, thickness=t, base=base))
    creases = []
    for k in range(4):
        a, b = "DABC"[k], "ABCD"[k]
        p2 = np.array([*hits[k], 0.0])
        creases.append(Crease(a, b, np.zeros(3), p2, folds[k], stiffness, name=f"c{k + 1}", height=heights[k]))
    return CreasePattern(panels, creases, root="D")
