"""Fold-pattern generators (map, Miura, Scheel), FOLD files and their closure counts.

Counts (Fulton & Schaub sec. 3.3): a grid of ``n_h`` chains that does not close on itself
has ``n_p = (n_h - 1)(n_b / n_h - 1)`` closure pairs (eq. 20) on ``n_c = n_b - n_h``
bodies (eq. 21); the radially closed Scheel grid adds the closing pairs:
``n_p = n_h L = n_b - 1`` and ``n_c = n_b - 1`` (``L`` panels per chain plus the hub).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from diffmb.formats.fold import load_fold, to_fold
from diffmb.origami import build, topology as topo
from diffmb.origami.generators import map_fold, miura, miura_straight_angle, scheel, topology_info
from diffmb.origami.pattern import _hinge_axis
from diffmb.origami.polygon import plate_inertia
from diffmb.scenarios import get
from diffmb.simulation.integrate import simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# ---------------------------------------------------------------- rigid kinematics (numpy)


def _rot(axis, t):
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + np.sin(t) * K + (1 - np.cos(t)) * K @ K


def fold_errors(pattern):
    """Fold the tree by its creases' angles; return (max gap of the cut creases' endpoints,
    max error of the cut creases' dihedral angles vs. their ``fold``)."""
    creases = {frozenset((c.a, c.b)): c for c in pattern.creases}
    tp = topo.spanning_tree([(c.a, c.b) for c in pattern.creases], pattern.root,
                            method=pattern.method, cut=pattern.cut)
    panels = {p.name: p for p in pattern.panels}
    T = {pattern.root: (np.eye(3), np.zeros(3))}
    for par, ch in tp.tree_edges:
        c = creases[frozenset((par, ch))]
        p1 = np.asarray(c.p1, float)
        R = _rot(_hinge_axis(c, panels[ch]), c.fold)
        Rp, tp_ = T[par]
        T[ch] = (Rp @ R, Rp @ (p1 - R @ p1) + tp_)
    gap = ang_err = 0.0
    for a, b in tp.cut_edges:
        c = creases[frozenset((a, b))]
        for p in (c.p1, c.p2):
            p = np.asarray(p, float)
            gap = max(gap, np.abs(T[a][0] @ p + T[a][1] - T[b][0] @ p - T[b][1]).max())
        Rr = T[a][0].T @ T[b][0]
        w = np.array([Rr[2, 1] - Rr[1, 2], Rr[0, 2] - Rr[2, 0], Rr[1, 0] - Rr[0, 1]]) / 2
        ang = np.arctan2(_hinge_axis(c, panels[b]) @ w, (np.trace(Rr) - 1) / 2)
        ang_err = max(ang_err, abs(np.angle(np.exp(1j * (ang - c.fold)))))
    return gap, ang_err


# ------------------------------------------------------------------------ closure counts


@pytest.mark.parametrize("rows", [2, 3, 4])
@pytest.mark.parametrize("cols", [2, 3, 4])
def test_map_fold_counts_eq20_eq21(rows, cols):
    info = topology_info(map_fold(rows, cols))
    assert info.n_b == rows * cols and info.n_h == cols
    assert info.n_p == (info.n_h - 1) * (info.n_b // info.n_h - 1)  # eq. (20)
    assert info.n_c == info.n_b - info.n_h  # eq. (21)


@pytest.mark.parametrize("rows,cols", [(2, 2), (3, 3), (3, 5), (4, 2)])
def test_miura_counts_eq20_eq21(rows, cols):
    info = topology_info(miura(rows, cols))
    assert (info.n_b, info.n_h) == (rows * cols, cols)
    assert info.n_p == (info.n_h - 1) * (info.n_b // info.n_h - 1)
    assert info.n_c == info.n_b - info.n_h


@pytest.mark.parametrize("sectors,rings", [(3, 1), (4, 2), (6, 3), (8, 2)])
def test_scheel_counts_include_the_closing_ring(sectors, rings):
    info = topology_info(scheel(sectors, rings))
    n_h, L = sectors, rings
    assert info.n_b == n_h * L + 1 and info.n_h == n_h
    assert info.n_p == (n_h - 1) * L + L == info.n_b - 1  # open grid + L closing pairs
    assert info.n_c == info.n_b - 1
    pairs = {frozenset(p) for p in info.pairs}
    for j in range(1, rings + 1):  # the closing pair between the last chain and the first
        assert frozenset((f"s{sectors - 1}_{j}", f"s0_{j}")) in pairs
    assert all(len(c) == rings + 1 and c[-1] == "r" for c in info.chains)


# ------------------------------------------------------------------ Miura initial states


@pytest.mark.parametrize("angle", [30.0, 60.0, 80.0])
@pytest.mark.parametrize("fold", [0.2, 1.0, 2.8, -1.3])
def test_miura_initial_state_is_a_rigid_folding(angle, fold):
    """Closed form tan(rho_s/2) = cos(gamma) tan(rho_z/2): the cut creases' endpoints meet
    and their dihedral angles equal the assigned folds (so the M/V signs are right)."""
    gap, ang_err = fold_errors(miura(4, 4, angle_deg=angle, fold=fold, a=1.3, b=0.7))
    assert gap < 1e-12 and ang_err < 1e-12
    # a wrong straight-crease angle does not close
    p = miura(3, 3, angle_deg=angle, fold=fold)
    for c in p.creases:
        if abs(abs(c.fold) - abs(miura_straight_angle(fold, angle))) < 1e-15:
            c.fold *= 1.1
    assert fold_errors(p)[0] > 1e-4


# ---------------------------------------------------------------------------- FOLD files


def square_map(fold_angles=None):
    d = json.loads((EXAMPLES / "map_2x2.fold").read_text())
    if fold_angles is None:
        d.pop("edges_foldAngle")
    return d


def test_example_files_build_with_the_paper_counts():
    for name, n_b, dof in (("map_2x2.fold", 4, 1), ("miura_3x3.fold", 9, 1)):
        pattern = load_fold(EXAMPLES / name)
        assert len(pattern.panels) == n_b
        assert fold_errors(pattern)[0] < 1e-9
        system, info = build(pattern)
        ref = topology_info(pattern)
        assert (info.n_b, info.n_h, info.n_p, info.n_c) == (ref.n_b, ref.n_h, ref.n_p, ref.n_c)
        assert info.n_p == len(pattern.creases) - (n_b - 1)  # cycle rank
        # one internal degree of freedom: hinges minus independent closure rows
        assert (n_b - 1) - system.closures.report.rank == dof
    m = load_fold(EXAMPLES / "map_2x2.fold")
    folds = sorted(round(np.degrees(c.fold)) for c in m.creases)
    assert folds == [-180, -180, -180, 180]  # FOLD valley positive, used as is


def test_fold_dict_masses_root_and_fold_fraction():
    d = square_map()
    p = load_fold(d, density=2.0, fold_fraction=0.5, hub_mass=7.0, root=3)
    assert p.root == "f3" and p.panel("f3").mass == 7.0
    assert p.panel("f0").mass == pytest.approx(2.0)
    np.testing.assert_allclose(p.panel("f0").inertia, plate_inertia(np.asarray(p.panel("f0").vertices), 2.0))
    np.testing.assert_allclose(p.panel("f3").inertia, plate_inertia(np.asarray(p.panel("f3").vertices), 7.0))
    by_name = {c.name: c.fold for c in p.creases}
    assert by_name == {"e8": -np.pi / 2, "e9": -np.pi / 2, "e10": np.pi / 2, "e11": -np.pi / 2}
    assert all(c.stiffness == 0.01 for c in p.creases)
    flat = load_fold(d)
    assert all(c.fold == 0.0 for c in flat.creases) and flat.root == "f0"  # largest area, first
    # JSON text and 3-D coordinates with z = 0 are accepted
    d3 = copy.deepcopy(d)
    d3["vertices_coords"] = [v + [0.0] for v in d3["vertices_coords"]]
    assert len(load_fold(json.dumps(d3)).panels) == 4


def test_a_fold_files_own_crease_stiffness_and_damping():
    """``diffmb:edges_stiffness`` / ``diffmb:edges_damping``: where the file gives a
    crease's numbers they are its hinge's; ``null`` and creases of files without them take
    the arguments; negative values and lists of the wrong length are named."""
    d = square_map()
    n = len(d["edges_vertices"])
    d["diffmb:edges_stiffness"] = [None] * n
    d["diffmb:edges_stiffness"][9] = 0.5
    d["diffmb:edges_damping"] = [0.0] * n
    d["diffmb:edges_damping"][10] = 0.02
    p = load_fold(d, stiffness=0.01, damping=0.003)
    got = {c.name: (c.stiffness, c.damping) for c in p.creases}
    assert got == {"e8": (0.01, 0.0), "e9": (0.5, 0.0), "e10": (0.01, 0.02), "e11": (0.01, 0.0)}
    bad = copy.deepcopy(d)
    bad["diffmb:edges_damping"][10] = -1.0
    with pytest.raises(ValueError, match=r"diffmb:edges_damping\[10\]: expected a non-negative number"):
        load_fold(bad)
    bad["diffmb:edges_damping"] = [0.0] * (n - 1)
    with pytest.raises(ValueError, match=f"diffmb:edges_damping: {n - 1} entries for {n} edges_vertices"):
        load_fold(bad)


def test_flat_edges_weld_faces_into_one_panel():
    """Square f0 split into two triangles by an F diagonal + square f2 hinged to it."""
    d = {
        "vertices_coords": [[0, 0], [1, 0], [1, 1], [0, 1], [2, 0], [2, 1]],
        "faces_vertices": [[0, 1, 2], [0, 2, 3], [1, 4, 5, 2]],
        "edges_vertices": [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 4], [4, 5], [5, 2]],
        "edges_assignment": ["B", "V", "B", "B", "F", "B", "B", "B"],
        "edges_foldAngle": [0, 90, 0, 0, 0, 0, 0, 0],
    }
    p = load_fold(d, density=3.0)
    assert sorted(x.name for x in p.panels) == ["f0", "f2"]
    w = p.panel("f0")
    assert w.mass == pytest.approx(3.0)
    np.testing.assert_allclose(w.centroid(), [0.5, 0.5, 0.0], atol=1e-12)
    np.testing.assert_allclose(w.inertia, plate_inertia(np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0.0]]), 3.0),
                               atol=1e-12)
    assert len(w.vertices) == 4
    (c,) = p.creases
    assert c.name == "e1" and c.fold == pytest.approx(np.pi / 2)


def test_to_fold_round_trip():
    pat = miura(2, 3, angle_deg=70.0, fold=0.9)
    back = load_fold(to_fold(pat))
    assert len(back.panels) == len(pat.panels) and len(back.creases) == len(pat.creases)
    assert sorted(round(c.fold, 9) for c in back.creases) == sorted(round(c.fold, 9) for c in pat.creases)
    assert fold_errors(back)[0] < 1e-9


def _mutate(path, value):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        if value is KeyError:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
        return d
    return f


MALFORMED = [
    (_mutate(["vertices_coords"], KeyError), "'vertices_coords'"),
    (_mutate(["edges_vertices"], KeyError), "'edges_vertices'"),
    (_mutate(["faces_vertices"], "abc"), "faces_vertices: expected a list"),
    (_mutate(["vertices_coords", 4], [1, "x"]), "vertices_coords[4]"),
    (_mutate(["vertices_coords", 4], [1, 1, 0.5]), "is not planar in the folded form"),
    (_mutate(["faces_vertices", 2], [3, 4]), "faces_vertices[2]"),
    (_mutate(["faces_vertices", 1], [1, 2, 5, 40]), "faces_vertices[1]: vertex index 40 out of range"),
    (_mutate(["faces_vertices", 1], [1, 2.5, 5, 4]), "faces_vertices[1]: vertex index 2.5"),
    (_mutate(["faces_vertices", 1], [0, 1, 2]), "faces_vertices[1]: degenerate face"),
    (_mutate(["faces_vertices", 0], [0, 4, 1, 3]), "faces_vertices[0]"),
    (_mutate(["edges_assignment", 9], "X"), "edges_assignment[9]: unknown assignment 'X'"),
    (_mutate(["edges_assignment", 2], "M"), "edges_vertices[2]: M crease borders 1 faces"),
    (_mutate(["edges_assignment", 9], "B"), "[9]"),
    (_mutate(["edges_foldAngle", 10], -90), "edges_foldAngle[10]"),
    (_mutate(["edges_foldAngle", 10], "90"), "edges_foldAngle[10]: expected a number"),
    (_mutate(["edges_foldAngle", 10], 270), "edges_foldAngle[10]"),
    (_mutate(["edges_vertices", 3], [5, 50]), "edges_vertices[3]: vertex index 50 out of range"),
    (_mutate(["edges_vertices", 3], [5, 5]), "edges_vertices[3]"),
    (lambda d: {**d, "edges_assignment": d["edges_assignment"][:-1]}, "edges_assignment: 11 entries"),
]


@pytest.mark.parametrize("mutate,message", MALFORMED)
def test_malformed_fold_raises_value_error_naming_key(mutate, message):
    d = mutate(copy.deepcopy(square_map(True)))
    with pytest.raises(ValueError) as e:
        load_fold(d)
    assert message in str(e.value)


def test_missing_side_root_and_file_errors(tmp_path):
    d = square_map(True)
    d["edges_vertices"].pop(11), d["edges_assignment"].pop(11), d["edges_foldAngle"].pop(11)
    with pytest.raises(ValueError, match=r"faces_vertices\[2\]: side .* is not in edges_vertices"):
        load_fold(d)
    with pytest.raises(ValueError, match=r"root: face index 9 out of range"):
        load_fold(square_map(True), root=9)
    missing = tmp_path / "nope.fold"
    with pytest.raises(ValueError, match="nope.fold"):
        load_fold(missing)
    with pytest.raises(ValueError, match="nope.fold"):
        get(str(missing))
    bad = tmp_path / "bad.fold"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.fold: not valid JSON"):
        load_fold(bad)


def test_inconsistent_fold_state_names_the_crease():
    d = square_map(True)
    d["edges_foldAngle"] = [0, 0, 0, 0, 0, 0, 0, 0, -90, 0, 30, 0]
    with pytest.raises(ValueError, match=r"closure 'e\d+'"):
        build(load_fold(d))


def test_scheel_ring_is_rigid_and_fold_scenario_registered():
    """Closed ring around a rigid hub: degree-3 hub corners lock every hinge (rank = hinges)."""
    system, info = build(scheel(4, 1))
    assert info.n_p == 4 and system.closures.report.rank == 4
    sc = get(str(EXAMPLES / "miura_3x3.fold"))
    assert sc.name == "miura_3x3" and sc.stabilization == "projection" and sc.solver == "dopri5"
    assert set(sc.defaults) >= {"density", "K", "c"}
    assert get("miura").stabilization == "projection" and get("scheel").stabilization == "projection"


# ---------------------------------------------------------------------------- simulation


# slow job: a second fold for the projected-run check (~7 s); the default job keeps fold-4panel's
# (test_origami), this file's build and the Miura closure solve (test_closure_solve)
@pytest.mark.slow
def test_miura_example_conserves_energy_momentum_and_closures():
    pattern = load_fold(EXAMPLES / "miura_3x3.fold", stiffness=0.05)
    system, _ = build(pattern, stabilization="projection")
    tr = simulate(system, t1=0.2, dt=1e-3, solver="rk4", saveat=21)
    assert tr.status == "success"
    e = np.asarray(tr.diagnostics["energy"])
    h = np.asarray(tr.diagnostics["angular_momentum"])
    assert np.abs(e - e[0]).max() / abs(e[0]) < 1e-6
    assert np.abs(h - h[0]).max() < 1e-9
    assert np.asarray(tr.violation["position"]).max() < 1e-9
    # it moves: the springs unfold it
    q = np.asarray(tr.xs)[:, : system.model.nq]
    assert np.abs(q[-1, 6:] - q[0, 6:]).max() > 1e-4
