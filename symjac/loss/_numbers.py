"""The numbers exact loss values are computed in: MPFR (gmpy2), a whole array at a time.

Every operation is correctly rounded to :data:`PRECISION` bits (about 60 significant
digits, the :data:`symjac.loss._spec.DPS` the results promise), and arrays of MPFR
numbers are NumPy ``object`` arrays, so one lowered SymPy expression evaluates every
element of a loss in a few C loops (:func:`lambdify`). mpmath, one element at a time in
Python, takes 3.5–4.5x as long for ``loss_derivative`` at 100,000 elements
(``benchmarks/cliffs.py`` prints both side by side).

MPFR's exponent range is finite (about 2^±2^30) where mpmath's is not: ``e^z`` for
``|z| = 1e300`` overflows. Elements with an input beyond :data:`LIMIT` in magnitude
therefore go through mpmath (``symjac.loss._evaluate``), and their values come back
here through :func:`from_mpf`. Up to :data:`LIMIT`, ``e^{±k·z}`` stays far inside the
range for any factor ``k`` a template forms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Any

import gmpy2
import mpmath
import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter

from symjac._exact import ExactArray

PRECISION = 200  # bits: 60 significant digits
LIMIT = Fraction(2**24)  # larger inputs go through mpmath (unbounded exponents)
_EXPONENTS = 2**30 - 2  # MPFR's exponent range here: |x| in (2^-_EXPONENTS, 2^_EXPONENTS)


def context() -> Any:
    """The MPFR context of every evaluation: ``with context(): ...``."""
    return gmpy2.context(gmpy2.get_context(), precision=PRECISION)


def _vector(fn: Callable[[Any], Any]) -> Any:
    return np.frompyfunc(fn, 1, 1)


def _rational(p: int, q: int) -> Any:
    return gmpy2.mpfr(gmpy2.mpq(p, q))


# The names lambdify's NumPy printer emits for a template's functions, on object arrays.
FUNCTIONS: dict[str, Any] = {
    "exp": _vector(gmpy2.exp),
    "log": _vector(gmpy2.log),
    "log1p": _vector(gmpy2.log1p),
    "sqrt": _vector(gmpy2.sqrt),  # correctly rounded, as IEEE's (cosine_embedding's norms, triplet_margin's distance)
    "sign": _vector(gmpy2.sign),
    "_rational": _rational,
    "_pi": lambda: gmpy2.const_pi(),  # π at the context's precision (the Stirling term's log 2π), not numpy.pi
}


class _Printer(NumPyPrinter):  # type: ignore[misc]
    """NumPy's printer, with every rational constant exact: 1/3 as ``_rational(1, 3)``, not a float."""

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"_rational({int(expr.p)}, {int(expr.q)})"

    def _print_Pi(self, expr: sympy.Expr) -> str:
        return "_pi()"


def lambdify(symbols: Sequence[sympy.Symbol], exprs: Sequence[sympy.Expr]) -> Callable[..., list[np.ndarray]]:
    """``exprs`` as one function of arrays of MPFR numbers (one array per symbol)."""
    printer = _Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": True,
                        "user_functions": {name: name for name in FUNCTIONS}})
    return sympy.lambdify(symbols, list(exprs), modules=[FUNCTIONS, "numpy"],  # type: ignore[no-any-return]
                          printer=printer, cse=True)


def number(value: Fraction | float | int) -> Any:
    """One exact input as MPFR (exact for every binary float; a rational rounds once)."""
    return gmpy2.mpfr(value)


def from_fractions(values: np.ndarray, times: Fraction = Fraction(1)) -> np.ndarray:
    """An object array of Fractions as MPFR numbers (each ``v·times``, rounded once),
    converting each distinct value once."""
    flat = values.reshape(-1)
    cache: dict[int, Any] = {}  # by identity: repeated options are one object, and Fraction hashing is slow
    out = np.empty(flat.size, dtype=object)
    for i, v in enumerate(flat):
        got = cache.get(id(v))
        if got is None:
            got = cache[id(v)] = gmpy2.mpfr(v * times if times != 1 else v)
        out[i] = got
    return out.reshape(values.shape)


def from_exact(num: np.ndarray, den: int) -> np.ndarray:
    """The exact rationals ``num/den`` (integer numerators, one positive denominator) as
    MPFR numbers, each correctly rounded once, as :func:`from_fractions` rounds them.

    A power-of-two ``den`` (every float input): ``(1·n)·2^-k``, the integer rounded
    once to :data:`PRECISION` bits, then scaled exactly, whole arrays at a time; any
    other ``den``: :func:`from_fractions` of one Fraction per distinct value.
    """
    if den & (den - 1):
        return from_fractions(ExactArray(num, den).to_fractions())
    with np.errstate(all="ignore"):
        ints = num.astype(object) * gmpy2.mpfr(1)
        return np.asarray(ints if den == 1 else ints * gmpy2.mpfr(gmpy2.mpq(1, den)), dtype=object)


def from_floats(values: np.ndarray) -> np.ndarray:
    """A float array (any width) as MPFR numbers, exactly.

    As ``1·v`` in MPFR: a product of two numbers of at most 53 bits is exact at any
    precision >= 53 (signed zeros, infinities and NaN carry over), and MPFR's
    multiplication by a double runs ~6x as fast as ``gmpy2.mpfr(v)``'s constructor.
    """
    as_objects = np.asarray(values, dtype=np.float64).astype(object)
    with np.errstate(all="ignore"):  # NumPy reads the FPU flags MPFR's handling of inf and NaN leaves set
        return np.asarray(as_objects * gmpy2.mpfr(1), dtype=object)


def zeros(shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out[...] = gmpy2.mpfr(0)
    return out


def finite(values: np.ndarray) -> np.ndarray:
    """Elementwise: neither inf nor nan (a bool array)."""
    return np.asarray(_vector(gmpy2.is_finite)(values), dtype=bool)


def from_mpf(value: Any) -> Any:
    """An mpmath number as MPFR (rounded to :data:`PRECISION`; beyond MPFR's range, ±inf or 0)."""
    if not isinstance(value, mpmath.mpf):  # an int or float from a lowered function: exact at these bits
        with mpmath.workprec(PRECISION):
            value = mpmath.mpf(value)
    if not mpmath.isfinite(value):
        return gmpy2.mpfr(float(value))
    sign, man, exp, bits = value._mpf_
    if man and exp + bits > _EXPONENTS:
        return gmpy2.mpfr("-inf" if sign else "inf")
    if man and exp + bits < -_EXPONENTS:
        return -gmpy2.mpfr(0) if sign else gmpy2.mpfr(0)
    return gmpy2.mul_2exp(gmpy2.mpfr(-man if sign else man), exp)


def mpf_array(values: np.ndarray) -> np.ndarray:
    """An object array of MPFR numbers as mpmath numbers, exactly."""
    out = np.empty(values.size, dtype=object)
    for i, v in enumerate(values.reshape(-1)):
        out[i] = to_mpf(v)
    return out.reshape(values.shape)


def to_mpf(values: Any) -> Any:
    """One MPFR number as an mpmath number, exactly (an array: see :func:`mpf_array`)."""
    if isinstance(values, np.ndarray):
        return mpf_array(values)
    if not gmpy2.is_finite(values):
        return mpmath.mpf(float(values))
    man, exp = values.as_mantissa_exp()
    return mpmath.mp.make_mpf(mpmath.libmp.from_man_exp(int(man), int(exp)))  # no rounding


def total(values: Iterable[Any]) -> Any:
    """Σ values (MPFR, rounded once per addition at :data:`PRECISION` bits)."""
    return gmpy2.fsum(list(values))


def exact_context() -> Any:
    """A context in which + and - of two inputs below :data:`LIMIT` are exact (any two
    binary floats or :data:`PRECISION`-bit numbers: exponents from -1074 to 24)."""
    return gmpy2.context(gmpy2.get_context(), precision=PRECISION + 1100 + 64)


def is_number(value: Any) -> bool:
    """Is value an MPFR number?"""
    return isinstance(value, type(gmpy2.mpfr(0)))
