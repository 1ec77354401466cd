"""Ad-hoc scenarios for a user's own model file: ``diffmb run robot.urdf [--closures
loops.json]`` (and ``.xml`` MJCF through :mod:`diffmb.formats.mjcf_import`).

A URDF scenario is named after the file's stem. Settable: ``floating`` (1: the root link
on a free joint), ``g`` (gravity along -z, m/s^2), Baumgarte ``a``, ``b`` (with closures).
Without closures the model starts at rest in its zero pose; with a loop file
(:func:`diffmb.formats.loops.read_loops`) at the assembled state of its ``initial`` block.
"""

from __future__ import annotations

import os
import warnings

from ..formats.loops import closed_system
from ..formats.mjcf_import import load_mjcf
from ..formats.urdf import load_urdf
from ..system import TreeSystem
from .scenario import Scenario

STABS = ("none", "baumgarte", "projection")


def existing(path, what):
    """``path`` as a string, or ValueError saying where it was looked for (relative paths
    resolve against the current folder; the repository's ``examples/`` need its root)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        hint = (" (the repository's examples/ folder: run from the repository root, or give "
                "the full path)" if path.replace("\\", "/").startswith("examples/") else "")
        raise ValueError(f"{what} not found: {path} (looked for {os.path.abspath(path)}, relative to "
                         f"the current folder {os.getcwd()}){hint}")
    return path


def urdf_scenario(path, closures=None) -> Scenario:
    path = existing(path, "URDF file")
    if closures is not None:
        closures = existing(closures, "loop file")

    def build(v, stabilization):
        if v["floating"] not in (0.0, 1.0):
            raise ValueError(f"parameter 'floating' must be 0 or 1, got {v['floating']:g}")
        model = load_urdf(path, floating_base=bool(v["floating"]), gravity=(0.0, 0.0, -v["g"]))
        if closures is None:
            system = TreeSystem(model)
        else:
            system = closed_system(model, closures, stabilization=stabilization, baumgarte=(v["a"], v["b"]))
        return system, system.default_params()

    stem = os.path.splitext(os.path.basename(path))[0] or "urdf"
    return Scenario(
        name=stem, description=f"robot description {path}" + (f" closed by {closures}" if closures else ""),
        paper="URDF file", build=build, defaults={"floating": 0.0, "g": 9.81, "a": 0.0, "b": 0.0},
        t1=5.0, dt=1e-3, solver="rk4", stabilizations=STABS if closures else ("none",),
        stabilization="projection" if closures else "none",
    )


def mjcf_scenario(path, key=None) -> Scenario:
    """An MJCF model (:func:`diffmb.formats.mjcf_import.load_mjcf`): its equalities closed exactly,
    the state of ``key`` (default: the first keyframe). Settable: Baumgarte ``a``, ``b``."""
    path = existing(path, "MJCF file")
    imported = load_mjcf(path, key=key)  # compile once: errors before any run
    for note in imported.notes:
        warnings.warn(f"{path}: {note}", stacklevel=2)
    closed = imported.closures is not None

    def build(v, stabilization):
        system = imported.system(stabilization=stabilization, baumgarte=(v["a"], v["b"]))
        return system, system.default_params()

    stem = os.path.splitext(os.path.basename(path))[0] or "mjcf"
    return Scenario(
        name=stem, description=f"MJCF model {path}" + (f", key {key}" if key is not None else ""),
        paper="MJCF file", build=build, defaults={"a": 0.0, "b": 0.0}, t1=5.0, dt=1e-3, solver="rk4",
        stabilizations=STABS if closed else ("none",), stabilization="projection" if closed else "none",
    )
