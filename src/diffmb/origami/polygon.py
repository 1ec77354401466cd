"""Planar polygons of a crease pattern: area, centroid and the inertia of a thin plate."""

from __future__ import annotations

import numpy as np


def polygon_centroid(v: np.ndarray) -> np.ndarray:
    """Area centroid of a planar polygon (vertices in order, z = 0)."""
    x, y = v[:, 0], v[:, 1]
    xn, yn = np.roll(x, -1), np.roll(y, -1)
    cr = x * yn - xn * y
    A = cr.sum() / 2
    if abs(A) < 1e-14:
        raise ValueError("degenerate panel polygon (zero area)")
    return np.array([((x + xn) * cr).sum() / (6 * A), ((y + yn) * cr).sum() / (6 * A), 0.0])


def polygon_signed_area(v: np.ndarray) -> float:
    """The shoelace area of a planar polygon: positive for counter-clockwise vertices."""
    x, y = v[:, 0], v[:, 1]
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)


def polygon_area(v: np.ndarray) -> float:
    return abs(polygon_signed_area(v))


def polygon_is_convex(v: np.ndarray) -> bool:
    """Whether a planar polygon (vertices in order, either way round, z = 0) turns one way
    at every vertex and once round in all: no reflex corner, and no slit into it (a slit
    doubles back on itself, a half turn that the signs of the turns alone do not see)."""
    e = np.roll(v, -1, axis=0)[:, :2] - v[:, :2]
    f = np.roll(e, -1, axis=0)
    turn = np.arctan2(e[:, 0] * f[:, 1] - e[:, 1] * f[:, 0], np.sum(e * f, -1))
    tol = 1e-9
    one_way = np.all(turn >= -tol) or np.all(turn <= tol)
    return bool(one_way and np.all(np.abs(turn) < np.pi - tol) and abs(abs(turn.sum()) - 2 * np.pi) < 1e-6)


def plate_inertia(v: np.ndarray, mass: float) -> np.ndarray:
    """Inertia about the centroid of a uniform thin polygonal plate (fan triangulation)."""
    c = polygon_centroid(v)
    Ixx = Iyy = Ixy = 0.0
    area = polygon_area(v)
    for i in range(1, len(v) - 1):
        tri = np.array([v[0], v[i], v[i + 1]])[:, :2] - c[:2]
        e1, e2 = tri[1] - tri[0], tri[2] - tri[0]
        a = abs(e1[0] * e2[1] - e1[1] * e2[0]) / 2
        # second moments of a triangle about the origin: A/6 * (sum x_i^2 + sum x_i x_j)
        s = lambda f, g: (f @ g + f.sum() * g.sum()) / 12 * a
        Ixx += s(tri[:, 1], tri[:, 1])
        Iyy += s(tri[:, 0], tri[:, 0])
        Ixy += s(tri[:, 0], tri[:, 1])
    rho = mass / area
    I = rho * np.array([[Ixx, -Ixy, 0.0], [-Ixy, Iyy, 0.0], [0.0, 0.0, Ixx + Iyy]])
    return I
