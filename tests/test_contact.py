"""Panel contact (issue 58) against closed forms: two free panels meeting face-parallel,
a panel dropped onto a fixed one, a hinged panel slapped into its crease limit; the
detector on the map folds; gradients through a contact event."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import scenarios, system as system_module
from diffmb.math import barrier as br
from diffmb.origami import build
from diffmb.origami.contact import (
    ARMING_BITS,
    REST_DAMPING,
    ContactOptions,
    certified_reach,
    free_panels,
    panel_stiffness,
    rest_depth,
)
from diffmb.origami.pattern import Crease, CreasePattern, Panel
from diffmb.simulation import health, integrate


def _square(half, z=0.0):
    return np.array([[-half, -half, z], [half, -half, z], [half, half, z], [-half, half, z]])


def _inertia(m, a):
    return np.diag([m * a * a / 12, m * a * a / 12, m * a * a / 6])


def _two_panels(gravity=0.0, fixed_big=False, gap=0.02, v=0.1, damping=0.0, kappa=1.0):
    """A 1 m, 1 kg square centred over a 2 m, 1 kg one, ``gap`` above it, closing at ``v``
    (each moving ``v / 2``; the small one alone when the big one is fixed)."""
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, -gravity))
    if not fixed_big:
        b.add_body("big", "world", "free", mass=1.0, inertia=_inertia(1.0, 2.0))
    b.add_body("small", "world", "free", mass=1.0, inertia=_inertia(1.0, 1.0))
    model = b.build()
    q0 = np.zeros(model.nq)
    qd0 = np.zeros(model.nv)
    s = model.body_slices[model.body_index("small")][0]
    q0[s + 5] = gap
    if fixed_big:
        qd0[s + 5] = -v
        energy = 0.5 * v * v + gravity * gap
    else:
        g = model.body_slices[model.body_index("big")][0]
        qd0[s + 5], qd0[g + 5] = -v / 2, v / 2
        energy = 2 * 0.5 * (v / 2) ** 2
    panels = {"world" if fixed_big else "big": _square(1.0), "small": _square(0.5)}
    element = free_panels(model, panels, ContactOptions(damping=damping, kappa_scale=kappa), energy)
    return diffmb.TreeSystem(model, q0, qd0, elements=(element,)), element


@pytest.fixture(scope="module")
def elastic():
    system, element = _two_panels()
    params = system.default_params()
    tr = diffmb.simulate(system, t1=0.5, solver="dopri5", rtol=1e-12, atol=1e-15, saveat=501)
    return system, element, params, tr


def _body_rates(system, x):
    q, qd = system.split(x)
    return np.asarray(qd).reshape(-1, 6)


def test_a_long_step_cannot_carry_a_panel_through_another(elastic, monkeypatch):
    """Free flight has no local error, so an adaptive solver takes long steps: two panels
    20 mm apart closing at 10 m/s would be carried through each other and out of the
    barrier's reach on the far side, where the distance, unsigned, is positive again. The
    step check (each armed pair's distance to its reach against how far the step moves the
    two panels) rejects such a step, and the panels rebound. Without the check they pass
    through (measured: in 3 steps)."""
    system, _ = _two_panels(v=10.0)
    small = system.model.body_slices[system.model.body_index("small")][0]
    big = system.model.body_slices[system.model.body_index("big")][0]

    def run(saveat):            # 501: the `elastic` fixture's program (same structure and settings)
        tr = diffmb.simulate(system, t1=0.05, solver="dopri5", rtol=1e-12, atol=1e-15, saveat=saveat)
        return np.asarray(tr.x_final)

    x = run(501)
    assert x[small + 5] - x[big + 5] > 0.0                       # still above it
    qd = np.asarray(system.split(x)[1])
    assert qd[small + 5] > 0 > qd[big + 5]                        # rebounding
    # the controller without the check: the step's error alone (its fraction ignored)
    monkeypatch.setattr(integrate._LimitedSteps, "adapt_step_size",
                        lambda self, t0, t1, y0, y1, args, err, order, state: self.inner.adapt_step_size(
                            t0, t1, y0, y1, args, err[0], order, state))
    x = run(502)                 # another save-point count: traced again, unchecked
    assert x[small + 5] - x[big + 5] < -0.1                       # passed through


def test_a_run_from_a_given_state_makes_its_first_plan_there(monkeypatch):
    """The step check reads the plans made at a step's two ends; a run's first step reads
    one made at its start. The start program makes it, with the start state at the
    system's own start and at a state given as ``x0`` from its coordinates (the command
    line's segments); inside a trace the poses alone make it. The same plan each way, and
    the same run, whose first step must already be limited (the panels 20 mm apart
    closing at 10 m/s, as in the test above, rebound instead of passing through)."""
    system, _ = _two_panels(v=10.0)
    params = system.default_params()
    x0, plan = system.start_and_plan(params)
    assert plan[0]["made"]
    for a, b in zip(jax.tree.leaves(plan), jax.tree.leaves(system.start_plan(x0, params))):
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=0, atol=1e-15)
    small = system.model.body_slices[system.model.body_index("small")][0]
    big = system.model.body_slices[system.model.body_index("big")][0]
    finals = []
    # a given state's plan comes from the start program, compiled for the start already:
    # no program of its own (0.4 s of the command line's compile on the 10x10 map fold)
    poses_alone = system_module._jitted_plan
    monkeypatch.setattr(system_module, "_jitted_plan", lambda *a: pytest.fail("a plan program of its own"))
    for given in (None, x0):   # 501: the `elastic` fixture's program (same structure and settings)
        tr = diffmb.simulate(system, x0=given, t1=0.05, solver="dopri5", rtol=1e-12, atol=1e-15, saveat=501)
        x = np.asarray(tr.x_final)
        assert x[small + 5] - x[big + 5] > 0.0 and float(np.min(tr.diagnostics["contact_gap"])) > 0.0
        finals.append(x)
    np.testing.assert_allclose(finals[0], finals[1], rtol=0, atol=1e-13)
    monkeypatch.setattr(system_module, "_jitted_plan", poses_alone)
    # at a state the motion reached (the elements' states no longer the start's): the start
    # program's plan, the poses' alone and the one made inside a trace agree
    eager = system.start_plan(finals[0], params)
    for other in (system_module._jitted_plan(system, jnp.asarray(finals[0]), params),
                  jax.jit(lambda x: system.start_plan(x, params))(finals[0])):
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(other)):
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=0, atol=1e-15)


def test_an_element_that_limits_steps_without_planning_them_is_refused_before_compiling():
    """The step check reads the plans made at a step's two ends, so an element that limits
    the steps but makes no plan would give the controller nothing to read: refused by
    name when the run is prepared, not a wrong step size."""
    from diffmb.tree.force_element import ForceElement

    class Limiting(ForceElement):
        def default_params(self):
            return {}

        def generalized_force(self, model, ws, z, params):
            return jnp.zeros(model.nv, ws.pos.dtype)

        @property
        def limits_steps(self):
            return True

    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_body("a", "world", "free", mass=1.0, inertia=_inertia(1.0, 1.0))
    model = b.build()
    system = diffmb.TreeSystem(model, np.zeros(model.nq), np.zeros(model.nv), elements=(Limiting(),))
    with pytest.raises(ValueError, match="limited .* but not planned"):
        diffmb.simulate(system, t1=0.1, solver="dopri5")


def test_two_free_panels_rebound_elastically_without_spin(elastic):
    system, element, params, tr = elastic
    assert tr.status == "success"
    v0, v1 = _body_rates(system, tr.xs[0]), _body_rates(system, tr.x_final)
    approach = v0[1, 5] - v0[0, 5]          # small minus big, along z
    rebound = v1[1, 5] - v1[0, 5]
    assert rebound == pytest.approx(-approach, rel=1e-6)
    lin = np.asarray(tr.diagnostics["linear_momentum"])
    assert np.max(np.abs(lin - lin[0])) < 1e-12
    assert np.max(np.abs(v1[:, :3])) < 1e-12               # no spin induced
    E = np.asarray(tr.diagnostics["energy"])
    assert np.max(np.abs(E - E[0])) < 1e-9 * E[0]           # the barrier's energy included
    assert float(np.max(tr.diagnostics["contact_energy"])) > 0.99 * E[0]  # all of it held at the bottom


@pytest.mark.slow  # the implicit solver's program: ~10 s of compile
def test_an_implicit_solver_takes_the_contact_step_check_and_its_tolerances():
    """Kvaerno5 with contact: the step check's controller hands the implicit solver's root
    find its tolerances (as any adaptive controller does; diffrax refused the run before),
    and the impact is elastic to the tolerance asked."""
    system, _ = _two_panels()
    tr = diffmb.simulate(system, t1=0.5, solver="kvaerno5", rtol=1e-10, atol=1e-13, saveat=11)
    assert tr.status == "success"
    v0, v1 = _body_rates(system, tr.xs[0]), _body_rates(system, tr.x_final)
    assert v1[1, 5] - v1[0, 5] == pytest.approx(-(v0[1, 5] - v0[0, 5]), rel=1e-5)
    E = np.asarray(tr.diagnostics["energy"])
    assert np.max(np.abs(E - E[0])) < 1e-6 * E[0]


def test_the_minimum_gap_is_the_root_of_the_energy_balance():
    """Four vertex-face primitives carry the impact: ``4 kappa b(d*) = mu v^2 / 2``. The
    run stops where the panels stop closing (an event on their relative speed)."""
    system, element = _two_panels()
    params = system.default_params()
    p = params["elements"][0]
    s = system.model.body_slices[system.model.body_index("small")][0] + 5
    g = system.model.body_slices[system.model.body_index("big")][0] + 5
    nq = system.model.nq
    closing = lambda t, x, params: x[nq + s] - x[nq + g]     # crosses 0 at the smallest gap
    tr = diffmb.simulate(system, t1=0.5, solver="dopri5", rtol=1e-12, atol=1e-14, saveat=11, events=closing)
    assert tr.status == "event"
    mu, v = 0.5, 0.1
    d_star = float(br.barrier_inverse(0.5 * mu * v * v / (4 * float(panel_stiffness(p, p["energy"]))), float(p["dhat"])))
    q, _ = system.split(tr.x_final)
    gap = float(q[s - 5 + 5] - q[g - 5 + 5])
    assert gap == pytest.approx(d_star, rel=1e-6)
    assert d_star > 0.5 * float(p["dhat"])   # the certified margin: half the reach


def test_a_panel_dropped_on_a_fixed_one_rebounds_to_its_height():
    h = 0.1
    system, _ = _two_panels(gravity=9.81, fixed_big=True, gap=h, v=0.0)
    t_bounce = 2 * np.sqrt(2 * h / 9.81)
    tr = diffmb.simulate(system, t1=1.2 * t_bounce, solver="dopri5", rtol=1e-12, atol=1e-14, saveat=6001)
    z = np.asarray(tr.xs[:, 5])
    after = np.asarray(tr.ts) > 0.75 * t_bounce
    assert tr.status == "success" and np.nanmax(z[after]) == pytest.approx(h, rel=1e-5)


@pytest.mark.slow  # ~10 s; the undamped drop test covers the same element
def test_a_damped_panel_comes_to_rest_where_the_barrier_holds_its_weight():
    """The contact damping (zero at the barrier's reach, rising towards contact) takes the
    bounces out; the panel rests where four vertex-face barriers hold its weight."""
    system, element = _two_panels(gravity=9.81, fixed_big=True, gap=0.005, v=0.0, damping=2000.0)
    tr = diffmb.simulate(system, t1=3.0, solver="dopri5", rtol=1e-11, atol=1e-13, saveat=31)
    p = system.default_params()["elements"][0]
    kappa, dhat = float(panel_stiffness(p, p["energy"])), float(p["dhat"])
    db = jax.grad(br.barrier)
    lo, hi = 1e-9, dhat          # 4 kappa b'(d) + m g = 0 on the barrier's reach
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if 4 * kappa * float(db(mid, dhat)) + 9.81 < 0 else (lo, mid)
    assert tr.status == "success"
    assert float(tr.x_final[5]) == pytest.approx(0.5 * (lo + hi), rel=1e-8)
    E = np.asarray(tr.diagnostics["energy"])
    assert np.all(np.diff(E) <= 1e-9 * abs(E[0]))   # damping only dissipates


def _slap_pattern(omega_sign=1.0):
    a = Panel("a", np.array([[-1.0, -1, 0], [0, -1, 0], [0, 1, 0], [-1, 1, 0]]), 1.0)
    b = Panel("b", np.array([[0.0, -1, 0], [1, -1, 0], [1, 1, 0], [0, 1, 0]]), 1.0)
    crease = Crease("a", "b", np.array([0.0, -1, 0]), np.array([0.0, 1, 0]), fold=np.pi - 0.05)
    return CreasePattern([a, b], [crease], root="a")


def _slap(omega=0.5, crease_damping=0.0, rest_damping=0.0):
    """The undamped slap of issue 58's check (``rest_damping`` 0, not the default)."""
    system, _ = build(_slap_pattern(), free_root=False, stabilization="none",
                      contact=ContactOptions(crease_damping=crease_damping, rest_damping=rest_damping))
    params = system.default_params()
    I = float(np.asarray(diffmb.mass_matrix(params["model"], params["q0"]))[0, 0])
    # the default rule takes the energy the motion starts with (the hinge's swing, set
    # after the build): the barrier holds it at half its reach
    params = {**params, "qd0": jnp.asarray([omega])}
    return system, params, I


def test_a_hinged_panel_slapped_into_its_crease_limit_rebounds():
    omega = 0.5
    system, params, _ = _slap(omega)
    tr = diffmb.simulate(system, params=params, t1=0.25, solver="dopri5", rtol=1e-12, atol=1e-14, saveat=251)
    theta = np.asarray(tr.xs[:, 0])
    assert tr.status == "success"
    assert float(tr.x_final[1]) == pytest.approx(-omega, rel=1e-6)
    p = params["elements"][0]
    # into the reach, never past half of the certified barrier's (the energy's bound)
    assert np.pi < np.max(theta) < np.pi + float(p["psi_hat"]) - 0.5 * float(certified_reach(p)[0]) + 1e-12
    # at the default damping ratio of a resting crease (0.5) it rebounds slower, and its
    # energy only falls
    system, params, _ = _slap(omega, rest_damping=REST_DAMPING)
    tr = diffmb.simulate(system, params=params, t1=0.25, solver="dopri5", rtol=1e-12, atol=1e-14, saveat=251)
    e = np.asarray(tr.diagnostics["energy"])
    assert tr.status == "success" and -omega < float(tr.x_final[1]) < -0.1 * omega
    assert np.diff(e).max() <= 1e-12 * e[0] and e[-1] < 0.99 * e[0]


def test_a_crease_past_flat_is_held_by_its_rest_term_then_by_the_certified_barrier():
    """Tier A's two parts (:mod:`diffmb.origami.contact.rule`): up to the rest depth past
    flat (the detector's overlap tolerance over the crease's lever) a crease feels
    only the soft term, whose torque there is its share of the budget per half turn
    (``budget / (n pi)``, ``n`` creases), growing as the depth squared; beyond it the
    certified barrier, which holds the whole budget at half its own reach. On either
    side of the fold (+-pi) alike."""
    system, params, _ = _slap()
    e, p = system.elements[0], params["elements"][0]
    rest = float(rest_depth(p)[0])
    # the two 1 m x 2 m panels: a median panel diameter of sqrt(5) m, and a crease along
    # the middle of their 2 m square, 1 m from the farthest corner (its lever)
    assert rest == pytest.approx(1e-5 * np.sqrt(5.0) / 1.0, rel=1e-12)
    budget = 0.7
    torque = jax.grad(e._crease_energy)
    # (rel 1e-8: an angle near pi carries a round-off of 4e-16 rad, 1e-9 of a depth of
    # 4e-7 rad, and the barrier at half its reach feels it over a reach of 1e-3)
    for sign in (1.0, -1.0):
        for depth in (0.25 * rest, 0.5 * rest, rest):
            t = float(torque(jnp.asarray([sign * (np.pi + depth)]), p, budget)[0])
            assert sign * t == pytest.approx(budget / np.pi * (depth / rest) ** 2, rel=1e-8)
        half = rest + 0.5 * float(certified_reach(p)[0])
        energy = float(e._crease_energy(jnp.asarray([sign * (np.pi + half)]), p, budget))
        soft = budget / (np.pi * rest**2) * half**3 / 3
        assert energy == pytest.approx(budget + soft, rel=1e-8)
    assert float(certified_reach(p)[0]) == pytest.approx(float(p["psi_hat"]) - rest, rel=1e-15)


def test_a_creases_lever_is_the_farthest_the_sheet_lies_from_it():
    """Each crease's lever (what sets its rest depth): the largest distance from its
    segment to a vertex of a convex sheet; a sheet that is not convex takes its bounding
    box's diagonal for every crease. On the slapped hinge the lever is reached: turning
    the crease past flat moves the far edge by the lever times the angle."""
    from diffmb.origami.contact.build import crease_levers
    from diffmb.tree.kinematics import kinematics

    def square(x, y):
        return np.array([[x, y, 0.0], [x + 1, y, 0], [x + 1, y + 1, 0], [x, y + 1, 0]])

    def seg(*p):
        return np.array(p, float).reshape(1, 2, 3)

    # a 2 x 2 sheet of unit squares: a crease from its centre to the middle of an edge
    # is sqrt(2) from the far corners; an L of three squares is not convex
    two = [square(0, 0), square(1, 0), square(0, 1), square(1, 1)]
    assert crease_levers(two, seg([1, 0, 0], [1, 1, 0]))[0] == pytest.approx(np.sqrt(2.0), rel=1e-15)
    ell = [square(0, 0), square(1, 0), square(0, 1)]
    assert crease_levers(ell, seg([1, 0, 0], [1, 1, 0]))[0] == pytest.approx(np.sqrt(8.0), rel=1e-15)
    # panels laid over each other in the layout cover their hull more than once: the diagonal too
    over = [square(0, 0), square(1, 0), square(0, 1), square(1, 1), square(0.5, 0.5)]
    assert crease_levers(over, seg([1, 0, 0], [1, 1, 0]))[0] == pytest.approx(np.sqrt(8.0), rel=1e-15)
    # hinges off the layout plane (thick panels) do not keep the mid-surface's lengths
    assert crease_levers(two, seg([1, 0, 0], [1, 1, 0]), offset=True)[0] == pytest.approx(np.sqrt(8.0), rel=1e-15)
    system, params, _ = _slap()
    e, p, model = system.elements[0], params["elements"][0], params["model"]
    flat = [np.asarray(q.vertices, float) for q in _slap_pattern().panels]
    lever = crease_levers(flat, seg([0, -1, 0], [0, 1, 0]))[0]
    assert lever == pytest.approx(1.0, rel=1e-15)
    assert float(rest_depth(p)[0]) == pytest.approx(float(p["overlap_tolerance"]) / lever, rel=1e-15)
    vertices = jax.jit(lambda q: e.vertices(kinematics(model, q), p))
    delta = 1e-6
    moved = np.asarray(vertices(jnp.asarray([np.pi + delta]))) - np.asarray(vertices(jnp.asarray([np.pi])))
    # a turn by delta moves a point r from the axis by 2 r sin(delta / 2)
    assert np.max(np.linalg.norm(moved, axis=-1)) == pytest.approx(2 * lever * np.sin(delta / 2), rel=1e-8)


def test_a_crease_resting_past_flat_rings_at_the_damping_ratio_asked_for():
    """``rest_damping`` is a damping ratio: read off the linearised dynamics of the slapped
    hinge at rest past flat (``d theta_dd / d theta = -K / I``, ``d theta_dd / d theta_dot
    = -c / I``, the mass matrix and the soft term's curvature as the run sees them), the
    ratio ``c / (2 sqrt(K I))`` is the one asked for, at every depth of the soft term and on
    either side of the fold; the crease's inertia is the hinge's, ``M[0, 0]``, exactly."""
    system, _ = build(_slap_pattern(), free_root=False, stabilization="none",
                      contact=ContactOptions(rest_damping=0.5))
    params = system.default_params()
    p = params["elements"][0]
    I = float(np.asarray(diffmb.mass_matrix(params["model"], params["q0"]))[0, 0])
    assert float(p["crease_inertia"][0]) == pytest.approx(I, rel=1e-12)
    x0 = system.init_state(params)
    rest = float(rest_depth(p)[0])
    for sign in (1.0, -1.0):
        for depth in (0.2 * rest, 0.7 * rest):
            x = x0.at[0].set(sign * (np.pi + depth)).at[1].set(0.0)
            J = jax.jacfwd(lambda x: system.vector_field(0.0, x, params))(x)
            stiffness, damping = -float(J[1, 0]), -float(J[1, 1])     # K / I, c / I
            assert stiffness > 0
            assert damping / (2 * np.sqrt(stiffness)) == pytest.approx(0.5, rel=1e-9)
    # undamped up to flat (the slap above sets 0 for its elastic rebound)
    x = x0.at[0].set(np.pi - 1e-3).at[1].set(0.0)
    assert float(jax.jacfwd(lambda x: system.vector_field(0.0, x, params))(x)[1, 1]) == 0.0


def test_contact_damping_of_any_kind_takes_energy_off_what_a_fold_conserves():
    fold = scenarios.get("fold-2x4")
    # the default damps a resting crease (REST_DAMPING); the elastic model conserves it
    assert fold.conserved(fold.resolve({"contact": 1.0})) == ("energy_falls", "angular_momentum")
    assert "energy" in fold.conserved(fold.resolve({"contact": 1.0, "contact_rest_damping": 0.0}))
    for name in ("contact_damping", "contact_crease_damping", "contact_rest_damping"):
        # contact damping only dissipates: the energy may fall, and a rise is still judged
        values = {"contact": 1.0, "contact_rest_damping": 0.0, name: 0.5}
        assert fold.conserved(fold.resolve(values)) == ("energy_falls", "angular_momentum")
        assert "energy" in fold.conserved(fold.resolve({"contact": 0.0, name: 0.5}))
    with pytest.raises(ValueError, match="contact_rest_damping"):
        fold.make({"contact": 1.0, "contact_rest_damping": -0.5})


def test_a_crease_just_past_flat_is_reported_in_radians_not_rounded_to_180_deg():
    """A crease 2e-4 rad past flat (the 10x10 map fold's without contact) reads "180 deg"
    at four digits: the warning says how far past, in radians, and names the crease."""
    system, _ = build(_slap_pattern(), free_root=False, stabilization="none", contact=ContactOptions(forces=False))
    e, p = system.elements[0], system.default_params()["elements"][0]
    ts = np.linspace(0.0, 1.0, 11)
    theta = np.minimum(np.pi - 0.05 + 0.1 * ts, np.pi + 2e-4)[:, None]
    (w,) = e.check(ts, {"crease_angle": theta}, p)
    assert w["kind"] == "crease_overfold" and w["crease"] == e.crease_labels[0]
    assert w["past_flat_rad"] == pytest.approx(2e-4, rel=1e-9) and w["t"] == pytest.approx(0.6)
    assert "by up to 0.0002 rad" in w["message"] and "180.0115 deg" in w["message"]


@pytest.mark.slow  # ~19 s; test_flat_crossings' fold-2x4 README run covers the detector
def test_the_4x4_map_fold_is_suspect_without_contact():
    """Without contact the 4x4 fold's stacked layers pass through each other (creases to
    181 deg within 10 s); the detector names them. A short run shows it (with contact:
    :func:`test_one_default_rule_keeps_every_origami_case_clean`)."""
    sc = scenarios.get("map-fold")
    system, params, _ = sc.make({"rows": "4", "cols": "4", "contact": "0"})
    tr = diffmb.simulate(system, params=params, t1=1.0, solver="dopri5", rtol=1e-10, atol=1e-12, saveat=101)
    warnings = health.check(tr, (), system=system, params=params)
    kinds = {w["kind"] for w in warnings}
    assert "panel_overlap" in kinds and any("15-r" in w["message"] or "pass through" in w["message"]
                                            for w in warnings)
    from diffmb.viewer.plots import contact_figure

    fig = contact_figure(tr, "map 4x4", system)      # what the run's contact.png draws
    crossing = fig.axes[1].lines[0].get_ydata()
    assert np.max(crossing) > float(params["elements"][0]["overlap_tolerance"])


def _levers_bound_the_folded_sheet(values, system, params, tr):
    """At every save point of a map fold's run, no vertex of the folded sheet lies farther
    from a crease's axis than that crease's lever (:func:`~diffmb.origami.contact.build.crease_levers`,
    which sets its rest depth): what a crease turned past flat moves the sheet by, per
    radian, is bounded as the rule assumes, through the stack and its deployment."""
    from diffmb.origami.contact.build import crease_levers
    from diffmb.scenarios.origami import PATTERNS
    from diffmb.tree.kinematics import kinematics

    pattern = PATTERNS["map-fold"](values)
    e, p, model = system.elements[0], params["elements"][0], params["model"]
    panels = {q.name: np.asarray(q.vertices, float) for q in pattern.panels}
    creases = {c.label: c for c in pattern.creases}
    flat = [panels[n] for n in e.panel_names]
    ends = []    # each crease's two ends: (panel, vertex) of its panel a, in the element's order
    for label in e.crease_labels:
        c = creases[label]
        k = [int(np.argmin(np.linalg.norm(panels[c.a] - end, axis=1))) for end in (c.p1, c.p2)]
        assert all(np.linalg.norm(panels[c.a][i] - end) < 1e-12 for i, end in zip(k, (c.p1, c.p2)))
        ends.append((e.panel_names.index(c.a), k))
    lever = crease_levers(flat, np.array([[creases[lb].p1, creases[lb].p2] for lb in e.crease_labels]))
    assert np.allclose(np.asarray(p["rest_depth"]), float(p["overlap_tolerance"]) / lever, rtol=1e-12)
    valid = np.asarray(e.valid)
    vertices = jax.jit(lambda q: e.vertices(kinematics(model, q), p))
    farthest = np.zeros(len(lever))
    for x in np.asarray(tr.xs)[np.isfinite(np.asarray(tr.ts))]:
        P = np.asarray(vertices(system.split(jnp.asarray(x))[0]))
        V = P[valid]
        for c, (i, (k1, k2)) in enumerate(ends):
            a, b = P[i, k1], P[i, k2]
            u = (b - a) / np.linalg.norm(b - a)
            farthest[c] = max(farthest[c], np.max(np.linalg.norm(np.cross(V - a, u), axis=1)))
    assert np.all(farthest <= lever * (1 + 1e-9))


@pytest.mark.slow  # 8-30 s a case (the 10x10 patterns' programs take most of it)
@pytest.mark.parametrize("name, values, t1, crosses_without", [
    ("fold-4panel", {}, 10.0, False),
    ("fold-3x3", {}, 30.0, False),
    ("map-fold", {"rows": 4, "cols": 4}, 1.0, False),      # crossing without: the test above
    ("map-fold", {"rows": 10, "cols": 10}, 0.5, True),
    ("miura", {"rows": 10, "cols": 10}, 0.5, False),
])
def test_one_default_rule_keeps_every_origami_case_clean(name, values, t1, crosses_without):
    """Issue 58's rule without tuning per design: the default stiffnesses (the start's
    energy held at half the certified reach, a crease's share of it at the rest depth)
    and reaches, unchanged, on cases from 4 to 100 panels (fold-2x4: its own 30 s test
    above). Each run ends ``success`` with no health warning; no crease passes flat by
    more than its certified margin allows at any save point (an energy-conserving run),
    no panels cross, no candidate pair is dropped, and the energy, contact's included,
    holds to 1e-6. Measured: energy to 1.2e-10 (fold-4panel), 3.8e-8 (fold-3x3), 1.5e-7
    (map 4x4), 1.6e-8 (map 10x10), 1.3e-10 (Miura 10x10); creases at most 2.1e-6 rad past
    flat (map 4x4) and 1.5e-6 (map 10x10; the reach is 1e-3, the rest depths then the
    sheet's, 2.5e-6 and 1.0e-6; each crease's from its lever since, 3.3e-6 to 5e-6 and
    1.1e-6 to 2.0e-6, which the map folds' runs check). The 10x10 map fold needs
    it: the same 0.5 s without contact has layers crossing from 0.35 s. Its stack starts
    at gap 0 and stays within the barrier's reach, so its pairs never arm: the crease
    barrier alone keeps the layers apart (no gap is reported)."""
    sc = scenarios.get(name)
    system, params, v = sc.make({**values, "contact": 1.0})
    tr = diffmb.simulate(system, params=params, saveat=101, **sc.run_settings(t1=t1))
    assert tr.status == "success"
    assert health.check(tr, sc.conserved(v), system=system, params=params) == []
    e, p = system.elements[0], params["elements"][0]
    m = {k: float(v) for k, v in e.metrics(tr.diagnostics, jnp.isfinite(tr.ts), p).items()}
    assert m["crease_overfold"] == 0 and m.get("panel_overlap", 0.0) == 0 and m.get("contact_overflow", 0.0) == 0
    # what the energy bound guarantees each crease (its own reach), the least over them
    certified = 0.5 * float(jnp.min(certified_reach(p)))
    assert m["max_crease_angle"] <= np.pi + float(p["psi_hat"]) - certified
    assert m["min_crease_margin"] >= certified
    if np.isfinite(m.get("min_contact_gap", np.inf)):
        assert m["min_contact_gap"] >= 0.5 * float(p["dhat"])      # the certified gap: half the reach
    E = np.asarray(tr.diagnostics["energy"])
    assert np.max(np.abs(E - E[0])) <= 1e-6 * abs(E[0])
    if name == "map-fold":   # a convex sheet: each crease's rest depth from its own lever
        _levers_bound_the_folded_sheet(sc.resolve(values), system, params, tr)
    if crosses_without:
        system, params, v = sc.make({**values, "contact": 0.0})
        tr = diffmb.simulate(system, params=params, saveat=101, **sc.run_settings(t1=t1))
        kinds = {w["kind"] for w in health.check(tr, sc.conserved(v), system=system, params=params)}
        assert "panel_overlap" in kinds


@pytest.mark.slow  # ~12 s (two builds of fold-2x4's programs); the default job's detector tests run contact off
def test_contact_off_is_the_papers_model_bit_for_bit():
    """``--set contact=0`` (contact is on by default): the detector reports, the equations
    are the paper's exactly, as built without any contact element."""
    from diffmb.scenarios.origami import PATTERNS, _gains

    sc = scenarios.get("fold-4panel")
    v = sc.resolve({})
    assert v["contact"] == 1.0
    plain, _ = build(PATTERNS["fold-4panel"](v), stabilization="projection", baumgarte=_gains(v))
    detected, params, _ = sc.make({"contact": "0"})
    assert not detected.elements[0].forces
    a = diffmb.simulate(plain, t1=0.5, solver="dopri5", rtol=1e-10, atol=1e-12, saveat=11)
    b = diffmb.simulate(detected, params=params, t1=0.5, solver="dopri5", rtol=1e-10, atol=1e-12, saveat=11)
    assert np.array_equal(np.asarray(a.xs), np.asarray(b.xs))
    assert "crease_angle" in b.diagnostics and "crease_angle" not in a.diagnostics


def test_gradients_through_a_contact_event_match_finite_differences():
    """The hinge's final angle after a slap, with respect to its damping and the barrier's
    stiffness and reach: reverse mode against central differences, and forward mode.
    Fixed RK4 steps (30 across the barrier's reach): an adaptive solve's step choices are
    piecewise constant in the parameters, and its differences would read them."""
    system, params, _ = _slap(0.5, crease_damping=0.05)
    e0 = params["elements"][0]
    keys = ("crease_damping", "kappa_scale", "psi_hat")

    def final_angle(x):
        e = {**e0, "crease_damping": x[0], "kappa_scale": x[1], "psi_hat": x[2]}
        p = {**params, "elements": (e,)}
        tr = diffmb.simulate(system, params=p, t1=0.3, dt=1e-4, solver="rk4", saveat=2, diagnostics=False,
                             adjoint="direct")
        return tr.x_final[0]

    x0 = jnp.asarray([0.05, 1.0, float(e0["psi_hat"])])
    f = jax.jit(final_angle)
    rev = np.asarray(jax.jit(jax.grad(final_angle))(x0))
    fwd = np.asarray(jax.jit(jax.jacfwd(final_angle))(x0))
    assert np.all(np.abs(rev) > 0)   # every parameter moved the rebound
    # Central differences, Richardson-extrapolated (error h^4). The final angle carries
    # round-off of about 4e-13 after 3,000 steps; the damping moves it by only 8e-5 per
    # N m s/rad and nearly linearly, so its step is wide (40 %); the rebound bends sharply
    # in the reach, the more since Tier A's rest term (its soft part, 7.9e-6 rad deep, is
    # crossed within one step): differences at 1 % and 0.3 % are 1e-3 and 7e-4 off after
    # extrapolation, at 0.1 % (the factor) and 0.03 % (the reach) 1.3e-6 and 2.7e-7.
    steps = (0.4, 1e-3, 3e-4)
    for k in range(3):
        h = steps[k] * abs(float(x0[k]))
        d = lambda h: (float(f(x0.at[k].add(h))) - float(f(x0.at[k].add(-h)))) / (2 * h)
        fd = (4 * d(h / 2) - d(h)) / 3
        assert rev[k] == pytest.approx(fd, rel=1e-5), keys[k]
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-14)


@pytest.mark.slow  # ~15 s from a fresh cache (forward mode through an adaptive solve, and a tight reference)
def test_forward_mode_through_an_adaptive_solve_that_the_step_check_limits():
    """A panel thrown at a fixed one, adaptive Dopri5, its steps limited by the contact step
    check: the slope of its height after the rebound with respect to the throw's speed
    and the barrier's stiffness factor. Forward mode (what a fit's Jacobian takes) was
    NaN: the check's fraction is inf while no pair is armed, and inf times the step's
    tangent is NaN, which the controller's min passed on. Against central differences of
    solves at rtol 1e-13: the speed's slope to 1e-5; the stiffness factor's to 1e-3, the
    error of differentiating an adaptive solve with its step choices held (measured
    2.7e-4, 1.2e-4 and 1.9e-4 at rtol 1e-10, 1e-11 and 1e-12; fixed steps: the test above)."""
    system, _ = _two_panels(fixed_big=True, v=0.1)
    assert system.limits_steps
    params = system.default_params()
    e0 = params["elements"][0]

    def height(x, rtol, adjoint):
        p = {**params, "qd0": params["qd0"].at[5].set(-x[0]), "elements": ({**e0, "kappa_scale": x[1]},)}
        tr = diffmb.simulate(system, params=p, t1=0.5, solver="dopri5", rtol=rtol, atol=1e-3 * rtol, saveat=2,
                             diagnostics=False, adjoint=adjoint)
        return tr.x_final[5]

    x0 = jnp.asarray([0.1, 1.0])
    fwd = np.asarray(jax.jit(jax.jacfwd(lambda x: height(x, 1e-10, "direct")))(x0))
    f = jax.jit(lambda x: height(x, 1e-13, "checkpoint"))
    assert float(f(x0)) > 0.02                            # rebounded: 20 mm up when thrown from there
    for k, rel in ((0, 1e-5), (1, 1e-3)):
        h = 1e-3 * float(x0[k])
        fd = (float(f(x0.at[k].add(h))) - float(f(x0.at[k].add(-h)))) / (2 * h)
        assert fwd[k] == pytest.approx(fd, rel=rel)


@pytest.mark.slow  # ~70 s: 50,000 RK4 steps, differentiated both ways and differenced 20 times
def test_gradients_of_a_5_s_deployment_through_a_contact_event_wrt_hinge_and_contact_parameters():
    """Issue 58's gradient check: a hinged panel with a deployment spring ``K`` and
    damping ``c`` is slapped into its crease limit, rebounds and deploys through flat;
    the metric is its angle after 5 s. Reverse mode against Richardson-extrapolated
    central differences to 1e-5 with respect to ``K``, ``c``, the crease barrier's
    damping, stiffness factor and reach, and the resting crease's damping ratio (at its
    default, 0.5); forward against reverse to 1e-10. Fixed RK4 at 0.1 ms (20 steps across
    the barrier's reach at the slap's 0.5 rad/s)."""
    import equinox as eqx

    a = Panel("a", np.array([[-1.0, -1, 0], [0, -1, 0], [0, 1, 0], [-1, 1, 0]]), 1.0)
    b = Panel("b", np.array([[0.0, -1, 0], [1, -1, 0], [1, 1, 0], [0, 1, 0]]), 1.0)
    crease = Crease("a", "b", np.array([0.0, -1, 0]), np.array([0.0, 1, 0]), fold=np.pi - 0.05,
                    stiffness=0.01, damping=0.002)
    system, _ = build(CreasePattern([a, b], [crease], root="a"), free_root=False, stabilization="none",
                      contact=ContactOptions(crease_damping=0.05))
    params = system.default_params()
    params = {**params, "qd0": jnp.asarray([0.5])}
    e0 = params["elements"][0]

    def deployed(x):
        model = eqx.tree_at(lambda m: (m.stiffness, m.damping), params["model"], (x[0:1], x[1:2]))
        e = {**e0, "crease_damping": x[2], "kappa_scale": x[3], "psi_hat": x[4], "rest_damping": x[5]}
        p = {**params, "model": model, "elements": (e,)}
        tr = diffmb.simulate(system, params=p, t1=5.0, dt=1e-4, solver="rk4", saveat=2, diagnostics=False,
                             adjoint="direct")
        return tr.x_final[0]

    x0 = jnp.asarray([0.01, 0.002, 0.05, 1.0, float(e0["psi_hat"]), float(e0["rest_damping"])])
    assert float(x0[5]) == REST_DAMPING
    f = jax.jit(deployed)
    assert 0 < float(f(x0)) < 0.5          # from 180 deg to within 30 deg of flat, after the rebound
    rev = np.asarray(jax.jit(jax.grad(deployed))(x0))
    fwd = np.asarray(jax.jit(jax.jacfwd(deployed))(x0))
    assert np.all(np.abs(rev) > 0)
    # K, the barrier's factor and its reach bend the damped rebound sharply (at 0.3 % steps
    # 5e-2, 8e-5 and 4e-3 off after extrapolation; at 0.1 % 3e-6, 1e-6, 4e-5): 0.03 %
    # steps there; the dampings act nearly linearly: 1-40 %
    steps = (3e-4, 1e-2, 0.4, 3e-4, 3e-4, 1e-2)
    for k, name in enumerate(("K", "c", "crease_damping", "kappa_scale", "psi_hat", "rest_damping")):
        h = steps[k] * abs(float(x0[k]))
        d = lambda h: (float(f(x0.at[k].add(h))) - float(f(x0.at[k].add(-h)))) / (2 * h)
        fd = (4 * d(h / 2) - d(h)) / 3
        assert rev[k] == pytest.approx(fd, rel=1e-5), name
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-14)


@pytest.mark.slow  # ~18 s; test_gradients_through_a_contact_event_match_finite_differences covers the gradient
def test_a_batched_gradient_across_the_onset_of_contact_is_finite_and_continuous():
    """1,000 swings, from ones that stop short of the crease limit to ones that strike it:
    no NaN or inf in the gradient, and the final angle continuous in the initial rate."""
    system, params, _ = _slap(0.5)
    omegas = jnp.linspace(0.3, 0.7, 1000)   # stops short below about 0.41 rad/s (K = 0: never)

    def final(omega):
        p = {**params, "qd0": jnp.reshape(omega, (1,))}
        return diffmb.simulate(system, params=p, t1=0.15, solver="dopri5", rtol=1e-10, atol=1e-12,
                               saveat=2, diagnostics=False).x_final[0]

    vals, grads = jax.jit(jax.vmap(jax.value_and_grad(final)))(omegas)
    assert np.all(np.isfinite(np.asarray(vals))) and np.all(np.isfinite(np.asarray(grads)))
    assert np.max(np.abs(np.diff(np.asarray(vals)))) < 1e-3   # no jump across the onset


def _strip(fold):
    """Three unit panels in a row, both creases folded by ``fold`` the same way: beyond
    ``2 pi / 3`` the third panel passes through the first (they share no vertex)."""
    sq = lambda x0: np.array([[x0, 0.0, 0], [x0 + 1, 0, 0], [x0 + 1, 1, 0], [x0, 1, 0]])
    panels = [Panel(n, sq(x0), 1.0) for n, x0 in (("a", -1.0), ("b", 0.0), ("c", 1.0))]
    creases = [Crease("a", "b", np.array([0.0, 0, 0]), np.array([0.0, 1, 0]), fold=fold),
               Crease("b", "c", np.array([1.0, 0, 0]), np.array([1.0, 1, 0]), fold=fold)]
    return CreasePattern(panels, creases, root="a")


def test_a_start_state_that_intersects_is_refused_naming_the_panels():
    build(_strip(0.5 * np.pi), contact=ContactOptions())   # a U: apart
    with pytest.raises(ValueError, match=r"panels a/c passing through each other \(0\.36\d m deep\)"):
        build(_strip(0.8 * np.pi), contact=ContactOptions())
    build(_strip(0.8 * np.pi), contact=ContactOptions(forces=False))   # the paper's model: reported, not refused


def test_building_a_fold_with_contact_compiles_a_handful_of_programs_not_one_per_operation():
    """The start check, the cut creases' branches and the element's start states run as
    compiled programs, reused by a build of the same structure with other numbers: op by
    op they were 722 programs of one operation each, 11-13 s of XLA before fold-2x4's run
    began (the run's own compile reported 8 s)."""
    from helpers import counting_compiles

    with counting_compiles() as compiles:
        scenarios.get("fold-2x4").make({"contact": 1.0})
        first = len(compiles)
        # the same structure with other numbers: nothing new to compile
        scenarios.get("fold-2x4").make({"contact": 1.0, "K": 0.3, "contact_thickness": 1e-3})
    assert 0 < first <= 40 and len(compiles) == first, (first, len(compiles))


def _traced(argv):
    """Run the CLI on ``argv``; return its exit code and how many programs it traced."""
    import logging

    from diffmb import cli

    traced = []
    handler = logging.Handler()
    handler.emit = lambda rec: traced.append(1) if "Finished tracing" in rec.getMessage() else None
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles():
            rc = cli.main(argv)
    finally:
        logging.getLogger("jax").removeHandler(handler)
    return rc, len(traced)


@pytest.mark.parametrize("settings, named", [
    (["contact=2"], "'contact'"),
    (["contact=1", "contact_kappa=-1"], "contact_kappa"),
    (["contact=1", "contact_kappa=0"], "contact_kappa"),
    (["contact=1", "contact_dhat=-0.001"], "contact_dhat"),
    (["contact=1", "contact_thickness=-0.01"], "contact_thickness"),
    (["contact=1", "contact_damping=-1"], "contact_damping"),
    (["contact=1", "contact_thickness=10"], "inradius of panel"),
])
def test_bad_contact_input_is_one_line_exit_2_before_any_compiling(settings, named, capsys, tmp_path):
    argv = ["run", "fold-4panel", "--out", str(tmp_path)]
    for s in settings:
        argv += ["--set", s]
    rc, traced = _traced(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("diffmb: error: ") and named in err[0], err
    assert traced == 0
    assert not list(tmp_path.iterdir())


def test_the_two_panel_impulse_matches_mujoco_which_penetrates(elastic):
    """The same impact in MuJoCo: the two panels as 1 mm boxes, elastic contact (direct
    stiffness, no damping: ``solref="-1e5 0"``), RK4 at 0.1 ms. The exchanged impulse
    agrees within 2 %; MuJoCo's soft contact lets the boxes interpenetrate, where the
    barrier keeps a positive gap."""
    import mujoco

    system, element, params, tr = elastic
    v0, v1 = _body_rates(system, tr.xs[0]), _body_rates(system, tr.x_final)
    ours = v1[1, 5] - v0[1, 5]                    # the small panel's momentum change (1 kg)
    gap = float(np.min(np.asarray(tr.diagnostics["contact_gap"])))
    t = 0.001
    xml = f"""<mujoco><option timestep="1e-4" gravity="0 0 0" integrator="RK4"/><worldbody>
      <body name="big"><freejoint/><geom type="box" size="1 1 {t / 2}" mass="1" solref="-1e5 0"/></body>
      <body name="small" pos="0 0 {0.02 + t}"><freejoint/><geom type="box" size="0.5 0.5 {t / 2}" mass="1"
        solref="-1e5 0"/></body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qvel[2], d.qvel[8] = 0.05, -0.05
    mujoco.mj_forward(m, d)
    before, penetration = float(d.qvel[8]), 0.0
    for _ in range(4500):
        mujoco.mj_step(m, d)
        if d.ncon:
            penetration = max(penetration, -float(np.min(d.contact.dist[:d.ncon])))
    theirs = float(d.qvel[8]) - before
    assert ours == pytest.approx(0.1, rel=1e-6)
    assert theirs == pytest.approx(ours, rel=2e-2)
    assert penetration > 1e-4 and gap > 0      # MuJoCo: 3.2e-4 m deep; diffmb: apart


@pytest.mark.slow
def test_fold_2x4_with_contact_for_30_s_stays_clean_and_conserves():
    """The paper's 2x4 case (sec. 4.3.1) with contact on, its defaults but elastic (issue
    58's undamped check: ``contact_rest_damping`` 0), 30 s: no crease
    past flat by more than 1e-5 rad at any accepted step (an event that would end the
    run) nor by 1e-9 at any save point, no crossing at any save point, energy (contact's
    included) to 1e-6,
    angular momentum to 1e-9 of its scale. Its two rows lie stacked on the long crease,
    at flat, all run (layers face to face at gap 0, never armed), and the barriers stay
    idle: the paper's model needs no contact force here (measured: 184 steps against 148
    without contact, |dE|/E 1.3e-7, |dH| 8.8e-10 N m s)."""
    sc = scenarios.get("fold-2x4")
    system, params, values = sc.make({"contact": 1.0, "contact_rest_damping": 0.0})
    assert sc.conserved(values) == ("energy", "angular_momentum")

    # checked at every accepted step (a true value would end the run as "event"): the
    # stacked creases pass flat by 1-2e-6 rad at the steps of the first 0.02 s (measured),
    # as the stack opens, where the crease barrier acts (its reach lies past flat, psi_hat
    # = 1e-3 rad; a conservative run never passes half of it); within 1e-9 at save points
    def past_flat(t, x, p):
        return jnp.max(jnp.abs(system.diagnostics(x, p)["crease_angle"])) > np.pi + 1e-5

    tr = diffmb.simulate(system, params=params, saveat=301, events=past_flat, **sc.run_settings(t1=30.0))
    assert tr.status == "success"
    assert health.check(tr, sc.conserved(values), system=system, params=params) == []
    e, p = system.elements[0], params["elements"][0]
    m = {k: float(v) for k, v in e.metrics(tr.diagnostics, jnp.isfinite(tr.ts), p).items()}
    assert m["max_crease_angle"] <= np.pi + 1e-9 and m["crease_overfold"] == 0 and m["panel_overlap"] == 0
    assert m["peak_contact_force"] == 0 and m["peak_crease_torque"] < 1e-10 and m["contact_overflow"] == 0
    E = np.asarray(tr.diagnostics["energy"])
    H = np.asarray(tr.diagnostics["angular_momentum"])
    assert np.max(np.abs(E - E[0])) <= 1e-6 * abs(E[0])
    assert np.max(np.abs(H - H[0])) <= 1e-9 * float(np.max(tr.diagnostics["momentum_scale"]))
    # each cut crease's branch state, integrated from its rate and never put back on the
    # geometry, strays from it by 3.5e-6 rad (measured), all of it in the first 0.07 s,
    # while the structure leaves its stacked start (where the closures are singular and
    # the projections' corrections largest); after t = 0.1 s the offset holds to 1.7e-9.
    # The branch needs only an offset below pi
    cut = [f"crease_{c[2]}" for c in e.cut_creases]
    assert cut
    z = np.asarray(tr.xs)[:, [system.state_names.index(n) for n in cut]]
    off = z - np.asarray(tr.diagnostics["crease_angle"])[:, len(e.tree_creases):]
    assert np.max(np.abs(off)) < 1e-5 and np.max(np.abs(off[1:] - off[1])) < 1e-8
    # the paper's order: panel 7 first, reaching flat "near the 20 second mark", where the
    # pairs' branch begins (test_origami: held by the kinematics until then); the pairs
    # keep identical states (here: stowed, as exact closures keep them past the branch point)
    th = {n: np.asarray(tr[f"theta_{n}"]) for n in "1234567"}
    t = np.asarray(tr.ts)
    k = int(np.argmax(th["7"] <= 0.0))
    assert k > 0
    flat = t[k - 1] + (t[k] - t[k - 1]) * th["7"][k - 1] / (th["7"][k - 1] - th["7"][k])
    assert 19.5 < flat < 20.5, flat                     # measured: 20.04 s
    for a, b in ("12", "34", "56"):
        assert np.abs(th[a] - th[b]).max() < 1e-8
        assert np.abs(np.abs(th[a]) - np.pi).max() < 1e-8


@pytest.mark.slow
def test_fold_2x4_damped_with_contact_never_gains_energy():
    """The same case with hinge damping and both contact dampings: the energy (contact's
    included) never rises from one save point to the next by more than 1e-9 of its start,
    and no crease passes flat, no panels cross."""
    sc = scenarios.get("fold-2x4")
    system, params, values = sc.make({"contact": 1.0, "c": 0.01, "contact_damping": 1.0,
                                      "contact_crease_damping": 0.01})
    tr = diffmb.simulate(system, params=params, saveat=301, **sc.run_settings(t1=30.0))
    assert tr.status == "success"
    e, p = system.elements[0], params["elements"][0]
    m = {k: float(v) for k, v in e.metrics(tr.diagnostics, jnp.isfinite(tr.ts), p).items()}
    assert m["max_crease_angle"] <= np.pi + 1e-9 and m["crease_overfold"] == 0 and m["panel_overlap"] == 0
    E = np.asarray(tr.diagnostics["energy"])
    assert E[-1] < E[0]                                   # the damping spent some
    assert np.max(np.diff(E)) <= 1e-9 * E[0]


@pytest.mark.slow
def test_a_sweep_with_contact_reports_every_members_contact(tmp_path):
    """A sweep of the 3x3 map fold over the barrier's stiffness, batched: every member
    reports its margins, events and overflow, none crosses, and a stiffer barrier lets
    its creases less far past flat."""
    import json

    from diffmb import cli

    js = tmp_path / "sweep.json"
    assert cli.main(["sweep", "map-fold", "--set", "rows=3", "--set", "cols=3", "--set", "contact=1",
                     "--batch", "3", "--set", "contact_kappa=0.5:2", "--t1", "0.3", "--json", str(js),
                     "--quiet"]) == 0
    members = json.loads(js.read_text())["members"]
    for m in members:
        assert m["status"] == "success" and m["crease_overfold"] == 0 and m["panel_overlap"] == 0
        assert m["contact_overflow"] == 0 and m["contact_events"] >= 1 and "min_contact_gap" in m
    past = [m["max_crease_angle"] - np.pi for m in members]
    assert 0 < past[2] < past[1] < past[0] < float(ContactOptions().psi_hat)


def test_a_crossing_with_contact_on_does_not_advise_turning_it_on(elastic):
    """The detector's advice follows the model: 'rerun with contact' when it was off;
    with it on, why an armed barrier can still be crossed (a stack unarmed at gap 0)."""
    system, element, params, _ = elastic
    p = params["elements"][0]
    crossing = {"panel_overlap": np.array([0.0, 1e-2]), "panel_overlap_pair": np.array([0.0, 0.0])}
    on, = element.check(np.array([0.0, 0.1]), crossing, p)
    off, = dataclasses.replace(element, forces=False).check(np.array([0.0, 0.1]), crossing, p)
    assert on["kind"] == off["kind"] == "panel_overlap" and on["panels"] == "big/small"
    assert "Rerun with --set contact=1" in off["message"] and "contact=1" not in on["message"]
    assert "armed once its layers separate" in on["message"]


def test_the_viewers_gap_and_force_per_panel_are_the_barriers(elastic):
    """What the viewer colours panels by (``viewer.origami.contact_fields``): each panel's
    gap is the two squares' separation, and the force on each is the four vertex-face
    primitives' barrier force ``4 kappa |b'(d)|``, zero beyond the reach."""
    from diffmb.viewer.origami import contact_fields

    system, element, params, tr = elastic
    p = params["elements"][0]
    f = contact_fields(system, params, np.asarray(tr.xs))
    q = np.asarray(jax.vmap(lambda x: system.split(x)[0])(tr.xs))
    m = system.model
    sep = q[:, m.body_slices[m.body_index("small")][0] + 5] - q[:, m.body_slices[m.body_index("big")][0] + 5]
    np.testing.assert_allclose(f["gap"]["small"], sep, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f["gap"]["big"], sep, rtol=0, atol=1e-12)
    kappa = float(panel_stiffness(p, p["energy"]))
    dhat = float(p["dhat"])
    slope = np.asarray(jax.vmap(jax.grad(lambda d: br.barrier(d, dhat)))(jnp.asarray(sep)))
    expected = 4 * kappa * np.abs(slope)
    assert np.max(expected) > 0.05                       # the run does reach the barrier
    np.testing.assert_allclose(f["force"]["small"], expected, rtol=1e-9, atol=1e-12 * np.max(expected))
    np.testing.assert_array_equal(f["force"]["big"], f["force"]["small"])
    assert np.all(f["force"]["small"][sep > dhat] == 0.0)


@pytest.mark.slow   # ~10 s: fold-3x3 with contact, 1,001 save points
def test_a_stack_arms_its_layers_at_step_ends_without_a_trace_in_the_energy():
    """fold-3x3's stack at gap 0 opens: each pair's arming state is 0 or 1 at every save
    point, some pairs arm within 1.5 s, and the energy, barriers included, is kept to 1e-6
    at 1,001 save points. An arming state that grew at a rate instead held Dopri5 to short
    steps; relaxing its error control let the interpolation between step ends half-arm a
    pair during a contact (a save point's energy 1e-3 off) or arm one at gap 0."""
    sc = scenarios.get("fold-3x3")
    system, params, _ = sc.make({"contact": 1.0})
    e = system.elements[0]
    tr = diffmb.simulate(system, params=params, t1=1.5, solver="dopri5", rtol=sc.rtol, atol=sc.atol, saveat=1001)
    assert tr.status == "success"
    n = system.model.nq + system.model.nv
    words = np.asarray(tr.xs[:, n + len(e.cut_creases):n + len(e.state_names) - 1])   # the budget last
    # the flags' integers held exactly between step ends (a save point interpolates)
    assert words.shape[1] == -(-len(e.pairs) // ARMING_BITS)
    assert np.all(words == np.floor(words)) and np.all((words >= 0) & (words < 2.0**ARMING_BITS))
    armed = np.asarray(jax.vmap(e.armed_pairs)(tr.xs[:, n:]))
    assert set(np.unique(armed)) <= {0.0, 1.0}
    newly = (armed[-1] == 1.0) & (armed[0] == 0.0)
    assert newly.any()
    E = np.asarray(tr.diagnostics["energy"])
    assert np.max(np.abs(E - E[0])) < 1e-6 * abs(E[0])


@pytest.mark.slow
def test_a_sweeps_save_points_take_the_nearest_pair_alone_and_report_the_same():
    """A sweep member's save points (``for_batches``) take the exact distance of the
    nearest pair alone while no armed pair is within reach, and all candidates where one
    is: the same energy, force and least gap as a single run's, which takes them all."""
    import equinox as eqx

    from diffmb.origami.contact import DIAGNOSED_PAIRS
    from diffmb.simulation.integrate import simulate

    sc = scenarios.get("map-fold")
    system, params, _ = sc.make({"contact": 1.0, "rows": 4, "cols": 4})
    tr = simulate(system, params=params, saveat=21, **sc.run_settings(t1=1.0))
    batched = eqx.tree_at(lambda s: s.elements, system, tuple(e.for_batches() for e in system.elements))
    assert batched.elements[0].nearest_at_saves and len(system.elements[0].pairs) > DIAGNOSED_PAIRS
    keys = ("contact_energy", "contact_force", "contact_gap", "contact_overflow", "energy")
    for scale in (1.0, 30.0):   # no armed pair within reach; then, with a longer reach, some
        p = dict(params, elements=(dict(params["elements"][0], dhat=scale * params["elements"][0]["dhat"]),))
        one, many = (jax.jit(jax.vmap(lambda x, s=s: s.diagnostics(x, p)))(tr.xs) for s in (system, batched))
        if scale > 1.0:
            assert 0 < np.count_nonzero(np.asarray(one["contact_force"]) > 0) < len(tr.ts)
        else:
            assert np.all(np.asarray(one["contact_force"]) == 0)
        assert np.isfinite(np.asarray(one["contact_gap"])).any()   # pairs armed once their layers part
        for k in keys:
            np.testing.assert_allclose(many[k], one[k], rtol=1e-12, atol=0, err_msg=k)


def test_the_pairs_arming_flags_packed_into_states_read_back_exactly_in_float32_too():
    """The flags 23 to a state, as the bits of an integer: every pattern of flags (any
    count, a last partial word) reads back as it was, in float64 and float32, and the
    states are integers below 2^23."""
    from diffmb.origami.contact import pack_flags, unpack_flags

    rng = np.random.default_rng(0)
    for m in (1, 22, 23, 24, 78, 4608):
        flags = rng.integers(0, 2, m).astype(float)
        flags[-1] = 1.0   # the highest bit of a last partial word
        for dtype in (jnp.float64, jnp.float32):
            words = pack_flags(jnp.asarray(flags, dtype))
            assert words.shape == (-(-m // ARMING_BITS),) and words.dtype == dtype
            w = np.asarray(words, float)
            assert np.all(w == np.floor(w)) and np.all((w >= 0) & (w < 2.0**ARMING_BITS))
            np.testing.assert_array_equal(np.asarray(unpack_flags(words, m)), flags)
    ones = pack_flags(jnp.ones(ARMING_BITS))
    assert float(ones[0]) == 2.0**ARMING_BITS - 1


def test_the_step_control_weighs_the_error_of_the_tree_states_alone():
    """The arming flags and the energy budget have no rate, and the cut creases' angles
    only pick each crease's branch: the error norm is the RMS over the tree's states,
    where diffrax's RMS over the whole state would be smaller by sqrt(weighed / all) (the
    steps this saves: test_flat_crossings, fold-2x4's README run)."""
    import optimistix as optx

    from diffmb.simulation.integrate import _weighed_states, _WeighedStatesNorm

    sc = scenarios.get("map-fold")
    system, params, _ = sc.make({"contact": 1.0, "rows": 4, "cols": 4})
    e = system.elements[0]
    own = system.model.nq + system.model.nv
    x = np.asarray(system.init_state(params)).copy()
    x[system.model.nq:own] = np.random.default_rng(0).normal(size=system.model.nv)   # speeds: the creases turn
    rate = np.asarray(system.vector_field(0.0, jnp.asarray(x), params))
    n_cut = len(e.cut_creases)
    assert n_cut and len(e.state_names) == n_cut + -(-len(e.pairs) // ARMING_BITS) + 1
    np.testing.assert_array_equal(rate[own + n_cut:], 0.0)        # flags and budget: no rate
    assert np.all(rate[own:own + n_cut] != 0.0)                    # the branch angles move
    weighed = _weighed_states(system)
    assert weighed == tuple(range(own))
    n = len(system.state_names)
    err = np.random.default_rng(1).normal(size=n)
    norm = _WeighedStatesNorm(weighed)
    np.testing.assert_allclose(float(norm(jnp.asarray(err))), np.sqrt(np.mean(err[:own] ** 2)), rtol=1e-14)
    err[own:] = 0.0
    assert float(optx.rms_norm(jnp.asarray(err))) < 0.97 * float(norm(jnp.asarray(err)))


def _two_layers(gap, capacity=16, damping=0.0):
    """Two layers of 3x3 free 0.2 m squares (0.3 m apart in a layer), ``gap`` apart: 153
    pairs, more than the ``capacity`` the forces take."""
    b = diffmb.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    names = [f"{layer}{k}" for layer in "ab" for k in range(9)]
    for n in names:
        b.add_body(n, "world", "free", mass=1.0, inertia=_inertia(1.0, 0.2))
    model = b.build()
    q0 = np.zeros(model.nq)
    for n in names:
        s = model.body_slices[model.body_index(n)][0]
        k = int(n[1:])
        q0[s + 3:s + 6] = 0.3 * (k % 3), 0.3 * (k // 3), gap if n[0] == "b" else 0.0
    element = free_panels(model, {n: _square(0.1) for n in names}, ContactOptions(capacity=capacity, damping=damping),
                          1.0)
    return diffmb.TreeSystem(model, q0, np.zeros(model.nv), elements=(element,)), element


def test_a_steps_plan_bounds_every_pairs_distance_and_leaves_the_forces_unchanged():
    """A step's stages read the distance bounds its start made (``step_end``'s plan), less
    each panel's largest vertex displacement since. The upper layer starts 1.5 reaches
    above the lower, all pairs armed; at stages that bring it, tilted, within reach or not
    quite, the planned bounds are below every pair's exact distance, and the generalized
    force is the one the stage's own broad phase gives, bit for bit (153 pairs, 16
    candidates: the nearest by either bound are the same). A stage that moved too little
    to reach the barrier skips the narrow phase, and one that slid sideways, where the
    plan leaves a doubt, takes its own bounds and finds no pair within reach."""
    from diffmb.origami.contact import pairs as pr
    from diffmb.tree.kinematics import kinematics

    dhat = float(_two_layers(1.0)[1].numbers["dhat"])
    system, e = _two_layers(1.5 * dhat)
    params = system.default_params()
    p, model = params["elements"][0], params["model"]
    assert float(p["thickness"]) == 0.0 and float(p["dhat"]) == dhat
    x0 = system.init_state(params)
    z = system.element_states(x0)[0]
    q0, _ = system.split(x0)
    armed, plan = jax.jit(lambda q, z: (e.armed_pairs(z), e.step_end(model, kinematics(model, q), z, p)[1]))(q0, z)
    assert np.all(np.asarray(armed) == 1.0)                                 # all apart at the start
    m = e._mask()
    I, J = e._pair_index()
    far = {**plan, "bound": jnp.full_like(plan["bound"], jnp.inf)}

    @jax.jit
    def stage(q, plan, far):
        ws = kinematics(model, q, jnp.zeros(model.nv))
        P = e.vertices(ws, p)
        exact = jnp.min(jax.vmap(pr.pair_distances)(P[I], m[I], P[J], m[J])[0], -1)
        forces = [e.evaluate(model, ws, z, k)[0] for k in (p, {**p, "step_plan": plan})]
        near = [e._near(P, e._words(z), {**p, "step_plan": k})[1] for k in (plan, far)]
        return e._moved_bounds(P, plan), exact, forces, near

    rng = np.random.default_rng(3)
    for drop, slide, touches in ((1.0, 0.0, True), (1.4, 0.0, True), (0.3, 0.0, False), (0.0, 0.6, False)):
        q = np.asarray(q0).copy()
        for k in range(9, 18):                                              # the upper layer drops, tilted
            s = model.body_slices[k][0]
            q[s + 5] -= drop * dhat
            q[s:s + 3] = 2e-5 * rng.uniform(-1, 1, 3)
            q[s + 3:s + 5] += 1e-5 * rng.uniform(-1, 1, 2) + np.array([slide * dhat, 0.0])
        planned, exact, (f_own, f_planned), (near, near_far) = jax.device_get(stage(jnp.asarray(q), plan, far))
        assert np.all(planned <= exact + 1e-15)
        assert np.any(planned < dhat) == (touches or slide > 0)
        assert bool(near) == touches
        assert np.array_equal(f_own, f_planned)
        assert (np.max(np.abs(f_own)) > 0) == touches
        assert not near_far                                                 # the stages go by the plan


@pytest.mark.parametrize("damping", [0.0, 3.0])
def test_tier_bs_wrench_at_the_nearest_points_is_the_gradient_of_its_energy(damping):
    """The solve takes Tier B's force on each panel as the wrench of every primitive's push
    at its two nearest points, plus the couple of the edge-edge weights (envelope theorem),
    with no backward pass of the narrow phase. It must equal what autodiff makes of the
    energy: ``-dE/dP`` at every vertex, and with damping ``-dR/dV`` of Rayleigh's function
    at the rigid vertex velocities, summed into each panel's wrench. The upper layer, armed
    1.5 reaches up, drops a reach, slid and tilted by up to 2e-3 rad, so that pairs of
    edges lie within the mollifier's angle (1.8 deg: without the couples the moments
    differ by 6e-4 of the largest) and the first trial exactly parallel."""
    from diffmb.tree.kinematics import kinematics

    dhat = float(_two_layers(1.0)[1].numbers["dhat"])
    system, e = _two_layers(1.5 * dhat, damping=damping)
    assert e.damped == (damping > 0)
    params = system.default_params()
    p, model = params["elements"][0], params["model"]
    x0 = system.init_state(params)
    z = system.element_states(x0)[0]
    q0, _ = system.split(x0)

    def reference(P, V, bound):
        f = -jax.grad(lambda P: e._panel_terms(P, z, p, bound)[0])(P)
        if damping:
            def rayleigh(V):
                (a, w, gap), (_, _, gap_dot) = jax.jvp(lambda P: e._panel_terms(P, z, p, bound)[3], (P,), (V,))
                x = jnp.clip(1.0 - gap / p["dhat"], 0.0, 1.0)
                return 0.5 * p["damping"] * jnp.sum(a * w * x * x * (3.0 - 2.0 * x) * gap_dot**2)
            f = f - jax.grad(rayleigh)(V)
        return jnp.sum(jnp.cross(P, f), 1), jnp.sum(f, 1)

    @jax.jit
    def both(q, qd):
        ws = kinematics(model, q, qd)
        P = e.vertices(ws, p)
        bound = e._pair_bounds(P, p)
        vel = ws.vel[np.asarray(e.panel_body)]
        V = vel[:, None, 3:] + jnp.cross(vel[:, None, :3], P)
        return e._panel_wrenches(ws, P, z, p, bound), reference(P, V, bound)

    rng = np.random.default_rng(1)
    for trial in range(4):
        q, qd = np.asarray(q0).copy(), 0.1 * rng.standard_normal(model.nv)
        for k in range(9, 18):
            s = model.body_slices[k][0]
            q[s:s + 3] = 2e-3 * rng.uniform(-1, 1, 3) * (trial > 0)
            q[s + 3:s + 5] += 0.02 * rng.uniform(-1, 1, 2)
            q[s + 5] -= dhat
        (moment, force), (moment_ref, force_ref) = jax.device_get(both(jnp.asarray(q), jnp.asarray(qd)))
        scale = np.max(np.abs(force_ref))
        assert scale > 1e3                                      # in contact
        np.testing.assert_allclose(force, force_ref, rtol=0, atol=1e-11 * scale)
        np.testing.assert_allclose(moment, moment_ref, rtol=0, atol=1e-11 * scale)


def test_a_planned_solve_traces_its_vector_field_once(monkeypatch):
    """The solve's arguments carry a first plan (not made), so diffrax's check of the term
    traces the vector field with the structure the steps call it with, and the steps
    reuse that trace (a check without the plan was a second trace: 10x10 map fold,
    lowering 2.1 -> 2.5 s). In JAX's standard promotion, as users run: this suite's
    strict one traces the check apart from the steps in any case."""
    from diffmb.simulation import integrate

    system, _ = _two_layers(0.1, capacity=17)          # a structure no other test traces
    traced = []
    original = diffmb.TreeSystem.state_derivative
    monkeypatch.setattr(diffmb.TreeSystem, "state_derivative",
                        lambda self, t, x, params: traced.append(1) or original(self, t, x, params))
    with jax.numpy_dtype_promotion("standard"):
        args = integrate.simulate(system, t1=0.01, solver="dopri5", _compile_only=True)
        traced.clear()
        integrate._solve.lower(*args)
    assert system.plans_steps and len(traced) == 1
