"""Formulations other than the rigid tree (ABA): each module defines a :class:`~diffmb.system.System`."""
