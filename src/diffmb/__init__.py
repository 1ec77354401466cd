"""diffmb — differentiable multibody dynamics in JAX for space structures."""

from . import (
    _config,  # noqa: F401  (float64 default, XLA flags)
    resumable,
    spatial,
)
from ._config import __version__ as __version__
from .closed_chain import assemble, close_loops
from .integrate import SOLVERS, simulate
from .mjcf_import import load_mjcf
from .model import Model, ModelBuilder
from .system import System, TreeSystem
from .trajectory import Trajectory
from .tree import (
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
from .urdf import load_urdf
from .vectorize import vmap_blocks

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
