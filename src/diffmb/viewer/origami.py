"""The scene of an origami run: panels as their polygons, creases, cut creases, the hub.

The pattern is rebuilt from the run's scenario and parameters (a registered pattern or a
FOLD file); its panel outlines (:class:`~diffmb.origami.pattern.OrigamiInfo`) are in each
body's frame, and since every body frame is parallel to the world in the flat layout, a
crease ``p1 -> p2`` of the flat layout sits at ``p - origin(panel)`` in a panel's frame.

Quantities: per panel, the angle, rate and stored energy of the hinge that joins it to
its parent (linear spring ``K (theta - rest)^2 / 2`` plus tape springs and stops where the
run has them); per cut crease the closure gap, the largest distance between the crease's
end points as carried by its two panels (the panels touching a cut crease take its gap);
per panel the gap to the nearest panel it shares no vertex with (negative: how deep they
pass through each other) and, with contact on, the barrier's contact force on it
(:meth:`~diffmb.origami.contact.PanelContact.panel_fields`).
"""

from __future__ import annotations

import warnings

import jax
import numpy as np

from ..origami import build
from ..origami.contact import PanelContact
from ..origami.hinges import stop_energy, tape_spring_energy
from ..origami.start_state import PatternNote
from ..scenarios import origami as origami_scenarios
from ..tree.kinematics import kinematics
from .frames import body_poses, hinge_series, world_points
from .scene import Quantity, Scene, frame_indices


def pattern_of(run):
    """The crease pattern of a saved origami run, or ``None`` when it is not one."""
    name, v = run.scenario.name, run.values
    if name in origami_scenarios.PATTERNS and run.meta.get("model") is None:
        return origami_scenarios.PATTERNS[name](v)
    model = run.meta.get("model")
    if isinstance(model, str):
        path, start = origami_scenarios.start_options(model)
        if path.lower().endswith(origami_scenarios.PATTERN_FILES):
            with warnings.catch_warnings():   # the run said them when it was built
                warnings.simplefilter("ignore", PatternNote)
                return origami_scenarios.load_pattern(path, v, **start)
    return None


def panel_origins(pattern) -> tuple[dict, dict, set]:
    """``(outlines, origins, cut)``: each panel's outline in its body frame, its body
    origin in the flat layout, and the cut creases' panel pairs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PatternNote)
        _, info = build(pattern, stabilization="none")
    outlines = {name: np.asarray(v, float) for name, v in info.panel_outlines}
    origin = {p.name: np.pad(np.asarray(p.vertices, float), ((0, 0), (0, 3)))[0, :3] - outlines[p.name][0]
              for p in pattern.panels}
    return outlines, origin, {frozenset(pair) for pair in info.pairs}


def crease_layout(pattern):
    """``(outlines, cut, creases)``: body name -> ``(k, 3)`` outline in its frame, the cut
    creases' panel pairs, and every crease as ``(a, b, p1_a, p2_a, p1_b, p2_b, cut)`` with
    its end points in panel ``a``'s and panel ``b``'s frames."""
    outlines, origin, cut = panel_origins(pattern)
    creases = []
    for c in pattern.creases:
        p1, p2 = (np.pad(np.asarray(p, float), (0, 3))[:3] for p in (c.p1, c.p2))
        creases.append((c.a, c.b, p1 - origin[c.a], p2 - origin[c.a], p1 - origin[c.b], p2 - origin[c.b],
                        frozenset((c.a, c.b)) in cut))
    return outlines, cut, creases


def hinge_energy(run, angles: np.ndarray) -> np.ndarray:
    """``(F, H)`` stored energy of each tree hinge: linear spring, plus the run's tape
    springs and stops (:mod:`diffmb.origami.hinges`)."""
    model, system = run.params["model"], run.system
    idx = [i for i, k in zip((s for s, _ in model.body_slices), model.joint_kinds) if k == "revolute"]
    K = np.asarray(model.stiffness)[idx]
    rest = np.asarray(model.rest)[idx]
    E = 0.5 * K * (angles - rest) ** 2
    forcing = run.params.get("forcing") or {}
    if system.coordinate_roles.get("hinge") == tuple(model.coordinate_names[i] for i in idx):
        if "tape" in forcing:
            f = forcing["tape"]
            E = E + np.asarray(tape_spring_energy(angles - np.asarray(f["rest"]), f["K_flat"], f["M_peak"],
                                                  f["M_plateau"], f["M_peak_neg"], f["M_plateau_neg"]))
        if "stop" in forcing:
            s = forcing["stop"]
            E = E + np.asarray(stop_energy(angles, s["lower"], s["upper"], s["k"], s["width"]))
    return E


def scene(run, fps: float, max_frames: int) -> Scene | None:
    """The origami scene of ``run`` (a :class:`~diffmb.viewer.saved.SavedRun`), or
    ``None`` when the run is not origami."""
    pattern = pattern_of(run)
    if pattern is None:
        return None
    tr = run.traj.trimmed()
    pick = frame_indices(np.asarray(tr.ts), fps, max_frames)
    ts, xs = np.asarray(tr.ts)[pick], np.asarray(tr.xs)[pick]
    names = list(run.system.body_names)
    index = {n: i for i, n in enumerate(names)}
    poses = body_poses(run.system, run.params, xs)
    outlines, cut, creases = crease_layout(pattern)
    hub = index[pattern.root]
    thickness = {q.name: float(q.thickness) for q in pattern.panels}
    geometry = [{"polygons": _slab(_upward(outlines[n]), thickness.get(n, 0.0)) if n in outlines else [],
                 "segments": [], "role": "hub" if i == hub else "panel"} for i, n in enumerate(names)]
    links = []
    for a, b, p1a, p2a, p1b, p2b, is_cut in creases:
        if is_cut:
            geometry[index[a]]["segments"].append({"p": [p1a.tolist(), p2a.tolist()], "kind": "cut"})
            geometry[index[b]]["segments"].append({"p": [p1b.tolist(), p2b.tolist()], "kind": "cut"})
        else:
            geometry[index[a]]["segments"].append({"p": [p1a.tolist(), p2a.tolist()], "kind": "crease"})
    angle, rate, bodies = hinge_series(run.system, xs)
    n_f, n_b = len(ts), len(names)

    def per_body(series):
        out = np.full((n_f, n_b), np.nan)
        out[:, bodies] = series
        return out

    energy = hinge_energy(run, angle)
    gap = _gaps(poses, creases, index)
    touch = np.zeros((n_f, n_b))
    for (a, b, *_rest, is_cut), g in zip([c for c in creases if c[-1]], gap.T):
        touch[:, index[a]] = np.maximum(touch[:, index[a]], g)
        touch[:, index[b]] = np.maximum(touch[:, index[b]], g)
    quantities = [
        Quantity("hinge angle", "deg", "bodies", per_body(np.degrees(angle)), signed=True),
        Quantity("hinge rate", "deg/s", "bodies", per_body(np.degrees(rate)), signed=True),
        Quantity("closure violation (cut-crease gap)", "m", "bodies", touch),
        Quantity("hinge energy", "J", "bodies", per_body(energy)),
    ]
    fields = contact_fields(run.system, run.params, xs)
    if "gap" in fields and any(np.isfinite(v).any() for v in fields["gap"].values()):
        quantities.append(Quantity("gap to the nearest panel", "m", "bodies", _on_bodies(fields["gap"], names)))
    if "force" in fields:
        quantities.append(Quantity("contact force", "N", "bodies", _on_bodies(fields["force"], names)))
    return Scene(
        title=run.name, times=ts.astype(np.float32), body_names=names, poses=poses.astype(np.float32),
        geometry=geometry, links=links, quantities=quantities, hub=hub, kind="origami",
        info={"panels": len(outlines), "creases": len(creases), "cut creases": len(cut),
              "hub": pattern.root, "mobility": _mobility(run.system, len(creases) - len(cut))},
    )


#: Pairs of panels whose gap the page computes exactly at each frame (the nearest by a
#: lower bound; the rest show that bound): a 10x10 fold's 4,608 pairs at 400 frames took
#: 19 s, 512 of them take a few.
VIEW_PAIRS = 512


def contact_fields(system, params, xs: np.ndarray, capacity: int = VIEW_PAIRS) -> dict:
    """``{field: {panel: (F,) series}}`` of the run's contact element at the states ``xs``
    (:meth:`~diffmb.origami.contact.PanelContact.panel_fields` with ``capacity`` exact
    pairs a frame; an infinite gap, a panel with no panel to meet, is NaN); ``{}`` when
    the system has no such element."""
    k = next((i for i, e in enumerate(getattr(system, "elements", ())) if isinstance(e, PanelContact)), None)
    if k is None:
        return {}
    e, p, model = system.elements[k], params["elements"][k], params["model"]

    def one(x):
        q, qd = system.split(x)
        return e.panel_fields(model, kinematics(model, q, qd), system.element_states(x)[k], p, capacity)

    out = jax.jit(jax.vmap(one))(np.asarray(xs))
    return {f: {name: np.where(np.isfinite(v := np.asarray(out[f][:, i], float)), v, np.nan)
                for i, name in enumerate(e.panel_names)} for f in out}


def _on_bodies(series: dict, names: list) -> np.ndarray:
    """Per-panel series as an ``(F, bodies)`` table (NaN for a body with no panel)."""
    n_f = len(next(iter(series.values())))
    out = np.full((n_f, len(names)), np.nan)
    for i, n in enumerate(names):
        if n in series:
            out[:, i] = series[n]
    return out


def _mobility(system, tree_hinges: int) -> str:
    """The pattern's mobility at the start state, as the run's build reported it."""
    m = getattr(getattr(getattr(system, "closures", None), "report", None), "mobility", None)
    return str(m) if m is not None else f"{tree_hinges} dof (a tree: no closures)"


def _slab(outline: np.ndarray, t: float) -> list:
    """The polygons that draw a panel: its outline, or for a slab of thickness ``t`` its
    top and bottom faces (the mid-surface outline moved by ``+-t/2``) and its sides."""
    if not t:
        return [outline.tolist()]
    up = np.array([0.0, 0.0, t / 2])
    top, bottom = outline + up, outline - up
    sides = [[bottom[k], bottom[(k + 1) % len(outline)], top[(k + 1) % len(outline)], top[k]]
             for k in range(len(outline))]
    return [top.tolist(), bottom[::-1].tolist(), *[np.asarray(q).tolist() for q in sides]]


def _upward(outline: np.ndarray) -> np.ndarray:
    """The outline counter-clockwise seen from the panel's ``+z``: its front face is the
    side a valley fold closes (FOLD's convention), whatever order the pattern gave."""
    x, y = outline[:, 0], outline[:, 1]
    return outline if np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y) >= 0 else outline[::-1]


def _gaps(poses: np.ndarray, creases, index) -> np.ndarray:
    """``(F, C)`` closure gap of each cut crease: the larger distance between its end
    points as carried by panel ``a`` and by panel ``b``."""
    out = []
    for a, b, p1a, p2a, p1b, p2b, is_cut in creases:
        if not is_cut:
            continue
        d1 = world_points(poses[:, index[a]], p1a) - world_points(poses[:, index[b]], p1b)
        d2 = world_points(poses[:, index[a]], p2a) - world_points(poses[:, index[b]], p2b)
        out.append(np.maximum(np.linalg.norm(d1, axis=-1), np.linalg.norm(d2, axis=-1)))
    return np.stack(out, -1) if out else np.zeros((len(poses), 0))
