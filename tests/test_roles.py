"""Coordinate roles: the design tools read what a system declares (hinge angles, the
hub's angular rate), never name patterns."""

from __future__ import annotations

import numpy as np
import pytest

import diffmb
from diffmb import scenarios
from diffmb.batch import sweep
from diffmb.data import default_columns
from diffmb.scenarios.pendulum import chain_model
from diffmb.trajectory import Trajectory


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
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    named = _chain(["theta_a", "theta_b"])                       # hinge-like names, nothing declared
    declared = _chain(["shoulder", "elbow"], roles={"hinge": ("shoulder", "elbow")})
    assert named.coordinate_roles == {} and default_columns(named) == ("theta_a", "theta_b")
    for system, has in ((named, False), (declared, True)):
        p = system.default_params()
        batch = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (2,) + x.shape) if eqx.is_array(x) else x, p)
        res = sweep(system, batch, t1=0.05, dt=1e-2)
        assert ("time_to_flat" in res.rows()[0]) is has


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
