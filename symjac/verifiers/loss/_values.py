"""The derivative's values against the exact ones: the expected values and bounds, the
misfit in ULPs, and the scale findings (missing_scale, wrong_scale with c named, wrong_values).

The bounds are derived in :mod:`symjac.loss._bounds`.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._errors import InputError
from symjac.check._report import Finding
from symjac.check._rounding import finfo, ulps
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import LossEvaluation
from symjac.verifiers.loss._joint import check_rows


def _show(value: Any, digits: int = 10) -> str:
    """An exact value for a message (MPFR to mpmath's shortest form)."""
    return str(mpmath.nstr(_numbers.to_mpf(value), digits))


def _nice_scale(c: Any) -> Fraction:
    return Fraction(float(c)).limit_denominator(4096)


def _scale_hint(c: Fraction, s: Fraction, den: Fraction, n: int, reduction: str, shape: tuple[int, ...] = ()) -> str:
    """Name a known slip behind a wrong loss scale c, including another reduction's divisor
    (the reduction the derivative does match)."""
    hints = {
        s * s: "S², the scale applied twice",
        1 / s: "1/S, divided by S instead of multiplied",
        -s: "-S, the sign flipped",
        -1: "-1: unscaled and the sign flipped",
    }
    if den != 1:
        hints.setdefault(s * den, "S·D: the reduction's division by D is missing")
        hints.setdefault(s / den, "S/D: divided by D twice")
        hints.setdefault(den, "D: the reduction's division by D is missing and the scale too")
    if reduction == "sum" and n > 1:
        hints.setdefault(s / n, f"S/n: averaged over the n = {n} elements where the spec sums")
    elements = math.prod(shape) if shape else 0
    if elements > 1 and Fraction(elements) != den:
        hints.setdefault(s * den / elements, f"matches reduction='mean' over elements: divided by all {elements} "
                                             f"elements of pred, not by D = {den}")
    if len(shape) > 1 and Fraction(shape[0]) != den:
        hints.setdefault(s * den / shape[0], f"matches reduction='batch_mean': divided by the batch size "
                                             f"B = {shape[0]}, not by D = {den}")
    hint = hints.get(c)
    return f" ({hint})" if hint else ""



@dataclasses.dataclass(frozen=True, eq=False)
class _Expected:
    """The exact derivative at the inputs: S·dL/dpred, the unscaled base, their Clarke
    intervals [lo, hi] (equal off kinks), and the derived bound B per entry (its floor
    everywhere, the full bound where asked: see :class:`Bounds`)."""

    value: np.ndarray
    base: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    base_lo: np.ndarray
    base_hi: np.ndarray
    floor: np.ndarray
    bounds: Bounds

    def bound(self, entries: np.ndarray | None = None) -> np.ndarray:
        """The full B at flat pred entries (all if None)."""
        return self.bounds.derivative(self.bounds.ev.loss.scale, entries)

    @classmethod
    def of(cls, ev: LossEvaluation, bounds: Bounds, dt: np.dtype[Any], shape: tuple[int, ...],
           within: np.ndarray | None = None) -> _Expected:
        """The expected values; every one (or the flat entries ``within``) must lie in the dtype's range."""
        lo, hi = ev.derivative_set()
        value = lo if ev.smooth else ev.derivative()  # off the kinks the Clarke set is the derivative
        fmax = _numbers.number(float(finfo(dt).max))
        big = np.flatnonzero(np.asarray(np.abs(value) > fmax, dtype=bool).reshape(-1))
        if within is not None:
            big = big[np.isin(big, within)]
        if big.size:
            j = int(big[0])
            raise InputError(
                f"the exact derivative at pred{_index(shape, j)} is {_show(value.reshape(-1)[j], 8)}, "
                f"beyond the range of {dt.name}: no {dt.name} implementation can return it; lower the scale or "
                "use a wider dtype"
            )
        blo, bhi = ev.derivative_set(Fraction(1))
        return cls(value, blo if ev.smooth else ev.derivative(Fraction(1)), lo, hi, blo, bhi, bounds.derivative(ev.loss.scale, floor=True),
                   bounds)



def _check_values(out: np.ndarray | None, ex: _Expected, ev: LossEvaluation, dt: np.dtype[Any],
                  stats: dict[str, Any], findings: list[Finding]) -> Fraction | None:
    """The derivative against the exact one; a scale finding names c. Returns the c found."""
    if out is None:
        return None
    fit = _Misfit.of(out, ex, dt)
    bad = fit.bad
    stats["max_error_ulps"] = fit.worst_error
    stats["bound_ulps_at_worst"] = fit.worst_bound
    stats["values_within_bound"] = not bad
    if not bad:  # each entry in its Clarke interval: a row at one kink in its Clarke segment too
        before = len(findings)
        check_rows(out, ev, ex.bound, stats, findings)
        stats["values_within_bound"] = len(findings) == before
        return None
    return _classify(out, ex.value, ex.base, ex.base_lo, ex.base_hi, ex.bound(), ev.loss.scale, ev, dt,
                     out.shape, bad, findings)



def _dist(o: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Elementwise distance of o from [lo, hi] (MPFR arrays)."""
    with _numbers.context():
        return np.asarray(np.where(o < lo, lo - o, np.where(o > hi, o - hi, 0)), dtype=object)


@dataclasses.dataclass(frozen=True)
class _Misfit:
    """Observed values against [lo - B, hi + B]: the largest error and the bound there
    in ULPs, and ``bad``: (flat index, error ulp, bound ulp) outside, worst first. The
    full bound is formed only where a value is beyond its floor, and at the worst."""

    worst_error: float
    worst_bound: float
    bad: list[tuple[int, float, float]]

    @classmethod
    def of(cls, out: np.ndarray, ex: _Expected, dt: np.dtype[Any]) -> _Misfit:
        obs = _numbers.from_floats(out).reshape(-1)
        lo, hi = ex.lo.reshape(-1), ex.hi.reshape(-1)
        dist = _dist(obs, lo, hi)
        beyond_floor = np.flatnonzero(np.asarray(dist > ex.floor, dtype=bool))
        worst = int(np.argmax(ulps(dist.astype(np.float64), cls._size(obs, lo, hi, np.arange(dist.size), dt), dt)))
        look = np.unique(np.append(beyond_floor, worst))
        bound, size = ex.bound(look), cls._size(obs, lo, hi, look, dt)
        err, bnd = ulps(dist[look].astype(np.float64), size, dt), ulps(bound.astype(np.float64), size, dt)
        outside = np.asarray(dist[look] > bound, dtype=bool)
        bad = sorted(((int(look[k]), float(err[k]), float(bnd[k])) for k in np.flatnonzero(outside)),
                     key=lambda t: -t[1])
        at = int(np.searchsorted(look, worst))
        return cls(float(err[at]), float(bnd[at]), bad)

    @staticmethod
    def _size(obs: np.ndarray, lo: np.ndarray, hi: np.ndarray, j: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
        """max(|o|, |lo|, |hi|) at entries j, as float64 (at most the dtype's largest finite value)."""
        size = np.maximum(np.maximum(np.abs(obs[j]), np.abs(lo[j])), np.abs(hi[j])).astype(np.float64)
        return np.asarray(np.minimum(size, float(finfo(dt).max)))


def _fits(out: np.ndarray, blo: np.ndarray, bhi: np.ndarray, bnd: np.ndarray, c: Any, s: Fraction) -> bool:
    """Are the observed values c·dL/dpred, within the bound (scaled up by |c|/S when |c| > S)?"""
    with _numbers.context():
        ratio = max(1, abs(c) / _numbers.number(s))
        a, b = c * blo.reshape(-1), c * bhi.reshape(-1)
        dist = _dist(_numbers.from_floats(out).reshape(-1), np.minimum(a, b), np.maximum(a, b))
        return not np.any(np.asarray(dist > bnd.reshape(-1) * ratio, dtype=bool))


def _classify(
    out: np.ndarray,
    expected: np.ndarray,
    base: np.ndarray,
    blo: np.ndarray,
    bhi: np.ndarray,
    bnd: np.ndarray,
    s: Fraction,
    ev: LossEvaluation,
    dt: np.dtype[Any],
    shape: tuple[int, ...],
    bad: list[tuple[int, float, float]],
    findings: list[Finding],
) -> Fraction | None:
    """missing_scale, wrong_scale (c named) or wrong_values; returns the c found."""
    j, err_ulp, bound_ulp = bad[0]
    worst = worst_text(_index(shape, j), expected.reshape(-1)[j], float(out.reshape(-1)[j]), err_ulp, bound_ulp)
    cells = tuple(tuple(_index(shape, b[0])) for b in bad)

    def report(category: str, message: str) -> None:
        findings.append(Finding(category, message, cells=cells, expected=_numbers.mpf_array(expected), observed=out))

    if s != 1 and _fits(out, blo, bhi, bnd, 1, s):
        report("missing_scale", missing_scale_message(s, len(bad), out.size, worst))
        return Fraction(1)
    c = _least_squares_scale(out, base, blo, bhi)
    if c is not None and c != 0:
        nice = _nice_scale(c)
        for cand, shown in ((_numbers.number(nice), nice), (c, None)):
            if names_another_scale(cand, s) and _fits(out, blo, bhi, bnd, cand, s):
                name = str(shown) if shown is not None else _show(c)
                hint = (_scale_hint(shown, s, ev.denominator, int(ev.counted.sum()), ev.loss.reduction, shape)
                        if shown is not None else "")
                report("wrong_scale", wrong_scale_message(name, hint, s, worst))
                return shown if shown is not None else Fraction(float(c))
    report("wrong_values", wrong_values_message(len(bad), out.size, not np.any(out), worst))
    return None


def names_another_scale(c: Any, s: Fraction) -> bool:
    """Is c a scale other than S worth naming: not S, nor within 2^-40 of it relatively
    (a least-squares c that close to S is S: a few entries off are wrong_values)."""
    with _numbers.context():
        if c == _numbers.number(s):
            return False
    return bool(abs(float(c) / float(s) - 1) >= 2.0**-40) if s != 0 else True


def worst_text(where: Any, expected: Any, observed: float, err_ulp: float, bound_ulp: float) -> str:
    """The worst entry, as a scale finding's message names it."""
    return (f"worst at pred{where}: expected {_show(expected)}, observed {observed!r}, error {err_ulp:.3g} ulp "
            f"> bound {bound_ulp:.3g} ulp")


def missing_scale_message(s: Fraction, n_bad: int, n: int, worst: str) -> str:
    return (f"missing loss scale: the derivative equals the unscaled dL/dpred; expected S·dL/dpred with S = {s} "
            f"({n_bad} of {n} values off; {worst})")


def wrong_scale_message(name: str, hint: str, s: Fraction, worst: str) -> str:
    return f"wrong loss scale: the derivative equals c·dL/dpred with c = {name}{hint}; expected S·dL/dpred with S = {s} ({worst})"


def wrong_values_message(n_bad: int, n: int, all_zero: bool, worst: str) -> str:
    zeros = " (all zeros)" if all_zero else ""
    return (f"{n_bad} of {n} derivative values are outside the derived bound{zeros}; no single factor c makes "
            f"them c·dL/dpred; {worst}")


def _least_squares_scale(out: np.ndarray, base: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> Any:
    """The c minimising Σ (o - c·b)² over the smooth nonzero entries b of dL/dpred (None if there are none)."""
    with _numbers.context():
        b = base.reshape(-1)
        smooth = np.asarray((blo.reshape(-1) == bhi.reshape(-1)) & (b != 0), dtype=bool)
        if not smooth.any():
            return None
        obs = _numbers.from_floats(out.reshape(-1)[smooth])
        return _numbers.total(obs * b[smooth]) / _numbers.total(b[smooth] * b[smooth])


