"""verify_loss's fast route (symjac/verifiers/loss/fast/_filter.py, symjac/loss/_fast.py; issue 24 item 5).

The float64 enclosures are checked against mpmath (an independent library, 200 bits);
the filter against the exact route cell by cell: on inputs built to be hard, every entry
the filter decides is within its exact bound (symjac.loss._bounds), and every report of the
fast route equals the exact route's verdict. Sizes stay small (the route is forced with
FAST_MIN = 0); the 10^6-entry runs are marked slow.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

import symjac
from symjac.loss import _fast, _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._evaluate import evaluate
from symjac.verifiers.loss.fast import _filter as _loss_fast
from symjac.verifiers.loss._verify import _verify

U = 2.0**-53


@pytest.fixture
def always_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loss_fast, "FAST_MIN", 0)


def _frac(v: object) -> Fraction:
    """An mpmath/MPFR number (or float) as an exact Fraction."""
    m = _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)  # type: ignore[arg-type]
    man, exp = mpmath.frexp(m)
    with mpmath.workprec(4000):
        return Fraction(int(mpmath.ldexp(man, 3000))) * Fraction(2) ** (int(exp) - 3000)


# ---------------------------------------------------------------- the enclosures


def _hard_exp_arguments() -> np.ndarray:
    rng = np.random.default_rng(24)
    ln2_64 = float(mpmath.log(2)) / 64
    k = rng.integers(-64 * 1000, 64 * 1000, 300)
    near_reduction = k * ln2_64 + rng.choice([-1, 1], 300) * ln2_64 / 2  # r at the edge of its range
    return np.concatenate([
        rng.uniform(-700, 700, 400), rng.standard_normal(300) * 3, near_reduction[np.abs(near_reduction) <= 700],
        [0.0, -0.0, 1e-300, 5e-324, -5e-324, 2.0**-1022, 700.0, -700.0, 1e-16, -1e-16, 0.5, ln2_64 / 2, np.log(2)],
    ])


def test_exp_encloses_mpmath_and_is_tight() -> None:
    x = _hard_exp_arguments()
    got = _fast.exp(_fast.Ball.exact(x))
    with mpmath.workprec(200):
        for xi, v, e in zip(x, got.v, got.e):
            exact = mpmath.exp(mpmath.mpf(float(xi)))
            assert abs(mpmath.mpf(float(v)) - exact) <= mpmath.mpf(float(e)), xi
            assert float(e) <= 1.25 * U * float(exact), xi  # the derivation's ~1.1u, not a vacuous bound


def test_exp_beyond_its_range_and_of_a_wide_ball_encloses_nothing() -> None:
    got = _fast.exp(_fast.Ball.exact(np.array([700.5, -701.0, np.inf, np.nan])))
    assert np.all(np.isinf(got.e))
    wide = _fast.exp(_fast.Ball(np.array([0.0]), np.array([2.0])))
    assert np.isinf(wide.e[0])


def test_exp_of_a_ball_covers_its_whole_radius() -> None:
    v, r = np.array([1.0, -3.0, 20.0]), np.array([1e-10, 1e-3, 1e-6])
    got = _fast.exp(_fast.Ball(v, r))
    with mpmath.workprec(200):
        for vi, ri, gv, ge in zip(v, r, got.v, got.e):
            for x in (mpmath.mpf(vi) - mpmath.mpf(ri), mpmath.mpf(vi) + mpmath.mpf(ri)):
                assert abs(mpmath.exp(x) - mpmath.mpf(float(gv))) <= mpmath.mpf(float(ge))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_ball_arithmetic_encloses_the_exact_result(op: str) -> None:
    """Against Fractions: cancellation, huge and tiny (subnormal) magnitudes, exact ties."""
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.standard_normal(200), [1.0, 1e308, 1e-310, 3.0, 1 + 2.0**-52, 2.0**-1074, -1e300]])
    b = np.concatenate([rng.standard_normal(200), [-1.0 + 2.0**-53, 1e308, 1e-310, 3.0, -1.0, 2.0**-1074, 1e-300]])
    ra, rb = np.abs(a) * 2.0**-50, np.abs(b) * 2.0**-49
    got = getattr(_fast, op)(_fast.Ball(a, ra), _fast.Ball(b, rb))
    for i in range(a.size):
        if not np.isfinite(got.e[i]):
            continue
        for sa in (-1, 1):
            for sb in (-1, 1):
                x = Fraction(float(a[i])) + sa * Fraction(float(ra[i]))
                y = Fraction(float(b[i])) + sb * Fraction(float(rb[i]))
                exact = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y if y else None}[op]
                if exact is None:
                    continue
                assert abs(exact - Fraction(float(got.v[i]))) <= Fraction(float(got.e[i])), (op, a[i], b[i])


def test_total_encloses_the_exact_sum_under_cancellation() -> None:
    x = np.array([[1e16, 1.0, -1e16, 2.0**-30, 3.0], [1.0, 2.0**-53, 2.0**-53, -1.0, 0.0]])
    got = _fast.total(_fast.Ball.exact(x), axis=1)
    for row, v, e in zip(x, got.v[:, 0], got.e[:, 0]):
        exact = sum((Fraction(float(t)) for t in row), Fraction(0))
        assert abs(exact - Fraction(float(v))) <= Fraction(float(e))


# ------------------------------------------------ the filter against the exact route


def _hard_inputs(kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2024)
    if kind == "mse":
        z = np.concatenate([rng.standard_normal(300), [1.0, 1e300, -1e300, 1e-310, 5e-324, 0.0, 1 + 2.0**-52,
                                                       3e7, 2.0**24 + 1]])
        y = np.concatenate([z[:100] + rng.standard_normal(100) * 1e-12, rng.standard_normal(200),
                            [1.0 - 2.0**-53, 1e300 * (1 - 2.0**-52), 2e300, -1e-310, 0.0, 5e-324, 1.0, -3e7, 2.0**24]])
        return z, y
    if kind == "sigmoid_ce":
        z = np.concatenate([rng.standard_normal(300) * 4, [0.0, -0.0, 40.0, -40.0, 700.0, -700.0, 750.0, -800.0,
                                                           1e-300, 36.7, -745.0, 1e5]])
        with np.errstate(over="ignore"):
            sig = 1 / (1 + np.exp(-z))
        y = np.concatenate([np.round(sig[:150], 3), sig[150:300],  # labels at σ(z): the derivative cancels
                            [0.5, 0.5, 1.0, 0.0, 1.0, 0.0, 0.25, 1.0, 0.5, 1.0, 0.0, 1.0]])
        return z, np.clip(y, 0, 1)
    rows = rng.standard_normal((120, 10)) * np.array([[1.0], [30.0], [300.0]]).repeat(40, axis=0)
    rows[:5] = 0.0  # ties everywhere
    rows[5:10, 3] = 700.0  # one class dominates: its p = 1 - tiny, the others e^-700
    rows[10:12] = np.linspace(-800, 800, 10)  # beyond the exp range
    label = np.eye(10)[rng.integers(0, 10, 120)]
    soft = rng.random((40, 10))
    label[80:] = soft / soft.sum(axis=1, keepdims=True)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    label[20:30] = np.eye(10)[np.argmax(rows[20:30], axis=1)]  # the label at the max: h_j = p_j - 1 cancels
    del e
    return rows, label


def _exact_truth(loss: symjac.Loss, z: np.ndarray, y: np.ndarray,
                 dt: np.dtype[np.float64]) -> tuple[list[Fraction], list[Fraction]]:
    """The exact route's g and B per entry (loss/_evaluate.py, loss/_bounds.py)."""
    ev = evaluate(loss, z, y)
    with _numbers.context():
        g = ev.derivative().reshape(-1)
        b = Bounds(ev, dt).derivative(loss.scale).reshape(-1)
    return [_frac(v) for v in g], [_frac(v) for v in b]


def _setting(loss: symjac.Loss, z: np.ndarray, y: np.ndarray, dt: np.dtype[np.float64]) -> _loss_fast._Setting:
    s = _loss_fast.setting_of(loss, z, y, None, dt)
    assert s is not None
    return s


def _observed_near(g: list[Fraction], b: list[Fraction], dt: np.dtype[np.float64], where: str) -> np.ndarray:
    """Per entry: g rounded, or the last float within g + B ("edge"), or the first beyond it ("beyond")."""
    out = np.empty(len(g), dtype=dt)
    for i, (gi, bi) in enumerate(zip(g, b)):
        target = gi if where == "round" else gi + bi
        with np.errstate(over="ignore"):
            o = dt.type(float(target))
        if where != "round" and np.isfinite(o):
            while Fraction(float(o)) > target:
                o = np.nextafter(o, dt.type(-np.inf))
            if where == "beyond":
                o = np.nextafter(o, dt.type(np.inf))
        out[i] = o
    return out


OPTIONS = [("mse", {}), ("sigmoid_ce", {}), ("softmax_ce", {}),
           ("sigmoid_ce", {"weight": 0.3, "pos_weight": 3}),
           ("softmax_ce", {"weight": (0.5, 2, 1, 0.1, 3, 1, 1, 0.25, 4, 1), "label_smoothing": 0.1}),
           ("softmax_ce", {"labels": "indices", "ignore_index": 3, "weight": (1, 2, 0.5, 1, 1, 1, 3, 1, 1, 0.1)})]


@pytest.mark.parametrize("kind,options", OPTIONS, ids=[f"{k}{o or ''}" for k, o in OPTIONS])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_entry_the_filter_decides_is_on_the_side_of_its_exact_bound(kind: str, options: dict[str, object],
                                                                          dtype: str) -> None:
    """Cell by cell, on hard inputs and observed values at g, at g + B (the edge), one
    float beyond, and 2B + |g|/2^20 off: within ⇒ |o - g| <= B exactly, beyond ⇒ |o - g| > B
    exactly (fails on main: the filter proved nothing beyond); the filter decides the
    rounded values, and the far ones, of most entries (it is a filter, not a way round the
    exact route)."""
    dt = np.dtype(dtype)
    loss = symjac.Loss(kind, scale=Fraction(3, 7) if kind == "sigmoid_ce" else 1024, **options)  # type: ignore[arg-type]
    z, y = _hard_inputs(kind)
    top = float(np.finfo(dt).max) / 2  # the hard magnitudes, within the dtype
    z, y = np.clip(z, -top, top).astype(dt).astype(np.float64), np.clip(y, -top, top).astype(dt).astype(np.float64)
    if kind == "sigmoid_ce":
        y = np.clip(y, 0, 1)
    if options.get("labels") == "indices":
        y = np.argmax(y, axis=1).astype(np.float64)  # one class per row, some at ignore_index = 3
    g, b = _exact_truth(loss, z, y, dt)
    s = _setting(loss, z.astype(dt), y.astype(dt), dt)
    with np.errstate(over="ignore"):
        far = np.array([float(gi + 2 * bi + abs(gi) / 2**20) for gi, bi in zip(g, b)]).astype(dt)
    far = np.where(np.isfinite(far), far, 0.0).astype(dt)  # beyond the dtype: 0, as far from g
    for where in ("round", "edge", "beyond", "far"):
        o = far if where == "far" else _observed_near(g, b, dt, where)
        got = _loss_fast.filter_block(s, 0, s.z.shape[0], o.astype(np.float64).reshape(s.z.shape))
        assert got is not None
        for i in np.flatnonzero(got.within):
            err = abs(Fraction(float(o[i])) - g[i])
            assert err <= Fraction(float(got.dist_hi[i])), (kind, where, i)
            assert err <= b[i], (kind, where, i)
        for i in np.flatnonzero(got.beyond & np.isfinite(o)):  # (an inf beyond the edge is beyond any bound)
            err = abs(Fraction(float(o[i])) - g[i])
            assert Fraction(float(got.dist_lo[i])) <= err, (kind, where, i)
            assert err > b[i], (kind, where, i)
        if where == "round":  # (a third of softmax_ce's rows span ~2000: e^(z - max) beyond exp's range)
            assert got.within.mean() > 0.6, got.within.mean()
        if where in ("beyond", "far"):
            assert not got.within.any()
        if where == "far":
            assert got.beyond.mean() > 0.6, got.beyond.mean()


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_the_fast_routes_verdict_is_the_exact_routes(kind: str, always_fast: None) -> None:
    """Correct (rounded, and at the very edge of the bound) values pass on both routes; one
    entry one float beyond its bound, and a missing loss scale, fail on both, with the same
    categories and messages (the fast route decides them itself: fails on main, where it
    handed them to the exact route and had no "fast_filter" stats)."""
    dt = np.dtype(np.float64)
    loss = symjac.Loss(kind, scale=8)
    z, y = _hard_inputs(kind)
    g, b = _exact_truth(loss, z, y, dt)
    rounded = _observed_near(g, b, dt, "round").reshape(z.shape)
    edge = _observed_near(g, b, dt, "edge").reshape(z.shape)
    beyond = rounded.copy().reshape(-1)
    beyond[7] = _observed_near(g[7:8], b[7:8], dt, "beyond")[0]
    unscaled = (rounded / 8).astype(dt)
    cases = {"rounded": (rounded, True), "edge": (edge, True), "one beyond": (beyond.reshape(z.shape), False),
             "unscaled": (unscaled, False)}
    for name, (values, ok) in cases.items():
        fast = symjac.verify_loss(loss, derivative=lambda p, t, v=values: v, pred=z, label=y)
        exact = _verify(loss, lambda p, t, v=values: v, None, z, y, None, None).report
        assert fast.ok is exact.ok is ok, name
        assert fast.categories() == exact.categories(), name
        assert [f.message for f in fast.findings] == [f.message for f in exact.findings], name
        assert "fast_filter" in fast.stats, name
        if ok:
            assert "fast_filter" in fast.stats and "fast_filter" not in exact.stats
            assert fast.stats["max_error_ulps"] <= exact.stats["max_error_ulps"]
            assert exact.stats["max_error_ulps"] <= fast.stats["fast_filter"]["max_error_ulps_at_most"]
    assert symjac.verify_loss(loss, derivative=lambda p, t: unscaled, pred=z, label=y).categories() == ["missing_scale"]


def test_a_large_correct_mse_takes_the_fast_route_and_a_bug_is_still_found() -> None:
    """Fails on main before the fast route: no "fast_filter" stats. 2^15 entries (above FAST_MIN)."""
    rng = np.random.default_rng(5)
    z, y = rng.standard_normal(2**15), rng.standard_normal(2**15)
    good = 2 * (z - y) / z.size
    r = symjac.verify_loss(symjac.Loss("mse"), derivative=lambda p, t: good, pred=z, label=y)
    assert r.ok and r.stats["fast_filter"]["decided_in_float64"] > 0.99 * z.size
    bad = good.copy()
    bad[123] = np.nextafter(np.nextafter(bad[123], np.inf) * (1 + 2.0**-40), np.inf)  # ~2^13 ulps off
    r = symjac.verify_loss(symjac.Loss("mse"), derivative=lambda p, t: bad, pred=z, label=y)
    assert r.categories() == ["wrong_values"] and r.findings[0].cells == ((123,),)


def test_options_without_a_fast_form_take_the_exact_route(always_fast: None) -> None:
    z, y = np.array([[0.5, 0.75], [0.125, 0.25]]), np.array([[1.0, 0.0], [0.25, 1.0]])
    for loss in (symjac.Loss("mae"), symjac.Loss("huber"), symjac.Loss("bce")):
        exact = symjac.loss_derivative(loss, z, y)
        values = np.array([float(v) for v in exact.reshape(-1)]).reshape(z.shape)
        r = symjac.verify_loss(loss, derivative=lambda p, t, v=values: v, pred=z, label=y)
        assert r.ok and "fast_filter" not in r.stats, loss


def test_an_input_error_is_named_as_on_the_exact_route(always_fast: None) -> None:
    z, y = np.zeros(4), np.array([0.0, 0.5, 1.5, 1.0])
    with pytest.raises(symjac.InputError, match=r"label\[2\]"):
        symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=lambda p, t: p, pred=z, label=y)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce"])
def test_a_million_entries_pass_and_one_wrong_entry_fails(kind: str) -> None:
    rng = np.random.default_rng(0)
    classes = 10 if kind == "softmax_ce" else 1
    z = rng.standard_normal((10**6 // classes, classes))
    if kind == "softmax_ce":
        y = np.eye(classes)[rng.integers(0, classes, z.shape[0])]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        good = (e / e.sum(axis=1, keepdims=True) - y) / z.shape[0]
    elif kind == "sigmoid_ce":
        y = rng.random(z.shape).round(3)
        good = (1 / (1 + np.exp(-z)) - y) / z.size
    else:
        y = rng.standard_normal(z.shape)
        good = 2 * (z - y) / z.size
    r = symjac.verify_loss(symjac.Loss(kind), derivative=lambda p, t: good, pred=z, label=y)
    assert r.ok and "fast_filter" in r.stats
    bad = good.copy()
    bad[4321, 0] = -bad[4321, 0] if bad[4321, 0] else 1e-3
    r = symjac.verify_loss(symjac.Loss(kind), derivative=lambda p, t: bad, pred=z, label=y)
    assert not r.ok and (4321, 0) in r.findings[0].cells


def test_a_misbehaving_implementation_gets_the_exact_routes_findings(always_fast: None) -> None:
    """Mutating its input, nondeterminism, a wrong shape, raising: the fast route steps
    aside and the report is the exact route's (same categories, messages and notes).
    flaky differs by one ulp between calls, within the bound: a note on both routes."""
    loss = symjac.Loss("mse")
    z, y = np.array([0.5, -1.25, 2.0, 0.75]), np.array([0.25, -1.0, -0.5, 1.5])
    good = 2 * (z - y) / z.size  # exact: dyadic inputs, n = 4
    calls = []

    def mutating(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        p[0] = 9.0
        return good.copy()

    def flaky(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        calls.append(1)
        return good * (1 + len(calls) % 2 * 2.0**-52)

    def raising(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        raise RuntimeError("boom")

    for impl in (mutating, flaky, raising, lambda p, t: good[:3]):
        fast = symjac.verify_loss(loss, derivative=impl, pred=z, label=y)
        calls.clear()
        exact = _verify(loss, impl, None, z, y, None, None).report
        calls.clear()
        assert fast.ok is (impl is flaky) and fast.categories() == exact.categories()
        assert [f.message for f in fast.findings] == [f.message for f in exact.findings]
        assert fast.notes == exact.notes and bool(fast.notes) is (impl is flaky)


def test_beyond_the_exact_budget_the_fast_route_verifies_and_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails on main (refused up front). Past MAX_ELEMENTS (patched to 1000): a correct
    derivative passes, one wrong entry is a wrong_values finding found exactly, and what
    the fast route cannot decide (an option without a fast form) is refused as before."""
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)
    rng = np.random.default_rng(9)
    z, y = rng.standard_normal((2**12, 8)), rng.random((2**12, 8)).round(3)
    good = (1 / (1 + np.exp(-z)) - y) / z.size  # sigmoid_ce, mean: (σ(z) - y)/n
    r = symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=lambda p, t: good, pred=z, label=y)
    assert r.ok and r.stats["elements"] == 2**15
    bad = good.copy()
    bad[17, 3] *= 1.001  # ~2^43 ulps of float64 off
    r = symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=lambda p, t: bad, pred=z, label=y)
    assert r.categories() == ["wrong_values"] and r.findings[0].cells == ((17, 3),)
    assert "1 of 32768" in r.findings[0].message and "no single factor c" in r.findings[0].message
    with pytest.raises(symjac.InputError, match="fast route"):
        symjac.verify_loss(symjac.Loss("mae"), derivative=lambda p, t: good, pred=z, label=y)
    monkeypatch.setattr(symjac.loss, "MAX_FAST_ELEMENTS", 2**15 - 1)
    with pytest.raises(symjac.InputError, match="MAX_FAST_ELEMENTS"):
        symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=lambda p, t: good, pred=z, label=y)


def test_a_bad_label_in_a_later_block_is_named_by_its_index_in_the_whole_input(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)  # so only the fast route could run
    z, y = np.zeros(2**15), np.full(2**15, 0.5)
    y[20000] = 1.5  # sigmoid_ce takes labels in [0, 1]
    with pytest.raises(symjac.InputError, match=r"label\[20000\]"):
        symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=lambda p, t: p, pred=z, label=y)


@pytest.mark.parametrize("libm_error", [0.0, 1e-9])
def test_log_enclosures_hold_whatever_numpys_log_returns(monkeypatch, libm_error):
    # The fast forms' log and log1p take NumPy's values only as centres: each radius is proven
    # (symjac's own exp, or series bounds), so a libm off by 1e-9 relative still gets balls that
    # hold the true value (mpmath, 120 bits), just wider ones (or inf: then the exact route decides).
    import mpmath

    from symjac.loss import _fast

    rng = np.random.default_rng(0)
    x = np.concatenate([np.exp(rng.uniform(-690, 690, 300)), 1 + rng.uniform(-0.4, 0.4, 100),
                        1 + np.exp(-rng.uniform(5, 40, 100))])
    y = np.concatenate([np.exp(-rng.uniform(0, 700, 300)), rng.uniform(0, 1, 100), [0.0, 5e-324, 1e-20]])
    real_log, real_log1p = np.log, np.log1p
    fake = type("np_with_a_bad_libm", (), {})()
    for name in dir(np):
        if not name.startswith("__"):
            setattr(fake, name, getattr(np, name))
    fake.log = lambda a: real_log(a) * (1 + libm_error)
    fake.log1p = lambda a: real_log1p(a) * (1 + libm_error)
    monkeypatch.setattr(_fast, "np", fake)
    lx = _fast.log(_fast.Ball(x, np.zeros_like(x)))
    ly = _fast.log1p(_fast.Ball(y, np.zeros_like(y)))
    with mpmath.workprec(120):
        for xi, v, e in zip(x, lx.v, lx.e):
            assert abs(mpmath.log(mpmath.mpf(float(xi))) - mpmath.mpf(float(v))) <= e
        for yi, v, e in zip(y, ly.v, ly.e):
            assert abs(mpmath.log1p(mpmath.mpf(float(yi))) - mpmath.mpf(float(v))) <= e
    if libm_error == 0.0:  # with a good libm the balls stay tight (the filter can decide with them)
        assert np.all(lx.e <= 1e-10 * np.abs(lx.v) + 1e-300) and np.all(ly.e <= 1e-10 * np.abs(ly.v) + 1e-300)
