"""Fixed-step runs in loops the compiler can count (``loop="scan"``), the library-free
``"device"`` form, and the census that reads both off a compiled program on a CPU."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmb.design import batch
from diffmb.design.chunk_census import chunk_census
from diffmb.math import small_cholesky, spatial as sp
from diffmb.scenarios import get
from diffmb.simulation.integrate import compile_simulation, simulate
from diffmb.simulation.program_census import census, uncached


def _run(system, params, loop, steps=40, dt=None, **kw):
    dt = dt or 1e-3
    return simulate(system, t1=steps * dt, dt=dt, solver="rk4", saveat=5, params=params, loop=loop,
                    diagnostics=False, **kw)


# (scenario, stabilization, step): every formulation: the origami folds (tree + cut
# closures), Udwadia-Kalaba (chain), tensegrity (T-bar); in the slow job Kane (dual-arm
# grasp) and flexible (4 bodies)
FAST = [("fold-4panel", "baumgarte", 1e-3), ("uk-chain", "projection", 1e-3), ("tbar", "projection", 1e-4)]
SLOW = [("dual-arm-grasp", "projection", 0.05), ("flex-4body", "none", 5e-3), ("fold-4panel", "projection", 1e-3),
        ("fold-2x4", "projection", 1e-3), ("fold-3x3", "baumgarte", 1e-3),
        ("map-fold", "projection", 1e-3), ("miura", "projection", 1e-3), ("scheel", "projection", 1e-3),
        ("uk-hinged-cubes", "baumgarte", 1e-3), ("tensegrity-ball", "projection", 1e-4)]


@pytest.mark.parametrize("name,stab,dt", FAST + [pytest.param(*c, marks=pytest.mark.slow) for c in SLOW])
def test_the_counted_loop_steps_as_diffrax_does(name, stab, dt):
    system, params, _ = get(name).make(stabilization=stab)
    a, b = _run(system, params, "diffrax", dt=dt), _run(system, params, "scan", dt=dt)
    assert a.status == b.status == "success"
    np.testing.assert_array_equal(np.asarray(a.ts), np.asarray(b.ts))   # the same step grid
    scale = float(np.max(np.abs(np.asarray(a.xs))))
    # round-off: the stages summed in another order, over 40 steps
    np.testing.assert_allclose(np.asarray(b.xs), np.asarray(a.xs), rtol=0, atol=1e-12 * scale)
    assert int(b.n_steps) == int(a.n_steps) == 40


@pytest.mark.slow  # ~30 s (reverse mode through both loops); the default job checks the counted loop's values on every formulation
def test_gradients_through_the_counted_loop():
    """Reverse mode (rematerialised steps) equals diffrax's checkpointed adjoint and forward
    mode (initial state), and central differences (hinge stiffness). (Central differences in
    the initial state scatter by 20 % with the step on either loop: an off-manifold start
    under Baumgarte is not the smooth function of the state that the stiffness is.)"""
    system, params, _ = get("fold-4panel").make(stabilization="baumgarte")
    x0 = system.init_state(params)

    def loss(loop, x, k):
        p = dict(params, model=eqx.tree_at(lambda m: m.stiffness, params["model"], params["model"].stiffness * k))
        tr = _run(system, p, loop, steps=32, x0=x)
        return jnp.sum(tr.xs[-1] ** 2)

    # one reverse pass per loop, for the state and the stiffness together
    g_scan, gk = jax.grad(lambda x, k: loss("scan", x, k), argnums=(0, 1))(x0, 1.0)
    g_dfx, gk_dfx = jax.grad(lambda x, k: loss("diffrax", x, k), argnums=(0, 1))(x0, 1.0)
    np.testing.assert_allclose(g_scan, g_dfx, rtol=1e-9, atol=1e-12 * float(jnp.max(jnp.abs(g_dfx))))
    fdk = (loss("scan", x0, 1.0 + 1e-5) - loss("scan", x0, 1.0 - 1e-5)) / 2e-5
    assert abs(float(gk) - float(gk_dfx)) <= 1e-9 * abs(float(gk_dfx))
    assert abs(float(gk) - float(fdk)) <= 1e-6 * abs(float(gk))
    v = jnp.asarray(np.random.default_rng(0).normal(size=x0.shape))
    fwd = jax.jvp(lambda x: loss("scan", x, 1.0), (x0,), (v,))[1]
    assert abs(float(fwd) - float(g_scan @ v)) <= 1e-10 * abs(float(fwd))


def test_a_member_that_diverges_keeps_its_last_good_save_point():
    system, params, _ = get("fold-4panel").make(stabilization="baumgarte")
    ok = _run(system, params, "scan", steps=40)
    tr = _run(system, params, "scan", steps=40, max_violation=1e-300)      # fails at the first check
    assert ok.status == "success" and tr.status == "diverged"
    assert float(tr.t_final) == 0.0 and np.all(np.isnan(np.asarray(tr.xs[1:])))
    np.testing.assert_array_equal(np.asarray(tr.x_final), np.asarray(ok.xs[0]))


def test_a_run_that_cannot_be_counted_says_why():
    system, params, _ = get("fold-4panel").make(stabilization="baumgarte")
    with pytest.raises(ValueError, match="adaptive solver"):
        simulate(system, t1=0.01, dt=1e-3, solver="dopri5", params=params, loop="scan")
    with pytest.raises(ValueError, match="not evenly spaced"):
        simulate(system, t1=0.01, dt=1e-3, params=params, saveat=4, loop="scan")
    with pytest.raises(ValueError, match="loop: unknown"):
        simulate(system, t1=0.01, dt=1e-3, params=params, loop="while")
    assert _run(system, params, "auto", steps=10).status == "success"


def test_new_numbers_do_not_recompile_the_counted_loop():
    """The program compiled ahead runs new numbers (a new start, the same horizon); a
    change of structure would raise (``compile_simulation``)."""
    system, params, _ = get("fold-4panel").make(stabilization="baumgarte")
    run, _ = compile_simulation(system, t1=0.01, dt=1e-3, params=params, saveat=11, loop="scan")
    x0 = system.init_state(params)
    a = run()
    b = run(x0=x0.at[system.model.nq + 2].add(0.1), t1=0.01)   # the hub spun: a rigid rotation
    assert a.status == b.status == "success" and not np.allclose(np.asarray(a.xs[-1]), np.asarray(b.xs[-1]))
    # without diagnostics, as simulate: the same states, no diagnostics program run (a
    # benchmark's time per step once counted them)
    bare, _ = compile_simulation(system, t1=0.01, dt=1e-3, params=params, saveat=11, loop="scan", diagnostics=False)
    c = bare()
    assert a.diagnostics and not c.diagnostics and not c.violation
    np.testing.assert_array_equal(np.asarray(c.xs), np.asarray(a.xs))


def test_census_reads_loops_and_library_calls():
    """The census sees what the program holds: a loop of unknown trip count, one of known
    count nested in it, a host callback; and a library call in a loop body (from a
    program's text: under this test session's setup XLA expands ``cholesky`` inline)."""
    def f(A, x):
        def body(c):
            i, y = c
            y = jax.lax.fori_loop(0, 5, lambda _, z: jnp.sin(z) + z, y)
            return i + 1, y + jnp.linalg.cholesky(A) @ y
        y = jax.lax.while_loop(lambda c: c[0] < x[0].astype(jnp.int32), body, (0, x))[1]
        return jax.pure_callback(lambda v: v, y, y)

    A = jnp.eye(64) * 2.0             # (XLA expands a 3 x 3 factor inline in some configurations)
    with uncached():
        text = jax.jit(f).lower(A, jnp.ones(64)).compile().as_text()
    c = census(text)
    (outer,) = [lp for lp in c.top.children]
    assert outer.trip_count is None and outer.unknown_trip_loops() == 0
    assert [k.trip_count for k in outer.children] == [5]
    assert c.top.callbacks() == 1
    assert outer.launches() == sum(outer.own.values()) + 5 * outer.children[0].launches()
    hlo = """HloModule m
%body (p: (s32[], f64[4])) -> (s32[], f64[4]) {
  %c = (f64[4,4]{0,1}, s32[]) custom-call(%x), custom_call_target="lapack_dpotrf_ffi"
  %f = f64[4]{0} fusion(%c), kind=kLoop, calls=%fused
  ROOT %t = (s32[], f64[4]) tuple(%i, %f)
}
%cond (p: (s32[], f64[4])) -> pred[] {
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}
ENTRY %main (a: f64[4]) -> (s32[], f64[4]) {
  ROOT %w = (s32[], f64[4]) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"7"}}
}
"""
    (loop,) = census(hlo).top.children
    assert loop.trip_count == 7 and loop.library_calls() == {"lapack_dpotrf_ffi": 1}
    assert census(hlo).top.launches() == 7 * 2


@pytest.mark.parametrize("n", [1, 9, 12, 13, pytest.param(41, marks=pytest.mark.slow)])
def test_the_device_forms_cholesky_needs_no_library(n):
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, n))
    A = X @ X.T + n * np.eye(n)
    junk = np.tril(A) + np.triu(rng.normal(size=(n, n)), 1)       # the upper triangle is not read
    b = rng.normal(size=n)
    L0 = np.linalg.cholesky(A)
    with sp.traced_as("device"):
        fns = (small_cholesky.cholesky, small_cholesky.inverse_factor, small_cholesky.cho_solve)
        text = jax.jit(lambda A, b: [f(A) for f in fns[:2]] + [fns[2](fns[0](A), b)]).lower(junk, b).compile().as_text()
        L, Li, x = jax.jit(lambda A, b: (fns[0](A), fns[1](A), fns[2](fns[0](A), b)))(junk, b)
    assert "custom_call_target" not in text and census(text).top.linalg_ops() == 0
    np.testing.assert_allclose(L, L0, atol=1e-13 * n)
    np.testing.assert_allclose(Li @ L0, np.eye(n), atol=1e-14 * n)
    np.testing.assert_allclose(A @ x, b, atol=1e-12 * n)


@pytest.fixture(scope="module")
def fold4_members():
    """Four fold-4panel members, the paper's model (contact off)."""
    members = batch.member_values({"K": (0.05, 0.2), "c": (0.0, 0.05)}, {"contact": 0.0}, 4, sample="random",
                                  seed=0)
    return batch.scenario_batch(get("fold-4panel"), members, "baumgarte")


def test_the_fold_chunk_program_has_no_host_round_trip_and_no_library_call(fold4_members):
    """The accelerator form of fold-4panel's sweep chunk, compiled on this CPU: the time
    loop and everything in it of known trip count, no LAPACK, no callback, no conditional."""
    system, params = fold4_members
    c = chunk_census(system, params, t1=0.02, dt=1e-3, form="device", max_violation=1.0)
    assert c.time_loop_trips == 10 and c.unknown_trip_loops == 0
    assert c.library_calls == {} and c.linalg_ops == 0 and c.callbacks == 0 and c.conditionals == 0
    # kernels per step: diffrax's loop in the old form launched 58 + 4 x 103 + 17 = 487
    # (its stage loop run four times); the counted loop 473.5, 461.5 with the inverse factor
    # by elimination, 401.5 with the multiplier iterations unrolled, 381.5 with the coordinate
    # rates gathered instead of scattered, 353.5 with the products with a dense G reduced,
    # 330 with the tree's 0/1 sums reduced too, 320 with the stages' weighted sums reduced
    # (jax 0.10.2): a regression of a kernel a stage fails here. The 100 is not met
    # (docs/benchmarks.md, "Where a stage's kernels go")
    assert c.launches_per_step <= 323


def test_with_contact_the_fold_chunk_program_has_no_conditional_either():
    """Contact, on by default, acts through the tree only while a crease is past flat
    (``cond_any``); the accelerator form selects between both branches instead, since a
    conditional reads its predicate back to the host. The contact terms' kernels are
    counted apart from the paper model's (``docs/benchmarks.md``)."""
    members = batch.member_values({"K": (0.05, 0.2), "c": (0.0, 0.05)}, {"contact": 1.0}, 4, sample="random",
                                  seed=0)
    system, params = batch.scenario_batch(get("fold-4panel"), members, "baumgarte")
    assert system.elements[0].forces
    c = chunk_census(system, params, t1=0.02, dt=1e-3, form="device", max_violation=1.0)
    assert c.time_loop_trips == 10 and c.unknown_trip_loops == 0
    assert c.library_calls == {} and c.linalg_ops == 0 and c.callbacks == 0 and c.conditionals == 0
    # 392 kernels a step (jax 0.10.2) against the paper model's 320: a regression fails here
    assert c.launches_per_step <= 395


def test_kernels_per_step_do_not_depend_on_how_many_steps_a_save_interval_holds():
    """fold-4panel's loop nest as compiled at one step per save interval (XLA removes the
    step loop of one trip, so the loop in the steps' scope is the four Runge-Kutta stages)
    and at two: about 330 kernels a step either way. The census once divided the first by
    the stages' 4 and printed 83 (``bench_gpu.sh --smoke``)."""
    from collections import Counter

    from diffmb.design.chunk_census import _count
    from diffmb.simulation import fixed_steps
    from diffmb.simulation.program_census import Census, Loop

    def loop(name, scope, trips, fusions, *children):
        return Loop(name, scope, trips, Counter(fusion=fusions), Counter(), 0, 0, tuple(children), 0)

    save, steps = fixed_steps.SAVE_SCOPE, f"{fixed_steps.SAVE_SCOPE}/{fixed_steps.STEP_SCOPE}"
    stages = loop("stages", f"{steps}/while", 4, 75)
    one = Census(loop("ENTRY", "", 1, 84, loop("save", save, 10, 28, stages)))
    two = Census(loop("ENTRY", "", 1, 84, loop("save", save, 10, 23, loop("steps", steps, 2, 5, stages))))
    a, b = _count(one, 0.0, 0.0, 0.0, n_steps=10), _count(two, 0.0, 0.0, 0.0, n_steps=20)
    assert a.launches_per_step == 28 + 4 * 75 and b.launches_per_step == (23 + 2 * (5 + 4 * 75)) / 2
    assert a.kernels == {"fusion": 328.0} and a.time_loop_trips == b.time_loop_trips == 10


def _fold4_final_state(form, k=1.0):
    """fold-4panel's state after 32 RK4 steps under Baumgarte, traced in ``form``, with its
    hinge stiffness scaled by ``k``."""
    system, params, _ = get("fold-4panel").make(stabilization="baumgarte")
    x0 = system.init_state(params)
    p = dict(params, model=eqx.tree_at(lambda m: m.stiffness, params["model"], params["model"].stiffness * k))
    with sp.traced_as(form):
        return _run(system, p, "scan", steps=32, x0=x0).xs[-1], x0


def test_the_device_form_runs_as_the_cpu_form_does():
    """The accelerator form's algebra (the factor and the solves written out, the inverse
    factor by elimination of ``[A | I]``) runs fold-4panel under Baumgarte as the CPU's
    written form does, to round-off. (The multiplier iterations refine whatever factor
    they are given, so a factor off by 1e-9 leaves no trace; one off by 1 % moved the final
    state by 1e-5 here.)"""
    (written, x0), (device, _) = _fold4_final_state("written"), _fold4_final_state("device")
    np.testing.assert_allclose(device, written, rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(written))))
    assert float(jnp.max(jnp.abs(written - x0))) > 1e-6          # it moved: the comparison sees the dynamics


@pytest.mark.slow  # ~8 s: two reverse-mode programs; the default job checks the values
def test_the_device_form_differentiates_as_the_cpu_form_does():
    g_written, g_device = (jax.grad(lambda k, f=f: jnp.sum(_fold4_final_state(f, k)[0] ** 2))(1.0)
                           for f in ("written", "device"))
    assert abs(float(g_device) - float(g_written)) <= 1e-9 * abs(float(g_written))


@pytest.mark.slow
def test_diffraxs_loop_had_the_round_trips_and_library_calls_the_counted_loop_has_not(fold4_members):
    system, params = fold4_members
    old = chunk_census(system, params, t1=0.02, dt=1e-3, form="reduce", loop="diffrax")
    new = chunk_census(system, params, t1=0.02, dt=1e-3, form="device")
    # (no callbacks in either here: the test session sets EQX_ON_ERROR=nan)
    assert old.unknown_trip_loops == 3 and old.linalg_ops > 0 and sum(old.library_calls.values()) == 7
    assert new.unknown_trip_loops == 0 and new.linalg_ops == 0 and new.callbacks == 0
    assert math.isfinite(new.flops_per_eval) and new.flops_per_eval > 1e3


def test_the_chunk_fills_the_device():
    assert batch.filling_chunk(141e9, 293e6 / 8192) == batch.MAX_ACCELERATOR_CHUNK      # fold-4panel on an H200
    assert batch.filling_chunk(1e9, 1e6) == 256                                          # 500 fit: 256
    assert batch.filling_chunk(1e6, 1e7) == 1

    class FakeGPU:
        platform = "gpu"

        def memory_stats(self):
            return {"bytes_limit": 16e9}

    assert batch.default_chunk([FakeGPU()], member_bytes=2.4e6) == 2048
    assert batch.default_chunk([FakeGPU()]) == batch.ACCELERATOR_CHUNK
    assert batch.default_chunk(jax.devices()) == batch.DEFAULT_CHUNK


def test_a_members_footprint_is_read_from_its_program(fold4_members):
    system, params = fold4_members
    member = batch.member_runner(system, t1=0.01, dt=1e-3, saveat=11)
    _, _, compiled = batch._compiled(member, params, jnp.zeros((4, 1)))
    per = batch.member_bytes(compiled, 4)
    assert 1e3 < per < 1e8


@pytest.mark.slow
def test_a_chunk_diagnoses_one_save_point_at_a_time():
    """A chunk's diagnostics at its save points, the panel detector's pair arrays among
    them, are taken one save point at a time: side by side they made a 6x6 map fold's
    chunk 22.6 MB a member (14.6 GB for 1,024 members on an H200, which the chunk rule
    then split). A save point now adds about its saved state (3x3 map fold: 0.6 KB a save
    point against 60 KB before)."""
    from diffmb.design.batch import member_values, scenario_batch

    vals = member_values({"K": (0.005, 0.02)}, {"rows": 3.0, "cols": 3.0}, 4, sample="random", seed=0)
    system, params = scenario_batch(get("map-fold"), vals, "baumgarte")
    temp = {}
    for saveat in (11, 41):
        member = batch.member_runner(system, t1=0.04, dt=1e-3, saveat=saveat, max_violation=1.0)
        _, _, compiled = batch._compiled(member, params, jnp.zeros((4, 1)))
        temp[saveat] = compiled.memory_analysis().temp_size_in_bytes / 4
    state_bytes = 8 * system.init_state(jax.tree.map(lambda a: a[0] if getattr(a, "ndim", 0) else a, params)).size
    per_save_point = (temp[41] - temp[11]) / 30
    assert 0 < per_save_point < 10 * state_bytes, (per_save_point, state_bytes)


@pytest.mark.slow
def test_the_device_script_runs_on_a_cpu_at_tiny_sizes(tmp_path):
    """``bench_gpu.sh --smoke``: the census, the step's profile and the batch benchmark
    (diffmb float64 and float32, MJX beside them: a row that says why where MJX is
    missing) end to end."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHON=sys.executable)
    out = subprocess.run(["bash", "experiments/bench_gpu.sh", "--smoke", str(tmp_path)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    census_rows = json.loads((tmp_path / "census.json").read_text())["rows"]
    device = next(r for r in census_rows if r["form"] == "device")
    assert device["unknown_trip_loops"] == 0 and device["linalg_ops"] == 0
    rows = json.loads((tmp_path / "fold4.json").read_text())["rows"]
    by = {r["engine"]: r for r in rows}
    for engine in ("diffmb-f64", "diffmb-f32"):
        assert "error" not in by[engine] and by[engine]["throughput"] > 0 and by[engine]["step_ms"] > 0
    assert by["diffmb-f64"]["violation"] < 1e-9
    assert "mjx" in by and ("error" in by["mjx"] or by["mjx"]["throughput"] > 0)
    profile = json.loads((tmp_path / "profile" / "profile_fold4_4.json").read_text())
    files = profile["files_ms_per_step"]
    # the kernels' time is laid at the files that traced them: the factor and its solves among them
    assert profile["kernel_ms_per_step"] > 0 and files.get("?", 0) < 0.2 * sum(files.values())
    assert "math/small_cholesky.py" in files and "tree/crba.py" in files
    contact = json.loads((tmp_path / "contact.json").read_text())["rows"]
    assert {r["contact"] for r in contact} == {0, 1}
    assert all(r["reports_contact"] and r["statuses"]["success"] == r["batch"] for r in contact)
