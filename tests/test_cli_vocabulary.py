"""One vocabulary for the command line (issue 29, item 1): every command accepts the
common flags where they apply (and refuses them where they do not), a flag means one
thing wherever it is accepted, the old spellings still work for a release and say
which spelling replaces them, and a resumable run is the library's, so the Python API
resumes as the command line does.

Parsing checks compile nothing; the runs are the pendulum over 0.4 s in 4 segments, the
shape ``test_cli.py`` compiles too.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np
import pytest

import diffmb
from diffmb import cli, scenarios
from diffmb.cli import _common
from diffmb.simulation import resumable
from diffmb.simulation.trajectory import Trajectory

#: The positional arguments that make each command's line complete.
POSITIONAL = {"list": [], "run": ["pendulum"], "linearize": ["tbar"], "synth": ["pendulum"],
              "tune": ["pendulum", "--params", "g"], "fit": ["pendulum", "--data", "d.csv", "--params", "g"],
              "sweep": ["pendulum"], "reconfig": ["uk-hinged-cubes"], "view": ["run.npz"]}
#: The common flags and a value for each (None: a switch).
COMMON = {"--quiet": None, "--json": "r.json", "--stabilization": "none", "--out": "outdir"}
#: Where each applies: --json and --quiet everywhere; --stabilization where a System is
#: built under the user's choice (reconfig's explorer fixes Baumgarte; list and view
#: build none); --out where a command writes a folder (run, reconfig: its files; sweep:
#: its Parquet store).
APPLIES = {
    "list": {"--quiet", "--json"},
    "run": {"--quiet", "--json", "--stabilization", "--out"},
    "linearize": {"--quiet", "--json", "--stabilization"},
    "synth": {"--quiet", "--json", "--stabilization"},
    "tune": {"--quiet", "--json", "--stabilization"},
    "fit": {"--quiet", "--json", "--stabilization"},
    "sweep": {"--quiet", "--json", "--stabilization", "--out"},
    "reconfig": {"--quiet", "--json", "--out"},
    "view": {"--quiet", "--json"},
}
#: Old spelling -> new, with a command line using it and the value it stores.
DEPRECATED = [
    ("run", "--chunks", "--segments", "segments", "3", 3),
    ("sweep", "--chunk", "--chunk-size", "chunk_size", "8", 8),
    ("sweep", "--table", "--out", "out", "store", "store"),
    ("tune", "--steps", "--iterations", "iterations", "7", 7),
    ("synth", "--out", "--csv", "csv", "rec.csv", "rec.csv"),
    ("synth", "--out", "--npz", "npz", "rec.npz", "rec.npz"),
    ("view", "--out", "--html", "html", "page.html", "page.html"),
    ("sweep", "--sample", "--sampling", "sampling", "grid", "grid"),
    ("synth", "--samples", "--points", "points", "41", 41),
    ("tune", "--lr", "--learning-rate", "learning_rate", "0.3", 0.3),
    ("tune", "--w-energy", "--weight-energy", "weight_energy", "2.0", 2.0),
    ("tune", "--w-momentum", "--weight-momentum", "weight_momentum", "2.0", 2.0),
]
PENDULUM = ["run", "pendulum", "--t1", "0.4", "--segments", "4", "--quiet", "--no-plot"]


def _parse(argv):
    return cli.build_parser().parse_args(argv)


def _subparsers() -> dict:
    p = cli.build_parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def _one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diffmb: error: "), lines
    return lines[0]


# ------------------------------------------------------------------ the common flags
def test_the_table_covers_every_command():
    assert set(APPLIES) == set(cli.COMMANDS) == set(POSITIONAL)


@pytest.mark.parametrize("command", sorted(APPLIES))
@pytest.mark.parametrize("flag", sorted(COMMON))
def test_every_command_accepts_the_common_flags_where_they_apply(command, flag):
    value = COMMON[flag]
    argv = [command] + POSITIONAL[command] + [flag] + ([] if value is None else [value])
    if flag in APPLIES[command]:
        args = _parse(argv)
        dest = flag.lstrip("-")
        assert getattr(args, dest) == (True if value is None else
                                       value if flag == "--stabilization" else type(getattr(args, dest))(value))
        assert flag in _subparsers()[command].format_help()
    elif any(c == command and old == flag for c, old, *_ in DEPRECATED):  # synth, view: --out was a file
        _common.take_deprecations()
        _parse(argv)
        assert _common.take_deprecations()[0].startswith(f"{flag} is deprecated")
    else:
        with pytest.raises(_common.UsageError, match=f"unrecognized arguments: {flag}"):
            _parse(argv)


def test_a_flag_means_one_thing_everywhere():
    """``--out`` is a folder (DIR) wherever it is shown, a file flag is named by its
    format and shows FILE, and the old words are not offered in any --help."""
    shown = {}
    for name, p in _subparsers().items():
        for a in p._actions:
            if a.help == argparse.SUPPRESS:
                continue
            for opt in a.option_strings:
                shown.setdefault(opt, set()).add((name, a.metavar))
    assert {m for _, m in shown["--out"]} == {"DIR"}
    assert {m for _, m in shown["--json"]} == {"FILE"}
    for flag in ("--csv", "--npz", "--plot"):
        assert {m for _, m in shown[flag]} == {"FILE"}, flag
    assert {c for c, _ in shown["--iterations"]} == {"tune", "fit"}
    assert {c for c, _ in shown["--segments"]} == {"run"} and {c for c, _ in shown["--chunk-size"]} == {"sweep"}
    assert {c for c, _ in shown["--resume"]} == {"run", "sweep"}
    for old in ("--steps", "--chunk", "--chunks", "--table"):
        assert old not in shown, old
    assert [flag for flag, uses in shown.items() if flag != "--out" and any(m == "DIR" for _, m in uses)] == []


def test_list_writes_json_and_quiet_keeps_it(tmp_path, capsys):
    js = tmp_path / "list.json"
    assert cli.main(["list", "--json", str(js), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    names = [s["name"] for s in json.loads(js.read_text())["scenarios"]]
    assert names == sorted(scenarios.REGISTRY) and "pendulum" in names
    assert cli.main(["list", "--quiet"]) == 2  # nothing would keep the result
    assert "--json FILE" in _one_error_line(capsys)


@pytest.mark.parametrize("argv, words", [
    (["synth", "pendulum"], ["--csv FILE or --npz FILE"]),
    (["synth", "pendulum", "--csv", "r.npz"], ["--csv r.npz", "--npz r.npz"]),
    (["synth", "pendulum", "--npz", "r.csv"], ["--npz r.csv", ".npz"]),
    (["view", "r.npz", "--html", "r.png"], ["--html r.png", ".html"]),
    (["sweep", "pendulum", "--batch", "2", "--resume"], ["--resume", "--out DIR"]),
    (["reconfig", "uk-hinged-cubes", "--stabilization", "none"], ["--stabilization"]),
])
def test_misused_flags_are_one_line_naming_the_flag(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    line = _one_error_line(capsys)
    for w in words:
        assert w in line, (w, line)
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------ deprecated spellings
@pytest.mark.parametrize("command, old, new, dest, text, value", DEPRECATED)
def test_an_old_spelling_stores_what_the_new_one_does_and_is_noted(command, old, new, dest, text, value):
    _common.take_deprecations()
    args = _parse([command] + POSITIONAL[command] + [old, text])
    assert str(getattr(args, dest)) == str(value)
    assert _common.take_deprecations() == [f"{old} is deprecated, use {new} (the old spelling goes in the next release)"]
    new_args = _parse([command] + POSITIONAL[command] + [new, text])
    assert getattr(new_args, dest) == getattr(args, dest)
    assert _common.take_deprecations() == []


def test_the_new_spelling_keeps_its_default_beside_the_old_one():
    assert _parse(["tune", "pendulum", "--params", "g"]).iterations == 50
    assert _parse(["run", "pendulum"]).segments is None and _parse(["sweep", "pendulum"]).out is None


@pytest.mark.parametrize("argv, old, new", [
    (["run", "pendulum", "--chunks", "0"], "--chunks", "--segments"),
    (["tune", "pendulum", "--params", "g", "--steps", "0"], "--steps", "--iterations"),
    (["sweep", "pendulum", "--batch", "0", "--chunk", "4"], "--chunk", "--chunk-size"),
    (["sweep", "pendulum", "--batch", "0", "--table", "store"], "--table", "--out"),
    (["synth", "pendulum", "--out", "r.csv", "--columns", "nope"], "--out", "--csv"),
    (["view", "nope.npz", "--out", "page.html"], "--out", "--html"),
])
def test_with_an_old_spelling_bad_input_is_still_one_line(argv, old, new, capsys, tmp_path, monkeypatch):
    """The error line ends with the deprecation, so bad input stays one line."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    line = _one_error_line(capsys)
    assert f"[DeprecationWarning: {old} is deprecated, use {new}" in line


def test_old_spellings_still_run_and_say_so_once(tmp_path, capsys):
    """``run --chunks`` and ``view --out``: the same files as the new spellings, one
    DeprecationWarning line each on stderr (even with --quiet)."""
    old, new = tmp_path / "old", tmp_path / "new"
    base = ["run", "pendulum", "--t1", "0.4", "--quiet", "--no-plot"]
    assert cli.main(base + ["--chunks", "4", "--out", str(old)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["diffmb: DeprecationWarning: --chunks is deprecated, use --segments (the old spelling goes "
                   "in the next release)"]
    assert cli.main(base + ["--segments", "4", "--out", str(new)]) == 0
    assert capsys.readouterr().err == ""
    (a, meta_a), (b, meta_b) = Trajectory.load(old / "pendulum.npz"), Trajectory.load(new / "pendulum.npz")
    assert meta_a["segments"] == meta_b["segments"] == 4
    np.testing.assert_array_equal(a.xs, b.xs)
    page = tmp_path / "p.html"
    assert cli.main(["view", str(new / "pendulum.npz"), "--out", str(page), "--quiet"]) == 0
    assert page.exists() and "DeprecationWarning: --out is deprecated, use --html" in capsys.readouterr().err


# ------------------------------------------------------------------ resumable runs in the library
@pytest.fixture(scope="module")
def pendulum():
    system, params, _ = scenarios.get("pendulum").make({}, "none")
    ref = diffmb.simulate(system, t1=0.4, dt=1e-3, params=params)
    return system, params, ref


def test_the_python_api_stops_and_resumes(tmp_path, pendulum):
    system, params, ref = pendulum
    done = []
    kw = dict(t1=0.4, dt=1e-3, out_dir=tmp_path, name="p", segments=4)
    res = diffmb.simulation.resumable.run(system, params, **kw, on_segment=lambda k, seg, s: done.append(k),
                               stop=lambda: len(done) >= 2)
    assert res.interrupted and res.segments_done == 2 and res.path == tmp_path / "p.partial.npz"
    part, meta = Trajectory.load(res.path)
    assert meta["complete"] is False and meta["segments_done"] == 2 and meta["segments"] == 4
    assert meta["system"].endswith(".TreeSystem") and len(meta["params_sha1"]) == 40  # the default identity
    assert float(part.t_final) == pytest.approx(0.2, abs=1e-12)

    with pytest.raises(resumable.PartialRunExists, match="resume=True continues it"):
        diffmb.simulation.resumable.run(system, params, **kw)  # never replaced unasked
    res = diffmb.simulation.resumable.run(system, params, **kw, resume=True)
    assert not res.interrupted and res.segments_done == 4 and res.path == tmp_path / "p.npz"
    assert not (tmp_path / "p.partial.npz").exists()
    done_traj, meta = Trajectory.load(res.path)
    assert meta["complete"] is True and int(done_traj.n_steps) == 400
    np.testing.assert_allclose(done_traj.xs, ref.xs, rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.traj.x_final, ref.x_final, rtol=0, atol=1e-12)


def test_the_python_api_refuses_to_resume_another_run_naming_the_difference(tmp_path, pendulum):
    system, params, _ = pendulum
    kw = dict(t1=0.4, dt=1e-3, out_dir=tmp_path, name="p", segments=4)
    res = diffmb.simulation.resumable.run(system, params, **kw, stop=lambda: True)
    assert res.interrupted and res.traj is None  # stopped before the first segment: nothing kept
    res = diffmb.simulation.resumable.run(system, params, **kw, on_segment=lambda *a: None, stop=_after(1))
    assert res.segments_done == 1
    other = jax.tree_util.tree_map(lambda x: x * 1.5, params)  # another pendulum
    with pytest.raises(resumable.ResumeMismatch, match="params_sha1") as e:
        diffmb.simulation.resumable.run(system, other, **kw, resume=True)
    assert "there" in e.value.why and "here" in e.value.why
    with pytest.raises(resumable.ResumeMismatch, match=r"t1 0\.4 there, 0\.3 here"):
        diffmb.simulation.resumable.run(system, params, **{**kw, "t1": 0.3}, resume=True)
    assert (tmp_path / "p.partial.npz").exists()  # refused: the work is kept
    res = diffmb.simulation.resumable.run(system, other, **kw, resume=True, discard=True)
    assert res.segments_done == 4 and not (tmp_path / "p.partial.npz").exists()


def _after(n):
    """A ``stop`` that turns true once it has been asked ``2 n`` times: after ``n``
    segments (it is asked before and after each)."""
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 2 * n
    return stop


def test_a_partial_file_of_the_previous_release_resumes(tmp_path, pendulum, capsys):
    """Written before the segments had their name (``chunks``, ``chunks_done``)."""
    *_, ref = pendulum
    cfg = cli.run.resolve(_parse(PENDULUM + ["--out", str(tmp_path)]))
    res = diffmb.simulation.resumable.run(cfg.system, cfg.params, t1=cfg.t1, dt=cfg.dt, solver=cfg.solver, rtol=cfg.rtol,
                               atol=cfg.atol, out_dir=tmp_path / "new", name="pendulum", segments=4,
                               identity=cfg.identity, stop=_after(1))
    part, meta = Trajectory.load(res.path)
    old = {k: v for k, v in meta.items() if k in cfg.identity or k in ("solver", "dt", "rtol", "atol", "t1")}
    part.save(tmp_path / "pendulum.partial.npz", meta={**old, "chunks": 4, "chunks_done": 1, "complete": False})
    assert cli.main(PENDULUM + ["--out", str(tmp_path), "--resume"]) == 0
    traj, meta = Trajectory.load(tmp_path / "pendulum.npz")
    assert meta["segments"] == 4 and int(traj.n_steps) == 400
    np.testing.assert_allclose(traj.xs, ref.xs, rtol=0, atol=1e-12)
