"""verify on lp pooling: PyTorch's lp_pool2d passes within the derived bound; mutants and zero windows are found.

Expected verdicts: PyTorch 2.13 agrees with the exact values within the bound of
symjac/pool/_lp.py (tests/test_lp.py, 240 configurations); its p = 1 backward is 0
where the window sums to 0, while the derivative of the window sum is 1 (derived in
symjac/pool/_lp.py, checked against torch in tests/test_lp.py). PyTorch's power sum is
formed before any scale and overflows at the ``extreme`` family's inputs (tests/test_extreme.py),
so its verifications here run the other families (``TORCH``).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac import Pool

torch = pytest.importorskip("torch")

#: The families PyTorch's lp_pool is verified at here: all but ``extreme`` (its known overflow).
TORCH = {"families": ("nonfinite",)}


def torch_lp(p: int, mutate=None):
    def forward(x):
        return torch.nn.functional.lp_pool2d(torch.tensor(x), p, 2).numpy()

    def backward(x, dy):
        xt = torch.tensor(x, requires_grad=True)
        torch.nn.functional.lp_pool2d(xt, p, 2).backward(torch.tensor(dy))
        g = xt.grad.numpy()
        return g if mutate is None else mutate(g)

    return forward, backward


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [2, 3])
def test_torch_lp_pool2d_verifies(p, dtype):
    fwd, bwd = torch_lp(p)
    report = symjac.verify(Pool("lp", 2, p=p), backward=bwd, forward=fwd, input_shape=(2, 3, 6, 6), dtype=dtype,
                           **TORCH)
    assert report.ok, report
    # The 0/1 tie pass has all-zero windows: PyTorch sends them nothing, the "zero" policy.
    assert report.stats["zero_window"] == "zero" and report.summary().endswith("zero-window policy zero")


def test_torch_p1_zero_sum_windows_get_nothing():
    fwd, bwd = torch_lp(1)
    report = symjac.verify(Pool("lp", 2, p=1), backward=bwd, forward=fwd, input_shape=(2, 3, 6, 6), **TORCH)
    assert report.categories() == ["missing_windows"]
    assert "at tied inputs" in report.findings[0].message      # only the 0/1 pass has zero-sum windows


def test_scaled_gradient_is_wrong_weights():
    # 1 + 2^-20 is far outside the bound (about 20 ulps of float64).
    fwd, bwd = torch_lp(2, mutate=lambda g: g * (1 + 2.0**-20))
    report = symjac.verify(Pool("lp", 2, p=2), backward=bwd, forward=fwd, input_shape=(2, 3, 6, 6), **TORCH)
    # the finite differences of the (correct) forward, at step 2^-26, see it too
    assert report.categories() == ["wrong_weights", "not_fd_consistent"]
    fwd_ok, bwd_ok = torch_lp(2)
    report = symjac.verify(Pool("lp", 2, p=2), backward=bwd_ok, forward=lambda x: fwd_ok(x) * (1 + 2.0**-20),
                           input_shape=(2, 3, 6, 6), **TORCH)
    assert report.categories() == ["forward_values", "not_fd_consistent"]  # the correct backward is not its slope


def test_zero_window_one_outside_clarke_unless_the_spec_says_so():
    # Rows of ones at all-zero windows: Σ|g|² = 4 > 1, outside the dual ball of a 2x2 window.
    def ones_at_zero_windows(x, dy):
        g = torch_lp(2)[1](x, dy)
        win = x.reshape(*x.shape[:2], x.shape[2] // 2, 2, x.shape[3] // 2, 2)
        zero = (win == 0).all(axis=(3, 5))
        up = np.where(zero, dy, 0).repeat(2, axis=2).repeat(2, axis=3)
        return (g + up).astype(x.dtype)

    fwd = torch_lp(2)[0]
    report = symjac.verify(Pool("lp", 2, p=2), backward=ones_at_zero_windows, forward=fwd, input_shape=(2, 3, 6, 6),
                           **TORCH)
    assert report.categories() == ["tie_not_subgradient"]
    assert "all-zero window" in report.findings[1].message
    report = symjac.verify(Pool("lp", 2, p=2, zero_window="one"), backward=ones_at_zero_windows, forward=fwd,
                           input_shape=(2, 3, 6, 6), **TORCH)
    assert report.ok and report.stats["zero_window"] == "one"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_lowering_verifies(dtype):
    for p in (1, 2, 3):
        low = symjac.lower(Pool("lp", 2, p=p), (2, 3, 6, 6))
        report = symjac.verify(Pool("lp", 2, p=p), backward=low.vjp, forward=low.forward, input_shape=(2, 3, 6, 6),
                               dtype=dtype)
        assert report.ok, (p, report)
