"""Exact arrays: rationals held as integer numerators over one common denominator.

Every finite float is a dyadic rational, so a float array converts exactly. With a
common denominator, sums, comparisons and scatter-adds are integer NumPy work
(int64 where it provably cannot overflow, Python ints otherwise): exact at the
speed of vectorised code, with Python-level loops only over distinct values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import re
import weakref
from fractions import Fraction
from collections.abc import Iterator
from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError

_INT64_SAFE = 2**62
#: Largest decimal exponent accepted in exact number strings ("1e1000" is; "1e1001" is not).
MAX_EXPONENT = 1000
_EXPONENT = re.compile(r"[eE]\s*([+-]?\d{1,30})\s*$")


def to_fraction(value: Any, name: str = "value") -> Fraction:
    """Convert one number exactly: int, finite float, Fraction, SymPy rational, "3/4".

    Raises:
      InputError: not a finite real rational number.
    """
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name}={value!r} is a boolean; give a number")
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise InputError(f"{name}={value!r} is not finite; exact analysis needs finite values")
        return Fraction(float(value))
    if isinstance(value, sympy.Basic):
        if value.is_Rational:
            return Fraction(int(value.p), int(value.q))
        raise InputError(f"{name}={value!r} is not a rational number")
    if isinstance(value, str):
        _check_exponent(value, name)
        try:
            return Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise InputError(f"{name}={value!r} is not a number (give e.g. '3', '0.25' or '3/4')") from None
    raise InputError(f"{name}={value!r} of type {type(value).__name__} is not a number")


def as_array(data: Any, name: str = "x") -> np.ndarray:
    """``np.asarray(data)``; a ragged nesting (rows of different lengths) is an :class:`InputError`
    naming ``name``, not NumPy's ValueError."""
    try:
        return np.asarray(data)
    except ValueError:
        raise InputError(f"{name} is ragged (its nested sequences differ in length, so it has no shape); "
                         "give a rectangular array") from None


def _check_exponent(text: str, name: str) -> None:
    """Refuse decimal exponents beyond +-MAX_EXPONENT before Fraction expands them:
    "1e999999999" would build a billion-digit integer (minutes), for a value no float
    format can hold anyway."""
    match = _EXPONENT.search(text)
    if match and abs(int(match.group(1))) > MAX_EXPONENT:
        raise InputError(f"{name}={text!r} has a decimal exponent beyond +-{MAX_EXPONENT}; "
                         "give values within float range (|x| < 1.8e308)")


#: :func:`nonfinite_codes`: what each element of a float array is.
FINITE, NAN, POS_INF, NEG_INF = 0, 1, 2, 3


def nonfinite_codes(data: np.ndarray) -> np.ndarray | None:
    """Which elements of a float array are NaN or infinite: int8 codes (:data:`FINITE`, :data:`NAN`,
    :data:`POS_INF`, :data:`NEG_INF`) of its shape, or None when every element is finite (the common
    case: one pass of ``np.isfinite``). Integer and exact (object) arrays are finite."""
    array = np.asarray(data)
    if not (array.dtype.kind == "f" or array.dtype.name == "bfloat16"):
        return None
    a = array.astype(np.float64, copy=False)  # float16, bfloat16 and float32 widen exactly, NaN and inf too
    finite = np.isfinite(a)
    if finite.all():
        return None
    codes = np.zeros(a.shape, dtype=np.int8)
    codes[np.isnan(a)] = NAN
    codes[a == np.inf] = POS_INF
    codes[a == -np.inf] = NEG_INF
    return codes


def finite_part(data: np.ndarray, fill: float = 0.0) -> np.ndarray:
    """``data`` as float64 with every NaN and infinity replaced by ``fill`` (exact: a widening)."""
    a = np.asarray(data).astype(np.float64)
    a[~np.isfinite(a)] = fill
    return a


def _int_array(values: np.ndarray) -> np.ndarray:
    """int64 if every value fits with headroom, else an object array of Python ints."""
    if values.dtype != object:
        return values.astype(np.int64)
    if values.size == 0:
        return np.zeros(values.shape, dtype=np.int64)
    if max(abs(int(values.max())), abs(int(values.min()))) < _INT64_SAFE:
        return values.astype(np.int64)
    return values


#: Object arrays of Python ints made as ``small << t`` (an int64 ``small``), by identity: id -> (a weak
#: reference to the array, small, t); :func:`strip_twos` reads them back without a pass over the ints.
_BUILT: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray, int]] = {}


def _shifted(small: np.ndarray, t: int) -> np.ndarray:
    """``small << t`` as an object array of Python ints, remembered for :func:`strip_twos`."""
    values: np.ndarray = small.astype(object) << t
    if len(_BUILT) >= 8:  # the last few: a verification's inputs and results at one x
        _BUILT.clear()
    _BUILT[id(values)] = (weakref.ref(values), small, t)
    return values


def strip_twos(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``(values >> t, t)`` for a t with 2^t dividing every value (int64 where the quotients fit):
    the largest, or the one an array made by :func:`_shifted` was made with. Numbers near a
    float's overflow threshold are a 53-bit significand times 2^971 and more, Python ints as they
    are, int64 once the common power of two is out."""
    if values.dtype != object:
        return values, 0
    built = _BUILT.get(id(values))
    if built is not None and built[0]() is values:
        return built[1], built[2]
    nonzero = [int(v) for v in values.reshape(-1) if v]
    if not nonzero:
        return np.zeros(values.shape, dtype=np.int64), 0
    t = min((v & -v).bit_length() for v in nonzero) - 1
    return (_int_array(values >> t) if t else values), t


def _dyadic_scale(a: np.ndarray, top: float) -> int | None:
    """The smallest k in [1, 62] with every ``a * 2^k`` an integer below 2^62 in
    magnitude, or None (then the significand-by-significand path decides).

    Scaling by a power of two is exact in floating point (no overflow: ``top * 2^k``
    stays below 2^62), so each test is exact; a doubling search then a bisection take
    O(log k) passes of two reused buffers, instead of the ~25 array temporaries of the
    general path, for the common inputs with few fractional bits.
    """
    scaled, whole = np.empty_like(a), np.empty_like(a)

    def integral(k: int) -> bool:
        np.multiply(a, 2.0**k, out=scaled)
        return bool(np.array_equal(scaled, np.trunc(scaled, out=whole)))

    lo, hi = 0, 1  # a itself is not integral (the caller checked)
    while not integral(hi):
        if hi >= 62:
            return None
        lo, hi = hi, min(2 * hi, 62)
        if top * 2.0**hi >= 2**62:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if integral(mid) else (mid, hi)
    return hi if top * 2.0**hi < 2**62 else None


def _unique_int64(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(flat, return_inverse=True)`` of an int64 array; without a sort when
    the values span a range no wider than a few times their count (integer-valued
    gradients do: counts of windows, sums of a few weights): a presence table then
    numbers the values in O(size + range)."""
    if not flat.size:
        return flat.astype(np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(flat.min()), int(flat.max())
    if hi - lo > 4 * flat.size + 1024:
        uniq, inverse = np.unique(flat, return_inverse=True)
        return uniq, inverse.reshape(-1)
    offset = (flat - lo) if lo else flat
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[offset] = True
    rank = np.cumsum(present, dtype=np.int64) - 1  # rank[v] = number of distinct values below v
    return np.flatnonzero(present) + lo, rank[offset]


def _lowest_terms(nums: list[int], den: int) -> tuple[list[int], list[int]]:
    """``(p, q)`` lists with ``p[i] / q[i] == nums[i] / den`` in lowest terms (Python ints)."""
    gcds = [math.gcd(n, den) for n in nums]
    return [n // g for n, g in zip(nums, gcds)], [den // g for g in gcds]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building many numbers: SymPy's
    are GC-tracked, so a million of them trigger hundreds of collections (2/3 of the
    time) that can find nothing (numbers hold no references that could form a cycle)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: ``sympy.Rational.from_coprime_ints`` where SymPy has it (1.14 does; it skips the gcd
#: the caller has done and returns the same objects, Integer/Zero/One/Half included),
#: else the plain constructor (pyproject allows SymPy 1.12).
_rational = getattr(sympy.Rational, "from_coprime_ints", sympy.Rational)


@dataclasses.dataclass(frozen=True, eq=False)
class ExactArray:
    """An exact rational array: ``num / den`` with ``den`` a positive Python int."""

    num: np.ndarray
    den: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.num.shape)

    @classmethod
    def from_any(cls, data: Any, name: str = "x") -> ExactArray:
        """Convert an array-like exactly.

        Raises:
          InputError: an element is NaN, infinite, complex or not a number.
        """
        array = np.asarray(data, dtype=object) if not isinstance(data, np.ndarray) else data
        if array.dtype.kind == "f" or array.dtype.name == "bfloat16":  # bfloat16 (ml_dtypes) has kind "V"
            return cls._from_float(array, name)
        if array.dtype.kind in "iu":
            return cls(_int_array(array.astype(object)), 1)
        if array.dtype.kind == "b" or array.dtype.kind not in "O":
            raise InputError(f"{name} has dtype {array.dtype}; give real numbers (float, int or exact rationals)")
        flat = array.reshape(-1)
        fracs = [to_fraction(v, f"{name}[{', '.join(map(str, np.unravel_index(i, array.shape)))}]")
                 for i, v in enumerate(flat)]
        den = math.lcm(*(f.denominator for f in fracs)) if fracs else 1
        num = np.array([f.numerator * (den // f.denominator) for f in fracs] + [0], dtype=object)[:-1]
        return cls(_int_array(num).reshape(array.shape), den)

    @classmethod
    def _from_float(cls, array: np.ndarray, name: str) -> ExactArray:
        a = array.astype(np.float64, copy=False)  # float16, bfloat16 and float32 widen exactly
        if not np.isfinite(a).all():
            where = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
            raise InputError(f"{name}{list(where)} = {a[where]} is not finite; exact analysis needs finite values")
        top = float(np.abs(a).max()) if a.size else 0.0
        if top < 2**53 and np.array_equal(a, np.trunc(a)):
            return cls(a.astype(np.int64), 1)  # integers (generated inputs often are): themselves
        k = _dyadic_scale(a, top) if top < 2**53 else None  # (integral a with |a| >= 2^53: the general path)
        if k is not None:  # a few fractional bits (0.25, 1.5, ...): a * 2^k in int64, over 2^k
            return cls((a * 2.0**k).astype(np.int64), 1 << k)
        mant, exp = np.frexp(a)
        m = (mant * 2.0**53).astype(np.int64)  # exact: a 53-bit significand
        e = exp.astype(np.int64) - 53
        nz = m != 0
        if not nz.any():
            return cls(np.zeros(a.shape, dtype=np.int64), 1)
        # Strip trailing zero bits so the common denominator stays small.
        low = np.where(nz, m & -m, 1)
        tz = np.log2(low.astype(np.float64)).astype(np.int64)
        m = m >> np.where(nz, tz, 0)
        e = e + np.where(nz, tz, 0)
        emin = int(e[nz].min())
        shift = np.where(nz, e - emin, 0)
        den_exp = max(-emin, 0)
        lift = max(emin, 0)
        # A numerator has bit_length(m) + shift + lift bits (frexp's exponent of an integer
        # below 2^53 is its bit length): int64 unless one reaches 2^62. Near-ties such as
        # 1 + q·2^-33 need 34 bits, not the 53 + 33 a worst-case significand would.
        bits = np.frexp(m.astype(np.float64))[1] + shift
        if int(bits.max()) + lift <= 62:
            num = m << (shift + lift)
        elif int(bits.max()) <= 62:  # near the overflow threshold: (m << shift) << lift, 2^lift common to all
            num = _shifted(m << shift, lift)
        else:
            num = m.astype(object) << (shift + lift).astype(object)
        return cls(num, 1 << den_exp)

    def distinct(self) -> tuple[list[int], list[int], np.ndarray]:
        """The distinct values in lowest terms, and where each element's value is.

        Returns:
          (p, q, inverse): Python ints with ``p[i] / q[i]`` the i-th distinct value
          (``gcd(p[i], q[i]) == 1``, ``q[i] > 0``) and ``inverse`` an (size,) int64
          array, the index of each element's value (row-major). Gradients repeat few
          values (max pooling's dx is mostly 0), so converting each distinct value
          once is what makes :meth:`to_sympy` O(size) NumPy work plus O(distinct)
          Python work.
        """
        flat, den = self.num.reshape(-1), self.den
        if flat.dtype.kind not in "iu" or flat.dtype == np.uint64:  # Python ints (beyond int64)
            index: dict[int, int] = {}
            inverse = np.fromiter((index.setdefault(int(n), len(index)) for n in flat), np.int64, flat.size)
            return (*_lowest_terms(list(index), den), inverse)
        uniq, inverse = _unique_int64(flat.astype(np.int64, copy=False))
        if den >= 2**63:
            return (*_lowest_terms(uniq.tolist(), den), inverse)
        g = np.gcd(uniq, np.int64(den))  # vectorised; gcd(0, den) = den makes 0 into 0/1
        return (uniq // g).tolist(), (np.int64(den) // g).tolist(), inverse

    def to_sympy(self) -> np.ndarray:
        """Object array of SymPy rationals (``Integer``, ``Zero``, ``Half``, ... as
        ``sympy.Rational(p, q)`` gives them), one SymPy number built per distinct value."""
        return self._by_value(_rational)

    def to_fractions(self) -> np.ndarray:
        """Object array of :class:`fractions.Fraction`, one built per distinct value."""
        return self._by_value(Fraction)

    def _by_value(self, make: Any) -> np.ndarray:
        """Object array of ``make(p, q)`` for each element's value p/q in lowest terms,
        ``make`` called once per distinct value (:meth:`distinct`)."""
        p, q, inverse = self.distinct()
        table = np.empty(len(p), dtype=object)
        with _gc_paused():
            table[:] = [make(a, b) for a, b in zip(p, q)]
        return np.asarray(table[inverse]).reshape(self.num.shape)

    def to_numpy(self, dtype: Any = np.float64) -> np.ndarray:
        """Correctly rounded floats (round to nearest, ties to even) in ``dtype``."""
        if np.dtype(dtype) != np.float64:
            return round_fractions(self.to_fractions(), dtype)
        if (self.num.dtype == np.int64 and self.den < 2**53
                and (self.num.size == 0 or int(np.abs(self.num).max()) < 2**53)):
            # Both operands are exact doubles, so IEEE division rounds once, correctly.
            return self.num.astype(np.float64) / self.den
        den = self.den
        try:  # Python's int / int is correctly rounded to a double (as float(Fraction) is)
            flat = [int(n) / den for n in self.num.reshape(-1)]
        except OverflowError:  # beyond float64's range: round_fraction gives the infinity
            return round_fractions(self.to_fractions(), dtype)
        return np.array(flat, dtype=np.float64).reshape(self.num.shape)


def round_fraction(value: Fraction, dtype: Any) -> Any:
    """``value`` rounded to nearest in ``dtype`` (no double rounding through float64)."""
    dt = np.dtype(dtype)
    try:
        as_float = float(value)  # float() of a Fraction is correctly rounded
    except OverflowError:  # beyond float64's range: beyond every supported dtype's too
        as_float = math.inf if value > 0 else -math.inf
    with np.errstate(over="ignore"):
        guess = dt.type(as_float)
    if dt == np.float64:
        return guess
    if not np.isfinite(guess):  # the float64 may have rounded up onto the dtype's overflow threshold
        return _overflowed(value, dt, guess)
    with np.errstate(over="ignore"):  # guess the largest finite value: its upper neighbour is inf (skipped)
        lo = np.nextafter(guess, dt.type(-np.inf))
        hi = np.nextafter(guess, dt.type(np.inf))
    best = guess
    best_err = abs(Fraction(float(guess)) - value)
    for cand in (lo, hi):
        if not np.isfinite(cand):
            continue
        err = abs(Fraction(float(cand)) - value)
        if err < best_err or (err == best_err and int(cand.view(f"u{dt.itemsize}")) % 2 == 0):
            best, best_err = cand, err
    return best


def _overflowed(value: Fraction, dt: np.dtype[Any], guess: Any) -> Any:
    """``value`` to nearest in ``dt`` where its float64 rounds to ±inf there: ±inf from the
    largest finite value plus half its ULP on (a tie goes to inf: the largest's significand is
    odd), else the largest finite value itself (double rounding through float64 can reach the
    threshold from below)."""
    largest = np.nextafter(dt.type(np.inf), dt.type(0))
    big = Fraction(float(largest))
    threshold = big + (big - Fraction(float(np.nextafter(largest, dt.type(0))))) / 2
    if abs(value) >= threshold:
        return guess
    return largest if value > 0 else -largest


def round_fractions(values: np.ndarray, dtype: Any) -> np.ndarray:
    """Round an object array of exact rationals element-wise into ``dtype``."""
    dt = np.dtype(dtype)
    flat = values.reshape(-1)
    cache: dict[Fraction, Any] = {}
    out = np.empty(flat.size, dtype=dt)
    for i, v in enumerate(flat):
        f = v if isinstance(v, Fraction) else to_fraction(v)
        r = cache.get(f)
        if r is None:
            r = cache[f] = round_fraction(f, dt)
        out[i] = r
    return out.reshape(values.shape)


def read_exact(data: Any, name: str) -> ExactArray:
    """A loss's input as integer numerators over one common denominator (the domain checks compare
    numerators with the denominator, so no element becomes a Fraction); what is no array of real
    numbers is an :class:`InputError` naming ``name``."""
    if isinstance(data, np.ndarray) and data.dtype.kind == "c" or np.iscomplexobj(data):
        raise InputError(f"{name} is complex; give real numbers")
    try:
        return ExactArray.from_any(data, name)
    except InputError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} could not be read as an array of numbers: {exc}") from None


def magnitude(value: Any) -> str:
    """An exact number in 7 significant digits (a Fraction beyond float64's range too)."""
    import decimal

    f = Fraction(value)
    with decimal.localcontext() as ctx:
        ctx.prec = 7
        return f"{decimal.Decimal(f.numerator) / decimal.Decimal(f.denominator):.6e}"
