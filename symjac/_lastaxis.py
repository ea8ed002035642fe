"""Reductions over a short last axis (a window's K slots, an axis window's k cells).

NumPy reduces a short innermost axis one small row at a time: a max over the 9 slots
of 1024 windows takes ~40 us, an ``any`` ~15 us, where the verification's own work
per call of the implementation is tens of microseconds. With the axis moved to the
front as a contiguous copy, the same reduction runs down whole rows (~6-12 us).
Max, logical or and integer counts are exact in any order, so the result is the
same array (values and dtype). Arrays above :data:`SMALL` elements, object arrays
and empty axes reduce in place as before (no copy of a large array; the same errors).
"""

from __future__ import annotations

import numpy as np

#: Largest array (elements) reduced through a contiguous copy.
SMALL = 2**18


def _front(a: np.ndarray) -> np.ndarray | None:
    """``a`` with its last axis first, contiguous; None where the plain reduction is used."""
    if a.ndim == 0 or a.shape[-1] == 0 or a.size > SMALL or a.dtype == object:
        return None
    return np.ascontiguousarray(a.transpose((a.ndim - 1,) + tuple(range(a.ndim - 1))))  # np.moveaxis, less its checks


def max_last(a: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """``a.max(axis=-1, keepdims=keepdims)``."""
    front = _front(a)
    if front is None:
        return np.asarray(a.max(axis=-1, keepdims=keepdims))
    top = front.max(axis=0)
    return np.asarray(top[..., None] if keepdims else top)


def any_last(a: np.ndarray) -> np.ndarray:
    """``a.any(axis=-1)``."""
    front = _front(a)
    return np.asarray(a.any(axis=-1) if front is None else front.any(axis=0))


def count_last(a: np.ndarray) -> np.ndarray:
    """``a.sum(axis=-1)`` of a bool array: how many are True (int)."""
    front = _front(a)
    return np.asarray(a.sum(axis=-1) if front is None else front.sum(axis=0))
