"""diffmb — differentiable multibody dynamics in JAX for space structures."""

import importlib

from . import (
    _config,  # noqa: F401  (float64 default, XLA flags)
    resumable,
    spatial,
)
from ._config import __version__ as __version__
from .closed_chain import assemble, close_loops
from .formats.mjcf_import import load_mjcf
from .formats.urdf import load_urdf
from .integrate import SOLVERS, simulate
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

#: Modules that moved into the ``design``, ``formats``, ``origami`` and Udwadia–Kalaba
#: packages, still reachable as ``diffmb.<name>`` (``from diffmb import fit``).
_MOVED = {
    **{m: f"diffmb.design.{m}" for m in (
        "batch", "binding", "data", "distributed", "fit", "fit_residual", "goodness", "least_squares",
        "mujoco_record", "records", "sensors", "sweep_report", "sweep_store", "tune")},
    **{m: f"diffmb.formats.{m}" for m in ("mjcf", "mjcf_import", "urdf")},
    "reconfig": "diffmb.formulations.udwadia_kalaba.reconfig",
    "topology": "diffmb.origami.topology",
}


def __getattr__(name):
    if name in _MOVED:
        return importlib.import_module(_MOVED[name])
    raise AttributeError(f"module 'diffmb' has no attribute {name!r}")
