"""Health checks judged on the motion's natural scale (``diffmb.simulation.health``)."""

import dataclasses

import numpy as np
import pytest

import diffmb
from diffmb import scenarios
from diffmb.simulation import health
from diffmb.simulation.trajectory import Trajectory

#: Fulton & Schaub's fold-4panel member with damping (sec. 4.2): panel j passes through
#: flat at t = 9.985 s
PAPER_MEMBER = {"K": "0.19749114882187768", "c": "0.049163716273959226"}


def _traj(ts, diagnostics):
    n = len(ts)
    return Trajectory(ts=np.asarray(ts, float), xs=np.zeros((n, 2)), diagnostics=diagnostics,
                      violation={}, t_final=np.asarray(ts[-1] if n else np.nan), x_final=np.zeros(2),
                      n_steps=np.asarray(n), n_rejected=np.asarray(0), status_code=np.asarray(0),
                      event_mask=np.zeros(1, bool), state_names=("x", "x_dot"),
                      coordinate_names=("x",), solver="rk4")


def test_momentum_near_zero_is_judged_on_the_bodies_momenta():
    t = np.linspace(0.0, 1.0, 1001)
    rng = np.random.default_rng(0)
    h = 1e-15 * rng.standard_normal((1001, 3))  # a release from rest: h = 0 up to round-off
    h[500:, 0] += 7e-9  # and a change of 7e-9 at a flat crossing: right to 5e-9 of the scale
    scale = 1.0 + 0.5 * np.sin(3 * t)           # the bodies' own momenta
    # on its own size h "jumps" by 100 % of itself; on the natural scale the change is tiny
    (old,) = health.jumps(t, h)
    assert old["relative"] > 0.9
    assert health.jumps(t, h, natural=scale, rel=health.REL_MOMENTUM) == []
    kicked = h.copy()
    kicked[700:, 2] += 1e-4  # an impulse of 1e-4 of the natural scale in one interval
    (j,) = health.jumps(t, kicked, natural=scale, rel=health.REL_MOMENTUM)
    assert j["t0"] == pytest.approx(t[699]) and j["relative"] == pytest.approx(1e-4 / scale.max(), rel=1e-3)
    tr = _traj(t, {"angular_momentum": kicked, "momentum_scale": scale})
    (w,) = health.check(tr, ("angular_momentum",))
    assert w["kind"] == "momentum_jump" and w["t"] == pytest.approx(t[700])


def test_energy_near_zero_is_judged_on_the_kinetic_energy():
    t = np.linspace(0.0, 1.0, 1001)
    ke = 2.0 * np.sin(np.pi * t) ** 2
    e = 1e-10 * np.cos(40 * t)  # E = 0 (a slew from rest), conserved to 1e-10
    assert health.check(_traj(t, {"energy": e, "kinetic_energy": ke}), ("energy",)) == []
    e2 = e.copy()
    e2[400:] += 0.01  # 0.5 % of the largest kinetic energy, in one interval
    (w,) = health.check(_traj(t, {"energy": e2, "kinetic_energy": ke}), ("energy",))
    assert w["kind"] == "energy_jump" and w["relative"] == pytest.approx(0.005, rel=1e-3)


@pytest.mark.parametrize("n", [0, 1])
def test_a_run_that_saved_nothing_has_no_warnings_and_no_traceback(n):
    t = np.full(3, np.nan)
    t[:n] = 0.0
    e = np.where(np.isfinite(t), 1.0, np.nan)
    tr = _traj(t, {"energy": e, "kinetic_energy": e, "angular_momentum": np.zeros((3, 3)),
                   "momentum_scale": e})
    assert health.check(tr, ("energy", "angular_momentum")) == []
    assert health.jumps(np.zeros(0), np.zeros((0, 3))) == []


def test_paper_flat_crossing_caught_at_1_ms_and_clean_at_half_a_millisecond():
    """RK4 with Baumgarte (a = 100), the paper's settings: at 1 ms the momentum jumps by
    5e-4 at the flat crossing (an impulse; flagged), and the damped fold's energy rises; at 0.5 ms it changes by 7e-9 over the
    whole run, which is right, while |h| ~ 0 (a release from rest) made the old rule call
    that 98 % of its scale."""
    sc, paper = scenarios.get("fold-4panel"), {**PAPER_MEMBER, "contact": "0"}   # the paper's model
    values = sc.resolve(paper)
    system, params, _ = sc.make(paper, "baumgarte")
    assert sc.conserved(values) == ("energy_falls", "angular_momentum")  # damped: the energy may only fall
    # one compiled program for both steps: the same save count and step budget
    runs = {dt: diffmb.simulate(system, params=params, t1=10.0, dt=dt, saveat=10001, max_steps=1 << 15)
            for dt in (1e-3, 5e-4)}
    for tr in runs.values():
        h = np.linalg.norm(np.asarray(tr.diagnostics["angular_momentum"]), axis=1)
        s = np.asarray(tr.diagnostics["momentum_scale"])
        assert np.all(h <= s * (1 + 1e-12)) and s.max() > 1.0  # sum of |h_k| bounds |sum h_k|
    rise, w = health.check(runs[1e-3], sc.conserved(values), stabilization="baumgarte")
    assert w["kind"] == "momentum_jump" and 9.98 < w["t"] < 9.99
    # and the energy of this damped fold rises there by a fifth of its scale (0.6 J), where
    # damping can only take it out
    assert rise["kind"] == "energy_rise" and rise["t"] == w["t"] and 0.1 < rise["relative"] < 0.3
    # the advice names what helps here (projection), not a smaller step, which does not
    assert w["message"].endswith("a smaller --dt does not help: rerun with --stabilization projection")
    assert health.check(runs[5e-4], sc.conserved(values)) == []


def test_an_unconstrained_jump_is_advised_a_smaller_step():
    t = np.linspace(0.0, 1.0, 101)
    e = np.where(t < 0.5, 1.0, 1.2)
    (w,) = health.check(_traj(t, {"energy": e}), ("energy",), solver="rk4")
    assert "smaller --dt or an adaptive --solver dopri5" in w["message"]
    # an adaptive run's --dt is only its first step: the advice is its tolerances, and in
    # float32, whose tolerances stop at 100 round-offs, float64
    (w,) = health.check(_traj(t, {"energy": e}), ("energy",), solver="dopri5")
    assert w["message"].endswith("rerun with a tighter --rtol and --atol") and "--dt" not in w["message"]
    tr = dataclasses.replace(_traj(t, {"energy": e}), xs=np.zeros((len(t), 2), np.float32))
    (w,) = health.check(tr, ("energy",), solver="dopri5")
    assert "rerun in float64 (without DIFFMB_FLOAT32)" in w["message"] and "--dt" not in w["message"]
