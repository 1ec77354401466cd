"""Coordinate roles: the design tools read what a system declares (hinge angles, the
hub's angular rate), never name patterns."""

from __future__ import annotations

import equinox as eqx
import numpy as np
import pytest

import diffmb
from diffmb import scenarios
from diffmb.design.batch import _metrics, sweep
from diffmb.design.data import default_columns
from diffmb.scenarios.pendulum import chain_model
from diffmb.simulation.trajectory import Trajectory


def _chain(names, roles=None):
    model = chain_model([1.0, 0.8], [1.0, 0.5], 9.81, 0.0, names=names)
    return diffmb.TreeSystem(model, q0=[0.3, -0.2], roles=roles)


def test_origami_declares_its_hinges_and_hub():
    system, _, _ = scenarios.get("fold-4panel").make({})
    roles = system.coordinate_roles
    assert roles["hinge"] == ("theta_j", "theta_m", "theta_l")
    assert roles["hub_rate"] == ("r_free_wx", "r_free_wy", "r_free_wz")
    assert default_columns(system) == roles["hinge"]


def test_metrics_follow_declared_roles_not_names():
    # the metrics a sweep reports of each member's run (batch._metrics, what its vmapped
    # program computes), here of one run each: a sweep's vmapped trace costs 5 s a structure
    named = _chain(["theta_a", "theta_b"])                       # hinge-like names, nothing declared
    declared = _chain(["shoulder", "elbow"], roles={"hinge": ("shoulder", "elbow")})
    assert named.coordinate_roles == {} and default_columns(named) == ("theta_a", "theta_b")
    for system, has in ((named, False), (declared, True)):
        metrics = eqx.filter_jit(_metrics)(diffmb.simulate(system, t1=0.05, dt=1e-2, saveat=6), np.deg2rad(1.0))
        assert ("time_to_flat" in metrics) is has and ("peak_hinge_rate" in metrics) is has
        assert {"status", "t_final", "energy_drift"} <= set(metrics)


def test_roles_are_checked_and_saved(tmp_path):
    with pytest.raises(ValueError, match="hinge names \\['knee'\\] are not in the system's coordinate names"):
        _chain(["hip", "ankle"], roles={"hinge": ("knee",)})
    with pytest.raises(ValueError, match="unknown role 'hub'"):
        _chain(["hip", "ankle"], roles={"hub": ("hip",)})
    system = _chain(["hip", "ankle"], roles={"hinge": ("ankle",)})
    tr = diffmb.simulate(system, t1=0.05, dt=1e-2)
    np.testing.assert_array_equal(tr.role_columns("hinge"), [1])
    back, _ = Trajectory.load(tr.save(tmp_path / "t.npz"))
    assert back.roles == (("hinge", ("ankle",)),) and back.role_columns("hub_rate").size == 0


def test_every_formulation_declares_roles_from_its_structure():
    """Kane: revolute joints are hinges; flexible: revolute/Hooke angles, modal amplitudes
    and the free root's body rate; Cartesian formulations: positions."""
    crank, _, _ = scenarios.get("slider-crank").make({})
    assert crank.coordinate_roles == {"hinge": ("theta1", "theta2")}          # s3 is prismatic
    four, _, _ = scenarios.get("flex-4body").make({})
    roles = four.coordinate_roles
    assert roles["hinge"] == ("body3_theta1", "body3_theta2")                 # body2's is prescribed
    assert roles["hub_rate"] == ("body1_wx", "body1_wy", "body1_wz")
    assert len(roles["elastic"]) == 40 and roles["elastic"][0] == "body1_eta1"
    customary, _, _ = scenarios.get("flex-4body").make({"speeds": 1})
    assert "hub_rate" not in customary.coordinate_roles                      # MRP rates, not body rates
    tbar, _, _ = scenarios.get("tbar").make({})
    assert tbar.coordinate_roles == {"position": tbar.coordinate_names}
    cubes, _, _ = scenarios.get("uk-hinged-cubes").make({})
    pos = cubes.coordinate_roles["position"]
    assert len(pos) == 3 * len(cubes.moving_bodies) and all(n[-2:] in ("_x", "_y", "_z") for n in pos)


def test_peak_hub_angle_of_a_steady_spin_is_rate_times_time():
    """A free body spinning about a principal axis keeps its rate: after T its attitude has
    turned by omega T about that axis (torque-free, exact), whatever the MRP shadow set."""
    import jax.numpy as jnp

    from diffmb.tree.model import ModelBuilder

    b = ModelBuilder()
    b.add_body("hub", "world", "free", mass=10.0, inertia=np.diag([2.0, 3.0, 4.0]))
    model = b.build()
    system = diffmb.TreeSystem(model, roles={"hub_rate": model.velocity_names[:3],
                                             "hub_attitude": model.coordinate_names[:3]})
    rates = np.array([0.3, 1.1, 2.0])                            # rad/s about the major axis z
    qd0 = np.zeros((3, 6))
    qd0[:, 2] = rates
    import equinox as eqx
    import jax

    p = system.default_params()
    batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (3,) + x.shape) if eqx.is_array(x) else x, p)
    batch["qd0"] = jnp.asarray(qd0)
    res = sweep(system, batch, t1=2.0, dt=1e-3, saveat=201)
    rows = res.rows()
    np.testing.assert_allclose([r["peak_hub_rate"] for r in rows], rates, rtol=1e-12)
    # 2 rad/s turns past pi at t = 1.57 s: the MRPs switch shadow set there, and the angle
    # from the start (at most pi) comes back down; its peak is on the save grid
    turned = rates[:, None] * np.linspace(0.0, 2.0, 201)
    expected = np.max(np.minimum(turned, 2 * np.pi - turned), axis=1)
    np.testing.assert_allclose([r["peak_hub_angle"] for r in rows], expected, rtol=1e-9)


def test_origami_declares_its_hub_attitude():
    system, _, _ = scenarios.get("fold-4panel").make({})
    assert system.coordinate_roles["hub_attitude"] == ("r_free_sigma1", "r_free_sigma2", "r_free_sigma3")
    four, _, _ = scenarios.get("flex-4body").make({"speeds": 1})
    assert four.coordinate_roles["hub_attitude"] == ("body1_sigma1", "body1_sigma2", "body1_sigma3")
