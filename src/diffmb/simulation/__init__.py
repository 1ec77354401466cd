"""Layer 5: integrating a System and what a run returns.

* :mod:`~diffmb.simulation.integrate`: :func:`~diffmb.simulation.integrate.simulate`
  (diffrax underneath: projection after every step, events, the divergence guard,
  gradients through the run) and its ahead-of-time form.
* :mod:`~diffmb.simulation.trajectory`: the :class:`~diffmb.simulation.trajectory.Trajectory`.
* :mod:`~diffmb.simulation.health`: whether a run's numbers can be trusted.
* :mod:`~diffmb.simulation.resumable`: long runs in resumable time segments.
* :mod:`~diffmb.simulation.compile_cache`: the command line's persistent compilation cache.
"""
