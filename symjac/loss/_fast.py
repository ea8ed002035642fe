"""Float64 enclosures with proven error bounds: the loss verifier's fast filter.

A :class:`Ball` is a float64 array ``v`` with a float64 array ``e`` such that the exact
value ``x`` of each entry satisfies ``|x - v| <= e`` (``e`` is inf where nothing is
known). Every operation below is the IEEE operation on ``v`` plus a bound on what it
adds, from the standard model of binary64 arithmetic with round to nearest (Higham,
*Accuracy and Stability*, §2.2): ``fl(a op b) = (a op b)(1 + δ) + ε``, ``|δ| <= u =
2^-53``, ``|ε| <= η/2`` (η = 2^-1074; ε = 0 for + and -), so the rounding adds at
most ``u·|fl(a op b)|/(1 - u) + η/2``. The bounds are themselves evaluated in float64:
each is a sum of at most six non-negative products, whose evaluation errs by at most
γ_11 < 2^-49 relative, and every bound is multiplied by :data:`_UP` = 1 + 2^-44
(which also covers ``1/(1 - u)``) and given ``4η`` for the underflow of its own terms.
Overflow gives inf (a cell then stays undecided), NaN compares false (undecided too).

:func:`exp` is computed here rather than by NumPy so that its error is proven rather
than taken from a libm's documentation (see its docstring for the derivation).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import mpmath
import numpy as np

U = 2.0**-53  #: unit roundoff of binary64
ETA = 2.0**-1074  #: smallest subnormal
_UP = 1 + 2.0**-44
_DOWN = 1 - 2.0**-44


@dataclasses.dataclass(frozen=True)
class Ball:
    """Values ``v`` and error bounds ``e``: the exact value is within ``e`` of ``v`` (arrays)."""

    v: np.ndarray
    e: np.ndarray

    @classmethod
    def exact(cls, v: np.ndarray) -> Ball:
        v = np.asarray(v, dtype=np.float64)
        return cls(v, np.zeros_like(v))

    def lower_abs(self) -> np.ndarray:
        """A lower bound on the exact ``|x|`` (0 where the ball contains 0)."""
        with np.errstate(all="ignore"):
            return np.asarray(np.maximum((np.abs(self.v) - self.e) * _DOWN, 0.0))

    def upper_abs(self) -> np.ndarray:
        """An upper bound on the exact ``|x|`` (inf where unknown)."""
        with np.errstate(all="ignore"):
            return np.asarray(np.where(np.isfinite(self.e), (np.abs(self.v) + self.e) * _UP, np.inf))

    @classmethod
    def of(cls, q: Fraction, shape: tuple[int, ...] = ()) -> Ball:
        """An exact rational (an option's value, a reduction factor): its nearest float
        and the exact distance to it, rounded up."""
        v = float(q)
        e = float(abs(Fraction(v) - q)) * _UP + ETA if q != Fraction(v) else 0.0
        return cls(np.full(shape, v), np.full(shape, e))

    def __neg__(self) -> Ball:
        return Ball(-self.v, self.e)


def _rounding(v: np.ndarray) -> np.ndarray:
    """What one rounding to ``v`` may have added (before :data:`_UP`): ``u|v| + η/2``."""
    return np.asarray(U * np.abs(v) + ETA)


def _inflate(e: np.ndarray) -> np.ndarray:
    return np.asarray(e * _UP + 4 * ETA)


def add(a: Ball, b: Ball) -> Ball:
    with np.errstate(all="ignore"):
        v = a.v + b.v
        return Ball(v, _inflate(a.e + b.e + U * np.abs(v)))


def sub(a: Ball, b: Ball) -> Ball:
    return add(a, -b)


def mul(a: Ball, b: Ball) -> Ball:
    """``|xy - v_a v_b| <= |v_a|e_b + |v_b|e_a + e_a e_b``, then the rounding."""
    with np.errstate(all="ignore"):
        v = a.v * b.v
        return Ball(v, _inflate(np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e + _rounding(v)))


def div(a: Ball, b: Ball) -> Ball:
    """``|x/y - v_a/v_b| <= (e_a + |v_a/v_b|·e_b) / (|v_b| - e_b)`` where ``e_b < |v_b|`` (else inf)."""
    with np.errstate(all="ignore"):
        v = a.v / b.v
        room = np.abs(b.v) - b.e
        e = np.where(room > 0, (a.e + np.abs(v) * b.e) / np.where(room > 0, room, 1.0) + _rounding(v), np.inf)
        return Ball(v, _inflate(e))


def total(a: Ball, axis: int = -1) -> Ball:
    """Σ along ``axis`` (recursive summation: each partial sum's rounding charged, by the
    bound ``u·Σ_k |s_k|`` over the partial sums ``s_k``, each at most ``Σ|v|``)."""
    with np.errstate(all="ignore"):
        v = np.sum(a.v, axis=axis, keepdims=True)
        n = a.v.shape[axis]
        e = np.sum(a.e, axis=axis, keepdims=True) + (n - 1) * U * np.sum(np.abs(a.v), axis=axis, keepdims=True)
        return Ball(v, _inflate(e * (1 + 2 * n * U)))


def where(cond: np.ndarray, a: Ball, b: Ball) -> Ball:
    return Ball(np.where(cond, a.v, b.v), np.where(cond, a.e, b.e))


# ------------------------------------------------------------------------- exp

_N = 64  # table entries: e^x = 2^(k/64) · e^r, |r| <= ln2/128 (plus rounding)
_C1 = float(np.float64(np.ldexp(np.round(np.ldexp(float(mpmath.log(2) / _N), 38)), -38)))  # 32 significant bits
with mpmath.workprec(300):
    _C2 = float(mpmath.log(2) / _N - _C1)
    _DC = float(abs(mpmath.log(2) / _N - _C1 - _C2)) * 2  # |ln2/64 - C1 - C2|, rounded up by the factor 2
    _T_HI = np.array([float(mpmath.power(2, mpmath.mpf(j) / _N)) for j in range(_N)])
    _T_LO = np.array([float(mpmath.power(2, mpmath.mpf(j) / _N) - _T_HI[j]) for j in range(_N)])
    _DT = 2 * max(float(abs(mpmath.mpf(_T_HI[j]) + mpmath.mpf(_T_LO[j]) - mpmath.power(2, mpmath.mpf(j) / _N)))
                  for j in range(_N))  # absolute (T <= 2), rounded up by the factor 2
_COEFFS = (1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0)  # Horner, highest degree first: r·(1 + r/2 + ... + r^5/720)
EXP_LIMIT = 700.0  # |x| beyond: not enclosed here (inf error); e^±700 and its scalings stay normal


def exp(a: Ball) -> Ball:
    """``e^x`` for every x within ``a``.

    At the point ``v`` (``|v| <= 700``): ``k = rint(64·v/ln2)``, ``j = k mod 64``,
    ``ρ = v - k·ln2/64`` and ``e^v = 2^((k-j)/64)·T_j·e^ρ``, ``T_j = 2^(j/64)``.

    - *Reduction*: ``ln2/64 = C1 + C2 + c`` with ``C1`` of 32 significant bits, so
      ``k·C1`` is exact (|k| < 2^17); ``r1 = fl(v - k·C1)``, ``t = fl(k·C2)``, ``r =
      fl(r1 - t)``: ``|r - ρ| <= Δ = u(|r1| + |t| + |r|)/(1 - u) + η + |k|·|c|``
      (|c| from mpmath at 300 bits), and ``|e^ρ - e^r| <= e^r·(Δ + Δ²)`` (Δ <= 1).
    - *Polynomial*: ``q = r·(1 + r/2 + ... + r^5/720)`` by Horner; with ``ϱ = |r|`` (at
      most 0.006, else inf): the truncation ``|e^r - 1 - Σ_1^6 r^i/i!| <= ϱ^7/7!·e^ϱ``,
      and Horner's rounding (each term ``r^i/i!`` meets at most 12 roundings, its
      coefficient's included) ``<= γ_12·Σ ϱ^i/i! <= γ_12·ϱ·e^ϱ``.
    - *Table*: ``T_hi + T_lo`` (mpmath, correctly rounded) within ``δ_T`` of ``T_j``;
      ``y0 = fl(T_hi + fl(fl(T_hi·q) + T_lo))`` adds ``u(|s| + |s2| + |y0|)/(1 - u)``
      and ``|T_hi - T_j|·|q| <= u·2·|q|``.
    - *Scaling* by ``2^((k-j)/64)`` is exact (|v| <= 700 keeps every result normal).

    Then the ball's radius: ``e^x = e^v·e^(x-v)``, ``|e^(x-v) - 1| <= e_a + e_a²`` (e_a <= 1).
    """
    with np.errstate(all="ignore"):
        v = a.v
        ok = np.abs(v) <= EXP_LIMIT
        x = np.where(ok, v, 0.0)
        k = np.rint(x * (_N / float(mpmath.log(2))))
        r1 = x - k * _C1
        t = k * _C2
        r = r1 - t
        delta = (U * (np.abs(r1) + np.abs(t) + np.abs(r)) + ETA + np.abs(k) * _DC) * _UP
        rho = np.abs(r)
        poly = np.full_like(r, _COEFFS[0])
        for c in _COEFFS[1:]:
            poly = poly * r + c
        q = poly * r
        j = (k.astype(np.int64) % _N)
        hi, lo = _T_HI[j], _T_LO[j]
        s = hi * q
        s2 = s + lo
        y0 = hi + s2
        e_rho = 1.0062  # e^ϱ <= 1.0062 for ϱ <= 0.006
        gamma12 = 12 * U / (1 - 12 * U)
        e0 = (U * (np.abs(s) + np.abs(s2) + np.abs(y0)) * (1 + 2 * U)
              + hi * (gamma12 * rho * e_rho + rho**7 / 5040 * e_rho)
              + _DT * (1 + np.abs(q)) + 2 * U * np.abs(q) + 3 * ETA) * _UP
        e0 = e0 + (np.abs(y0) + e0) * (delta + delta * delta) * _UP
        scale = (k - j) // _N
        y = np.ldexp(y0, scale.astype(np.int64))
        err = np.ldexp(e0, scale.astype(np.int64)) * _UP + 4 * ETA
        fine = ok & (rho <= 0.006) & (delta <= 1) & (a.e <= 1)
        spread = a.e + a.e * a.e
        err = _inflate(err + (np.abs(y) + err) * spread)
        return Ball(np.where(ok, y, np.inf), np.where(fine, err, np.inf))


@dataclasses.dataclass(frozen=True)
class FastDerivative:
    """A kind's fast form at a block of elements (arrays of pred's block shape).

    Attributes:
      h: the unscaled, unreduced ``dℓ/dz_j`` enclosed (:class:`Ball`).
      cond_lo: a lower bound on ``Σ_m |∂h_j/∂x_m|·|x_m|`` (the condition sum of
        :mod:`symjac.loss._bounds`; some of its non-negative terms, rounded down).
      run_lo: a lower bound on the running error ``R(h_j)`` (likewise; 0 is always one).
      cond_hi, run_hi: upper bounds on the same (every term, rounded up: :func:`upper`;
        inf where unknown), or None: with them the filter also proves an entry *beyond*
        its bound, so that a failing derivative is decided without the exact route.
    """

    h: Ball
    cond_lo: np.ndarray
    run_lo: np.ndarray
    cond_hi: np.ndarray | None = None
    run_hi: np.ndarray | None = None


#: The radius, in ulp of the result, tried first about NumPy's ``log``/``log1p`` (the platform
#: libm: glibc documents at most 1-2 ulp on x86-64 and aarch64). It is no assumption: each
#: enclosure is proven with this module's own :func:`exp` (``e^(v-r) <= x <= e^(v+r)``), and
#: where that check fails a series bound (log1p) or an infinite radius (log) takes its place.
LIBM_ULPS = 4


def _exp_bracket(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(t1, t2, up, dn)``: the floats ``t1 = v - r``, ``t2 = v + r`` (``r`` = :data:`LIBM_ULPS`
    ulp of ``v``), ``up >= e^t1`` and ``dn <= e^t2`` from :func:`exp` (directed by one ulp)."""
    zero = np.zeros_like(v)
    r = 2 * LIBM_ULPS * U * np.abs(v) + 8 * U + ETA  # 8u: well above exp's own radius (about 1.1u relative)
    t1, t2 = v - r, v + r
    lo, hi = exp(Ball(t1, zero)), exp(Ball(t2, zero))
    return t1, t2, np.nextafter(lo.v + lo.e, np.inf), np.nextafter(hi.v - hi.e, -np.inf)


def _radius(v: np.ndarray, t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
    """``max(v - t1, t2 - v)`` rounded up: a ball about ``v`` that holds ``[t1, t2]``."""
    return np.asarray(np.maximum(np.nextafter(v - t1, np.inf), np.nextafter(t2 - v, np.inf)))


def _log_radius(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A proven radius of ``log x`` about ``v`` (``x > 0``): ``log x`` is in ``[t1, t2]`` when
    ``e^t1 <= x <= e^t2`` (log increases); for ``1/2 <= x <= 2``, where ``v`` is small and the
    ulps of ``v`` fall below exp's accuracy, it is :func:`_log1p_radius` of ``x - 1`` (exact by
    Sterbenz); inf where neither is shown."""
    t1, t2, up, dn = _exp_bracket(v)
    near_one = (x >= 0.5) & (x <= 2.0)
    by_exp = np.where((up <= x) & (dn >= x), _radius(v, t1, t2), np.inf)
    return np.asarray(np.where(near_one, _log1p_radius(np.where(near_one, x - 1.0, 0.0), v), by_exp))


def _log1p_radius(y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A proven radius of ``log(1 + y)`` about ``v`` (``y > -1``). ``1 + y = s + t`` exactly
    (TwoSum); with :func:`_exp_bracket`'s floats, ``up - s <= t <= dn - s`` shows
    ``e^t1 <= 1 + y <= e^t2`` (both differences exact by Sterbenz wherever the check can
    hold: then ``up`` and ``dn`` are within a factor 2 of ``s``). The series bounds hold
    too: ``y - y²/2 <= log(1 + y) <= y - y²/2 + y³/3`` for ``y >= 0`` (alternating), and
    ``y/(1 + y) <= log(1 + y) <= y`` for ``y < 0`` (``fl(y/fl(1 + y))`` is within 3u of
    ``y/(1 + y)``: moved down by 4u and an ulp); the smaller of the two radii is taken (the
    series wins for small ``|y|``, where 8u is no small part of ``v``)."""
    s = 1.0 + y
    b = s - 1.0
    t = (1.0 - (s - b)) + (y - b)
    t1, t2, up, dn = _exp_bracket(v)
    shown = (up - s <= t) & (dn - s >= t)
    square = 0.5 * y * y
    half_up, half_dn = np.nextafter(square, np.inf) + ETA, np.maximum(np.nextafter(square, -np.inf) - ETA, 0.0)
    cube_up = np.nextafter(y * y * y / 3 * (1 + 4 * U), np.inf) + ETA  # >= y³/3 for y >= 0
    below = np.where(y >= 0, np.nextafter(y - half_up, -np.inf),
                     np.nextafter(y / np.where(y > -1, s, 1.0) * (1 + 4 * U), -np.inf))
    above = np.where(y >= 0, np.nextafter(np.nextafter(y - half_dn, np.inf) + cube_up, np.inf), y)
    series = _radius(v, below, above)
    return np.asarray(np.minimum(np.where(shown, _radius(v, t1, t2), np.inf), series))


def log1p(a: Ball) -> Ball:
    """``log(1 + x)`` for every ``x >= 0`` within ``a`` (``a.v - a.e >= 0``, else inf): the
    derivative is at most 1 there, so ``a.e`` carries over; plus the proven radius of the
    point value (:func:`_log1p_radius`) and η."""
    with np.errstate(all="ignore"):
        v = np.log1p(a.v)
        ok = (a.v - a.e >= 0) & np.isfinite(v)
        safe = np.where(ok, a.v, 0.0)
        return Ball(v, np.where(ok, _inflate(a.e + _log1p_radius(safe, np.where(ok, v, 0.0)) + ETA), np.inf))


def log(a: Ball) -> Ball:
    """``log x`` for every ``x`` within ``a`` where ``a.v - a.e > 0`` (else inf): the
    derivative is at most ``1/(a.v - a.e)``; plus the proven radius of the point value
    (:func:`_log_radius`) and η."""
    with np.errstate(all="ignore"):
        v = np.log(a.v)
        room = a.v - a.e
        ok = (room > 0) & np.isfinite(v)
        point = _log_radius(np.where(ok, a.v, 1.0), np.where(ok, v, 0.0))
        e = a.e / np.where(ok, room, 1.0) + point + ETA
        return Ball(v, np.where(ok, _inflate(e), np.inf))


@dataclasses.dataclass(frozen=True)
class FastValue:
    """A kind's fast form of the loss value at a block of elements (one entry per element:
    (elements,), or (rows, 1) for a class axis).

    Attributes:
      ell: the element loss ``ℓ_i`` (unweighted by the reduction) enclosed (:class:`Ball`).
      cond_lo: a lower bound on ``Σ_m |∂ℓ_i/∂x_m|·|x_m|`` (the forward bound's condition sum
        of :mod:`symjac.loss._bounds`: some of its non-negative terms, rounded down).
      run_lo: a lower bound on the running error ``R(ℓ_i)`` (0 is always one).
      cond_hi, run_hi: upper bounds on the same (every term, rounded up: :func:`upper`; inf
        where unknown), or None: with them the forward's fast route also proves a forward
        value *beyond* its bound (:mod:`symjac.verifiers.loss.fast._forward_fail`).
    """

    ell: Ball
    cond_lo: np.ndarray
    run_lo: np.ndarray
    cond_hi: np.ndarray | None = None
    run_hi: np.ndarray | None = None


def others(x: np.ndarray, down: bool = True) -> np.ndarray:
    """Per row and column j of a non-negative (rows, C) array, ``Σ_{c≠j} x_c``: a prefix
    plus a suffix sum (no subtraction), each a sum of at most C - 1 non-negative terms
    (relative error <= γ_C); ``down``: deflated by ``1 - 2(C + 2)u`` (a lower bound)."""
    zero = np.zeros_like(x[:, :1])
    before = np.concatenate([zero, np.cumsum(x, axis=1)[:, :-1]], axis=1)
    after = np.concatenate([np.cumsum(x[:, ::-1], axis=1)[:, ::-1][:, 1:], zero], axis=1)
    got = before + after
    return np.asarray(got * (1 - 2 * (x.shape[1] + 2) * U) * _DOWN if down else got)


def others_ball(a: Ball) -> Ball:
    """:func:`others` of a non-negative ball: the sum of the values (its rounding within
    ``2γ_C·Σ``) and of the radii (rounded up)."""
    c = a.v.shape[1]
    g = 2 * (c + 2) * U
    with np.errstate(all="ignore"):
        v, e = others(a.v, down=False), others(a.e, down=False)
        return Ball(v, _inflate(e * (1 + g) + g * v))


def upper(x: np.ndarray) -> np.ndarray:
    """A non-negative sum of products of upper bounds computed in float64 (at most ~20
    roundings), rounded up: inflated by 2^-40 and by 32η (the mirror of :func:`lower`);
    inf where it is not finite."""
    with np.errstate(all="ignore"):
        y = x * (1 + 2.0**-40) + 32 * ETA
        return np.asarray(np.where(np.isfinite(y), np.maximum(y, 0.0), np.inf))


def lower(x: np.ndarray) -> np.ndarray:
    """A non-negative sum of products computed in float64 (at most ~20 roundings), rounded
    down: deflated by 2^-40 for the relative errors and by 32η for what underflowing
    products may have added; 0 where it is not finite (an overflowed lower bound bounds nothing)."""
    with np.errstate(all="ignore"):
        y = x * (1 - 2.0**-40) - 32 * ETA
        return np.asarray(np.where(np.isfinite(y), np.maximum(y, 0.0), 0.0))
