"""Float dtypes symjac works in: float16, bfloat16, float32, float64.

bfloat16 is not a NumPy dtype; ``ml_dtypes`` (the package JAX and TensorFlow use)
provides it, as the optional extra ``symjac[bfloat16]``. It is imported only when
bfloat16 is asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac._errors import InputError

#: Names accepted wherever a float dtype is, in order of precision.
FLOAT_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")
#: Significand bits p (implicit bit included): unit roundoff u = 2^-p.
PRECISION = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _bfloat16() -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise InputError("dtype 'bfloat16' needs the ml_dtypes package: pip install 'symjac[bfloat16]'") from None
    return np.dtype(ml_dtypes.bfloat16)


def float_dtype(value: Any, name: str = "dtype") -> np.dtype:
    """``value`` as one of the supported float dtypes.

    Raises:
      InputError: not float16, bfloat16, float32 or float64 (or bfloat16 without
        ml_dtypes installed); the message says what is valid.
    """
    text = value if isinstance(value, str) else getattr(value, "__name__", None)
    if text == "bfloat16" or (isinstance(value, np.dtype) and value.name == "bfloat16"):
        return _bfloat16()
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is None or dt.name not in FLOAT_DTYPE_NAMES:
        raise InputError(f"{name}={value!r} is not valid: give one of {', '.join(map(repr, FLOAT_DTYPE_NAMES))}")
    return dt


def is_float(dt: np.dtype) -> bool:
    """Whether ``dt`` is one of the supported float dtypes."""
    return dt.name in FLOAT_DTYPE_NAMES


def precision(dt: np.dtype) -> int:
    """Significand bits of ``dt`` (11, 8, 24, 53)."""
    return PRECISION[dt.name]


def unit_roundoff(dt: np.dtype) -> float:
    """u = 2^-p: half the spacing of the floats in [1, 2)."""
    return 2.0 ** -precision(dt)


def max_finite(dt: np.dtype) -> float:
    """The largest finite value of ``dt``."""
    if dt.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(dt).max)
    return float(np.finfo(dt).max)


def smallest_subnormal(dt: np.dtype) -> float:
    if dt.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(dt).smallest_subnormal)
    return float(np.finfo(dt).smallest_subnormal)
