"""One member of a sweep, to be run again and shown: a sweep keeps metrics, not
trajectories, so ``diffmb view SWEEP.json --member K`` re-simulates member ``K`` from the
values its row records and the run settings the sweep used (the ``--json`` of
``diffmb sweep`` records its ``solver``, ``dt``, ``rtol``, ``atol`` and
``stabilization``; a file without them is run with the scenario's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import scenarios
from ..scenarios import coordinate_params
from ..simulation.integrate import SOLVERS
from ..system import STABILIZATIONS


def settings(data: dict, path) -> dict:
    """The run settings a sweep's JSON records (``solver``, ``dt``, ``rtol``, ``atol``,
    ``stabilization``), those it has; ValueError naming the field for a bad one."""
    out = {}
    if data.get("solver") is not None:
        if data["solver"] not in SOLVERS:
            raise ValueError(f"{path}: field 'solver': {data['solver']!r} is not one of {', '.join(SOLVERS)}")
        out["solver"] = data["solver"]
    for name in ("dt", "rtol", "atol"):
        v = data.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{path}: field {name!r}: expected a positive number, got {v!r}")
        out[name] = float(v)
    if data.get("stabilization") is not None:
        if data["stabilization"] not in STABILIZATIONS:
            raise ValueError(f"{path}: field 'stabilization': {data['stabilization']!r} is not one of "
                             f"{', '.join(STABILIZATIONS)}")
        out["stabilization"] = data["stabilization"]
    return out


def member(path, k: int) -> tuple[str, dict, float | None, dict]:
    """``(scenario, {parameter: value}, t1, settings)`` of row ``k`` (0-based) of the sweep
    file ``path``, ``settings`` the run settings the sweep recorded (:func:`settings`)
    (ValueError naming the file and the field when it cannot be used)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a sweep's JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("scenario"), str):
        raise ValueError(f"{path}: field 'scenario' missing; is it the --json of diffmb sweep?")
    rows = data.get("members")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: field 'members' holds no members")
    if not 0 <= k < len(rows):
        raise ValueError(f"--member {k}: {path} has members 0 to {len(rows) - 1}")
    try:
        sc = scenarios.get(data["scenario"])
    except ValueError as e:
        raise ValueError(f"{path}: field 'scenario': {e}") from None
    row = rows[k]
    values = {name: float(v) for name, v in row.items()
              if (name in sc.defaults or coordinate_params.is_coordinate_param(name))
              and isinstance(v, int | float) and math.isfinite(v)}
    t1 = data.get("t1")
    return sc.name, values, float(t1) if isinstance(t1, int | float) and t1 > 0 else None, settings(data, path)
