"""Process-wide numeric configuration, applied on ``import diffmb``.

* float64 is on by default (``jax_enable_x64``). Set ``DIFFMB_FLOAT32=1`` before importing
  diffmb to keep JAX's float32 default for large batch runs.
* jaxlib 0.10's XLA CPU fusion emitters make deep unrolled recursions compile to code whose
  run time grows exponentially with chain depth (seen with MJX); we switch them off unless
  the user already set ``XLA_FLAGS`` themselves. This only takes effect if it happens before
  JAX initialises its CPU backend, which importing diffmb first guarantees.
"""

import os

_FLAG = "--xla_cpu_use_fusion_emitters=false"
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()

import jax  # noqa: E402

FLOAT32 = os.environ.get("DIFFMB_FLOAT32", "") not in ("", "0", "false", "False")
jax.config.update("jax_enable_x64", not FLOAT32)
