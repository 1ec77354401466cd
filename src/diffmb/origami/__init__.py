"""Origami-folded deployables (Fulton & Schaub): crease patterns, fold-pattern
generators, hinge models, and the paper's scenarios."""

from .pattern import Crease, CreasePattern, OrigamiInfo, Panel, build, plate_inertia
from .patterns import fold_2x4, fold_3x3, fold_4panel, map_fold

__all__ = ["Crease", "CreasePattern", "OrigamiInfo", "Panel", "build", "plate_inertia",
           "map_fold", "fold_4panel", "fold_2x4", "fold_3x3"]
