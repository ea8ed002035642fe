"""Exact arrays: conversion limits (issue 10: no hang on huge exponents, no overflow crash)."""

import math
import time
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
