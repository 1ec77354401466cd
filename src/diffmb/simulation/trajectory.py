"""Results of a run: :class:`Trajectory`, its summary, npz/CSV files.

A Trajectory is an equinox Module of arrays, so ``simulate`` can be jitted, vmapped and
differentiated; everything that needs concrete values (status strings, trimming, files)
is a plain-Python method used after the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._config import __version__

STATUS_CODES = {"success": 0, "event": 1, "diverged": 2, "max_steps": 3}
STATUS_NAMES = {v: k for k, v in STATUS_CODES.items()}
FORMAT_VERSION = 1


ENERGY = "total energy (kinetic + potential)"
ENERGY_WITH_WORK = "energy minus the work of external forces (E - W)"


class Trajectory(eqx.Module):
    """Saved states and diagnostics of one run.

    ``ts (n,)`` save times (NaN for save points the run did not reach), ``xs (n, nx)``,
    ``diagnostics`` and ``violation`` (dicts of time series), ``t_final`` / ``x_final``
    (where the run stopped), ``n_steps`` (accepted steps), ``status_code``
    (see :data:`STATUS_CODES`), ``event_mask`` (divergence guard first, then user events).
    """

    ts: jnp.ndarray
    xs: jnp.ndarray
    diagnostics: dict
    violation: dict
    t_final: jnp.ndarray
    x_final: jnp.ndarray
    n_steps: jnp.ndarray
    n_rejected: jnp.ndarray
    status_code: jnp.ndarray
    event_mask: jnp.ndarray
    state_names: tuple = eqx.field(static=True)
    coordinate_names: tuple = eqx.field(static=True)
    solver: str = eqx.field(static=True)
    #: the system's declared coordinate roles, ``((role, names), ...)``
    roles: tuple = eqx.field(static=True, default=())

    # ---------------------------------------------------------------- plain Python
    def role_columns(self, role: str) -> np.ndarray:
        """Columns of ``xs`` holding a declared role (empty when it is not declared)."""
        names = dict(self.roles).get(role, ())
        return np.array([self.state_names.index(n) for n in names], dtype=int)

    @property
    def status(self) -> str:
        """``"success"``, ``"event"``, ``"diverged"`` or ``"max_steps"``."""
        return STATUS_NAMES[int(self.status_code)]

    @property
    def message(self) -> str:
        s = self.status
        if s == "success":
            return "run completed"
        if s == "event":
            return f"stopped by an event at t = {float(self.t_final):.6g} s"
        if s == "max_steps":
            return f"stopped after max_steps at t = {float(self.t_final):.6g} s"
        return (
            f"diverged at t = {float(self.t_final):.6g} s (non-finite state, violation above "
            f"bound, or step size collapse); the trajectory up to then is kept"
        )

    def _valid(self):
        ts = np.asarray(self.ts)
        xs = np.asarray(self.xs)
        return np.isfinite(ts) & np.all(np.isfinite(xs), axis=-1)

    def trimmed(self) -> "Trajectory":
        """The rows the run reached with finite states (host arrays)."""
        m = self._valid()
        cut = lambda a: np.asarray(a)[m]
        return eqx.tree_at(
            lambda t: (t.ts, t.xs, t.diagnostics, t.violation),
            self,
            (cut(self.ts), cut(self.xs), {k: cut(v) for k, v in self.diagnostics.items()},
             {k: cut(v) for k, v in self.violation.items()}),
        )

    def __getitem__(self, name: str):
        """Time series of a named state entry, e.g. ``traj["theta1"]``."""
        if name not in self.state_names:
            raise KeyError(f"unknown coordinate {name!r}; known: {list(self.state_names)}")
        return self.xs[..., self.state_names.index(name)]

    @property
    def final(self) -> dict:
        """``{name: value}`` of the last finite state."""
        x = np.asarray(self.x_final)
        if not np.all(np.isfinite(x)):
            tr = self.trimmed()
            x = np.asarray(tr.xs[-1]) if len(tr.ts) else x
        return {n: float(v) for n, v in zip(self.state_names, x)}

    def summary(self) -> dict:
        """Energy, momentum and violation statistics over the reached rows.

        ``energy.quantity`` says what is tracked: the total energy, or for systems that
        report the work of external forces (tensegrity) the energy minus that work, which
        is what is conserved. ``energy.max_rel_change`` is ``None`` when ``E(0) = 0``.
        """
        tr = self.trimmed()
        out = {}
        if "energy" in tr.diagnostics and len(tr.ts):
            e = np.asarray(tr.diagnostics["energy"], float)
            d = np.abs(e - e[0])
            # relative to the initial energy; undefined (None) for a run that starts at
            # E = 0 (a spacecraft at rest before a slew), where no scale is meaningful
            rel = float(d.max() / abs(e[0])) if abs(e[0]) > 1e-12 * max(np.abs(e).max(), 1e-300) else None
            out["energy"] = {
                "quantity": ENERGY_WITH_WORK if "work" in tr.diagnostics else ENERGY,
                "initial": float(e[0]),
                "final": float(e[-1]),
                "max_abs_change": float(d.max()),
                "max_rel_change": rel,
            }
        if "angular_momentum" in tr.diagnostics and len(tr.ts):
            h = np.asarray(tr.diagnostics["angular_momentum"], float)
            out["angular_momentum"] = {
                "max_abs_change": float(np.linalg.norm(h - h[0], axis=-1).max())
            }
        if tr.violation and len(tr.ts):
            out["violation"] = {
                f"{k}_max": float(np.abs(np.asarray(v)).max()) for k, v in tr.violation.items()
            }
        return out

    # ----------------------------------------------------------------------- files
    def save(self, path, *, meta: dict | None = None) -> Path:
        """Write an npz (arrays + JSON metadata) atomically: a killed writer leaves the old file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        m = {
            "format": FORMAT_VERSION,
            "diffmb_version": __version__,
            "solver": self.solver,
            "status": self.status,
            "state_names": list(self.state_names),
            "coordinate_names": list(self.coordinate_names),
            "roles": {k: list(v) for k, v in self.roles},
            **(meta or {}),
        }
        arrays = {
            "ts": np.asarray(self.ts),
            "xs": np.asarray(self.xs),
            "t_final": np.asarray(self.t_final),
            "x_final": np.asarray(self.x_final),
            "n_steps": np.asarray(self.n_steps),
            "n_rejected": np.asarray(self.n_rejected),
            "status_code": np.asarray(self.status_code),
            "event_mask": np.asarray(self.event_mask),
            "meta": np.asarray(json.dumps(m)),
        }
        arrays.update({f"diag__{k}": np.asarray(v) for k, v in self.diagnostics.items()})
        arrays.update({f"viol__{k}": np.asarray(v) for k, v in self.violation.items()})
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    @staticmethod
    def load(path) -> tuple["Trajectory", dict]:
        """Read a file written by :meth:`save`; returns ``(trajectory, metadata)``."""
        path = Path(path)
        try:
            z = np.load(path, allow_pickle=False)
            meta = json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: not a diffmb trajectory file ({e})") from None
        traj = Trajectory(
            ts=z["ts"],
            xs=z["xs"],
            diagnostics={k[6:]: z[k] for k in z.files if k.startswith("diag__")},
            violation={k[6:]: z[k] for k in z.files if k.startswith("viol__")},
            t_final=z["t_final"],
            x_final=z["x_final"],
            n_steps=z["n_steps"],
            n_rejected=z["n_rejected"],
            status_code=z["status_code"],
            event_mask=z["event_mask"],
            state_names=tuple(meta["state_names"]),
            coordinate_names=tuple(meta["coordinate_names"]),
            solver=meta["solver"],
            roles=tuple((k, tuple(v)) for k, v in meta.get("roles", {}).items()),
        )
        return traj, meta

    def to_csv(self, path) -> Path:
        """CSV of ``t`` and every named state entry (reached rows only)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tr = self.trimmed()
        data = np.column_stack([tr.ts, tr.xs]) if len(tr.ts) else np.zeros((0, 1 + len(self.state_names)))
        np.savetxt(path, data, delimiter=",", header=",".join(("t",) + self.state_names), comments="")
        return path


def concatenate(parts: list["Trajectory"]) -> "Trajectory":
    """Join consecutive chunks (the CLI runs long simulations chunk by chunk).

    The first row of each later chunk repeats the previous chunk's last row and is dropped.
    """
    parts = [p.trimmed() for p in parts]
    first, last = parts[0], parts[-1]
    cat = lambda get: np.concatenate([get(p) if i == 0 else get(p)[1:] for i, p in enumerate(parts)])
    return eqx.tree_at(
        lambda t: (t.ts, t.xs, t.diagnostics, t.violation, t.t_final, t.x_final, t.n_steps,
                   t.n_rejected, t.status_code, t.event_mask),
        first,
        (
            cat(lambda p: p.ts),
            cat(lambda p: p.xs),
            {k: cat(lambda p, k=k: p.diagnostics[k]) for k in first.diagnostics},
            {k: cat(lambda p, k=k: p.violation[k]) for k in first.violation},
            last.t_final,
            last.x_final,
            np.asarray(sum(int(p.n_steps) for p in parts)),
            np.asarray(sum(int(p.n_rejected) for p in parts)),
            last.status_code,
            last.event_mask,
        ),
    )
