"""``diffmb tune`` on a scenario of every formulation (trees and tensegrity are covered in
test_design.py and test_tensegrity.py): Kane's multiplier form and Udwadia-Kalaba tune
their Baumgarte gains ``a, b``; a flexible spacecraft tunes its slew against the
vibration it leaves in its appendages (loss ``vibration`` on the declared elastic
coordinates)."""

from __future__ import annotations

import json
import math

import pytest

from diffmb import cli, scenarios, simulate
from diffmb.tune import tune, vibration_loss

@pytest.mark.slow
@pytest.mark.parametrize("scenario, sets", [
    ("slider-crank", ["--set", "formulation=dae", "--set", "a=0.5", "--set", "b=0.5"]),
    ("uk-hinged-cubes", ["--set", "a=0.5", "--set", "b=0.5"]),
])
def test_cli_tunes_baumgarte_gains_of_kane_and_udwadia_kalaba(tmp_path, scenario, sets):
    out = tmp_path / "tune.json"
    assert cli.main(["tune", scenario, "--params", "a,b", "--t1", "1", "--steps", "4", "--quiet",
                     "--json", str(out)] + sets) == 0
    res = json.loads(out.read_text())
    best, initial = res["final"], res["initial"]
    assert set(best["params"]) == {"a", "b"} and best["loss"] <= initial["loss"]
    # both formulations hold the closures at acceleration level: the violation left is the
    # integrator's own, so the tuner stops at that floor rather than chasing round-off
    assert res["stopped"] in ("floor", "plateau", "steps")
    if res["stopped"] == "floor":
        assert best["loss"] <= res["floor"]


@pytest.mark.slow
def test_slew_vibration_scales_with_torque_squared_and_tune_descends_it():
    """Linear structural response: modal amplitudes scale with the slew torque, so the
    vibration loss scales as torque^2 (geometric stiffening, quadratic in the small spin
    rate, makes a 1e-3 departure). Adam's first step in log(torque) is -learning_rate, so
    the second iterate's loss is exp(-2 lr) of the first's."""
    sc = scenarios.get("solar-sail-slew")
    overrides = {"t_switch": 4.0}
    losses = []
    for torque in (1.0, 0.5):
        system, params, _ = sc.make({**overrides, "torque": torque})
        tr = simulate(system, params=params, t1=10.0, dt=sc.dt, solver="rk4", saveat=101)
        losses.append(float(vibration_loss(tr, params)))
    assert losses[0] > 0 and losses[0] / losses[1] == pytest.approx(4.0, rel=5e-3)
    res = tune(sc, ["torque"], overrides=overrides, loss="vibration", t1=10.0, steps=2, saveat=101)
    assert res.history[0]["loss"] == pytest.approx(losses[0], rel=1e-9)
    assert res.history[1]["params"]["torque"] == pytest.approx(math.exp(-0.1), rel=1e-6)
    assert res.history[1]["loss"] / res.history[0]["loss"] == pytest.approx(math.exp(-0.2), rel=5e-3)


def test_vibration_loss_names_the_missing_role():
    system, params, _ = scenarios.get("pendulum").make({})
    tr = simulate(system, params=params, t1=0.01, dt=1e-3)
    with pytest.raises(ValueError, match="coordinates of role 'elastic'"):
        vibration_loss(tr, params)
