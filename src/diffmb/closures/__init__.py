"""Layer 3: loop closures on a tree, and their exact solve.

* :mod:`~diffmb.closures.nodes`: closure nodes (hinge, point, weld, prismatic): residuals,
  Jacobian blocks and velocity products read from the kinematics workspace; the rank
  report.
* :mod:`~diffmb.closures.couplings`: joint couplings (gears, mimic joints, MJCF joint
  equalities) as closure rows.
* :mod:`~diffmb.closures.constraint_solve`: the joint-space augmented-Lagrangian solve of
  ``M + rho G^T G`` (dense, or block-tridiagonal for large folds).
* :mod:`~diffmb.closures.dynamics`: closed-chain dynamics, Baumgarte, projection.
* :mod:`~diffmb.closures.assembly`: closures by name (:func:`~diffmb.closures.assembly.close_loops`)
  and assembly onto the loops (:func:`~diffmb.closures.assembly.assemble`).

Until 0.2 the closure nodes were the module ``diffmb.closures`` itself; their names are
still served here for one release, with a warning naming :mod:`diffmb.closures.nodes`.
"""


def __getattr__(name):
    import importlib
    import warnings

    nodes = importlib.import_module(f"{__name__}.nodes")
    if name.startswith("__") or not hasattr(nodes, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"diffmb.closures.{name} moved to diffmb.closures.nodes.{name} (the old spelling goes in "
                  f"diffmb 0.3)", DeprecationWarning, stacklevel=2)
    return getattr(nodes, name)
