"""Hinge models (diffmb.origami.hinges): tape springs and deployment stops.

Energy consistency (tau = -dU/dtheta), the documented moment-rotation curve, one-sided
stops, energy conservation of an undamped run with the models' potential in the energy
diagnostic, and ``diffmb run --animate``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import cli
from diffmb.origami import build, hinges as H, map_fold
from diffmb.scenarios.origami import PAPER_PANEL_INERTIA
from diffmb.simulation.integrate import simulate

TAPE = dict(K_flat=1.0, M_peak=0.3, M_plateau=0.1, M_peak_neg=0.6, M_plateau_neg=0.05)


def _tape(u, **kw):
    p = dict(TAPE, **kw)
    return H.tape_spring_moment(u, **p), H.tape_spring_energy(u, **p)


def test_tape_spring_torque_is_minus_energy_gradient():
    # each side evaluated as one program (operation by operation: ~200 small ones)
    u = jnp.linspace(-4.0, 4.0, 801)
    M, _ = jax.jit(_tape)(u)
    dU = jax.jit(jax.vmap(jax.grad(lambda x: H.tape_spring_energy(x, **TAPE))))(u)
    np.testing.assert_allclose(M, dU, atol=1e-13)
    # through the factory: tau_fn = -grad potential, per hinge, on the right coordinates
    hs = H.make_hinges((6, 7, 8), 9, tape_spring=dict(TAPE, rest=[0.0, 0.1, -0.2], damping=0.0),
                       stops=dict(upper=[1.0, 1.5, 2.0], lower=-1.2, k=50.0))
    q = jnp.asarray(np.r_[np.zeros(6), [1.3, -0.4, -1.7]])
    tau = jax.jit(hs.tau_fn)(0.0, q, jnp.zeros(9), hs.forcing)
    np.testing.assert_allclose(tau, -jax.jit(jax.grad(hs.potential))(q, hs.forcing), atol=1e-13)
    assert np.all(np.asarray(tau[:6]) == 0.0)
    # smooth and finite at flat, also for the parameter gradients (fitting)
    g = jax.jit(jax.grad(lambda p: H.tape_spring_energy(0.0, *p) + H.tape_spring_moment(0.0, *p)))((1.0, 0.3, 0.1))
    assert all(np.isfinite(float(x)) for x in g)


def test_tape_spring_curve_peak_and_plateau():
    K, Mp, Ml = 1.0, 0.3, 0.1
    tp = float(H.tape_spring_peak(K, Mp, Ml))
    dM = jax.grad(H.tape_spring_moment)
    assert float(dM(0.0, K, Mp, Ml)) == pytest.approx(K, rel=1e-12)  # K_flat near flat
    assert float(H.tape_spring_moment(tp, K, Mp, Ml)) == pytest.approx(Mp, rel=1e-12)
    assert abs(float(dM(tp, K, Mp, Ml))) < 1e-12  # the peak is a stationary point
    u = jnp.linspace(0.0, 8 * tp, 40001)
    M = np.asarray(H.tape_spring_moment(u, K, Mp, Ml))
    assert M.max() == pytest.approx(Mp, rel=1e-6)  # ... and the global maximum
    assert float(u[np.argmax(M)]) == pytest.approx(tp, rel=1e-3)
    far = M[np.asarray(u) > 5 * tp]
    np.testing.assert_allclose(far, Ml, atol=2e-3 * Mp)  # the buckled plateau
    assert float(H.tape_spring_moment(np.pi, K, Mp, Ml)) == pytest.approx(Ml, rel=1e-3)
    # asymmetry: the negative side has its own peak and plateau
    tpn = float(H.tape_spring_peak(K, 0.6, 0.05))
    M_neg = float(H.tape_spring_moment(-tpn, K, Mp, Ml, 0.6, 0.05))
    assert M_neg == pytest.approx(-0.6, rel=1e-12)
    assert float(H.tape_spring_moment(-6 * tpn, K, Mp, Ml, 0.6, 0.05)) == pytest.approx(-0.05, rel=1e-2)
    with pytest.raises(ValueError, match="M_peak"):
        H.tape_spring_params(2, K_flat=1.0, M_peak=0.1, M_plateau=0.2)


def test_stop_engages_only_beyond_the_limit():
    lo, hi, k, c = -1.0, 2.0, 40.0, 3.0
    th = jnp.linspace(-3.0, 4.0, 701)
    inside = (th >= lo) & (th <= hi)
    tau = H.stop_torque(th, 0.7, lo, hi, k, c)
    assert np.all(np.asarray(tau)[np.asarray(inside)] == 0.0)
    assert np.all(np.asarray(H.stop_energy(th, lo, hi, k))[np.asarray(inside)] == 0.0)
    assert np.all(np.asarray(tau)[np.asarray(th > hi)] < 0)  # pushes back inside
    assert np.all(np.asarray(H.stop_torque(th, 0.0, lo, hi, k))[np.asarray(th < lo)] > 0)
    dU = jax.vmap(jax.grad(H.stop_energy), (0, None, None, None))(th, lo, hi, k)
    np.testing.assert_allclose(H.stop_torque(th, 0.0, lo, hi, k), -dU, atol=1e-12)
    # contact damping only dissipates: tau_damp * theta_dot <= 0
    for thd in (-2.0, 2.0):
        damp = H.stop_torque(th, thd, lo, hi, k, c) - H.stop_torque(th, 0.0, lo, hi, k)
        assert np.all(np.asarray(damp) * thd <= 0)
    assert float(H.stop_torque(hi + 0.1, 0.0, lo, hi, k)) == pytest.approx(-k * 0.1)


def test_smooth_stop_is_conservative_and_tends_to_the_exact_contact():
    """The smooth switch (width w): torque = -dU/dtheta; within k w / 2 of the exact contact
    torque everywhere (the smooth ramp differs from max(x, 0) by at most w log 2), and
    derivatives with respect to every stop number stay finite when a limit is absent (inf)."""
    lo, hi, k, c = -1.0, 2.0, 40.0, 3.0
    th = jnp.linspace(-3.0, 4.0, 701)
    for w in (0.05, 0.01, 0.002):
        dU = jax.vmap(jax.grad(H.stop_energy), (0, None, None, None, None))(th, lo, hi, k, w)
        tau = H.stop_torque(th, 0.0, lo, hi, k, 0.0, w)
        np.testing.assert_allclose(tau, -dU, atol=1e-10)
        gap = np.abs(np.asarray(tau - H.stop_torque(th, 0.0, lo, hi, k)))
        assert gap.max() < k * w, (w, gap.max())
        for thd in (-2.0, 2.0):  # the contact damping still only dissipates
            damp = H.stop_torque(th, thd, lo, hi, k, c, w) - H.stop_torque(th, 0.0, lo, hi, k, 0.0, w)
            assert np.all(np.asarray(damp) * thd <= 0)
    f = lambda v: H.stop_torque(v[0], 0.3, -jnp.inf, v[1], v[2], v[3], v[4])
    for x in (0.1, 0.25):
        J = jax.jacfwd(f)(jnp.array([x, 0.2, 20.0, 5.0, 0.01]))
        assert np.all(np.isfinite(np.asarray(J)))


def test_hinge_structure_is_static_and_hashable():
    a = H.make_hinges((6, 7), 8, tape_spring=TAPE)
    b = H.make_hinges((6, 7), 8, tape_spring=dict(TAPE, K_flat=2.0))
    assert a.tau_fn == b.tau_fn and hash(a.tau_fn) == hash(b.tau_fn)  # new numbers: same jit key
    assert a.potential == b.potential
    with pytest.raises(ValueError, match="indices"):
        H.make_hinges((6, 8), 8, tape_spring=TAPE)


def test_energy_conserved_with_tape_springs_and_stops():
    """Free-flying 1 x 3 open strip (root + 2 hinges), undamped tape springs and elastic
    stops: KE + spring PE + hinge potential is conserved; the hinges swing through the
    snap-through peak and the stops are engaged at the start."""
    pattern = map_fold(1, 3, panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_PANEL_INERTIA,
                       k_row=0.0, k_col=0.05, fold=0.8)
    hs = H.make_hinges((6, 7), 8, tape_spring=dict(K_flat=1.0, M_peak=0.3, M_plateau=0.1),
                       stops=dict(upper=0.7, k=20.0))
    system, _ = build(pattern, tau_fn=hs.tau_fn, forcing=hs.forcing, potential_fn=hs.potential)
    params = system.default_params()
    q0 = np.asarray(params["q0"])
    assert np.all(np.abs(q0[6:]) > 0.7)  # starts inside the stops
    tr = simulate(system, t1=0.5, dt=1e-3, params=params, saveat=51)
    theta = np.asarray(tr.xs[:, 6:8])
    e = np.asarray(tr.diagnostics["energy"])
    U = np.asarray(jax.vmap(lambda x: hs.potential(x[:8], hs.forcing))(tr.xs))
    assert tr.status == "success"
    assert U[0] > 0.5 * e[0]  # the hinge models hold most of the energy at the start
    assert np.abs(theta).min() < 0.5  # passed the peak towards flat
    # (~1e-6: RK4 steps across the stop limit, where the stop stiffness jumps; 1e-12 before)
    assert np.abs(e - e[0]).max() < 1e-5 * abs(e[0])
    # without the hinge potential the "energy" is visibly not conserved
    assert np.abs((e - U) - (e[0] - U[0])).max() > 1e-2 * abs(e[0])


@pytest.mark.slow  # ~9 s (renders a GIF); the hinge models' physics stays in the default job
def test_cli_animate_writes_gif(tmp_path, capsys):
    out = tmp_path / "runs"
    # RK4: 15 steps saved at their ends, so 16 frames (under the default Dopri5 the run keeps
    # 1,001 interpolated save points and the GIF gets its full 150 frames: 9 s of drawing)
    rc = cli.main(["run", "fold-4panel", "--t1", "0.015", "--dt", "1e-3", "--solver", "rk4", "--out", str(out),
                   "--no-plot", "--quiet", "--animate", "--set", "stop=3.5"])
    assert rc == 0
    gif = out / "fold-4panel.gif"
    assert gif.exists() and gif.read_bytes()[:4] == b"GIF8"
    from PIL import Image

    with Image.open(gif) as im:
        assert getattr(im, "n_frames", 1) > 10


def test_scenario_hinge_options_validate():
    from diffmb import scenarios

    sc = scenarios.get("fold-4panel")
    system, params, values = sc.make({"hinge": 1, "stop": np.pi})
    assert values["hinge"] == 1.0 and set(params["forcing"]) == {"tape", "stop"}
    assert float(params["model"].stiffness[6:].max()) == 0.0  # tape springs replace K
    system0, params0, _ = sc.make({})
    assert params0["forcing"] is None and float(params0["model"].stiffness[6]) == 0.1
    with pytest.raises(ValueError, match="hinge"):
        sc.make({"hinge": 2})
    # a deployment latch 0.2 rad past flat, opposite each hinge's fold; without damping
    # the scenario still declares energy conserved (contact's resting creases elastic)
    v = {"hinge": 1.0, "latch": 0.2, "stop_k": 20.0, "stop_c": 0.0, "contact_rest_damping": 0.0}
    system, params, _ = sc.make(v, None)
    stop, fold = params["forcing"]["stop"], np.sign(np.asarray(params["q0"])[list(system.tau_fn.indices)])
    assert set(fold) == {-1.0, 1.0}  # folds both ways: both latch sides are built
    np.testing.assert_array_equal(np.asarray(stop["lower"])[fold > 0], -0.2)
    np.testing.assert_array_equal(np.asarray(stop["upper"])[fold < 0], 0.2)
    assert "energy" in sc.conserved(sc.resolve(v)) and "energy" not in sc.conserved(sc.resolve({**v, "stop_c": 1.0}))
    from diffmb.scenarios.origami import outlines

    assert outlines("pendulum", {}) is None if "pendulum" in scenarios.REGISTRY else True
    ol = outlines("fold-4panel")
    assert [n for n, _ in ol] == ["r", "j", "m", "l"] and all(len(v) == 4 for _, v in ol)


@pytest.mark.slow  # reverse-mode compile through simulate: ~30 s of CPU
def test_gradient_wrt_hinge_parameters_matches_finite_differences():
    """The per-hinge arrays in ``forcing`` are fittable: d(final angle)/d(M_peak, k_stop)."""
    pattern = map_fold(1, 2, panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_PANEL_INERTIA,
                       k_row=0.0, k_col=0.0, fold=0.8)
    hs = H.make_hinges((6,), 7, tape_spring=dict(K_flat=1.0, M_peak=0.3, M_plateau=0.1),
                       stops=dict(upper=0.7, k=20.0, c=1.0))
    system, _ = build(pattern, tau_fn=hs.tau_fn, forcing=hs.forcing, potential_fn=hs.potential)
    params = system.default_params()

    def final_angle(mp, k):
        p = dict(params, forcing={"tape": dict(params["forcing"]["tape"], M_peak=mp),
                                  "stop": dict(params["forcing"]["stop"], k=k)})
        return simulate(system, t1=0.3, dt=1e-2, params=p, saveat=2).x_final[6]

    mp, k = jnp.asarray([0.3]), jnp.asarray([20.0])
    g = jax.grad(final_angle, argnums=(0, 1))(mp, k)
    for i, (x, h) in enumerate(((mp, 1e-6), (k, 1e-5))):
        args = [mp, k]
        args[i] = x + h
        fp = final_angle(*args)
        args[i] = x - h
        fm = final_angle(*args)
        fd = float((fp - fm) / (2 * h))
        assert float(g[i][0]) == pytest.approx(fd, rel=1e-5, abs=1e-9)
        assert abs(fd) > 1e-4  # the parameter matters over this horizon


# slow job: two 10 s runs (~7 s); the default job keeps the latch's limits and declared
# conservation (test_scenario_hinge_options_validate), energy with stops and the hinge
# potential over a run (test_energy_conserved_with_tape_springs_and_stops) and the smooth
# switch tending to the exact contact (test_smooth_stop_is_conservative_and_tends_to_the_exact_contact)
@pytest.mark.slow
def test_latch_strike_conserves_energy_and_the_smooth_switch_integrates_better():
    """fold-4panel with a tape spring and an undamped deployment latch 0.2 rad past flat:
    the panel strikes the latch (theta_j < -0.2) and rebounds; the energy, with the
    latch's stored energy, is conserved. RK4 at 1 ms keeps it to 1e-9 with a 0.01 rad
    switch (measured 4.8e-10) against 5e-7 for the exact contact's kink."""
    import diffmb
    from diffmb import scenarios

    sc = scenarios.get("fold-4panel")
    drift = {}
    for w in (0.01, 0.0):
        v = {"hinge": 1.0, "latch": 0.2, "stop_k": 20.0, "stop_c": 0.0, "stop_width": w, "contact": 0.0}
        assert "energy" in sc.conserved(sc.resolve(v))
        system, params, _ = sc.make(v, None)
        tr = diffmb.simulate(system, params=params, t1=10.0, dt=1e-3, saveat=101)
        assert np.asarray(tr.xs)[:, system.state_names.index("theta_j")].min() < -0.3
        drift[w] = tr.summary()["energy"]["max_rel_change"]
    assert drift[0.01] < 1e-8 and drift[0.0] < 1e-5
    assert drift[0.01] < 0.1 * drift[0.0]
