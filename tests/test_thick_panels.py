"""Thick panels (issue 56): slabs with their hinges on their faces, after Chen, Peng & You.

The thick flat-foldable degree-4 vertex (:func:`diffmb.origami.thick.degree4_vertex`,
sector angles ``alpha, beta, pi - alpha, pi - beta``) is a spatial 4R loop whose axes are
the panels' thicknesses apart. With ``t2 = t1 sin(beta) / sin(alpha)`` it is a Bennett
linkage and folds with one degree of freedom on the zero-thickness vertex's branch where
creases 2 and 4 are the major pair: ``rho_4 = rho_2``, ``rho_3 = -rho_1`` and
``tan(rho_1 / 2) = sin((alpha - beta) / 2) / sin((alpha + beta) / 2) * tan(rho_2 / 2)``.
That relation is checked here first by the product of the four crease rotations of a
zero-thickness vertex (independently of diffmb), then against diffmb's thick vertex.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from diffmb.origami import build
from diffmb.origami.start_state import LockedPattern, PatternNote
from diffmb.origami.thick import bennett_t2, degree4_vertex
from diffmb.tree.api import forward_kinematics
from helpers import axis_rotation

ALPHA, BETA, T1 = math.radians(70), math.radians(50), 0.05
PHIS = (0.0, ALPHA, ALPHA + BETA, math.pi + BETA)


def branch(rho2, alpha=ALPHA, beta=BETA):
    """The zero-thickness vertex's fold angles on the branch with creases 2, 4 major."""
    rho1 = 2 * math.atan(math.sin((alpha - beta) / 2) / math.sin((alpha + beta) / 2) * math.tan(rho2 / 2))
    return np.array([rho1, rho2, -rho1, rho2])


def test_the_branch_closes_the_thin_vertex_loop():
    for rho2 in (0.1, 1.4, 3.0):
        M = np.eye(3)
        for phi, rho in zip(PHIS, branch(rho2)):
            M = M @ axis_rotation((math.cos(phi), math.sin(phi), 0.0), rho)
        assert np.abs(M - np.eye(3)).max() < 1e-14


def _build(pattern):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system, info = build(pattern)
    return system, info, [w for w in caught if issubclass(w.category, PatternNote)]


def folded(rho2, **kw):
    """The thick vertex with crease 2 driven to ``rho2``, the others closed by the solve
    from 90 % of the branch's angles."""
    g = 0.9 * branch(rho2)
    p = degree4_vertex(ALPHA, BETA, T1, folds=(g[0], rho2, g[2], g[3]), **kw)
    return dataclasses.replace(p, drive=("c2",))


def crease_angles(system, pattern) -> dict:
    """Every crease's angle at the start state, valley positive: tree creases from their
    coordinates, the cut one from its panels' normals about the crease."""
    m, q = system.model, np.asarray(system.q0)
    E, _ = (np.asarray(x) for x in forward_kinematics(m, q))
    out = {}
    for c in pattern.creases:
        ia, ib = m.body_index(c.a), m.body_index(c.b)
        child = ib if m.parents[ib] == ia else ia if m.parents[ia] == ib else None
        if child is not None:
            out[c.name] = float(q[m.body_slices[child][0]])
            continue
        z = np.array([0.0, 0.0, 1.0])
        na, nb = E[ia].T @ z, E[ib].T @ z
        d = (np.asarray(c.p2, float) - np.asarray(c.p1, float))
        e = E[ia].T @ (d / np.linalg.norm(d))
        ca = pattern.panel(c.a).centroid() - np.asarray(c.p1, float)
        side = np.sign(ca[0] * d[1] - ca[1] * d[0])
        out[c.name] = float(math.atan2(side * np.cross(na, nb) @ e, na @ nb))
    return out


def test_bennett_thicknesses_fold_with_one_dof_on_the_zero_thickness_relation():
    for rho2 in (0.05, 0.8, 2.0, 3.0, 3.1):
        p = folded(rho2)
        system, info, _ = _build(p)
        assert info.mobility.dof == 1, rho2
        got = crease_angles(system, p)
        np.testing.assert_allclose([got[f"c{k}"] for k in range(1, 5)], branch(rho2), atol=1e-9)


def test_a_one_percent_thickness_error_locks_the_vertex():
    """Hinges on faces tie the thicknesses by ``tA + tB = tC + tD`` (the hinge loop closes
    in height), so an error in one panel is taken up by the one across the vertex from it;
    either way the loop is no longer a Bennett linkage."""
    t2 = bennett_t2(ALPHA, BETA, T1)
    for thick in ((1.01 * T1, t2, T1, t2 + 0.01 * T1), (T1, 1.01 * t2, T1 + 0.01 * t2, t2),
                  (T1, 1.01 * t2, T1, 1.01 * t2)):
        system, info, notes = _build(degree4_vertex(ALPHA, BETA, T1, thicknesses=thick))
        assert info.mobility.locked
        assert any(w.category is LockedPattern for w in notes)


def test_face_hinges_meet_with_zero_gap_when_stowed():
    """Folded flat (crease 2 at 180 deg), the slabs across the top-face hinge (c1: D and
    A) and the bottom-face hinge (c3: B and C) lie face on face."""
    p = folded(math.pi)
    system, info, _ = _build(p)
    m = system.model
    E, pos = (np.asarray(x) for x in forward_kinematics(m, np.asarray(system.q0)))
    origin = {n: pos[m.body_index(n)] for n in "ABCD"}
    flat_origin = {"D": p.panel("D").centroid()}   # body origins of the flat layout (pattern.build):
    for name in "ABC":                              # the root's centroid, the others' hinge midpoints
        parent = m.body_names[m.parents[m.body_index(name)]]
        c = next(c for c in p.creases if {c.a, c.b} == {name, parent})
        flat_origin[name] = (np.asarray(c.p1, float) + np.asarray(c.p2, float)) / 2 + np.array([0.0, 0.0, c.height])

    def face(name, level):
        panel = p.panel(name)
        v = np.asarray(panel.vertices, float) + np.array([0.0, 0.0, level]) - flat_origin[name]
        return origin[name] + v @ E[m.body_index(name)]

    for lower, upper, level in (("D", "A", "top"), ("C", "B", "bottom")):
        plane = face(lower, getattr(p.panel(lower), level))
        n = E[m.body_index(lower)].T @ np.array([0.0, 0.0, 1.0])
        other = face(upper, getattr(p.panel(upper), level))
        assert np.abs((other - plane[0]) @ n).max() < 1e-9, (lower, upper)


def test_a_slab_has_its_thickness_in_its_inertia():
    p = degree4_vertex(ALPHA, BETA, T1)
    system, info, _ = _build(p)
    m = system.model
    thin = degree4_vertex(ALPHA, BETA, 1e-300)   # the same plates, no thickness
    thin_system, _, _ = _build(dataclasses.replace(thin, panels=[dataclasses.replace(q, mass=r.mass)
                                                                 for q, r in zip(thin.panels, p.panels)]))
    for name in "ABCD":
        b = m.body_index(name)
        mass = p.panel(name).mass
        extra = np.asarray(m.inertia)[b] - np.asarray(thin_system.model.inertia)[thin_system.model.body_index(name)]
        t = p.panel(name).thickness
        assert extra == pytest.approx(mass * t * t / 12 * np.diag([1.0, 1.0, 0.0]), abs=1e-12)


def test_a_hinge_outside_its_slab_is_refused_naming_it():
    p = degree4_vertex(ALPHA, BETA, T1)
    p.creases[0] = dataclasses.replace(p.creases[0], height=0.5)
    with pytest.raises(ValueError, match=r"crease 'c1': its hinge at height 0.5 m is outside panel"):
        build(p)


def test_a_thick_pattern_round_trips_through_fold_and_builds_the_same(tmp_path):
    from diffmb.formats.fold import load_fold, to_fold

    p = degree4_vertex(ALPHA, BETA, T1)
    back = load_fold(to_fold(p))
    assert sorted(q.thickness for q in back.panels) == pytest.approx(sorted(q.thickness for q in p.panels))
    assert sorted(c.height for c in back.creases) == pytest.approx(sorted(c.height for c in p.creases))
    system, info, _ = _build(back)
    assert info.mobility.dof == 1


def test_the_viewer_draws_slabs(tmp_path):
    from diffmb.viewer.origami import _slab

    square = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    polys = _slab(square, 0.1)
    assert len(polys) == 6
    assert {round(v[2], 12) for v in polys[0]} == {0.05} and {round(v[2], 12) for v in polys[1]} == {-0.05}
    assert _slab(square, 0.0) == [square.tolist()]
