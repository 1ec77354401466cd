"""Design tools on top of the dynamics: parameter sweeps (:mod:`.batch`, :mod:`.distributed`,
:mod:`.sweep_store`, :mod:`.sweep_report`), stabilization tuning (:mod:`.tune`), fits of
scenario parameters to measured deployments (:mod:`.fit` with :mod:`.fit_residual`,
:mod:`.least_squares`, :mod:`.goodness`), and what they read: measurement records and
sensors (:mod:`.data`, :mod:`.records`, :mod:`.sensors`, :mod:`.mujoco_record`), scenario
parameters bound to a System's params (:mod:`.binding`).

They build on :mod:`diffmb.scenarios` and :func:`diffmb.simulate`; the dynamics core never
imports them (``tests/test_import_layers.py``). Modules load on first use.
"""
