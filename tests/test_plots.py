"""What the figures hand matplotlib, not their pixels: the MRP attitude broken where it
switches to the shadow set, coinciding curves drawn once and labelled with every name,
the fit's residual panels with units, units on the violation axes, the reconfiguration
plot's fixed bodies and body names. Synthetic trajectories: no simulation, no compiling."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np

from diffmb.design.data import Data
from diffmb.design.records import Record
from diffmb.design.sensors import Sensor
from diffmb.simulation.trajectory import Trajectory
from diffmb.viewer.plots import contact_figure, coordinates_figure, energy_figure, fit_figure, violation_figure


def _traj(columns: dict, *, roles=(), violation=None, diagnostics=None) -> Trajectory:
    names = tuple(columns)
    q = np.column_stack([np.asarray(v, float) for v in columns.values()])
    n = q.shape[0]
    return Trajectory(ts=np.linspace(0.0, 1.0, n), xs=np.hstack([q, 0 * q]),
                      diagnostics=diagnostics or {"energy": 1.0 + 1e-9 * np.arange(n)},
                      violation=violation or {}, t_final=np.asarray(1.0), x_final=np.zeros(2 * len(names)),
                      n_steps=np.asarray(n - 1), n_rejected=np.asarray(0), status_code=np.asarray(0),
                      event_mask=np.zeros(1, bool),
                      state_names=names + tuple(f"{c}_dot" for c in names), coordinate_names=names,
                      solver="rk4", roles=tuple(roles))


def _axis(fig, ylabel_start):
    (ax,) = [a for a in fig.axes if a.get_ylabel().startswith(ylabel_start)]
    return ax


def _line(ax, name):
    (line,) = [ln for ln in ax.get_lines() if name in ln.get_label()]
    return line


# ------------------------------------------------------------------ coordinates
def _turning_hub(n=301):
    """A hub turning 1.5 turns of pi about y: its MRP reaches |sigma| = 1 at pi and is
    switched to the shadow set there, as the integrator does."""
    phi = np.linspace(0.0, 1.5 * np.pi, n)
    s2 = np.tan(phi / 4)
    s2 = np.where(s2 > 1.0, -1.0 / np.maximum(s2, 1.0), s2)
    return {"r_free_sigma1": 0 * phi, "r_free_sigma2": s2, "r_free_sigma3": 0 * phi,
            "theta_j": np.cos(phi)}


def test_mrp_is_broken_at_the_shadow_set_switch():
    cols = _turning_hub()
    assert np.abs(np.diff(cols["r_free_sigma2"])).max() > 1.9  # the data do jump from +1 to -1
    fig = coordinates_figure(_traj(cols))
    ax = _axis(fig, "attitude (MRP)")
    line = _line(ax, "r_free_sigma2")
    t, y = (np.asarray(a, float) for a in line.get_data())
    assert np.isnan(y).sum() == 1  # one switch, one break
    k = int(np.flatnonzero(np.isnan(y))[0])
    assert y[k - 1] > 0.99 and y[k + 1] < -0.99 and t[k - 1] < t[k] < t[k + 1]
    steps = np.abs(np.diff(y))
    assert np.nanmax(steps) < 0.1  # no segment jumps by more than a step's motion
    # sigma1 and sigma3 stay 0: one curve for both, broken at the same time
    both = _line(ax, "r_free_sigma1")
    assert "r_free_sigma3" in both.get_label() and np.isnan(np.asarray(both.get_ydata(), float)).sum() == 1
    assert any("shadow set" in t.get_text() for t in ax.get_legend().get_texts())
    # the hinge angle is no attitude: nothing inserted
    assert not np.isnan(np.asarray(_line(_axis(fig, "angles"), "theta_j").get_ydata(), float)).any()


def test_identical_hinge_series_are_drawn_once_with_a_label_counting_them():
    t = np.linspace(0.0, 1.0, 200)
    flat = np.full_like(t, np.pi)
    cols = {"theta_7": np.pi * np.cos(t), "theta_6": flat, "theta_5": flat.copy(), "theta_4": -flat,
            "theta_2": flat + 1e-7 * t, "theta_1": flat.copy(), "theta_3": -flat.copy(), "theta_9": np.sin(t)}
    fig = coordinates_figure(_traj(cols, roles=(("hinge", tuple(cols)),)))
    ax = _axis(fig, "angles")
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert len(labels) == 4  # theta_7, the four at +pi, the two at -pi, theta_9
    four = _line(ax, "theta_6").get_label()
    # natural order, approximately equal (1e-7 apart), how many and how close
    assert four.replace("\n", " ") == ("theta_1 \u2248 theta_2 \u2248 theta_5 \u2248 theta_6 "
                                      "(4 hinges, within 1e-07 rad)")
    two = _line(ax, "theta_4").get_label()
    assert two.replace("\n", " ") == "theta_3 = theta_4 (2 hinges)"  # exactly equal
    assert _line(ax, "theta_7").get_label() == "theta_7" and _line(ax, "theta_9").get_label() == "theta_9"
    legend = [tx.get_text() for tx in ax.get_legend().get_texts()]
    assert legend == labels


def test_coinciding_positions_that_are_not_hinges_are_counted_as_coordinates():
    t = np.linspace(0.0, 1.0, 50)
    zero = np.zeros_like(t)
    cols = {f"{a}{i}": zero for i in (1, 2, 3, 4) for a in "xyz"}
    cols["x3"] = 3.5 + 0.2 * np.sin(8 * t)
    fig = coordinates_figure(_traj(cols))
    ax = _axis(fig, "positions [m]")
    assert len(ax.get_lines()) == 2
    label = _line(ax, "x1").get_label().replace("\n", " ")
    assert label == "x1 = y1 = z1 = x2 = ... = y4 = z4 (11 coordinates)"


# ------------------------------------------------------------------ violation, energy
def test_violation_axes_have_units():
    t = np.linspace(0.0, 1.0, 100)
    fig = violation_figure(_traj({"a": t}, violation={"velocity": 1e-10 * (1 + t), "position": 1e-12 * (1 + t)}))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert labels[0].startswith("position violation [m, rad]")  # position first, whatever the dict order
    assert labels[1].startswith("velocity violation [m/s, rad/s]")
    for ax in fig.axes:
        assert ax.get_yscale() == "log"


def test_a_value_between_zeros_is_drawn_as_a_dot():
    v = np.zeros(100)
    v[40] = 1e-15
    fig = violation_figure(_traj({"a": np.arange(100.0)}, violation={"position": v}))
    dots = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "."]
    assert len(dots) == 1 and np.asarray(dots[0].get_ydata()).tolist() == [1e-15]
    assert any("exactly 0 (99 points)" == tx.get_text() for tx in fig.axes[0].get_legend().get_texts())


def test_energy_axis_says_energy_minus_work_when_that_is_what_is_tracked():
    t = np.linspace(0.0, 1.0, 20)
    tr = _traj({"x1": t}, diagnostics={"energy": 2.0 + 1e-12 * t, "work": 0 * t})
    labels = [ax.get_ylabel() for ax in energy_figure(tr).axes]
    assert "(E - W)" in labels[0] and "[J]" in labels[0] and "[-]" in labels[1]
    labels = [ax.get_ylabel() for ax in energy_figure(_traj({"x1": t})).axes]
    assert labels[0] == r"$E(t) - E(0)$ [J]"


# ------------------------------------------------------------------ fit
def _fit_case():
    t = np.linspace(0.0, 4.0, 41)
    rng = np.random.default_rng(0)
    sensors = (Sensor("tip_j", "marker", body="j", sigma=5e-4), Sensor("hub", "gyro", body="r", sigma=1.75e-4))
    columns = ("tip_j_x", "tip_j_y", "tip_j_z", "hub_x", "hub_y", "hub_z")
    fitted = np.column_stack([4 - 0.1 * t ** 2, 2 + 0 * t, 0.1 * t ** 2, 0 * t, 0.1 * t, 0 * t])
    records, preds = [], []
    for k in range(2):
        noise = np.r_[[5e-4] * 3, [1.75e-4] * 3] * rng.standard_normal((t.size, 6))
        records.append(Record(Data(t, columns, fitted + noise, f"run_{k}.csv"),
                              {"spin": 0.05} if k else {}, f"run_{'ab'[k]}"))
        preds.append(fitted)
    reports = [{"label": r.label, "rms": {"tip_j": 4.8e-4, "hub": 1.7e-4}, "units": {"tip_j": "m", "hub": "rad/s"}}
               for r in records]
    result = SimpleNamespace(columns=columns, predictions=np.stack(preds), records=reports,
                             noise=dict(zip(columns, [5e-4] * 3 + [1.75e-4] * 3)))
    return result, records, sensors


def test_fit_figure_has_a_residual_panel_with_units_under_each_sensor():
    result, records, sensors = _fit_case()
    fig = fit_figure(result, records, sensors, title="fold-4panel")
    assert len(fig.axes) == 2 * len(sensors) * len(records)
    residual = [ax for ax in fig.axes if ax.get_ylabel().startswith("residual")]
    assert len(residual) == len(sensors) * len(records)
    units = sorted({ax.get_ylabel().split("[")[1].rstrip("]") for ax in residual})
    assert units == ["mm", "mrad/s"]  # 0.5 mm and 0.2 mrad/s read as such, not as 0.0005 m
    # the residual drawn is measured - fitted, in mm
    first = [ax for ax in residual if "[mm]" in ax.get_ylabel()][0]
    y = np.asarray(first.get_lines()[0].get_ydata(), float)
    rec = records[0]
    np.testing.assert_allclose(y, 1e3 * (rec.data.values[:, 0] - result.predictions[0, :, 0]))
    assert any(tx.get_text() == "rms 0.48 mm" for tx in first.texts)
    # the measured panels keep the sensor's own unit
    assert sorted({ax.get_ylabel() for ax in fig.axes if not ax.get_ylabel().startswith("residual")}) == \
        ["hub [rad/s]", "tip_j [m]"]


def test_fit_figure_column_titles_do_not_run_together():
    result, records, sensors = _fit_case()
    fig = fit_figure(result, records, sensors)
    fig.canvas.draw()
    titles = [ax.title for ax in fig.axes if ax.get_title()]
    assert [t.get_text() for t in titles] == ["run_a", "run_b  (spin=0.05)"]
    a, b = (t.get_window_extent() for t in titles)
    assert a.x1 < b.x0


# ------------------------------------------------------------------ reconfiguration
def test_reconfiguration_plot_draws_fixed_bodies_grey_once_and_names_the_bodies():
    import networkx as nx
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Circle

    from diffmb import scenarios
    from diffmb.formulations.udwadia_kalaba.reconfig import graph_figure

    system, params, _ = scenarios.get("uk-hinged-cubes").make({})
    x = np.asarray(system.init_state(params))
    moved = x.copy()
    moved[1] -= 0.125  # the moving cube elsewhere in the second node
    G = nx.DiGraph()
    G.add_node(0, state=x.tolist())
    G.add_node(1, state=moved.tolist())
    G.add_edge(0, 1, potential="-y", joints={})
    fig = graph_figure(G, system, title="uk-hinged-cubes")
    graph_ax, ax2 = fig.axes[:2]
    circles = [p for p in ax2.patches if isinstance(p, Circle)]
    fixed = [c for c in circles if c.get_fill()]
    (i_fixed,) = system.fixed
    assert len(fixed) == len(system.fixed)  # drawn once, not once per node
    node_colors = [to_rgba(ln.get_color()) for ln in ax2.get_legend().get_lines()]
    assert to_rgba(fixed[0].get_edgecolor()) not in node_colors
    moving = [c for c in circles if not c.get_fill()]
    assert len(moving) == 2 * system.n and {to_rgba(c.get_edgecolor()) for c in moving} == set(node_colors)
    texts = sorted(t.get_text() for t in ax2.texts)
    moving_name = system.body_names[system.moving[0]]
    assert texts == sorted([f"{system.body_names[i_fixed]}\n(fixed)", moving_name, moving_name])
    # the graph's nodes wear their configuration's colour
    faces = graph_ax.collections[0].get_facecolors()
    assert [tuple(np.round(f[:3], 6)) for f in faces] == [tuple(np.round(c[:3], 6)) for c in node_colors]


def test_fit_figure_takes_records_of_different_lengths():
    result, records, sensors = _fit_case()
    short = records[1].data
    records[1] = Record(Data(short.t[:30], short.names, short.values[:30], short.path), {}, "run_b")
    fig = fit_figure(result, records, sensors)  # predictions stay padded to the longest
    residual = [ax for ax in fig.axes if ax.get_ylabel().startswith("residual")]
    assert sorted(len(ax.get_lines()[0].get_ydata()) for ax in residual) == [30, 30, 41, 41]


def test_a_contact_gap_panel_with_no_armed_pair_says_so_instead_of_drawing_nothing():
    """fold-2x4's first second with contact on: every pair starts stacked, so none is armed
    and the gap is infinite at every save point; the log axis would be empty."""
    ts = np.linspace(0.0, 1.0, 11)
    diag = {"crease_angle": np.full((11, 3), np.pi - 0.1), "panel_overlap": np.zeros(11),
            "contact_gap": np.full(11, np.inf)}
    fig = contact_figure(SimpleNamespace(ts=ts, diagnostics=diag), "strip")
    (note,) = fig.axes[2].texts
    assert "no armed pair" in note.get_text() and "infinite" in note.get_text()
    diag["contact_gap"] = np.where(ts > 0.5, 1e-3, np.inf)   # armed after half the run: drawn, no note
    fig = contact_figure(SimpleNamespace(ts=ts, diagnostics=diag), "strip")
    assert not fig.axes[2].texts and np.isfinite(fig.axes[2].lines[0].get_ydata()).sum() == 5


def test_a_bodys_quaternion_has_a_panel_of_its_own():
    """The Udwadia-Kalaba form's ``<body>_q1..q4`` are an attitude, not 'other coordinates'."""
    ts = np.linspace(0.0, 1.0, 5)
    fig = coordinates_figure(_traj({"c2_x": ts, "c2_q1": 0 * ts, "c2_q2": 0 * ts, "c2_q3": np.sin(ts / 2),
                                    "c2_q4": np.cos(ts / 2), "left1": ts ** 2}))
    assert [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()] == [
        "positions [m]", "attitude (quaternion) [-]", "other coordinates"]
