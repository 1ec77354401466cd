"""Benchmark: forward dynamics (ABA) of random revolute chains, diffmb vs Pinocchio / MuJoCo.

For each chain size N (random unit axes, random rpy/xyz joint placements, random inertias,
gravity -9.81 z) one URDF string is generated; diffmb builds the same model with the
ModelBuilder, Pinocchio and MuJoCo load the URDF. Per backend we measure

* ``single_us``: one jitted call on one state (median over ``--repeats`` calls, each
  ``block_until_ready``, compile excluded) — dominated by dispatch for small N;
* ``vmap_states_per_s``: ``jit(vmap)`` over ``--batch`` states, states per second
  (median call time);
* ``blocks_us_per_state``: :func:`diffmb.math.vectorize.vmap_blocks` over the same states
  (on a CPU: blocks of 128, small products written out), checked against ``jit(vmap)``;
* ``compile_s`` / ``compile_vmap_s`` / ``compile_blocks_s``: first call minus
  steady-state call.

Peers (when importable): ``pinocchio.aba`` per call (median, Python loop), and
``mujoco.mj_forward`` per call on the URDF loaded by ``MjModel.from_xml_string`` (no geoms,
so no contacts; joint ranges are far outside the sampled states). Their ``qdd`` is checked
against diffmb's. ``ratio`` = diffmb vmapped states/s divided by Pinocchio's 1/t (``blk
ratio``: the same for ``vmap_blocks``).

Backends: ``aba`` (the articulated-body algorithm, level by level) and ``crba`` (mass
matrix and Cholesky factor).

``--sweeps`` instead measures the two forms of the tree sweeps (diffmb.tree.scan) on one
state of kinematics + CRBA + RNEA: the small-tree forms (dense ancestor products,
unrolled pose composition) against pointer doubling, compile and run time at each N —
the measurement behind ``scan.DENSE_MAX_BODIES`` and ``UNROLL_MAX_BODIES``.
``--fusion-check`` reruns N = 8, 16 in subprocesses with XLA's CPU fusion emitters on
and off (diffmb switches them off by default, see diffmb/_config.py).

    python experiments/bench_tree.py              # all sizes, all backends
    python experiments/bench_tree.py --quick      # smoke run
    python experiments/bench_tree.py --sweeps --sizes 4 8 16 32 64 128 256 400
    python experiments/bench_tree.py --fusion-check

Writes a table to stdout and JSON to out/bench_tree.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the chain


def chain_params(n, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed + 1000 * n)
    links = []
    for i in range(n):
        axis = rng.normal(size=3)
        A = np.linalg.qr(rng.normal(size=(3, 3)))[0]
        links.append(
            dict(
                axis=axis / np.linalg.norm(axis),
                xyz=rng.uniform(-0.3, 0.3, 3) + (0, 0, -0.5 if i else 0.0),
                rpy=rng.uniform(-np.pi, np.pi, 3),
                mass=rng.uniform(0.5, 2.0),
                com=rng.uniform(-0.2, 0.2, 3),
                inertia=A @ np.diag(rng.uniform(0.05, 0.1, 3)) @ A.T,
            )
        )
    return links


def chain_urdf(links):
    f = lambda v: " ".join(f"{x:.17g}" for x in v)
    parts = ['<robot name="chain">', '<link name="base"/>']
    for i, L in enumerate(links):
        I = L["inertia"]
        parts.append(
            f'<link name="l{i}"><inertial><origin xyz="{f(L["com"])}" rpy="0 0 0"/>'
            f'<mass value="{L["mass"]:.17g}"/>'
            f'<inertia ixx="{I[0, 0]:.17g}" ixy="{I[0, 1]:.17g}" ixz="{I[0, 2]:.17g}" '
            f'iyy="{I[1, 1]:.17g}" iyz="{I[1, 2]:.17g}" izz="{I[2, 2]:.17g}"/></inertial></link>'
        )
        parent = "base" if i == 0 else f"l{i - 1}"
        parts.append(
            f'<joint name="j{i}" type="revolute"><parent link="{parent}"/><child link="l{i}"/>'
            f'<origin xyz="{f(L["xyz"])}" rpy="{f(L["rpy"])}"/><axis xyz="{f(L["axis"])}"/>'
            f'<limit lower="-1000" upper="1000" effort="1e9" velocity="1e9"/></joint>'
        )
    parts.append("</robot>")
    return "\n".join(parts)


def chain_model(links):
    from diffmb import ModelBuilder

    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    for i, L in enumerate(links):
        b.add_body(f"l{i}", "world" if i == 0 else f"l{i - 1}", "revolute", axis=L["axis"],
                   pos=L["xyz"], rpy=L["rpy"], mass=L["mass"], com=L["com"],
                   inertia=L["inertia"], joint_name=f"j{i}")
    return b.build()


# ------------------------------------------------------------------ timing helpers


def median_call(fn, repeats, inner=1):
    """Median wall time of ``inner`` back-to-back calls of ``fn``, divided by ``inner``."""
    import numpy as np

    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter() - t0) / inner)
    return float(np.median(ts))


def first_call(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ------------------------------------------------------------------ measurements


def measure_diffmb(model, states, backend, batch, repeats):
    import functools

    import jax

    import diffmb
    from diffmb.math.vectorize import vmap_blocks

    q, qd, tau = states
    fd = functools.partial(diffmb.forward_dynamics, algorithm={"aba": "recursive", "crba": "dense"}[backend])
    single = jax.jit(fd)
    batched = jax.jit(jax.vmap(fd, in_axes=(None, 0, 0, 0)))
    blocks = vmap_blocks(lambda q, qd, tau: fd(model, q, qd, tau))
    qb, qdb, taub = (jax.numpy.broadcast_to(x, (batch, x.shape[0])) + 0.01 * jax.numpy.arange(batch)[:, None]
                     for x in (q, qd, tau))

    run1 = lambda: single(model, q, qd, tau).block_until_ready()
    runb = lambda: batched(model, qb, qdb, taub).block_until_ready()
    runk = lambda: blocks(qb, qdb, taub).block_until_ready()
    t_first = first_call(run1)
    t1 = median_call(run1, repeats)
    tb_first = first_call(runb)
    tb = median_call(runb, max(5, repeats // 20))
    tk_first = first_call(runk)
    tk = median_call(runk, max(5, repeats // 20))
    qdd = single(model, q, qd, tau)
    agree = float(jax.numpy.max(jax.numpy.abs(blocks(qb, qdb, taub) - batched(model, qb, qdb, taub))))
    return dict(
        single_us=t1 * 1e6,
        compile_s=t_first - t1,
        vmap_call_ms=tb * 1e3,
        vmap_states_per_s=batch / tb,
        vmap_us_per_state=tb / batch * 1e6,
        compile_vmap_s=tb_first - tb,
        blocks_us_per_state=tk / batch * 1e6,
        blocks_states_per_s=batch / tk,
        compile_blocks_s=tk_first - tk,
        blocks_vs_vmap_max_diff=agree,
    ), qdd


def measure_pinocchio(urdf, states, repeats):
    try:
        import pinocchio as pin
    except ImportError:
        return None, None
    import numpy as np

    model = pin.buildModelFromXML(urdf)
    data = model.createData()
    q, qd, tau = (np.asarray(x) for x in states)
    model.gravity.linear = np.array([0.0, 0.0, -9.81])
    qdd = np.array(pin.aba(model, data, q, qd, tau))
    t = median_call(lambda: pin.aba(model, data, q, qd, tau), max(20, repeats // 10), inner=200)
    return dict(pin_us=t * 1e6), qdd


def measure_mujoco(urdf, states, repeats):
    try:
        import mujoco
    except ImportError:
        return None, None
    import numpy as np

    try:
        m = mujoco.MjModel.from_xml_string(urdf)
    except Exception as exc:
        return dict(mujoco_error=str(exc)), None
    m.opt.gravity[:] = (0.0, 0.0, -9.81)
    d = mujoco.MjData(m)
    q, qd, tau = (np.asarray(x) for x in states)
    d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, qd, tau
    mujoco.mj_forward(m, d)
    qdd = d.qacc.copy()
    t = median_call(lambda: mujoco.mj_forward(m, d), max(20, repeats // 10), inner=200)
    return dict(mujoco_us=t * 1e6), qdd


INNER = 200


def measure_sweeps(n, repeats, seed=0):
    """Kinematics + CRBA + RNEA on one state, small-tree sweep forms vs pointer doubling."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from diffmb.tree import crba, rnea, scan
    from diffmb.tree.kinematics import kinematics

    model = chain_model(chain_params(n, seed))
    rng = np.random.default_rng(seed)
    q, qd = (jnp.asarray(rng.uniform(-1, 1, n)) for _ in range(2))
    out = {"n": n}
    saved = scan.DENSE_MAX_BODIES, scan.UNROLL_MAX_BODIES
    try:
        for form, limit in (("small", 10**9), ("doubling", 0)):
            scan.DENSE_MAX_BODIES = scan.UNROLL_MAX_BODIES = limit

            def f(q, qd):
                ws = kinematics(model, q, qd)
                return crba.mass_matrix_ws(model, ws), rnea.bias_forces_ws(model, ws)

            def loop(q, qd):  # many evaluations in one call: no dispatch cost in the figure
                def body(i, acc):
                    M, C = f(q + 1e-12 * acc, qd)
                    return acc + M[0, 0] + C[0]
                return jax.lax.fori_loop(0, INNER, body, 0.0)

            start = time.perf_counter()
            jax.jit(f).lower(q, qd).compile()
            comp = time.perf_counter() - start
            c = jax.jit(loop).lower(q, qd).compile()
            run = lambda: jax.block_until_ready(c(q, qd))
            run()
            out[form] = dict(compile_s=comp, eval_us=median_call(run, max(5, repeats // 50)) / INNER * 1e6)
    finally:
        scan.DENSE_MAX_BODIES, scan.UNROLL_MAX_BODIES = saved
    return out


def measure_size(n, backends, batch, repeats, seed=0):
    """All measurements for one chain of ``n`` bodies; returns a JSON-ready dict."""
    import jax.numpy as jnp
    import numpy as np

    links = chain_params(n, seed)
    urdf = chain_urdf(links)
    model = chain_model(links)
    rng = np.random.default_rng(seed)
    states = tuple(jnp.asarray(rng.uniform(-1, 1, n)) for _ in range(3))
    row = dict(n=n, backends={})
    ref = None
    for be in backends:
        res, qdd = measure_diffmb(model, states, be, batch, repeats)
        if ref is None:
            ref = np.asarray(qdd)
        res["max_diff_vs_first_backend"] = float(np.max(np.abs(np.asarray(qdd) - ref)))
        row["backends"][be] = res
    pin_res, pin_qdd = measure_pinocchio(urdf, states, repeats)
    if pin_res:
        pin_res["pin_max_qdd_diff"] = float(np.max(np.abs(pin_qdd - ref)))
        row.update(pin_res)
        for res in row["backends"].values():
            res["ratio_vs_pin"] = res["vmap_states_per_s"] * pin_res["pin_us"] * 1e-6
            res["blocks_ratio_vs_pin"] = res["blocks_states_per_s"] * pin_res["pin_us"] * 1e-6
    mj_res, mj_qdd = measure_mujoco(urdf, states, repeats)
    if mj_res:
        if mj_qdd is not None:
            mj_res["mujoco_max_qdd_diff"] = float(np.max(np.abs(mj_qdd - ref)))
        row.update(mj_res)
    return row


# ------------------------------------------------------------------ output


def print_table(rows):
    hdr = (f"{'N':>4} {'backend':>7} {'single µs':>10} {'vmap st/s':>11} {'µs/state':>9} "
           f"{'compile s':>9} {'cmp vmap s':>10} {'pin µs':>7} {'ratio':>6} {'mj µs':>7} "
           f"{'blk µs/st':>9} {'cmp blk s':>9} {'blk ratio':>9}")
    print(hdr)
    print("-" * len(hdr))
    for row in rows:
        for be, r in row["backends"].items():
            print(f"{row['n']:>4} {be:>7} {r['single_us']:>10.1f} {r['vmap_states_per_s']:>11.3g} "
                  f"{r['vmap_us_per_state']:>9.3f} {r['compile_s']:>9.2f} {r['compile_vmap_s']:>10.2f} "
                  f"{row.get('pin_us', float('nan')):>7.2f} {r.get('ratio_vs_pin', float('nan')):>6.2f} "
                  f"{row.get('mujoco_us', float('nan')):>7.2f} {r['blocks_us_per_state']:>9.3f} "
                  f"{r['compile_blocks_s']:>9.2f} {r.get('blocks_ratio_vs_pin', float('nan')):>9.2f}")
    for row in rows:
        extra = {k: row[k] for k in ("pin_max_qdd_diff", "mujoco_max_qdd_diff", "mujoco_error") if k in row}
        if extra:
            print(f"N={row['n']}: " + ", ".join(f"{k}={v:.2e}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in extra.items()))


def fusion_check(args):
    """Run N = 8, 16 in subprocesses with XLA CPU fusion emitters on and off."""
    out = {}
    for mode in ("off", "on"):
        env = dict(os.environ, XLA_FLAGS=f"--xla_cpu_use_fusion_emitters={'false' if mode == 'off' else 'true'}")
        cmd = [sys.executable, __file__, "--sizes", "8", "16", "--backend", *args.backend,
               "--batch", str(args.batch), "--repeats", str(args.repeats), "--no-peers",
               "--json", str(ROOT / "out" / f"bench_tree_fusion_{mode}.json")]
        print(f"\n== fusion emitters {mode}: XLA_FLAGS={env['XLA_FLAGS']}", flush=True)
        subprocess.run(cmd, env=env, check=True)
        out[mode] = json.loads((ROOT / "out" / f"bench_tree_fusion_{mode}.json").read_text())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=400, help="single-call repeats (vmap: /20)")
    ap.add_argument("--backend", nargs="+", default=["aba", "crba"],
                    help="diffmb forward-dynamics backends: aba, crba")
    ap.add_argument("--sweeps", action="store_true",
                    help="small-tree sweep forms vs pointer doubling (kinematics + CRBA + RNEA)")
    ap.add_argument("--quick", action="store_true", help="sizes 4 8, batch 256, few repeats")
    ap.add_argument("--no-peers", action="store_true", help="skip Pinocchio / MuJoCo")
    ap.add_argument("--fusion-check", action="store_true",
                    help="compare XLA CPU fusion emitters on/off at N = 8, 16 (subprocesses)")
    ap.add_argument("--json", default=str(ROOT / "out" / "bench_tree.json"))
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats = [4, 8], 256, 50
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    if args.fusion_check:
        res = fusion_check(args)
        Path(args.json).write_text(json.dumps(res, indent=1))
        return

    import jax

    import diffmb  # noqa: F401  (x64, XLA flags unless XLA_FLAGS set by the caller)

    if args.no_peers:
        global measure_pinocchio, measure_mujoco
        measure_pinocchio = measure_mujoco = lambda *a: (None, None)
    meta = dict(
        jax=jax.__version__, platform=platform.platform(), cpu_count=os.cpu_count(),
        loadavg=os.getloadavg(), xla_flags=os.environ.get("XLA_FLAGS", ""),
        batch=args.batch, repeats=args.repeats, backends=args.backend,
    )
    print(f"jax {meta['jax']}  XLA_FLAGS={meta['xla_flags']!r}  load {meta['loadavg']}", flush=True)
    if args.sweeps:
        rows = []
        print(f"{'N':>4}  {'small: compile s':>16} {'us/eval':>10}  {'doubling: compile s':>19} {'us/eval':>10}")
        for n in args.sizes:
            r = measure_sweeps(n, args.repeats)
            rows.append(r)
            print(f"{n:>4}  {r['small']['compile_s']:>16.2f} {r['small']['eval_us']:>10.2f}  "
                  f"{r['doubling']['compile_s']:>19.2f} {r['doubling']['eval_us']:>10.2f}", flush=True)
        Path(args.json).write_text(json.dumps(dict(meta=meta, sweeps=rows), indent=1))
        print(f"wrote {args.json}")
        return
    rows = []
    for n in args.sizes:
        rows.append(measure_size(n, args.backend, args.batch, args.repeats))
        print(f"  N={n} done (load {os.getloadavg()[0]:.2f})", flush=True)
    meta["loadavg_end"] = os.getloadavg()
    print_table(rows)
    Path(args.json).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
