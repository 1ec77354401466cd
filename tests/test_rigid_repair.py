"""A rigidly foldable pattern whose file rounds its coordinates builds locked; the build
moves it to the nearest rigidly foldable geometry (:mod:`diffmb.origami.rigid_repair`).

The file is a Miura-ori written the way other tools write one: turned in the plane and
rounded to 1e-4 m, which leaves no line of it straight and every vertex off by up to
5e-5 m. Checked: it is locked as given; repaired, diffmb's closures find one degree of
freedom, the repair's own vertex model (a second formulation: panels as rigid motions
that must agree at shared vertices) finds the geometry rigid-foldable as it is, every
interior vertex meets Kawasaki's condition again, and the vertices sit within the
file's rounding of the exact Miura the file was written from.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from diffmb import cli
from diffmb.formats.fold import load_fold, to_fold
from diffmb.origami import build, rigid_repair
from diffmb.origami.generators import miura
from diffmb.origami.pattern import _repaired
from diffmb.origami.start_state import LockedPattern, PatternNote

TURN, DIGITS = np.radians(17.0), 4


def _turned(x, y):
    c, s = np.cos(TURN), np.sin(TURN)
    return c * x - s * y, s * x + c * y


def rounded_miura(rows=4, cols=4, digits=DIGITS) -> dict:
    """A FOLD dict of a flat Miura-ori (mountain/valley assigned), turned by 17 deg and
    rounded to ``digits`` decimals."""
    d = to_fold(miura(rows, cols, fold=0.3))
    d["vertices_coords"] = [[round(float(v), digits) for v in _turned(x, y)] for x, y in d["vertices_coords"]]
    d["edges_foldAngle"] = [0.0] * len(d["edges_foldAngle"])
    return d


def _built(pattern, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        system, info = build(pattern, **kw)
    return system, info, caught


def _size(pattern) -> float:
    V = np.concatenate([np.asarray(p.vertices, float) for p in pattern.panels])
    return float(np.linalg.norm(np.ptp(V, axis=0)))


@pytest.fixture(scope="module")
def repaired():
    pattern = load_fold(rounded_miura())
    return pattern, *_built(pattern)


def test_the_rounded_miura_is_locked_as_its_file_gives_it():
    _, info, caught = _built(load_fold(rounded_miura()), repair=False)
    assert info.mobility.locked and info.repaired is None
    assert any(w.category is LockedPattern for w in caught)


def test_the_build_repairs_it_to_one_degree_of_freedom_and_says_by_how_much(repaired):
    pattern, system, info, caught = repaired
    assert info.mobility.dof == 1 and not info.mobility.locked
    assert not any(w.category is LockedPattern for w in caught)
    notes = [str(w.message) for w in caught if issubclass(w.category, PatternNote)]
    said = [n for n in notes if "nearest rigidly foldable geometry" in n]
    assert said == [info.repaired]
    moved = float(said[0].split("at most ")[1].split(" m")[0])
    # it moved (the rounding is real) and stayed within the closure tolerance (1e-5 of the size)
    assert 1e-6 < moved <= 1e-5 * _size(pattern)


def test_the_repaired_geometry_is_rigid_foldable_in_a_second_formulation_and_flat_foldable(repaired):
    pattern = load_fold(rounded_miura())
    fixed, _, _ = _repaired(pattern)
    index = {p.name: k for k, p in enumerate(fixed.panels)}
    side = {"M": -1.0, "V": 1.0}
    args = ([np.asarray(p.vertices, float) for p in fixed.panels],
            [(index[c.a], index[c.b], c.p1, c.p2, side[c.kind]) for c in fixed.creases], index[fixed.root])
    again = rigid_repair.nearest_rigid(*args)
    # the vertex model closes a folded state at the repaired geometry without moving it
    assert again.residual < 1e-12 and again.moved < 1e-12
    # ... and at depths it was not held at, between and beyond them (a family, not three states)
    for depth in (0.1, 0.45):
        other = rigid_repair.nearest_rigid(*args, fractions=(depth,))
        assert other.residual < 1e-12 and other.moved < 1e-12, depth
    assert np.sqrt(np.mean(np.square(other.folds[0]))) > 0.5
    prob = rigid_repair._Problem(args[0], [(a, b, np.zeros(3), np.zeros(3)) for a, b, *_ in args[1]], args[2])
    assert len(prob.sectors) == 9   # the 4x4 Miura's interior vertices, each flat-foldable
    assert np.abs(prob.kawasaki(prob.X0)).max() < 1e-12
    # within the file's rounding of the exact Miura it was written from
    exact = to_fold(miura(4, 4, fold=0.3))["vertices_coords"]
    exact = np.array([_turned(x, y) for x, y in exact])
    new = np.concatenate([np.asarray(p.vertices, float)[:, :2] for p in fixed.panels])
    nearest = np.min(np.linalg.norm(new[:, None] - exact[None], axis=-1), axis=1)
    assert nearest.max() < 2 * 0.5 * 10.0 ** -DIGITS * np.sqrt(2)


def test_a_pattern_that_cannot_fold_is_not_repaired_and_says_why():
    # a degree-3 vertex: no geometry near it folds (two of its creases would have to be collinear)
    from test_fold_files import vertex_fold
    _, info, caught = _built(load_fold(vertex_fold(phis=(0.0, 2.0, 4.0), assign=("V", "M", "V"))))
    assert info.mobility.locked and info.repaired is None
    locked = [str(w.message) for w in caught if w.category is LockedPattern]
    assert len(locked) == 1 and "cannot fold rigidly" in locked[0]
    assert "not applied" in locked[0] or "no nearby geometry" in locked[0]


@pytest.mark.slow  # 16 s, a run's compile: the default tests check the same repair through build()
def test_the_cli_runs_the_rounded_file_repaired(tmp_path, capsys):
    path = tmp_path / "miura.fold"
    path.write_text(json.dumps(rounded_miura()))
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--t1", "0.01", "--out", str(out), "--no-plot",
                     "--json", str(out / "m.json")]) == 0
    err = capsys.readouterr().err
    assert "note: the pattern builds locked as its file gives it" in err and "locked: mobility 0" not in err
    obj = json.loads((out / "m.json").read_text())
    assert obj["mobility"]["dof"] == 1 and obj["status"] == "success"


@pytest.mark.slow  # 156 panels: the repair, two builds and the continuation take 13 s
def test_a_large_rounded_miura_folds_on_its_assignments_branch_from_the_command_line_fraction():
    """Origami Simulator's Miura is 12 x 13 panels, rounded to 1e-3 of a pixel. Driven
    to 30 %, its straight and zig-zag creases fold at very different rates, so the start
    is continued from the repair's folded states: every crease on its assignment's side."""
    pattern = load_fold(rounded_miura(12, 13, digits=5), fold_fraction=0.3, drive=())
    system, info, caught = _built(pattern)
    notes = [str(w.message) for w in caught if issubclass(w.category, PatternNote)]
    assert info.repaired is not None and info.mobility.dof == 1
    assert any("folded by the driving creases" in n for n in notes)
    assert not any("against its assignment" in n for n in notes)


def test_the_drivers_follow_the_assignments_branch_whatever_a_random_probe_lands_on(monkeypatch):
    """Without ``--drive``, the drivers are those of the branch the assignments' folding
    motion lands on. Flat is where many branches meet, and a random probe may land on one
    of higher dimension (on another CPU's round-off, the 12 x 13 Miura-ori's did): here a
    probe is made to land at flat itself, where every crease is free to first order. With
    the largest dimension over every landing, as before, it chose a driver per crease."""
    from diffmb.closures import mobility
    from diffmb.origami import start_state

    calls = []
    real = start_state.auto_drivers
    monkeypatch.setattr(start_state, "auto_drivers", lambda *a, **k: calls.append((a, k)) or real(*a, **k))
    _built(load_fold(rounded_miura(), fold_fraction=0.3, drive=()))
    args, kwargs = calls[-1]
    chosen, _ = real(*args, **kwargs)
    assert len(chosen) == 1

    landings = mobility.landings

    def also_flat(residual, jacobian, step_q, q0, cols, qcols, probes=mobility.PROBES, **kw):
        out = landings(residual, jacobian, step_q, q0, cols, qcols, probes=probes, **kw)
        return out + [np.asarray(q0)] if probes else out

    monkeypatch.setattr(mobility, "landings", also_flat)
    assert real(*args, **kwargs)[0] == chosen


def test_a_cut_crease_that_starts_off_flat_is_unwrapped_about_its_own_angle():
    """The detector unwraps crease angles in time about their start branch. A cut crease
    folded flat needs its side from the motion; one that is not takes the quarter turn
    nearest its geometric angle, whatever its declared fold (a guess the closure solve
    moved): before, every
    cut crease was referred to +-180 deg, and one that started near 0 against its
    declared sign read as 360 deg."""
    import jax
    import jax.numpy as jnp

    from diffmb.origami.contact import ContactOptions, PanelContact
    from diffmb.tree.kinematics import kinematics

    pattern = load_fold(rounded_miura(), fold_fraction=0.1, drive=())
    system, _, _ = _built(pattern, contact=ContactOptions(forces=False))
    element = next(e for e in system.elements if isinstance(e, PanelContact))
    params = system.default_params()
    q0, _ = system.split(system.init_state(params))
    # one program (op by op, the kinematics of the 80-odd panels compiled 200 small ones)
    start = np.asarray(jax.jit(lambda q: element.geometric_cut_angles(kinematics(params["model"], q),
                                                                     element.numbers))(q0))
    assert len(start) and np.all(np.abs(np.abs(start) - np.pi) > 1e-3)   # none starts flat
    # the reference: the nearest quarter turn, within an eighth of a turn of the start
    np.testing.assert_allclose(element.cut_folds, np.pi / 2 * np.round(start / (np.pi / 2)), atol=1e-12)
    assert np.all(np.abs(np.asarray(element.cut_folds) - start) <= np.pi / 4)
    # the run's angles, unwrapped about it, stay where they are (about +-pi, a crease near 0
    # against the sign it was referred to moved by a full turn)
    theta = np.zeros((3, len(element.tree_creases) + len(start)))
    theta[:, len(element.tree_creases):] = start
    out = np.asarray(element.unwrapped(jnp.asarray(theta), jnp.ones(3, bool)))
    np.testing.assert_allclose(out, theta, atol=1e-12)


def test_a_refused_build_still_gives_the_notes_before_its_error():
    # the build holds its warnings back while it may repair; a refusal must not lose them
    from test_fold_files import vertex_fold
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="every crease of the loop"):
            build(load_fold(vertex_fold(), fold_fraction=0.3, drive=["e0", "e1", "e2", "e3"]))
    assert any("faces derived from the planar graph" in str(w.message) for w in caught)
