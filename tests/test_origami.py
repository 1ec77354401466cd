"""Origami closed chains (Fulton & Schaub): the paper's grids, closure counts, the
reported behaviour of the four-panel fold, conservation with projection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb import simulate
from diffmb.origami import build, map_fold
from diffmb.scenarios.origami import fold_2x4, fold_3x3, fold_4panel
from diffmb.tree import api


@pytest.mark.parametrize("rows,cols", [(2, 2), (4, 2), (3, 3), (2, 4), (4, 4)])
def test_map_fold_closure_counts_match_eqs_20_21(rows, cols):
    _, info = build(map_fold(rows, cols), stabilization="none")
    n_b, n_h = rows * cols, cols
    assert info.n_b == n_b and info.n_h == n_h
    assert info.n_p == (n_h - 1) * (n_b // n_h - 1)  # eq. (20)
    assert info.n_c == n_b - n_h  # eq. (21)


def test_paper_grids_topology():
    s4, i4 = build(fold_4panel(), stabilization="none")
    assert i4.pairs == (("l", "m"),)
    s8, i8 = build(fold_2x4(), stabilization="none")
    assert sorted(map(sorted, i8.pairs)) == [["1", "2"], ["3", "4"], ["5", "6"]]
    assert s8.model.nv == 13  # free hub + 7 hinges
    s9, i9 = build(fold_3x3(), stabilization="none")
    carriers = [n for pair in i9.pairs for n in pair]
    assert carriers.count("2") == 2 and carriers.count("5") == 2  # two closures on one body
    # the four-panel vertex is a spherical 4R loop: 2 independent rotation rows, the
    # translations are implied (all hinge axes pass through the vertex)
    rep = s4.closures.report
    assert rep.rank == 2 and all(r.split(":")[1].startswith("t") for r in rep.redundant)


def test_fold_2x4s_pairs_are_held_by_the_kinematics_until_crease_7_is_flat():
    """Sec. 4.3.1: panel 7 unfolds first, and the z-folded pairs (1-2, 3-4, 5-6) release
    'near the 20 second mark', 'expected to unfold with identical states'. The closure
    Jacobian says why: with crease r-7 anywhere strictly between flat and folded (either
    way) the only motion is crease 7's, the pairs locked at 180 deg; at flat it is a
    branch point where each pair's two creases may turn, together and equal. The lock
    weakens in proportion to crease 7's angle (the smallest nonzero singular values)."""
    from diffmb.closures.nodes import _jacobian_at, row_index, start_mobility

    system, _ = build(fold_2x4(), stabilization="projection")
    m, nodes = system.model, system.closures
    names = m.coordinate_names[6:]                      # theta_7, theta_6, ..., theta_1
    rows = tuple(int(r) for r in row_index(nodes.closures))

    def at(theta7):
        q = np.asarray(system.q0, float).copy()
        q[6] = theta7
        G = np.asarray(_jacobian_at(m, nodes, rows, q))[:, 6:]
        _, s, vt = np.linalg.svd(G)
        return start_mobility(m, nodes, q), vt[(s > 1e-9 * s[0]).sum():], s

    e = {n: np.eye(7)[names.index(f"theta_{n}")] for n in "1234567"}
    for theta7 in (1.0, -0.5):
        mob, free, _ = at(theta7)
        assert mob.dof == 1 and mob.infinitesimal == 1
        assert np.allclose(np.abs(free @ e["7"]), 1.0, atol=1e-12)
    mob, free, _ = at(0.0)
    assert mob.infinitesimal == 4
    expect = np.stack([e["7"], *((e[a] + e[b]) / np.sqrt(2) for a, b in ("12", "34", "56"))])
    assert np.abs(free.T @ free - expect.T @ expect).max() < 1e-9   # the same tangent space
    weak = lambda theta7: at(theta7)[2][-3:-1]          # the two that vanish at flat
    assert np.allclose(weak(2e-3) / weak(1e-3), 2.0, rtol=1e-4)


def test_inconsistent_fold_is_rejected_naming_the_closure():
    pattern = fold_4panel()
    for c in pattern.creases:
        if {c.a, c.b} == {"j", "l"}:
            c.fold = 0.5  # the map cannot be folded like this with rigid panels
    with pytest.raises(ValueError, match="closure 'l-m'"):
        build(pattern)


@pytest.fixture(scope="module")
def four_panel_run():
    system, _ = build(fold_4panel(), stabilization="projection")
    return system, simulate(system, t1=4.0, dt=4e-3, solver="rk4", saveat=101)


def test_four_panel_hinge_j_unfolds_while_l_and_m_stay_folded(four_panel_run):
    """Section 4.2 / Fig. 8: the fold at j opens; l and m cannot open before it is flat."""
    system, tr = four_panel_run
    th = {n: np.asarray(tr[n]) for n in ("theta_j", "theta_l", "theta_m")}
    assert th["theta_j"][0] == pytest.approx(np.pi)
    assert th["theta_j"].min() < np.pi / 2  # past half-open within 4 s
    assert np.abs(th["theta_l"] + np.pi).max() < 1e-6
    assert np.abs(th["theta_m"] + np.pi).max() < 1e-6


def test_four_panel_projection_conserves(four_panel_run):
    _, tr = four_panel_run
    s = tr.summary()
    assert s["violation"]["position_max"] < 1e-10
    assert s["angular_momentum"]["max_abs_change"] < 1e-8  # free-flying: RK4 error only (dt = 4 ms)
    assert s["energy"]["max_rel_change"] < 1e-4


def test_projection_puts_back_a_free_flying_folds_momentum():
    """The 3x3 fold (a free hub, two closures on one body) stowed, 1e-4 off its closures
    in position and speed: the rigid velocity that follows the projection puts the total
    momentum back to round-off (its target read at the first Gauss-Newton iterate's
    poses, the state given), whatever the iteration count. The stowed state is the
    folded-flat, singular one, where Gauss-Newton converges slower than quadratically
    (measured: 3.9e-4 -> 1.7e-14 m in three iterations, 3.3e-11 m in the save points'
    two), hence the bounds on the violation."""
    system, _ = build(fold_3x3(), stabilization="projection")
    p = system.default_params()
    model = p["model"]
    q, qd = (np.asarray(v) for v in system.split(system.init_state(p)))
    rng = np.random.default_rng(3)
    x = jnp.asarray(np.concatenate([q + 1e-4 * rng.normal(size=q.shape), qd + 1e-4 * rng.normal(size=qd.shape)]))

    @jax.jit
    def both(x):
        h = lambda y: api.spatial_momentum(model, *system.split(y))
        out = [system.project(x, p), system.project_interpolated(x, p)]
        return h(x), [h(y) for y in out], [system.violation(y, p) for y in out]

    h0, hs, viols = both(x)
    for h, v in zip(hs, viols):
        assert float(jnp.max(jnp.abs(h - h0))) < 1e-14 * float(jnp.max(jnp.abs(h0)))
        assert float(v["position"]) < 1e-10 and float(v["velocity"]) < 1e-8


# slow job: Fig. 20's run (~6 s); the default job keeps this fold's projection putting momentum
# back (test_projection_puts_back_a_free_flying_folds_momentum) and fold-4panel's projected run
@pytest.mark.slow
def test_three_by_three_runs_with_projection():
    """The case the paper could not run (Fig. 20): two closures on one body."""
    system, _ = build(fold_3x3(), stabilization="projection")
    tr = simulate(system, t1=1.0, dt=5e-3, solver="rk4", saveat=21)
    assert tr.status == "success"
    s = tr.summary()
    assert s["violation"]["position_max"] < 1e-9
    # projection restores the momentum its position correction would change
    assert s["angular_momentum"]["max_abs_change"] < 1e-11
    lin = np.asarray(tr.trimmed().diagnostics["linear_momentum"])
    assert np.abs(lin - lin[0]).max() < 1e-9
