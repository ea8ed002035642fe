"""1-D pooling written in NumPy from the definitions, with NaN, ±inf and extreme magnitudes in mind
(tests/test_nonfinite.py, tests/test_extreme.py): correct references and planted defects.

Every function takes x (..., L) and pools the last axis with ``kernel``, ``stride`` and a symmetric
``padding`` (padding cells take no part: max and the count of avg exclude them), independently of
symjac's own lowering. Max pooling reads NaN by a policy: ``propagate`` (IEEE 754-2019 maximum:
NaN is above every value; PyTorch) or ``ignore`` (maximumNumber: NaN is below every value, a window
of NaN only is NaN), and routes a window's gradient to its first or last maximal cell in that order.
"""

from __future__ import annotations

import numpy as np


def windows(x: np.ndarray, kernel: int, stride: int, padding: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index (O, K) of each window's cells, valid (O, K), gathered x (..., O, K) with 0 at padding)."""
    length = x.shape[-1]
    out = (length + 2 * padding - kernel) // stride + 1
    index = np.arange(out)[:, None] * stride - padding + np.arange(kernel)[None, :]
    valid = (index >= 0) & (index < length)
    gathered = np.where(valid, x[..., np.clip(index, 0, length - 1)], x.dtype.type(0))
    return index, valid, gathered


def scatter(x: np.ndarray, index: np.ndarray, valid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """dx (..., L): each window's row (..., O, K) added into its cells."""
    dx = np.zeros(x.shape, dtype=np.float64)
    flat = dx.reshape(-1, x.shape[-1])
    r = rows.reshape(-1, *index.shape)
    for k in range(index.shape[1]):
        for o in range(index.shape[0]):
            if valid[o, k]:
                flat[:, index[o, k]] += r[:, o, k]
    return dx.astype(x.dtype)


def max_route(x: np.ndarray, kernel: int, stride: int, padding: int, nan: str = "propagate",
              tie: str = "first") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each window's maximal slot (..., O) under the NaN policy and tie policy, with the windows."""
    index, valid, w = windows(x, kernel, stride, padding)
    level = np.where(np.isnan(w), 1 if nan == "propagate" else -1, 0)
    level = np.where(valid, level, -2)
    top = level.max(axis=-1, keepdims=True)
    cand = level == top
    with np.errstate(invalid="ignore"):
        values = np.where(cand & (top == 0), w, -np.inf)
        tied = cand & ((top != 0) | (values == values.max(axis=-1, keepdims=True)))
    k = tied.shape[-1]
    slot = tied.argmax(axis=-1) if tie == "first" else k - 1 - tied[..., ::-1].argmax(axis=-1)
    return slot, index, valid, w


def max_forward(x, kernel=3, stride=2, padding=1, nan="propagate"):
    slot, _, _, w = max_route(x, kernel, stride, padding, nan)
    return np.take_along_axis(w, slot[..., None], axis=-1)[..., 0]


def max_backward(x, dy, kernel=3, stride=2, padding=1, nan="propagate", tie="first"):
    slot, index, valid, w = max_route(x, kernel, stride, padding, nan, tie)
    rows = (np.arange(w.shape[-1]) == slot[..., None]) * dy[..., None].astype(np.float64)
    return scatter(x, index, valid, rows)


def avg_forward(x, kernel=3, stride=2, padding=1, accumulate=None):
    """Σ over the valid cells / their count; the sum in ``accumulate`` (default: x's dtype)."""
    _, valid, w = windows(x, kernel, stride, padding)
    acc = np.dtype(accumulate or x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.where(valid, w, 0).astype(acc).sum(axis=-1, dtype=acc)
        return (total / valid.sum(axis=-1).astype(acc)).astype(x.dtype)


def avg_backward(x, dy, kernel=3, stride=2, padding=1):
    index, valid, w = windows(x, kernel, stride, padding)
    rows = np.broadcast_to((dy / valid.sum(axis=-1).astype(x.dtype))[..., None], w.shape) * valid
    return scatter(x, index, valid, rows)


def lp_forward(x, kernel=2, stride=2, p=2, scaled=True):
    """(Σ x^p)^(1/p) over each (valid-padding) window: scaled by the window's largest finite |x|
    (``scaled``), or naively (the power first: it overflows where x^p passes the dtype's range)."""
    _, _, w = windows(x, kernel, stride, 0)
    t = x.dtype.type
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if not scaled:
            return ((w ** p).sum(axis=-1) ** t(1 / p)).astype(x.dtype)
        finite = np.where(np.isfinite(w), np.abs(w), t(0))
        m = finite.max(axis=-1, keepdims=True)
        m = np.where(m == 0, t(1), m)
        y = m[..., 0] * ((w / m) ** p).sum(axis=-1) ** t(1 / p)
        y = np.where(np.isinf(w).any(axis=-1), t(np.inf), y)  # an infinity dominates (even p)
        return np.where(np.isnan(w).any(axis=-1), t(np.nan), y).astype(x.dtype)


def lp_backward(x, dy, kernel=2, stride=2, p=2, scaled=True):
    """dy · x^(p-1)·S^(1/p - 1) per cell (0 at a window whose S is 0), scaled as :func:`lp_forward`."""
    index, valid, w = windows(x, kernel, stride, 0)
    t = x.dtype.type
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = np.where(np.isfinite(w), np.abs(w), t(0)).max(axis=-1, keepdims=True) if scaled else np.ones_like(w[..., :1])
        m = np.where(m == 0, t(1), m)
        v = w / m
        s = (v ** p).sum(axis=-1, keepdims=True)
        rows = v ** (p - 1) * s ** t(1 / p - 1)
        rows = np.where(s == 0, t(0), rows)
        if scaled:  # a window holding an infinity: 0 at its finite cells (the limit), NaN at the infinite ones
            rows = np.where(np.isinf(w).any(axis=-1, keepdims=True), np.where(np.isinf(w), t(np.nan), t(0)), rows)
        return scatter(x, index, valid, rows * dy[..., None])
