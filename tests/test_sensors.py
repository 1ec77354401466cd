"""Measurement models: body frames of every formulation, marker / gyro / accelerometer
outputs, sensor files, and the traced save times a record's start offset needs."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import scenarios
from diffmb.design.data import read_data, state_units, write_data
from diffmb.design.fit import synth
from diffmb.design.records import load_records
from diffmb.design.sensors import SensorModel, column_units, parse_sensors, read_sensors
from diffmb.simulation.integrate import states_at


def _moving_state(system, params, seed):
    """The initial configuration with arbitrary velocities (a kinematic identity holds for
    any state; the constraints need not)."""
    x = np.array(system.init_state(params), float)
    n = len(system.coordinate_names)
    x[n:] = np.random.default_rng(seed).normal(size=x.size - n) * 0.7
    return jnp.asarray(x)


# fold-4panel (~6 s) in the slow job: the default job keeps the tree's body velocities against
# pose derivatives (test_tree::test_body_velocities_match_pose_derivatives), a tree's frames in
# the accelerometer check, and MuJoCo's fold-4panel markers and gyro against ours (test_fit_sensors)
@pytest.mark.parametrize("name", [pytest.param("fold-4panel", marks=pytest.mark.slow), "slider-crank",
                                  "uk-hinged-cubes"])
def test_body_frames_rates_are_the_time_derivatives_of_the_poses(name):
    """Tree (ABA), Kane's cut-joint system and Udwadia-Kalaba: the origin velocity is
    d pos/dt and the body-axes rate is the axial vector of -R_dot R^T, both along the
    system's own vector field."""
    system, params, _ = scenarios.get(name).make({}, None)
    x = _moving_state(system, params, 3)
    xdot = system.vector_field(0.0, x, params)
    bf = system.body_frames(x, params)
    assert bf.pos.shape == (len(system.body_names), 3)
    _, dpos = jax.jvp(lambda y: system.body_frames(y, params).pos, (x,), (xdot,))
    _, drot = jax.jvp(lambda y: system.body_frames(y, params).rot, (x,), (xdot,))
    W = -drot @ jnp.swapaxes(bf.rot, -1, -2)
    w = jnp.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], -1)
    assert float(jnp.abs(bf.omega).max()) > 0.1  # it moves
    np.testing.assert_allclose(np.asarray(dpos), np.asarray(bf.velocity), atol=1e-12)
    np.testing.assert_allclose(np.asarray(w), np.asarray(bf.omega), atol=1e-12)
    np.testing.assert_allclose(np.asarray(bf.rot @ jnp.swapaxes(bf.rot, -1, -2)),
                               np.broadcast_to(np.eye(3), bf.rot.shape), atol=1e-12)


# slow job: ~5 s; the default job keeps the accelerometer as a marker's second derivative, sensors
# read from records, and MuJoCo's markers and gyro against ours (test_fit_sensors)
@pytest.mark.slow
def test_pendulum_marker_gyro_and_accelerometer_closed_form():
    """A pendulum released from theta0: the angle sensor reads the coordinate, the gyro's
    magnitude is |theta_dot| (one hinge axis), the body origin (the pivot) stays put, and an
    accelerometer there reads gravity's magnitude (specific force of a fixed point)."""
    sc = scenarios.get("pendulum")
    system, params, _ = sc.make({"theta0": 1.0}, None)
    decl = [{"name": "tip", "type": "marker", "body": "link1", "point": [0.0, 0.0, 0.0]},
            {"name": "rate", "type": "gyro", "body": "link1"},
            {"name": "acc", "type": "accel", "body": "link1", "point": [0.0, 0.0, 0.0]},
            {"name": "theta", "type": "angle"}]
    sensors = parse_sensors(decl, system)
    data, tr = synth(sc, {"theta0": 1.0}, sensors=sensors, t1=1.0, samples=11)
    y = dict(zip(data.names, data.values.T))
    xs = np.asarray(tr.xs)
    assert np.ptp(y["theta"]) > 0.5
    np.testing.assert_allclose(y["theta"], xs[:, 0], atol=0)
    gyro = np.stack([y["rate_x"], y["rate_y"], y["rate_z"]], 1)
    np.testing.assert_allclose(np.linalg.norm(gyro, axis=1), np.abs(xs[:, 1]), atol=1e-12)
    # the body origin is the pivot of a pendulum: fixed; its specific force is -g
    pivot = np.stack([y["tip_x"], y["tip_y"], y["tip_z"]], 1)
    np.testing.assert_allclose(pivot, pivot[:1].repeat(len(pivot), 0), atol=1e-12)
    acc = np.stack([y["acc_x"], y["acc_y"], y["acc_z"]], 1)
    np.testing.assert_allclose(np.linalg.norm(acc, axis=1), 9.81, rtol=1e-12)


def test_accelerometer_is_the_second_derivative_of_a_marker():
    """An accelerometer off the pivot against a central second difference of a marker at
    the same point (world axes, rotated into the body; gravity added back)."""
    sc = scenarios.get("double-pendulum")
    system, params, _ = sc.make({}, None)
    p = [0.3, -0.7, 0.1]
    sensors = parse_sensors([{"name": "m", "type": "marker", "body": "link2", "point": p},
                             {"name": "a", "type": "accel", "body": "link2", "point": p}], system)
    model = SensorModel.of(sensors, system)
    h, t = 1e-4, 0.7
    tr = diffmb.simulate(system, params=params, t1=1.0, solver="dopri8", rtol=1e-12, atol=1e-13,
                         saveat=np.array([t - h, t, t + h]))
    out = np.asarray(jax.jit(jax.vmap(lambda x: model(system, t, x, params)))(tr.xs))
    pos = out[:, :3]
    acc_world = (pos[2] - 2 * pos[1] + pos[0]) / h**2
    R = np.asarray(system.body_frames(tr.xs[1], params).rot[system.body_names.index("link2")])
    g = np.asarray(params["model"].gravity)
    expected = R @ (acc_world - g)
    assert np.linalg.norm(acc_world) > 1.0
    np.testing.assert_allclose(out[1, 3:], expected, atol=2e-5 * np.linalg.norm(expected))


def test_states_at_traced_times_differentiate_along_the_vector_field():
    """d x(t_s) / d t_s = f(x(t_s)): the derivative a record's start offset needs."""
    system, params, _ = scenarios.get("pendulum").make({}, None)

    def at(s):
        xs, _ = states_at(system, jnp.array([0.0, s, 0.9]), t1=1.0, params=params, dt=1e-3)
        return xs[1]

    s = 0.4321
    d = jax.jacfwd(at)(s)
    f = system.vector_field(s, at(s), params)
    np.testing.assert_allclose(np.asarray(d), np.asarray(f), rtol=1e-6, atol=1e-9)
    xs, code = states_at(system, jnp.array([0.0, 0.5, 1.0]), t1=1.0, params=params, dt=1e-3)
    ref = diffmb.simulate(system, params=params, t1=1.0, dt=1e-3, saveat=np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(np.asarray(xs), np.asarray(ref.xs), atol=1e-12)
    assert int(code) == int(ref.status_code)


def _err(tmp_path, doc, match):
    system, _, _ = scenarios.get("fold-4panel").make({}, None)
    p = tmp_path / "s.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ValueError, match=match) as e:
        read_sensors(p, system)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("doc, match", [
    ({"sensors": [{"name": "a", "type": "marker", "body": "zz", "point": [0, 0, 0]}]},
     r"sensor 'a': field 'body': 'zz' is not a body; bodies: r, j, m, l"),
    ({"sensors": [{"name": "a", "type": "laser", "body": "r"}]}, r"sensor 'a': field 'type'"),
    ({"sensors": [{"name": "a", "type": "marker", "body": "r", "point": [0, 0]}]},
     r"sensor 'a': field 'point': expected 3 finite numbers"),
    ({"sensors": [{"name": "a", "type": "gyro", "body": "r", "sigma": -1}]}, r"sensor 'a': field 'sigma'"),
    ({"sensors": [{"name": "a", "type": "gyro", "body": "r", "frame": "x"}]}, r"sensor 'a': unknown field\(s\) frame"),
    ({"sensors": [{"name": "a", "type": "angle", "coordinate": "theta_q"}]}, r"field 'coordinate': 'theta_q'"),
    ({"sensors": [{"name": "a", "type": "gyro", "body": "r"}, {"name": "a", "type": "gyro", "body": "j"}]},
     r"sensor 'a': declared twice"),
    ('{"sensors": [\n{"name": "a",, }]}', r"line 2: not valid JSON"),
    ({"gyros": []}, r"expected an object with a \"sensors\" list"),
])
def test_sensor_file_errors_name_file_sensor_and_field(tmp_path, doc, match):
    _err(tmp_path, doc, match)


def test_records_read_sensors_from_csv_headers_and_check_units(tmp_path):
    sc = scenarios.get("pendulum")
    system, _, _ = sc.make({}, None)
    sensors = parse_sensors([{"name": "tip", "type": "marker", "body": "link1", "point": [0, -1, 0],
                              "sigma": 1e-3}], system)
    data, _ = synth(sc, {}, sensors=sensors, t1=0.5, samples=6)
    units = column_units(sensors, state_units(system))
    path = write_data(tmp_path / "a.csv", data, system, units=units,
                      comments=[f"sensor: {json.dumps(sensors[0].to_json())}", "set: theta0=0.5"])
    records, decl = load_records([path], system)
    assert decl == sensors
    assert records[0].overrides == {"theta0": 0.5} and records[0].label == "a"
    np.testing.assert_allclose(records[0].data.values, data.values, rtol=0, atol=0)
    bad = tmp_path / "b.csv"
    bad.write_text(open(path).read().replace("tip_y [m]", "tip_y [mm]"))
    with pytest.raises(ValueError, match=r"b.csv: column 'tip_y': unit mismatch: 'mm' given, the sensor measures in m"):
        load_records([bad], system)
    with pytest.raises(ValueError, match=r"is not a state of this system nor a sensor column"):
        read_data(path, system, {"other": "m"})
    bad.write_text("# set: theta0=abc\n" + open(path).read())
    with pytest.raises(ValueError, match=r"b.csv: row 1: '# set:' expects NAME=NUMBER pairs"):
        load_records([bad], system)
