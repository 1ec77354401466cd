"""The example scripts the README points to (``examples/``), each run as a user runs it,
at a short horizon, and held to what it says it shows. (``tune_map_fold.py`` has its own
tests: ``test_tune_example.py``.)"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(tmp_path, script, *args) -> str:
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


@pytest.mark.slow  # ~25 s: synthesis and a Gauss-Newton fit through the fold's runs
def test_fit_hinges_recovers_the_hinge_model_within_its_standard_errors(tmp_path):
    out = _run(tmp_path, "fit_hinges.py", "--t1", "2")
    # the data: K = 0.1, c = 0.02 with 1e-3 rad of noise
    for name, true in (("K", 0.1), ("c", 0.02)):
        value, se = map(float, re.search(rf"^{name} = (\S+) \+- (\S+)", out, re.M).groups())
        assert 0 < se and abs(value - true) < 3 * se, (name, value, se)
    rms = float(re.search(r"residual rms (\S+) rad", out).group(1))
    assert 0.8e-3 < rms < 1.2e-3   # the noise's 1e-3 rad: the model explains all but the noise
    assert (tmp_path / "out" / "fit_hinges.png").stat().st_size > 0


@pytest.mark.slow  # ~15 s: one vmapped batch of 8 fold designs
def test_sweep_fold_designs_ranks_designs_by_hub_rate(tmp_path):
    out = _run(tmp_path, "sweep_fold_designs.py", "--batch", "8")
    assert "'success': 8" in out
    rates = [float(x) for x in re.findall(r"peak hub rate (\S+) rad/s", out)]
    assert len(rates) == 5 and rates == sorted(rates) and rates[0] > 0
    assert "nan" not in out.split("designs that disturb the hub least:")[1]   # damped: dissipation, not NaN
    for v in re.findall(r"violation (\S+)\n", out):
        assert float(v) < 1e-12   # projection holds the closure
    assert (tmp_path / "out" / "sweep_fold_designs.csv").read_text().count("\n") == 9


@pytest.mark.slow  # ~18 s: the T-bar in two materials, linearised and run
def test_tensegrity_materials_compares_the_two_bars(tmp_path):
    import json

    from diffmb.scenarios.tensegrity import _MATERIAL_DATA

    out = _run(tmp_path, "tensegrity_materials.py", "--t1", "2", "--out", str(tmp_path / "tm"))
    assert "aluminium bars" in out
    rep = json.loads((tmp_path / "tm" / "report.json").read_text())
    (rho_h, E_h, _), (rho_a, E_a, _) = _MATERIAL_DATA[0], _MATERIAL_DATA[1]
    h, a = rep["hdpe"], rep["aluminium"]
    # the same bars in another material: mass by density; the two bar-axial compliances
    # (L / E A) by the moduli; the two string-dominated ones differ by less than the bars'
    # own compliance (their modes strain the bars a little: 7e-8 and 6.3e-7 m/N)
    assert a["bar_mass_kg"] / h["bar_mass_kg"] == pytest.approx(rho_a / rho_h, rel=1e-12)
    ch, ca = sorted(h["compliance_eigenvalues_m_per_N"]), sorted(a["compliance_eigenvalues_m_per_N"])
    assert ca[0] / ch[0] == pytest.approx(E_h / E_a, rel=1e-3) and ca[1] / ch[1] == pytest.approx(E_h / E_a, rel=1e-3)
    assert all(abs(x - y) <= ch[0] for x, y in zip(ch[2:], ca[2:])) and ch[2] > 1e3 * ch[0]
    assert a["peak_deflection_m"] < h["peak_deflection_m"]   # the stiffer bars deflect less


@pytest.mark.slow  # ~9 s
def test_tune_baumgarte_says_the_fold_is_already_below_the_integrators_floor(tmp_path):
    out = _run(tmp_path, "tune_baumgarte.py", "--t1", "1", "--steps", "3")
    assert "already below the integrator's floor" in out and "nothing to tune" in out
    assert "x lower" not in out   # no claimed gain
