"""A sweep's chunks on disk, as they finish: the per-member table and the resume store.

A store is a folder::

    DIR/sweep.json               what the sweep is (scenario, members, run settings, chunk)
    DIR/chunks/part-000012.parquet   chunk 12's members, written when it finished
    DIR/members.parquet          every member, one file, written when the sweep completes

Each part is a Parquet table with one row per member: ``member`` (its index in the
sweep), the member's parameter values, ``status`` (its name, as in the CSV), every metric
of :data:`diffmb.design.batch.METRICS` (drifts NaN where the physics does not conserve the
quantity, as in the CSV) and ``status_code``. ``chunks/`` is a Parquet dataset on its own
(``pyarrow.dataset.dataset(DIR / "chunks")``, ``pandas.read_parquet``, polars, DuckDB
read it while the sweep runs); ``members.parquet`` is the same rows in member order.

A part is written to a temporary name and renamed, so a part that exists is whole: a
sweep stopped at any point (Ctrl-C, a crash, a lost node) resumes from the parts there,
and running it again with ``resume`` runs only the chunks without one. ``sweep.json``
holds the settings that decide the members' numbers; a resume with other settings is
refused, naming each difference.

Needs pyarrow (``pip install 'diffmb[cluster]'``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..simulation import resumable
from .batch import METRICS, SweepResult
from .sweep_report import columns

#: the store's own file names
META, PARTS, MEMBERS = "sweep.json", "chunks", "members.parquet"
FORMAT = "diffmb-sweep-store/1"
EXTRA = "cluster"
_PART = re.compile(r"part-(\d{6,})\.parquet$")


def require_pyarrow(flag: str):
    """Import pyarrow, or raise ImportError in one line saying which extra brings it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError(f"{flag} writes Parquet and needs pyarrow: pip install 'diffmb[{EXTRA}]'") from None


class StoreMismatch(ValueError):
    """The store holds another sweep (the message names each difference)."""


def part_path(path, n: int) -> Path:
    return Path(path) / PARTS / f"part-{n:06d}.parquet"


def differences(held: dict, want: dict) -> list[str]:
    """``"NAME X there, Y here"`` for each setting that differs, on either side."""
    return resumable.differences(held, want, held_only=True)


def read_meta(path) -> dict | None:
    """``sweep.json`` of the store at ``path``, None if there is none."""
    f = Path(path) / META
    if not f.exists():
        return None
    try:
        meta = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StoreMismatch(f"{f}: not a readable sweep store ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise StoreMismatch(f"{f}: not a diffmb sweep store")
    return meta


def finished(path) -> list[int]:
    """The chunk indices with a part in the store, in order."""
    d = Path(path) / PARTS
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for f in d.iterdir() if (m := _PART.match(f.name)))


def open_store(path, settings: dict, *, resume: bool) -> dict:
    """Prepare the store at ``path`` for a sweep with ``settings`` (JSON values that decide
    its members' numbers: scenario, members, run settings, chunk) and return the chunks it
    already holds (chunk index -> metrics of its real members, :func:`read_chunk`).

    A folder holding another run's store is refused unless ``resume``; with ``resume``
    its settings must equal ``settings`` (:class:`StoreMismatch` names each difference).
    A folder without a store gets a new one."""
    require_pyarrow("--table")
    path = Path(path)
    meta = read_meta(path)
    if meta is not None:
        done = finished(path)
        held = meta.get("settings", {})
        if not resume:
            raise StoreMismatch(f"{path} holds a sweep ({len(done)} of {meta.get('chunks')} chunks finished); "
                                f"add --resume to continue it, or give another folder")
        diff = differences(held, settings)
        if diff:
            raise StoreMismatch(f"--resume: {path} holds a sweep with other settings ({'; '.join(diff)}); "
                                f"run with the same settings, or give another folder")
        return {n: read_chunk(path, n) for n in done}
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StoreMismatch(f"{path}: exists and is not an empty folder or a sweep store")
    (path / PARTS).mkdir(parents=True, exist_ok=True)
    _atomic(path / META, json.dumps({"format": FORMAT, "settings": settings,
                                     "chunks": settings.get("chunks")}, indent=2) + "\n")
    return {}


def _atomic(path: Path, text: str):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def chunk_columns(index, metrics: dict, members: list, conserved: list) -> dict:
    """The table columns (name -> numpy array) of the members ``index`` with ``metrics``
    (:func:`diffmb.design.batch.sweep`'s, one chunk's real members), their parameter values
    ``members`` and ``conserved`` quantities: :func:`diffmb.design.sweep_report.columns`, and
    ``status_code``."""
    part = SweepResult(table=metrics, batch=len(index), t1=0.0, wall_s=0.0, compile_s=0.0, devices=1,
                       chunks=1, members=members, conserved=conserved, index=[int(i) for i in index])
    return {**columns(part), "status_code": np.asarray(metrics["status"]).astype(np.int8)}


def write_chunk(path, n: int, columns: dict) -> Path:
    """Write chunk ``n``'s columns as its part (whole or not at all)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = part_path(path, n)
    tmp = f.with_name(f.name + ".tmp")
    pq.write_table(pa.table({k: pa.array(v.tolist() if v.dtype == object else v) for k, v in columns.items()}), tmp)
    os.replace(tmp, f)
    return f


def read_chunk(path, n: int) -> dict:
    """Chunk ``n``'s metrics as :func:`diffmb.design.batch.sweep` returns them (``status`` the
    status code; drifts NaN where the member's physics does not conserve the quantity)."""
    import pyarrow.parquet as pq

    t = pq.read_table(part_path(path, n))
    out = {"status": t.column("status_code").to_numpy().astype(np.int32)}
    for k in METRICS:
        if k not in ("status",) and k in t.column_names:
            out[k] = t.column(k).to_numpy().astype(float)
    return out


def consolidate(path, metadata: dict | None = None) -> Path:
    """``DIR/members.parquet``: every part's rows in member order, one file (streamed
    part by part, so a sweep of millions of members needs one part's memory).
    ``metadata`` (JSON values: the run settings the members used) goes into the file's
    schema metadata under ``diffmb``."""
    import pyarrow.parquet as pq

    path = Path(path)
    out = path / MEMBERS
    tmp = out.with_name(out.name + ".tmp")
    writer = None
    try:
        for n in finished(path):
            t = pq.read_table(part_path(path, n))
            if writer is None:
                schema = t.schema if metadata is None else t.schema.with_metadata(
                    {**(t.schema.metadata or {}), b"diffmb": json.dumps(metadata).encode()})
                writer = pq.ParquetWriter(tmp, schema)
            writer.write_table(t)
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        os.replace(tmp, out)
    return out


def read_table(path) -> dict:
    """Every finished member's columns (name -> numpy array), in member order, from
    ``members.parquet`` when the sweep completed, else from its parts."""
    import pyarrow.parquet as pq

    path = Path(path)
    if (path / MEMBERS).exists():
        t = pq.read_table(path / MEMBERS)
    else:
        import pyarrow as pa

        parts = [pq.read_table(part_path(path, n)) for n in finished(path)]
        if not parts:
            return {}
        t = pa.concat_tables(parts)
    return {k: t.column(k).to_numpy(zero_copy_only=False) for k in t.column_names}
