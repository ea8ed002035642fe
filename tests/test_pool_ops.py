"""Generic tests over every registered pooling operator (PyTorch's OpInfo is the model).

Each operator's rules must agree with each other on small shapes: its VJP is J^T dy
and its JVP is J t for the J its ``jacobian`` rule gives, its SymPy template's
derivative (``symjac.expressions`` differentiated by SymPy) is that J, its lowering
passes ``symjac.verify`` (within the operator's own rounding model) and lands within
its forward bound of the exact forward, its spec repr round-trips. Nothing here names
an operator: a new one is tested by registering it (CONTRIBUTING.md, "Add a pooling
operator"); its oracle tests against an independent library live beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import sympy

import symjac
from symjac.verifiers.pool._inputs import distinct_input, tie_input
from symjac.check._rounding import unit_roundoff
from symjac.pool._ops import OPERATORS, Operator, operator_of

NAMES = sorted(OPERATORS)


def _specs(op: Operator) -> list[Any]:
    """Small specs of the operator from its ``samples``: overlapping 2-D windows, 1-D
    windows, and (where it runs on them) the adaptive and global geometries; an operator with a
    spec of its own (``spec_type``, or a table operator's ``spec_class``) is tested on the specs its
    samples make."""
    if not op.kernel_windows:  # RoI pooling: its own spec class, its samples its fields
        return [op.spec_class(**fields) for fields in op.samples]
    if op.spec_type != "Pool":
        return [getattr(symjac, op.spec_type)(**fields) for fields in op.samples]
    specs: list[Any] = [symjac.Pool(op.name, 2, stride=1, **fields) for fields in op.samples]
    specs.append(symjac.Pool(op.name, (3,), stride=2, **op.samples[0]))
    if op.any_geometry:
        specs += [symjac.AdaptivePool(op.name, (2, 2)), symjac.GlobalPool(op.name, rank=1)]
    return specs


def _shape(spec: Any) -> tuple[int, ...]:
    if not operator_of(spec).kernel_windows:  # its boxes fix the map: the plan's smallest
        return symjac.cover(spec)[0]
    return (1, 2, 3, 4) if spec.rank == 2 else (2, 1, 5)


def _cases() -> list[Any]:
    out = []
    for name in NAMES:
        for i, spec in enumerate(_specs(OPERATORS[name])):
            out.append(pytest.param(spec, id=f"{name}-{type(spec).__name__}-{i}"))
    return out


def _x(spec: Any, shape: tuple[int, ...], family: str = "distinct") -> np.ndarray:
    g = symjac.resolve(spec, shape)
    if family == "ties":
        return g.operator.tie_input(g, tie_input(g, np.float64, 0))
    return g.operator.default_input(g, distinct_input(g, np.float64, 0))


def _rng_dyadic(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, size=shape) / 4


def _same(a: Any, b: Any) -> bool:
    d = sympy.sympify(a - b)
    return bool(d == 0 or sympy.simplify(d) == 0)


def test_every_mode_of_the_specs_is_registered() -> None:
    # the registry is the specs' list of modes: Pool takes every operator, the other geometries those that run on them
    from symjac.pool._spec import MODES, POOL_MODES

    assert POOL_MODES == tuple(n for n in OPERATORS if OPERATORS[n].spec_type == "Pool" and OPERATORS[n].kernel_windows)
    assert MODES == tuple(n for n in OPERATORS if OPERATORS[n].any_geometry and OPERATORS[n].kernel_windows)
    assert {operator_of(n).name for n in NAMES} == set(NAMES)


@pytest.mark.parametrize("family", ["distinct", "ties"])
@pytest.mark.parametrize("spec", _cases())
def test_vjp_and_jvp_are_the_jacobian_applied(spec: Any, family: str) -> None:
    shape = _shape(spec)
    x = _x(spec, shape, family)
    J = symjac.jacobian(spec, x).todense()
    g = symjac.resolve(spec, shape)
    dy = _rng_dyadic(g.output_shape, 1)
    t = _rng_dyadic(shape, 2)
    vjp = symjac.vjp(spec, x, dy).reshape(-1)
    jvp = symjac.pool._jacobian.jvp(spec, x, t).reshape(-1)
    want_vjp = J.T * sympy.Matrix([sympy.nsimplify(v) for v in dy.reshape(-1)])
    want_jvp = J * sympy.Matrix([sympy.nsimplify(v) for v in t.reshape(-1)])
    assert all(_same(a, b) for a, b in zip(vjp, want_vjp))
    assert all(_same(a, b) for a, b in zip(jvp, want_jvp))


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
@pytest.mark.parametrize("spec", _cases())
def test_the_template_differentiates_to_the_jacobian(spec: Any) -> None:
    # symjac.expressions builds each window from its class template; SymPy's derivative of
    # it at x (distinct values: off every tie and nonsmooth point) is the jacobian rule's J
    shape = _shape(spec)
    x = _x(spec, shape)
    if getattr(spec, "pad_value", None) is not None:
        x = 2 * x + 1  # odd integers, still distinct: no cell ties with the pad cells' 0 (``Max(0, ...)``)
    exprs = symjac.expressions(spec, shape).reshape(-1)
    names = [sympy.Symbol("x[" + ",".join(map(str, i)) + "]", real=True) for i in np.ndindex(*shape)]
    at = {s: sympy.nsimplify(v) for s, v in zip(names, x.reshape(-1))}
    J = symjac.jacobian(spec, x).todense()
    for r, e in enumerate(exprs):
        for c, s in enumerate(names):
            assert _same(sympy.diff(e, s).subs(at), J[r, c]), (r, c)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("spec", _cases())
def test_the_lowering_is_within_its_own_bound_and_passes_verify(spec: Any, dtype: str) -> None:
    shape = _shape(spec)
    dt = np.dtype(dtype)
    x = _x(spec, shape).astype(dt)
    lowered = symjac.lower(spec, shape)
    g = lowered.geometry
    e_c, tol, _ = g.operator.forward_bound(g, x, lambda: symjac._exact.ExactArray.from_any(x), dt, unit_roundoff(dt))
    y_c = g.to_canonical(lowered.forward(x).astype(np.float64), g.out_spatial)
    assert (np.abs(y_c - e_c) <= tol).all()
    report = symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, x=x, dtype=dtype)
    assert report.ok, report.summary()


@pytest.mark.parametrize("spec", _cases())
def test_the_spec_repr_round_trips(spec: Any) -> None:
    names = ("Pool", "AdaptivePool", "GlobalPool", "FractionalMaxPool", "RoiAlign", "RoiPool")
    assert eval(repr(spec), {k: getattr(symjac, k) for k in names}) == spec


@pytest.mark.parametrize("name", NAMES)
def test_a_zero_second_derivative_is_declared_or_the_hvp_rule_is_given(name: str) -> None:
    op = OPERATORS[name]
    spec = _specs(op)[0]
    shape = _shape(spec)
    x = _x(spec, shape)
    g = symjac.resolve(spec, shape)
    ex = symjac._exact.ExactArray.from_any(x)
    dy = symjac._exact.ExactArray.from_any(_rng_dyadic(g.output_shape, 1))
    v = symjac._exact.ExactArray.from_any(_rng_dyadic(shape, 2))
    h = op.hvp(g, ex, dy, v)  # a rule that is neither declared zero nor given raises NotImplementedError
    assert h.shape == g.input_shape
    if op.second_derivative_zero:
        assert all(e == 0 for e in h.reshape(-1))
