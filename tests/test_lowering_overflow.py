"""Lowering near the top of a dtype's range (issue 24 item 6): no overflow where the exact value is representable.

``symjac.lower(Pool("avg", 2), (2, 2)).forward(np.full((2, 2), 1e308))`` gave inf (the sum
4e308 overflows) though the mean is 1e308; lp's x^p overflows the same way (float16:
300^2 > 65504). The lowerings now scale such windows by powers of two (exact), and the
verifier's bounds stay finite there (an inf tolerance would pass any forward).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import symjac
from symjac import Pool
from symjac._exact import ExactArray
from symjac.check._rounding import unit_roundoff
from sampling import examples

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

BIG = float(np.finfo(np.float64).max)


def test_the_mean_of_four_cells_of_1e308_is_1e308() -> None:
    # the reproducer: (4·1e308)/4 = 1e308 exactly (1e308 is a float64 itself)
    y = symjac.lower(Pool("avg", 2), (2, 2)).forward(np.full((2, 2), 1e308))
    assert y.tolist() == [[1e308]]
    # mixed signs: (1e308 - 1e308 + 1e308 + 1e308)/4 = 5e307 exactly in the reals; within the bound
    x = np.array([[1e308, -1e308], [1e308, 1e308]])
    assert symjac.lower(Pool("avg", 2), (2, 2)).forward(x).tolist() == [[5e307]]
    # the largest float64 in every cell: the mean is that value (divisor 4: every step exact)
    assert symjac.lower(Pool("avg", 2), (2, 2)).forward(np.full((2, 2), BIG)).tolist() == [[BIG]]


def test_lp_of_300_and_400_in_float16_is_500() -> None:
    # 300^2 + 400^2 = 500^2 (a 3-4-5 triangle): y = 500, ∂y/∂x = (300, 400)/500 = (0.6, 0.8);
    # 300^2 = 90000 is beyond float16's 65504, the scaled lowering never forms it
    spec = Pool("lp", (2,), p=2)
    lowered = symjac.lower(spec, (1, 1, 2))
    x = np.array([[[300, 400]]], dtype=np.float16)
    assert lowered.forward(x).tolist() == [[[500.0]]]
    dx = lowered.vjp(x, np.ones((1, 1, 1), dtype=np.float16)).astype(np.float64)
    assert np.allclose(dx, [[[0.6, 0.8]]], rtol=2.0**-9)  # a few float16 roundings of 0.6, 0.8
    assert symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, x=x).ok


def test_a_forward_wrong_only_near_overflow_is_found() -> None:
    # a forward that saturates (returns max/4 where its sum overflowed) is right at every
    # moderate input, but at four cells of 1e308 it says 4.5e307 where the mean is 1e308;
    # the tolerance there was γ·Σ|x|/D = inf (Σ|x| overflowed), so it passed
    spec = Pool("avg", 2)
    lowered = symjac.lower(spec, (1, 1, 2, 2))

    def saturating(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            s = x.sum(axis=(2, 3), keepdims=True)
        return np.where(np.isinf(s), BIG, s) / 4

    report = symjac.verify(spec, forward=saturating, backward=lowered.vjp, x=np.full((1, 1, 2, 2), 1e308))
    assert report.categories() == ["forward_values"], report.summary()
    assert symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, x=np.full((1, 1, 2, 2), 1e308)).ok


def test_no_finite_difference_false_alarm_beyond_2_to_53() -> None:
    # at |x| >= 2^53, x + 1/2 rounds back to x in float64 itself: the step is not taken, the
    # forward's zero slope is no finding (a correct max pool got not_fd_consistent)
    spec = Pool("max", 2)
    x = np.array([[[[1e17, 3e17], [5e17, 7e17]]]])
    lowered = symjac.lower(spec, x.shape)
    report = symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, x=x)
    assert report.ok, report.summary()


def _within_own_bound(spec: Any, x: np.ndarray) -> None:
    lowered = symjac.lower(spec, x.shape)
    g = lowered.geometry
    dt = x.dtype
    y = lowered.forward(x)
    e_c, tol, _ = g.operator.forward_bound(g, x, lambda: ExactArray.from_any(x), dt, unit_roundoff(dt))
    y_c = g.to_canonical(y.astype(np.float64), g.out_spatial)
    finite = np.abs(e_c) <= float(np.finfo(dt).max) / 2  # exact values well inside the dtype's range
    assert np.isfinite(y_c[finite]).all()
    assert np.isfinite(tol[finite]).all()
    assert (np.abs(y_c - e_c) <= tol)[finite].all()


@hypothesis.settings(max_examples=examples(25), deadline=None)
@hypothesis.given(st.sampled_from(["float16", "float32", "float64"]), st.integers(1, 3), st.integers(1, 3),
                  st.sampled_from(["exclude_pad", "include_pad"]), st.data())
def test_avg_lowering_near_overflow_stays_within_its_bound(dtype: str, k: int, s: int, divisor: str,
                                                           data: Any) -> None:
    dt = np.dtype(dtype)
    top = float(np.finfo(dt).max)
    spec = Pool("avg", (k, k), stride=s, padding=k // 2, divisor=divisor)
    # cells of magnitude up to the largest finite value, both signs, some small
    mags = data.draw(st.lists(st.sampled_from([top, top / 2, top / 3, top / 7, 1.0, 0.0]), min_size=16, max_size=16))
    signs = data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=16, max_size=16))
    x = (np.array(mags) * np.array(signs)).astype(dt).reshape(1, 1, 4, 4)
    _within_own_bound(spec, x)


@pytest.mark.parametrize("divisor", ["exclude_pad", "include_pad"])
def test_avg_bound_of_windows_of_the_largest_values_is_finite(divisor: str) -> None:
    # Every cell ±max (one +max): a 2x2 window's mean is at most max in magnitude, its rounding
    # bound γ_5·Σ|x|/D at most ~5·2^-53·max, finite. Σ|x| itself (4·max) overflows; a bound that
    # scaled it back before multiplying by γ (or raised max·2^-2·4 by its own rounding) was inf.
    top = float(np.finfo(np.float64).max)
    x = np.full((1, 1, 4, 4), -top)
    x[0, 0, 3, 3] = top
    _within_own_bound(Pool("avg", (2, 2), stride=1, padding=1, divisor=divisor), x)


@hypothesis.settings(max_examples=examples(20), deadline=None)
@hypothesis.given(st.sampled_from(["float16", "float32", "float64"]), st.sampled_from([1, 2, 3, 4]), st.data())
def test_lp_lowering_near_overflow_stays_within_its_bound(dtype: str, p: int, data: Any) -> None:
    dt = np.dtype(dtype)
    top = float(np.finfo(dt).max)
    spec = Pool("lp", (2,), p=p)
    # window maxima from 1 up to the largest finite value: x^p overflows long before y does
    mags = data.draw(st.lists(st.floats(0, np.log2(top) - 2), min_size=6, max_size=6))
    x = np.exp2(np.floor(np.array(mags) * 4) / 4).astype(dt).reshape(1, 1, 6)
    if p % 2:  # odd p: a small negative cell beside a large positive one keeps S > 0
        x[..., 1::2] = -np.minimum(np.abs(x[..., 1::2]), np.abs(x[..., 0::2]) / 2)
    _within_own_bound(spec, x)


def test_max_lowering_at_the_largest_values_is_exact() -> None:
    # a max rounds nothing: the largest finite value and its negation come through as they are
    for dt in (np.float16, np.float32, np.float64):
        top = np.finfo(dt).max
        x = np.array([[[top, -top, top / 2, -top]]], dtype=dt)
        y = symjac.lower(Pool("max", (2,)), x.shape).forward(x)
        assert y.tolist() == [[[float(top), float(top / 2)]]]
        assert Fraction(float(y[0, 0, 0])) == Fraction(float(top))


def test_lp_bound_with_a_huge_cell_beside_a_fine_one() -> None:
    """Hypothesis's find: 2^972 beside 2^0.5 (den 2^52) has a numerator 2^1024, past float64,
    which the bound's window maximum converted to float (OverflowError); y = 2^972 + √2 is fine."""
    x = np.array([[[1.0, 1.0, 1.0, 1.0, 2.0**972, np.exp2(0.5)]]])
    _within_own_bound(Pool("lp", (2,), p=1), x)
