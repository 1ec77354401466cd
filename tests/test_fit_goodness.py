"""A fit tests its residual against the declared sensor noise (chi-square per sensor and
over the fit), names the sensors whose residual the model does not explain, and then
shows standard errors scaled by the reduced chi-square (the noise-only ones alongside).

Model error by construction: the records come from a pendulum with a little joint
damping, the fitted model has none (a physics term it lacks), and only ``g`` is fitted.
Every fit here has the same structure (pendulum, a gyro and an encoder, 2 s at 20 Hz,
one unknown), so one compilation serves the module (about 20 s: synth's run and the
fit's residual, Jacobian and predictions, measured on the shared 2-core machine).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from diffmb import cli, scenarios
from diffmb.design.data import write_data
from diffmb.design.fit import FitWarning, fit, synth
from diffmb.design.goodness import ALPHA, chi2_sf, goodness_of_fit, leverages
from diffmb.design.sensors import parse_sensors

G = 9.81
SENSORS = [{"name": "rate", "type": "gyro", "body": "link1", "sigma": 1e-3},
           {"name": "encoder", "type": "angle", "coordinate": "theta", "sigma": 2e-3}]


@pytest.fixture(scope="module")
def fits():
    """Fits of ``g`` (from 9.0) by the undamped model to records (seed 0) of a pendulum
    with damping 0 (no model error), 5e-4 (subtle: the gyro's residual 1.4x its noise)
    and 2e-3 (clear: 4.5x)."""
    sc = scenarios.get("pendulum")
    system, _, _ = sc.make({})
    sensors = parse_sensors(SENSORS, system)
    out = {}
    for damping in (0.0, 5e-4, 2e-3):
        data, _ = synth(sc, {"damping": damping}, sensors=sensors, t1=2.0, samples=41, seed=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = fit(sc, data, ["g"], sensors=sensors, overrides={"g": 9.0}, continuation=False,
                      iterations=20)
        out[damping] = (res, [str(w.message) for w in caught if issubclass(w.category, FitWarning)], data)
    return sc, sensors, out


def test_no_warning_without_model_error(fits):
    """Records from the fitted model itself with the declared noise: every sensor passes,
    nothing is said, and the standard errors shown are the noise-only ones."""
    res, said, _ = fits[2][0.0]
    assert said == [] and res.warnings == [] and res.converged
    gof = res.goodness
    assert gof["passed"] and all(s["passed"] for s in gof["sensors"].values())
    assert set(gof["sensors"]) == {"rate", "encoder"}
    for s in gof["sensors"].values():  # measured: 0.85 and 1.11 per degree of freedom
        assert 0.6 < s["reduced_chi2"] < 1.4 and s["p"] > ALPHA
    assert res.stderr_basis == "noise" and res.stderr == res.stderr_noise
    assert abs(res.params["g"] - G) < 3 * res.stderr["g"]


def test_subtle_model_error_is_named_by_sensor(fits):
    """Damping 5e-4 left out of the model: the gyro's residual is 1.4x its noise (the
    3x gross-misfit rule says nothing), which over 122 degrees of freedom is far beyond
    chance; the warning names the gyro, not the noisier encoder that cannot see it."""
    res, said, _ = fits[2][5e-4]
    gof = res.goodness["sensors"]
    assert not gof["rate"]["passed"] and gof["rate"]["p"] < 1e-6
    assert 1.2 < gof["rate"]["rms_over_noise"] < 1.7
    assert gof["encoder"]["passed"]
    assert len(said) == 1 and said[0].startswith("sensor rate: residual RMS 1.4")
    assert "x the declared sensor noise" not in " ".join(said)  # the gross-misfit rule is silent
    assert res.converged  # the fit itself is fine; the model is not
    assert res.stderr_basis == "scaled" and res.stderr == res.stderr_scaled


def test_scaled_standard_error_covers_the_error_noise_only_does_not(fits):
    """Damping 2e-3 left out: ``g`` is pulled 2.3e-3 off (measured), 9x its noise-only
    standard error and 2.3x its scaled one (sqrt of a reduced chi-square of about 16)."""
    res, said, _ = fits[2][2e-3]
    err = abs(res.params["g"] - G)
    assert err > 3 * res.stderr_noise["g"]
    assert err < 3 * res.stderr_scaled["g"]
    total = res.goodness["total"]
    assert res.stderr_scaled["g"] == pytest.approx(res.stderr_noise["g"] * math.sqrt(total["reduced_chi2"]))
    assert res.stderr["g"] == res.stderr_scaled["g"]
    assert any(m.startswith("sensor rate:") for m in said) and any(m.startswith("sensor encoder:") for m in said)
    j = res.to_json()
    assert j["stderr_basis"] == "scaled" and j["stderr_noise"]["g"] < j["stderr_scaled"]["g"]
    assert not j["goodness"]["passed"]


def test_residual_panels_give_each_sensors_test(fits):
    from diffmb.design.records import Record
    from diffmb.viewer.plots import fit_figure

    _, sensors, out = fits
    res, _, data = out[5e-4]
    fig = fit_figure(res, [Record(data)], sensors)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any(t.startswith("rms") and "\u03c3, \u03c7\u00b2/dof" in t and t.endswith("FAILS") for t in texts)  # the gyro
    assert sum(t.endswith("FAILS") for t in texts) == 1  # not the encoder


def test_cli_prints_and_writes_both_standard_errors(fits, tmp_path, capsys):
    """The same fit through ``diffmb fit``: which error is shown, both in the JSON."""
    sc, sensors, out = fits
    _, _, data = out[2e-3]
    csv = write_data(tmp_path / "rec.npz", data)
    (tmp_path / "s.json").write_text(json.dumps({"sensors": SENSORS}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(["fit", "pendulum", "--data", str(csv), "--sensors", str(tmp_path / "s.json"),
                       "--params", "g", "--set", "g=9.0", "--json", str(tmp_path / "fit.json")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "noise-only" in printed and "scaled" in printed
    assert "standard errors shown: scaled by sqrt(reduced chi-square" in printed
    assert "rate: residual rms" in printed and "FAILS" in printed
    obj = json.loads((tmp_path / "fit.json").read_text())
    assert obj["stderr_basis"] == "scaled" and obj["stderr"] == obj["stderr_scaled"]
    assert obj["goodness"]["sensors"]["rate"]["passed"] is False


def test_chi_square_tail_and_leverages():
    # chi-square with 2 degrees of freedom: P(X >= x) = exp(-x / 2)
    assert chi2_sf(3.0, 2) == pytest.approx(math.exp(-1.5), rel=1e-12)
    # large dof: the mean sits near the median
    assert 0.4 < chi2_sf(1000.0, 1000) < 0.55
    J = np.random.default_rng(0).standard_normal((30, 3))
    h = leverages(J)
    assert h.sum() == pytest.approx(3.0) and np.all((h >= 0) & (h <= 1 + 1e-12))
    # no declared noise: nothing tested
    e, m = np.ones((1, 30, 1)), np.ones((1, 30, 1))
    g = goodness_of_fit(e, m, h.reshape(1, 30, 1), {"s": [0]}, np.array([False]))
    assert g["sensors"] == {} and g["total"] is None and g["passed"]
