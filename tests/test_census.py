"""Tie census: exact ties (bifurcation) vs rounding ties (compensation), answers derived by hand."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import symjac
from symjac import Beta, InputError, Pool

F = Fraction
SPEC = Pool("max", (2,))   # 1-D, kernel 2, stride 2: windows are the pairs (0,1), (2,3), (4,5), (6,7)


def constructed():
    """Two batch items, float16, windows classified by hand.

    item 0: (1, 1)        tied in the reference and in float16       -> exact
            (1, 1+2^-11)  1 + 2^-11 is halfway between the float16 neighbours 1 and
                          1 + 2^-10 and rounds to even, 1: tied only in float16 -> rounding
            (1/3, 1/3)    tied in the reference; in x the second is moved one ulp up
                          (as a different rounding path would)      -> broken
            (5, 3)        -> untied
    item 1: (2, 2) exact tie, then three untied pairs.
    """
    ref = np.array([[[1, 1, 1, F(2049, 2048), F(1, 3), F(1, 3), 5, 3]],
                    [[2, 2, 3, 4, 5, 6, 7, 8]]], dtype=object)
    x = np.array([[[float(v) for v in row] for row in item] for item in ref]).astype(np.float16)
    x[0, 0, 5] = np.nextafter(x[0, 0, 4], np.float16(1))
    return x, ref


def test_census_kinds_and_counts():
    x, ref = constructed()
    c = symjac.tie_census(SPEC, x, ref)
    # ZONES order: untied, exact, rounding, broken.
    assert c.kinds.tolist() == [[[1, 2, 3, 0]], [[1, 0, 0, 0]]]
    assert c.per_item.tolist() == [[1, 1, 1, 1], [3, 1, 0, 0]]
    assert c.totals == {"untied": 4, "exact": 2, "rounding": 1, "broken": 1}
    assert c.items_with("rounding") == (0,)


def test_census_difference_between_betas():
    x, ref = constructed()
    # dy = 1 everywhere except item 1's tied window. At a pair tie J_split − J_first is
    # (1/2, 1/2) − (1, 0) = (−1/2, 1/2); with β1 − β0 = 1 that is the difference.
    dy = np.ones((2, 1, 4))
    dy[1, 0, 0] = 0
    c = symjac.tie_census(SPEC, x, ref, dy=dy)
    half = F(1, 2)
    assert c.difference.to_fractions().tolist() == [[[-half, half, -half, half, 0, 0, 0, 0]], [[0] * 8]]
    # Item 0 differs through its exact tie (bifurcation) and its rounding tie (compensation);
    # item 1's exact tie gets dy = 0, so its backprop does not depend on β.
    assert c.differs == {"bifurcation": (0,), "compensation": (0,)}
    # β = 0 vs 3: 3·(−1/2, 1/2).
    c3 = symjac.tie_census(SPEC, x, ref, dy=dy, betas=(0, 3))
    assert c3.difference.to_fractions()[0, 0, :2].tolist() == [F(-3, 2), F(3, 2)]
    assert c3.policies == (Beta(0), Beta(3))


def test_census_without_reference_counts_every_tie_as_exact():
    x, _ = constructed()
    c = symjac.tie_census(SPEC, x)
    # In float16 item 0 ties in its first two windows; the (1/3, 1/3+ulp) pair is distinct.
    assert c.totals == {"untied": 5, "exact": 3, "rounding": 0, "broken": 0}


def test_census_json():
    x, ref = constructed()
    d = json.loads(json.dumps(symjac.tie_census(SPEC, x, ref).to_dict()))
    assert d["dtype"] == "float16" and d["policies"] == ["beta:0", "beta:1"]
    assert d["per_item"][1] == {"untied": 3, "exact": 1, "rounding": 0, "broken": 0}
    assert d["difference_max_abs"] == "1/2"


def test_lp_census_all_zero_windows():
    # Norm pooling in float16. Reference windows: (0, 0) all zero -> exact; (2^-30, 0): 2^-30
    # is below half the smallest float16 subnormal 2^-24, so it rounds to 0 -> rounding;
    # (0, 0) in the reference but 2^-24 in x (rounding noise) -> broken; (1, 0) -> untied.
    ref = np.array([0, 0, F(1, 2**30), 0, 0, 0, 1, 0], dtype=object)
    x = np.array([0, 0, 2.0**-30, 0, 2.0**-24, 0, 1, 0]).astype(np.float16)
    c = symjac.tie_census(Pool("lp", (2,), p=2), x, ref)
    assert c.kinds.tolist() == [1, 2, 3, 0]
    # zero_window "one" − "zero": 1 on each cell of the windows all zero in x (dy = ones).
    assert c.difference.to_fractions().tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert c.differs == {"bifurcation": (0,), "compensation": (0,)}
    assert c.policies == ("zero", "one")


def test_census_errors():
    x, ref = constructed()
    with pytest.raises(InputError, match="reference has shape"):
        symjac.tie_census(SPEC, x, ref[:1])
    with pytest.raises(InputError, match="no ties"):
        symjac.tie_census(Pool("avg", (2,)), x)


def test_census_batch_items_channels_last():
    # (N=2, L=4, C=2) channels_last, kernel 2: item 1, channel 0 has the tie (5, 5); all else distinct.
    x = np.array([[[1, 2], [3, 4], [5, 6], [7, 8]],
                  [[5, 1], [5, 2], [0, 3], [1, 4]]], dtype=np.float64)
    c = symjac.tie_census(Pool("max", (2,), layout="channels_last"), x)
    assert c.per_item.tolist() == [[4, 0, 0, 0], [3, 1, 0, 0]]
    assert c.differs == {"bifurcation": (1,), "compensation": ()}
