"""Layer 1: the algebra everything else is written in.

* :mod:`~diffmb.math.spatial`: 6-D spatial vectors and transforms, rotations (MRP with
  the shadow set, quaternions scalar-last, DCM), and the small products written out for
  CPU batch programs.
* :mod:`~diffmb.math.small_cholesky`: small dense solves written out.
* :mod:`~diffmb.math.block_tridiagonal`: block-tridiagonal factorisation of banded
  matrices (a large fold's ``M + rho G^T G``).
* :mod:`~diffmb.math.vectorize`: batches in blocks (:func:`~diffmb.math.vectorize.vmap_blocks`).
"""
