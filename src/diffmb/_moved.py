"""Modules that moved, still importable under their old names for one release.

``import diffmb.integrate``, ``from diffmb.kinematics import kinematics`` and
``diffmb.fit`` keep working: the old name is served the new module (the same module
object, so ``diffmb.integrate is diffmb.simulation.integrate``), with one
``DeprecationWarning`` per old name naming the new path. ``CHANGELOG.md`` lists the moves;
the old names go in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: Old module (under ``diffmb.``) -> its new home, since 0.2.0 (the core as layer
#: folders) or earlier (the design tools, file formats and the reconfiguration explorer).
MOVED = {
    **{m: f"math.{m}" for m in ("spatial", "small_cholesky", "block_tridiagonal", "vectorize")},
    **{m: f"tree.{m}" for m in ("model", "joints", "layout", "kinematics", "crba", "rnea", "aba",
                                 "body_frames", "regularity", "fluid", "tendons")},
    "tree_checks": "tree.checks",
    "treescan": "tree.scan",
    "couplings": "closures.couplings",
    "constraint_solve": "closures.constraint_solve",
    "constraints": "closures.dynamics",
    "closed_chain": "closures.assembly",
    **{m: f"simulation.{m}" for m in ("integrate", "trajectory", "health", "resumable", "compile_cache")},
    "coordinate_params": "scenarios.coordinate_params",
    "plot": "viewer.plots",
    "origami.patterns": "origami.generators",
    "origami.fold": "formats.fold",
    **{m: f"design.{m}" for m in (
        "batch", "binding", "data", "distributed", "fit", "fit_residual", "goodness", "least_squares",
        "mujoco_record", "records", "sensors", "sweep_report", "sweep_store", "tune")},
    **{m: f"formats.{m}" for m in ("mjcf", "mjcf_import", "urdf")},
    "reconfig": "formulations.udwadia_kalaba.reconfig",
    "topology": "origami.topology",
}
MOVED = {f"diffmb.{old}": f"diffmb.{new}" for old, new in MOVED.items()}

_warned: set = set()


def warn_moved(old: str, stacklevel: int = 3) -> None:
    """One ``DeprecationWarning`` per old name, naming the new path."""
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"{old} moved to {MOVED[old]}; import it from there ({old} goes in diffmb 0.3)",
                      DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str):
        self.old = old

    def create_module(self, spec):
        return importlib.import_module(MOVED[self.old])

    def exec_module(self, module):
        warn_moved(self.old, stacklevel=_importer_level())


def _importer_level() -> int:
    """The ``stacklevel`` of the frame whose ``import`` statement asked for the old name,
    so the warning names it: this module's frames counted, the import machinery's not
    (:func:`warnings.warn` skips those itself)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen importlib", __file__)):
        if frame.f_code.co_filename == __file__:
            level += 1
        frame = frame.f_back
    return level


class MovedFinder(importlib.abc.MetaPathFinder):
    """Serves an old module name its new module (see the module docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
