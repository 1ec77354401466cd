"""Where the test suite's time goes: JAX tracing, lowering and XLA compilation per test.

A pytest plugin (registered by ``conftest.py``). It listens to JAX's monitoring events
(``/jax/core/compile/*_duration`` and the persistent compilation cache's hits) and
charges each one to the test running at the time; session-scoped fixtures are charged
to the first test that uses them. ``--compile-report N`` prints the N tests with the
most compile time, beside their wall time, at the end of the run (``.ci/run`` keeps
it in its output with ``--durations``); ``--compile-report-json PATH`` writes every
test's figures.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
from jax import monitoring

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",  # cache reads included
}

_current = ["<collection>"]
_seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
_wall: dict[str, float] = {}
_by_function: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))


def _on_duration(event: str, seconds: float, fun_name: str = "", **_):
    kind = _EVENTS.get(event)
    if kind is not None:
        _seconds[_current[0]][kind] += seconds
        _counts[_current[0]][kind] += 1
        if fun_name:
            _by_function[fun_name][kind] += seconds
            _by_function[fun_name][kind + "_n"] += 1


def _on_event(event: str, **_):
    if event == "/jax/compilation_cache/cache_hits":
        _counts[_current[0]]["cache_hits"] += 1


monitoring.register_event_duration_secs_listener(_on_duration)
monitoring.register_event_listener(_on_event)


def pytest_addoption(parser):
    group = parser.getgroup("compile report")
    group.addoption("--compile-report", type=int, default=0, metavar="N",
                    help="print the N tests with the most JAX compile time (trace, lower, XLA)")
    group.addoption("--compile-report-json", default=None, metavar="PATH",
                    help="write every test's compile and wall time as JSON")


def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    _wall[item.nodeid] = -time.perf_counter()


def pytest_runtest_logfinish(nodeid, location):
    if nodeid in _wall and _wall[nodeid] < 0:
        _wall[nodeid] += time.perf_counter()
    _current[0] = "<between tests>"


def _rows():
    rows = []
    for test in set(_seconds) | set(_wall):
        s, c = _seconds.get(test, {}), _counts.get(test, {})
        rows.append({
            "test": test,
            "wall_s": max(_wall.get(test, 0.0), 0.0),
            "trace_s": s.get("trace", 0.0),
            "lower_s": s.get("lower", 0.0),
            "xla_compile_s": s.get("compile", 0.0),
            "compiles": c.get("compile", 0),
            "cache_hits": c.get("cache_hits", 0),
        })
    return rows


_from_workers: list[dict] = []


def pytest_sessionfinish(session):
    """An xdist worker hands its rows to the controller (``workeroutput``)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["compile_report"] = json.dumps(_rows())
        out["compile_functions"] = json.dumps(_by_function)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller collects a finished xdist worker's rows."""
    out = getattr(node, "workeroutput", {})
    if out.get("compile_report"):
        _from_workers.extend(json.loads(out["compile_report"]))
    for fun, figures in json.loads(out.get("compile_functions", "{}")).items():
        for k, v in figures.items():
            _by_function[fun][k] += v


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.getoption("--compile-report")
    path = config.getoption("--compile-report-json")
    rows = _rows() + _from_workers
    rows = [r for r in rows if r["wall_s"] or r["compiles"]]
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"tests": sorted(rows, key=lambda r: -r["wall_s"]),
                                          "functions": _by_function}, indent=1))
    if not n or not rows:
        return
    tr = terminalreporter
    total = {k: sum(r[k] for r in rows) for k in ("wall_s", "trace_s", "lower_s", "xla_compile_s")}
    hits = sum(r["cache_hits"] for r in rows)
    compiles = sum(r["compiles"] for r in rows)
    tr.write_sep("=", f"JAX compile time: the {n} tests with the most")
    tr.write_line(f"{'wall s':>8} {'trace s':>8} {'lower s':>8} {'XLA s':>8} {'compiles':>8} "
                  f"{'hits':>5}  test")
    key = lambda r: -(r["trace_s"] + r["lower_s"] + r["xla_compile_s"])
    for r in sorted(rows, key=key)[:n]:
        tr.write_line(f"{r['wall_s']:8.1f} {r['trace_s']:8.1f} {r['lower_s']:8.1f} "
                      f"{r['xla_compile_s']:8.1f} {r['compiles']:8d} {r['cache_hits']:5d}  {r['test']}")
    tr.write_line("the functions compiled at the greatest cost (over all tests):")
    tr.write_line(f"{'seconds':>8} {'traces':>7} {'XLA compiles':>12}  function")
    cost = lambda f: sum(v for k, v in _by_function[f].items() if not k.endswith("_n"))
    for f in sorted(_by_function, key=cost, reverse=True)[:12]:
        b = _by_function[f]
        tr.write_line(f"{cost(f):8.1f} {int(b.get('trace_n', 0)):7d} {int(b.get('compile_n', 0)):12d}  {f}")
    tr.write_line(f"all tests: {total['wall_s']:.0f} s in tests, of which trace {total['trace_s']:.0f} s, "
                  f"lower {total['lower_s']:.0f} s, XLA compile {total['xla_compile_s']:.0f} s "
                  f"({compiles} compilations, {hits} persistent-cache hits)")
