"""A saved run back as its System: the npz that ``diffmb run`` writes records the scenario
(or model file, with ``--closures`` / ``--key``), the parameters and the stabilization,
which is all it takes to rebuild the System the states belong to."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from .. import scenarios
from ..simulation.trajectory import Trajectory


@dataclass
class SavedRun:
    """A run file with the case it came from: ``scenario`` (a :class:`Scenario`),
    ``system``, ``params`` and the resolved parameter ``values``."""

    path: Path
    traj: Trajectory
    meta: dict
    scenario: object
    system: object
    params: dict
    values: dict

    @property
    def name(self) -> str:
        """The scenario's name (a model file's stem)."""
        return self.scenario.name


def model_args(model: str) -> tuple[str, str | None, str | None]:
    """``(path, closures, key)`` from the metadata's ``model`` string
    (``<path>[ --closures <path>][ --key K]``, as :func:`diffmb.cli.run.model_source` writes)."""
    closures = key = None
    head, sep, tail = model.partition(" --closures ")
    if sep:
        closures, _, rest = tail.partition(" --key ")
        key = rest or None
    else:
        head, sep, key = head.partition(" --key ")
        key = key if sep else None
    return head, closures, (shlex.split(key)[0] if key else None)


def load(path) -> SavedRun:
    """Read ``path`` (a ``diffmb run`` npz) and rebuild its System (ValueError naming the
    file and the field when the file or its metadata cannot be used)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    traj, meta = Trajectory.load(path)
    model, name = meta.get("model"), meta.get("scenario")
    if not isinstance(name, str) and not isinstance(model, str):
        raise ValueError(f"{path}: the metadata names no scenario (field 'scenario'); "
                         f"was it written by diffmb run?")
    try:
        if isinstance(model, str):
            src, closures, key = model_args(model)
            sc = scenarios.get(src, closures=closures, key=key)
        else:
            sc = scenarios.get(name)
    except ValueError as e:
        field = "model" if isinstance(model, str) else "scenario"
        raise ValueError(f"{path}: field {field!r}: {e}") from None
    values = meta.get("parameters") or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: field 'parameters' is not a table of numbers")
    try:
        system, params, values = sc.make(values, meta.get("stabilization"))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: fields 'parameters'/'stabilization': {e}") from None
    if tuple(system.state_names) != tuple(traj.state_names):
        raise ValueError(f"{path}: its states ({len(traj.state_names)}) are not those of "
                         f"{sc.name!r} rebuilt from its metadata ({len(system.state_names)})")
    return SavedRun(path, traj, meta, sc, system, params, values)
