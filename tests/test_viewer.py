"""``diffmb view``: scenes, the page, FOLD frames, glTF / OBJ, the command (no browser;
the browser tests are in test_viewer_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from diffmb.cli import main as cli
from diffmb.formats.fold import load_fold
from diffmb.origami.animate import panel_polygons
from diffmb.viewer import mesh, saved, scene_of
from diffmb.viewer.bodies import inertia_box
from diffmb.viewer.frames import rotate
from diffmb.viewer.page import asset, render
from diffmb.viewer.scene import dcm_to_quat, frame_indices
from viewer_runs import ARM_URDF, arm_run, fold_run, save_run, tbar_run

#: sha256 of the vendored three.js 0.159.0 build/three.min.js (npm pack three@0.159.0)
THREE_SHA256 = "7b1c5d75b28d9de15042e2b374f83566d8c7146697af8fdeb4558b0fb528a585"
#: the 2x2 map folded along its vertical line only (rigidly foldable: the closure holds)
VERTICAL = {"start": [0.2, 0.0, 0.0], "end": [0.95 * math.pi, 0.0, 0.0]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``runs[name]``: a run file, made when a test first asks for it."""
    d = tmp_path_factory.mktemp("viewer")
    make = {"fold": lambda: fold_run(d / "fold-4panel.npz"), "arm": lambda: arm_run(d),
            "tbar": lambda: tbar_run(d / "tbar.npz"),
            "vertical": lambda: fold_run(d / "vertical.npz", n=21, target=VERTICAL)}

    class Runs(dict):
        def __missing__(self, name):
            self[name] = make[name]()
            return self[name]

    return Runs()


@pytest.fixture(scope="module")
def fold(runs):
    run = saved.load(runs["fold"])
    return run, scene_of(run)


def test_quaternions_are_the_body_to_world_rotations():
    R = Rotation.random(50, random_state=1)
    q = dcm_to_quat(np.transpose(R.as_matrix(), (0, 2, 1)))  # DCMs [body world] = R^T
    ref = R.as_quat()
    assert np.allclose(np.abs(np.einsum("ij,ij->i", q, ref)), 1.0, atol=1e-12)
    v = np.random.default_rng(0).normal(size=(50, 3))
    assert np.allclose(rotate(q, v), R.apply(v), atol=1e-12)


def test_frames_are_decimated_to_the_display_rate():
    ts = np.linspace(0.0, 10.0, 10_001)
    idx = frame_indices(ts, fps=25, max_frames=1000)
    assert len(idx) == 251 and idx[0] == 0 and idx[-1] == len(ts) - 1
    assert np.allclose(np.diff(ts[idx]), 0.04)
    assert len(frame_indices(ts, fps=25, max_frames=100)) == 100
    assert list(frame_indices(np.array([0.0, 0.5, 1.0]), fps=100, max_frames=400)) == [0, 1, 2]


def test_origami_scene_puts_the_panels_where_the_tree_does(fold):
    run, sc = fold
    assert sc.kind == "origami" and sc.body_names == ["r", "j", "m", "l"] and sc.hub == 0
    assert [g["role"] for g in sc.geometry] == ["hub", "panel", "panel", "panel"]
    assert all(len(g["polygons"]) == 1 and len(g["polygons"][0]) == 4 for g in sc.geometry)
    kinds = [s["kind"] for g in sc.geometry for s in g["segments"]]
    assert kinds.count("crease") == 3 and kinds.count("cut") == 2  # the cut crease, on both panels
    assert sc.poses.dtype == np.float32 and sc.poses.shape == (len(sc.times), 4, 7)
    ts, polys = panel_polygons(run.system, run.traj, _outlines(run), max_frames=len(sc.times))
    assert np.allclose(ts, sc.times, atol=1e-6)
    for f in range(len(ts)):
        for b, g in enumerate(sc.geometry):
            P = np.asarray(g["polygons"][0])
            world = sc.poses[f, b, :3] + rotate(np.broadcast_to(sc.poses[f, b, 3:].astype(float), (len(P), 4)), P)
            assert np.allclose(world, polys[f][b], atol=1e-5)


def _outlines(run):
    from diffmb.scenarios.origami import outlines

    return outlines(run.name, run.values)


def test_origami_quantities(fold, runs):
    run, sc = fold
    q = {x.name: x for x in sc.quantities}
    assert set(q) == {"hinge angle", "hinge rate", "closure violation (cut-crease gap)", "hinge energy"}
    xs = np.asarray(run.traj.xs)[frame_indices(np.asarray(run.traj.ts))]
    angles = q["hinge angle"].values
    assert np.all(np.isnan(angles[:, 0]))  # the hub has no hinge
    assert np.allclose(angles[:, 1:], np.degrees(xs[:, 6:9]))
    assert np.allclose(q["hinge energy"].values[:, 1:], 0.5 * 0.1 * xs[:, 6:9] ** 2)  # K = 0.1
    assert q["closure violation (cut-crease gap)"].values.max() > 0.1  # all hinges at once: does not close
    vertical = scene_of(saved.load(runs["vertical"]))
    gap = {x.name: x for x in vertical.quantities}["closure violation (cut-crease gap)"].values
    assert gap.max() < 1e-9


def _flat_gap(a: np.ndarray, b: np.ndarray) -> float:
    """Distance between two convex polygons apart in one plane: the nearest vertex-edge pair."""
    def to_edges(p, poly):
        e = [(poly[k], poly[(k + 1) % len(poly)]) for k in range(len(poly))]
        return min(np.linalg.norm(p - (u + np.clip(np.dot(p - u, v - u) / np.dot(v - u, v - u), 0, 1) * (v - u)))
                   for u, v in e)
    return min(min(to_edges(p, b) for p in a), min(to_edges(p, a) for p in b))


def test_panels_are_coloured_by_their_gap_to_the_nearest_panel(tmp_path):
    """fold-2x4 driven from stowed to flat: at flat each panel's gap is its in-plane
    distance to the nearest panel it shares no vertex with, from the crease pattern."""
    from diffmb.viewer.origami import pattern_of

    run = saved.load(fold_run(tmp_path / "fold-2x4.npz", name="fold-2x4", n=11))
    sc = scene_of(run)
    q = {x.name: x for x in sc.quantities}
    assert "contact force" not in q                      # contact off: no barrier to report
    gap = q["gap to the nearest panel"].values[-1]
    flat = {p.name: np.asarray(p.vertices, float)[:, :2] for p in pattern_of(run).panels}
    checked = 0
    for name, v in flat.items():
        others = [w for m, w in flat.items() if m != name
                  and min(np.linalg.norm(v[:, None] - w[None], axis=-1).ravel()) > 1e-9]
        i = sc.body_names.index(name)
        if not others:
            assert np.isnan(gap[i])
            continue
        assert gap[i] == pytest.approx(min(_flat_gap(v, w) for w in others), abs=1e-9)
        checked += 1
    assert checked >= 4
    # fewer exact pairs than the pattern has: the rest take their lower bound, never more
    from diffmb.viewer.origami import contact_fields

    xs = np.asarray(run.traj.xs)[-1:]
    full, few = (contact_fields(run.system, run.params, xs, capacity=c)["gap"] for c in (512, 3))
    assert all(few[n][0] <= full[n][0] + 1e-12 for n in full if np.isfinite(full[n][0]))
    assert any(few[n][0] < full[n][0] - 1e-6 for n in full if np.isfinite(full[n][0]))


def test_tree_scene_places_the_urdf_visuals(runs):
    sc = scene_of(saved.load(runs["arm"]))
    assert sc.body_names == ["upper", "fore", "world (fixed)"] and sc.kind == "bodies"
    upper, fore, world = (g["primitives"] for g in sc.geometry)
    assert [p["type"] for p in world] == ["cylinder"] and np.all(sc.poses[:, 2] == [0, 0, 0, 0, 0, 0, 1])
    assert [p["type"] for p in upper] == ["box"] and np.allclose(upper[0]["size"], [0.5, 0.05, 0.05])
    assert np.allclose(upper[0]["pos"], [0.25, 0, 0])
    assert [p["type"] for p in fore] == ["cylinder", "sphere"]  # the tool link, merged by its fixed joint
    assert np.allclose(fore[1]["pos"], [0.4, 0, 0]) and np.allclose(fore[0]["size"], [0.025, 0.4])
    axis = rotate(np.asarray(fore[0]["quat"]), np.array([0.0, 0.0, 1.0]))
    assert np.allclose(np.abs(axis), [1, 0, 0], atol=1e-6)  # rpy pitch 90 deg: along the link
    assert [(link["a"], link["b"]) for link in sc.links] == [(0, 1)]


def test_tensegrity_members_carry_their_axial_force(runs):
    run = saved.load(runs["tbar"])
    sc = scene_of(run)
    assert sc.kind == "tensegrity" and sc.body_names == ["node 1", "node 2", "node 3", "node 4", "bar 1", "bar 2"]
    assert [link["kind"] for link in sc.links] == ["string"] * 4
    assert [q.name for q in sc.quantities] == ["string tension"]  # rigid bars: no force kept
    N = sc.poses[:, :4, :3].astype(float)
    tension = sc.quantities[0].values
    for k, (i, j) in enumerate(run.system.strings):
        stretch = np.linalg.norm(N[:, j] - N[:, i], axis=-1) - run.params["string_rest"][k]
        assert np.allclose(tension[:, k], run.params["string_K"][k] * np.maximum(stretch, 0), atol=1e-3)
    assert np.ptp(tension) > 1.0
    for b, (i, j) in enumerate(run.system.bars):
        pose = sc.poses[:, 4 + b].astype(float)
        assert np.allclose(pose[:, :3], (N[:, i] + N[:, j]) / 2, atol=1e-5)
        axis = rotate(pose[:, 3:], np.array([0.0, 0.0, 1.0]))
        d = (N[:, j] - N[:, i]) / np.linalg.norm(N[:, j] - N[:, i], axis=-1, keepdims=True)
        assert np.allclose(axis, d, atol=1e-5)
        assert sc.geometry[4 + b]["primitives"][0]["type"] == "cylinder"


def test_uniform_box_from_inertia():
    sides, axes = inertia_box(2.0, np.diag([2.0 / 12 * (0.2**2 + 0.3**2), 2.0 / 12 * (0.1**2 + 0.3**2),
                                             2.0 / 12 * (0.1**2 + 0.2**2)]))
    assert sorted(np.round(sides, 9)) == [0.1, 0.2, 0.3] and np.isclose(np.linalg.det(axes), 1.0)
    assert inertia_box(1.0, np.diag([1.0, 1.0, 0.0])) is None  # a rod: no box


def test_page_is_self_contained(fold):
    _, sc = fold
    text = render(sc)
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=|<link\b", text, re.I)
    assert "three.js 0.159.0" in text and "MIT" in asset("THREE_LICENSE")
    data = json.loads(re.search(r'<script type="application/json" id="diffmb-data">(.*?)</script>', text,
                                re.S).group(1))
    poses = np.frombuffer(base64.b64decode(data["poses"]["b64"]), "<f4").reshape(data["poses"]["shape"])
    assert np.array_equal(poses, sc.poses)
    assert hashlib.sha256(asset("three.min.js").encode()).hexdigest() == THREE_SHA256


def test_fold_frames_round_trip(runs, tmp_path):
    out = tmp_path / "vertical.fold"
    assert cli(["view", str(runs["vertical"]), "--out", str(tmp_path / "v.html"), "--fold", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert load_fold(data).panels.__len__() == 4  # frame 0: the crease pattern, which diffmb reloads
    run = saved.load(runs["vertical"])
    pick = frame_indices(np.asarray(run.traj.ts))
    ts, xs = np.asarray(run.traj.ts)[pick], np.asarray(run.traj.xs)[pick]
    frames = data["file_frames"]
    assert len(frames) == len(ts) and all(f["frame_inherit"] and f["frame_parent"] == 0 for f in frames)
    edges = [tuple(e) for e in data["edges_vertices"]]
    faces = data["faces_vertices"]
    for f, fr in enumerate(frames):
        assert fr["diffmb:time"] == pytest.approx(ts[f])
        V = np.asarray(fr["vertices_coords"])
        angles = np.asarray(fr["edges_foldAngle"])
        folded = sorted(a for a, s in zip(angles, data["edges_assignment"]) if s != "B")
        theta_j = math.degrees(xs[f, 6])
        assert folded == pytest.approx(sorted([theta_j, theta_j, 0.0, 0.0]), abs=1e-6)  # cut crease = r-j
        for e, a in zip(edges, angles):  # each angle as the 3-D coordinates fold it
            adjacent = [k for k, face in enumerate(faces) if set(e) <= set(face)]
            if len(adjacent) != 2:
                continue
            na, nb = (_normal(V[faces[k]]) for k in adjacent)
            assert math.degrees(math.acos(np.clip(na @ nb, -1, 1))) == pytest.approx(abs(a), abs=1e-4)
    # each folded frame is a start state diffmb reloads: its angles read back from its 3-D
    # vertices are the exported edges_foldAngle (valley positive, degrees; issue 56)
    for f in (1, len(frames) // 2, len(frames)):
        start = load_fold(data, frame=f)
        exported = dict(zip((tuple(e) for e in data["edges_vertices"]), frames[f - 1]["edges_foldAngle"]))
        for c in start.creases:
            ends = next(e for e in exported if c.name == f"e{edges.index(e)}")
            assert math.degrees(c.fold) == pytest.approx(exported[ends], abs=1e-5)


def _normal(P):
    n = np.cross(P[1] - P[0], P[2] - P[0])
    return n / np.linalg.norm(n)


def test_gltf_and_obj_of_a_frame(runs, tmp_path):
    sc = scene_of(saved.load(runs["arm"]))
    g = mesh.gltf(sc, 0.5)
    f = mesh.frame_at(sc, 0.5)
    blob = base64.b64decode(g["buffers"][0]["uri"].split(",", 1)[1])
    assert len(blob) == g["buffers"][0]["byteLength"]
    obj = mesh.write_obj(sc, tmp_path / "arm.obj", 0.5).read_text().splitlines()
    obj_v = np.array([[float(x) for x in line.split()[1:]] for line in obj if line.startswith("v ")])
    k = 0
    for node in g["nodes"]:
        if "mesh" not in node or node["name"] == "lines":
            continue
        acc = g["accessors"][g["meshes"][node["mesh"]]["primitives"][0]["attributes"]["POSITION"]]
        view = g["bufferViews"][acc["bufferView"]]
        V = np.frombuffer(blob, "<f4", acc["count"] * 3, view["byteOffset"]).reshape(-1, 3).astype(float)
        W = np.asarray(node["translation"]) + Rotation.from_quat(node["rotation"]).apply(V)
        assert np.allclose(W, obj_v[k:k + len(V)], atol=1e-5)
        b = sc.body_names.index(node["name"])
        assert np.allclose(node["translation"], sc.poses[f, b, :3], atol=1e-6)
        k += len(V)
    assert k > 0 and any(line.startswith("l ") for line in obj)


def test_view_command(runs, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert cli(["view", str(runs["tbar"]), "--out", str(out)]) == 0
    assert out.stat().st_size > 600_000 and "page.html" in capsys.readouterr().out
    assert cli(["view", str(runs["fold"]), "--out", str(out), "--max-frames", "10"]) == 0
    assert "10 frames of 4 bodies" in capsys.readouterr().out
    assert cli(["view", str(runs["fold"]), "--out", str(out), "--fps", "5"]) == 0
    assert "11 frames of 4 bodies, t = 0 to 2 s" in capsys.readouterr().out


@pytest.mark.parametrize("case, words", [
    ("missing", ["nope.npz", "no such file"]),
    ("junk", ["junk.npz", "not a diffmb trajectory"]),
    ("unknown", ["unknown.npz", "'scenario'", "no-such-case"]),
    ("png", ["--out", ".html"]),
    ("fold-of-tbar", ["--fold", "not an origami run"]),
    ("at", ["--at 9", "outside the run"]),
])
def test_view_bad_input_is_one_line(runs, tmp_path, capsys, case, words):
    d = tmp_path
    (d / "junk.npz").write_bytes(b"not a zip")
    if case == "unknown":
        from diffmb import scenarios

        system, params, values = scenarios.get("pendulum").make({})
        save_run(d / "unknown.npz", "no-such-case", system, np.zeros((2, len(system.state_names))), [0, 1],
                 values, "none")
    argv = {"missing": [str(d / "nope.npz")], "junk": [str(d / "junk.npz")], "unknown": [str(d / "unknown.npz")],
            "png": [str(runs["tbar"]), "--out", str(d / "x.png")],
            "fold-of-tbar": [str(runs["tbar"]), "--out", str(d / "t.html"), "--fold", str(d / "t.fold")],
            "at": [str(runs["arm"]), "--out", str(d / "a.html"), "--obj", str(d / "a.obj"), "--at", "9"]}[case]
    assert cli(["view"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("diffmb: error:")
    assert all(w in err for w in words), err
    assert not (d / "t.html").exists() and not (d / "a.html").exists()


def test_run_view_writes_the_page(tmp_path):
    assert cli(["run", "pendulum", "--t1", "0.2", "--out", str(tmp_path), "--no-plot", "--quiet", "--view"]) == 0
    page = (tmp_path / "pendulum.html").read_text()
    assert "diffmb-data" in page and '"title":"pendulum"' in page


def test_view_a_sweep_member(tmp_path, capsys):
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"scenario": "pendulum", "t1": 0.2, "batch": 2, "solver": "tsit5", "dt": None,
                                 "rtol": 1e-6, "atol": 1e-8, "stabilization": "none", "members": [
        {"l": 0.5, "status": "success", "peak_hinge_rate": 4.3}, {"l": 0.8, "status": "success"}]}))
    assert cli(["view", str(sweep), "--member", "1,0", "--quiet"]) == 0
    for k, length in ((0, 0.5), (1, 0.8)):
        run = saved.load(tmp_path / "sweep.member1-0_run" / f"member{k}" / "pendulum.npz")
        assert run.values["l"] == length and run.meta["t1"] == 0.2
        assert (run.meta["solver"], run.meta["rtol"], run.meta["atol"]) == ("tsit5", 1e-6, 1e-8)
    page = (tmp_path / "sweep.member1-0.html").read_text()
    assert '"bodies":["member 1: link1","member 0: link1"]' in page
    assert cli(["view", str(sweep)]) == 2 and "--member" in capsys.readouterr().err
    assert cli(["view", str(sweep), "--member", "2"]) == 2 and "members 0 to 1" in capsys.readouterr().err


def test_sweep_records_its_run_settings_and_a_member_runs_again_with_them(tmp_path, capsys):
    """A sweep with another solver, step and stabilization than the scenario's records them
    (--json, and with --table its summary.json and members.parquet); viewing a member runs
    it again with them."""
    sweep, table = tmp_path / "sweep.json", tmp_path / "table"
    argv = ["sweep", "four-bar", "--batch", "2", "--set", "theta0=0.2:0.4", "--t1", "0.1", "--solver", "euler",
            "--dt", "0.002", "--stabilization", "baumgarte", "--json", str(sweep), "--quiet"]
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    assert cli(argv + (["--table", str(table)] if pq else [])) == 0
    used = {"solver": "euler", "dt": 0.002, "stabilization": "baumgarte"}
    data = json.loads(sweep.read_text())
    assert {k: data[k] for k in used} == used and data["t1"] == 0.1
    if pq:
        summary = json.loads((table / "summary.json").read_text())
        assert {k: summary[k] for k in used} == used
        meta = json.loads(pq.read_schema(table / "members.parquet").metadata[b"diffmb"])
        assert {k: meta[k] for k in used} == used and meta["t1"] == 0.1
    capsys.readouterr()
    assert cli(["view", str(sweep), "--member", "1", "--quiet"]) == 0
    run = saved.load(tmp_path / "sweep.member1_run" / "member1" / "four-bar.npz")
    assert {k: run.meta[k] for k in used} == used and run.meta["t1"] == 0.1
    assert run.values["theta0"] == pytest.approx(data["members"][1]["theta0"])
    data["solver"] = "rk5"
    sweep.write_text(json.dumps(data))
    assert cli(["view", str(sweep), "--member", "0"]) == 2 and "field 'solver'" in capsys.readouterr().err


def test_mjcf_geoms_become_primitives(tmp_path):
    from diffmb.viewer.visuals import mjcf_visuals

    xml = tmp_path / "arm.xml"
    xml.write_text("""<mujoco><worldbody><body name="upper" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0 0 0.1" quat="0.7071068 0 0 0.7071068"/>
      <body name="ball" pos="0.4 0 0"><joint name="j2" type="hinge"/><geom size="0.05"/></body>
    </body></worldbody></mujoco>""")
    found = mjcf_visuals(xml)
    (cap, cap_size, cap_pos, cap_R), (box, box_size, box_pos, box_R) = found["upper"]
    assert cap == "capsule" and np.allclose(cap_size, [0.03, 0.4]) and np.allclose(cap_pos, [0.2, 0, 0])
    assert np.allclose(np.abs(cap_R @ [0, 0, 1]), [1, 0, 0])  # along x (either way: a capsule is symmetric)
    assert box == "box" and np.allclose(box_size, [0.2, 0.1, 0.04]) and np.allclose(box_R @ [1, 0, 0], [0, 1, 0], atol=1e-6)
    assert found["ball"][0][0] == "sphere" and np.allclose(found["ball"][0][1], [0.05])


def test_mjcf_visuals_are_what_mujoco_compiles_default_classes_and_meshes(tmp_path):
    """A default class's geom size, an ``euler`` orientation and an inline mesh: the
    primitives are MuJoCo's compiled geoms, the mesh its triangles."""
    from diffmb.viewer.visuals import mjcf_visuals

    xml = tmp_path / "tool.xml"
    xml.write_text("""<mujoco><asset><mesh name="wedge" vertex="0 0 0  0.2 0 0  0 0.1 0  0 0 0.05"/></asset>
      <default><default class="pad"><geom type="box" size="0.01 0.02 0.03"/></default></default>
      <worldbody><body name="tool"><joint name="j" type="hinge"/>
        <geom class="pad" euler="0 0 90" pos="0.1 0 0"/><geom type="mesh" mesh="wedge"/>
      </body></worldbody></mujoco>""")
    (box, size, pos, R), (mesh, tris, mpos, mR) = mjcf_visuals(xml)["tool"]
    assert box == "box" and np.allclose(size, [0.02, 0.04, 0.06]) and np.allclose(pos, [0.1, 0, 0])
    assert np.allclose(R @ [1, 0, 0], [0, 1, 0], atol=1e-12)
    assert mesh == "mesh" and tris.shape == (4, 9)  # the tetrahedron's four faces
    world = (mR @ tris.reshape(-1, 3).T).T + mpos   # MuJoCo recentres a mesh; its placement undoes it
    corners = np.array([[0, 0, 0], [0.2, 0, 0], [0, 0.1, 0], [0, 0, 0.05]])
    gaps = np.linalg.norm(world[:, None, :] - corners[None], axis=-1)
    assert gaps.min(1).max() < 1e-7 and gaps.min(0).max() < 1e-7  # every corner, nothing else (float32 mesh)


@pytest.mark.slow
def test_a_real_origami_run_closes_and_views(tmp_path):
    assert cli(["run", "fold-4panel", "--t1", "0.5", "--out", str(tmp_path), "--no-plot", "--quiet", "--view"]) == 0
    run = saved.load(tmp_path / "fold-4panel.npz")
    sc = scene_of(run)
    gap = {q.name: q for q in sc.quantities}["closure violation (cut-crease gap)"].values
    assert np.nanmax(gap) < 1e-8  # the simulated fold keeps its loop closed
    assert (tmp_path / "fold-4panel.html").stat().st_size > 600_000


def test_flexible_bodies_deflect_by_their_modes(tmp_path):
    from diffmb import scenarios

    sc = scenarios.get("solar-sail-slew")
    system, params, values = sc.make({})
    x0 = np.asarray(system.init_state(params), float)
    ts = np.linspace(0.0, 1.0, 11)
    xs = np.repeat(x0[None], len(ts), 0)
    eta1 = list(system.state_names).index("sail_eta1")
    xs[:, eta1] = 0.1 * ts
    xs[:, list(system.state_names).index("sail_x")] = 2.0 * ts
    path = save_run(tmp_path / "sail.npz", "solar-sail-slew", system, xs, ts, values, sc.stabilization)
    s = scene_of(saved.load(path))
    assert s.kind == "flexible" and s.body_names == ["sail"]
    flex = s.geometry[0]["flex"]
    phi = np.frombuffer(base64.b64decode(flex["phi"]["b64"]), "<f4").reshape(49, 3, 44)[:, :, 0]
    assert np.allclose(s.quantities[0].values[:, 0], 0.1 * ts * np.linalg.norm(phi, axis=1).max(), rtol=1e-6)
    assert np.allclose(s.poses[:, 0, 0], 2.0 * ts, atol=1e-6)
    assert len(flex["nodes"]) == 49 and len(flex["edges"]) == 48  # four booms of 12 elements from the hub
    eta = np.frombuffer(base64.b64decode(flex["eta"]["b64"]), "<f4").reshape(flex["eta"]["shape"])
    assert np.allclose(eta[:, 0], 0.1 * ts, atol=1e-7)


def test_members_side_by_side(runs, fold):
    from diffmb.viewer.compose import extent, side_by_side

    _, a = fold
    b = scene_of(saved.load(runs["vertical"]))
    both = side_by_side([a, b], ["A", "B"], "two")
    step = 1.25 * max(extent(a), extent(b))
    assert both.body_names[:4] == ["A: r", "A: j", "A: m", "A: l"] and both.body_names[4] == "B: r"
    assert both.poses.shape == (len(a.times), 8, 7)
    pick = np.clip(np.searchsorted(b.times, a.times - 1e-9), 0, len(b.times) - 1)
    assert np.allclose(both.poses[:, 4:, 1], b.poses[pick, :, 1] + step, atol=1e-5)
    assert np.allclose(both.poses[:, :4], a.poses)
    assert [q.values.shape[1] for q in both.quantities] == [8] * 4


def test_a_fold_file_run_is_shown_as_origami(tmp_path):
    import os

    from diffmb import scenarios

    fold_file = os.path.join(os.path.dirname(__file__), "..", "examples", "miura_3x3.fold")
    sc = scenarios.get(os.path.abspath(fold_file))
    system, params, values = sc.make({})
    x0 = np.asarray(system.init_state(params), float)
    path = save_run(tmp_path / "miura.npz", sc.name, system, np.repeat(x0[None], 3, 0), [0.0, 0.5, 1.0], values,
                    sc.stabilization, model=os.path.abspath(fold_file))
    s = scene_of(saved.load(path))
    assert s.kind == "origami" and s.info["panels"] == 9 and s.info["cut creases"] == 4
    gap = {q.name: q for q in s.quantities}["closure violation (cut-crease gap)"].values
    assert np.nanmax(gap) < 1e-9  # the file's partly folded state closes


def _tetra_stl(path, binary=True):
    import struct

    tri = np.array([[[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 0, 0], [0, 0, 1], [1, 0, 0]],
                    [[0, 0, 0], [0, 1, 0], [0, 0, 1]], [[1, 0, 0], [0, 0, 1], [0, 1, 0]]], float)
    if binary:
        body = b"".join(struct.pack("<12fH", 0, 0, 0, *t.reshape(-1), 0) for t in tri)
        path.write_bytes(b"\0" * 80 + struct.pack("<I", len(tri)) + body)
    else:
        facets = "".join("facet normal 0 0 0\n outer loop\n" + "".join(f"  vertex {x} {y} {z}\n" for x, y, z in t)
                         + " endloop\nendfacet\n" for t in tri)
        path.write_text(f"solid tetra\n{facets}endsolid tetra\n")
    return tri


def test_urdf_meshes(tmp_path):
    from diffmb import scenarios
    from diffmb.viewer.visuals import file_visuals

    pkg = tmp_path / "my_robot" / "meshes"
    pkg.mkdir(parents=True)
    tri = _tetra_stl(pkg / "upper.stl")
    _tetra_stl(tmp_path / "my_robot" / "fore.stl", binary=False)
    urdf = tmp_path / "my_robot" / "urdf" / "arm.urdf"
    urdf.parent.mkdir()
    xml = ARM_URDF.replace('<geometry><box size="0.5 0.05 0.05"/></geometry>',
                      '<geometry><mesh filename="package://my_robot/meshes/upper.stl" scale="2 2 2"/></geometry>')
    xml = xml.replace('<geometry><cylinder radius="0.025" length="0.4"/></geometry>',
                      '<geometry><mesh filename="../fore.stl"/></geometry>')
    urdf.write_text(xml)
    sc = scenarios.get(str(urdf))
    system, _, _ = sc.make({})
    vis, notes = file_visuals(str(urdf), list(system.body_names), system.model)
    upper, fore = vis["upper"][0], vis["fore"][0]
    assert upper["type"] == "mesh" and fore["type"] == "mesh" and notes == []
    got = np.frombuffer(base64.b64decode(upper["triangles"]["b64"]), "<f4").reshape(-1, 3, 3)
    assert np.allclose(got, 2 * tri) and np.allclose(upper["pos"], [0.25, 0, 0])
    V, F = mesh.triangles({"primitives": [fore]})
    assert V.shape == (12, 3) and F.shape == (4, 3)
    obj = tmp_path / "quad.obj"
    obj.write_text("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvn 0 0 1\nf 1//1 2//1 3//1 4//1\nf -4 -2 -1\n")
    from diffmb.viewer.mesh_files import read

    assert np.allclose(read(obj), [[[0, 0, 0], [1, 0, 0], [1, 1, 0]], [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
                                   [[0, 0, 0], [1, 1, 0], [0, 1, 0]]])
