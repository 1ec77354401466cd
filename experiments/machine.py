"""What the benchmarks record about the machine they ran on."""

from __future__ import annotations

from pathlib import Path

PRESSURE = Path("/proc/pressure/cpu")


def cpu_pressure() -> str | None:
    """The ``some`` line of ``/proc/pressure/cpu`` (other work on a shared machine), or
    None where the kernel does not report it."""
    try:
        return PRESSURE.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def cpu_pressure_avg10() -> float | None:
    """``some avg10`` of :func:`cpu_pressure`: the share of the last 10 s that tasks waited
    for a CPU, in percent."""
    line = cpu_pressure()
    try:
        return float(line.split("avg10=")[1].split()[0])
    except (AttributeError, IndexError, ValueError):
        return None
