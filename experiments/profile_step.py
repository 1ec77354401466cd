"""Profile: where one time step of a sweep's chunk program spends its device time, by
source module, read from a profiler trace of the compiled program (a GPU when lent; a CPU
gives the same table from its own thunks).

The chunk program of ``--batch`` members (Baumgarte, RK4 at ``--dt``, ``--steps`` steps,
``--saveat`` save points) is compiled in the form its device gets, run once to warm up, then run under
``jax.profiler.trace``. Every kernel's time is summed per HLO instruction; each instruction
is attributed to the ``file:function`` most of its fused instructions were traced from
(XLA's stack frames, listed at the end of the program's text), so the table says, for example, how much of a step the
factor (``math/small_cholesky.py``) or the mass matrix (``tree/crba.py``) takes, without
guessing from counts. Written to ``--out``: ``profile_<case>_<batch>.json`` (per file and
function, and the 40 costliest instructions, with their ``op_name``) and the compiled program's text,
so a session without the device can read it.

    python experiments/profile_step.py --case map6 --batch 1024 --steps 50
    python experiments/profile_step.py --case fold4 --batch 8 --steps 10     # a CPU will do
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: instructions whose events hold other kernels' time (not counted again)
_CONTROL = {"while", "conditional", "call", "async-start", "async-done"}


def _frames(hlo_text: str) -> dict[int, str]:
    """``{stack_frame_id: "file.py:function"}`` from the frame tables at the end of a
    compiled program's text (``FileNames``, ``FunctionNames``, ``FileLocations``,
    ``StackFrames``), files under ``diffmb/`` named by their path there."""
    tables: dict[str, dict[int, str]] = {}
    section = None
    for line in hlo_text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section, tables[line] = line, {}
            continue
        m = re.match(r"(\d+) (.*)$", line) if section else None
        if m:
            tables[section][int(m.group(1))] = m.group(2)
    files = {i: re.sub(r'^.*?/diffmb/|^.*/', "", v.strip('"')) for i, v in tables.get("FileNames", {}).items()}
    funcs = {i: v.strip('"') for i, v in tables.get("FunctionNames", {}).items()}
    where = {}
    for i, v in tables.get("FileLocations", {}).items():
        d = dict(re.findall(r"(\w+)=(\d+)", v))
        file, func = files.get(int(d.get("file_name_id", 0)), "?"), funcs.get(int(d.get("function_name_id", 0)), "?")
        where[i] = f"{file}:{func}"
    return {i: where.get(int(dict(re.findall(r"(\w+)=(\d+)", v)).get("file_location_id", 0)), "?")
            for i, v in tables.get("StackFrames", {}).items()}


def attribution(hlo_text: str) -> tuple[dict, dict, dict]:
    """``(source, op_name, opcode)`` per instruction name of a compiled program's text:
    the ``file:function`` most of its instructions, or its fused computation's, were
    traced from (XLA's stack frame of each), its ``op_name`` and its opcode."""
    frames = _frames(hlo_text)
    comps: dict[str, list] = {}
    own = {}
    current = None
    for line in hlo_text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head:
            current = head.group(1)
            comps[current] = []
            continue
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (?:\S+|\([^=]*\)) ([\w\-]+)\(", line)
        if not m or current is None:
            continue
        frame = re.search(r"stack_frame_id=(\d+)", line)
        src = frames.get(int(frame.group(1))) if frame else None
        op = re.search(r'op_name="([^"]*)"', line)
        calls = re.search(r"calls=%?([\w.\-]+)", line)
        comps[current].append(src)
        args = re.match(r"[^(]*\(([^)]*)\)", line[m.end() - 1:])
        operands = re.findall(r"%([\w.\-]+)", args.group(1)) if args else []
        own[m.group(1)] = (calls.group(1) if calls else None, op.group(1) if op else "", src, m.group(2), operands)
    source, op_name, opcode = {}, {}, {}
    for name, (calls, op, src, code, _) in own.items():
        votes = collections.Counter(s for s in comps.get(calls, []) if s)
        source[name] = votes.most_common(1)[0][0] if votes else src
        op_name[name], opcode[name] = op, code
    # XLA's rewrites (a dot split out of a fusion, say) can leave an instruction without
    # metadata: it is laid at the source of its operands, the code whose values it consumes
    inherited = {}
    for name, (*_, operands) in own.items():
        if source[name] is None:
            votes = collections.Counter(source.get(o) for o in operands if source.get(o))
            inherited[name] = votes.most_common(1)[0][0] if votes else "?"
    source.update(inherited)
    return source, op_name, opcode


def kernel_times(trace_dir: Path) -> tuple[dict, str]:
    """``({instruction: [ns, count]}, plane)`` from the trace under ``trace_dir``: the
    device plane's kernels where there is one, else the host's XLA thunks."""
    from jax.profiler import ProfileData

    path = next(trace_dir.rglob("*.xplane.pb"))
    data = ProfileData.from_file(str(path))
    planes = list(data.planes)
    device = [p for p in planes if p.name.startswith("/device:") and "CPU" not in p.name]
    chosen = device or [p for p in planes if p.name.startswith("/host:CPU")]
    times: dict[str, list] = collections.defaultdict(lambda: [0, 0])
    for plane in chosen:
        for line in plane.lines:
            for ev in line.events:
                stats = dict(ev.stats)
                name = stats.get("hlo_op") or ev.name
                times[str(name)][0] += ev.duration_ns
                times[str(name)][1] += 1
    return dict(times), ",".join(p.name for p in chosen)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="fold4", help="fold4, map<n> or miura<n>")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--saveat", type=int, default=11, help="save points (a sweep's default: one a step)")
    ap.add_argument("--top", type=int, default=15, help="instructions printed")
    ap.add_argument("--form", default=None, help="the form traced (default: the device's own; 'device' on a CPU "
                    "profiles the accelerator form there)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "profile")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from bench_census import _system
    from diffmb.design import batch

    system, params = _system(args.case, args.batch)
    member = batch.member_runner(system, t1=args.steps * args.dt, dt=args.dt, solver="rk4",
                                 saveat=args.saveat, max_violation=1.0)
    x0 = jnp.zeros((args.batch, 1))
    run, compile_s, compiled = batch._compiled(member, params, x0, form=args.form)
    jax.block_until_ready(run(member, params, x0))
    tic = time.perf_counter()
    jax.block_until_ready(run(member, params, x0))
    wall = time.perf_counter() - tic
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(run(member, params, x0))
        times, plane = kernel_times(Path(tmp))

    text = compiled.as_text()
    module, op_name, opcode = attribution(text)
    known = {k: v for k, v in times.items() if k in module and opcode[k] not in _CONTROL}
    total = sum(v[0] for v in known.values()) or 1
    per_module, per_file = collections.Counter(), collections.Counter()
    for k, (ns, _) in known.items():
        per_module[module[k]] += ns
        per_file[module[k].split(":")[0]] += ns
    steps = args.steps
    print(f"{args.case} x {args.batch} on {jax.devices()[0]} ({plane}): wall {1e3 * wall / steps:.3f} ms a step, "
          f"kernels {total / 1e6 / steps:.3f} ms a step, {sum(v[1] for v in known.values()) / steps:.0f} "
          f"launches a step, compile {compile_s:.1f} s")
    for title, table in (("file", per_file), ("file:function", per_module)):
        print(f"\n{title:<56} {'ms/step':>8} {'share':>6}")
        for mod, ns in table.most_common(args.top):
            print(f"{mod[:56]:<56} {ns / 1e6 / steps:>8.4f} {ns / total:>6.1%}")
    top = sorted(known.items(), key=lambda kv: -kv[1][0])[: max(args.top, 40)]
    print(f"\n{'instruction':<32} {'us/launch':>9} {'launches':>8} {'share':>6}  module")
    for k, (ns, n) in top[: args.top]:
        print(f"{k[:32]:<32} {ns / n / 1e3:>9.2f} {n:>8} {ns / total:>6.1%}  {module[k]}")

    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"profile_{args.case}_{args.batch}"
    (args.out / f"{stem}.hlo.txt").write_text(text)
    result = {"case": args.case, "batch": args.batch, "steps": steps, "device": str(jax.devices()[0]),
              "plane": plane, "wall_ms_per_step": 1e3 * wall / steps, "kernel_ms_per_step": total / 1e6 / steps,
              "compile_s": compile_s, "unattributed_events": len(times) - len(known),
              "files_ms_per_step": {m: ns / 1e6 / steps for m, ns in per_file.most_common()},
              "functions_ms_per_step": {m: ns / 1e6 / steps for m, ns in per_module.most_common()},
              "top": [{"instruction": k, "ns": ns, "launches": n, "module": module[k], "op_name": op_name[k]}
                      for k, (ns, n) in top]}
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out / stem}.json and .hlo.txt")


if __name__ == "__main__":
    main()
