"""The contact model's pieces against closed forms: the clamped log barrier (IPC's, C2 at
its reach, finite and NaN-free below its floor) and the distances and overlaps of flat
convex polygons."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.math import barrier as br, geometry as geo


def _square(cx, cy, half, z=0.0):
    return jnp.array([[cx - half, cy - half, z], [cx + half, cy - half, z], [cx + half, cy + half, z],
                      [cx - half, cy + half, z]])


MASK = jnp.array([True] * 4)


def test_barrier_is_c2_at_its_reach_and_its_closed_form_inside():
    dhat = 2e-3
    d = np.linspace(0.05, 0.999, 9) * dhat
    expect = -((d - dhat) ** 2) * np.log(d / dhat)
    np.testing.assert_allclose(br.barrier(jnp.asarray(d), dhat), expect, rtol=1e-13)
    db, d2b = jax.grad(br.barrier), jax.grad(jax.grad(br.barrier))
    for f in (br.barrier, db, d2b):   # value, slope and curvature vanish at the reach (b'' ~ 6 e)
        assert abs(float(f(dhat * (1 - 1e-9), dhat))) < 1e-8 and float(f(dhat * 1.5, dhat)) == 0.0
    # and the curvature at half the reach: 2 ln 2 + 5
    assert float(d2b(dhat / 2, dhat)) == pytest.approx(2 * np.log(2) + 5, rel=1e-12)
    # the value there, which sets the default stiffnesses, in closed form: dhat^2 ln(2) / 4
    for reach in (dhat, 0.35):
        assert float(br.half_reach(reach)) == pytest.approx(float(br.barrier(reach / 2, reach)), rel=1e-14)


def test_below_its_floor_the_barrier_is_finite_and_continues_smoothly():
    dhat = 1e-3
    f = br.FLOOR * dhat
    vals = [br.barrier, jax.grad(br.barrier), jax.grad(jax.grad(br.barrier))]
    for g in vals:   # C2 across the floor
        lo, hi = float(g(f * (1 - 1e-7), dhat)), float(g(f * (1 + 1e-7), dhat))
        assert lo == pytest.approx(hi, rel=1e-5)
    for d in (0.0, -1.0, -1e6):
        for g in vals:
            assert np.isfinite(float(g(d, dhat)))
    assert float(jax.grad(br.barrier)(0.0, dhat)) < 0  # still pushing apart


def test_barrier_inverse_recovers_the_distance():
    dhat = 1e-3
    for d in (1e-6, 3e-4, 9e-4):
        assert float(br.barrier_inverse(br.barrier(d, dhat), dhat)) == pytest.approx(d, rel=1e-9)


def test_point_polygon_distance_inside_beside_and_off_a_corner():
    A = _square(0, 0, 1.0)
    assert float(geo.point_polygon_distance(jnp.array([0.2, 0.3, -0.4]), A, MASK)) == pytest.approx(0.4)
    assert float(geo.point_polygon_distance(jnp.array([2.0, 0.5, 0.0]), A, MASK)) == pytest.approx(1.0)
    assert float(geo.point_polygon_distance(jnp.array([2.0, 2.0, 1.0]), A, MASK)) == pytest.approx(np.sqrt(3))
    # continuous, with a continuous gradient, across the rim of the face
    g = jax.grad(geo.point_polygon_distance)
    p_in, p_out = jnp.array([1.0 - 1e-9, 0.0, 0.5]), jnp.array([1.0 + 1e-9, 0.0, 0.5])
    assert float(geo.point_polygon_distance(p_in, A, MASK)) == pytest.approx(
        float(geo.point_polygon_distance(p_out, A, MASK)), abs=1e-8)
    np.testing.assert_allclose(g(p_in, A, MASK), g(p_out, A, MASK), atol=1e-8)
    # a triangle padded to four rows
    tri = jnp.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0]])
    m = jnp.array([True, True, True, False])
    assert float(geo.point_polygon_distance(jnp.array([0.6, 0.6, 0.0]), tri, m)) == pytest.approx(0.1 * np.sqrt(2))


def test_segment_distance_crossing_parallel_and_skew():
    s = lambda *v: [jnp.asarray(x, float) for x in v]
    assert float(geo.segment_distance(*s([0, 0, 0], [1, 0, 0], [0.5, -1, 1], [0.5, 1, 1]))) == pytest.approx(1.0)
    assert float(geo.segment_distance(*s([0, 0, 0], [1, 0, 0], [0.2, 0, 1], [0.8, 0, 1]))) == pytest.approx(1.0)
    assert float(geo.segment_distance(*s([0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 1, 0]))) == pytest.approx(np.sqrt(2))
    # parallel edges: no NaN in the gradient
    grad = jax.grad(lambda a: geo.segment_distance(a, *s([1, 0, 0], [0.2, 0, 1], [0.8, 0, 1])))(jnp.zeros(3))
    assert np.all(np.isfinite(np.asarray(grad)))


def test_overlap_depth_apart_touching_stacked_and_crossing():
    A = _square(0, 0, 1.0)
    assert float(geo.overlap_depth(A, MASK, _square(0, 0, 0.5, 0.1), MASK)) == pytest.approx(-0.1)  # a layer above
    assert float(geo.overlap_depth(A, MASK, _square(0.2, 0, 0.5), MASK)) == pytest.approx(0.0)       # face to face
    assert float(geo.overlap_depth(A, MASK, _square(2.5, 0, 0.5), MASK)) == pytest.approx(-1.0)      # beside it
    plate = jnp.array([[-0.3, 0, -0.2], [0.3, 0, -0.2], [0.3, 0, 0.3], [-0.3, 0, 0.3]])               # through it
    assert float(geo.overlap_depth(A, MASK, plate, MASK)) == pytest.approx(0.2)
    assert float(geo.overlap_depth(A, MASK, plate + jnp.array([[1.5, 0.0, 0.0]]), MASK)) == pytest.approx(-0.2)


def _sat_reference(V1, m1, V2, m2):
    """The separating-axis depth read plainly (numpy): unit axes, every real vertex
    projected, the least interval overlap over the axes that are not degenerate."""
    def outline(V, m):
        R = V[m]
        return R, np.roll(R, -1, 0) - R

    def normal(R):
        n = np.sum(np.cross(R, np.roll(R, -1, 0)), 0)
        return n / np.linalg.norm(n)

    (R1, E1), (R2, E2) = outline(V1, m1), outline(V2, m2)
    n1, n2 = normal(R1), normal(R2)
    axes = [n1, n2, *np.cross(n1, E1), *np.cross(n2, E2), *np.cross(E1[:, None], E2[None]).reshape(-1, 3)]
    size = max(np.abs(V1).max(), np.abs(V2).max()) + 1.0
    depth = np.inf
    for a in axes:
        if a @ a <= 1e-20 * size**4:
            continue
        u = a / np.linalg.norm(a)
        p1, p2 = R1 @ u, R2 @ u
        depth = min(depth, min(p1.max() - p2.min(), p2.max() - p1.min()))
    return depth


def test_overlap_depth_agrees_with_a_plain_separating_axis_test():
    """Random quads and triangles (padded to four vertices), turned and moved so that some
    cross, some touch and some lie apart: the written-out test (axes unnormalised, overlaps
    divided by their length, extremes over the vertices written out) equals the plain one
    to round-off."""
    rng = np.random.default_rng(3)
    tri = np.array([True, True, True, False])
    depths = []
    for _ in range(60):
        mask = [MASK, jnp.asarray(tri)][int(rng.integers(2))]
        V1 = np.asarray(_rigid(_square(0, 0, 1.0), jnp.asarray(rng.normal(0, 1, 6) * [1, 1, 1, .6, .6, .6])))
        V2 = np.array(_rigid(_square(0, 0, 0.7), jnp.asarray(rng.normal(0, 1, 6) * [1, 1, 1, .6, .6, .6])))
        if not mask[3]:
            V2[3] = V2[2]
        got = float(geo.overlap_depth(jnp.asarray(V1), MASK, jnp.asarray(V2), mask))
        want = _sat_reference(V1, np.asarray(MASK), V2, np.asarray(mask))
        assert got == pytest.approx(want, abs=1e-13), (got, want)
        depths.append(want)
    assert min(depths) < 0 < max(depths)           # both apart and crossing pairs were drawn


def _rigid(V, theta):
    """``V`` turned by the rotation vector ``theta[:3]`` (Rodrigues) and moved by ``theta[3:]``."""
    w = theta[:3]
    a = jnp.sqrt(jnp.sum(w * w))
    k = w / a
    K = jnp.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    R = jnp.eye(3) + jnp.sin(a) * K + (1.0 - jnp.cos(a)) * K @ K
    return V @ R.T + theta[3:][None, :]


@pytest.mark.parametrize("shape", ["square", "triangle"])
def test_distance_derivatives_by_the_nearest_point_match_central_differences(shape):
    """The distances are differentiated with the nearest points held fixed (Danskin): their
    gradient and its derivative (the contact force's Jacobian, which reverse mode through
    a run needs) against central differences of the distance itself, for a polygon moved
    rigidly and a point moved freely, over the face, beside an edge and off a corner."""
    V0, m = ((_square(0.5, 0.5, 0.5), MASK) if shape == "square" else
             (jnp.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0]]), jnp.array([True, True, True, False])))
    f = lambda th, p: geo.point_polygon_distance(p + th[6:], _rigid(V0, th[:6]), m)
    rng = np.random.default_rng(3)
    h = 1e-5
    # compiled once, the central differences of every direction in one batch (run op by
    # op, the same checks took 14-19 s)
    grad, jac = jax.jit(jax.grad(f)), jax.jit(jax.jacfwd(jax.grad(f)))
    steps = h * np.eye(9)
    f_fd = jax.jit(jax.vmap(lambda e, th, p: (f(th + e, p) - f(th - e, p)) / (2 * h), (0, None, None)))
    g_fd = jax.jit(jax.vmap(lambda e, th, p: (jax.grad(f)(th + e, p) - jax.grad(f)(th - e, p)) / (2 * h),
                            (0, None, None)))
    for p in ([0.3, 0.2, 0.4], [1.4, 0.3, -0.2], [1.3, 1.6, 0.5], [-0.4, -0.3, 0.1]):
        p = jnp.asarray(p)
        th = jnp.asarray(np.concatenate([rng.normal(size=3) * 0.05 + 0.01, rng.normal(size=6) * 0.02]))
        np.testing.assert_allclose(grad(th, p), f_fd(steps, th, p), atol=1e-9)
        np.testing.assert_allclose(jac(th, p), g_fd(steps, th, p), atol=1e-6)
    s = lambda x: geo.segment_distance(x[0:3], x[3:6], x[6:9], x[9:12])
    grad, hess = jax.jit(jax.grad(s)), jax.jit(jax.hessian(s))
    steps = h * np.eye(12)
    s_fd = jax.jit(jax.vmap(lambda e, x: (s(x + e) - s(x - e)) / (2 * h), (0, None)))
    gs_fd = jax.jit(jax.vmap(lambda e, x: (jax.grad(s)(x + e) - jax.grad(s)(x - e)) / (2 * h), (0, None)))
    for x in (rng.normal(size=12) for _ in range(4)):
        x = jnp.asarray(x)
        np.testing.assert_allclose(grad(x), s_fd(steps, x), atol=1e-9)
        np.testing.assert_allclose(hess(x), gs_fd(steps, x), atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_a_pairs_primitives_side_by_side_equal_one_pair_at_a_time_and_stay_finite(dtype):
    """Tier B's narrow phase takes pairs side by side (leading axes) instead of a vmap over
    them: the same distances, weights, nearest points and couples as one pair at a time.
    Every primitive's nearest points lie its distance apart. A triangle padded to four
    vertices (a zero-length edge) tilted inside the mollifier's angle over a square keeps
    every output finite in float32 too, where the mollifier's 1e-300 underflows to 0."""
    from diffmb.origami.contact import pairs as pr

    tri = jnp.array([[0.1, 0.1, 0.02], [0.8, 0.1, 0.02], [0.1, 0.8, 0.02005], [0.1, 0.8, 0.02005]])
    mt = jnp.array([True, True, True, False])
    sq = _square(0.5, 0.5, 0.5)
    far = _square(2.5, 0.3, 0.4, 0.3)
    Pi = jnp.stack([tri, far, sq]).astype(dtype)
    mi = jnp.stack([mt, MASK, MASK])
    Pj = jnp.stack([sq, sq, tri]).astype(dtype)
    mj = jnp.stack([MASK, MASK, mt])
    together = jax.jit(pr.pair_primitives)(Pi, mi, Pj, mj)
    alone = jax.jit(jax.vmap(pr.pair_primitives))(Pi, mi, Pj, mj)
    for a, b in zip(together, alone):
        assert a.dtype == dtype and np.all(np.isfinite(np.asarray(a)))
        np.testing.assert_allclose(a, b, rtol=1e-12 if dtype == jnp.float64 else 1e-5, atol=1e-12)
    d, w, ci, cj, couple = (np.asarray(a, np.float64) for a in together)
    np.testing.assert_allclose(np.linalg.norm(ci - cj, axis=-1), d, atol=1e-12 if dtype == jnp.float64 else 1e-6)
    dd, ww = pr.pair_distances(Pi, mi, Pj, mj)
    np.testing.assert_allclose(dd, d, atol=1e-12 if dtype == jnp.float64 else 1e-6)
    np.testing.assert_array_equal(ww, w)
    assert np.any(np.abs(couple) > 0)                       # the tilted edge lies within the mollifier's angle
