"""A user's own MJCF file, fitted: its joints' numbers are named parameters
(``damping.<joint>``, ``stiffness.<joint>``, ``armature.<joint>``, ``mass.<body>``) for
``--set``, sweeps, tuning and fits, and a fit to records MuJoCo made from the same file
recovers them."""

from __future__ import annotations

import numpy as np
import pytest

from diffmb.design.data import Data
from diffmb.design.fit import fit
from diffmb.design.mujoco_record import mujoco_file_record
from diffmb.design.sensors import parse_sensors
from diffmb.scenarios.files import mjcf_scenario

ARM = '''<mujoco model="arm"><option gravity="0 0 -9.81"><flag contact="disable"/></option>
<default><joint armature="0.01"/></default>
<worldbody><body name="upper" pos="0 0 1"><joint name="shoulder" axis="0 1 0" damping="0.05"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
  <body name="forearm" pos="0.3 0 0"><joint name="elbow" axis="0 1 0" damping="0.02" stiffness="1.5" springref="-20"/>
    <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025" mass="0.4"/></body></body></worldbody>
<keyframe><key name="release" qpos="0.6 0.9"/></keyframe></mujoco>'''

SENSORS = [{"name": "hand", "type": "marker", "body": "forearm", "point": [0.25, 0.0, 0.0], "sigma": 0.5e-3},
           {"name": "forearm_rate", "type": "gyro", "body": "forearm", "sigma": np.deg2rad(0.05)}]


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    path = tmp_path_factory.mktemp("arm") / "arm.xml"
    path.write_text(ARM)
    return mjcf_scenario(str(path)), path


def test_a_files_numbers_are_named_parameters(arm):
    sc, _ = arm
    system, params, _ = sc.make({"damping.elbow": 0.3, "armature.shoulder": 0.2, "mass.forearm": 0.8,
                                 "stiffness.elbow": 4.0}, None)
    model = params["model"]
    assert model.coordinate_names == ("shoulder", "elbow")
    np.testing.assert_allclose(np.asarray(model.damping), [0.05, 0.3])
    np.testing.assert_allclose(np.asarray(model.stiffness), [0.0, 4.0])
    np.testing.assert_allclose(np.asarray(model.armature), [0.2, 0.01])
    assert float(model.mass[model.body_index("forearm")]) == 0.8
    with pytest.raises(ValueError, match="no body 'hand'; bodies: upper, forearm"):
        sc.make({"mass.hand": 1.0}, None)
    with pytest.raises(ValueError, match="no coordinate 'knee'"):
        sc.make({"damping.knee": 1.0}, None)


# slow job: a whole fit (~11 s); the default job keeps the file's named numbers
# (test_a_files_numbers_are_named_parameters), fits (test_design) and MuJoCo's records against
# ours (test_fit_sensors)
@pytest.mark.slow
def test_fit_a_files_damping_and_stiffness_to_mujocos_records_of_it(arm):
    """MuJoCo simulates the file (RK4, 0.5 ms) for 1.5 s; a 0.5 mm marker and a
    0.05 deg/s gyro sampled at 40 Hz with seeded noise; the elbow's damping and stiffness
    from a 3x-off start come back within 1 % and inside three standard errors."""
    sc, path = arm
    system, _, _ = sc.make({}, None)
    sensors = parse_sensors(SENSORS, system)
    ref = mujoco_file_record(path, sensors, t1=1.5, rate=40)
    sigma = np.array([s.sigma for s in sensors for _ in s.columns])
    noisy = ref.values + sigma * np.random.default_rng(0).standard_normal(ref.values.shape)
    data = Data(t=ref.t, names=ref.names, values=noisy, path="mujoco")
    truth = {"damping.elbow": 0.02, "stiffness.elbow": 1.5}
    res = fit(sc, data, list(truth), sensors=sensors, overrides={k: 3 * v for k, v in truth.items()})
    assert res.converged, res
    for name, true in truth.items():
        assert abs(res.params[name] - true) < 0.01 * true, (name, res.params)
        assert abs(res.params[name] - true) < 3 * res.stderr[name], (name, res.params, res.stderr)


def test_a_urdfs_numbers_are_named_parameters_too():
    """The same names on a URDF: a joint's ``<dynamics damping>`` and a link's mass (the
    coupler's, with its fixed tip link merged into it)."""
    from pathlib import Path

    from diffmb.scenarios.files import urdf_scenario

    sc = urdf_scenario(str(Path(__file__).resolve().parents[1] / "examples" / "fourbar.urdf"))
    _, base, _ = sc.make({}, None)
    _, params, _ = sc.make({"damping.crank": 0.3, "mass.coupler": 2.5}, None)
    model, before = params["model"], base["model"]
    assert float(model.damping[model.coordinate_names.index("crank")]) == 0.3
    assert float(model.mass[model.body_index("coupler")]) == 2.5
    others = [i for i, n in enumerate(model.body_names) if n != "coupler"]
    np.testing.assert_array_equal(np.asarray(model.mass)[others], np.asarray(before.mass)[others])
