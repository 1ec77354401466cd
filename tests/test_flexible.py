"""Flexible multibody dynamics (Banerjee & Lemak): modal data, speeds, recursion, loads."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.formulations import flexible as fx
from diffmb.formulations.flexible import frame_modes as fe, modal as md
from diffmb.simulation.integrate import simulate
from diffmb.system import TreeSystem
from diffmb.tree import api
from diffmb.tree.model import ModelBuilder

BETA = np.asarray(fe.CANTILEVER_BETA_L)


def _beam(n_modes=3, stiff=1.0, zeta=0.0, n_el=8):
    return fe.cantilever_beam(1.5, n_el, 4.0 * stiff, 1.2, n_modes, EI2=6.0 * stiff, damping_ratio=zeta,
                              rigid_mass=0.4, rigid_com=(0.1, 0.0, 0.0),
                              rigid_inertia=np.diag([0.02, 0.03, 0.04]))


def _chain(speeds="efficient", algorithm="recursive", freeze=False, beam=None, gravity=(0.0, 0.0, -9.81)):
    """Fixed-base chain: revolute -> Hooke -> spherical, flexible bodies."""
    beam = beam or _beam()
    bodies = [
        fx.FlexBody("b1", beam, "world", "revolute", axis=(0, 1, 0), q0=[0.4], u0=[0.5], eta0=[0.02, -0.01, 0.01],
                    eta_dot0=[0.1, 0.0, -0.2]),
        fx.FlexBody("b2", beam, "b1", "universal", hinge="tip", axis=(0, 0, 1), axis2=(0, 1, 0),
                    q0=[0.3, -0.2], u0=[0.6, -0.4], eta0=[0.0, 0.01, 0.0]),
        fx.FlexBody("b3", beam, "b2", "spherical", hinge="tip", q0=[0.1, -0.05, 0.2], u0=[0.3, 0.2, -0.1]),
    ]
    return fx.build(bodies, speeds=speeds, algorithm=algorithm, gravity=gravity, freeze_modes=freeze)


def _joint_coords(system, x):
    names = system.coordinate_names
    idx = [k for k, n in enumerate(names) if "_eta" not in n]
    return np.asarray(x)[..., idx]


# ------------------------------------------------------------------ modal data / FE
def test_fe_cantilever_frequencies_within_half_percent():
    EI, mu, L = 3.0, 1.5, 2.0
    data = fe.cantilever_beam(L, 30, EI, mu, 3, EI2=1e3 * EI)  # stiff second plane: modes 1-3 bend along up
    w = data.frequencies()
    exact = BETA[:3] ** 2 * np.sqrt(EI / (mu * L**4))
    err = np.abs(w / exact - 1)
    assert np.all(err < 5e-3), err
    # unit modal mass, K = diag(w^2)
    assert np.allclose(data.modal_mass(), np.eye(3), atol=1e-10)


def test_plate_grid_strip_matches_free_free_beam():
    D, rho, L, b = 2.0, 3.0, 4.0, 0.2
    data = fe.plate_grid(L, b, 40, 1, D, rho, 3)
    exact = np.asarray(fe.FREE_FREE_BETA_L[:3]) ** 2 * np.sqrt(D * b / (rho * b * L**4))
    assert np.all(np.abs(data.frequencies() / exact - 1) < 5e-3)


def test_geometric_stiffness_is_southwell_coefficient():
    # spin about z of a cantilever along x: K_G = Omega^2 * 1.193 on the first mode (Southwell)
    data = fe.cantilever_beam(1.0, 30, 1.0, 1.0, 2, EI2=1e3)
    W = -np.diag([1.0, 1.0, 0.0])  # [w~]^2 for w = e_z
    KG = np.einsum("ab,abij->ij", W, data.geometric_stiffness)
    assert KG[0, 0] == pytest.approx(1.1933, rel=2e-3)


def test_single_body_vibrates_at_cantilever_frequency():
    """A beam on a locked (prescribed) hinge: eta_1(t) = eta0 cos(w1 t) at the FE frequency."""
    data = fe.cantilever_beam(2.0, 30, 3.0, 1.5, 2, EI2=1e3 * 3.0)
    w1 = data.frequencies()[0]
    exact = BETA[0] ** 2 * np.sqrt(3.0 / (1.5 * 16.0))
    body = fx.FlexBody("beam", data, "world", "revolute", axis=(0, 0, 1), prescribed={0: lambda t, p: 0.0 * t},
                       eta0=[1e-3, 0.0])
    s = fx.build([body])
    T = 2 * np.pi / w1
    tr = simulate(s, t1=T, dt=T / 400, saveat=np.array([0.0, T / 2, T]))
    eta = np.asarray(tr["beam_eta1"])
    assert eta[1] == pytest.approx(-1e-3, rel=1e-6)
    assert eta[2] == pytest.approx(1e-3, rel=1e-6)
    assert abs(w1 / exact - 1) < 5e-3


def test_modal_file_roundtrip_and_bad_data(tmp_path):
    data = _beam()
    path = md.save_modal(data, tmp_path / "beam.npz")
    back = md.load_modal(path)
    assert np.allclose(back.frequencies(), data.frequencies())
    good = dict(nodes=data.nodes, node_mass=data.node_mass, phi=data.phi, frequencies=data.frequencies())
    with pytest.raises(ValueError, match=r"boom: field 'phi' has shape"):
        md.modal_from_arrays("boom", **{**good, "phi": data.phi[:, :2]})
    with pytest.raises(ValueError, match=r"boom: field 'node_mass' has negative"):
        md.modal_from_arrays("boom", **{**good, "node_mass": -data.node_mass})
    with pytest.raises(ValueError, match=r"boom: field 'phi': the modal mass matrix .* singular"):
        phi = data.phi.copy()
        phi[:, :, 1] = phi[:, :, 0]
        md.modal_from_arrays("boom", **{**good, "phi": phi})
    with pytest.raises(ValueError, match=r"boom: field 'frequencies' contains non-finite"):
        md.modal_from_arrays("boom", **{**good, "frequencies": np.array([1.0, np.nan, 2.0])})
    with pytest.raises(ValueError, match=r"exactly one of the fields 'frequencies' and 'stiffness'"):
        md.modal_from_arrays("boom", **{**good, "stiffness": np.eye(3)})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": [[0, 0, 0]], "node_mass": [1.0], "phi": [[[1.0], [0.0], [0.0]]],
                               "frequencies": [1.0], "colour": 3}))
    with pytest.raises(ValueError, match=r"bad .*unknown field\(s\) \['colour'\]"):
        md.load_modal(bad)
    with pytest.raises(ValueError, match="not found"):
        md.load_modal(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match=r"body 'b2': hinge on parent 'b1': .*unknown node 'nope'"):
        fx.build([fx.FlexBody("b1", data, "world", "revolute"),
                           fx.FlexBody("b2", data, "b1", "revolute", hinge="nope")])
    with pytest.raises(ValueError, match=r"body 'b2': Hooke joint axes must be perpendicular"):
        fx.build([fx.FlexBody("b1", data, "world", "revolute"),
                           fx.FlexBody("b2", data, "b1", "universal", hinge="tip", axis=(1, 0, 0),
                                       axis2=(1, 1, 0))])


# ------------------------------------------------------------------ dynamics
@pytest.fixture(scope="module")
def efficient_run():
    s = _chain("efficient")
    return s, simulate(s, t1=0.5, dt=5e-4, saveat=11)


def test_customary_and_efficient_speeds_agree(efficient_run):
    se, tre = efficient_run
    sc = _chain("customary")
    trc = simulate(sc, t1=0.5, dt=5e-4, saveat=11)
    n = se.n_coords
    xe, xc = np.asarray(tre.xs[:, :n]), np.asarray(trc.xs[:, :n])
    assert np.abs(xe - xc).max() < 1e-8
    assert np.abs(xe[-1] - xe[0]).max() > 0.05  # it moved
    ee, ec = np.asarray(tre.diagnostics["energy"]), np.asarray(trc.diagnostics["energy"])
    assert np.abs(ee - ec).max() < 1e-8 * np.abs(ee).max()


@pytest.mark.slow
def test_recursive_matches_dense_kane():
    s = _chain("efficient")
    d = _chain("efficient", algorithm="dense")
    p = s.default_params()
    x = s.init_state(p)
    assert np.allclose(s.vector_field(0.0, x, p), d.vector_field(0.0, x, p), rtol=1e-10, atol=1e-10)


def test_energy_conserved_without_damping_or_input(efficient_run):
    _, tr = efficient_run
    e = np.asarray(tr.diagnostics["energy"])
    assert np.abs(e - e[0]).max() < 1e-8 * np.abs(e).max()


# slow job: two runs (~6 s) of the rigid limit; the default job keeps the flexible formulation's
# two speed choices agreeing, its energy and its prescribed-motion load
@pytest.mark.slow
def test_frozen_modes_reproduce_rigid_tree():
    beam = _beam()
    s = _chain("efficient", freeze=True, beam=beam)
    m, com, Ic = beam.rigid_properties()
    tip = beam.nodes[beam.node_index("tip")]
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_body("b1", "world", "revolute", axis=(0, 1, 0), mass=m, com=com, inertia=Ic)
    b.add_body("b2", "b1", "universal", axis=(0, 0, 1), axis2=(0, 1, 0), pos=tip, mass=m, com=com, inertia=Ic)
    b.add_body("b3", "b2", "spherical", pos=tip, mass=m, com=com, inertia=Ic)
    model = b.build()
    q0 = [0.4, 0.3, -0.2, 0.1, -0.05, 0.2]
    # rigid qd: spherical takes the relative angular velocity in child axes = B^-1 sigma_dot
    sig = jnp.asarray([0.1, -0.05, 0.2])
    w_rel = fx.speeds.binv(sig) @ jnp.asarray([0.3, 0.2, -0.1])
    qd0 = np.r_[0.5, 0.6, -0.4, np.asarray(w_rel)]
    rig = TreeSystem(model, q0=q0, qd0=qd0)
    tr_r = simulate(rig, t1=0.5, dt=5e-4, saveat=11)
    tr_f = simulate(s, t1=0.5, dt=5e-4, saveat=11)
    qf = np.asarray(tr_f.xs[:, :s.n_coords])
    qr = np.asarray(tr_r.xs[:, :6])
    assert np.abs(qf - qr).max() < 1e-9
    assert np.abs(qr[-1] - qr[0]).max() > 0.05


def test_prescribed_motion_load_matches_rigid_inverse_dynamics():
    """All joints prescribed, very stiff bodies: hinge loads -> rigid RNEA torques."""
    beam = _beam(stiff=1e4, zeta=0.3)
    prof = lambda a, f: (lambda t, p: a * jnp.sin(f * t))
    bodies = [
        fx.FlexBody("b1", beam, "world", "revolute", axis=(0, 1, 0), prescribed={0: prof(0.5, 2.0)}),
        fx.FlexBody("b2", beam, "b1", "universal", hinge="tip", axis=(0, 0, 1), axis2=(0, 1, 0),
                    prescribed={0: prof(0.4, 3.0), 1: prof(-0.3, 2.5)}),
    ]
    s = fx.build(bodies, speeds="efficient")
    ts = np.linspace(0.4, 1.0, 4)
    tr = simulate(s, t1=1.0, dt=2e-4, saveat=ts)
    loads = np.asarray(tr.diagnostics["load"])
    m, com, Ic = beam.rigid_properties()
    tip = beam.nodes[beam.node_index("tip")]
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_body("b1", "world", "revolute", axis=(0, 1, 0), mass=m, com=com, inertia=Ic)
    b.add_body("b2", "b1", "universal", axis=(0, 0, 1), axis2=(0, 1, 0), pos=tip, mass=m, com=com, inertia=Ic)
    model = b.build()
    amp, fr = np.array([0.5, 0.4, -0.3]), np.array([2.0, 3.0, 2.5])
    for k, t in enumerate(ts):
        q, qd, qdd = amp * np.sin(fr * t), amp * fr * np.cos(fr * t), -amp * fr**2 * np.sin(fr * t)
        tau = np.asarray(api.inverse_dynamics(model, jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)))
        assert np.abs(loads[k] - tau).max() < 1e-2 * np.abs(tau).max(), (t, loads[k], tau)


# ------------------------------------------------------------------ momentum
def _rotation_complete_body(seed=0):
    """Two lumped nodes whose 6 modes are their free translations (plus random hinge
    rotations ``psi``, damping and geometric stiffness): the modal space is closed under
    ``w x``, so eq. (1) is the exact velocity field and the floating chain is an exact
    particle/rigid system whose momenta must be conserved to integration error."""
    rng = np.random.default_rng(seed)
    K, n = 2, 6
    phi = np.zeros((K, 3, n))
    for k in range(K):
        phi[k, :, 3 * k:3 * k + 3] = np.eye(3)
    Q = rng.standard_normal((n, n))
    KG = rng.standard_normal((3, 3, n, n))
    return md.modal_from_arrays(
        "cb", nodes=np.array([[1.0, 0.1, 0.0], [2.0, -0.1, 0.05]]), node_mass=np.array([0.7, 0.5]), phi=phi,
        psi=0.3 * rng.standard_normal((K, 3, n)), stiffness=20.0 * (Q @ Q.T + n * np.eye(n)), damping=0.5 * np.eye(n),
        rigid_mass=1.0, rigid_com=(0.3, 0.0, 0.0), rigid_inertia=np.diag([0.1, 0.2, 0.3]),
        geometric_stiffness=0.5 * (KG + KG.transpose(0, 1, 3, 2)), node_names=("mid", "tip"))


# slow job: a free-floating flexible run (~10 s); the default job keeps the flexible formulation's
# two speed choices agreeing, its energy and its prescribed-motion load
@pytest.mark.slow
def test_free_floating_chain_conserves_momentum_with_prescribed_joint():
    """Free-floating two-body chain on a prescribed revolute joint, no external load: total linear and
    angular momentum (including the deformation's ``int (Phi q) x v dm``) are conserved;
    the internal actuation, damping and geometric stiffening must not change them."""
    data = _rotation_complete_body()
    slew = lambda t, p: p["A"] * (t - jnp.sin(2 * jnp.pi * t / p["T"]) * p["T"] / (2 * jnp.pi))
    bodies = [
        fx.FlexBody("b1", data, "world", "free", u0=[0.1, -0.2, 0.3, 0.05, 0.0, 0.1], eta0=0.05 * np.ones(6),
                    eta_dot0=0.1 * np.arange(6)),
        fx.FlexBody("b2", data, "b1", "revolute", hinge="tip", axis=(0, 0, 1), prescribed={0: slew},
                    eta0=-0.03 * np.ones(6)),
    ]
    s = fx.build(bodies, geometric_stiffening=True,
                          prescribed_params={"b2": {"A": jnp.asarray(1.0), "T": jnp.asarray(1.0)}})
    tr = simulate(s, t1=0.6, dt=1e-3, saveat=4)
    h = np.asarray(tr.diagnostics["angular_momentum"])
    lin = np.asarray(tr.diagnostics["linear_momentum"])
    assert np.abs(np.asarray(tr.xs)[-1, :6] - np.asarray(tr.xs)[0, :6]).max() > 0.1  # it moved
    assert np.abs(h - h[0]).max() < 1e-9 * np.abs(h[0]).max(), np.abs(h - h[0]).max()
    assert np.abs(lin - lin[0]).max() < 1e-9 * np.abs(lin[0]).max(), np.abs(lin - lin[0]).max()
    # without the deformation term the moment of momentum is far from conserved: the test sees it
    p = s.default_params()

    def deformation_part(x):
        xc, u = s.split(x)
        ws, _, poses = s.kinematics(xc, s.clock_time(x), u, p)
        return sum(poses[i][0].T @ fx.speeds.deformation_moment(p["bodies"][i]["I"], s.blocks(xc)[i][1], w)
                   for i, w in enumerate(ws))

    dh = jax.jit(jax.vmap(deformation_part))(tr.xs)
    h_old = h - np.asarray(dh)
    assert np.abs(h_old - h_old[0]).max() > 1e-3 * np.abs(h[0]).max()
