"""One member of a sweep, to be run again and shown: a sweep keeps metrics, not
trajectories, so ``diffmb view SWEEP.json --member K`` re-simulates member ``K`` from the
values its row records (the ``--json`` of ``diffmb sweep``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import coordinate_params, scenarios


def member(path, k: int) -> tuple[str, dict, float | None]:
    """``(scenario, {parameter: value}, t1)`` of row ``k`` (0-based) of the sweep file
    ``path`` (ValueError naming the file and the field when it cannot be used)."""
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
    return sc.name, values, float(t1) if isinstance(t1, int | float) and t1 > 0 else None
