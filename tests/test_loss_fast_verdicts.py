"""verify_loss's fast route on failing derivatives and on options (issue 24 item 5).

Every verdict of the fast route is compared with the exact route's on the same inputs
(``_verify(..., fast=False)``): the same categories, the same message word for word (the
named scale, the count, the worst entry with its expected and observed values), the same
cells. The derivatives are NumPy's closed forms, each derived in a comment beside it;
the bugs are planted (a forgotten loss scale, a scale applied twice, a mean where the
spec sums, a few entries wrong), so the expected category and scale follow from the bug.
Sizes stay small (the route is forced with FAST_MIN = 0); 10^6 entries are marked slow.

On main each of these fails: a failing derivative was handed to the exact route whole
(no ``fast_filter`` stats), options had no fast form, and past MAX_ELEMENTS a wrong scale
was reported as wrong_values.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import symjac
from symjac.verifiers.loss.fast import _filter as _loss_fast
from symjac.verifiers.loss._verify import _verify

S = 1024


@pytest.fixture
def always_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loss_fast, "FAST_MIN", 0)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def _case(kind: str, rows: int = 60, classes: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pred, label, dL/dpred) for the mean reduction, unscaled."""
    rng = np.random.default_rng(24)
    z = rng.standard_normal((rows, classes)) * 2
    if kind == "mse":  # L = (1/n) Σ (z - y)²: dL/dz = 2(z - y)/n
        y = rng.standard_normal(z.shape)
        return z, y, 2 * (z - y) / z.size
    if kind == "sigmoid_ce":  # L = (1/n) Σ softplus terms: dL/dz = (σ(z) - y)/n
        y = rng.random(z.shape).round(3)
        return z, y, (_sigmoid(z) - y) / z.size
    # softmax_ce, probability rows, mean over the rows: dL/dz = (p - t)/rows (Σ t = 1)
    y = np.eye(classes)[rng.integers(0, classes, rows)]
    return z, y, (_softmax(z) - y) / rows


def _both(loss: symjac.Loss, values: np.ndarray, z: np.ndarray, y: np.ndarray,
          upstream: Any = None) -> tuple[symjac.Report, symjac.Report]:
    fast = symjac.verify_loss(loss, derivative=lambda *a: values, pred=z, label=y, upstream=upstream)
    exact = _verify(loss, lambda *a: values, None, z, y, upstream, None, fast=False).report
    return fast, exact


def _same_verdict(fast: symjac.Report, exact: symjac.Report) -> None:
    assert "fast_filter" in fast.stats and "fast_filter" not in exact.stats
    assert fast.ok is exact.ok
    assert fast.categories() == exact.categories()
    assert [f.message for f in fast.findings] == [f.message for f in exact.findings]
    for f, e in zip(fast.findings, exact.findings):
        assert set(f.cells) == set(e.cells)


# each bug: (name, the factor it puts on the unscaled derivative, category, the c named)
BUGS = [
    ("forgets the scale", 1, "missing_scale", None),
    ("scale applied twice", S * S, "wrong_scale", f"c = {S * S} (S², the scale applied twice)"),
    ("half the scale", S // 2, "wrong_scale", f"c = {S // 2}"),
    ("sign flipped", -S, "wrong_scale", f"c = {-S} (-S, the sign flipped)"),
]


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
@pytest.mark.parametrize("bug,factor,category,named", BUGS, ids=[b[0] for b in BUGS])
def test_a_wrong_scale_gets_the_exact_routes_verdict(kind: str, bug: str, factor: int, category: str,
                                                     named: str | None, always_fast: None) -> None:
    z, y, d = _case(kind)
    fast, exact = _both(symjac.Loss(kind, scale=S), d * factor, z, y)
    _same_verdict(fast, exact)
    assert fast.categories() == [category]
    if named:
        assert named in fast.findings[0].message
    # every entry off (none of these derivatives is 0), each decided in float64: the exact
    # route evaluated only the worst few rows
    assert f"{z.size} of {z.size}" in fast.findings[0].message or category == "wrong_scale"
    assert fast.stats["fast_filter"]["beyond_in_float64"] >= 0.95 * z.size
    assert fast.stats["fast_filter"]["elements_exact"] <= 2 * _loss_fast.WORST


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_mean_where_the_spec_sums_is_named(kind: str, always_fast: None) -> None:
    z, y, d = _case(kind)
    n = z.size if kind != "softmax_ce" else z.shape[0]  # the mean's divisor D
    # the spec sums (D = 1): the right derivative is S·n·d; the bug divides by n
    fast, exact = _both(symjac.Loss(kind, scale=S, reduction="sum"), S * d, z, y)
    _same_verdict(fast, exact)
    named = f"c = {Fraction(S, n)} (S/n: averaged over the n = {n} elements where the spec sums)"
    assert fast.categories() == ["wrong_scale"] and named in fast.findings[0].message


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_few_wrong_entries_are_named_with_the_worst(kind: str, always_fast: None) -> None:
    z, y, d = _case(kind)
    bad = S * d
    bad[3, 4] = -bad[3, 4] * 1.5 + 1e-3  # far off: sign flipped and more
    bad[40, 0] *= 1 + 2.0**-20  # ~2^32 ulps off
    fast, exact = _both(symjac.Loss(kind, scale=S), bad, z, y)
    _same_verdict(fast, exact)
    assert fast.categories() == ["wrong_values"]
    assert set(fast.findings[0].cells) == {(3, 4), (40, 0)} and "2 of 600" in fast.findings[0].message
    assert "worst at pred[3, 4]" in fast.findings[0].message


# ------------------------------------------------------------------ options


def _options_cases() -> list[tuple[str, symjac.Loss, np.ndarray, np.ndarray, Any, np.ndarray]]:
    """(name, loss, pred, label, upstream, S·dL/dpred) with options, each derivative derived here."""
    rng = np.random.default_rng(7)
    rows, c = 50, 6
    z = rng.standard_normal((rows, c)) * 2
    y01 = rng.random((rows, c)).round(3)
    w = np.array([0.5, 2.0, 1.0, 0.1, 3.0, 0.25])
    out = []
    # sigmoid_ce: ℓ = w[p·y·softplus(-z) + (1 - y)·softplus(z)], dℓ/dz = w((1 - y)σ - p·y(1 - σ))
    sig = _sigmoid(z)
    out.append(("sigmoid_ce weight", symjac.Loss("sigmoid_ce", weight=tuple(w), scale=S), z, y01, None,
                S * w * (sig - y01) / z.size))
    out.append(("sigmoid_ce pos_weight", symjac.Loss("sigmoid_ce", pos_weight=3, scale=S), z, y01, None,
                S * ((1 - y01) * sig - 3 * y01 * (1 - sig)) / z.size))
    # softmax_ce: ℓ = -Σ_c a_c log p_c, a = ((1 - ε)t + ε/C)·w: dℓ/dz_j = (Σ a)·p_j - a_j
    p = _softmax(z)
    t = rng.random((rows, c))
    t /= t.sum(axis=1, keepdims=True)
    a = t * w
    out.append(("softmax_ce weight", symjac.Loss("softmax_ce", weight=tuple(w), scale=S), z, t, None,
                S * (a.sum(axis=1, keepdims=True) * p - a) / rows))
    b = 0.75 * t + 0.25 / c
    out.append(("softmax_ce label_smoothing", symjac.Loss("softmax_ce", label_smoothing=0.25, scale=S), z, t, None,
                S * (p - b) / rows))
    # class indices with ignore_index = 2: rows labelled 2 count for nothing, the mean divides
    # by Σ w[label] over the other rows (PyTorch's weighted mean)
    idx = rng.integers(0, c, rows)
    keep = idx != 2
    onehot = np.eye(c)[idx] * w * keep[:, None]
    out.append(("softmax_ce indices ignore_index weight",
                symjac.Loss("softmax_ce", labels="indices", ignore_index=2, weight=tuple(w), scale=S), z, idx, None,
                S * (onehot.sum(axis=1, keepdims=True) * p - onehot) / w[idx][keep].sum()))
    # reduction="none" with upstream u: the VJP Σ_i u_i dℓ_i/dz = 2(z - y)·u (mse), u_row·(p - t) (softmax_ce)
    u = rng.standard_normal((rows, c))
    ur = rng.standard_normal(rows)
    out.append(("mse none", symjac.Loss("mse", reduction="none", scale=S), z, y01, u, S * 2 * (z - y01) * u))
    out.append(("softmax_ce none", symjac.Loss("softmax_ce", reduction="none", scale=S), z, t, ur,
                S * ur[:, None] * (p - t)))
    return out


OPTIONS = _options_cases()


@pytest.mark.parametrize("case", OPTIONS, ids=[c[0] for c in OPTIONS])
def test_options_take_the_fast_route_with_the_exact_routes_verdicts(case: tuple[Any, ...],
                                                                     always_fast: None) -> None:
    _name, loss, z, y, u, good = case
    fast, exact = _both(loss, good, z, y, u)
    _same_verdict(fast, exact)
    assert fast.ok
    fast, exact = _both(loss, good / S, z, y, u)  # forgets the scale
    _same_verdict(fast, exact)
    assert fast.categories() == ["missing_scale"]
    bad = good.copy()
    bad[7, 1] = -bad[7, 1] * 2 + 1e-2  # one entry far off
    fast, exact = _both(loss, bad, z, y, u)
    _same_verdict(fast, exact)
    assert fast.categories() == ["wrong_values"] and fast.findings[0].cells == ((7, 1),)


# ------------------------------------------------------------------ at size


def test_past_the_exact_budget_a_wrong_scale_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """On main the fast route said wrong_values here and named no scale."""
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)
    z, y, d = _case("softmax_ce", rows=2**12, classes=8)
    r = symjac.verify_loss(symjac.Loss("softmax_ce", scale=S), derivative=lambda p, t: d, pred=z, label=y)
    assert r.categories() == ["missing_scale"] and f"with S = {S}" in r.findings[0].message
    assert len(r.findings[0].cells) == _loss_fast.CELLS and f"({z.size} of {z.size} values off" in r.findings[0].message
    r = symjac.verify_loss(symjac.Loss("softmax_ce", scale=S), derivative=lambda p, t: d * S * S, pred=z, label=y)
    assert r.categories() == ["wrong_scale"] and "S², the scale applied twice" in r.findings[0].message


def test_a_forward_past_the_exact_budget_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)
    z, y, d = _case("mse", rows=200, classes=8)

    def never(*args: object) -> object:
        raise AssertionError("not called on a refused input")

    with pytest.raises(symjac.InputError, match=r"budget of 1,000 .*with a forward=, the fast route decides"):
        symjac.verify_loss(symjac.Loss("mse"), derivative=never, forward=never, pred=z, label=y)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_million_entries_of_a_forgotten_scale_and_of_a_few_wrong_entries(kind: str) -> None:
    z, y, d = _case(kind, rows=10**5, classes=10)
    r = symjac.verify_loss(symjac.Loss(kind, scale=S), derivative=lambda p, t: d, pred=z, label=y)
    assert r.categories() == ["missing_scale"] and "fast_filter" in r.stats
    assert r.stats["fast_filter"]["elements_exact"] <= 4 * _loss_fast.WORST
    bad = S * d
    bad[12345, 6] = -bad[12345, 6] * 1.5 + 1e-3
    r = symjac.verify_loss(symjac.Loss(kind, scale=S), derivative=lambda p, t: bad, pred=z, label=y)
    assert r.categories() == ["wrong_values"] and r.findings[0].cells == ((12345, 6),)


def test_a_least_squares_scale_within_2_to_the_minus_40_of_s_is_not_another_scale() -> None:
    """A few entries just beyond their bound pull the least-squares c a hair off S; naming
    "c = 8.000000000, expected S = 8" would say nothing (both routes call it wrong_values).
    New on this branch: on main the exact route named such a c."""
    from symjac.verifiers.loss._values import names_another_scale

    s = Fraction(8)
    assert not names_another_scale(Fraction(8), s)
    assert not names_another_scale(8 * (1 + Fraction(1, 2**45)), s)  # 2^-45 relative: S itself
    assert names_another_scale(8 * (1 + Fraction(1, 2**30)), s)  # 2^-30 relative: a scale of its own
    assert names_another_scale(Fraction(4), s) and names_another_scale(Fraction(-8), s)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_low_precision_verdicts_equal_the_exact_routes(kind: str, dtype: str, always_fast: None) -> None:
    if dtype == "bfloat16":
        dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    else:
        dt = np.dtype(dtype)
    z, y, _ = _case(kind, rows=40, classes=6)
    zc, yc = z.astype(dt), y.astype(dt)
    _, _, d = _case_at(kind, zc.astype(np.float64), yc.astype(np.float64))  # the closed form at the rounded inputs
    good = (8 * d).astype(dt)
    few = good.copy()
    few[2, 3] = -few[2, 3]
    for values, category in ((good, None), ((d).astype(dt), "missing_scale"), ((128 * d).astype(dt), "wrong_scale"),
                             (few, "wrong_values")):
        # (in bfloat16 a factor 2 can be within the derived bound of softmax_ce: c = 16·S is not)
        fast, exact = _both(symjac.Loss(kind, scale=8), values, zc, yc)
        _same_verdict(fast, exact)
        assert fast.categories() == ([category] if category else [])


def _case_at(kind: str, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dL/dpred of the mean at given inputs (the closed forms of :func:`_case`)."""
    if kind == "mse":
        return z, y, 2 * (z - y) / z.size
    if kind == "sigmoid_ce":
        return z, y, (_sigmoid(z) - y) / z.size
    return z, y, (_softmax(z) - y) / z.shape[0]
