"""Origami-folded deployables (Fulton & Schaub): crease patterns, fold-pattern
generators and hinge models (the paper's cases are in :mod:`diffmb.scenarios.origami`)."""

from .generators import map_fold
from .pattern import Crease, CreasePattern, OrigamiInfo, Panel, build
from .polygon import plate_inertia

__all__ = ["Crease", "CreasePattern", "OrigamiInfo", "Panel", "build", "plate_inertia",
           "map_fold"]
