"""Rounding bounds, once for every verifier: floating dtypes, unit roundoff, γ and ULPs.

With ``u`` the unit roundoff of a dtype (half the distance from 1 to the next float:
2^-11 for float16, 2^-8 for bfloat16, 2^-24 for float32, 2^-53 for float64), Higham's
``γ_n = n·u / (1 - n·u)`` bounds the relative error of n rounded operations
(*Accuracy and Stability of Numerical Algorithms*, §3.1): |θ_n| <= γ_n for
``1 + θ_n = Π (1 + δ_i)^{±1}``, |δ_i| <= u. It needs n·u < 1 (a sum of 256 terms in
bfloat16, or of 2048 in float16, has none); beyond, :func:`gamma` gives the bound the
lemma's proof rests on, ``(1 - u)^{-n} - 1`` (each factor lies in [1 - u, 1/(1 - u)]),
finite for every n and below γ_n wherever that is defined. Errors are reported in
units in the last place (ULPs) of the exact value in the dtype.

The NumPy forms (:func:`gamma`, :func:`ulps`) serve the pooling verifier's vectorised
rows; the multiple-precision forms (:func:`gamma_mp`, :func:`ulp_mp`) serve the loss
verifier, whose exact values are MPFR numbers (:mod:`symjac.loss._numbers`).

bfloat16 is not a NumPy dtype; ``ml_dtypes`` (the package JAX and TensorFlow use)
provides it, as the optional extra ``symjac[bfloat16]``, imported only when bfloat16
is asked for. :func:`finfo` answers for all four dtypes.
"""

from __future__ import annotations

from typing import Any

import gmpy2
import numpy as np

from symjac._errors import InputError

#: The floating dtypes symjac verifies in, by name.
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _bfloat16() -> np.dtype[Any]:
    try:
        import ml_dtypes
    except ImportError:
        raise InputError("dtype 'bfloat16' needs the ml_dtypes package: pip install 'symjac[bfloat16]'") from None
    dt: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dt


def float_dtype(dtype: Any) -> np.dtype[Any]:
    """``dtype`` as a NumPy dtype, if it is one symjac verifies in.

    Raises:
      InputError: anything else (or bfloat16 without ml_dtypes), naming the valid dtypes.
    """
    name = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", getattr(dtype, "name", None))
    if name == "bfloat16":
        return _bfloat16()
    try:
        dt: np.dtype[Any] | None = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in FLOAT_DTYPES:
        raise InputError(f"dtype={dtype!r} is not valid: give one of {', '.join(map(repr, FLOAT_DTYPES))}")
    return dt


def is_float(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is one of :data:`FLOAT_DTYPES`."""
    return dtype.name in FLOAT_DTYPES


def finfo(dtype: Any) -> Any:
    """Machine limits of a float dtype, bfloat16 included (``ml_dtypes.finfo``)."""
    dt = float_dtype(dtype)
    if dt.name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.finfo(dt)  # type: ignore[no-untyped-call]
    return np.finfo(dt)


#: precision() per NumPy dtype asked so far (finfo takes ~6 us; a verification asks a few times per input).
_PRECISION: dict[np.dtype[Any], int] = {}


def precision(dtype: Any) -> int:
    """Significand bits p, the implicit bit included: 11, 8, 24, 53."""
    if isinstance(dtype, np.dtype) and dtype in _PRECISION:
        return _PRECISION[dtype]
    p = int(finfo(dtype).nmant) + 1
    if isinstance(dtype, np.dtype):
        _PRECISION[dtype] = p
    return p


def unit_roundoff(dtype: Any) -> float:
    """u = 2^-p for a dtype with p significand bits (an exact power of two)."""
    return 2.0 ** -precision(dtype)


def gamma(n: Any, u: float) -> np.ndarray:
    """Higham's γ_n = n·u / (1 - n·u), elementwise over ``n``; where n·u >= 1 (γ_n is
    undefined: negative or infinite) the bound ``(1 - u)^{-n} - 1`` on the same |θ_n|
    (see the module docstring), with headroom for its float64 evaluation."""
    n = np.asarray(n, dtype=np.float64)
    nu = n * u
    if np.all(nu < 1):
        return np.asarray(nu / (1 - nu))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        product = np.expm1(-n * np.log1p(-u)) * (1 + 2.0**-40)  # inf once it leaves float64: no bound
        return np.asarray(np.where(nu < 1, nu / (1 - nu), product))


def ulps(error: np.ndarray, exact: np.ndarray, dtype: Any) -> np.ndarray:
    """``error`` in units in the last place of ``exact`` rounded to ``dtype``."""
    with np.errstate(over="ignore"):
        spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
    tiny = float(finfo(dtype).smallest_subnormal)
    return np.asarray(error / np.maximum(spacing, tiny))


def unit_roundoff_mp(dtype: Any) -> Any:
    """:func:`unit_roundoff` as an MPFR number (exact)."""
    return gmpy2.mul_2exp(gmpy2.mpfr(1), -precision(dtype))


def gamma_mp(k: int, u: Any) -> Any:
    """γ_k in MPFR; once k·u >= 1, ``(1 - u)^{-k} - 1`` (:func:`gamma`)."""
    with gmpy2.context(gmpy2.get_context(), precision=200):
        ku = k * gmpy2.mpfr(u)
        if ku < 1:
            return ku / (1 - ku)
        return gmpy2.expm1(-k * gmpy2.log1p(-gmpy2.mpfr(u))) * (1 + gmpy2.mpfr(2) ** -190)


def ulp_mp(dtype: Any, magnitude: Any) -> Any:
    """The spacing of ``dtype`` at ``|magnitude|`` (at the largest finite value beyond the range), in MPFR."""
    dt = np.dtype(dtype)
    with np.errstate(over="ignore"):
        v = dt.type(float(abs(magnitude)))
    if not np.isfinite(v):
        v = finfo(dt).max
    return gmpy2.mpfr(float(np.spacing(v)))
