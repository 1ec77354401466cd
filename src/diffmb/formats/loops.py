"""The JSON loop file: a model's loop closures and its initial state, by name.

``{"closures": [...], "initial": {"q": {joint: value}, "fixed": [joint, ...], "rates":
{joint: value}}}``; the closures' keys are :func:`diffmb.closures.assembly.close_loops`'s,
the initial block is what :func:`~diffmb.closures.assembly.assemble` takes
(``diffmb run model.urdf --closures loops.json``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax.numpy as jnp

from ..closures.assembly import assemble, close_loops, coordinates
from ..system import TreeSystem
from ..tree.model import Model


def read_loops(path) -> dict:
    """A loop file (JSON, see the module docstring) as a dict with ``closures`` and ``initial``; errors
    name the file and the key."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"loop file not found: {path} (looked for {path.resolve()})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict) or "closures" not in data:
        raise ValueError(f"{path}: expected an object with a 'closures' list (and optional 'initial')")
    unknown = sorted(set(data) - {"closures", "initial"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; valid: closures, initial")
    initial = data.get("initial", {}) or {}
    bad = sorted(set(initial) - {"q", "fixed", "rates"})
    if bad:
        raise ValueError(f"{path}: 'initial' has unknown key(s) {', '.join(map(repr, bad))}; valid: q, fixed, rates")
    return {"closures": data["closures"], "initial": initial, "path": str(path)}


def closed_system(model: Model, loops_file, *, stabilization="projection", baumgarte=(0.0, 0.0)):
    """A :class:`~diffmb.system.TreeSystem` of ``model`` closed by a loop file, assembled."""
    spec = read_loops(loops_file)
    init = spec["initial"]
    guess = coordinates(model, init.get("q"), f"{spec['path']}: initial.q")
    try:
        loops = close_loops(model, spec["closures"], q=guess)
        q0, qd0 = assemble(model, loops, guess, fixed=init.get("fixed", ()), rates=init.get("rates"))
    except ValueError as e:
        raise ValueError(f"{spec['path']}: {e}") from None
    if not math.isfinite(float(jnp.abs(q0).max())):
        raise ValueError(f"{spec['path']}: assembly failed")
    return TreeSystem(model, q0, qd0, closures=loops, stabilization=stabilization, baumgarte=baumgarte)
