"""Exact arrays: conversion limits (issue 10: no hang on huge exponents, no overflow crash)."""

import math
import time
import warnings
from fractions import Fraction

import numpy as np
import pytest

from symjac import InputError
from symjac._exact import ExactArray, round_fraction, to_fraction


def test_huge_decimal_exponent_is_refused_quickly():
    # Was minutes: Fraction("1e999999999") builds a billion-digit integer.
    t = time.perf_counter()
    with pytest.raises(InputError, match=r"x\[0, 1\]='1e999999999' has a decimal exponent beyond \+-1000"):
        ExactArray.from_any(np.array([[1, "1e999999999"], [3, 4]], dtype=object))
    assert time.perf_counter() - t < 5
    with pytest.raises(InputError, match="exponent"):
        to_fraction("-2.5E-1001")


def test_exponents_within_the_bound_are_exact():
    assert to_fraction("1.5e3") == 1500 and to_fraction(" 2E-3 ") == Fraction(1, 500)
    assert to_fraction("1e1000") == 10**1000


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_rounding_beyond_float_range_is_inf(dtype):
    # IEEE round to nearest: beyond the largest finite value (plus half an ULP) is +-inf.
    assert round_fraction(Fraction(10**400), dtype) == math.inf
    assert round_fraction(-Fraction(10**400), dtype) == -math.inf
    assert round_fraction(Fraction(3, 4), dtype) == 0.75


@pytest.mark.parametrize("dtype, largest, ulp", [
    # IEEE 754 binary16: largest (2 - 2^-10)·2^15 = 65504, its ULP 2^5; binary32: (2 - 2^-23)·2^127, ULP 2^104;
    # bfloat16 (8 significand bits): (2 - 2^-7)·2^127, ULP 2^120
    ("float16", Fraction(65504), Fraction(2**5)),
    ("float32", (2 - Fraction(1, 2**23)) * 2**127, Fraction(2**104)),
    ("bfloat16", (2 - Fraction(1, 2**7)) * 2**127, Fraction(2**120)),
])
def test_rounding_at_the_overflow_threshold_is_ieee_and_quiet(dtype, largest, ulp):
    # Round to nearest: below largest + ulp/2 gives largest, at it (a tie; largest's significand is odd, so
    # the even neighbour is the infinity) and above gives inf. Just below the threshold, float64 rounds the
    # value up onto the threshold itself: a second rounding to the dtype would give inf.
    from symjac.check._rounding import float_dtype

    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")  # the [bfloat16] extra
    dt = float_dtype(dtype)
    threshold = largest + ulp / 2
    below = threshold - Fraction(1, 2**1100)
    assert float(below) == float(threshold)  # the double rounding this guards against
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in nextafter" at the largest value
        assert float(round_fraction(below, dt)) == float(largest)
        assert float(round_fraction(-below, dt)) == -float(largest)
        assert float(round_fraction(largest, dt)) == float(largest)
        assert float(round_fraction(threshold, dt)) == math.inf
        assert float(round_fraction(-threshold, dt)) == -math.inf


@pytest.mark.parametrize("values", [
    [0.25, -1.5, 3.0, 0.0],                 # 2 fractional bits: the scaled fast path
    [1 / 2**40, 7.0, -(2**20) - 0.5],       # 40 bits
    [3 * 2.0**-61, 1.0],                    # 61 bits, numerators below 2^62
    [0.5, 2.0**61],                         # 2^61 * 2 reaches 2^62: the significand path
    [5e-324, 1.0],                          # subnormal: 1074 bits
    [0.1, 1e300],                           # 0.1 needs 55 bits next to a huge value
])
def test_floats_convert_over_the_smallest_power_of_two(values):
    # Independent reference: Fraction(float) is exact; the smallest common denominator of
    # dyadic rationals is the largest of their (power-of-two) denominators.
    exact = ExactArray.from_any(np.array(values))
    fracs = [Fraction(v) for v in values]
    assert exact.den == max(f.denominator for f in fracs)
    assert [Fraction(int(n), exact.den) for n in exact.num] == fracs


@pytest.mark.parametrize("mode, kernel, shape, layout", [
    ("avg", 5, (2, 1, 7, 6), "channels_first"), ("avg", (3, 4), (2, 1, 7, 6), "channels_first"),
    ("max", 3, (2, 1, 7, 6), "channels_first"), ("avg", 15, (1, 1, 16, 17), "channels_first"),
    ("avg", 3, (2, 5, 4, 3), "channels_last"), ("max", 2, (2, 5, 4, 3), "channels_last")])
@pytest.mark.parametrize("values", ["extreme", "near_ties"])
def test_products_of_large_numerators_are_exact(mode, kernel, shape, layout, values):
    # The Jacobian's products where numerator times weight leaves int64: x near float64's largest
    # value (numerators of ~1024 bits, a common power of two taken out and put back), or near-tie
    # values 1 + q*2^-33 against the 15x15 SAME windows' weights (divisors 64..225, their lcm ~2^37:
    # weights cut into limbs), against Fractions summed window by window from the geometry's cells:
    # y = J x and dx = J^T dy.
    import symjac
    from symjac.pool._stamp import apply, stamp

    spec = symjac.Pool(mode, kernel, stride=1, padding="same", layout=layout)
    g = symjac.resolve(spec, shape)
    rng = np.random.default_rng(0)
    out_shape = g.output_shape
    if values == "extreme":
        x = rng.uniform(0.5, 1.0, shape) * np.finfo(np.float64).max * rng.choice([-1, 1], shape)
        dy = rng.uniform(0.5, 1.0, out_shape) * 2.0**1000
    else:
        x = 1 + rng.integers(0, 2**20, shape) * 2.0**-33
        dy = -1 - rng.integers(0, 2**20, out_shape) * 2.0**-33
    ex = ExactArray.from_any(x)
    st = stamp(g, ex)
    y = apply(st, ex, transpose=False)
    dx = apply(st, ExactArray.from_any(dy), transpose=True)
    xs, dys = g.to_canonical(x), g.to_canonical(dy, g.out_spatial)
    cells, valid = g.cells, g.valid
    for b in range(g.batch):
        want_dx = [Fraction(0)] * g.n_in
        for w in range(cells.shape[0]):
            members = [int(c) for c, v in zip(cells[w], valid[w]) if v]
            if mode == "avg":
                weights = {c: Fraction(1, len(members)) for c in members}
            else:  # the first maximum
                top = max(members, key=lambda c: (Fraction(xs[b, c]), -c))
                weights = {top: Fraction(1)}
            want_y = sum(Fraction(xs[b, c]) * wt for c, wt in weights.items())
            got_y = Fraction(int(g.to_canonical(y.num, g.out_spatial)[b, w]), y.den)
            assert got_y == want_y
            for c, wt in weights.items():
                want_dx[c] += Fraction(dys[b, w]) * wt
        got = g.to_canonical(dx.num)[b]
        assert [Fraction(int(n), dx.den) for n in got] == want_dx
