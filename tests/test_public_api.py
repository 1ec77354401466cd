"""The public API is annotated: every parameter and return of the package's functions
and of the design tools' entry points carries a type that resolves."""

from __future__ import annotations

import inspect
import typing

import pytest
from jax.typing import ArrayLike

import diffmb
from diffmb import scenarios
from diffmb.design import batch, fit, tune
from diffmb.design.records import Record
from diffmb.scenarios import Scenario
from diffmb.simulation import resumable
from diffmb.simulation.integrate import PyTree
from diffmb.system import System

ENTRY_POINTS = [getattr(diffmb, n) for n in diffmb.__all__ if inspect.isfunction(inspect.unwrap(getattr(diffmb, n)))]
ENTRY_POINTS += [tune.tune, fit.fit, batch.sweep, resumable.run, scenarios.get]
#: names the modules import for type checking only
TYPES = {"Scenario": Scenario, "Record": Record, "System": System, "PyTree": PyTree, "ArrayLike": ArrayLike}


@pytest.mark.parametrize("f", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_public_functions_are_annotated(f):
    f = inspect.unwrap(f)
    sig = inspect.signature(f)
    bare = [p.name for p in sig.parameters.values() if p.annotation is inspect.Parameter.empty]
    assert bare == [] and sig.return_annotation is not inspect.Signature.empty, f.__name__
    hints = typing.get_type_hints(f, localns=TYPES)
    assert set(sig.parameters) <= set(hints) and "return" in hints


def test_the_entry_points_are_the_package_api():
    assert len(ENTRY_POINTS) >= 20 and diffmb.simulate in ENTRY_POINTS
