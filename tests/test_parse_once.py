"""Parse once: each public entry validates its spec once and the stages below take it as valid.

Every module that bound ``check_pool_spec`` or ``check_loss`` (``from ... import``) gets a counting
wrapper, so a validation anywhere below the entry is counted. The expected count is 1 by the rule
itself (CONTRIBUTING.md, "Parse once"), whatever the entry does below.
"""

from __future__ import annotations

import collections
import importlib
import pathlib
import pkgutil
import sys

import numpy as np
import pytest

import symjac
from symjac.loss import _spec as loss_spec
from symjac.pool import _spec as pool_spec

VALIDATORS = ((pool_spec, "check_pool_spec"), (loss_spec, "check_loss"))


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    for m in pkgutil.walk_packages(symjac.__path__, "symjac."):
        if not m.name.endswith(("__main__", "_offline")):
            importlib.import_module(m.name)
    counts: collections.Counter[str] = collections.Counter()
    for home, name in VALIDATORS:
        original = getattr(home, name)

        def counted(*args: object, _original=original, _name=name, **kwargs: object) -> object:
            counts[_name] += 1
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("symjac") and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    return counts


SPEC = symjac.Pool("avg", 2, stride=1, padding="same")
#: The implementation under test is symjac's own lowering, made before anything is counted (an
#: implementation that called symjac's public functions would add its own validations).
SHAPES = (*symjac.cover(SPEC), (1, 1, 4, 4), (1, 1, 3, 3))
LOWERED = {shape: symjac.lower(SPEC, shape) for shape in SHAPES}
JACOBIANS = {shape: symjac.jacobian(SPEC, shape).to_numpy(np.float64) for shape in SHAPES}


def _backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    return LOWERED[x.shape].vjp(x, dy)


def _forward(x: np.ndarray) -> np.ndarray:
    return LOWERED[x.shape].forward(x)


def _jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    y = LOWERED[x.shape].forward(x)
    return (JACOBIANS[x.shape] @ t.reshape(-1)).reshape(y.shape).astype(x.dtype)


def test_verify_at_a_shape_validates_once(validations: collections.Counter[str]) -> None:
    report = symjac.verify(SPEC, backward=_backward, forward=_forward, input_shape=(1, 1, 4, 4))
    assert report.ok and validations["check_pool_spec"] == 1


def test_verify_over_the_coverage_plan_validates_once(validations: collections.Counter[str]) -> None:
    report = symjac.verify(SPEC, backward=_backward)
    assert report.ok and validations["check_pool_spec"] == 1


def test_verify_with_a_jvp_validates_once(validations: collections.Counter[str]) -> None:
    report = symjac.verify(SPEC, backward=_backward, jvp=_jvp, input_shape=(1, 1, 3, 3))
    assert report.ok, report
    assert validations["check_pool_spec"] == 1


def test_verify_loss_validates_once(validations: collections.Counter[str]) -> None:
    loss = symjac.Loss("mse", reduction="sum")
    report = symjac.verify_loss(loss, derivative=lambda z, y: 2 * (z - y), pred=[0.5, 1.0], label=[0.0, 0.25])
    assert report.ok, report
    assert validations["check_loss"] == 1


def test_verify_loss_with_an_hvp_validates_once(validations: collections.Counter[str]) -> None:
    loss = symjac.Loss("mse", reduction="sum")
    report = symjac.verify_loss(loss, derivative=lambda z, y: 2 * (z - y), hvp=lambda z, y, v: 2 * v,
                                pred=[0.5, 1.0], label=[0.0, 0.25])
    assert report.ok, report
    assert validations["check_loss"] == 1


def test_a_failing_verify_with_its_convention_hint_validates_once(validations: collections.Counter[str]) -> None:
    # the hint screens neighbouring conventions (new specs, built valid) below the entry
    def half(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return _backward(x, dy) / 2

    report = symjac.verify(SPEC, backward=half, input_shape=(1, 1, 4, 4))
    assert not report.ok and validations["check_pool_spec"] == 1


SEEDS = pathlib.Path(__file__).resolve().parent.parent / "specs" / "seeds"


@pytest.mark.parametrize("file", ["nntrainer_avgpool_same_2x2.toml", "maxpool_ties.toml", "loss_scale_family.toml"])
def test_golden_validates_each_operator_once(validations: collections.Counter[str], tmp_path: pathlib.Path,
                                             file: str) -> None:
    from symjac.io._specfile import load
    from symjac.io.golden._write import write_golden

    cases = load(SEEDS / file).cases
    operators = len({(c.is_loss, c.operator) for c in cases})
    validations.clear()  # loading built (and so validated) the specs; golden is the entry counted
    assert write_golden(cases, tmp_path, ["json"], ["float64"])
    assert sum(validations.values()) == operators


def test_golden_cover_validates_the_operator_once(validations: collections.Counter[str], tmp_path: pathlib.Path) -> None:
    from symjac.io._specfile import load
    from symjac.io.golden._cover import cover_cases
    from symjac.io.golden._write import write_golden

    (case,) = load(SEEDS / "nntrainer_avgpool_same_2x2.toml").cases
    validations.clear()
    cases = cover_cases([case])
    assert len(cases) > 1 and write_golden(cases, tmp_path, ["json"], ["float64"])
    assert validations["check_pool_spec"] == 1


def test_check_expect_validates_once(validations: collections.Counter[str]) -> None:
    from symjac.io._specfile import load

    (case,) = load(SEEDS / "textbook_4x4_avg.toml").cases
    validations.clear()
    assert symjac.check_expect(case) == [] and validations["check_pool_spec"] == 1
