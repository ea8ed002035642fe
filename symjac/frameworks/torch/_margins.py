"""The margin family's configurations for ``conform torch`` (issue 32): their inputs, some on a hinge's kink.

:mod:`symjac.frameworks.torch._losses` draws every loss configuration and hands these ops here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._loss_grid import dyadic


def draw_margin(rng: np.random.Generator, op: str, kwargs: dict[str, Any], n: int, c: int,
                 weights: Callable[[float, float], tuple[float, ...] | None]) -> tuple[Any, Any, tuple[int, ...]]:
    """The margin family's inputs (issue 32), some on a hinge's kink on purpose: (pred, target, element shape)."""
    if op in ("hinge_embedding_loss", "soft_margin_loss"):
        pred, target = dyadic(rng, -3, 3, (n, c)), rng.choice([-1.0, 1.0], (n, c))
        if op == "hinge_embedding_loss":
            kwargs["margin"] = margin = float(rng.choice([1.0, 0.5, 2.0]))
            pred[(target == -1) & (rng.random((n, c)) < 0.3)] = margin  # z = margin at y = -1: the kink
        return pred, target, (n, c)
    pred = dyadic(rng, -3, 3, (n, c))
    if op == "multilabel_soft_margin_loss":
        kwargs["weight"] = weights(0.25, 2)
        return pred, rng.choice([0.0, 1.0], (n, c)), (n,)
    if op == "multi_margin_loss":
        kwargs.update(p=int(rng.choice([1, 2])), margin=float(rng.choice([1.0, 0.5])), weight=weights(0.25, 2))
        target = rng.integers(0, c, n)
        r = int(rng.integers(0, n))
        pred[r, (target[r] + 1) % c] = pred[r, target[r]] - kwargs["margin"]  # a hinge at its kink
        return pred, target, (n,)
    if op == "triplet_margin_loss":
        return _triplet_draw(rng, kwargs, n)
    target = np.full((n, c), -1)  # multilabel_margin_loss: each row's targets, then -1
    for r in range(n):
        k = int(rng.integers(0, c + 1))
        target[r, :k] = rng.permutation(c)[:k]
    return pred, target, (n,)


def _triplet_draw(rng: np.random.Generator, kwargs: dict[str, Any], n: int) -> tuple[Any, None, tuple[int, ...]]:
    """triplet_margin_loss's rows [anchor | positive | negative] of 3·D (D from 1 to 3), no label: with p = 1
    (or D = 1) a row on the hinge's kink (the anchor beyond both others, so ε cancels: d(a, q) - d(a, n) =
    Σ(n - q) = -margin), with swap a row on the swap's kink (positive = anchor). Values on the 1/8 grid
    and ε = 1/16 off it: x - y + ε is never 0 (no norm at 0), and every p = 1 distance is exact even in
    bfloat16, so no row lies within rounding of a kink it is not on (with ε = 1e-6, lost in float16 and
    bfloat16, d(a, n) and d(q, n) that differ by 2ε round equal and the swap's min flips)."""
    d = int(rng.integers(1, TRIPLET_D + 1))
    margin = float(rng.choice([1.0, 0.5, 2.0]))
    kwargs.update(margin=margin, p=int(rng.choice([1, 2])), eps=0.0625, swap=bool(rng.random() < 0.5))
    a, q, neg = (dyadic(rng, -2, 2, (n, d), 3) for _ in range(3))
    r = int(rng.integers(0, n))
    if kwargs["p"] == 1 or d == 1:
        neg[r, 0] = q[r, 0] - margin - float((neg[r, 1:] - q[r, 1:]).sum())  # Σ(n - q) = -margin
        a[r] = np.maximum(q[r], neg[r]) + 0.5
    if kwargs["swap"]:
        q[(r + 1) % n] = a[(r + 1) % n]
    return np.concatenate([a, q, neg], axis=-1), None, (n,)


def draw_pair(rng: np.random.Generator, op: str, kwargs: dict[str, Any], n: int,
              c: int) -> tuple[Any, Any, tuple[int, ...]]:
    """The pairwise margin losses' inputs (issue 32): margin_ranking's (x1, x2) pairs along a last axis, the
    label (y, 0) pairs, some pairs on the hinge's kink -y·(x1 - x2) + margin = 0 on purpose;
    cosine_embedding's rows [x1 | x2] of 2·c, the label rows (y, 0, ...), at margin 0 some rows orthogonal
    at y = -1 (cos = 0: the kink)."""
    if op == "cosine_embedding_loss":
        return _draw_cosine(rng, kwargs, n, c)
    kwargs["margin"] = margin = float(rng.choice([0.0, 0.5, 1.0, -1.0]))
    x1, x2, y = dyadic(rng, -3, 3, (n, c)), dyadic(rng, -3, 3, (n, c)), rng.choice([-1.0, 1.0], (n, c))
    kink = rng.random((n, c)) < 0.3
    x1[kink] = (x2 + y * margin)[kink]  # -y·(x1 - x2) + margin = -y²·margin + margin = 0
    return np.stack([x1, x2], axis=-1), np.stack([y, np.zeros((n, c))], axis=-1), (n, c)


def _draw_cosine(rng: np.random.Generator, kwargs: dict[str, Any], n: int, c: int) -> tuple[Any, Any, tuple[int, ...]]:
    c = min(c, COSINE_D)
    kwargs["margin"] = margin = float(rng.choice([0.0, 0.0, 0.25, -0.5]))
    x1, x2, y = dyadic(rng, -3, 3, (n, c)), dyadic(rng, -3, 3, (n, c)), rng.choice([-1.0, 1.0], n)
    for r in range(n):
        if not np.any(x1[r]):  # a zero x1: PyTorch's ε gives |∇| ~ 1e6, beyond float16
            x1[r, 0] = 1.0
        if not np.any(x2[r]):
            x2[r, -1] = 1.0
        if margin == 0 and y[r] == -1 and rng.random() < 0.4:  # orthogonal: Σ x1·x2 = 0, cos = 0, the kink
            x2[r] = 0.0
            x2[r, 0], x2[r, 1] = x1[r, 1], -x1[r, 0]  # c >= 2
            if not np.any(x2[r]):  # x1 = (0, 0, ...): (1, 0, ...) is orthogonal to it
                x2[r, 0] = 1.0
    label = np.zeros((n, 2 * c))
    label[:, 0] = y
    return np.concatenate([x1, x2], axis=-1), label, (n,)


#: The largest D of the grid's cosine_embedding rows [x1 | x2] and triplet_margin rows [a | q | n]: the exact
#: hvp of a row takes SymPy's Hessian of its 2·D- or 3·D-symbol template, which grows steeply with D (about
#: 10 s at cosine D = 4, minutes beyond: past a cell's timeout, so a timeout finding that is symjac's own cost)
COSINE_D, TRIPLET_D = 3, 2

#: The pairwise margin losses (issue 32), drawn by :func:`draw_pair`: a stream of their own after the
#: margin family's (seeded apart), so its configurations keep their numbers.
PAIR_OPS = ("margin_ranking_loss", "cosine_embedding_loss")
#: The margin family's ops (issue 32), drawn by :func:`draw_margin`.
MARGIN_OPS = ("hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
              "multilabel_margin_loss", "triplet_margin_loss")
