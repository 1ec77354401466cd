"""The scenario registry: each paper's cases as named, parameterised runs.

A :class:`Scenario` builds a System and its params from a flat dict of named numbers
(``diffmb run NAME --set key=value``) and carries the run settings the case is usually
run with. Modules in this package register their scenarios on import.
"""

from __future__ import annotations

import os

# importing a scenario module registers its scenarios
from . import (  # noqa: F401
    closed_mechanisms,
    files,
    flexible_spacecraft,
    fourbar,
    modular_spacecraft,
    origami,
    pendulum,
    tensegrity,
)
from .scenario import NONNEGATIVE, REGISTRY, Scenario, conserves, nonnegative, register

__all__ = ["NONNEGATIVE", "REGISTRY", "Scenario", "conserves", "get", "nonnegative", "register"]


def get(name: str, *, closures: str | os.PathLike | None = None, key: str | int | None = None,
        start: dict | None = None) -> Scenario:
    """The registered scenario ``name``; for a path ending in ``.fold`` or ``.svg`` an
    ad-hoc scenario that loads that crease pattern (:func:`origami.fold_scenario`;
    ``start``: its ``frame``, ``fold`` and ``drive``), for ``.urdf`` a robot description
    (``closures``: a loop file), for ``.xml`` an MJCF model (``key``: its keyframe); see
    :mod:`diffmb.scenarios.files`."""
    low = str(name).lower()
    start = {k: v for k, v in (start or {}).items() if v is not None}
    if start and not low.endswith(origami.PATTERN_FILES):
        flag = {"frame": "--frame", "fold": "--fold-fraction", "drive": "--drive"}[next(iter(start))]
        raise ValueError(f"{flag} applies to a crease pattern (.fold or .svg), not to {name!r}")
    if closures is not None and not low.endswith(".urdf"):
        raise ValueError(f"--closures applies to a .urdf model, not to {name!r}")
    if key is not None and not low.endswith(".xml"):
        raise ValueError(f"--key applies to an MJCF (.xml) model, not to {name!r}")
    if low.endswith(".xml"):
        return files.mjcf_scenario(name, key)
    if low.endswith(origami.PATTERN_FILES) and name not in REGISTRY:
        return origami.fold_scenario(name, **start)  # ValueError naming the path if it is missing
    if low.endswith(".urdf"):
        return files.urdf_scenario(name, closures)
    if name not in REGISTRY:
        raise ValueError(f"unknown scenario {name!r}; available: {', '.join(sorted(REGISTRY))} "
                         f"(or a .fold, .svg, .urdf or MJCF .xml file)")
    return REGISTRY[name]
