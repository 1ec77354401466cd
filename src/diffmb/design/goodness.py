"""Goodness of fit: does the residual of a fit look like the declared sensor noise?

For a model that explains the data, the noise-weighted residuals ``e_i = r_i / sigma_i``
of a least-squares fit are Gaussian with ``E[sum e_i^2] = n - p`` (``p`` fitted unknowns);
the sum over the rows of one sensor has the expectation ``n_s - sum_{i in s} h_ii``, with
``h_ii`` the leverages, the diagonal of the hat matrix ``H = J (J^T J)^-1 J^T`` (whose
trace is ``p``): for the model linearised at the optimum the weighted residual is
``(I - H) e_noise``, so ``E[e e^T] = I - H``. So the sensor's ``chi^2_s = sum e_i^2`` is compared with a chi-square
distribution of ``nu_s = n_s - sum h_ii`` degrees of freedom, and so is the fit's total
over every sensor with a declared noise.

The probability of a value at least as large, ``P(X >= chi^2)`` for ``X ~ chi^2(nu)``,
is the regularised upper incomplete gamma function ``Q(nu / 2, chi^2 / 2)``
(Abramowitz & Stegun, section 26.4), exact for non-integer ``nu`` as well, computed by
``jax.scipy.special.gammaincc`` in double precision (no SciPy dependency; one small
compilation per process, about 0.4 s). The Wilson-Hilferty normal approximation would
need no compilation, but it is least accurate where the test decides: few degrees of
freedom (a short record of one sensor) and the far tail.

A sensor fails when ``p < ALPHA``: residual above its noise beyond chance. ``ALPHA`` is
per sensor, so a fit with ``S`` sensors raises a false alarm with probability about
``S * ALPHA`` when the model is right. Sensors whose noise was not declared (estimated
from the residual, which makes ``chi^2 / nu = 1`` by construction) are not tested.
"""

from __future__ import annotations

import math

import numpy as np
from jax.scipy.special import gammaincc

#: Significance level of the per-sensor and whole-fit chi-square tests.
ALPHA = 1e-3


def chi2_sf(chi2: float, dof: float) -> float:
    """``P(X >= chi2)`` for ``X ~ chi^2(dof)`` (module docstring)."""
    if not (dof > 0 and math.isfinite(chi2)):
        return math.nan
    return float(gammaincc(np.float64(0.5 * dof), np.float64(0.5 * max(chi2, 0.0))))


def leverages(J) -> np.ndarray:
    """Diagonal of ``J (J^T J)^-1 J^T`` (rows of zeros, masked samples, get 0)."""
    J = np.asarray(J, float)
    A = J.T @ J
    d = np.sqrt(np.maximum(np.diag(A), 1e-300))
    # pseudo-inverse on the unit-diagonal matrix: an unidentified direction adds no leverage
    Ainv = np.linalg.pinv(A / np.outer(d, d), rcond=1e-12) / np.outer(d, d)
    return np.einsum("ij,jk,ik->i", J, Ainv, J)


def _entry(chi2, n, dof, alpha):
    p = chi2_sf(chi2, dof)
    return {"samples": int(n), "chi2": float(chi2), "dof": float(dof),
            "reduced_chi2": float(chi2 / dof) if dof > 0 else math.nan,
            "rms_over_noise": float(math.sqrt(chi2 / n)) if n else math.nan,
            "p": p, "passed": not (p < alpha)}


def goodness_of_fit(errors, mask, lev, sensor_columns, known, alpha: float = ALPHA) -> dict:
    """Chi-square tests per sensor and over the fit (module docstring).

    ``errors``: noise-weighted residuals ``(R, M, C)``; ``mask``: 1 where measured;
    ``lev``: the leverages of those entries ``(R, M, C)``; ``sensor_columns``:
    ``{sensor: [column indices]}``; ``known``: per column, whether its noise was
    declared. Returns ``{"alpha", "sensors": {name: entry}, "total": entry or None,
    "passed"}``, each entry with ``samples, chi2, dof, reduced_chi2, rms_over_noise, p,
    passed``."""
    e2 = np.where(mask > 0, np.asarray(errors, float) ** 2, 0.0)
    lev = np.where(mask > 0, lev, 0.0)
    out, tot = {}, [0.0, 0, 0.0]
    for name, js in sensor_columns.items():
        if not all(known[j] for j in js):
            continue
        n = int(np.sum(mask[..., js] > 0))
        if n == 0:
            continue
        chi2, dof = float(e2[..., js].sum()), n - float(lev[..., js].sum())
        out[name] = _entry(chi2, n, dof, alpha)
        tot = [tot[0] + chi2, tot[1] + n, tot[2] + dof]
    total = _entry(*tot, alpha) if tot[1] else None
    passed = all(s["passed"] for s in out.values()) and (total is None or total["passed"])
    return {"alpha": alpha, "sensors": out, "total": total, "passed": passed}


def p_text(p: float) -> str:
    """``p`` for a message: ``p = 3.2e-05``, or ``p < 1e-300`` where it underflows."""
    return "p < 1e-300" if p == 0.0 else f"p = {p:.2g}"


def failures(gof: dict) -> list:
    """One warning per sensor that fails (and one for the whole fit when only the total
    does), each naming the sensor, its residual against its noise, and the test."""
    out = []
    a = gof["alpha"]
    for name, s in gof["sensors"].items():
        if not s["passed"]:
            out.append(f"sensor {name}: residual RMS {s['rms_over_noise']:.3g}x its declared noise "
                       f"(chi-square {s['reduced_chi2']:.3g} per degree of freedom over {s['dof']:.0f}, "
                       f"{p_text(s['p'])}, below the {a:g} level): the model does not explain this "
                       f"sensor's data (missing physics, or noise above the declared); standard errors "
                       f"are scaled by sqrt(reduced chi-square)")
    t = gof["total"]
    if t is not None and not t["passed"] and all(s["passed"] for s in gof["sensors"].values()):
        out.append(f"the fit as a whole: residual RMS {t['rms_over_noise']:.3g}x the declared noise "
                   f"(chi-square {t['reduced_chi2']:.3g} per degree of freedom over {t['dof']:.0f}, "
                   f"{p_text(t['p'])}, below the {a:g} level): the model does not explain the data; "
                   f"standard errors are scaled by sqrt(reduced chi-square)")
    return out
