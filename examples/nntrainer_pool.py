"""Seed 000 re-created: nntrainer-style average pooling with SAME padding, in NumPy.

`buggy` ends the backward loops at ``H - k + top`` / ``W - k + left`` (the audited
defect); `fixed` ends them at ``H - k + bottom`` / ``W - k + right``. Both share the
(correct) forward. Arrays are 2-D (H, W); kernel 2, stride 1, SAME_UPPER padding.

    symjac verify specs/seeds/nntrainer_avgpool_same_2x2.toml --impl examples/nntrainer_pool.py:buggy
"""

from types import SimpleNamespace

import numpy as np

K = 2


def _pads(length: int) -> tuple[int, int]:
    total = max((length - 1) + K - length, 0)  # SAME, stride 1
    return total // 2, total - total // 2


def _cells(i: int, j: int, h: int, w: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(i, i + K) for b in range(j, j + K) if 0 <= a < h and 0 <= b < w]


def forward(x: np.ndarray) -> np.ndarray:
    h, w = x.shape
    (top, bottom), (left, right) = _pads(h), _pads(w)
    y = np.zeros((h, w), dtype=x.dtype)
    for i in range(-top, h - K + bottom + 1):
        for j in range(-left, w - K + right + 1):
            cells = _cells(i, j, h, w)
            y[i + top, j + left] = sum(x[a, b] for a, b in cells) / len(cells)
    return y


def _backward(x: np.ndarray, dy: np.ndarray, bug: bool) -> np.ndarray:
    h, w = x.shape
    (top, bottom), (left, right) = _pads(h), _pads(w)
    end_h = h - K + (top if bug else bottom)
    end_w = w - K + (left if bug else right)
    dx = np.zeros_like(x)
    for i in range(-top, end_h + 1):
        for j in range(-left, end_w + 1):
            cells = _cells(i, j, h, w)
            for a, b in cells:
                dx[a, b] += dy[i + top, j + left] / len(cells)
    return dx


buggy = SimpleNamespace(forward=forward, backward=lambda x, dy: _backward(x, dy, bug=True))
fixed = SimpleNamespace(forward=forward, backward=lambda x, dy: _backward(x, dy, bug=False))
