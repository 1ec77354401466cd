"""Per-coordinate parameter names (``K.theta_j``, ``tape.M_peak.theta_m``, ``inertia_scale``)
wherever a scenario parameter name is accepted: ``Scenario.resolve``/``make``, ``bind`` with
them in ``overrides``, ``scenario_batch`` and the ``run`` command; and the messages for a
named value that does not exist and for a negative tape-spring moment.

One System structure (fold-4panel, RK4, 0.05 s, 11 save points) is compiled once and run
with three params sets; the CLI run compiles its own chunked program once.
"""

from __future__ import annotations

import json

import equinox as eqx
import jax
import numpy as np
import pytest

import diffmb
from diffmb import cli
from diffmb.design.batch import scenario_batch
from diffmb.design.binding import bind
from diffmb.scenarios import get

FOLD = get("fold-4panel")
HINGES = ("theta_j", "theta_m", "theta_l")


def _index(system, coord):
    return system.model.coordinate_names.index(coord)


def _assert_same_params(p, q, rtol=0.0):
    for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(q), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=0.0)


# slow job: three runs (~5 s); the default job keeps make's and bind's per-hinge parameters equal
# (test_bind_agrees_with_make_and_keeps_per_hinge_overrides) and a sweep over a per-hinge name
@pytest.mark.slow
def test_make_sets_one_hinges_stiffness_and_the_run_follows_it():
    system, p_named, values = FOLD.make({"K.theta_j": "0.2"})
    _, p0, _ = FOLD.make()
    j = _index(system, "theta_j")
    p_direct = {**p0, "model": eqx.tree_at(lambda m: m.stiffness, p0["model"],
                                           p0["model"].stiffness.at[j].set(0.2))}
    _assert_same_params(p_named, p_direct)  # exactly the hinge's entry, nothing else
    assert values["K.theta_j"] == 0.2 and values["K"] == 0.1  # run metadata and resume see it

    # 0.05 s: the folded hinge starts at rest, so its travel is 1/2 alpha t^2 with alpha
    # proportional to its own spring's torque (K_j (theta - rest)); 50 RK4 steps resolve it
    run = lambda p: diffmb.simulate(system, params=p, t1=0.05, dt=1e-3, saveat=11, diagnostics=False)
    named, direct, default = run(p_named), run(p_direct), run(p0)
    np.testing.assert_array_equal(np.asarray(named.xs), np.asarray(direct.xs))
    travel = lambda tr: abs(float(tr.xs[-1, j] - tr.xs[0, j]))
    assert travel(default) > 0
    # twice the stiffness, twice the torque, twice the travel (linear in it to ~t^4: 3e-5)
    np.testing.assert_allclose(travel(named) / travel(default), 2.0, rtol=1e-3)


def test_make_tape_spring_and_inertia_entries():
    system, p, values = FOLD.make({"hinge": 1, "tape.M_peak.theta_m": 0.25, "inertia_scale": 2.0})
    _, p1, _ = FOLD.make({"hinge": 1})
    peak = np.asarray(p["forcing"]["tape"]["M_peak"])
    assert peak[HINGES.index("theta_m")] == 0.25
    np.testing.assert_array_equal(np.delete(peak, 1), np.delete(np.asarray(p1["forcing"]["tape"]["M_peak"]), 1))
    mass, mass1 = np.asarray(p["model"].mass), np.asarray(p1["model"].mass)
    np.testing.assert_array_equal(mass, np.r_[mass1[0], 2 * mass1[1:]])  # the root keeps its mass
    assert values["inertia_scale"] == 2.0 and values["tape.M_peak.theta_m"] == 0.25


def test_resolve_checks_per_coordinate_names_and_numbers():
    v = FOLD.resolve({"K.theta_j": "0.2", "rest.theta_m": "-0.3"})
    assert v["K.theta_j"] == 0.2 and v["rest.theta_m"] == -0.3  # a rest angle may be negative
    with pytest.raises(ValueError, match=r"'K.theta_j' = -1: a stiffness cannot be negative"):
        FOLD.resolve({"K.theta_j": -1})
    with pytest.raises(ValueError, match=r"'c.theta_j' = -1: a damping cannot be negative"):
        FOLD.resolve({"c.theta_j": -1})
    with pytest.raises(ValueError, match=r"'tape.M_peak.theta_j' = -1: a moment cannot be negative"):
        FOLD.resolve({"tape.M_peak.theta_j": -1})
    with pytest.raises(ValueError, match=r"'K.theta_j': 'x' is not a number"):
        FOLD.resolve({"K.theta_j": "x"})
    with pytest.raises(ValueError, match=r"no parameter 'Q.theta_j'.*K.<coordinate>"):
        FOLD.resolve({"Q.theta_j": 1})


def test_make_refuses_an_unknown_coordinate_naming_the_coordinates():
    with pytest.raises(ValueError, match=r"no coordinate 'theta_q'; coordinates: .*theta_j, theta_m, theta_l"):
        FOLD.make({"K.theta_q": 0.2})
    with pytest.raises(ValueError, match=r"no hinge 'r_free_x'; hinges: theta_j, theta_m, theta_l"):
        FOLD.make({"hinge": 1, "tape.M_peak.r_free_x": 0.2})


def test_bind_agrees_with_make_and_keeps_per_hinge_overrides():
    b = bind(FOLD, ["K.theta_j"])
    _assert_same_params(b.params(np.array([0.2])), FOLD.make({"K.theta_j": 0.2})[1], rtol=1e-15)
    # K bound, theta_j's stiffness set: K moves the other hinges, theta_j keeps 0.2 (it
    # was refused as an unknown parameter, and a probe build would have reset it)
    b = bind(FOLD, ["K"], {"K.theta_j": 0.2})
    _assert_same_params(b.params(np.array([0.5])), FOLD.make({"K": 0.5, "K.theta_j": 0.2})[1], rtol=1e-15)
    k = np.asarray(b.params(np.array([0.5]))["model"].stiffness)
    assert k[_index(b.system, "theta_j")] == 0.2 and k[_index(b.system, "theta_m")] == 0.5
    # both bound: the per-hinge value is that hinge's, whatever K is (as make reads them)
    b = bind(FOLD, ["K", "K.theta_m"], {"K.theta_j": 0.2})
    assert b.names == ("K", "K.theta_m") and np.allclose(b.values, [0.1, 0.1])
    _assert_same_params(b.params(np.array([0.5, 0.7])),
                        FOLD.make({"K": 0.5, "K.theta_m": 0.7, "K.theta_j": 0.2})[1], rtol=1e-15)


def test_scenario_batch_over_a_per_hinge_name():
    _, pb = scenario_batch(FOLD, [{"K.theta_j": x} for x in (0.1, 0.2, 0.3)])
    system = FOLD.make()[0]
    k = np.asarray(pb["model"].stiffness)
    np.testing.assert_allclose(k[:, _index(system, "theta_j")], [0.1, 0.2, 0.3], rtol=1e-15)
    np.testing.assert_array_equal(k[:, _index(system, "theta_m")], 0.1)
    # K ranged, one hinge fixed: every member keeps it
    _, pb = scenario_batch(FOLD, [{"K": x, "K.theta_j": 0.2} for x in (0.1, 0.4)])
    k = np.asarray(pb["model"].stiffness)
    np.testing.assert_allclose(k[:, _index(system, "theta_j")], 0.2, rtol=1e-15)
    np.testing.assert_allclose(k[:, _index(system, "theta_l")], [0.1, 0.4], rtol=1e-15)


def test_cli_run_accepts_a_per_hinge_name(tmp_path):
    js = tmp_path / "run.json"
    argv = ["run", "fold-4panel", "--t1", "0.05", "--out", str(tmp_path), "--no-plot", "--quiet"]
    assert cli.main(argv + ["--set", "K.theta_j=0.2", "--json", str(js)]) == 0
    final = json.loads(js.read_text())["final"]
    _, meta = diffmb.Trajectory.load(tmp_path / "fold-4panel.npz")
    assert meta["parameters"]["K.theta_j"] == 0.2
    assert final["theta_j"] < np.pi - 1e-4  # the stiffer hinge unfolds


@pytest.mark.parametrize("sets, words", [
    (["K.theta_q=0.2"], ["'K.theta_q'", "no coordinate 'theta_q'", "theta_j, theta_m, theta_l"]),
    (["ts_Mpeak=-1"], ["'ts_Mpeak'", "a moment cannot be negative"]),
])
def test_cli_bad_per_hinge_values_exit_2_with_one_line(tmp_path, capsys, sets, words):
    argv = ["run", "fold-4panel", "--t1", "0.05", "--out", str(tmp_path), "--no-plot", "--quiet"]
    assert cli.main(argv + [a for s in sets for a in ("--set", s)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err


def test_a_named_value_that_does_not_exist_lists_those_that_do():
    sc = get("tbar-compressible")
    assert sc.resolve({"material": "Aluminium"})["material"] == 1.0
    with pytest.raises(ValueError, match=r"^parameter 'material': 'steel' is neither a number nor one of "
                                         r"hdpe, aluminium, aluminum$"):
        sc.resolve({"material": "steel"})


def test_one_hinges_damping_makes_the_fold_damped():
    """The health check must not expect energy to be conserved when one hinge damps
    (contact's resting creases elastic: their damping would make it damped too)."""
    sc, elastic = FOLD, {"c": 0.0, "contact_rest_damping": 0.0}
    assert "energy" in sc.conserved(sc.resolve(elastic))
    assert "energy" not in sc.conserved(sc.resolve({**elastic, "c.theta_j": 0.05}))
    assert "energy" in sc.conserved(sc.resolve({**elastic, "c.theta_j": 0.0}))
