"""Whether JAX is tracing: what a function called both eagerly and inside a transformation
may do differently (compile a program of its own, or reuse one already compiled)."""

from __future__ import annotations


def outside_any_trace() -> bool:
    """Whether no JAX transformation is tracing (JAX's own test, not public: where it is
    missing, False, the answer that is safe inside a trace)."""
    try:
        from jax._src.core import trace_state_clean
    except ImportError:
        return False
    return bool(trace_state_clean())
