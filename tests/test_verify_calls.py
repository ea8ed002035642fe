"""Every call of the implementation is checked for what it asked (issue 21 items 1 and 4, issue 24 item 6).

- A backward wrong on one call only (the first, the second, the k-th) fails, whichever
  call it is: a colour probe's wrong rows are not overwritten into a pass by a later
  one-hot probe of the same window.
- Equal calls that differ bitwise while each stays within the rounding bound of the
  exact value are a note (``report.notes``, ``stats["nondeterminism"]``), not a failure;
  ``deterministic=True`` makes them a ``nondeterministic`` finding; beyond the bound
  they are a finding either way. The same for ``verify_loss``.
- A max backward that picks a random tied cell on every call passes with the tie policy
  ``varying`` (each call's dx is J^T dy for some element of the Clarke set), while one
  that sends a tied window's gradient outside its tie set in a dense call fails.
- Ties seen give a tie policy (None means no ties), and tie findings label each observed
  value with its cell.

Expected values are derived beside each test: exact sums of 1/9 as Fractions (an
average pooling's J^T dy by hand), sigmoid by mpmath, max pooling's tie sets by hand.
"""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import symjac

ROOT = Path(__file__).resolve().parent.parent


# -- issue 21 item 1: a backward wrong on one call only ------------------------------

def _wrong_on_call(L, k):
    n = [0]

    def backward(x, dy):
        n[0] += 1
        return L.vjp(x, dy) + (1e6 if n[0] == k else 0)
    return backward


def test_the_issue_reproducer_wrong_on_its_first_call_fails():
    # issue 21's reproducer: passed with "max error 1.8e+22 ULP" in its own headline
    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    shape = (2, 3, 4, 5)
    L = symjac.lower(spec, shape)
    rep = symjac.verify(spec, backward=_wrong_on_call(L, 1), forward=L.forward, input_shape=shape)
    assert not rep.ok, str(rep)
    assert rep.stats["backward_ok"] is False
    assert "colour probe" in rep.summary()


@pytest.mark.parametrize("spec, shape", [
    (symjac.Pool("avg", 2, stride=1, padding="same"), (2, 3, 4, 5)),
    (symjac.Pool("avg", 3, stride=2, padding=1), (1, 2, 7, 6)),
    (symjac.Pool("max", 3, stride=2, padding=1), (1, 2, 7, 7)),
    (symjac.Pool("max", 2, stride=1), (2, 1, 5, 4)),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_backward_wrong_on_any_one_call_fails(spec, shape, dtype):
    # A correct backward makes `calls` calls; +1e6 on call k (k = 1, 2, ..., calls) is a
    # result wrong for what that call asked, so every k must fail. A k past the last
    # call is never made: the same backward passes.
    L = symjac.lower(spec, shape)
    good = symjac.verify(spec, backward=L.vjp, forward=L.forward, input_shape=shape, dtype=dtype)
    assert good.ok, str(good)
    calls = good.stats["backward_calls"]
    for k in range(1, calls + 1):
        rep = symjac.verify(spec, backward=_wrong_on_call(L, k), forward=L.forward, input_shape=shape, dtype=dtype)
        assert not rep.ok, f"wrong on call {k} of {calls} passed: {rep}"
    assert symjac.verify(spec, backward=_wrong_on_call(L, calls + 1), forward=L.forward, input_shape=shape,
                         dtype=dtype).ok


def test_the_coverage_plan_catches_a_first_call_wrong():
    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    n = [0]

    def backward(x, dy):
        n[0] += 1
        return symjac.lower(spec, x.shape).vjp(x, dy) + (1e6 if n[0] == 1 else 0)

    rep = symjac.verify(spec, backward=backward, forward=lambda x: symjac.lower(spec, x.shape).forward(x))
    assert not rep.ok, str(rep)


# -- issue 21 item 4: nondeterminism within the rounding bound ------------------------

AVG9 = symjac.Pool("avg", 3, stride=1)  # no padding: every divisor 9, so no entry 1/9 is held exactly


def _exact_avg9_vjp(dy):
    """J^T dy of a 3x3 stride-1 average without padding, by hand: cell (i, j) gets
    dy[a, b]/9 from every window (a, b) with a <= i < a + 3 and b <= j < b + 3."""
    n, c, ho, wo = dy.shape
    out = np.empty((n, c, ho + 2, wo + 2), dtype=object)
    for idx in itertools.product(range(n), range(c), range(ho + 2), range(wo + 2)):
        b_, c_, i, j = idx
        out[idx] = sum((Fraction(float(dy[b_, c_, a, b])) / 9 for a in range(max(0, i - 2), min(ho, i + 1))
                        for b in range(max(0, j - 2), min(wo, j + 1))), Fraction(0))
    return out


def _noisy_avg9(ulps, rng, only_dense=False):
    """The exact J^T dy rounded once to float64 (error <= u|e|), then +-``ulps`` ULP on a
    random half of the cells, a new draw each call. With ulps = 1 the error is at most
    u|e| + 2u(1 + u)|e| = (3u + 2u^2)|e| < γ_3|e| (one ULP of v is at most 2u|v|, and
    |v| <= (1 + u)|e|): within the bound of a probe's row (γ_3|e| for an entry 1/9 that
    float64 does not hold) and of a dense cell (γ_{m+2}·Σ|terms| >= γ_3|e|). With ``ulps``
    above 1, a relative 2^-20 (2^32 ULP and more): far outside both."""
    def backward(x, dy):
        exact = _exact_avg9_vjp(dy)
        v = np.array([float(e) for e in exact.reshape(-1)]).reshape(exact.shape)
        if only_dense and np.count_nonzero(dy) < dy.size:
            return v
        flip = rng.integers(0, 2, size=v.shape).astype(bool) & (v != 0)
        if ulps > 1:  # far: a relative 2^-20, at least 2^32 ULP
            return np.where(flip, v * (1 + 2.0**-20), v)
        return np.where(flip, np.nextafter(v, np.inf), v) if ulps else v
    return backward


def _avg9_forward(x):
    # exact mean of nine float64 values, rounded once (math.fsum is exact)
    n, c, h, w = x.shape
    y = np.empty((n, c, h - 2, w - 2))
    for b, ch, i, j in itertools.product(range(n), range(c), range(h - 2), range(w - 2)):
        cells = x[b, ch, i:i + 3, j:j + 3].reshape(-1)
        if not np.isfinite(cells).all():  # NaN or ±inf: IEEE's sum (NaN with a NaN or both infinities)
            with np.errstate(invalid="ignore"):
                y[b, ch, i, j] = cells.sum() / 9
            continue
        y[b, ch, i, j] = float(Fraction(math.fsum(cells)) / 9)
    return y


def test_noise_within_the_rounding_bound_is_a_note():
    rep = symjac.verify(AVG9, backward=_noisy_avg9(1, np.random.default_rng(0)), forward=_avg9_forward,
                        input_shape=(1, 2, 6, 6))
    assert rep.ok, str(rep)
    seen = rep.stats["nondeterminism"]
    assert seen is not None and seen["backward"]["elements"] > 0
    assert rep.notes and "within the rounding bound" in rep.notes[0]
    assert "not bitwise reproducible" in rep.summary()
    assert rep.to_dict()["notes"] == list(rep.notes)
    assert "note:" in rep.details()


def test_a_deterministic_backward_has_no_note():
    rep = symjac.verify(AVG9, backward=_noisy_avg9(0, np.random.default_rng(0)), forward=_avg9_forward,
                        input_shape=(1, 2, 6, 6))
    assert rep.ok and rep.stats["nondeterminism"] is None and rep.notes == (), str(rep)


def test_deterministic_true_makes_the_note_a_finding():
    rep = symjac.verify(AVG9, backward=_noisy_avg9(1, np.random.default_rng(0)), forward=_avg9_forward,
                        input_shape=(1, 2, 6, 6), deterministic=True)
    assert rep.categories() == ["nondeterministic"], str(rep)


def test_noise_above_the_bound_fails():
    rep = symjac.verify(AVG9, backward=_noisy_avg9(2, np.random.default_rng(0)), forward=_avg9_forward,
                        input_shape=(1, 2, 6, 6))
    assert not rep.ok, str(rep)
    # only the dense calls noisy: the probes' rows are right, the two equal dense calls differ beyond the bound
    rep = symjac.verify(AVG9, backward=_noisy_avg9(2, np.random.default_rng(0), only_dense=True),
                        forward=_avg9_forward, input_shape=(1, 2, 6, 6))
    assert "nondeterministic" in rep.categories(), str(rep)
    assert rep.stats["nondeterminism"] is None


def test_the_coverage_plan_combines_the_notes():
    rep = symjac.verify(AVG9, backward=_noisy_avg9(1, np.random.default_rng(1)), forward=_avg9_forward,
                        families=())
    assert rep.ok, str(rep)
    assert rep.stats["nondeterminism"] is not None and rep.notes
    assert rep.notes[0].startswith("at input shape ")


def test_deterministic_is_checked():
    with pytest.raises(symjac.InputError, match="deterministic="):
        symjac.verify(AVG9, backward=_noisy_avg9(0, np.random.default_rng(0)), input_shape=(1, 1, 4, 4),
                      deterministic="yes")


def test_a_forward_only_run_gets_the_note_too():
    # forward-only: the forward twice at x; one ULP off the exact mean of nine (rounded once, error
    # <= u|e|; one ULP more is within 3u|e|) stays inside the avg forward bound γ_{n+1}·Σ|x|/d
    rng = np.random.default_rng(2)

    def forward(x):
        y = _avg9_forward(x)
        return np.where(rng.integers(0, 2, size=y.shape).astype(bool) & (y != 0), np.nextafter(y, np.inf), y)

    x = np.arange(1.0, 73.0).reshape(1, 2, 6, 6)  # means of nine distinct integers: none 0
    rep = symjac.verify(AVG9, forward=forward, x=x, families=())
    assert rep.ok, str(rep)
    assert rep.stats["nondeterminism"] is not None and "forward" in rep.stats["nondeterminism"]
    assert symjac.verify(AVG9, forward=forward, x=x, families=(), deterministic=True).categories() == \
        ["nondeterministic"]


# -- ties: a Clarke choice that varies per call -----------------------------------------

def _maximal(win):
    """The cells attaining the window's maximum; NaN is the maximum where the window holds one (max
    pooling's NaN policy ``propagate``, symjac/pool/_ops/max.py)."""
    top = win.max()
    return (win == top) | (np.isnan(win) & np.isnan(top))


def _max_backward(spec, choose, dense_outside=False):
    """A max pooling backward (channels-first, no padding) routing each window's dy to the
    tied cell ``choose(tied cells)`` picks; with ``dense_outside``, a dense call (dy with no
    zero) sends window (0, 0)'s gradient to a cell of its window that is not maximal."""
    k, s = spec.kernel[0], spec.stride[0]

    def backward(x, dy):
        dx = np.zeros_like(x)
        n, c, ho, wo = dy.shape
        dense = np.count_nonzero(dy) == dy.size
        for b, ch, i, j in itertools.product(range(n), range(c), range(ho), range(wo)):
            win = x[b, ch, i * s:i * s + k, j * s:j * s + k]
            cells = [(a, e) for a in range(k) for e in range(k) if _maximal(win)[a, e]]
            a, e = choose(cells)
            if dense_outside and dense and (b, ch, i, j) == (0, 0, 0, 0):
                others = [(a2, e2) for a2 in range(k) for e2 in range(k) if not _maximal(win)[a2, e2]]
                if others:
                    a, e = others[0]
            dx[b, ch, i * s + a, j * s + e] += dy[b, ch, i, j]
        return dx
    return backward


def _max_forward(spec):
    k, s = spec.kernel[0], spec.stride[0]

    def forward(x):
        n, c, h, w = x.shape
        ho, wo = (h - k) // s + 1, (w - k) // s + 1
        y = np.empty((n, c, ho, wo), dtype=x.dtype)
        for b, ch, i, j in itertools.product(range(n), range(c), range(ho), range(wo)):
            y[b, ch, i, j] = x[b, ch, i * s:i * s + k, j * s:j * s + k].max()
        return y
    return forward


@pytest.mark.parametrize("spec", [symjac.Pool("max", 2, stride=1), symjac.Pool("max", 3, stride=2)])
def test_a_random_tied_cell_per_call_passes_as_varying(spec):
    rng = np.random.default_rng(0)

    def random_cell(cells):
        return cells[rng.integers(len(cells))]

    rep = symjac.verify(spec, backward=_max_backward(spec, random_cell), forward=_max_forward(spec),
                        input_shape=(2, 2, 7, 7))
    assert rep.ok, str(rep)
    assert rep.stats["tie_policy"] == "varying"
    # at a given input full of ties (0/1 values) the dense confirmations too: no partial_windows
    x = np.random.default_rng(1).integers(0, 2, size=(2, 2, 7, 7)).astype(np.float64)
    rep = symjac.verify(spec, backward=_max_backward(spec, random_cell), forward=_max_forward(spec), x=x)
    assert rep.ok, str(rep)
    assert rep.stats["tie_policy"] == "varying"
    # a policy that changes per call (first or last, drawn per call) is varying too
    first_or_last = _max_backward(spec, lambda cells: cells[0] if rng.integers(2) else cells[-1])
    rep = symjac.verify(spec, backward=first_or_last, forward=_max_forward(spec), x=x)
    assert rep.ok and rep.stats["tie_policy"] == "varying", str(rep)
    # a team that promises bitwise reproducibility: the repeated dense call differs
    rep = symjac.verify(spec, backward=_max_backward(spec, random_cell), x=x, deterministic=True)
    assert "nondeterministic" in rep.categories(), str(rep)


def test_a_fixed_policy_is_still_named():
    spec = symjac.Pool("max", 2, stride=1)
    rep = symjac.verify(spec, backward=_max_backward(spec, lambda cells: cells[-1]), input_shape=(1, 2, 5, 5))
    assert rep.ok and rep.stats["tie_policy"] == "last", str(rep)


def test_a_dense_call_routing_outside_the_tie_set_fails():
    # window (0,0,0,0) of x below is [[1, 1], [0, 1]] (2x2 stride 1): tied on 3 cells, and
    # (1, 0) is not maximal; the dense calls send its gradient there: no Clarke element does.
    spec = symjac.Pool("max", 2, stride=1)
    x = np.random.default_rng(1).integers(0, 2, size=(1, 1, 5, 5)).astype(np.float64)
    x[0, 0, :2, :2] = [[1, 1], [0, 1]]
    bwd = _max_backward(spec, lambda cells: cells[0], dense_outside=True)
    rep = symjac.verify(spec, backward=bwd, forward=_max_forward(spec), x=x)
    assert not rep.ok, str(rep)


# -- issue 24 item 6: the tie policy when ties were seen; observed values with their cells -------------

def test_ties_seen_give_a_tie_policy_and_labelled_values():
    # "every": the full gradient to each tied cell, a row summing to |I| > 1: outside the Clarke set
    spec = symjac.Pool("max", 2, stride=1)
    rep = symjac.verify(spec, backward=_every(spec), input_shape=(1, 1, 4, 4))
    assert rep.categories() == ["tie_not_subgradient"], str(rep)
    assert rep.stats["tie_policy"] == "other"  # ties were seen (None would say none were)
    f = next(f for f in rep.findings if f.window is not None)
    assert len(f.cells) == len(f.observed)
    text = rep.details()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if f"window {symjac.check._report.fmt_index(f.window)}" in line)
    table = lines[at + 1:at + 3 + len(f.cells)]
    assert any(line.split() == ["cell", "observed"] for line in table), text
    for cell, value in zip(f.cells, f.observed):
        row = [symjac.check._report.fmt_index(tuple(cell)), repr(float(value))]
        assert any(line.split() == row for line in table), (row, text)


def _every(spec):
    k, s = spec.kernel[0], spec.stride[0]

    def backward(x, dy):
        dx = np.zeros_like(x)
        n, c, ho, wo = dy.shape
        for b, ch, i, j in itertools.product(range(n), range(c), range(ho), range(wo)):
            win = x[b, ch, i * s:i * s + k, j * s:j * s + k]
            dx[b, ch, i * s:i * s + k, j * s:j * s + k] += _maximal(win) * dy[b, ch, i, j]
        return dx
    return backward


# -- verify_loss ------------------------------------------------------------------------

def _sigmoid_ce_derivative(scale, other_rounding_on_repeats):
    """d/dz of mean sigmoid cross-entropy times S, (σ(z) - y)·S/n, by mpmath at 200 bits
    and rounded to float64 (0.5 ULP); from the second call on, optionally the other
    neighbour of the exact value (within 1 ULP: a faithful rounding, as another
    summation order may give)."""
    import mpmath

    calls = [0]

    def derivative(pred, label):
        calls[0] += 1
        with mpmath.workprec(200):
            exact = [(1 / (1 + mpmath.exp(-mpmath.mpf(float(z)))) - mpmath.mpf(float(y))) * scale / pred.size
                     for z, y in zip(pred.reshape(-1), label.reshape(-1))]
            near = np.array([float(e) for e in exact])
            if other_rounding_on_repeats and calls[0] > 1:
                near = np.array([np.nextafter(v, np.inf if mpmath.mpf(v) < e else -np.inf)
                                 for v, e in zip(near, exact)])
        return near.reshape(pred.shape)
    return derivative


def test_verify_loss_notes_a_repeat_within_the_bound():
    loss = symjac.Loss("sigmoid_ce", scale=8)
    pred, label = np.array([0.5, -1.25, 2.0, 0.75]), np.array([1.0, 0.0, 1.0, 0.0])
    rep = symjac.verify_loss(loss, derivative=_sigmoid_ce_derivative(8, True), pred=pred, label=label)
    assert rep.ok, str(rep)
    assert rep.stats["nondeterminism"]["derivative"]["elements"] == 4
    assert rep.notes and "not bitwise reproducible" in rep.summary()
    strict = symjac.verify_loss(loss, derivative=_sigmoid_ce_derivative(8, True), pred=pred, label=label,
                                deterministic=True)
    assert strict.categories() == ["nondeterministic"], str(strict)
    steady = symjac.verify_loss(loss, derivative=_sigmoid_ce_derivative(8, False), pred=pred, label=label)
    assert steady.ok and steady.stats["nondeterminism"] is None and steady.notes == (), str(steady)


# -- the command line --------------------------------------------------------------------

def test_cli_verify_deterministic(tmp_path, capsys):
    from symjac.cli._main import main

    spec = tmp_path / "avg9.toml"
    spec.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 3\nstride = 1\n\n[input]\nshape = [1, 2, 6, 6]\n')
    impl = tmp_path / "noisy.py"
    impl.write_text(
        "import numpy as np, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from test_verify_calls import _noisy_avg9\n"
        "backward = _noisy_avg9(1, np.random.default_rng(0))\n")
    base = ["verify", str(spec), "--impl", str(impl)]
    assert main(base + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nondeterminism"] is not None
    assert main(base + ["--deterministic"]) == 1
    assert "nondeterministic" in capsys.readouterr().out


def test_a_dense_call_at_ties_is_held_to_each_cells_bound_not_the_slices():
    # Max 2x2 stride 2 at all-ones: 100 windows, each tied on its 4 cells, none overlapping. A valid
    # backward (a random tied cell per call) plus 2^-10 at cell (0,0,0,0) on the dense calls only:
    # any Clarke element sends window (0,0,0,0)'s dy to its 4 cells in total (λ >= 0, Σλ = 1), so
    # one of them is off by >= 2^-12 from every element. A cell's bound is γ_{m+2}·Σ|dy| of the
    # windows reading it (m = 4, one window each), far below 2^-12 for |dy| <= 100 (checked below).
    # The sum of the bounds over the 400 cells is not: a check against that slack passed this.
    spec = symjac.Pool("max", 2, stride=2)
    rng = np.random.default_rng(0)
    valid = _max_backward(spec, lambda cells: cells[rng.integers(len(cells))])
    dense_dy = []

    def off_at_one_cell(x, dy):
        dx = valid(x, dy)
        if len(np.unique(dy)) > 2 and (x == 1).all():  # the dense confirmations at the tied x (probes: 0s and 1s)
            dense_dy.append(float(np.abs(dy).max()))
            dx = dx.copy()
            dx[0, 0, 0, 0] += np.float32(2.0**-10)
        return dx

    rep = symjac.verify(spec, backward=off_at_one_cell, x=np.ones((1, 1, 20, 20), np.float32), dtype="float32")
    u = 2.0**-24
    assert dense_dy and 2.0**-12 > (6 * u / (1 - 6 * u)) * max(dense_dy) * 4
    assert not rep.ok, str(rep)
    assert "wrong_weights" in rep.categories()


@pytest.mark.parametrize("dense_factor", [1, 2])
def test_a_random_choice_at_ties_with_zero_padding_passes_as_varying(dense_factor):
    # Pool(pad_value=0): where a window's max is 0 and a pad cell is among its maximal slots, the
    # Clarke set holds rows that send part (or all) of dy to the pad, i.e. nowhere. A backward
    # picking one maximal slot at random per call (a pad slot: the gradient is dropped) is valid.
    spec = symjac.Pool("max", (3,), stride=1, padding=1, pad_value=0)
    rng = np.random.default_rng(0)

    def backward(x, dy):
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1)))  # zero padding, slot p is input cell p - 1
        dx = np.zeros_like(x)
        for b, ch, j in itertools.product(*map(range, dy.shape)):
            win = padded[b, ch, j:j + 3]
            slot = j + rng.choice(np.flatnonzero(_maximal(win)))
            if 1 <= slot <= x.shape[-1]:
                dx[b, ch, slot - 1] += dy[b, ch, j]
        if len(np.unique(dy)) > 2 and (x == x0).all():  # a dense call at x: dense_factor 2 is no Clarke row
            dx *= dense_factor
        return dx

    x0 = np.random.default_rng(1).integers(-1, 1, size=(2, 2, 9)).astype(np.float64)  # 0s and -1s: pad ties
    rep = symjac.verify(spec, backward=backward, x=x0)
    if dense_factor == 2:  # twice dy from a window: more than any λ (Σλ <= 1) sends
        assert not rep.ok, str(rep)
        return
    assert rep.ok, str(rep)
    assert rep.stats["tie_policy"] == "varying"
