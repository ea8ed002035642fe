"""The census benchmark's exact convolution, checked against PyTorch's conv2d (float64)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import census  # noqa: E402


def test_exact_conv_matches_torch_conv2d():
    k = census.load_digits(0)[:64]
    w, b = census.weights(4, 0)
    z, _ = census.conv_exact(k, w, b)
    zt = torch.nn.functional.conv2d(torch.tensor(k / 16.0), torch.tensor(w[:, None].astype(np.float64)),
                                    torch.tensor(b.astype(np.float64))).numpy()
    # Float64 conv of 9 products plus a bias: within γ_11·(Σ|w·x| + |b|) of the exact value
    # (Higham, a sum of 10 terms, each one product): mass from |w|, |x| in float64.
    mass = torch.nn.functional.conv2d(torch.tensor(k / 16.0), torch.tensor(np.abs(w[:, None]).astype(np.float64)),
                                      torch.tensor(np.abs(b).astype(np.float64))).numpy()
    u = 2.0**-53
    exact = z.num.astype(np.float64) / z.den if z.num.dtype != object else np.vectorize(
        lambda n: float(Fraction(int(n), z.den)))(z.num)
    assert np.all(np.abs(zt - exact) <= 11 * u / (1 - 11 * u) * mass * 1.01 + 2 * u * np.abs(exact))
    assert np.all(np.abs(census.conv_float(k, w, b, np.float64) - exact) <= 11 * u / (1 - 11 * u) * mass * 1.01
                  + 2 * u * np.abs(exact))


def test_two_block_exact_conv_matches_torch_conv2d():
    # Second-block shape: 4 input channels, zero padding 1. A sum of 4·9 products plus a bias:
    # within γ_37·(Σ|w·x| + |b|) of the exact value (Higham).
    rng = np.random.default_rng(5)
    x = (rng.integers(0, 64, size=(16, 4, 4, 4)) / 64).astype(np.float64)
    w = (rng.standard_normal((3, 4, 3, 3)) / 6).astype(np.float32)
    b = (rng.standard_normal(3) / 10).astype(np.float32)
    z = census.conv_same_exact(census.ExactArray.from_any(x), w, b)
    exact = np.vectorize(lambda n: float(Fraction(int(n), z.den)))(z.num)
    conv = torch.nn.functional.conv2d
    zt = conv(torch.tensor(x), torch.tensor(w.astype(np.float64)), torch.tensor(b.astype(np.float64)), padding=1).numpy()
    mass = conv(torch.tensor(np.abs(x)), torch.tensor(np.abs(w).astype(np.float64)),
                torch.tensor(np.abs(b).astype(np.float64)), padding=1).numpy()
    u = 2.0**-53
    tol = 37 * u / (1 - 37 * u) * mass * 1.01 + 2 * u * np.abs(exact)
    assert np.all(np.abs(zt - exact) <= tol)
    assert np.all(np.abs(census.conv_same_float(x, w, b, np.float64) - exact) <= tol)
