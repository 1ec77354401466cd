"""Deployment records for a fit: the data, what each column measures, and the record's own
settings.

A test campaign deploys the same article several times, from different stowed states.
Each :class:`Record` holds one run's :class:`~diffmb.design.data.Data`, the scenario values that
differ for that run (``overrides``: an initial fold, a stowage; from ``# set: NAME=VALUE``
lines of a CSV) and a label for reports. Every column is a sensor column
(:mod:`diffmb.design.sensors`) or, as before sensors existed, a coordinate of the System (read as
an ``angle`` sensor of that name).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .data import Data, read_data, read_overrides, state_units
from .sensors import Sensor, column_units, header_sensors, parse_sensors, read_sensors


@dataclass(frozen=True)
class Record:
    """One deployment run: ``data``, the scenario values it differs by, a ``label``."""

    data: Data
    overrides: dict = field(default_factory=dict)
    label: str = ""


def as_records(data) -> list:
    """``data`` (a Data, a Record or a list of them) as a list of labelled Records."""
    items = list(data) if isinstance(data, list | tuple) else [data]
    if not items:
        raise ValueError("no data records given")
    recs = [d if isinstance(d, Record) else Record(d) for d in items]
    labels = [r.label or os.path.splitext(os.path.basename(r.data.path))[0] or f"record{k + 1}"
              for k, r in enumerate(recs)]
    if len(set(labels)) != len(labels):
        labels = [f"{lab}#{k + 1}" for k, lab in enumerate(labels)]
    return [Record(r.data, dict(r.overrides), lab) for r, lab in zip(recs, labels)]


def resolve_sensors(system, records, sensors=None) -> tuple:
    """The sensors the records' columns need: the declared ``sensors`` and an ``angle``
    sensor for every column that names a coordinate. Raises ValueError naming the file
    and column that no sensor produces, or a declared sensor no record measures."""
    declared = tuple(sensors or ())
    produced = {c for s in declared for c in s.columns}
    extra, seen = [], set()
    for rec in records:
        for c in rec.data.names:
            if c in produced or c in seen:
                continue
            if c not in system.state_names:
                have = ", ".join(sorted(produced)) or "none (give --sensors)"
                raise ValueError(f"{rec.data.path}: column {c!r} is neither a sensor column nor a "
                                 f"state of this system; sensor columns: {have}")
            extra.append(Sensor(c, "angle", coordinate=c))
            seen.add(c)
    measured = {c for rec in records for c in rec.data.names}
    unused = [s.name for s in declared if not measured & set(s.columns)]
    if unused:
        files = ", ".join(rec.data.path for rec in records)
        raise ValueError(f"sensor(s) {', '.join(unused)} declared but measured in no record ({files})")
    return declared + tuple(extra)


def load_records(paths, system, sensors_path=None) -> tuple:
    """Read records and their sensors: ``(records, sensors)``. Sensors come from
    ``sensors_path`` (JSON) and from ``# sensor:`` lines of the CSV headers."""
    paths = [os.fspath(p) for p in paths]
    decl = list(read_sensors(sensors_path, system)) if sensors_path else []
    names = {s.name for s in decl}
    for p in paths:
        for item in header_sensors(p):
            if isinstance(item, dict) and item.get("name") in names:
                continue
            s = parse_sensors([item], system, p)[0]
            decl.append(s)
            names.add(s.name)
    units = column_units(decl, state_units(system))
    records = []
    for p in paths:
        data = read_data(p, system, units)
        records.append(Record(data, read_overrides(p)))
    return as_records(records), tuple(decl)


def stack(records, columns):
    """``(t (R, M), y (R, M, C), mask (R, M, C))``: records padded to the longest
    (repeating the last time; masked out) on the union of ``columns``."""
    M = max(r.data.t.size for r in records)
    R, C = len(records), len(columns)
    t = np.zeros((R, M))
    y = np.zeros((R, M, C))
    mask = np.zeros((R, M, C))
    for k, rec in enumerate(records):
        m = rec.data.t.size
        t[k, :m] = rec.data.t
        t[k, m:] = rec.data.t[-1]
        for j, c in enumerate(rec.data.names):
            i = columns.index(c)
            y[k, :m, i] = rec.data.values[:, j]
            mask[k, :m, i] = 1.0
    return t, y, mask

