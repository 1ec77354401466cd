"""Measured time series for fitting: read, validate, write (CSV or npz).

A record is a time column ``t`` [s] and named columns that match a System's
``state_names`` (hinge angles ``theta_j``, hub attitude ``r_free_sigma1``, rates
``theta_j_dot``, ...). A CSV header may carry a unit in brackets, ``theta_j [rad]``; units
must be diffmb's SI units (m, rad, s and their rates; MRPs are dimensionless), and where
the System tells which coordinates are lengths and which angles (tree models) the unit must
match the coordinate. Bad files raise ValueError naming the file, row and column.

An npz record holds arrays ``t`` and named columns, or is a trajectory ``diffmb run``
wrote (``<out>/<scenario>.npz``, :meth:`diffmb.simulation.trajectory.Trajectory.save`): its save
times and position-level coordinates (``coordinate_names``: the hinge angles, the hub's
attitude and position) are the record, the reached rows only. A folder, a missing file or
content that is neither CSV text nor an npz archive is one ValueError naming the path.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import zipfile
from dataclasses import dataclass

import numpy as np

#: Units diffmb accepts, by kind.
SI_UNITS = {"length": {"m"}, "angle": {"rad"}, "none": {"", "1", "-"},
            "speed": {"m/s"}, "rate": {"rad/s"}, "nonerate": {"1/s"}, "accel": {"m/s^2"}}
_UNIT = re.compile(r"^\s*([^\[\]]+?)\s*(?:\[\s*([^\]]*)\s*\])?\s*$")
_ANY_SI = set().union(*SI_UNITS.values())
#: The unit a file header gives each kind of coordinate.
UNIT_OF_KIND = {"length": "m", "angle": "rad", "speed": "m/s", "rate": "rad/s"}
#: What a data file must be, for messages.
EXPECTED = "a CSV or npz record (a 't' column and named columns, or the npz `diffmb run` writes)"
_ZIP = b"PK\x03\x04"  # an npz is a zip archive


@dataclass(frozen=True)
class Data:
    """``t (m,)`` and ``values (m, k)`` for columns ``names``; ``path`` for messages."""

    t: np.ndarray
    names: tuple
    values: np.ndarray
    path: str = "<memory>"

    def select(self, names) -> "Data":
        """This record restricted to the columns ``names`` (in that order)."""
        idx = [self.names.index(n) for n in names]
        return Data(t=self.t, names=tuple(names), values=self.values[:, idx], path=self.path)

    def columns_in(self, state_names) -> np.ndarray:
        """Indices of this record's columns in ``state_names``."""
        return np.array([list(state_names).index(n) for n in self.names], dtype=int)


def state_tree(system):
    """The tree :class:`~diffmb.tree.model.Model` whose ``[q; qd]`` begins ``system``'s
    state (a :class:`~diffmb.system.TreeSystem`; its force elements' own states, a contact
    element's cut-crease angles and budget, may follow), else ``None``."""
    models = system.tree_models
    if len(models) == 1:
        tree = models[0].coordinate_names + models[0].velocity_names
        if tuple(system.state_names[: len(tree)]) == tree:
            return models[0]
    return None


def unit_kinds(system) -> dict:
    """``{state name: kind}`` (length / angle / none and their rates) where known."""
    model = state_tree(system)
    if model is None:
        return {}
    per = {"revolute": ("angle",), "prismatic": ("length",), "universal": ("angle", "angle"),
           "spherical": ("none",) * 3, "free": ("none",) * 3 + ("length",) * 3}
    vel = {"revolute": ("rate",), "prismatic": ("speed",), "universal": ("rate", "rate"),
           "spherical": ("rate",) * 3, "free": ("rate",) * 3 + ("speed",) * 3}
    kq, kv = [], []
    for kind in model.joint_kinds:
        kq += per.get(kind, ())
        kv += vel.get(kind, ())
    names = tuple(system.state_names)
    if len(kq) + len(kv) > len(names):
        return {}
    return dict(zip(names, kq + kv))   # (an element's own states after the tree's: kind unknown)


def _parse_header(path, header, state_names, kinds, sensor_units=None):
    sensor_units = sensor_units or {}
    heads = [(_UNIT.match(h or "") or None) for h in header]
    if not any(m is not None and m.group(1) == "t" for m in heads):
        raise ValueError(f"{path}: missing column 't' (time in s); columns: {', '.join(map(str, header))}")
    cols = []
    for j, raw in enumerate(header):
        m = _UNIT.match(raw or "")
        if not m:
            raise ValueError(f"{path}: column {j + 1}: cannot read header {raw!r}")
        name, unit = m.group(1), (m.group(2) or "").strip()
        if name == "t":
            if unit not in ("", "s"):
                raise ValueError(f"{path}: column 't': time must be in s, not {unit!r}")
        elif name in sensor_units and name not in state_names:
            want = sensor_units[name]
            if unit and want is not None and unit != want:
                raise ValueError(f"{path}: column {name!r}: unit mismatch: {unit!r} given, "
                                 f"the sensor measures in {want}")
        elif name not in state_names:
            extra = f"; sensor columns: {', '.join(sensor_units)}" if sensor_units else ""
            raise ValueError(f"{path}: column {name!r} is not a state of this system"
                             f"{' nor a sensor column' if sensor_units else ''}; "
                             f"states: {', '.join(state_names)}{extra}")
        elif unit:
            kind = kinds.get(name)
            if kind is not None and unit not in SI_UNITS[kind]:
                want = "/".join(sorted(u for u in SI_UNITS[kind] if u)) or "dimensionless"
                raise ValueError(f"{path}: column {name!r}: unit mismatch: {unit!r} given, "
                                 f"the model's {kind} coordinate is in {want}")
            if kind is None and unit not in _ANY_SI:
                raise ValueError(f"{path}: column {name!r}: unit {unit!r} is not an SI unit "
                                 f"diffmb uses (m, rad, s and rates)")
        cols.append(name)
    if len(set(cols)) != len(cols):
        dup = sorted({c for c in cols if cols.count(c) > 1})
        raise ValueError(f"{path}: column(s) {', '.join(dup)} appear more than once")
    if len(cols) < 2:
        raise ValueError(f"{path}: no data columns besides 't'; give columns named like {state_names[0]!r}")
    return cols


def file_kind(path) -> str:
    """``"npz"`` (a zip archive) or ``"csv"`` (anything else, read as text) for an existing
    data file; ValueError naming ``path`` for a folder, a missing file, or an ``.npz`` name
    on something that is no archive."""
    path = os.fspath(path)
    if os.path.isdir(path):
        inside = sorted(f for f in os.listdir(path) if f.endswith((".csv", ".npz")))
        if inside:
            shown = ", ".join(os.path.join(path, f) for f in inside[:3]) + (", ..." if len(inside) > 3 else "")
            raise ValueError(f"{path}: is a folder, not a data file; give a CSV or npz record in it: {shown}")
        raise ValueError(f"{path}: is a folder, not a data file; give {EXPECTED}")
    if not os.path.isfile(path):
        raise ValueError(f"data file not found: {path}")
    with open(path, "rb") as f:
        head = f.read(len(_ZIP))
    if head == _ZIP:
        return "npz"
    if path.endswith(".npz"):
        raise ValueError(f"{path}: not an npz archive; expected {EXPECTED}")
    return "csv"


def _text(path) -> str:
    """The file as text, or one ValueError naming it when it is binary."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: binary content (byte {e.start} is not UTF-8 text); "
                         f"expected {EXPECTED}") from None
    if "\x00" in text:
        raise ValueError(f"{path}: binary content (NUL byte at {text.index(chr(0))}); expected {EXPECTED}")
    return text


def _npz_arrays(path) -> dict:
    """``{name: float array}`` of an npz record; a trajectory file (``ts``, ``xs`` and JSON
    ``meta``) becomes ``t`` and its position-level coordinates over the reached rows."""
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = list(z.keys())
            trajectory = {"ts", "xs", "meta"} <= set(keys) and "t" not in keys
            if trajectory:
                meta = json.loads(str(z["meta"]))
                ts, xs = np.asarray(z["ts"], float), np.asarray(z["xs"], float)
            else:
                arrays = {k: np.asarray(z[k], float) for k in keys}
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: cannot read the npz ({e}); expected {EXPECTED}") from None
    return _trajectory_columns(path, meta, ts, xs) if trajectory else arrays


def _trajectory_columns(path, meta, ts, xs) -> dict:
    states, coords = meta.get("state_names"), meta.get("coordinate_names")
    if not isinstance(states, list) or not isinstance(coords, list) or xs.ndim != 2 \
            or xs.shape != (ts.size, len(states)) or not set(coords) <= set(states):
        raise ValueError(f"{path}: a trajectory file whose 'xs' {xs.shape} does not match its "
                         f"state_names; expected {EXPECTED}")
    reached = np.isfinite(ts) & np.all(np.isfinite(xs), axis=1)  # rows a stopped run left NaN
    out = {"t": ts[reached]}
    out.update({n: xs[reached, states.index(n)] for n in coords})
    return out


def read_data(path, system, sensor_units=None) -> Data:
    """Read a CSV (header row with ``t`` and state names) or an npz (arrays ``t`` and state
    names, or a trajectory file) measured against ``system``; see module docstring for the
    checks.
    ``sensor_units``: ``{column: unit}`` of sensor columns the record may also hold
    (:func:`diffmb.design.sensors.column_units`)."""
    path = os.fspath(path)
    names = tuple(system.state_names)
    kinds = unit_kinds(system)
    if file_kind(path) == "npz":
        arrays = _npz_arrays(path)
        keys = list(arrays)
        cols = _parse_header(path, keys, names, kinds, sensor_units)
        m = arrays["t"].shape
        for k, a in arrays.items():
            if a.shape != m or a.ndim != 1:
                raise ValueError(f"{path}: array {k!r} has shape {a.shape}, expected {m} like 't'")
        table = np.stack([arrays[c] for c in cols], 1)
        first_row = 0
    else:
        rows = [r for r in csv.reader(_text(path).splitlines())
                if r and not r[0].lstrip().startswith("#")]
        if not rows:
            raise ValueError(f"{path}: empty file")
        cols = _parse_header(path, rows[0], names, kinds, sensor_units)
        table = np.empty((len(rows) - 1, len(cols)))
        for i, r in enumerate(rows[1:]):
            if len(r) != len(cols):
                raise ValueError(f"{path}: row {i + 2}: {len(r)} fields, the header has {len(cols)}")
            for j, v in enumerate(r):
                try:
                    table[i, j] = float(v)
                except ValueError:
                    raise ValueError(f"{path}: row {i + 2}, column {cols[j]!r}: {v!r} is not a number") from None
        first_row = 2
    if table.shape[0] < 2:
        raise ValueError(f"{path}: need at least 2 data rows, got {table.shape[0]}")
    bad = ~np.isfinite(table)
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        where = f"row {i + first_row}" if first_row else f"index {i}"
        raise ValueError(f"{path}: {where}, column {cols[j]!r}: {table[i, j]} (NaN or infinite)")
    it = cols.index("t")
    t = table[:, it]
    back = np.nonzero(np.diff(t) <= 0)[0]
    if back.size:
        i = int(back[0]) + 1
        where = f"row {i + first_row}" if first_row else f"index {i}"
        raise ValueError(f"{path}: {where}, column 't': time {t[i]:g} does not increase "
                         f"(previous {t[i - 1]:g}); times must be strictly increasing")
    if t[0] < 0:
        raise ValueError(f"{path}: column 't' starts at {t[0]:g} < 0; the simulation starts at 0")
    keep = [j for j in range(len(cols)) if j != it]
    return Data(t=t, names=tuple(cols[j] for j in keep), values=table[:, keep], path=path)


def write_data(path, data: Data, system=None, *, units=None, comments=()):
    """Write ``data`` as CSV (units in the header where known) or npz (by extension).
    ``units``: ``{column: unit}`` besides the system's coordinates; ``comments``: lines
    written first as ``# <line>`` (CSV only: sensor declarations, per-record settings)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".npz"):
        np.savez(path, t=data.t, **{n: data.values[:, j] for j, n in enumerate(data.names)})
        return path
    kinds = unit_kinds(system) if system is not None else {}
    extra = units or {}
    head = ["t [s]"] + [f"{n} [{UNIT_OF_KIND[kinds[n]]}]" if kinds.get(n) in UNIT_OF_KIND else
                        (f"{n} [{extra[n]}]" if extra.get(n) else n) for n in data.names]
    with open(path, "w", newline="") as f:
        for line in comments:
            f.write(f"# {line}\n")
        w = csv.writer(f)
        w.writerow(head)
        for i in range(data.t.shape[0]):
            w.writerow([repr(float(data.t[i]))] + [repr(float(v)) for v in data.values[i]])
    return path


def state_units(system) -> dict:
    """``{state name: unit}`` where the System tells (tree coordinates)."""
    return {k: UNIT_OF_KIND.get(v) for k, v in unit_kinds(system).items()}


def header_lines(path, key: str) -> list:
    """``(row, text)`` of the CSV's ``# <key>: <text>`` comment lines (none for npz)."""
    path = os.fspath(path)
    if file_kind(path) == "npz":
        return []
    out = []
    for i, line in enumerate(_text(path).splitlines(), start=1):
        s = line.strip()
        if s.startswith("#") and s[1:].strip().startswith(key + ":"):
            out.append((i, s[1:].strip()[len(key) + 1:]))
    return out


def read_overrides(path) -> dict:
    """Per-record scenario values on ``# set: NAME=VALUE ...`` comment lines of a CSV
    (the record's own initial fold, stowage, ...; shared parameters stay on the command)."""
    out = {}
    for i, text in header_lines(path, "set"):
        for tok in text.split():
            k, eq, v = tok.partition("=")
            try:
                out[k] = float(v)
            except ValueError:
                eq = ""
            if not eq or not k:
                raise ValueError(f"{path}: row {i}: '# set:' expects NAME=NUMBER pairs, got {tok!r}")
    return out


def default_columns(system) -> tuple:
    """Columns a synthetic record holds by default: the hinge angles the system declares
    (its ``coordinate_roles``) when there are any, else every coordinate."""
    return system.coordinate_roles.get("hinge") or tuple(system.coordinate_names)


def sample_times(t1: float, samples: int) -> np.ndarray:
    if samples < 2 or not math.isfinite(t1) or t1 <= 0:
        raise ValueError(f"need t1 > 0 and at least 2 samples (got t1={t1}, samples={samples})")
    return np.linspace(0.0, t1, samples)
