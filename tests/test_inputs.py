"""Input families: exact in the working dtype, distinct within windows, and targeted."""

import numpy as np
import pytest

import symjac
from symjac import Pool
from symjac.verifiers.pool._inputs import (all_negative_input, distinct_input, families, near_tie_dy, near_tie_input)

ml_dtypes = pytest.importorskip("ml_dtypes")
DTYPES = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
SPECS = [Pool("max", 3, stride=1, padding=1), Pool("avg", (2, 3), stride=(1, 2), padding="same"),
         Pool("max", (5,), stride=2, dilation=2, padding=(3,), ceil_mode=True)]
SHAPES = [(2, 3, 6, 7), (2, 3, 6, 7), (2, 3, 11)]


def windows_distinct(g, x):
    xc = g.to_canonical(x).astype(np.float64)
    for w in range(g.n_out):
        cells = g.cells[w][g.valid[w]]
        vals = xc[:, cells]
        assert all(len(set(row.tolist())) == len(cells) for row in vals), w


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spec, shape", list(zip(SPECS, SHAPES)), ids=["max3", "avg_same", "max_dil"])
@pytest.mark.parametrize("make", [distinct_input, all_negative_input, near_tie_input], ids=lambda f: f.__name__)
def test_families_are_exact_and_distinct_within_windows(make, spec, shape, dtype):
    g = symjac.resolve(spec, shape)
    x = make(g, dtype, 0)
    assert x.dtype == dtype and x.shape == shape
    windows_distinct(g, x)
    # Exact: the float64 value converts back to the same element of the working dtype.
    assert np.array_equal(x.astype(np.float64).astype(dtype).view(f"u{dtype.itemsize}"), x.view(f"u{dtype.itemsize}"))


def test_all_negative_is_negative():
    g = symjac.resolve(SPECS[0], SHAPES[0])
    assert (all_negative_input(g).max() < 0) and (all_negative_input(g, np.float16).max() < 0)


@pytest.mark.parametrize("dtype, lower", [(np.float64, np.float32), (np.float32, np.float16)])
def test_near_ties_coincide_in_the_next_lower_precision(dtype, lower):
    g = symjac.resolve(SPECS[0], SHAPES[0])
    x = near_tie_input(g, dtype)
    # Rounded by NumPy's own cast: every value becomes 1, so every window ties there.
    assert len(np.unique(x)) == 9 and np.all(x.astype(lower) == 1)
    dy = near_tie_dy(g, dtype)
    assert np.all(np.abs(dy).astype(lower) == 1) and len(np.unique(np.abs(dy))) == dy.size


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)], ids=str)
def test_near_ties_one_bit_fewer_for_half_precisions(dtype):
    # p bits -> p - 1 bits: neighbours 1 and 1 + ulp differ in the last bit only; rounding
    # 1 + ulp to p - 1 bits is a tie between 1 and 1 + 2 ulp, resolved to even: 1.
    g = symjac.resolve(SPECS[0], SHAPES[0])
    values = np.unique(near_tie_input(g, dtype).astype(np.float64))
    ulp = 2.0**-10 if dtype == np.float16 else 2.0**-7
    assert values.tolist() == [1 + q * ulp for q in range(9)]


def test_families_per_spec():
    assert families(symjac.resolve(Pool("max", 3, stride=1, padding=1), (1, 1, 4, 4))) == (
        "all_negative", "near_ties", "orders", "extreme", "nonfinite")
    assert families(symjac.resolve(Pool("max", 2), (1, 1, 4, 4))) == (  # no window touches padding
        "near_ties", "orders", "extreme", "nonfinite")
    assert families(symjac.resolve(Pool("max", 2, ceil_mode=True), (1, 1, 5, 5)))[0] == "all_negative"  # overhang
    assert families(symjac.resolve(Pool("avg", 3, stride=1, padding=1), (1, 1, 4, 4))) == ("near_ties", "extreme",
                                                                                          "nonfinite")
    # lp: no exact rational J(x)^T dy for the dense families; extreme and nonfinite as probed passes
    assert families(symjac.resolve(Pool("lp", 2, p=2), (1, 1, 4, 4))) == ("extreme", "nonfinite")


def test_distinct_values_stay_exact_beyond_the_integer_range_of_bfloat16():
    # One 23x23 window, 529 colours: ranks -264..264 are not all exact in bfloat16
    # (p = 8: 257 is not), so values move to consecutive bfloat16 numbers.
    g = symjac.resolve(Pool("max", 23), (2, 1, 23, 23))
    x = distinct_input(g, ml_dtypes.bfloat16)
    values = np.unique(x.astype(np.float64))
    assert len(values) == 529 and not np.all(values == np.round(values))  # not the integers
    windows_distinct(g, x)
