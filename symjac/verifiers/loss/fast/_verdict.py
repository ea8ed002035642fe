"""The fast route's verdict: the filter over every block, the exact route at the entries
it leaves, and a failing derivative classified as the exact route does.

The derivation is in :mod:`symjac.verifiers.loss.fast._filter`; the findings' words are
:mod:`symjac.verifiers.loss._values`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._errors import InputError, SpecError
from symjac.check._report import Finding
from symjac.check._rounding import ulps
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import Loss
from symjac.verifiers.loss.fast import _filter as _loss_fast
from symjac.verifiers.loss.fast._forward import fast_forward
from symjac.verifiers.loss.fast._filter import CELLS, WORST, _clean_calls, _InputFault, _Setting, filter_block, setting_of
from symjac.verifiers.loss._values import (
    _Expected,
    _fits,
    _Misfit,
    _nice_scale,
    _scale_hint,
    missing_scale_message,
    names_another_scale,
    worst_text,
    wrong_scale_message,
    wrong_values_message,
)


@dataclasses.dataclass(frozen=True)
class Fast:
    """The fast route's outcome after clean calls: the output, the stats, the findings
    (the derivative's, then a forward's)."""

    observed: np.ndarray
    stats: dict[str, Any]
    findings: list[Finding]


@dataclasses.dataclass(frozen=True)
class _Exact:
    """The exact route at some entries: the worst error there and the bound at it (ULPs),
    and the entries beyond their bound (flat pred index, error, bound; worst first) with
    the exact value at the worst (MPFR)."""

    worst: tuple[float, float]
    bad: list[tuple[int, float, float]]
    expected_at_worst: Any


class _Top:
    """The entries with the largest upper estimate of their error in ULPs, per block."""

    def __init__(self) -> None:
        self.entries: list[np.ndarray] = []
        self.scores: list[np.ndarray] = []
        self.floor = 0.0  # the largest lower estimate seen: no entry below it can be the worst

    def add(self, at: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
        if not at.size:
            return
        top = np.argsort(hi)[-WORST:]
        self.entries.append(at[top])
        self.scores.append(hi[top])
        self.floor = max(self.floor, float(np.max(lo)))

    def candidates(self) -> np.ndarray:
        if not self.entries:
            return np.zeros(0, dtype=np.intp)
        at, hi = np.concatenate(self.entries), np.concatenate(self.scores)
        return np.asarray(at[hi >= self.floor], dtype=np.intp)


#: The derivative findings :func:`decide` gives, those naming a scale (c found) first.
_DERIVATIVE_VERDICTS = ("missing_scale", "wrong_scale", "wrong_values")


def fast_check(loss: Loss, derivative: Callable[..., Any], p0: np.ndarray, l0: np.ndarray | None,
               u0: np.ndarray | None, dt: np.dtype[Any], timeout: float | None,
               forward: Callable[..., Any] | None = None) -> Any:
    """The fast route: its outcome when the calls were clean and every option has a fast form, else None (the caller
    takes the exact route; nothing is reported). With a ``forward``: only a derivative decided here (right, or one
    finding of :data:`_DERIVATIVE_VERDICTS`) whose forward :mod:`symjac.verifiers.loss.fast._forward` proves within,
    or beyond with the exact route's findings (:mod:`symjac.verifiers.loss.fast._forward_fail`), too (else None)."""
    if p0.size < _loss_fast.FAST_MIN:  # read at call time (tests lower it)
        return None
    if not np.isfinite(p0).all():  # NaN or inf: the convention's route (verifiers/loss/_nonfinite), exact
        return None
    try:
        setting = setting_of(loss, p0, l0, u0, dt)
    except _InputFault as fault:  # the input's own fault: the exact route would raise it too
        raise fault.error from None
    except (InputError, SpecError):
        return None
    if setting is None:
        return None
    out = _clean_calls(loss, derivative, p0, l0, u0, dt, timeout)
    if out is None:
        return None
    try:
        got = decide(setting, out)
        if forward is None or got is None:
            return got
        found = {f.category for f in got.findings}
        if not found <= set(_DERIVATIVE_VERDICTS):
            return None
        # the exact route's forward check skips its finite-difference finding once the derivative's names a scale
        scale_found = bool(found & set(_DERIVATIVE_VERDICTS[:2]))
        more = fast_forward(setting, forward, out, p0, l0, timeout, scale_found)
        return None if more is None else Fast(got.observed, {**got.stats, **more[0]}, got.findings + more[1])
    except (InputError, SpecError):
        return None


def decide(s: _Setting, out: np.ndarray) -> Fast | None:
    """Every entry decided, by the filter or exactly; a failing derivative classified."""
    obs = out.astype(np.float64, copy=False).reshape(s.z.shape)
    n_el, per, step = s.z.shape[0], s.per, s.step
    listed: list[np.ndarray] = []  # the first CELLS entries proven beyond (their count below)
    proven = listed_count = 0
    undecided: list[np.ndarray] = []
    top_all, top_beyond = _Top(), _Top()
    most, within_count = 0.0, 0
    dot_ob: list[tuple[float, int]] = []
    dot_bb: list[tuple[float, int]] = []
    for start in range(0, n_el, step):
        stop = min(start + step, n_el)
        blk = filter_block(s, start, stop, obs[start:stop])
        if blk is None:
            return None
        at = np.arange(start * per, stop * per)
        with np.errstate(all="ignore"):
            hi, lo = ulps(blk.dist_hi, blk.size_lo, s.dt), ulps(blk.dist_lo, blk.size_hi, s.dt)
        most = max(most, float(np.max(np.where(np.isnan(hi), np.inf, hi))))
        within_count += int(blk.within.sum())
        top_all.add(at, hi, lo)
        bad = np.flatnonzero(blk.beyond)
        if bad.size:
            proven += int(bad.size)
            if listed_count < CELLS:
                listed.append(at[bad[:CELLS - listed_count]])
                listed_count += min(int(bad.size), CELLS - listed_count)
            top_beyond.add(at[bad], hi[bad], lo[bad])
        undecided.append(at[~blk.within & ~blk.beyond])
        dot_ob.append(_scaled_dot(obs[start:stop].reshape(-1), blk.base))
        dot_bb.append(_scaled_dot(blk.base, blk.base))
    open_ = np.concatenate(undecided) if undecided else np.zeros(0, dtype=np.intp)
    picked = np.unique(np.concatenate([open_, top_all.candidates(), top_beyond.candidates()]))
    exact = _exact(s, obs, np.unique(picked // per))
    # beyond: those proven in float64, and those the exact route found among the undecided
    # (the other entries it evaluated were decided, and it agrees with every decision)
    n_bad = proven + int(np.isin(np.array([b[0] for b in exact.bad], dtype=np.intp), open_).sum())
    n = int(out.size)
    stats: dict[str, Any] = {
        "max_error_ulps": exact.worst[0], "bound_ulps_at_worst": exact.worst[1],
        "values_within_bound": not n_bad,
        "fast_filter": {"entries": n, "decided_in_float64": within_count + proven,
                        "beyond_in_float64": proven, "elements_exact": int(np.unique(picked // per).size),
                        "max_error_ulps_at_most": most}}
    if not n_bad:
        return Fast(out, stats, [])
    stats["fast_filter"]["cells_listed"] = min(CELLS, n_bad)
    ratio = _ratio(dot_ob, dot_bb)
    first = np.concatenate(listed) if listed else np.zeros(0, dtype=np.intp)
    finding = _classify(s, out, obs, n_bad, first, exact, ratio)
    return Fast(out, stats, [finding])


def _scaled_dot(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """``Σ a·b`` as ``(v, e)``, ``v·4^e``: both scaled by 2^-e first (no overflow)."""
    top = float(max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0)))
    e = math.frexp(top)[1] if top > 0 and math.isfinite(top) else 0
    return float(np.dot(np.ldexp(a, -e), np.ldexp(b, -e))), e


def _ratio(ob: list[tuple[float, int]], bb: list[tuple[float, int]]) -> float | None:
    """The least-squares ratio ``Σ o·b / Σ b²`` from the blocks' scaled sums (None if Σ b² = 0)."""
    if not bb:
        return None
    top = max(e for _, e in ob + bb)
    num = math.fsum(math.ldexp(v, 2 * (e - top)) for v, e in ob)
    den = math.fsum(math.ldexp(v, 2 * (e - top)) for v, e in bb)
    if not den > 0:
        return None
    with np.errstate(all="ignore"):
        ratio = num / den
    return ratio if math.isfinite(ratio) else None


def _classify(s: _Setting, out: np.ndarray, obs: np.ndarray, n_bad: int, first: np.ndarray, exact: _Exact,
              ratio: float | None) -> Finding:
    """missing_scale, wrong_scale (c named) or wrong_values, in the exact route's words
    (:func:`symjac.verifiers.loss._values._classify`)."""
    shape, scale = s.shape, s.loss.scale
    assert exact.bad, "an entry proven beyond its bound is among the entries evaluated exactly"
    j, err, bound = exact.bad[0]
    worst = worst_text(_index(shape, j), exact.expected_at_worst, float(out.reshape(-1)[j]), err, bound)
    known = [b[0] for b in exact.bad]
    rest = np.setdiff1d(first, np.array(known, dtype=np.intp))[:max(0, CELLS - len(known))]
    cells = tuple(tuple(_index(shape, int(e))) for e in (known[:CELLS] + [int(e) for e in rest]))
    n = int(out.size)

    def finding(category: str, message: str) -> Finding:
        return Finding(category, message, cells=cells, expected=_numbers.to_mpf(exact.expected_at_worst), observed=out)

    if scale != 1 and _explains(s, obs, Fraction(1)):
        return finding("missing_scale", missing_scale_message(scale, n_bad, n, worst))
    if ratio is not None and math.isfinite(ratio) and ratio != 0:
        nice = _nice_scale(ratio)
        for cand, shown in ((nice, nice), (Fraction(ratio), None)):
            if names_another_scale(cand, scale) and _explains(s, obs, cand):
                name = str(shown) if shown is not None else str(mpmath.nstr(mpmath.mpf(ratio), 10))
                counted = int(s.z.shape[0] if s.counted is None else s.counted.sum())
                hint = (_scale_hint(shown, scale, s.denominator, counted, s.loss.reduction, shape)
                        if shown is not None else "")
                return finding("wrong_scale", wrong_scale_message(name, hint, scale, worst))
    return finding("wrong_values", wrong_values_message(n_bad, n, not np.any(out), worst))


def _explains(s: _Setting, obs: np.ndarray, m: Fraction) -> bool:
    """Is the derivative ``m·dL/dpred`` within ``B_j·max(1, |m|/S)`` at every entry (the
    exact route's :func:`symjac.verifiers.loss._values._fits`)? The filter with ``m``
    over every block (stopping at the first entry proven beyond), the exact route at the
    entries it leaves."""
    undecided: list[np.ndarray] = []
    for start in range(0, s.z.shape[0], s.step):
        stop = min(start + s.step, s.z.shape[0])
        blk = filter_block(s, start, stop, obs[start:stop], m)
        if blk is None or blk.beyond.any():
            return False
        open_ = np.flatnonzero(~blk.within)
        if open_.size:
            undecided.append(np.unique((start * s.per + open_) // s.per))
    elements = np.unique(np.concatenate(undecided)) if undecided else np.zeros(0, dtype=np.intp)
    flat = obs.reshape(-1)
    for at in _blocks(s, elements):
        ex, entries = _expected(s, at)
        with _numbers.context():
            if not _fits(flat[entries].astype(s.dt), ex.base_lo, ex.base_hi, ex.bound(), _numbers.number(m),
                         s.loss.scale):
                return False
    return True


def _blocks(s: _Setting, elements: np.ndarray) -> list[np.ndarray]:
    return [elements[i:i + s.step] for i in range(0, elements.size, s.step)]


def _expected(s: _Setting, at: np.ndarray) -> tuple[_Expected, np.ndarray]:
    """The exact route's expected values and bounds at elements ``at`` (whole rows of
    pred's last axis where a per-class option varies along it), with the whole input's
    factors, denominator and rounding count; and the flat pred entries they are of."""
    summed = dataclasses.replace(s.loss, reduction="sum")
    if s.row is not None:  # element-wise, an option per column: whole rows keep the columns
        rows = np.unique(at // s.row)
        elements = (rows[:, None] * s.row + np.arange(s.row)).reshape(-1)
        zb, yb = s.z[elements].reshape(rows.size, s.row), s.y[elements].reshape(rows.size, s.row)
    else:
        elements, zb, yb = at, s.z[at], s.y[at]
    entries = (elements[:, None] * s.per + np.arange(s.per)).reshape(-1)
    ev = evaluate_checked(summed, zb, yb, None, values=False, derivatives=True)
    factor = np.empty(ev.counted.shape, dtype=object)
    factor.reshape(-1)[...] = ([Fraction(float(u)) for u in s.upstream[elements]] if s.upstream is not None
                               else [s.r] * elements.size)
    factor[~ev.counted] = Fraction(0)
    ev = dataclasses.replace(ev, loss=s.loss, factor=factor, denominator=s.denominator,
                             denominator_ops=s.denominator_ops)
    with _numbers.context():
        return _Expected.of(ev, Bounds(ev, s.dt), s.dt, tuple(zb.shape)), entries


def _exact(s: _Setting, obs: np.ndarray, elements: np.ndarray) -> _Exact:
    """The exact route at the given elements (rows), in blocks."""
    worst = (-1.0, 0.0)
    bad: list[tuple[int, float, float]] = []
    expected: Any = None
    top = -1.0
    flat = obs.reshape(-1)
    for at in _blocks(s, elements):
        ex, entries = _expected(s, at)
        with _numbers.context():
            fit = _Misfit.of(flat[entries].astype(s.dt), ex, s.dt)
        for j, err, bound in fit.bad:
            if expected is None or err > top:
                expected, top = ex.value.reshape(-1)[j], err
            bad.append((int(entries[j]), err, bound))
        if fit.worst_error > worst[0]:
            worst = (fit.worst_error, fit.worst_bound)
    return _Exact(worst, sorted(bad, key=lambda b: -b[1]), expected)
