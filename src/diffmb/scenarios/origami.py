"""Fulton & Schaub's origami-folded deployables as CLI scenarios.

``fold-4panel`` (section 4.2), ``fold-2x4`` (section 4.3.1), ``fold-3x3`` (Fig. 13, the
case the paper could not run) and ``map-fold`` (any rows x cols). Geometry, frames and
fold signs: :mod:`diffmb.origami.pattern` and :mod:`diffmb.origami.patterns`.
"""

from __future__ import annotations

from ..origami import build, fold_2x4, fold_3x3, fold_4panel, map_fold
from ..origami.patterns import PAPER_HUB_INERTIA, PAPER_PANEL_INERTIA
from . import Scenario, register

PAPER = "Fulton & Schaub, Acta Astronautica 2021"
STABS = ("none", "baumgarte", "projection")


def _gains(v):
    return (v["a"], v["b"])


def _4panel(v, stabilization):
    return _system(fold_4panel(k=v["K"], damping=v["damping"]), v, stabilization)


def _2x4(v, stabilization):
    return _system(fold_2x4(k=v["K"], k7=v["K7"], hub_mass=v["hub_mass"], damping=v["damping"]),
                   v, stabilization)


def _3x3(v, stabilization):
    return _system(fold_3x3(k=v["K"], k_col=v["K_col"], hub_mass=v["hub_mass"], damping=v["damping"]),
                   v, stabilization)


def _map(v, stabilization):
    rows, cols = int(v["rows"]), int(v["cols"])
    if rows != v["rows"] or cols != v["cols"] or rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be positive integers (got {v['rows']}, {v['cols']})")
    pattern = map_fold(rows, cols, panel_mass=1.0, hub_mass=v["hub_mass"],
                       panel_inertia=PAPER_PANEL_INERTIA, hub_inertia=PAPER_HUB_INERTIA,
                       k_row=v["K"], k_col=v["K_col"], damping=v["damping"])
    return _system(pattern, v, stabilization)


def _system(pattern, v, stabilization):
    system, _ = build(pattern, stabilization=stabilization, baumgarte=_gains(v))
    return system, system.default_params()


register(Scenario(
    name="fold-4panel",
    description="four-panel map fold on a free-flying root, one closure (sec. 4.2, Tables 1-4)",
    paper=PAPER, build=_4panel,
    defaults={"K": 0.1, "damping": 0.0, "a": 100.0, "b": 0.0},
    t1=10.0, dt=1e-3, solver="rk4", stabilizations=STABS, stabilization="baumgarte",
))

register(Scenario(
    name="fold-2x4",
    description="2 x 4 map fold, two chains, three closures (sec. 4.3.1, Tables 5-8)",
    paper=PAPER, build=_2x4,
    defaults={"K": 0.01, "K7": 0.03, "hub_mass": 100.0, "damping": 0.0, "a": 40.0, "b": 0.0},
    t1=30.0, dt=1e-3, solver="rk4", stabilizations=STABS, stabilization="baumgarte",
))

register(Scenario(
    name="fold-3x3",
    description="3 x 3 map fold, three chains, two bodies with two closures (Fig. 13, Fig. 20)",
    paper=PAPER, build=_3x3,
    defaults={"K": 0.01, "K_col": 0.03, "hub_mass": 100.0, "damping": 0.0, "a": 40.0, "b": 0.0},
    t1=30.0, dt=1e-3, solver="rk4", stabilizations=STABS, stabilization="projection",
))

register(Scenario(
    name="map-fold",
    description="rows x cols map fold around a free-flying hub (--set rows=.. cols=..)",
    paper=PAPER, build=_map,
    defaults={"rows": 3.0, "cols": 3.0, "K": 0.01, "K_col": 0.03, "hub_mass": 100.0,
              "damping": 0.0, "a": 40.0, "b": 0.0},
    t1=10.0, dt=1e-3, solver="rk4", stabilizations=STABS, stabilization="projection",
))
