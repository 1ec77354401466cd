"""Formulations other than the rigid tree (ABA), one package each: ``kane`` (cut joints),
``udwadia_kalaba`` (quaternion bodies and their potentials), ``tensegrity`` (Cartesian
nodes and the linear analysis), ``flexible`` (modal bodies, efficient speeds). Each
package's System meets the contract of :class:`~diffmb.system.System`."""
