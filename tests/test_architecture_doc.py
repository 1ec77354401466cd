"""docs/architecture.md's worked examples (a formulation, a scenario, a CLI command) run as
written, in order, in one namespace: the page cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from diffmb import scenarios

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _examples() -> dict:
    blocks = re.findall(r"```python example=(\w+)\n(.*?)```", DOC.read_text(), re.S)
    return dict(blocks)


def test_the_worked_examples_run():
    examples = _examples()
    assert list(examples) == ["formulation", "scenario", "command"]
    for name, code in examples.items():
        assert len(code.strip().splitlines()) <= 60, name   # short enough to read at once
    namespace = {}
    try:
        for name, code in examples.items():
            exec(compile(code, f"{DOC.name}:{name}", "exec"), namespace)
        assert "spherical-pendulum" in scenarios.REGISTRY
    finally:
        scenarios.REGISTRY.pop("spherical-pendulum", None)   # the example registers one
