"""Batched evaluation on a CPU (diffmb.math.vectorize) and the two forms of the small products.

The written-out form and the blocked map change how XLA runs the arithmetic, never the
arithmetic: every check compares with the default form on one state at a time, to
round-off relative to the quantity's size.
"""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmb
from diffmb import scenarios
from diffmb.math import spatial as sp
from diffmb.math.vectorize import vmap_blocks
from diffmb.simulation.integrate import _project
from helpers import make_random_model, random_state


def test_written_out_products_equal_the_reduced_ones():
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(2, 5, 4, 3, 3))
    A6, x6 = rng.normal(size=(4, 6, 6)), rng.normal(size=(4, 6))
    x = rng.normal(size=(5, 4, 3))
    cases = [lambda: sp.mm(A, B), lambda: sp.mv(A, x), lambda: sp.mtv(A, x), lambda: sp.vdot(x, x),
             lambda: sp.mv(A6, x6), lambda: sp.mtv(A6, x6)]
    reference = [A @ B, np.einsum("...ij,...j->...i", A, x), np.einsum("...ji,...j->...i", A, x),
                 (x * x).sum(-1), np.einsum("...ij,...j->...i", A6, x6), np.einsum("...ji,...j->...i", A6, x6)]
    assert sp.contraction_form() == "reduce"
    for form in (False, True):
        with sp.written_out(form):
            assert sp.contraction_form() == ("written" if form else "reduce")
            for f, ref in zip(cases, reference):
                np.testing.assert_allclose(f(), ref, rtol=1e-14, atol=1e-14)
    assert sp.contraction_form() == "reduce"


def test_a_long_product_is_one_dot_and_a_short_one_a_fused_reduction():
    """``spatial.mv``/``mtv``/``vdot`` of one product over more than ``REDUCED_MAX``
    entries is a dot kernel (XLA's CPU reduction over a long axis loops per output
    element), over fewer a multiply-and-reduce; the numbers are the product either way."""
    rng = np.random.default_rng(1)
    for n in (3, sp.REDUCED_MAX, sp.REDUCED_MAX + 1, 50):
        A, x = rng.normal(size=(n, n)), rng.normal(size=n)
        for f, ref in [(sp.mv, A @ x), (sp.mtv, A.T @ x)]:
            np.testing.assert_allclose(f(A, x), ref, rtol=1e-13, atol=1e-13)
            ops = [e.primitive.name for e in jax.make_jaxpr(f)(A, x).eqns]
            assert ("dot_general" in ops) == (n > sp.REDUCED_MAX), (n, ops)
        np.testing.assert_allclose(sp.vdot(x, x), x @ x, rtol=1e-13)


def test_a_large_short_product_is_written_out_and_a_small_one_reduced():
    """In the default form, a contraction over 3 or 6 with at least ``WRITTEN_OUT_MIN_RESULTS``
    results (the rotated inertias of a large tree) is written out term by term: reduced,
    XLA's CPU backend makes it a batched dot kernel, several times slower. A few bodies'
    products stay reduced (fewest kernels). The numbers are the product either way."""
    rng = np.random.default_rng(2)
    small = 256 // 9 - 1                      # 27 bodies x 3 x 3 = 243 results
    for bodies in (small, small + 2, 400):
        A, B = rng.normal(size=(bodies, 3, 3)), rng.normal(size=(bodies, 3, 3))
        written = bodies * 9 >= sp.WRITTEN_OUT_MIN_RESULTS
        np.testing.assert_allclose(sp.mm(A, B), A @ B, rtol=1e-13, atol=1e-13)
        ops = [e.primitive.name for e in jax.make_jaxpr(sp.mm)(A, B).eqns]
        assert ("reduce_sum" in ops) != written, (bodies, ops)
        x = rng.normal(size=(bodies, 3))
        np.testing.assert_allclose(sp.mv(A, x), np.einsum("kij,kj->ki", A, x), rtol=1e-13, atol=1e-13)
        assert sp.writes_out(3, (bodies, 3)) == (bodies * 3 >= sp.WRITTEN_OUT_MIN_RESULTS)
    assert not sp.writes_out(sp.WRITTEN_OUT_MAX + 1, (10_000,))  # long contractions never


@pytest.fixture(scope="module")
def branched():
    """A floating base with every joint kind below it, branching (several bodies per level)."""
    return make_random_model(3, n_bodies=9, base="free", springs=True, dampers=True,
                             kinds=("revolute", "prismatic", "spherical", "universal"))


@pytest.mark.parametrize("algorithm", ["recursive", "dense"])
def test_blocked_batch_equals_one_state_at_a_time(branched, algorithm):
    """300 states in blocks of 128 (the last one filled up): each equal to the default form's
    single-state forward dynamics, and the ABA to the mass-matrix solve."""
    model = branched
    states = [random_state(model, s, scale=0.7) for s in range(300)]
    q = jnp.asarray(np.stack([s[0] for s in states]))
    qd = jnp.asarray(np.stack([s[1] for s in states]))
    tau = jnp.asarray(np.random.default_rng(5).normal(size=(300, model.nv)))
    fd = lambda q, qd, tau: diffmb.forward_dynamics(model, q, qd, tau, algorithm=algorithm)
    batched = vmap_blocks(fd, block=128)(q, qd, tau)
    single = jax.jit(fd)
    reference = np.stack([single(q[i], qd[i], tau[i]) for i in (0, 1, 127, 128, 255, 256, 299)])
    got = np.asarray(batched)[[0, 1, 127, 128, 255, 256, 299]]
    scale = np.max(np.abs(reference))
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * scale)
    crba = jax.jit(lambda q, qd, tau: diffmb.forward_dynamics(model, q, qd, tau, algorithm="dense"))
    np.testing.assert_allclose(got[-1], crba(q[299], qd[299], tau[299]), rtol=0, atol=1e-10 * scale)


def test_blocked_batch_keeps_pytrees_and_short_batches():
    f = lambda x, y: {"sum": x + y["a"], "dot": sp.vdot(x, y["a"])}
    x = jnp.arange(15.0).reshape(5, 3)
    out = vmap_blocks(f, block=4)(x, {"a": 2 * x})
    np.testing.assert_allclose(out["sum"], 3 * x)
    np.testing.assert_allclose(out["dot"], 2 * (x * x).sum(-1))
    assert out["dot"].shape == (5,)


def _primitives(jaxpr, out=None):
    """How many equations of each primitive ``jaxpr`` holds, inner jaxprs (jits, scans,
    loops, branches) included."""
    out = Counter() if out is None else out
    for eqn in jaxpr.eqns:
        out[eqn.primitive.name] += 1
        for v in eqn.params.values():
            for sub in v if isinstance(v, (list, tuple)) else [v]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    _primitives(inner, out)
    return out


@pytest.mark.parametrize("name,stabilization", [("pendulum", None), ("fold-4panel", None),
                                                ("uk-hinged-cubes", "projection")])
def test_a_trace_takes_the_current_form_whatever_was_traced_before(name, stabilization):
    """The vector field and the projection, each through its inner jit, traced written out
    after the same calls were traced reduced, hold the written-out form's operations (those
    of the equations traced directly, no jit in between): the inner jits are keyed on the
    form. (Before: the second trace reused the reduced jaxpr, so a sweep's bits depended on
    what its process had run earlier.) The three cover both jits: the vector field (in the
    base class, every formulation's), the tree's projection and the Udwadia-Kalaba one's."""
    system, params, _ = scenarios.get(name).make(stabilization=stabilization)
    x0 = system.init_state(params)
    # a new function object per trace: make_jaxpr caches its own traces by function
    jitted = lambda: lambda x: (system.vector_field(0.0, x, params), _project(system, x, params))
    direct = lambda: lambda x: (system.state_derivative(0.0, x, params), system.project(x, params))
    count = lambda f: _primitives(jax.make_jaxpr(f())(x0).jaxpr)
    reduced = count(direct)
    count(jitted)
    with sp.written_out():
        written, after = count(direct), count(jitted)
    for c in (reduced, written, after):  # the jit wrappers themselves
        c.pop("pjit", None)
        c.pop("jit", None)
    assert written != reduced and after == written
