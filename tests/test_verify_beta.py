"""verify names the β of implementations built as β·split + (1−β)·first, and flags β outside the Clarke set.

The implementations are written here in NumPy, independently of symjac's engine:
each 2x2 window routes β/|I| to every tied cell plus 1 − β to the first (row-major).
Expected verdicts follow from the Clarke condition 0 <= β <= |I|/(|I|−1) derived in
symjac/pool/_beta.py (and by hand in tests/test_beta.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac import Beta, Pool

SPEC = Pool("max", 2, stride=1)


def max_pool_2x2(beta: float):
    def forward(x):
        return np.stack([np.stack([x[..., i:i + 2, j:j + 2].max(axis=(-2, -1)) for j in range(x.shape[-1] - 1)], -1)
                         for i in range(x.shape[-2] - 1)], -2)

    def backward(x, dy):
        dx = np.zeros_like(x)
        for i in range(x.shape[-2] - 1):
            for j in range(x.shape[-1] - 1):
                win = x[..., i:i + 2, j:j + 2]
                top = win.max(axis=(-2, -1), keepdims=True)  # NaN where the window holds one: its maximum
                tied = ((win == top) | (np.isnan(win) & np.isnan(top))).astype(x.dtype)
                flat = tied.reshape(*tied.shape[:-2], 4)
                first = ((np.cumsum(flat, axis=-1) == 1) & (flat == 1)).reshape(tied.shape).astype(x.dtype)
                split = tied / tied.sum(axis=(-2, -1), keepdims=True)
                route = x.dtype.type(beta) * split + x.dtype.type(1 - beta) * first
                dx[..., i:i + 2, j:j + 2] += route * dy[..., i:i + 1, j:j + 1]
        return dx

    return forward, backward


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("beta, policy, value", [(0, "first", "0"), (0.25, "beta:1/4", "1/4"), (1, "split", "1")])
def test_verify_names_beta(beta, policy, value, dtype):
    fwd, bwd = max_pool_2x2(beta)
    report = symjac.verify(SPEC, backward=bwd, forward=fwd, input_shape=(2, 3, 5, 5), dtype=dtype)
    assert report.ok, report
    assert report.stats["tie_policy"] == policy and str(report.stats["tie_beta"]) == value
    if policy.startswith("beta:"):
        assert "tie policy β = 1/4;" in report.summary()  # (then the NaN policy: non-finite inputs)


def test_verify_flags_beta_3_with_its_own_category():
    # β = 3 > n/(n−1) for every tie size n in {2, 3, 4} of the 0/1 tie pass (limits 2, 3/2, 4/3):
    # every tied window's first cell gets 1 − 3 + 3/n < 0.
    fwd, bwd = max_pool_2x2(3)
    report = symjac.verify(SPEC, backward=bwd, forward=fwd, input_shape=(2, 3, 5, 5))
    assert report.categories() == ["tie_beta_outside_clarke"]
    assert report.stats["tie_policy"] == "beta:3" and not report.stats["backward_ok"]
    assert "with β = 3 at tied inputs, outside the Clarke set" in report.findings[0].message
    assert "needs 0 <= β <= n/(n−1): 2, 3/2, 4/3" in report.findings[0].message


def test_beta_3_2_valid_on_three_cell_ties_only():
    # β = 3/2 is the Clarke limit of a 3-cell tie (3/(3−1)) and above the 4-cell limit 4/3.
    # At the seed map every tie has 3 cells: the rows are valid and named.
    fwd, bwd = max_pool_2x2(1.5)
    seed_map = np.array([[[[1, 1, 1], [1, 0, 1], [1, 1, 1]]]], dtype=np.float64)
    report = symjac.verify(SPEC, backward=bwd, forward=fwd, x=seed_map)
    assert "tie_not_subgradient" not in report.categories() and report.stats["tie_policy"] == "beta:3/2"
    # The 0/1 tie pass on 2x3 slices of 5x5 has 4-cell ties (all-ones windows): only those leave the set.
    report = symjac.verify(SPEC, backward=bwd, forward=fwd, input_shape=(2, 3, 5, 5))
    assert report.categories() == ["tie_beta_outside_clarke"]
    assert "(a tie of n cells needs 0 <= β <= n/(n−1): 4/3 here)" in report.findings[0].message


def test_demanded_beta():
    fwd, bwd = max_pool_2x2(0.25)
    assert symjac.verify(SPEC, backward=bwd, input_shape=(1, 2, 4, 4), tie=Beta("1/4")).ok
    assert symjac.verify(SPEC, backward=bwd, input_shape=(1, 2, 4, 4), tie="beta:1/4").ok
    report = symjac.verify(SPEC, backward=bwd, input_shape=(1, 2, 4, 4), tie="split")
    assert report.categories() == ["tie_policy"]
    assert report.findings[0].message == "at ties the backward follows policy 'beta:1/4'; 'split' was demanded"
    # Beta(0) is the first policy by name.
    fwd0, bwd0 = max_pool_2x2(0)
    assert symjac.verify(SPEC, backward=bwd0, input_shape=(1, 2, 4, 4), tie=Beta(0)).ok
