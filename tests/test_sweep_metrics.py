"""A sweep's metrics mean what their legend says: the energy a damped member dissipates
and its peak hinge rate equal the same run's trajectory, the time to the final state is
when the hinges stop moving (NaN for one that never does), and a drift is reported only
where the physics conserves the quantity."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import cli
from diffmb.design.batch import METRICS, sweep
from diffmb.scenarios.pendulum import chain_model

DAMPINGS = (0.0, 3.0)  # undamped (swings for ever), and settling within a few seconds
T1 = 6.0


def _system(damping):
    model = chain_model([1.0, 0.8], [1.0, 0.5], 9.81, damping, names=["shoulder", "elbow"])
    return diffmb.TreeSystem(model, q0=[0.6, -0.3], roles={"hinge": ("shoulder", "elbow")})


@pytest.fixture(scope="module")
def swept():
    systems = [_system(c) for c in DAMPINGS]
    params = [s.default_params() for s in systems]
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x) if eqx.is_array(x[0]) else x[0], *params)
    res = sweep(systems[0], batch, t1=T1, dt=1e-2, saveat=601,
                conserved=[("energy",) if c == 0 else () for c in DAMPINGS])
    runs = [diffmb.simulate(s, params=p, t1=T1, dt=1e-2, saveat=601) for s, p in zip(systems, params)]
    return res, runs


def test_dissipated_energy_and_peak_hinge_rate_equal_the_trajectory(swept):
    res, runs = swept
    for i, tr in enumerate(runs):
        e = np.asarray(tr.diagnostics["energy"])
        assert res.table["energy_dissipated"][i] == pytest.approx(e[0] - e[-1], rel=1e-9, abs=1e-12)
        qd = np.asarray(tr.xs)[:, [tr.state_names.index("shoulder_dot"), tr.state_names.index("elbow_dot")]]
        assert res.table["peak_hinge_rate"][i] == pytest.approx(np.abs(qd).max(), rel=1e-12)
    assert abs(res.table["energy_dissipated"][0]) < 1e-6 < res.table["energy_dissipated"][1]
    # the damped chain's energy only falls: no rise, as the trajectory says
    assert np.diff(np.asarray(runs[1].diagnostics["energy"])).max() < 1e-9 and res.table["energy_rise"][1] == 0.0


def test_time_to_final_is_when_the_hinges_stop(swept):
    """Within 1 deg of the final angles and slower than 1 deg/s from then on; NaN for the
    undamped chain, which swings to the end."""
    res, runs = swept
    swinging, settled = res.table["time_to_final"]
    assert math.isnan(swinging)
    tr = runs[1]
    q = np.asarray(tr.xs)[:, :2]
    qd = np.asarray(tr.xs)[:, [tr.state_names.index("shoulder_dot"), tr.state_names.index("elbow_dot")]]
    ts = np.asarray(tr.ts)
    tol = math.radians(1.0)  # 1 deg off the final angle, 1 deg/s
    off = (np.abs(q - q[-1]).max(axis=1) > tol) | (np.abs(qd).max(axis=1) > tol)
    assert 0 < settled < T1 and not off[ts >= settled].any() and off[ts < settled][-1]


def test_drift_only_where_the_physics_conserves_it(swept):
    res, _ = swept
    undamped, damped = res.rows()
    assert undamped["energy_drift"] < 1e-6 and math.isnan(damped["energy_drift"])
    assert damped["energy_dissipated"] > 0


def test_the_cli_table_says_what_each_column_is(tmp_path, capsys):
    """Same structure as test_design's sweep (one compile): the legend lists every column
    shown, and a column NaN for every member is named with the reason instead."""
    assert cli.main(["sweep", "four-bar", "--batch", "3", "--set", "c=0.1:0.2", "--t1", "0.5",
                     "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:3] == ["c", "status", "t_final"] and "energy_drift" not in header
    for k in header[1:]:
        assert f"  {k}: {METRICS[k]}" in out
    assert "not shown, NaN for every member: energy_drift (no member conserves energy)" in out
    import jax  # the throughput names the device that ran it

    assert "3 members x 0.5 s in " in out and f"on 1 {jax.devices()[0].device_kind} device(s)" in out


def test_an_infinite_metric_is_a_value_in_the_table_not_a_missing_one():
    """A contact sweep whose layers stayed stacked has no armed pair: its least gap is inf,
    as the legend says. The table printed it as nan and listed the column as "not shown,
    NaN for every member: min_contact_gap (not measured)"."""
    from diffmb.cli.sweep import _table_lines

    cols = {"member": np.arange(2), "K": np.array([0.01, 0.02]), "status": np.array(["success"] * 2),
            "min_contact_gap": np.array([np.inf, 2e-3]), "time_to_flat": np.array([np.nan, np.nan])}
    lines = _table_lines(cols)
    assert lines[0].split() == ["K", "status", "min_contact_gap"]
    assert lines[1].split() == ["0.01", "success", "inf"] and lines[2].split()[-1] == "0.002"
    assert lines[-1] == "  not shown, NaN for every member: time_to_flat (no member reached flat)"
