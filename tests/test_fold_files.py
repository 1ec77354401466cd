"""FOLD files as other tools write them (issue 56): any plane, multi-frame files, folded
forms developed, C/J edges, slits, edge-only files, one panel; the start state (closure
tolerance, nearest rigid state, driving creases, frames) and the mobility said up front.

Every file is written here. The degree-4 vertex is checked against the closed form of a
flat-foldable degree-4 vertex with sector angles ``alpha, beta, pi - alpha, pi - beta``:
``rho_3 = rho_1``, ``rho_4 = -rho_2`` and
``tan(rho_2 / 2) = -cos((alpha + beta) / 2) / cos((alpha - beta) / 2) * tan(rho_1 / 2)``,
derived from the product of the four crease rotations being the identity and checked
here by that product, independently of diffmb.
"""

from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pytest

from diffmb import cli
from diffmb.formats.fold import load_fold
from diffmb.origami import build
from diffmb.origami.polygon import polygon_area
from diffmb.origami.start_state import LockedPattern, PatternNote
from helpers import axis_rotation

ALPHA, BETA = math.radians(70), math.radians(50)
PHIS = (0.0, ALPHA, ALPHA + BETA, math.pi + BETA)   # crease directions from the vertex


def _ray_hit(phi):
    d = np.array([math.cos(phi), math.sin(phi)])
    t = min(1 / abs(c) for c in d if abs(c) > 1e-12)
    return d * t


def vertex_fold(phis=PHIS, assign=("V", "M", "V", "V"), faces=False) -> dict:
    """A square sheet [-1, 1]^2 with creases from the origin in the directions ``phis``:
    its vertices, edges (creases first) and assignments; faces when asked."""
    hits = [_ray_hit(p) for p in phis]
    corners = [np.array(c, float) for c in ((1, 1), (-1, 1), (-1, -1), (1, -1))]
    ring = sorted([(math.atan2(p[1], p[0]) % (2 * math.pi), "hit", k) for k, p in enumerate(hits)]
                  + [(math.atan2(c[1], c[0]) % (2 * math.pi), "corner", k) for k, c in enumerate(corners)])
    V = [[0.0, 0.0]]
    index = {}
    for _, kind, k in ring:
        index[(kind, k)] = len(V)
        V.append(list((hits if kind == "hit" else corners)[k]))
    edges = [[0, index[("hit", k)]] for k in range(len(phis))]
    order = [index[(kind, k)] for _, kind, k in ring]
    edges += [[order[i], order[(i + 1) % len(order)]] for i in range(len(order))]
    d = {"file_spec": 1.2, "vertices_coords": V, "edges_vertices": edges,
         "edges_assignment": list(assign) + ["B"] * len(order)}
    if faces:
        from diffmb.formats.planar_faces import faces_of
        d["faces_vertices"] = faces_of(np.array(V), edges)
    return d


def closed_form(rho1, alpha=ALPHA, beta=BETA):
    k = -math.cos((alpha + beta) / 2) / math.cos((alpha - beta) / 2)
    rho2 = 2 * math.atan(k * math.tan(rho1 / 2))
    return np.array([rho1, rho2, rho1, -rho2])


def test_the_closed_form_closes_the_vertex_loop():
    """The derivation's check, without diffmb: the four crease rotations compose to I."""
    for rho1 in (0.1, 0.9, 2.5):
        M = np.eye(3)
        for phi, rho in zip(PHIS, closed_form(rho1)):
            M = M @ axis_rotation((math.cos(phi), math.sin(phi), 0.0), rho)
        assert np.abs(M - np.eye(3)).max() < 1e-14


def folded_vertex(rho1) -> dict:
    """The degree-4 vertex folded to ``closed_form(rho1)`` as a 3-D foldedForm: the sector
    between creases 4 and 1 stays put, sector ``k`` (between creases ``k+1`` and ``k+2``)
    is carried by the rotations about creases 1 .. k+1 (axes in the flat layout)."""
    d = vertex_fold(faces=True)
    V = np.array([v + [0.0] for v in d["vertices_coords"]])
    rho = closed_form(rho1)
    out = V.copy()
    for vi in range(1, len(V)):
        a = math.atan2(V[vi, 1], V[vi, 0]) % (2 * math.pi)
        s = max(k for k in range(4) if a >= PHIS[k] - 1e-12)
        R = np.eye(3)
        for k in range(s + 1 if s < 3 else 0):
            R = R @ axis_rotation((math.cos(PHIS[k]), math.sin(PHIS[k]), 0.0), rho[k])
        out[vi] = R @ V[vi]
    return {**d, "vertices_coords": out.tolist(), "frame_classes": ["foldedForm"]}


def crease_angles(system, pattern) -> dict:
    """Each tree crease's start angle, by crease name (cut creases left out)."""
    m = system.model
    q = np.asarray(system.q0)
    out = {}
    for c in pattern.creases:
        ia, ib = m.body_index(c.a), m.body_index(c.b)
        child = ib if m.parents[ib] == ia else ia if m.parents[ia] == ib else None
        if child is not None:
            out[c.name] = float(q[m.body_slices[child][0]])
    return out


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*a, **kw)
    return out, [str(w.message) for w in caught if issubclass(w.category, PatternNote)], caught


# ------------------------------------------------------------------ reading files


def test_a_sheet_in_another_plane_is_fitted_and_said():
    d = vertex_fold(faces=True)
    xy = load_fold(d)
    R = axis_rotation((1.0, 0.3, -0.2), 1.1)
    d3 = {**d, "vertices_coords": [list(R @ (v + [0.0]) + [5.0, -2.0, 1.0]) for v in d["vertices_coords"]]}
    (pattern, notes, _) = _quiet(load_fold, d3)
    assert any("rotated into z = 0" in n for n in pattern.notes)
    areas = sorted(polygon_area(p.vertices) for p in xy.panels)
    assert sorted(polygon_area(p.vertices) for p in pattern.panels) == pytest.approx(areas, rel=1e-12)
    assert [c.kind for c in pattern.creases] == [c.kind for c in xy.creases]


def test_multi_frame_file_with_the_crease_pattern_in_file_frames():
    """Origami Simulator's fold series: no geometry at the top, frame 1 the crease
    pattern, frame 2 a folded state; the run can start from frame 2."""
    cp = vertex_fold(faces=True)
    folded = folded_vertex(0.8)
    data = {"file_spec": 1.1, "file_frames": [
        {**cp, "frame_classes": ["creasePattern"]},
        {"frame_inherit": True, "frame_parent": 1, "frame_classes": ["foldedForm"],
         "vertices_coords": folded["vertices_coords"]}]}
    flat = load_fold(data)
    assert all(c.fold == 0 for c in flat.creases)
    assert any("frame=K" in n and "frame 2" in n for n in flat.notes)
    start = load_fold(data, frame=2)
    got = {c.name: c.fold for c in start.creases}
    np.testing.assert_allclose([got[f"e{k}"] for k in range(4)], closed_form(0.8), atol=1e-9)
    with pytest.raises(ValueError, match=r"frame: 7 is not a frame of the file \(frames 0-2\)"):
        load_fold(data, frame=7)


def test_a_3d_folded_form_is_developed_to_its_crease_pattern_and_angles():
    pattern, notes, _ = _quiet(load_fold, folded_vertex(1.3))
    assert any("folded form" in n and "developed" in n for n in pattern.notes)
    got = {c.name: c.fold for c in pattern.creases}
    np.testing.assert_allclose([got[f"e{k}"] for k in range(4)], closed_form(1.3), atol=1e-9)
    system, info = build(pattern)   # it closes as given: no note about moving the start state
    assert info.mobility.dof == 1
    flat = load_fold(vertex_fold(faces=True))
    for a, b in zip(sorted(p.mass for p in pattern.panels), sorted(p.mass for p in flat.panels)):
        assert a == pytest.approx(b, rel=1e-12)   # the developed faces are the crease pattern's


def test_a_2d_folded_form_takes_its_flat_folds_sign_from_the_assignment():
    """A 2x2 map folded flat in 2-D: every face stacked on the first; the creases are
    +-180 deg by M/V, and a flat-folded crease with neither is refused."""
    V = [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1], [0, 2], [1, 2], [2, 2]]
    faces = [[0, 1, 4, 3], [1, 2, 5, 4], [3, 4, 7, 6], [4, 5, 8, 7]]
    edges = [[1, 4], [3, 4], [4, 5], [4, 7], [0, 1], [1, 2], [2, 5], [5, 8], [8, 7], [7, 6], [6, 3], [3, 0]]
    assign = ["V", "M", "M", "M"] + ["B"] * 8
    # fold the right column onto the left about x = 1, then the top row onto the bottom about y = 1
    folded = [[2 - x if x > 1 else x, 2 - y if y > 1 else y] for x, y in V]
    d = {"vertices_coords": folded, "faces_vertices": faces, "edges_vertices": edges,
         "edges_assignment": assign, "frame_classes": ["foldedForm"], "frame_attributes": ["2D"]}
    pattern, _, _ = _quiet(load_fold, d)
    got = {c.name: c.fold for c in pattern.creases}
    assert got == pytest.approx({"e0": math.pi, "e1": -math.pi, "e2": -math.pi, "e3": -math.pi})
    bad = copy.deepcopy(d)
    bad["edges_assignment"][0] = "U"
    with pytest.raises(ValueError, match=r"edges_assignment\[0\]: U crease folded flat .* assign it M or V"):
        load_fold(bad)


def test_cut_join_slit_edge_only_and_one_panel_files_load():
    d = vertex_fold()          # edge-only: faces derived from the planar graph
    p = load_fold(d)
    assert len(p.panels) == 4 and any("derived from the planar graph" in n for n in p.notes)
    cut = copy.deepcopy(d)
    cut["edges_assignment"][1] = "C"   # a cut from the vertex to the boundary
    assert len(load_fold(cut).creases) == 3
    join = copy.deepcopy(d)
    join["edges_assignment"][1] = "J"  # its two faces are one panel
    assert len(load_fold(join).panels) == 3
    slit = {"vertices_coords": [[0, 0], [2, 0], [2, 2], [0, 2], [1, 1]],
            "faces_vertices": [[0, 1, 2, 4, 2, 3]],            # a slit from corner 2 into the middle
            "edges_vertices": [[0, 1], [1, 2], [2, 3], [3, 0], [2, 4]],
            "edges_assignment": ["B", "B", "B", "B", "C"]}
    one, _, _ = _quiet(load_fold, slit)
    system, info = build(one)
    assert len(one.panels) == 1 and info.n_b == 1 and one.panels[0].mass == pytest.approx(4.0)
    dangling, _, _ = _quiet(load_fold, {**slit, "edges_assignment": ["B", "B", "B", "B", "M"]})
    assert not dangling.creases and any("end inside a face" in n for n in dangling.notes)
    crossing = {"vertices_coords": [[0, 0], [1, 0], [1, 1], [0, 1]],
                "edges_vertices": [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3]]}
    with pytest.raises(ValueError, match=r"edges_vertices\[4\] and edges_vertices\[5\] cross"):
        load_fold(crossing)


def test_a_file_with_a_panel_that_is_not_convex_runs_with_contact_off_and_says_so(tmp_path):
    """Contact, on by default, models convex panels only: a file whose panel has a slit
    loads all the same, contact off for it, and a note names the panel."""
    from diffmb.scenarios.origami import fold_scenario

    path = tmp_path / "slit.fold"
    path.write_text(json.dumps({"vertices_coords": [[0, 0], [2, 0], [2, 2], [0, 2], [1, 1]],
                                "faces_vertices": [[0, 1, 2, 4, 2, 3]],
                                "edges_vertices": [[0, 1], [1, 2], [2, 3], [3, 0], [2, 4]],
                                "edges_assignment": ["B", "B", "B", "B", "C"]}))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        system, _, values = fold_scenario(str(path)).make({})
    notes = [str(w.message) for w in seen if issubclass(w.category, PatternNote)]
    assert any(n.startswith("contact off: panel ") and "is not convex (a slit or a reflex corner)" in n
               for n in notes), notes
    assert values["contact"] == 1.0 and not system.elements[0].forces


# ------------------------------------------------------------------ the start state


def test_a_start_state_within_the_closure_tolerance_is_closed_and_said():
    d = folded_vertex(1.0)
    V = np.array(d["vertices_coords"])
    rng = np.random.default_rng(1)
    d["vertices_coords"] = (V + 1.58e-6 * rng.standard_normal(V.shape) / 3).tolist()   # another tool's rounding
    pattern, _, _ = _quiet(load_fold, d)
    (system, info), notes, _ = _quiet(build, pattern)
    assert any("missed closing" in n for n in notes)
    got, given = crease_angles(system, pattern), {c.name: c.fold for c in pattern.creases}
    assert max(abs(got[k] - given[k]) for k in got) < 1e-5
    assert max(abs(got[k] - v) for k, v in zip(("e0", "e1", "e2", "e3"), closed_form(1.0)) if k in got) < 1e-5


def test_angles_that_are_not_rigid_are_refused_with_the_nearest_rigid_state():
    d = vertex_fold()
    d["edges_foldAngle"] = [60, -30, 60, 0] + [0] * 8   # crease 4 left flat: not a rigid state
    with pytest.raises(ValueError) as e:
        _quiet(build, load_fold(d))
    msg = str(e.value)
    assert "not a rigid folded state" in msg and "closure 'e" in msg and "the nearest rigid state: e" in msg
    assert "closure_tol" in msg and "\n" not in msg


def test_driving_crease_folds_the_vertex_on_the_closed_form():
    for f in (0.2, 0.6):
        p = load_fold(vertex_fold(), fold_fraction=f, drive=["e0"])
        (system, info), notes, _ = _quiet(build, p)
        assert any("driving creases e0" in n for n in notes)
        tree = crease_angles(system, p)
        want = dict(zip(("e0", "e1", "e2", "e3"), closed_form(math.pi * f)))
        assert len(tree) == 3 and "e0" in tree   # the driver is a tree hinge
        for name, value in tree.items():
            assert value == pytest.approx(want[name], abs=1e-9), name


def test_mobility_is_said_and_a_locked_pattern_warned():
    (system, info), _, _ = _quiet(build, load_fold(vertex_fold()))
    assert info.mobility.dof == 1 and str(info.mobility).startswith("rigidly foldable, 1 dof")
    # a degree-3 vertex cannot fold rigidly at all
    three = vertex_fold(phis=(0.0, 2.0, 4.0), assign=("V", "M", "V"))
    (system, info), _, caught = _quiet(build, load_fold(three))
    assert info.mobility.locked
    locked = [str(w.message) for w in caught if w.category is LockedPattern]
    assert locked and "locked: mobility 0" in locked[0] and "cannot fold rigidly from here" in locked[0]


def test_the_cli_says_mobility_and_notes_before_running(tmp_path, capsys):
    path = tmp_path / "vertex.fold"
    path.write_text(json.dumps(vertex_fold()))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--fold-fraction", "0.3", "--t1", "0.01", "--out", str(out), "--no-plot",
                     "--json", str(out / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "note: faces_vertices: not in the file" in err and "driving creases" in err
    obj = json.loads((out / "r.json").read_text())
    assert obj["mobility"]["dof"] == 1 and obj["status"] == "success"
    capsys.readouterr()
    assert cli.main(["run", str(path), "--frame", "4", "--out", str(out), "--quiet"]) == 2
    line = capsys.readouterr().err.strip()
    assert "vertex.fold" in line and "frame: 4 is not a frame" in line and "\n" not in line


@pytest.mark.slow
def test_the_cli_warns_of_a_locked_pattern_before_running_it(tmp_path, capsys):
    three = tmp_path / "three.fold"
    three.write_text(json.dumps(vertex_fold(phis=(0.0, 2.0, 4.0), assign=("V", "M", "V"))))
    out = tmp_path / "out"
    assert cli.main(["run", str(three), "--t1", "0.01", "--out", str(out), "--no-plot", "--quiet",
                     "--json", str(out / "t.json")]) == 0
    err = capsys.readouterr().err
    assert "warning: locked: mobility 0" in err
    obj = json.loads((out / "t.json").read_text())
    assert obj["mobility"]["locked"] is True
    assert obj["status"] == "suspect" and any(w["kind"] == "locked" for w in obj["warnings"])


def test_an_svg_crease_pattern_runs_from_the_cli(tmp_path, capsys):
    svg = tmp_path / "square.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">'
                   '<rect x="0" y="0" width="100" height="100" fill="none" stroke="#000000"/>'
                   '<line x1="0" y1="0" x2="100" y2="100" stroke="#0000ff"/></svg>')
    out = tmp_path / "out"
    assert cli.main(["run", str(svg), "--fold-fraction", "0.25", "--t1", "0.01", "--out", str(out), "--no-plot",
                     "--json", str(out / "s.json")]) == 0
    obj = json.loads((out / "s.json").read_text())
    assert obj["mobility"] is None or obj["mobility"]["dof"] == 1   # two panels: a tree, no closures
    bad = tmp_path / "bad.svg"
    bad.write_text('<svg xmlns="http://www.w3.org/2000/svg"><line x1="0" y1="0" x2="1" y2="1" '
                   'stroke="#888888"/></svg>')
    capsys.readouterr()
    assert cli.main(["run", str(bad), "--t1", "0.01", "--out", str(out), "--quiet"]) == 2
    line = capsys.readouterr().err.strip()
    assert "bad.svg" in line and "#888888" in line and "\n" not in line
