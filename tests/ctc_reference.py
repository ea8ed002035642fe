"""A plain NumPy CTC (log-space alpha-beta, Graves et al. 2006), the derivative with respect to the
log-probabilities as free inputs: ``-r_b·γ_b(t, c)``. Written from the definition for the tests
(tests/test_loss_ctc.py), independent of symjac's own evaluation (MPFR, probability space);
``defect=`` plants one slip each."""

from __future__ import annotations

from typing import Any

import numpy as np


def _lse(*terms: np.ndarray) -> Any:
    m = max(terms)
    if m == -np.inf:
        return m
    return m + np.log(sum(np.exp(t - m) for t in terms))


def item(x: np.ndarray, target: list[int], frames: int, blank: int) -> tuple[Any, np.ndarray]:
    """``(ℓ, dℓ/dx)`` of one item, x ``(T, C)``; ``ℓ = inf`` and a NaN derivative at an impossible alignment."""
    dt = x.dtype.type
    ext = [blank]
    for c in target:
        ext += [c, blank]
    n = len(ext)
    grad = np.zeros_like(x)
    if frames < len(target) + sum(a == b for a, b in zip(target, target[1:])):
        grad[:frames] = np.nan
        return dt(np.inf), grad
    ninf = dt(-np.inf)
    alpha = np.full((frames, n), ninf, dtype=x.dtype)
    beta = np.full((frames, n), ninf, dtype=x.dtype)
    alpha[0, 0] = x[0, ext[0]]
    if n > 1:
        alpha[0, 1] = x[0, ext[1]]
    beta[frames - 1, n - 1] = x[frames - 1, ext[n - 1]]
    if n > 1:
        beta[frames - 1, n - 2] = x[frames - 1, ext[n - 2]]
    for t in range(1, frames):
        for s in range(n):
            terms = [alpha[t - 1, s]] + ([alpha[t - 1, s - 1]] if s >= 1 else []) + \
                ([alpha[t - 1, s - 2]] if s >= 2 and ext[s] != ext[s - 2] else [])
            alpha[t, s] = _lse(*terms) + x[t, ext[s]]
    for t in range(frames - 2, -1, -1):
        for s in range(n):
            terms = [beta[t + 1, s]] + ([beta[t + 1, s + 1]] if s + 1 < n else []) + \
                ([beta[t + 1, s + 2]] if s + 2 < n and ext[s] != ext[s + 2] else [])
            beta[t, s] = _lse(*terms) + x[t, ext[s]]
    ends = [alpha[frames - 1, n - 1]] + ([alpha[frames - 1, n - 2]] if n > 1 else [])
    ell = -_lse(*ends)
    for t in range(frames):
        for c in set(ext):
            logs = [alpha[t, s] + beta[t, s] - x[t, c] for s in range(n) if ext[s] == c]
            grad[t, c] = -np.exp(_lse(*logs) + ell)
    return dt(ell), grad


def _rows(tg: np.ndarray, tl: np.ndarray) -> list[list[int]]:
    if tg.ndim == 2:
        return [list(tg[b, :tl[b]]) for b in range(len(tl))]
    ends = np.cumsum(tl)
    return [list(tg[e - n:e]) for n, e in zip(tl, ends)]


def pair(loss: Any, defect: str | None = None) -> tuple[Any, Any]:
    """``(forward, derivative)`` taking PyTorch's arguments; ``defect``: ``"mean_no_length"``,
    ``"ignores_zero_infinity"``, ``"ignores_upstream"``, ``"wrong_blank"``, ``"unscaled"``."""
    blank = loss.blank + (1 if defect == "wrong_blank" else 0)
    zero = bool(loss.zero_infinity) and defect != "ignores_zero_infinity"
    s = 1.0 if defect == "unscaled" else float(loss.scale)

    def items(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ells, grads = [], np.zeros_like(lp)
        for b, target in enumerate(_rows(tg, tl)):
            ell, g = item(lp[:, b, :], target, int(il[b]), blank)
            if zero and np.isinf(ell):
                ell, g = lp.dtype.type(0), np.zeros_like(g)
            ells.append(ell)
            grads[:, b, :] = g
        return np.array(ells, dtype=lp.dtype), grads

    def weights(tl: np.ndarray, n: int, dtype: Any) -> np.ndarray:
        if loss.reduction == "mean":
            per = np.ones(n) if defect == "mean_no_length" else np.maximum(tl, 1)
            return (1 / (n * per)).astype(dtype)
        return np.ones(n, dtype=dtype)

    def forward(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray) -> Any:
        ells, _ = items(lp, tg, il, tl)
        if loss.reduction == "none":
            return ells
        return np.asarray((ells * weights(tl, len(tl), lp.dtype)).sum(), dtype=lp.dtype)

    def derivative(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray, up: Any = None) -> np.ndarray:
        _, grads = items(lp, tg, il, tl)
        if loss.reduction == "none":
            r = np.ones(len(tl), dtype=lp.dtype) if defect == "ignores_upstream" else up
        else:
            r = weights(tl, len(tl), lp.dtype)
        with np.errstate(invalid="ignore"):
            return (grads * (lp.dtype.type(s) * r)[None, :, None]).astype(lp.dtype)

    return forward, derivative
