"""verify_loss's fast route for a *wrong* forward= (issue 24 item 5): a forward value proven
beyond its bound in float64, reported in the exact route's words.

Each report is compared with the exact route's (``_verify(..., fast=False)``) on the same
inputs: the same verdict, categories and messages (the printed exact L, the ULP ratios,
the S·L / c·L hint, the finite-difference finding). The forwards are NumPy's closed forms
of the reduced loss (each derived beside it) with planted faults. On main a forward beyond
its bound, a NaN forward, and any forward with a wrong derivative took the exact route
(no ``forward_filter`` with ``beyond`` in the stats, no ``fast_filter``), so the route
assertions fail there.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

import symjac
from symjac.check._rounding import finfo
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import kind_of
from symjac.verifiers.loss.fast import _filter as _loss_fast
from symjac.verifiers.loss._verify import _verify

S = 1024
U = 2.0**-53


@pytest.fixture
def always_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loss_fast, "FAST_MIN", 0)


def _case(kind: str, reduction: str, rows: int = 60, classes: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """(pred, label, dL/dpred, forward) of the unscaled loss under ``reduction``.

    The reduced loss is ``r·Σ_i ℓ_i`` with ``r`` = 1/(number of elements) for "mean", 1 for
    "sum" and 1/rows for "batch_mean" (pred's first axis); the derivative is ``r·dℓ_i/dz``."""
    rng = np.random.default_rng(7)
    z = rng.standard_normal((rows, classes)) * 2
    if kind == "mse":  # ℓ = (z - y)², dℓ/dz = 2(z - y)
        y = rng.standard_normal(z.shape)
        ell: Any = lambda a, b: (a - b) ** 2  # noqa: E731
        h = 2 * (z - y)
    elif kind == "sigmoid_ce":  # ℓ = y·sp(-z) + (1 - y)·sp(z) = sp(z) - y·z, dℓ/dz = σ(z) - y
        y = rng.random(z.shape).round(3)
        ell = lambda a, b: np.logaddexp(0, a) - b * a  # noqa: E731
        h = 1 / (1 + np.exp(-z)) - y
    else:  # softmax_ce, one-hot rows: ℓ = logsumexp(z) - Σ t·z per row, dℓ/dz = p - t
        y = np.eye(classes)[rng.integers(0, classes, rows)]

        def ell(a: np.ndarray, b: np.ndarray) -> Any:
            top = a.max(axis=-1)
            return top + np.log(np.exp(a - top[:, None]).sum(axis=-1)) - (b * a).sum(axis=-1)

        e = np.exp(z - z.max(axis=-1, keepdims=True))
        h = e / e.sum(axis=-1, keepdims=True) - y
    elements = rows if kind == "softmax_ce" else z.size
    r = {"mean": 1 / elements, "sum": 1.0, "batch_mean": 1 / rows}[reduction]
    return z, y, h * r, lambda a, b: np.sum(ell(a, b)) * r


def _both(loss: symjac.Loss, d: np.ndarray, forward: Any, z: np.ndarray,
          y: np.ndarray) -> tuple[symjac.Report, symjac.Report]:
    fast = symjac.verify_loss(loss, derivative=lambda *a: d, forward=forward, pred=z, label=y)
    exact = _verify(loss, lambda *a: d, forward, z, y, None, None, fast=False).report
    return fast, exact


def _same(fast: symjac.Report, exact: symjac.Report) -> None:
    assert fast.ok is exact.ok
    assert fast.categories() == exact.categories()
    assert [f.message for f in fast.findings] == [f.message for f in exact.findings]
    assert fast.headline == exact.headline


def _took_fast_beyond(report: symjac.Report) -> bool:
    return "fast_filter" in report.stats and report.stats.get("forward_filter", {}).get("beyond") is True


FAULTS = {  # the forward's fault, from the right forward f
    "S·L": lambda f: lambda a, b: S * f(a, b),
    "2·L": lambda f: lambda a, b: 2 * f(a, b),
    "1e-6 relative": lambda f: lambda a, b: f(a, b) * (1 + 1e-6),
    "1e-3 absolute": lambda f: lambda a, b: f(a, b) + 1e-3,
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("reduction", ["mean", "sum", "batch_mean"])
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_wrong_forward_takes_the_fast_route_with_the_exact_routes_words(
        kind: str, reduction: str, fault: str, always_fast: None) -> None:
    z, y, d, forward = _case(kind, reduction)
    fast, exact = _both(symjac.Loss(kind, reduction=reduction, scale=S), d * S, FAULTS[fault](forward), z, y)
    assert not exact.ok and exact.categories()[0] == "forward_values"
    _same(fast, exact)
    assert _took_fast_beyond(fast)
    if fault == "S·L":  # the forward's slope is S times the derivative's: the probes disagree too
        assert "your forward equals S·L (S = 1024, the loss scale)" in fast.findings[0].message
        assert fast.categories() == ["forward_values", "not_fd_consistent"]
        assert "(the forward itself disagrees with the exact loss: see forward_values)" in fast.findings[1].message
    elif fault == "2·L":
        assert "your forward equals 2·L (exactly 2 times the exact loss" in fast.findings[0].message
    elif fault == "1e-3 absolute":  # a constant offset: its central differences are right
        assert fast.categories() == ["forward_values"] and fast.stats["fd_consistent"]


def _two_wrong(d: np.ndarray) -> np.ndarray:
    out = d.copy()
    out.reshape(-1)[[1, 7]] = -1.5 * out.reshape(-1)[[1, 7]] + 1e-3  # entries no probe reads (n = 600: 0, 19, ...)
    return out


DERIVATIVE_FAULTS = {  # (the derivative given the right S·dL, the forward's fault, the expected categories)
    "forgets S, forward S·L": (lambda d: d / S, "S·L", ["missing_scale", "forward_values"]),
    "forgets S, forward right": (lambda d: d / S, None, ["missing_scale"]),
    "3·S, forward 2·L": (lambda d: 3 * d, "2·L", ["wrong_scale", "forward_values"]),
    "two wrong, forward 2·L": (_two_wrong, "2·L", ["wrong_values", "forward_values", "not_fd_consistent"]),
}


@pytest.mark.parametrize("case", list(DERIVATIVE_FAULTS))
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_wrong_derivative_with_a_forward_takes_the_fast_route_with_the_exact_routes_findings(
        kind: str, case: str, always_fast: None) -> None:
    # after a derivative finding naming a scale (missing_scale, wrong_scale) the exact route
    # reports no finite-difference probe; after wrong_values it does
    z, y, d, forward = _case(kind, "mean")
    wrong, fault, categories = DERIVATIVE_FAULTS[case]
    f = forward if fault is None else FAULTS[fault](forward)
    fast, exact = _both(symjac.Loss(kind, scale=S), wrong(d * S), f, z, y)
    _same(fast, exact)
    assert fast.categories() == categories
    assert "fast_filter" in fast.stats and "forward_filter" in fast.stats


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_nan_forward_is_reported_on_the_fast_route_as_on_the_exact_one(kind: str, always_fast: None) -> None:
    z, y, d, _ = _case(kind, "mean")
    fast, exact = _both(symjac.Loss(kind, scale=S), d * S, lambda a, b: np.nan, z, y)
    _same(fast, exact)
    assert fast.categories() == ["bad_output"] and "non-finite" in fast.findings[0].message
    assert "fast_filter" in fast.stats and fast.stats["fd"] == "skipped: the forward gave no usable value"


def test_the_printed_exact_loss_is_the_exact_mean_computed_here(always_fast: None) -> None:
    # mse: L = Σ (z - y)²/n in exact rationals (every float is one), printed by mpmath at 10 digits
    z, y, d, forward = _case("mse", "mean")
    exact_l = sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(z.reshape(-1), y.reshape(-1))) \
        / z.size
    with mpmath.workdps(40):
        shown = mpmath.nstr(mpmath.mpf(exact_l.numerator) / exact_l.denominator, 10)
    fast, exact = _both(symjac.Loss("mse"), d, lambda a, b: 2 * forward(a, b), z, y)
    _same(fast, exact)
    assert _took_fast_beyond(fast)
    assert fast.findings[0].message.startswith(f"forward returned {float(2 * forward(z, y))!r}; exact L = {shown}, error ")


@pytest.mark.parametrize("k, ok", [(12700, False), (12600, True)])
def test_a_forward_a_few_dozen_ulps_beyond_its_bound_is_decided_with_the_exact_routes_words(
        k: int, ok: bool, always_fast: None) -> None:
    # mse on n = 20000 elements z = 2.5, y = 0.25: d = 2.25, ℓ = 5.0625 exactly, L = 5.0625
    # (no power of two: its ulp, 2^-50 = 8u, is the same on both sides). The bound of
    # symjac.loss._bounds with SymPy's (-y + z)**2 (depth 2): R = d² + 2|d|(|y| + |z|) =
    # 17.4375, cond = 2|d|(|z| + |y|) = 12.375, e = u·R + γ_2·(ℓ + cond) = 52.3125u
    # (+ O(u²)); B = (1/n)(Σe + γ_{n-1}·Σℓ) + γ_1·L = 52.3125u + 5.0625·n·u, in ulp:
    # (52.3125 + 101250)/8 = 12663.04. The forward is exact but for k ulp added (the mean
    # of 20000 equal 5.0625s is exact in float64).
    z, y = np.full((200, 100), 2.5), np.full((200, 100), 0.25)
    d = 2 * (z - y) / z.size

    def forward(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.mean((a - b) ** 2)) + k * 2.0**-50

    fast, exact = _both(symjac.Loss("mse"), d, forward, z, y)
    _same(fast, exact)
    assert fast.ok is ok
    if not ok:
        assert _took_fast_beyond(fast)
        assert fast.findings[0].message == (f"forward returned {5.0625 + k * 2.0**-50!r}; exact L = 5.0625, error "
                                            f"{k:.3g} ulp > bound {12663.04:.3g} ulp")


@pytest.mark.parametrize("kind, options", [
    ("mse", {}), ("sigmoid_ce", {}), ("sigmoid_ce", {"pos_weight": 3}),
    ("sigmoid_ce", {"weight": (0.5, 2, 1, 1, 3), "pos_weight": (1, 2, 0.5, 1, 4)}), ("softmax_ce", {}),
    ("softmax_ce", {"weight": (1, 0.5, 2, 1, 3), "label_smoothing": 0.25}),
    ("softmax_ce", {"labels": "indices", "label_smoothing": 0.1})])
def test_the_fast_value_bounds_enclose_the_exact_condition_sums_and_running_errors(
        kind: str, options: dict[str, Any]) -> None:
    # FastValue's cond_lo <= cond <= cond_hi and run_lo <= run <= run_hi against the exact
    # route's MPFR evaluation of the SymPy forms (symjac.loss._bounds), logits up to |z| ~ 40
    loss = symjac.Loss(kind, reduction="sum", **options)
    rng = np.random.default_rng(3)
    z = rng.standard_normal((40, 5)) * np.array([0.01, 1, 3, 10, 40])
    if kind == "mse":
        y = rng.standard_normal(z.shape)
    elif kind == "sigmoid_ce":
        y = rng.random(z.shape).round(3)
    elif options.get("labels") == "indices":
        y = rng.integers(0, 5, 40)
    else:
        y = rng.random(z.shape)
        y /= y.sum(axis=1, keepdims=True)
    ev = evaluate_checked(loss, z, y, None, values=True, derivatives=True)
    bounds = Bounds(ev, np.dtype(np.float64))
    bounds.fill(of="loss")
    rows = kind == "softmax_ce"
    column = None if rows else np.tile(np.arange(5), 40)
    form = kind_of(loss).fast_value(loss, z if rows else z.reshape(-1), y if rows else y.reshape(-1), column)
    assert form is not None and form.cond_hi is not None and form.run_hi is not None
    with _numbers.context():
        for exact, lo, hi in ((bounds.cond, form.cond_lo, form.cond_hi), (bounds.run, form.run_lo, form.run_hi)):
            lo_mp, hi_mp = _numbers.from_floats(lo.reshape(-1)), _numbers.from_floats(hi.reshape(-1))
            assert np.all(np.asarray(lo_mp <= exact, dtype=bool)) and np.all(np.asarray(exact <= hi_mp, dtype=bool))
            assert np.all(np.asarray(hi_mp <= exact * 1.1 + 1e-300, dtype=bool))  # and close: the same terms


def test_a_wrong_float32_forward_is_decided_with_the_exact_routes_words(always_fast: None) -> None:
    z, y, d, forward = _case("sigmoid_ce", "mean")
    z32, y32 = z.astype(np.float32), y.astype(np.float32)
    loss = symjac.Loss("sigmoid_ce", scale=S)
    f = FAULTS["S·L"](forward)
    fast = symjac.verify_loss(loss, derivative=lambda *a: (d * S).astype(np.float32), forward=f, pred=z32, label=y32)
    exact = _verify(loss, lambda *a: (d * S).astype(np.float32), f, z32, y32, None, np.dtype(np.float32),
                    fast=False).report
    _same(fast, exact)
    assert _took_fast_beyond(fast) and finfo(np.float32).nmant == 23


def test_a_raising_forward_keeps_the_exact_routes_outcome(always_fast: None) -> None:
    # a raise may be a dtype the forward rejects (the exact route decides that): not the fast route's to report
    z, y, d, _ = _case("mse", "mean")

    def raises(a: np.ndarray, b: np.ndarray) -> Any:
        raise ValueError("no forward here")

    fast, exact = _both(symjac.Loss("mse"), d, raises, z, y)
    _same(fast, exact)
    assert "forward_filter" not in fast.stats and "fast_filter" not in fast.stats


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_forward_returning_s_times_l_at_a_million_entries_takes_the_fast_route(kind: str) -> None:
    z, y, d, forward = _case(kind, "mean", rows=100_000, classes=10)
    r = symjac.verify_loss(symjac.Loss(kind, scale=S), derivative=lambda *a: d * S,
                           forward=FAULTS["S·L"](forward), pred=z, label=y)
    assert _took_fast_beyond(r) and r.categories() == ["forward_values", "not_fd_consistent"]
    assert "your forward equals S·L (S = 1024, the loss scale)" in r.findings[0].message
