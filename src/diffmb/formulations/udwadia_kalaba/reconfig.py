"""The reconfiguration-graph explorer (Shoer & Peck, section IV, steps 1-5).

Nodes are passively stable configurations (body poses, at rest); directed, labelled edges
are the joint layout and potential selection that carry the system from one node to
another. The algorithm of section IV:

1. start from the system's initial configuration (step 1) with its sensors (step 2);
2. the first node goes on the processing list (step 3);
3. for each node (step 4): enumerate every combination of joint-site options (a site is
   available only while its sensor pair meets, step 4.1) and potential selection;
   simulate each candidate from the node at rest until a sensor pair meets or the
   system settles (step 4.2.2); reject unsafe runs — bodies that separate, bounding
   spheres that collide, runs that diverge or never settle (step 4.2.3); match the end
   configuration against the known nodes within a tolerance, adding a new node if none
   matches (step 4.2.4); add a labelled edge (step 4.2.5). Transitions that end where
   they started (self-loops) are not reconfigurations and are not recorded;
4. save the graph (step 5): GraphML, JSON and a figure.

Every candidate runs the same compiled :func:`diffmb.simulate` program: the joint layout
(each joint's ``active`` number), the potential selection (each interaction's
``weight``), the weld references and the armed sensor pairs are numbers in ``params``, so
the whole exploration compiles once (on a CPU one candidate after another, on an
accelerator a node's candidates as one ``vmap``, see :func:`_run_candidates`).

Equilibrium (step 4.2.2) is judged on the saved trajectory: the run settled when, over the
last ``dwell`` seconds before ``t_max``, the kinetic energy stays below ``ke_tol`` and every
body's speed and angular rate below ``rate_tol``. Sensor meetings stop the run through a
diffrax event (:meth:`~diffmb.formulations.udwadia_kalaba.UKSystem.sensor_event`); pairs
that already meet at the start are disarmed.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np

from ...math import spatial as sp
from ...simulation.integrate import simulate
from . import UKSystem, dcm_NB, omega_body


@dataclass(frozen=True)
class JointSite:
    """A place where a joint can be made. ``options``: ``{option name: joint names to switch
    on}`` (every other joint of the site off; ``()`` is a free site). ``sensors``: the
    sensor pair that must meet for the site to be usable (``None``: always usable); an
    unusable site is free."""

    name: str
    options: dict
    sensors: tuple | None = None


@dataclass
class Problem:
    """A reconfiguration-graph search: the system, its joint sites and potential choices.

    ``choices``: ``{choice name: {interaction name: weight}}`` (interactions not named keep
    weight 0 unless listed in ``always``). ``sensor_pairs``: the pairs whose meeting stops a
    run; ``align_tol`` [rad] also requires the faces to align. ``pose_tol``:
    ``(metres, radians)`` for matching configurations. ``separation``: a body farther than
    this from every other body has separated. ``collision_skip``: body-name pairs not
    checked for collisions.
    """

    system: UKSystem
    params: dict
    sites: tuple
    choices: dict
    sensor_pairs: tuple
    always: tuple = ()
    align_tol: float | None = None
    t_max: float = 10.0
    n_save: int = 201
    dwell: float = 1.0
    ke_tol: float = 1e-6
    rate_tol: float = 1e-3
    pose_tol: tuple = (5e-3, 0.05)
    separation: float = 1.0
    collision_skip: tuple = ()
    rtol: float = 1e-6
    atol: float = 1e-8
    max_nodes: int = 50
    meta: dict = field(default_factory=dict)

    def validate(self):
        sysm = self.system
        names = set(sysm.joint_names)
        inter = {i.name for i in sysm.interactions}
        if not self.choices:
            raise ValueError("reconfiguration problem: no potential choices")
        for s in self.sites:
            if not s.options:
                raise ValueError(f"joint site {s.name!r}: no options")
            for opt, joints in s.options.items():
                for j in joints:
                    if j not in names:
                        raise ValueError(f"joint site {s.name!r} option {opt!r}: unknown joint {j!r}")
            if s.sensors is not None:
                for n in s.sensors:
                    sysm.sensor_index(n)
        for c, w in self.choices.items():
            for n in w:
                if n not in inter:
                    raise ValueError(f"potential choice {c!r}: unknown interaction {n!r}")
        for n in self.always:
            if n not in inter:
                raise ValueError(f"always-on interaction {n!r} is unknown")
        if not (self.t_max > self.dwell > 0):
            raise ValueError(f"t_max ({self.t_max}) must exceed dwell ({self.dwell}) > 0")


# ============================================================================== helpers
def _pose_distance(system, xa, xb):
    """``(max com distance, max attitude angle)`` between two configurations."""
    n = system.n
    A, B = np.asarray(xa[: 7 * n]).reshape(n, 7), np.asarray(xb[: 7 * n]).reshape(n, 7)
    dr = np.linalg.norm(A[:, :3] - B[:, :3], axis=1).max()
    return float(dr), float(np.max(sp.quat_angle(A[:, 3:], B[:, 3:])))


def _at_rest(system, x):
    x = np.asarray(x, float).copy()
    x[7 * system.n:] = 0.0
    return x


def _candidates(problem, x):
    """``[(labels {site: option}, active {joint: 0/1}, choice), ...]`` at configuration ``x``."""
    sysm, p = problem.system, problem.params
    per_site = []
    for s in problem.sites:
        if s.sensors is None or bool(sysm.pair_meets(x, p, [s.sensors])[0]):
            per_site.append([(s.name, o) for o in s.options])
        else:
            free = [o for o, js in s.options.items() if not js]
            per_site.append([(s.name, free[0] if free else "free")])
    out = []
    for combo in itertools.product(*per_site):
        active = {j: 0.0 for j in sysm.joint_names}
        for site_name, opt in combo:
            site = next(s for s in problem.sites if s.name == site_name)
            for j in site.options.get(opt, ()):
                active[j] = 1.0
        for choice in problem.choices:
            out.append((dict(combo), active, choice))
    return out


def _params_for(problem, p, active, choice, armed):
    """A candidate's parameters from the node's ``p`` (welds rebased at its state)."""
    sysm = problem.system
    joints = {}
    for kind, names, _, _ in sysm.joints:
        jp = dict(p["joints"][kind])
        jp["active"] = jnp.asarray([active[n] for n in names], float)
        joints[kind] = jp
    inter = {}
    w = problem.choices[choice]
    for name, ip in p["interactions"].items():
        weight = w.get(name, 1.0 if name in problem.always else 0.0)
        inter[name] = {**ip, "weight": jnp.asarray(float(weight))}
    sensors = {**p["sensors"], "armed": jnp.asarray(armed, float)}
    return {**p, "joints": joints, "interactions": inter, "sensors": sensors}


def _max_candidates(problem):
    """Upper bound on the candidates of any node: every site usable."""
    return math.prod(len(s.options) for s in problem.sites) * len(problem.choices)


#: Candidates simulated at once on a CPU (None: ``DIFFMB_CANDIDATE_THREADS``, else one per
#: core this process may use; each run is one compiled program, which releases the
#: interpreter while it runs).
_THREADS = None


def _threads() -> int:
    """How many candidates run at once on a CPU; ValueError naming a bad
    ``DIFFMB_CANDIDATE_THREADS``."""
    if _THREADS is not None:
        return _THREADS
    given = os.environ.get("DIFFMB_CANDIDATE_THREADS", "")
    if not given:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not given.isdigit() or int(given) < 1:
        raise ValueError(f"DIFFMB_CANDIDATE_THREADS must be a positive whole number, got {given!r}")
    return int(given)


def _run_candidates(problem, x0, plist, event, batched=None) -> tuple[list, np.ndarray]:
    """``(outcomes, save times)``: every candidate of a node simulated from ``x0``, as
    ``{"status", "ts", "xs", "x_final", "kinetic_energy"}`` NumPy arrays per candidate.

    On a CPU the same compiled program for every candidate and node (same structure, new
    numbers), each taking its own steps, :func:`_threads` at a time (``uk-imaging``'s
    exploration, 2 cores: 124 s one after another, 49 s two at a time; the same graph).
    As one ``vmap``-ed batch every candidate stepped until the slowest one finished (a
    node's step counts ran from 146 to 687), and the batch was padded to the largest a
    node can have (108) so that one program served every node, so a node of 4 candidates
    ran 108: the 12 nodes of ``uk-imaging`` made 854,000 member-steps of work for 180,000
    needed, and the exploration took 334 s. On accelerators, which run a batch in
    parallel, it stays one padded ``vmap`` (``batched``: ``None`` picks by backend,
    ``True``/``False`` force it)."""
    ts = np.linspace(0.0, problem.t_max, problem.n_save)

    def one(p):
        return simulate(problem.system, t1=problem.t_max, x0=jnp.asarray(x0), params=p, solver="dopri5",
                        rtol=problem.rtol, atol=problem.atol, saveat=ts, events=event, max_steps=20000)

    def outcome(tr, k=None):
        pick = (lambda a: np.asarray(a)) if k is None else (lambda a: np.asarray(a[k]))
        return {"status": int(pick(tr.status_code)), "ts": pick(tr.ts), "xs": pick(tr.xs),
                "x_final": pick(tr.x_final), "kinetic_energy": pick(tr.diagnostics["kinetic_energy"])}

    if not (jax.default_backend() != "cpu" if batched is None else batched):
        threads = _threads()
        if threads < 2 or len(plist) < 2:
            return [outcome(one(p)) for p in plist], ts
        first = outcome(one(plist[0]))   # compiles (and loads) the program once, before the pool shares it
        pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="diffmb-candidates")
        try:
            return [first] + list(pool.map(lambda p: outcome(one(p)), plist[1:])), ts
        finally:   # a second Ctrl-C leaves at once: the candidates not started are dropped
            pool.shutdown(wait=False, cancel_futures=True)
    size = max(_max_candidates(problem), len(plist))
    padded = list(plist) + [plist[-1]] * (size - len(plist))
    batch = jax.vmap(one)(jax.tree.map(lambda *a: jnp.stack(a), *padded))
    return [outcome(batch, k) for k in range(len(plist))], ts


_rebase_welds = eqx.filter_jit(lambda sysm, x, params: sysm.rebase_welds(x, params))
_potential = eqx.filter_jit(lambda sysm, X, params: sysm.potential(X, params))


@eqx.filter_jit
def _positions(sysm, xs, params):
    """Every body's position at each state of ``xs``: one program per structure and save
    count (computed state by state, eagerly, this took half of an exploration's time)."""
    X = xs[:, : 7 * sysm.n].reshape(len(xs), sysm.n, 7)
    return jax.vmap(sysm.all_poses, (0, None))(X, params)[..., :3]


def _assess(problem, run, ts):
    """``(ok, reason, final state)`` of one candidate's outcome (:func:`_run_candidates`)."""
    sysm = problem.system
    status = run["status"]
    xs = run["xs"]
    valid = np.isfinite(run["ts"]) & np.all(np.isfinite(xs), axis=1)
    xs = xs[valid]
    xf = run["x_final"]
    if status in (2, 3) or not np.all(np.isfinite(xf)):
        return False, "diverged", None
    names = sysm.body_names
    radius = np.asarray(problem.params["bodies"]["radius"])
    skip = {frozenset(pair) for pair in problem.collision_skip}
    pos = np.asarray(_positions(sysm, jnp.asarray(np.vstack([run["xs"], xf[None]])), problem.params))
    pos = pos[np.append(valid, True)]
    N = len(names)
    for i in range(N):
        for j in range(i + 1, N):
            if frozenset((names[i], names[j])) in skip:
                continue
            d = np.linalg.norm(pos[:, i] - pos[:, j], axis=1)
            if np.any(d < radius[i] + radius[j]):
                return False, f"collision {names[i]}-{names[j]}", None
    if N > 1:
        D = np.linalg.norm(pos[:, :, None, :] - pos[:, None, :, :], axis=-1)
        D[:, np.arange(N), np.arange(N)] = np.inf
        if np.any(D.min(axis=2) > problem.separation):
            return False, "separation", None
    if status == 1:
        return True, "sensor", _at_rest(sysm, xf)
    tsv = ts[valid]
    window = tsv >= problem.t_max - problem.dwell - 1e-12
    ke = run["kinetic_energy"][valid][window]
    V = xs[window][:, 7 * sysm.n:].reshape(-1, sysm.n, 7)
    X = xs[window][:, : 7 * sysm.n].reshape(-1, sysm.n, 7)

    w = np.asarray(omega_body(jnp.asarray(X[..., 3:]), jnp.asarray(V[..., 3:])))
    rates = max(np.abs(V[..., :3]).max(initial=0.0), np.abs(w).max(initial=0.0))
    if ke.size and ke.max() < problem.ke_tol and rates < problem.rate_tol:
        return True, "equilibrium", _at_rest(sysm, xf)
    return False, "unsettled", None


# ============================================================================== explore
def explore(problem: Problem, *, verbose=False, stop=None, batched=None) -> nx.MultiDiGraph:
    """Build the reconfiguration graph (module docstring). Node attributes: ``state``
    (the configuration at rest, a list), ``energy``; edge attributes: ``joints``
    (``{site: option}``), ``potential`` (choice name), ``reason`` (``sensor`` or
    ``equilibrium``); ``graph.graph["rejected"]`` counts the rejected candidates by reason.
    ``stop()``: checked after every node's batch of candidates; when it returns True the
    graph found so far is returned, ``graph.graph["unexplored"]`` the nodes whose
    candidates were not run (0 when the exploration finished). ``batched``: a node's
    candidates as one ``vmap`` (``True``), one after another (``False``), or by backend
    (``None``: on a CPU one after another, a thread per core, :func:`_run_candidates`)."""
    problem.validate()
    _threads()   # a bad DIFFMB_CANDIDATE_THREADS is said before anything compiles
    sysm = problem.system
    event = sysm.sensor_event(problem.sensor_pairs, align_tol=problem.align_tol)
    G = nx.MultiDiGraph()
    x0 = _at_rest(sysm, np.asarray(sysm.init_state(problem.params)))
    G.add_node(0, state=x0.tolist())
    todo = [0]
    rejected: dict = {}
    while todo:
        u = todo.pop(0)
        xu = np.asarray(G.nodes[u]["state"])
        cands = _candidates(problem, xu)
        armed = ~sysm.pair_meets(xu, problem.params, problem.sensor_pairs, problem.align_tol)
        p_node = _rebase_welds(sysm, xu, problem.params)
        plist = [_params_for(problem, p_node, act, ch, armed) for _, act, ch in cands]
        runs, ts = _run_candidates(problem, xu, plist, event, batched)
        for run, (labels, _, choice) in zip(runs, cands):
            ok, reason, xf = _assess(problem, run, ts)
            if verbose:
                print(f"node {u}: {labels} + {choice}: {reason}")
            if not ok:
                rejected[reason.split()[0]] = rejected.get(reason.split()[0], 0) + 1
                continue
            match = None
            for v in G.nodes:
                dr, da = _pose_distance(sysm, G.nodes[v]["state"], xf)
                if dr <= problem.pose_tol[0] and da <= problem.pose_tol[1]:
                    match = v
                    break
            if match is None:
                if G.number_of_nodes() >= problem.max_nodes:
                    rejected["max_nodes"] = rejected.get("max_nodes", 0) + 1
                    continue
                match = G.number_of_nodes()
                G.add_node(match, state=xf.tolist())
                todo.append(match)
            if match == u:
                continue
            G.add_edge(u, match, joints=dict(labels), potential=choice, reason=reason)
        if stop is not None and stop():
            break
    for v in G.nodes:
        x = jnp.asarray(G.nodes[v]["state"])
        G.nodes[v]["energy"] = float(_potential(sysm, x[: 7 * sysm.n].reshape(sysm.n, 7), problem.params))
    G.graph["rejected"] = rejected
    G.graph["unexplored"] = len(todo)
    return G


# ============================================================================== output
def _label(joints, potential):
    return ", ".join(f"{k}={v}" for k, v in sorted(joints.items())) + f" | {potential}"


def graph_json(G, system, graph_file=None) -> dict:
    nodes = []
    for v, d in G.nodes(data=True):
        n = system.n
        X = np.asarray(d["state"][: 7 * n]).reshape(n, 7)
        nodes.append({"id": int(v), "energy": d.get("energy"),
                      "poses": {b: {"r": X[i, :3].tolist(), "q": X[i, 3:].tolist()}
                                for i, b in enumerate(system.moving_bodies)}})
    edges = [{"source": int(u), "target": int(v), "joints": d["joints"], "potential": d["potential"],
              "reason": d["reason"]} for u, v, d in G.edges(data=True)]
    return {"nodes": nodes, "edges": edges, "graph_file": None if graph_file is None else str(graph_file),
            "rejected": G.graph.get("rejected", {}), "unexplored": G.graph.get("unexplored", 0)}


def save_graphml(G, path) -> Path:
    """GraphML with scalar attributes (states and labels as JSON strings)."""
    H = nx.MultiDiGraph()
    for v, d in G.nodes(data=True):
        H.add_node(v, state=json.dumps(d["state"]), energy=float(d.get("energy", math.nan)))
    for u, v, d in G.edges(data=True):
        H.add_edge(u, v, joints=json.dumps(d["joints"]), potential=d["potential"], reason=d["reason"],
                   label=_label(d["joints"], d["potential"]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(H, path)
    return path


def draw(G, system, path, title="") -> Path:
    """The graph (nodes with a top view of their configuration) as a PNG."""
    fig = graph_figure(G, system, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def graph_figure(G, system, title=""):
    """The figure :func:`draw` writes: the graph beside the nodes' configurations. Each
    node has a colour, the same in both panels, and a line style (a body that several
    nodes leave in place shows each); fixed bodies (the structure the others move
    against) are drawn once, grey and filled, and every body carries its name (once where
    several nodes leave it in the same place)."""
    import matplotlib.cm
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle

    n_nodes = max(G.number_of_nodes(), 1)
    fig = Figure(figsize=(6 + 2.0 * min(n_nodes, 6), 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(f"{title}: reconfiguration graph, {G.number_of_nodes()} nodes, "
                 f"{G.number_of_edges()} edges")
    colors = matplotlib.cm.tab10(np.arange(n_nodes) % 10)
    node_color = {v: colors[k] for k, v in enumerate(G.nodes)}
    ax = fig.add_subplot(1, 2, 1)
    pos = nx.circular_layout(G) if n_nodes > 1 else {v: (0.0, 0.0) for v in G.nodes}
    nx.draw_networkx_nodes(G, pos, ax=ax, node_color=[node_color[v] for v in G.nodes], node_size=900,
                           alpha=0.35)
    nx.draw_networkx_labels(G, pos, ax=ax)
    nx.draw_networkx_edges(G, pos, ax=ax, arrows=True, connectionstyle="arc3,rad=0.15", node_size=900)
    labels = {(u, v): d["potential"] for u, v, d in G.edges(data=True)}
    try:  # networkx >= 3.2 places labels on the curved edges
        nx.draw_networkx_edge_labels(G, pos, edge_labels=labels, ax=ax, font_size=8,
                                     connectionstyle="arc3,rad=0.15")
    except TypeError:
        nx.draw_networkx_edge_labels(G, pos, edge_labels=labels, ax=ax, font_size=8, label_pos=0.3)
    ax.set_title("stable configurations (nodes) and transitions\n(edges, labelled by the potential switched on)",
                 fontsize="medium")
    ax.margins(0.15)  # room for the node circles and edge labels at the rim
    ax.axis("off")
    ax2 = fig.add_subplot(1, 2, 2)
    n = system.n
    radius = np.asarray(system.params0["bodies"]["radius"])
    names, fixed = system.body_names, set(system.fixed)
    named = []  # (body, x, y) already labelled

    styles = ("-", "--", ":", "-.")  # a body several nodes leave in place shows every node's line

    def name_at(i, xy, color, text):
        if not names or any(b == i and np.hypot(*(np.asarray(xy) - p)) < 0.2 * radius[i] for b, p in named):
            return
        named.append((i, np.asarray(xy)))
        ax2.text(xy[0], xy[1], text, color=color, ha="center", va="center", fontsize=8,
                 bbox={"fc": "white", "ec": "none", "alpha": 0.6, "pad": 0.5})

    for k, (v, d) in enumerate(G.nodes(data=True)):
        X = jnp.asarray(d["state"][: 7 * n]).reshape(n, 7)
        P = np.asarray(system.all_poses(X, system.params0))
        for i in range(P.shape[0]):
            if i in fixed:
                if k == 0:  # the same in every node: once, not in a node's colour
                    ax2.add_patch(Circle(P[i, :2], radius[i], fill=True, fc="0.88", ec="0.35", lw=1.5))
                    name_at(i, P[i, :2], "0.2", f"{names[i]}\n(fixed)" if names else "")
                continue
            ax2.add_patch(Circle(P[i, :2], radius[i], fill=False, color=node_color[v], lw=1.5,
                                 linestyle=styles[k % len(styles)]))
            ex = np.asarray(dcm_NB(jnp.asarray(P[i, 3:])))[:, 0] * radius[i]
            ax2.plot([P[i, 0], P[i, 0] + ex[0]], [P[i, 1], P[i, 1] + ex[1]], color=node_color[v], lw=1)
            name_at(i, P[i, :2], "0.15", names[i] if names else "")
        ax2.plot([], [], color=node_color[v], lw=1.5, linestyle=styles[k % len(styles)], label=f"node {v}")
    ax2.set_aspect("equal")
    ax2.autoscale_view()
    ax2.set_xlabel("x [m]")
    ax2.set_ylabel("y [m]")
    ax2.grid(True, alpha=0.3)
    ax2.set_title("node configurations, top view (bodies' bounding\ncircles and x axes; fixed bodies grey)",
                  fontsize="medium")
    ax2.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    return fig


# ============================================================================== by scenario
def get_problem(scenario, overrides=None) -> Problem:
    """The reconfiguration problem a scenario declares (its ``reconfiguration`` field)."""
    if scenario.reconfiguration is None:
        raise ValueError(f"scenario {scenario.name!r} has no reconfiguration problem (the "
                         f"Udwadia-Kalaba scenarios uk-hinged-cubes and uk-imaging have one)")
    return scenario.reconfiguration(overrides)


def run(scenario, out=None, json_path=None, overrides=None, verbose=False, stop=None) -> dict:
    """Explore a scenario's reconfiguration graph (:class:`~diffmb.scenarios.Scenario` with a
    ``reconfiguration``); write ``<out>/<name>.graphml`` and ``.png``; return the JSON object
    (``unexplored``: nodes left when ``stop()`` ended the exploration early, see :func:`explore`)."""
    problem = get_problem(scenario, overrides)
    name = scenario.name
    G = explore(problem, verbose=verbose, stop=stop)
    gfile = None
    if out is not None:
        out = Path(out)
        gfile = save_graphml(G, out / f"{name}.graphml")
        draw(G, problem.system, out / f"{name}.png", title=name)
    obj = {"scenario": name, **graph_json(G, problem.system, gfile)}
    if json_path is not None:
        json_path = Path(json_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(obj, indent=2) + "\n")
    return obj
