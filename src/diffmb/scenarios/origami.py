"""Fulton & Schaub's origami-folded deployables as CLI scenarios.

``fold-4panel`` (section 4.2), ``fold-2x4`` (section 4.3.1), ``fold-3x3`` (Fig. 13, the
case the paper could not run) and ``map-fold`` (any rows x cols). Geometry, frames and
fold signs: :mod:`diffmb.origami.pattern` and :mod:`diffmb.origami.generators`; the paper's
numbers (panel and hub inertias, Tables 1 and 5) and its grids (:func:`fold_4panel`,
:func:`fold_2x4`, :func:`fold_3x3`) are here.

Hinge models (:mod:`diffmb.origami.hinges`), all ``--set`` numbers; the defaults reproduce
the paper (linear springs, no stops):

``K``, ``c``    linear hinge stiffness [N m/rad] and damping [N m s/rad] (eq. 11; ``c`` is 0
                in the paper); names shared by run / synth / tune / fit / sweep

``hinge``       0: linear torsion springs ``K`` (eq. 11, default); 1: tape springs on the
                tree hinges instead (their linear ``K`` is set to 0; damping stays)
``ts_K``        tape spring stiffness near flat ``K_flat`` [N m/rad]
``ts_Mpeak``    snap-through peak moment ``M_peak`` [N m]
``ts_Mplat``    folded plateau moment ``M_plateau`` [N m]
``ts_asym``     negative-side moments = ``ts_asym`` x the positive ones (1: symmetric)
``ts_damping``  tape spring damping [N m s/rad]
``stop``        deployment stops at ``|theta| <= stop`` [rad] (0: none; ``pi``: no folding
                past 180 degrees, cf. section 4.3.1)
``stop_k``, ``stop_c``  stop stiffness [N m/rad] and Hunt-Crossley damping [N m s/rad^2]
``stop_width``  0: exact one-sided contact; > 0 [rad]: the smooth switch of that width
``latch``       deployment latches: each folded hinge stops ``latch`` [rad] past flat, on
                the side opposite its fold (stiffness ``stop_k``, damping ``stop_c``;
                negative: none)
``spin``        the stowed package's rate about the root panel's normal at release [rad/s]
                (a tip-off rate; a rigid rotation, so the closures hold)

Loop-closed (cut) creases carry no hinge torque, for the linear springs as for these.
:func:`outlines` gives a scenario's panel polygons (for ``diffmb run --animate``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings

import jax.numpy as jnp
import numpy as np

from ..formats.fold import load_fold
from ..origami import build, map_fold
from ..origami.contact import PSI_HAT, REST_DAMPING, ContactOptions
from ..origami.generators import miura, scheel
from ..origami.hinges import hinge_indices, make_hinges
from ..origami.pattern import CreasePattern
from ..origami.polygon import polygon_is_convex
from ..origami.start_state import CLOSURE_TOL, PatternNote
from ..origami.stow import stow
from .files import existing
from .scenario import REGISTRY, Scenario, register, set_anywhere

PAPER = "Fulton & Schaub, Acta Astronautica 2021"
STABS = ("none", "baumgarte", "projection")

#: Default run settings of every origami scenario: projection onto the constraint manifold
#: after each step, adaptive Dopri5 at rtol 1e-10, atol 1e-12 (fold-3x3: 1e-11, 1e-13).
#: The paper's settings (RK4 at 1 ms, Baumgarte ``a``, ``b``: ``--solver rk4
#: --stabilization baumgarte``) give a wrong answer where a panel passes through flat, a
#: kinematic singularity: fold-4panel's paper member gains 0.09 J of energy although
#: damped, fold-2x4's energy jumps 0.59 % at 1 ms and 16 % at 0.5 ms (a smaller step makes
#: it worse). These defaults keep, through the flat crossings, the energy to 1e-7 and the
#: angular momentum to 1e-9 (fold-2x4, fold-3x3), and run 10-20x faster than RK4 at 1 ms
#: (a few hundred steps).
SOLVER, RTOL, ATOL, STABILIZATION = "dopri5", 1e-10, 1e-12, "projection"

# Table 1 / Table 5 of Fulton & Schaub: a 2 m panel of 1 kg. The tabulated inertia is that
# of a 2 m x 0.1 m x 0.1 m bar, not of a plate; the scenarios keep the paper's numbers.
PAPER_PANEL_INERTIA = np.diag([0.3342, 0.3342, 0.0017])
PAPER_HUB_INERTIA = np.diag([66.7, 66.7, 66.7])


def fold_4panel(k: float = 0.1, damping: float = 0.0) -> CreasePattern:
    """Section 4.2, Tables 1-4: four 1 kg, 2 m panels; root ``r``; cut between ``l``, ``m``.

    Layout (flat): ``l m`` over ``j r``. The paper's Table 4 folds ``m`` and ``l`` to
    ``-pi`` and ``j`` to ``+pi`` — here the horizontal creases (``r-m``, ``j-l``) are
    ``-pi`` and the vertical crease ``r-j`` is ``+pi``, which is the same folded map.
    """
    names = [["j", "r"], ["l", "m"]]
    return map_fold(2, 2, panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_PANEL_INERTIA,
                    k_row=k, k_col=k, damping=damping, names=names, row_sign=-1.0, col_sign=1.0)


def fold_2x4(k: float = 0.01, k7: float = 0.03, hub_mass: float = 100.0, damping: float = 0.0) -> CreasePattern:
    """Section 4.3.1, Tables 5-8: the 2 x 4 map (panels 1-7 and the 100 kg hub ``r``).

    Two chains (``7 5 3 1`` hanging from ``r`` through the vertical crease ``r-7``, and
    ``6 4 2``); cut creases 1-2, 3-4, 5-6 (eq. 20: n_p = 3). Mountain folds 1, 2, 5, 6, 7 at
    ``+pi``, valley folds 3, 4 at ``-pi`` (Table 8). ``K = 0.01`` N m/rad, ``0.03`` for 7.
    """
    return map_fold(4, 2, panel_mass=1.0, hub_mass=hub_mass, panel_inertia=PAPER_PANEL_INERTIA,
                    hub_inertia=PAPER_HUB_INERTIA, k_row=k, k_col=k7, damping=damping,
                    row_sign=1.0, col_sign=1.0)


def fold_3x3(k: float = 0.01, k_col: float = 0.03, hub_mass: float = 100.0, damping: float = 0.0) -> CreasePattern:
    """The three-chain 3 x 3 map of Fig. 13 with all four closures (1-2, 2-3, 4-5, 5-6);
    panels 2 and 5 each carry two closure pairs — the case the paper could not run."""
    return map_fold(3, 3, panel_mass=1.0, hub_mass=hub_mass, panel_inertia=PAPER_PANEL_INERTIA,
                    hub_inertia=PAPER_HUB_INERTIA, k_row=k, k_col=k_col, damping=damping)


def _gains(v):
    return (v["a"], v["b"])


def _linear(v, key="K"):
    """Linear stiffness: 0 when tape springs replace the linear springs (``hinge=1``)."""
    return 0.0 if _hinge_kind(v) == 1 else v[key]


def _hinge_kind(v) -> int:
    h = v.get("hinge", 0.0)
    if h not in (0.0, 1.0):
        raise ValueError(f"parameter 'hinge': 0 (linear springs) or 1 (tape springs), got {h:g}")
    return int(h)


def _pattern_4panel(v):
    return fold_4panel(k=_linear(v), damping=v["c"])


def _pattern_2x4(v):
    return fold_2x4(k=_linear(v), k7=_linear(v, "K7"), hub_mass=v["hub_mass"], damping=v["c"])


def _pattern_3x3(v):
    return fold_3x3(k=_linear(v), k_col=_linear(v, "K_col"), hub_mass=v["hub_mass"], damping=v["c"])


def _pattern_map(v):
    rows, cols = int(v["rows"]), int(v["cols"])
    if rows != v["rows"] or cols != v["cols"] or rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive integers (got {v['rows']}, {v['cols']})")
    return map_fold(rows, cols, panel_mass=1.0, hub_mass=v["hub_mass"],
                    panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_HUB_INERTIA,
                    k_row=_linear(v), k_col=_linear(v, "K_col"), damping=v["c"])


PATTERNS = {"fold-4panel": _pattern_4panel, "fold-2x4": _pattern_2x4,
            "fold-3x3": _pattern_3x3, "map-fold": _pattern_map}


def hinge_set(pattern, v):
    """The scenario's extra hinge models (``None`` for the paper's linear springs only)."""
    tape = None
    if _hinge_kind(v) == 1:
        r = v["ts_asym"]
        if not r > 0:
            raise ValueError(f"parameter 'ts_asym' must be positive, got {r:g}")
        tape = dict(K_flat=v["ts_K"], M_peak=v["ts_Mpeak"], M_plateau=v["ts_Mplat"],
                    M_peak_neg=r * v["ts_Mpeak"], M_plateau_neg=r * v["ts_Mplat"],
                    damping=v["ts_damping"])
    stops = None
    if v["stop"] != 0.0 or v["latch"] >= 0:
        if v["stop"] != 0.0 and not (math.isfinite(v["stop"]) and v["stop"] > 0):
            raise ValueError(f"parameter 'stop' must be a positive angle in rad (0: none), got {v['stop']:g}")
        limit = v["stop"] if v["stop"] != 0.0 else math.inf
        stops = dict(upper=limit, lower=-limit, k=v["stop_k"], c=v["stop_c"], width=v["stop_width"])
    if tape is None and stops is None:
        return None
    # build() adds the free root (6 coordinates) then one revolute hinge per tree edge
    n = len(pattern.panels) - 1
    return make_hinges(range(6, 6 + n), 6 + n, tape_spring=tape, stops=stops)


#: The contact parameters every origami scenario takes (``docs/contact.md``): ``contact``
#: 1 on (the default), 0 the paper's model (the detector still reports); ``contact_kappa`` a factor on
#: the default stiffnesses; ``contact_psi`` [rad] and ``contact_dhat`` [m, 0: 1e-3 of the
#: panel size] the barriers' reaches; ``contact_thickness`` [m]; ``contact_damping``
#: [N s/m] and ``contact_crease_damping`` [N m s/rad] contact damping;
#: ``contact_rest_damping`` the damping ratio of a crease resting past flat (0: elastic); ``contact_stow``: 0
#: starts from the pattern's stack as it is, ``G > 0`` from the nearest closed state whose
#: stacked layers are ``thickness + G dhat`` apart (:func:`stowed`).
CONTACT_DEFAULTS = {"contact": 1.0, "contact_kappa": 1.0, "contact_psi": PSI_HAT, "contact_dhat": 0.0,
                    "contact_thickness": 0.0, "contact_damping": 0.0, "contact_crease_damping": 0.0,
                    "contact_rest_damping": REST_DAMPING, "contact_stow": 0.0}


def contact_options(v) -> ContactOptions:
    """The :class:`~diffmb.origami.contact.ContactOptions` of scenario values ``v``."""
    on = v.get("contact", 0.0)
    if on not in (0.0, 1.0):
        raise ValueError(f"parameter 'contact': 0 (off, the paper's model) or 1 (on), got {on:g}")
    for name in CONTACT_DEFAULTS:
        x = v.get(name, CONTACT_DEFAULTS[name])
        if not (math.isfinite(x) and x >= 0) or (name in ("contact_kappa", "contact_psi") and x == 0):
            need = "a positive" if name in ("contact_kappa", "contact_psi") else "a non-negative"
            raise ValueError(f"parameter {name!r} must be {need} number, got {x:g}")
    dhat = v.get("contact_dhat", 0.0)
    return ContactOptions(forces=on == 1.0, kappa_scale=v.get("contact_kappa", 1.0),
                          psi_hat=v.get("contact_psi", PSI_HAT), dhat=dhat if dhat > 0 else None,
                          thickness=v.get("contact_thickness", 0.0), damping=v.get("contact_damping", 0.0),
                          crease_damping=v.get("contact_crease_damping", 0.0),
                          rest_damping=v.get("contact_rest_damping", REST_DAMPING))


def stowed(system, params, v):
    """``params`` with the start state stowed (:func:`diffmb.origami.stow.stow`) when
    ``contact_stow`` > 0: every two stacked panels that share no vertex ``contact_thickness
    + contact_stow x dhat`` apart in their layer order, the closures kept; a note says what
    moved. A multiple of the barrier's reach, so one value (2: the stack starts outside
    every barrier) serves every pattern."""
    g = v.get("contact_stow", 0.0)
    if not g:
        return params
    p = params["elements"][0]
    done = stow(system, params, float(p["thickness"]) + g * float(p["dhat"]))
    warnings.warn(done.summary(), PatternNote, stacklevel=2)
    return {**params, "q0": jnp.asarray(done.q, params["q0"].dtype)}


def _build(name, v, stabilization):
    pattern = PATTERNS[name](v)
    hs = hinge_set(pattern, v)
    kw = {} if hs is None else dict(tau_fn=hs.tau_fn, forcing=hs.forcing, potential_fn=hs.potential)
    system, info = build(pattern, stabilization=stabilization, baumgarte=_gains(v), contact=contact_options(v),
                         **kw)
    if hs is not None and hinge_indices(system.model) != hs.tau_fn.indices:
        raise AssertionError("hinge coordinates differ from the built model's")  # pragma: no cover
    return system, info


def outlines(name, values=None):
    """``OrigamiInfo.panel_outlines`` of scenario ``name`` (``None`` if not an origami case)."""
    if name not in PATTERNS:
        return None
    v = REGISTRY[name].resolve(values)
    _, info = _build(name, v, "none")
    return info.panel_outlines


def _latched(system, params, latch):
    """Stop limits with each folded hinge's deployment latch: ``latch`` past flat, on the
    side opposite its initial fold (a hinge folded to +pi latches at -latch)."""
    stop = params["forcing"]["stop"]
    sign = np.sign(np.asarray(params["q0"])[list(system.tau_fn.indices)])
    lower = np.where(sign > 0, np.maximum(np.asarray(stop["lower"]), -latch), np.asarray(stop["lower"]))
    upper = np.where(sign < 0, np.minimum(np.asarray(stop["upper"]), latch), np.asarray(stop["upper"]))
    return {**stop, "lower": jnp.asarray(lower), "upper": jnp.asarray(upper)}


def _maker(name):
    def make(v, stabilization):
        system, _ = _build(name, v, stabilization)
        params = stowed(system, system.default_params(), v)
        # the stowed package's release rate about the root panel's normal: a rigid rotation,
        # so the closures' velocity constraints hold
        params["qd0"] = params["qd0"].at[2].set(v["spin"])
        if v["latch"] >= 0:
            params["forcing"] = {**params["forcing"], "stop": _latched(system, params, v["latch"])}
        return system, params

    return make


_4panel, _2x4, _3x3, _map = (_maker(n) for n in ("fold-4panel", "fold-2x4", "fold-3x3", "map-fold"))


def _hinge_defaults(scale):
    return {"spin": 0.0, "hinge": 0.0, "ts_K": 10.0 * scale, "ts_Mpeak": 3.0 * scale, "ts_Mplat": 1.0 * scale,
            "ts_asym": 1.0, "ts_damping": 0.0, "stop": 0.0, "stop_k": 100.0, "stop_c": 20.0,
            "stop_width": 0.0, "latch": -1.0}


def _conserved(values) -> tuple:
    """A free-floating fold conserves angular momentum; its energy too when no hinge
    damps: no viscous ``c``, no tape-spring damping (``hinge`` 1), no end-stop damping,
    no contact damping. Each of those only dissipates (no fold is driven), so a damped
    fold's energy may fall but not rise (``energy_falls``, :func:`diffmb.simulation.health.check`)."""
    damped = (set_anywhere(values, "c") or (values.get("hinge", 0.0) != 0 and values.get("ts_damping", 0.0) != 0)
              or ((values.get("stop", 0.0) != 0 or values.get("latch", -1.0) >= 0)
                  and values.get("stop_c", 0.0) != 0)
              or (values.get("contact", 0.0) == 1.0
                  and any(values.get(k, CONTACT_DEFAULTS[k]) != 0
                          for k in ("contact_damping", "contact_crease_damping", "contact_rest_damping"))))
    return ("energy_falls", "angular_momentum") if damped else ("energy", "angular_momentum")


def _register_fold(name, description, build, defaults, *, t1, rtol=RTOL, atol=ATOL):
    """Register an origami scenario: the default settings above (``dt`` 1 ms is RK4's step
    when ``--solver rk4`` is asked for, Dopri5's first step otherwise), every
    stabilization selectable, Baumgarte gains ``a``, ``b`` and hinge options settable."""
    register(Scenario(name=name, description=description, paper=PAPER, build=build,
                      defaults={**_hinge_defaults(defaults.get("K", 0.01)), **CONTACT_DEFAULTS, **defaults},
                      t1=t1, dt=1e-3, solver=SOLVER, rtol=rtol, atol=atol, stabilizations=STABS,
                      stabilization=STABILIZATION, conserved=_conserved))


_register_fold(
    "fold-4panel",
    "four-panel map fold on a free-flying root, one closure (sec. 4.2, Tables 1-4)",
    _4panel,
    {"K": 0.1, "c": 0.0, "a": 100.0, "b": 0.0},
    t1=10.0,
)

_register_fold(
    "fold-2x4",
    "2 x 4 map fold, two chains, three closures (sec. 4.3.1, Tables 5-8)",
    _2x4,
    {"K": 0.01, "K7": 0.03, "hub_mass": 100.0, "c": 0.0, "a": 40.0, "b": 0.0},
    t1=30.0,
)

_register_fold(
    "fold-3x3",
    "3 x 3 map fold, three chains, two bodies with two closures (Fig. 13, Fig. 20)",
    _3x3,
    {"K": 0.01, "K_col": 0.03, "hub_mass": 100.0, "c": 0.0, "a": 40.0, "b": 0.0},
    t1=30.0,
    # at rtol 1e-10 its angular momentum drifted 2.1e-9 N m s over 30 s (4.6e-10 of the
    # bodies' 4.59): Dopri5's own error, which scales with rtol (2.1e-8 at 1e-9, 2.4e-10 at
    # 1e-11, 2.5e-11 at 1e-12); 1e-11 keeps it below 1e-9 for 359 steps instead of 244
    rtol=1e-11, atol=1e-13,
)

_register_fold(
    "map-fold",
    "rows x cols map fold around a free-flying hub (--set rows=.. cols=..)",
    _map,
    {"rows": 3.0, "cols": 3.0, "K": 0.01, "K_col": 0.03, "hub_mass": 100.0,
              "c": 0.0, "a": 40.0, "b": 0.0},
    t1=10.0,
)


# ------------------------------------------------------ Miura, Scheel and FOLD files


def _count(v, key, least):
    n = int(v[key])
    if n != v[key] or n < least:
        raise ValueError(f"parameter {key!r} must be an integer >= {least}, got {v[key]:g}")
    return n


def _pattern_miura(v):
    return miura(_count(v, "rows", 1), _count(v, "cols", 1), angle_deg=v["angle"], a=v["len_a"],
                 b=v["len_b"], fold=v["fold"], panel_mass=1.0, hub_mass=v["hub_mass"],
                 stiffness=_linear(v), k_zigzag=_linear(v, "K_zig"), damping=v["c"])


def _pattern_scheel(v):
    return scheel(_count(v, "sectors", 3), _count(v, "rings", 1), hub_radius=v["hub_radius"],
                  ring_width=v["ring_width"], panel_density=v["density"], hub_mass=v["hub_mass"],
                  stiffness=_linear(v), k_ring=_linear(v, "K_ring"), damping=v["c"])


PATTERNS.update({"miura": _pattern_miura, "scheel": _pattern_scheel})


_register_fold(
    "miura",
    "rows x cols Miura-ori, partially folded, around a free-flying corner panel (Fig. 3)",
    _maker("miura"),
    {"rows": 3.0, "cols": 3.0, "angle": 60.0, "len_a": 1.0, "len_b": 1.0,
              "fold": math.pi / 3, "K": 0.01, "K_zig": 0.01, "hub_mass": 10.0, "c": 0.0,
              "a": 40.0, "b": 0.0},
    t1=10.0,
)

_register_fold(
    "scheel",
    "radial (Scheel) pattern around a polygonal hub, ring closed by closures (Figs. 4-5)",
    _maker("scheel"),
    {"sectors": 6.0, "rings": 2.0, "hub_radius": 1.0, "ring_width": 1.0, "density": 0.25,
              "hub_mass": 100.0, "K": 0.01, "K_ring": 0.01, "c": 0.0, "spin": 0.1,
              "a": 40.0, "b": 0.0},
    t1=10.0,
)


#: Crease-pattern files a run can be made from.
PATTERN_FILES = (".fold", ".svg")


def load_pattern(path, v: dict, *, frame=None, fold=None, drive=None):
    """The crease pattern of a FOLD or SVG file for the scenario values ``v`` (density,
    ``K``, ``c``, ``hub_mass``, ``closure_tol``) and start options: ``frame`` (a frame of
    the file), ``fold`` (a fold fraction) and ``drive`` (driving creases, comma-separated;
    with ``fold`` and no ``drive``, one per degree of freedom)."""
    from ..formats.svg import load_svg

    loader = load_svg if str(path).lower().endswith(".svg") else load_fold
    if drive is not None and fold is None:
        raise ValueError("--drive needs --fold-fraction FRACTION (the angle the driving creases are set to)")
    return loader(path, density=v["density"], stiffness=v["K"], damping=v["c"],
                  hub_mass=v["hub_mass"] if v["hub_mass"] > 0 else None, frame=frame, fold_fraction=fold,
                  drive=(drive or ()) if fold is not None else None,
                  closure_tol=v.get("closure_tol", CLOSURE_TOL))


def start_options(source: str) -> tuple:
    """``(path, {frame, fold, drive})`` of a recorded model source (``<path>[ --frame K]
    [ --fold-fraction F][ --drive e1,e2]``, :func:`diffmb.cli.run.model_source`)."""
    parts = str(source).split(" --")
    opts = {}
    for part in parts[1:]:
        key, _, value = part.partition(" ")
        if key == "frame":
            opts["frame"] = int(value)
        elif key == "fold-fraction":
            opts["fold"] = float(value)
        elif key == "drive":
            opts["drive"] = value
    return parts[0], opts


def _convex_or_off(pattern, options: ContactOptions) -> ContactOptions:
    """Contact for a pattern from a file, off with a note where a panel is not convex (a
    slit, a reflex corner): contact models convex panels only, and a file that loads
    without contact should load with it on by default too."""
    bent = [p.name for p in pattern.panels if not polygon_is_convex(np.asarray(p.vertices, float))]
    if not (options.forces and bent):
        return options
    warnings.warn(f"contact off: panel{'s' if len(bent) > 1 else ''} {', '.join(map(str, bent))} "
                  f"{'are' if len(bent) > 1 else 'is'} not convex (a slit or a reflex corner), which contact "
                  "does not model; the panel detector still reports (split the panels into convex ones for contact)",
                  PatternNote, stacklevel=3)
    return dataclasses.replace(options, forces=False)


def fold_scenario(path, *, frame=None, fold=None, drive=None) -> Scenario:
    """An ad-hoc scenario for a FOLD or SVG crease pattern (``diffmb run pattern.fold``),
    named after the file's stem. Parameters: ``density`` [kg/m^2], ``K`` [N m/rad], ``c``
    [N m s/rad] (every hinge), ``hub_mass`` (root panel; 0: from the density), Baumgarte
    ``a``, ``b``, ``closure_tol`` (how far the start state may miss closing, relative to
    the pattern's size). ``frame``/``fold``/``drive``: :func:`load_pattern`."""
    path = existing(path, "SVG file" if str(path).lower().endswith(".svg") else "FOLD file")

    def make(v, stabilization):
        pattern = load_pattern(path, v, frame=frame, fold=fold, drive=drive)
        system, _ = build(pattern, stabilization=stabilization, baumgarte=_gains(v),
                          contact=_convex_or_off(pattern, contact_options(v)))
        return system, stowed(system, system.default_params(), v)

    stem = os.path.splitext(os.path.basename(path))[0] or "fold"
    kind = "SVG" if path.lower().endswith(".svg") else "FOLD"
    return Scenario(
        name=stem, description=f"crease pattern from {path}", paper=f"{kind} file", build=make,
        defaults={"density": 1.0, "K": 0.01, "c": 0.0, "hub_mass": 0.0,
                  "a": 40.0, "b": 0.0, "closure_tol": CLOSURE_TOL, **CONTACT_DEFAULTS},
        t1=10.0, dt=1e-3, solver=SOLVER, rtol=RTOL, atol=ATOL, stabilizations=STABS,
        stabilization=STABILIZATION,
        conserved=_conserved,
    )
