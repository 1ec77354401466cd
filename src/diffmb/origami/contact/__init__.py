"""Panels that never pass through each other: the detector every origami run carries,
and two-tier barrier contact (:mod:`.element`; ``docs/contact.md``)."""

from .build import (
           CAPACITY,
           ContactOptions,
           check_panels,
           check_start,
           crease_inertias,
           cut_branches,
           free_panels,
           inradius,
           panel_contact,
           start_diagnostics,
)
from .element import ARMING_BITS, DETECT_CAPACITY, DIAGNOSED_PAIRS, PanelContact, pack_flags, unpack_flags
from .report import CREASE_TOLERANCE, OVERLAP_TOLERANCE
from .rule import (
           DHAT_RELATIVE,
           MIN_BUDGET,
           PSI_HAT,
           REST_DAMPING,
           certified_margin,
           certified_margins,
           certified_reach,
           crease_rest_damping,
           crease_rest_stiffness,
           crease_stiffness,
           panel_stiffness,
           rest_depth,
)

__all__ = ["ARMING_BITS", "CAPACITY", "CREASE_TOLERANCE", "DETECT_CAPACITY", "DHAT_RELATIVE", "DIAGNOSED_PAIRS",
           "MIN_BUDGET", "OVERLAP_TOLERANCE", "PSI_HAT", "REST_DAMPING", "ContactOptions", "PanelContact",
           "certified_margin", "certified_margins", "certified_reach", "check_panels", "check_start",
           "crease_inertias", "crease_rest_damping", "crease_rest_stiffness", "crease_stiffness", "cut_branches",
           "free_panels", "inradius", "panel_contact",
           "pack_flags", "panel_stiffness", "rest_depth", "start_diagnostics", "unpack_flags"]
