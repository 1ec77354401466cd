"""What a compiled program asks of an accelerator, counted from its text on any machine.

A GPU step of a small system costs what its program launches, not what it computes: each
fusion, dot, library call or copy is a kernel of a few microseconds whatever its size,
each ``while`` whose trip count XLA cannot see reads its predicate back to the host once
per iteration, and a library call (a LAPACK/cuSOLVER Cholesky, a triangular solve) or a
host callback inside a loop keeps the loop from being captured as one device graph.
:func:`census` reads ``compiled.as_text()`` (an XLA program compiled for any backend,
a CPU's included) into its loop nest, and :class:`Loop` counts, per iteration of a loop,
the kernels it launches (nested loops times their trip counts), the loops inside it
without a known trip count, the library calls and the host callbacks.

CPU caveats: a CPU program's fusion is not a GPU's (the counts are a proxy for launches,
to be compared with themselves), and XLA's CPU backend expands a scatter into a ``while``
of known trip count that GPUs do not have: such a loop counts as one kernel here.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from dataclasses import dataclass, field

import jax

#: The opcodes counted as a kernel launch.
KERNELS = ("fusion", "dot", "custom-call", "copy")
#: Custom-call targets that are host callbacks (a Python function run on the host).
CALLBACKS = ("xla_ffi_python_cpu_callback", "xla_ffi_python_gpu_callback", "xla_python_cpu_callback",
             "xla_python_gpu_callback")

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s+=\s+(.*)$")
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_ATTR = {k: re.compile(k + r"=%?([\w.\-]+)") for k in ("condition", "body", "calls", "to_apply")}
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRUE_FALSE = re.compile(r"(?:true|false)_computation=%?([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
#: JAX's dense linear algebra, whichever way XLA lowers it (a library call, or inline
#: where the backend expands it): named in the op names of its instructions
_LINALG = re.compile(r"(?:^|/)(?:cholesky|triangular_solve|lu|lu_pivots_to_permutation|eigh|svd|qr|"
                     r"householder_product|tridiagonal_solve)(?:/|$)")


@dataclass(frozen=True)
class _Instr:
    name: str
    opcode: str
    text: str

    def attr(self, key):
        m = _ATTR[key].search(self.text)
        return m.group(1) if m else None

    @property
    def op_name(self) -> str:
        m = _OP_NAME.search(self.text)
        return m.group(1) if m else ""

    @property
    def target(self) -> str | None:
        m = _TARGET.search(self.text)
        return m.group(1) if m else None


def _parse(text: str):
    """``(computations: name -> [instructions], entry name)``."""
    comps, entry, current = {}, None, None
    for line in text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m:
                current = m.group(1)
                comps[current] = []
                if line.startswith("ENTRY"):
                    entry = current
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        rest = m.group(2)
        op = _OPCODE.search(" " + _strip_shape(rest))
        comps[current].append(_Instr(m.group(1), op.group(1) if op else "", rest))
    if entry is None:
        raise ValueError("program_census: no ENTRY computation in the program text")
    return comps, entry


def _strip_shape(rest: str) -> str:
    """The instruction after its result shape (a tuple shape holds parentheses of its own)."""
    if not rest.startswith("("):
        return rest.split(" ", 1)[1] if " " in rest else rest
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return rest[i + 1:]
    return rest


@dataclass(frozen=True)
class Loop:
    """One ``while`` of a program and what one of its iterations runs."""

    name: str
    op_name: str
    #: iterations, when XLA knows them (``None``: the host reads the predicate each time)
    trip_count: int | None
    #: kernels (:data:`KERNELS`) in the body and condition themselves, by opcode
    own: Counter = field(default_factory=Counter)
    #: library (non-callback) custom-call targets in the body and condition themselves
    own_library: Counter = field(default_factory=Counter)
    own_callbacks: int = 0
    own_conditionals: int = 0
    children: tuple = ()
    #: instructions of JAX's dense linear algebra (``lax.linalg``) in the body and condition
    own_linalg: int = 0

    def launches(self) -> int:
        """Kernels one iteration launches: its own, and each nested loop's times its trip
        count (once where the count is unknown)."""
        return sum(self.own.values()) + sum((c.trip_count or 1) * c.launches() for c in self.children)

    def _per_iteration(self, field_name: str) -> Counter:
        """The counter ``field_name`` of this loop plus its nested loops' times their trip counts."""
        out = Counter(getattr(self, field_name))
        for c in self.children:
            for k, v in c._per_iteration(field_name).items():
                out[k] += (c.trip_count or 1) * v
        return out

    def kernels(self) -> Counter:
        """:meth:`launches` by opcode."""
        return self._per_iteration("own")

    def unknown_trip_loops(self) -> int:
        """Loops nested in this one (at any depth) whose trip count XLA does not know."""
        return sum((c.trip_count is None) + c.unknown_trip_loops() for c in self.children)

    def library_calls(self) -> Counter:
        """Library custom calls per iteration (nested loops times their trip counts), by target."""
        return self._per_iteration("own_library")

    def callbacks(self) -> int:
        """Host callbacks in this loop, at any depth (static count)."""
        return self.own_callbacks + sum(c.callbacks() for c in self.children)

    def conditionals(self) -> int:
        """``conditional`` instructions in this loop, at any depth (static count): each one
        reads its predicate back to the host on a GPU."""
        return self.own_conditionals + sum(c.conditionals() for c in self.children)

    def linalg_ops(self) -> int:
        """Instructions of ``lax.linalg`` operations in this loop, at any depth (static
        count): none where the algebra is written out."""
        return self.own_linalg + sum(c.linalg_ops() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find(self, scope: str) -> Loop | None:
        """The outermost loop at or below this one whose ``op_name`` holds ``scope``."""
        return next((lp for lp in self.walk() if scope in lp.op_name), None)


@dataclass(frozen=True)
class Census:
    """A program's loop nest (:attr:`top`: a pseudo-loop of one iteration, the program)."""

    top: Loop

    def find(self, scope: str) -> Loop:
        """The outermost loop whose ``op_name`` holds ``scope`` (a ``jax.named_scope``)."""
        lp = self.top.find(scope)
        if lp is None:
            names = sorted({lp.op_name for lp in self.top.walk()} - {""})
            raise KeyError(f"program_census: no loop named {scope!r}; loops: {names}")
        return lp

    def library_targets(self) -> Counter:
        """Every library custom call in the program, by target (static count)."""
        out = Counter()
        for lp in self.top.walk():
            out.update(lp.own_library)
        return out


@contextlib.contextmanager
def uncached():
    """Compile inside the block without the persistent compilation cache: an executable
    read back from it does not print the program it was compiled from (a LAPACK call
    was missing from its text)."""
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", before)


def _is_scatter_expansion(instr: _Instr) -> bool:
    return instr.op_name.rsplit("/", 1)[-1].startswith("scatter")


def census(text: str) -> Census:
    """The loop nest of the compiled program ``text`` (``compiled.as_text()``)."""
    comps, entry = _parse(text)

    def collect(comp, seen):
        """(own kernels, library, callbacks, conditionals, child loops) of a computation and
        the computations it calls (not fused ones: a fusion is one kernel)."""
        own, lib, cb, cond, kids, la = Counter(), Counter(), 0, 0, [], 0
        for ins in comps.get(comp, ()):
            la += bool(_LINALG.search(ins.op_name))
            if ins.opcode == "while":
                if _is_scatter_expansion(ins):
                    own["fusion"] += 1
                    continue
                trip = _TRIP.search(ins.text)
                kids.append(_loop(ins, int(trip.group(1)) if trip else None, seen))
                continue
            if ins.opcode in KERNELS:
                own[ins.opcode] += 1
            if ins.opcode == "custom-call":
                t = ins.target or "?"
                if t in CALLBACKS:
                    cb += 1
                else:
                    lib[t] += 1
            called = []
            if ins.opcode == "conditional":
                cond += 1
                m = _BRANCHES.search(ins.text)
                called = [c.strip().lstrip("%") for c in m.group(1).split(",")] if m else _TRUE_FALSE.findall(ins.text)
            elif ins.opcode == "call":
                called = [ins.attr("to_apply")]
            for c in called:
                if c and c not in seen:
                    o, li, b, co, k, a = collect(c, seen | {c})
                    own.update(o), lib.update(li)
                    cb, cond, la = cb + b, cond + co, la + a
                    kids.extend(k)
        return own, lib, cb, cond, kids, la

    def _loop(ins, trip, seen):
        own, lib, cb, cond, kids, la = Counter(), Counter(), 0, 0, [], 0
        for key in ("condition", "body"):
            c = ins.attr(key)
            if c and c not in seen:
                o, li, b, co, k, a = collect(c, seen | {c})
                own.update(o), lib.update(li)
                cb, cond, la = cb + b, cond + co, la + a
                kids.extend(k)
        return Loop(ins.name, ins.op_name, trip, own, lib, cb, cond, tuple(kids), la)

    own, lib, cb, cond, kids, la = collect(entry, {entry})
    return Census(Loop("ENTRY", "", 1, own, lib, cb, cond, tuple(kids), la))
