"""The start state of a crease pattern: closed, on its branch, and its mobility said.

A pattern's fold angles must close every loop (Fulton & Schaub's closure constraints,
eq. 19). Files from other tools close them only to their own rounding, and a user who
asks for "30 % folded" names a few driving creases, not every angle. :func:`close` makes
the start state exact:

* no drivers: a state that misses closing by at most ``closure_tol`` times the pattern's
  size is moved onto the closure manifold by minimum-norm Gauss-Newton (a note says by
  how much); one that misses by more is refused, with the nearest rigid state (the same
  solve from the given angles) named crease by crease;
* drivers: the driving creases keep their angles and the others are solved for, from
  their given angles as the guess (so the solve stays on the branch the mountain/valley
  assignment points to). With no driver named, one per degree of freedom is chosen: the
  creases that move most along the folding motion from flat.

Every solve keeps each angle within half a turn of its guess (never a 2 pi jump:
:func:`~diffmb.closures.assembly.assemble`), and :func:`branch_warnings` says when the
result folds a crease against its assignment or puts panels through each other.
Notes are :class:`PatternNote` warnings; a locked pattern is a :class:`LockedPattern`.
"""

from __future__ import annotations

import math

import numpy as np

from ..closures import mobility as mob
from ..closures.assembly import assemble
from ..closures.nodes import _jacobian_at, _rates_at, _residual_at, row_index, row_labels

#: Default closure tolerance, relative to the pattern's size (its bounding-box
#: diagonal): other tools write vertices to 6-7 significant digits.
CLOSURE_TOL = 1e-5
#: A driven state that does not close from its guess is continued to it in steps of at
#: most ``1 / CONTINUATION_STEPS`` of the way, each multiplying the drivers by at most
#: ``GROWTH`` (:func:`_continued`).
CONTINUATION_STEPS = 8
GROWTH = 1.5


class PatternNote(UserWarning):
    """Something the loader or the build did on its own, or found: a plane fitted, a
    folded form developed, a start state closed, a crease on the wrong branch."""


class CannotFold(ValueError):
    """Asked to fold a pattern by driving creases, and no folding motion from flat was
    found (mobility 0)."""


class LockedPattern(PatternNote):
    """The pattern cannot fold rigidly from its start state (mobility 0)."""


def residual_max(model, closures, q) -> tuple:
    """``(largest closure residual, the closure it is in)`` at ``q``."""
    rows = row_index(closures.closures)
    r = np.abs(np.asarray(_residual_at(model, closures, q)).reshape(-1)[rows])
    if not len(r):
        return 0.0, None
    k = int(np.argmax(r))
    return float(r[k]), row_labels(closures.closures)[k].split(":")[0]


def _changes(q0, q, names) -> str:
    d = np.degrees(np.asarray(q, float) - np.asarray(q0, float))
    order = np.argsort(-np.abs(d))[:6]
    return ", ".join(f"{names[i]} {math.degrees(float(q0[i])):.4g} -> {math.degrees(float(q[i])):.4g} deg"
                     for i in order if abs(d[i]) > 1e-9)


def close(model, closures, q0, *, size: float, tol: float | None, hold: list, joints, hinge_cols, labels,
          drive=None, direction=None, seeds=()) -> tuple:
    """``(q, notes)``: the start state closed (module docstring). ``hold``: joints never
    moved (the free root); ``joints``/``hinge_cols``/``labels``: each tree crease's joint
    name, coordinate and label; ``drive``: None, or the driving creases' joint names
    (``()``: chosen here, probing ``direction`` (rates) first: :func:`auto_drivers`);
    ``seeds``: closed states on the pattern's branch (full configurations) that a driven
    state which does not close from its guess is continued from, before the probe's."""
    tol = CLOSURE_TOL if tol is None else float(tol)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"closure_tol must be a non-negative number, got {tol!r}")
    q0 = np.asarray(q0, float)
    r0, where = residual_max(model, closures, q0)
    exact = max(1e-12 * size, 100 * np.finfo(float).eps * size)
    hinge_cols = list(hinge_cols)
    joints, labels = list(joints), list(labels)
    if drive is None:
        if r0 <= exact:
            return q0, []
        try:
            q = np.asarray(assemble(model, closures, q0, fixed=hold)[0])
        except ValueError:
            q = None
        if q is not None and r0 <= tol * size:
            return q, [f"the start state missed closing by {r0:.3g} m (closure {where!r}); moved onto the "
                       f"closure manifold: {_changes(q0[hinge_cols], q[hinge_cols], labels) or 'no angle changed'}"]
        if r0 <= tol * size:
            return q0, [f"the start state misses closing by {r0:.3g} m (closure {where!r}), within the closure "
                        f"tolerance {tol * size:.3g} m, and the closure solve finds no exact state near it (a "
                        "singular or isolated state); the run starts from it as given"]
        nearest = ("no rigid state was found near it" if q is None else
                   "the nearest rigid state: " + (_changes(q0[hinge_cols], q[hinge_cols], labels) or "the same angles"))
        raise ValueError(f"these fold angles are not a rigid folded state: closure {where!r} is open by {r0:.3g} m, "
                         f"more than the closure tolerance {tol:g} x size {size:.4g} m = {tol * size:.3g} m; "
                         f"{nearest}. Start from it with a larger closure_tol, or fold by driving creases "
                         f"(--fold-fraction FRACTION --drive e<i>,...)")
    start = None
    if drive:
        drivers = list(drive)
    else:
        chosen, start = auto_drivers(model, closures, q0, hinge_cols, direction)
        drivers = [joints[k] for k in chosen]
    try:
        q = np.asarray(assemble(model, closures, q0, fixed=[*hold, *drivers])[0])
    except ValueError as e:
        driver_cols = [hinge_cols[joints.index(d)] for d in drivers]
        q = None
        target = np.asarray(q0, float)[driver_cols]
        if not target @ target > 0:       # the drivers at flat: nothing to continue towards
            seeds, start = (), None
        nearest = sorted(seeds, key=lambda x: abs(np.asarray(x)[driver_cols] @ target / (target @ target) - 1.0))
        for seed in [*nearest, *([] if start is None else [start])]:
            q = _continued(model, closures, q0, [*hold, *drivers], hinge_cols, driver_cols, seed)
            if q is not None:
                break
        if q is None:
            raise ValueError(f"no rigid folded state holds the driving creases at these angles "
                             f"({', '.join(drivers)}): {str(e).removeprefix('assemble: ')}") from None
    shown = [labels[joints.index(d)] for d in drivers]
    return q, [f"folded by the driving creases {', '.join(shown)}; the others closed by the loop-closure solve: "
               + (_changes(q0[hinge_cols], q[hinge_cols], labels) or "no angle changed")]


def _continued(model, closures, q0, fixed, hinge_cols, driver_cols, start, steps: int = CONTINUATION_STEPS):
    """The driven state of ``q0``'s driver angles reached from ``start`` (a closed state
    near flat on the folding motion, as the mobility probe lands) in steps of the
    drivers that grow by at most ``GROWTH`` at a time (the motion near flat is curved:
    a Miura-ori's zig-zag creases turn as the square of its straight ones) and are at
    most ``1 / steps`` of the way; each solve starting from the last two states extrapolated (a
    secant predictor) with the drivers set: for a guess too far from the folded state
    for one solve (a Miura-ori's straight and zig-zag creases fold at very different
    rates, and "every crease at 30 %" is far from either). None if a step fails or the
    start lies on the other side of flat. A start beyond the drivers' angles is continued
    back to them in the same way."""
    q0 = np.asarray(q0, float)
    cols, drivers = np.asarray(hinge_cols, int), np.asarray(driver_cols, int)
    target = q0[drivers]
    prev = q0.copy()
    prev[cols] = 0.0
    q = np.asarray(start, float)
    s_prev, s = 0.0, float(q[drivers] @ target / (target @ target))
    if not s > 0.0:
        return None
    while s != 1.0:
        s_next = min(1.0, GROWTH * s, s + 1.0 / steps) if s < 1.0 else max(1.0, s - 1.0 / steps)
        guess = q + (q - prev) * (s_next - s) / (s - s_prev)
        guess[drivers] = s_next * target
        try:
            prev, q = q, np.asarray(assemble(model, closures, guess, fixed=fixed)[0])
        except ValueError:
            return None
        s_prev, s = s, s_next
    return q


def auto_drivers(model, closures, q0, hinge_cols, direction=None) -> tuple:
    """One driving crease per degree of freedom of the folding motion from flat: the
    indices (into ``hinge_cols``) of the tree creases that move most along its tangent
    (greedy pivoting), and the closed state near flat the probe found on that motion.
    ``direction`` (rates): the pattern's folding motion (its assignments). Where a probe
    along it lands, that branch is the one driven; random probes only where it does not.
    Flat is where many branches meet (a Miura-ori's straight crease lines fold alone, one
    or two at a time), and a random probe may land on one of higher dimension than the
    pattern's motion: driving its extra crease then over-constrains the motion the
    assignments mean (a 12 x 13 Miura-ori driven by two creases to 30 % had no closed
    state; which branch a random probe reaches turned on the CPU's round-off)."""
    flat = np.asarray(q0, float).copy()
    flat[hinge_cols] = 0.0
    rows = row_index(closures.closures)
    key = tuple(int(r) for r in rows)
    cols = np.asarray(hinge_cols, int)
    res = lambda q: np.asarray(_residual_at(model, closures, q)).reshape(-1)[rows]
    jac = lambda q: np.asarray(_jacobian_at(model, closures, key, q))
    step = lambda q, dv: np.asarray(q) + np.asarray(_rates_at(model, q, dv))
    best = None
    landed = []
    if direction is not None:
        landed = mob.landings(res, jac, step, flat, cols, cols, probes=0,
                              directions=(np.asarray(direction, float)[cols],))
    for q in landed or mob.landings(res, jac, step, flat, cols, cols):
        G = jac(q)[:, cols]
        dof = len(cols) - mob.rank(G)
        if best is None or dof > best[0]:
            best = (dof, mob.null_space(G, dof), q)
    if best is None or best[0] == 0:
        raise CannotFold("--fold-fraction: the pattern cannot fold rigidly from flat (mobility 0), so no driving "
                         "crease can fold it")
    N = best[1].copy()
    chosen = []
    for _ in range(best[0]):
        k = int(np.argmax(np.linalg.norm(N, axis=1)))
        chosen.append(k)
        v = N[k] / np.linalg.norm(N[k])
        N = N - np.outer(N @ v, v)
    return chosen, best[2]


def branch_warnings(creases: list, angles: np.ndarray, overlap: tuple | None = None) -> list:
    """Sentences for every crease whose start angle runs against its assignment
    (``creases``: ``(label, assignment)``), and for panels that start through each other
    (``overlap``: ``(depth, pair)``)."""
    out = []
    for (label, a), ang in zip(creases, angles):
        folded_flat = abs(abs(ang) - math.pi) < 1e-6   # +-180 deg: the same pose either way
        if not folded_flat and ((a == "V" and ang < -1e-6) or (a == "M" and ang > 1e-6)):
            out.append(f"crease {label} ({'valley' if a == 'V' else 'mountain'}) starts at "
                       f"{math.degrees(float(ang)):.4g} deg, folded against its assignment: the state is on "
                       "another branch than the pattern's")
        if abs(ang) > math.pi + 1e-6:
            out.append(f"crease {label} starts at {math.degrees(float(ang)):.4g} deg, past flat: its panels "
                       "start through each other")
    if overlap is not None and overlap[0] > 0:
        out.append(f"panels {overlap[1]} start through each other ({overlap[0]:.3g} m deep): the start state is "
                   "on a self-penetrating branch")
    return out
