"""diffmb — differentiable multibody dynamics in JAX for space structures.

The package reads bottom-up, one layer per folder, each importing only those below it
(``docs/architecture.md``): ``math`` (spatial algebra, small dense solves), ``tree``
(the model and its recursive algorithms), ``closures`` (loop closures and their exact
solve), ``system`` (the System contract), ``simulation`` (``simulate`` and its results),
``origami``, ``formats``, ``formulations``, ``scenarios``, ``design``, ``viewer``, ``cli``.
"""

import importlib

from . import _config, _moved  # noqa: F401  (_config first: float64 and XLA flags before JAX starts)
from ._config import __version__ as __version__
from .closures.assembly import assemble, close_loops
from .formats.mjcf_import import load_mjcf
from .formats.urdf import load_urdf
from .math import spatial
from .math.vectorize import vmap_blocks
from .simulation import resumable
from .simulation.integrate import SOLVERS, simulate
from .simulation.trajectory import Trajectory
from .system import System, TreeSystem
from .tree.api import (
    bias_forces,
    center_of_mass,
    coordinate_rates,
    energy,
    forward_dynamics,
    forward_kinematics,
    frame_pose,
    inverse_dynamics,
    joint_forces,
    kinetic_energy,
    mass_matrix,
    momentum,
    potential_energy,
)
from .tree.model import Model, ModelBuilder

__all__ = [
    "assemble",
    "close_loops",
    "load_mjcf",
    "System",
    "TreeSystem",
    "simulate",
    "resumable",
    "SOLVERS",
    "Trajectory",
    "Model",
    "ModelBuilder",
    "load_urdf",
    "spatial",
    "forward_dynamics",
    "inverse_dynamics",
    "mass_matrix",
    "bias_forces",
    "forward_kinematics",
    "frame_pose",
    "coordinate_rates",
    "joint_forces",
    "kinetic_energy",
    "potential_energy",
    "energy",
    "momentum",
    "center_of_mass",
    "vmap_blocks",
]

_moved.install()


def __getattr__(name):
    """``diffmb.fit`` and the other moved modules, for one release (:mod:`diffmb._moved`)."""
    old = f"diffmb.{name}"
    if old in _moved.MOVED:
        _moved.warn_moved(old)
        return importlib.import_module(_moved.MOVED[old])
    raise AttributeError(f"module 'diffmb' has no attribute {name!r}")
