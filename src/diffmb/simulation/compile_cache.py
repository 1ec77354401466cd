"""The command line's persistent compilation cache: XLA programs kept on disk between runs.

JAX can write every program it compiles to a folder and read it back when a later
process traces the same program (its key is the lowered program, the JAX/XLA versions,
the backend and the compiler flags, so a program is never reused across any of those).
The command line turns this on (:func:`diffmb_env.cli_environment`): a second ``diffmb run``
of a structure, whatever its ``--set`` numbers or horizon, traces and lowers its programs
but does not compile them (fold-4panel's default run: compile 3.5 s the first time,
1.6 s after). This module counts the programs read back, so the command line can say
where its compile time went, and keeps the folder to a size.

In Python, the same cache is JAX's own (``jax.config.update("jax_compilation_cache_dir",
...)``); ``EQX_ON_ERROR=nan`` set before importing diffmb lets the simulation programs
be cached too (see :func:`diffmb_env.cli_environment`).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
from jax import monitoring

import diffmb_env

#: The command line's folder is trimmed to this size (oldest programs first) as it starts.
MAX_BYTES = 1 << 30

_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_hits = [0]


def _on_event(event: str, **kwargs) -> None:
    if event == _HIT_EVENT:
        _hits[0] += 1


monitoring.register_event_listener(_on_event)


def hits() -> int:
    """Programs this process has read back from the cache so far."""
    return _hits[0]


def folder() -> str | None:
    """The cache folder JAX writes to in this process, or None when it keeps none."""
    return jax.config.jax_compilation_cache_dir or None


def prune(path, max_bytes: int = MAX_BYTES) -> int:
    """Remove the oldest files of the cache folder ``path`` (by modification time) until
    it holds at most ``max_bytes``; returns the bytes removed. A program removed is
    compiled again when next needed and written back."""
    files = []
    for f in Path(path).glob("*"):
        try:
            st = f.stat()
        except OSError:
            continue
        if f.is_file():
            files.append((st.st_mtime, st.st_size, f))
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, f in sorted(files, key=lambda e: e[0]):
        if total - removed <= max_bytes:
            break
        try:
            f.unlink()
            removed += size
        except OSError:
            pass
    return removed


def prune_own(environ=os.environ) -> int:
    """Trim the command line's own folder (not a ``JAX_COMPILATION_CACHE_DIR`` the user
    chose elsewhere); returns the bytes removed."""
    own = environ.get("DIFFMB_COMPILE_CACHE", "").strip() or diffmb_env.default_cache_dir(environ)
    here = folder()
    if here is None or os.path.abspath(here) != os.path.abspath(own) or not os.path.isdir(here):
        return 0
    return prune(here)
