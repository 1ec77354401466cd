"""A sweep's table for a reader (issue 25, item 2): the summary names the diverged and
suspect members with their parameters, a 2-D grid becomes a heat map over its two axes
(every member in its cell, unfinished ones blank), any other sampling a scatter matrix,
and the Parquet parts read back as the metrics they were written from. No JAX: the
tables are made here."""

from __future__ import annotations

import numpy as np
import pytest

from diffmb.design import sweep_report, sweep_store
from diffmb.design.batch import METRICS, STATUS_CODES


def _table(n=12, seed=0):
    rng = np.random.default_rng(seed)
    status = np.array(["success"] * n, dtype=object)
    status[[3, 7]] = ["diverged", "suspect"]
    return {"member": np.arange(n), "K": rng.uniform(0.1, 1.0, n), "c": rng.uniform(0, 0.1, n),
            "status": status, "t_final": np.full(n, 2.0), "time_to_final": rng.uniform(0.5, 2.0, n),
            "max_violation": rng.uniform(0, 1e-6, n)}


def test_summary_counts_statuses_and_names_the_flagged_members_with_their_parameters():
    cols = _table()
    s = sweep_report.summary(cols, swept=["K", "c"])
    assert s["status_counts"] == {"success": 10, "suspect": 1, "event": 0, "diverged": 1, "max_steps": 0}
    assert [(f["member"], f["status"]) for f in s["flagged"]] == [(3, "diverged"), (7, "suspect")]
    assert s["flagged"][0]["K"] == cols["K"][3] and s["flagged"][1]["c"] == cols["c"][7]


def test_a_2d_grid_is_a_heat_map_over_its_axes(tmp_path):
    K, c = np.meshgrid([0.1, 0.2, 0.4], [0.0, 0.05], indexing="ij")
    z = K.ravel() * 10 + c.ravel()
    keep = np.arange(6) != 4  # member 4 did not finish: its cell stays blank
    cols = {"K": K.ravel()[keep], "c": c.ravel()[keep], "time_to_final": z[keep]}
    xs, ys, grid = sweep_report.grid_of(cols, ["K", "c"], cols["time_to_final"])
    assert list(xs) == [0.1, 0.2, 0.4] and list(ys) == [0.0, 0.05]
    want = (K * 10 + c)
    want[2, 0] = np.nan
    assert np.array_equal(grid, want, equal_nan=True)
    out = sweep_report.plot(cols, tmp_path / "heat.png", swept=["K", "c"], metric="time_to_final", grid=True)
    assert out.stat().st_size > 1000


def test_other_samplings_are_a_scatter_matrix_of_at_most_the_drawn_members(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_report, "SCATTER_POINTS", 5)
    out = sweep_report.plot(_table(), tmp_path / "m.png", swept=["K", "c"], metric="time_to_final", grid=False)
    assert out.stat().st_size > 1000
    with pytest.raises(ValueError, match="nothing is swept"):
        sweep_report.plot(_table(), tmp_path / "n.png", swept=[], metric="t_final", grid=False)


def test_pick_metric():
    cols = _table()
    assert sweep_report.pick_metric(cols) == "time_to_final"
    cols["time_to_final"] = np.full(12, np.nan)
    assert sweep_report.pick_metric(cols) == "max_violation"
    with pytest.raises(ValueError, match="one of"):
        sweep_report.pick_metric(cols, "status")
    with pytest.raises(ValueError, match="does not measure it"):
        sweep_report.pick_metric(cols, "peak_hub_rate")


def test_a_part_reads_back_as_the_metrics_it_was_written_from(tmp_path):
    metrics = {"status": np.array([STATUS_CODES["success"], STATUS_CODES["diverged"]], np.int32),
               "t_final": np.array([2.0, 0.7]), "energy_drift": np.array([1e-9, 0.3]),
               "energy_jump": np.array([0.0, 0.0])}
    members = [{"K": 0.1}, {"K": 0.2}]
    cols = sweep_store.chunk_columns([4, 5], metrics, members, [("energy",), ()])
    assert list(cols["status"]) == ["success", "diverged"] and list(cols["member"]) == [4, 5]
    assert np.isnan(cols["energy_drift"][1])  # not conserved: NaN, as in the CSV
    sweep_store.open_store(tmp_path / "s", {"chunk": 2, "chunks": 3}, resume=False)
    sweep_store.write_chunk(tmp_path / "s", 2, cols)
    back = sweep_store.read_chunk(tmp_path / "s", 2)
    assert set(back) == set(metrics) and set(back) <= set(METRICS)
    assert np.array_equal(back["status"], metrics["status"]) and np.array_equal(back["t_final"], metrics["t_final"])
    assert sweep_store.finished(tmp_path / "s") == [2]
    table = sweep_store.read_table(tmp_path / "s")
    assert list(table["member"]) == [4, 5] and list(table["K"]) == [0.1, 0.2]


def test_columns_hold_what_rows_hold_without_a_row_per_member():
    """The columns (what the table, the summary and the figures read) equal ``rows()``:
    parameter values, status names (suspect where a conserved quantity jumped), and the
    drift NaN where the member's physics does not conserve it."""
    from diffmb.design.batch import SweepResult

    res = SweepResult(table={"status": np.array([0, 0, 2, 0], np.int32), "t_final": np.array([1.0, 1.0, 0.3, 1.0]),
                             "energy_drift": np.array([1e-9, 0.2, np.nan, 1e-8]),
                             "energy_jump": np.array([0.0, 0.0, 0.0, 0.5])},
                      batch=4, t1=1.0, wall_s=1.0, compile_s=0.0, devices=1, chunks=1,
                      members=[{"K": 0.1 * i, "c": 0.01} for i in range(4)],
                      conserved=[("energy",), (), ("energy",), ("energy",)], index=[4, 5, 6, 7])
    cols = sweep_report.columns(res)
    rows = res.rows()
    assert list(cols) == ["member"] + list(rows[0])
    assert list(cols["member"]) == [4, 5, 6, 7] and list(cols["status"]) == ["success", "success", "diverged", "suspect"]
    for k in rows[0]:
        want = [r[k] for r in rows]
        if k == "status":
            assert list(cols[k]) == want
        else:
            assert np.array_equal(cols[k], np.array(want, float), equal_nan=True), k
    assert np.isnan(cols["energy_drift"][1])  # member 5 is damped: its energy change is not drift
