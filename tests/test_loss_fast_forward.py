"""verify_loss's fast route with a forward= (issue 24 item 5): the loss value and the
finite-difference probes decided in float64, the exact route where they are not.

Each verdict is compared with the exact route's (``_verify(..., fast=False)``) on the same
inputs: the same categories, the same message, the same probes. The forwards are NumPy's
closed forms of the mean loss, each derived beside it; the faults are planted (S·L, a
few ULPs off). On main a forward= always took the exact route (no ``forward_filter`` in
the stats), so the passing tests fail there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import symjac
from symjac.check._call import Guard
from symjac.verifiers.loss.fast import _filter as _loss_fast
from symjac.verifiers.loss._verify import _verify

S = 1024


@pytest.fixture
def always_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loss_fast, "FAST_MIN", 0)


def _case(kind: str, rows: int = 60, classes: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """(pred, label, dL/dpred, forward) of the mean loss, unscaled."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal((rows, classes)) * 2
    if kind == "mse":  # ℓ = (z - y)², L = mean ℓ, dL/dz = 2(z - y)/n
        y = rng.standard_normal(z.shape)
        return z, y, 2 * (z - y) / z.size, lambda a, b: np.mean((a - b) ** 2)
    if kind == "sigmoid_ce":  # ℓ = y·sp(-z) + (1 - y)·sp(z) = sp(z) - y·z, dℓ/dz = σ(z) - y
        y = rng.random(z.shape).round(3)
        return z, y, (1 / (1 + np.exp(-z)) - y) / z.size, lambda a, b: np.mean(np.logaddexp(0, a) - b * a)
    # softmax_ce, one-hot rows: ℓ = logsumexp(z) - Σ t·z per row, mean over rows; dL/dz = (p - t)/rows
    y = np.eye(classes)[rng.integers(0, classes, rows)]
    e = np.exp(z - z.max(axis=-1, keepdims=True))

    def forward(a: np.ndarray, b: np.ndarray) -> Any:
        top = a.max(axis=-1)
        return np.mean(top + np.log(np.exp(a - top[:, None]).sum(axis=-1)) - (b * a).sum(axis=-1))

    return z, y, (e / e.sum(axis=-1, keepdims=True) - y) / rows, forward


def _both(loss: symjac.Loss, d: np.ndarray, forward: Any, z: np.ndarray,
          y: np.ndarray) -> tuple[symjac.Report, symjac.Report]:
    fast = symjac.verify_loss(loss, derivative=lambda *a: d, forward=forward, pred=z, label=y)
    exact = _verify(loss, lambda *a: d, forward, z, y, None, None, fast=False).report
    return fast, exact


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_right_forward_is_decided_in_float64_with_the_exact_routes_verdict(kind: str, always_fast: None) -> None:
    z, y, d, forward = _case(kind)
    fast, exact = _both(symjac.Loss(kind, scale=S), d * S, forward, z, y)
    assert fast.ok and exact.ok
    assert "forward_filter" in fast.stats and "fast_filter" in fast.stats
    assert fast.stats["fd_checked"] == exact.stats["fd_checked"] == 32
    assert fast.stats["fd_consistent"] and exact.stats["fd_consistent"]
    assert fast.headline.endswith("; forward within bound; FD-consistent at 32 points")


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_forward_that_returns_s_times_l_is_named_as_the_exact_route_names_it(kind: str, always_fast: None) -> None:
    z, y, d, forward = _case(kind)
    fast, exact = _both(symjac.Loss(kind, scale=S), d * S, lambda a, b: S * forward(a, b), z, y)
    assert not fast.ok and fast.categories() == exact.categories()
    assert [f.message for f in fast.findings] == [f.message for f in exact.findings]
    assert "your forward equals S·L (S = 1024, the loss scale)" in fast.findings[0].message


def _ulps_up(x: float, k: int) -> float:
    for _ in range(k):
        x = float(np.nextafter(x, np.inf))
    return x


@pytest.mark.parametrize("k, fast_decides, ok", [(6, True, True), (11, False, True), (12, False, False)])
def test_a_forward_a_few_ulps_off_passes_within_its_bound_and_is_caught_beyond(
        k: int, fast_decides: bool, ok: bool, always_fast: None) -> None:
    # mse on 8 elements z = 1.5, y = 0.5: d = 1, ℓ = 1 exactly, L = 1. The bound of
    # symjac.loss._bounds: per element e = u(1 + γ_2)·R + γ_2·(ℓ + cond) + 2η with SymPy's
    # (-y + z)**2: R = 2|d|(|y| + |z|) + d² = 5 (running_error's sum and power rules),
    # cond = 2|d|(|z| + |y|) = 4, depth 2; then L's bound (1/8)(Σe + γ_7·Σℓ) + γ_1·L + 9η
    # = 15u + 7u + u (+ O(u²)) = 23u. One ulp above 1 is 2u: 11 ulp (22u) is within, 12
    # (24u) beyond. The float64 filter bounds B by nearly 23u below and above, but its
    # enclosure of L has a radius of about 4u (each ℓ_i = (z - y)² charged 3u: the
    # subtraction's u, doubled by the square, and the square's own u; the product by 1/8 u): 6 ulp (12u, and as much at the finite-difference
    # points) is decided there; 11 (22u + 4u > 23u) and 12 (24u - 4u < 23u) are left to the
    # exact route.
    z, y = np.full((2, 4), 1.5), np.full((2, 4), 0.5)
    d = 2 * (z - y) / z.size

    def forward(a: np.ndarray, b: np.ndarray) -> float:
        return _ulps_up(float(np.mean((a - b) ** 2)), k)

    fast, exact = _both(symjac.Loss("mse"), d, forward, z, y)
    assert fast.ok is exact.ok is ok
    assert ("forward_filter" in fast.stats) is fast_decides
    assert fast.categories() == exact.categories()
    assert [f.message for f in fast.findings] == [f.message for f in exact.findings]
    if not ok:
        assert fast.categories() == ["forward_values"] and "forward returned 1.0000000000000027" in fast.headline


def test_a_forward_that_changes_its_input_takes_the_exact_route_and_is_named(always_fast: None) -> None:
    z, y, d, forward = _case("mse")

    def writes(a: np.ndarray, b: np.ndarray) -> Any:
        got = forward(a, b)
        a[0, 0] = 7.0
        return got

    fast, exact = _both(symjac.Loss("mse"), d, writes, z, y)
    assert "mutates_inputs" in fast.categories() and fast.categories() == exact.categories()


def test_the_guard_compares_with_the_reference_it_is_given() -> None:
    # reference= replaces the copy per call: a write into an argument is still found
    found: list[Any] = []
    original = np.arange(6.0)

    def writes(a: np.ndarray) -> np.ndarray:
        a[3] = -1.0
        return a.copy()

    guard = Guard(writes, "derivative", ("pred",), found, timeout=None)
    guard.array(original.copy(), shape=(6,), dtype=None, index_name="pred", reference=(original,))
    assert guard.mutated == {"pred"} and [f.category for f in found] == ["mutates_inputs"]
    assert "3.0 -> -1.0" in found[0].message
    with pytest.raises(ValueError, match="reference="):
        guard.call(original + 1, reference=(original,))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_right_forward_at_a_million_entries_takes_the_fast_route(kind: str) -> None:
    z, y, d, forward = _case(kind, rows=100_000, classes=10)
    r = symjac.verify_loss(symjac.Loss(kind), derivative=lambda *a: d, forward=forward, pred=z, label=y)
    assert r.ok and "forward_filter" in r.stats and r.stats["fd_checked"] == 32
