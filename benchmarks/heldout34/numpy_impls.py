"""Held-out NumPy implementations for benchmarks/heldout34.py (issue 34), correct and buggy.

Written from the issue's descriptions of the bug classes, not from symjac's code or tests: every
window rule, divisor and routing here is this file's own (PyTorch's documented conventions),
and none calls symjac.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

import numpy as np

Window = tuple[int, int]
#: per spatial axis: the input length -> that axis's windows [start, end), clipped to the input
AxisRule = Callable[[int], list[Window]]


def strided(k: int, s: int, lo: int = 0, hi: int = 0, ceil: bool = False) -> AxisRule:
    """PyTorch's windows along one axis: out = floor((L + lo + hi - k) / s) + 1 (ceil_mode: ceil,
    without a last window that starts in the high padding); each clipped to the input."""

    def rule(n: int) -> list[Window]:
        span = n + lo + hi - k
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= n + lo:
            out -= 1
        return [(max(0, i * s - lo), min(n, i * s - lo + k)) for i in range(out)]

    return rule


def adaptive(o: int) -> AxisRule:
    """Adaptive pooling's windows (PyTorch): [floor(i L / o), ceil((i + 1) L / o)), also for L < o."""
    return lambda n: [(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]


def adaptive_fixed_width(o: int) -> AxisRule:
    """A wrong adaptive rule: each window starts at floor(i L / o) and is ceil(L / o) cells wide."""
    return lambda n: [(i * n // o, min(n, i * n // o - (-n // o))) for i in range(o)]


def adaptive_fixed_end(o: int) -> AxisRule:
    """A wrong adaptive rule: each window ends at ceil((i + 1) L / o) and is ceil(L / o) cells wide."""
    return lambda n: [(max(0, -(-(i + 1) * n // o) + (n // -o)), -(-(i + 1) * n // o)) for i in range(o)]


def adaptive_nearest(o: int) -> AxisRule:
    """A wrong upsampling rule: one cell per output, floor(i L / o) (nearest-neighbour indexing)."""
    return lambda n: [(i * n // o, i * n // o + 1) for i in range(o)]


class Pool:
    """Pooling over the trailing spatial axes of an (N, C, *spatial) array, one window at a time,
    vectorised over N and C.

    Args:
      mode: ``"avg"``, ``"max"`` or ``"lp"``.
      rules: one :data:`AxisRule` per spatial axis.
      divisor: avg: ``"cells"`` (the window's cells: padding excluded) or ``"kernel"`` (its area:
        padding included, as a bug where the spec excludes it).
      route: max: ``"first"`` (the first maximum; ``np.argmax`` takes a NaN as the maximum, the cell
        PyTorch routes a NaN window's gradient to) or ``"nanargmax"`` (the largest non-NaN cell: the
        NaN window's gradient goes to a cell that is not the NaN) or ``"first_cell"`` (a NaN window's
        gradient to the window's first cell) or ``"float16"`` (the first maximum of a float16 copy).
      p: lp's power; ``scaled``: lp computes ``m * (sum((x/m)^p))^(1/p)`` with ``m`` the window's
        largest magnitude (no overflow) instead of ``(sum x^p)^(1/p)``.
      kernel: avg with ``divisor="kernel"``: the area.
      skip_last_cell: backward forgets each window's last cell (a long kernel's edge bug).
      skip_last_window: backward forgets the last window along the last axis.
    """

    def __init__(self, mode: str, rules: Sequence[AxisRule], *, divisor: str = "cells", route: str = "first",
                 p: int | None = None, scaled: bool = False, kernel: int = 0, skip_last_cell: bool = False,
                 skip_last_window: bool = False) -> None:
        self.mode, self.rules, self.divisor, self.route, self.p = mode, list(rules), divisor, route, p
        self.scaled, self.kernel = scaled, kernel
        self.skip_last_cell, self.skip_last_window = skip_last_cell, skip_last_window

    def windows(self, shape: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
        axes = [rule(n) for rule, n in zip(self.rules, shape[-len(self.rules):])]
        return [(tuple(idx), tuple(slice(a, b) for a, b in (axes[d][i] for d, i in enumerate(idx))))
                for idx in product(*(range(len(a)) for a in axes))]

    def out_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(shape[:-len(self.rules)]) + tuple(len(r(n)) for r, n in zip(self.rules, shape[-len(self.rules):]))

    def _block(self, x: np.ndarray, where: tuple[slice, ...]) -> np.ndarray:
        block = x[(Ellipsis, *where)]
        return block.reshape(block.shape[:2] + (-1,))

    def _pick(self, block: np.ndarray) -> np.ndarray:
        """The flat cell (in the window) a max window routes to, per (N, C)."""
        if self.route == "nanargmax":
            filled = np.where(np.isnan(block), -np.inf, block)
            return np.argmax(filled, axis=-1)
        if self.route == "first_cell":
            return np.where(np.isnan(block).any(-1), 0, np.argmax(block, axis=-1))
        if self.route == "float16":
            return np.argmax(block.astype(np.float16), axis=-1)
        return np.argmax(block, axis=-1)

    def _lp_value(self, block: np.ndarray) -> np.ndarray:
        p = self.p or 2
        if not self.scaled:
            return np.sum(block ** p, axis=-1) ** (1 / p)
        m = np.max(np.abs(block), axis=-1)
        safe = np.where(m == 0, 1, m)
        return m * np.sum((block / safe[..., None]) ** p, axis=-1) ** (1 / p)

    def forward(self, x: np.ndarray) -> np.ndarray:
        y = np.zeros(self.out_shape(x.shape), x.dtype)
        for idx, where in self.windows(x.shape):
            block = self._block(x, where)
            if self.mode == "max":
                y[(Ellipsis, *idx)] = np.max(block, axis=-1)
            elif self.mode == "avg":
                d = self.kernel if self.divisor == "kernel" else block.shape[-1]
                y[(Ellipsis, *idx)] = np.sum(block, axis=-1) / x.dtype.type(d)
            else:
                y[(Ellipsis, *idx)] = self._lp_value(block)
        return y

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        dx = np.zeros_like(x)
        wins = self.windows(x.shape)
        last = max((idx[-1] for idx, _ in wins), default=0)
        for idx, where in wins:
            if self.skip_last_window and idx[-1] == last:
                continue
            block = self._block(x, where)
            g = dy[(Ellipsis, *idx)][..., None]
            if self.mode == "max":
                share = np.zeros_like(block)
                np.put_along_axis(share, self._pick(block)[..., None], 1, axis=-1)
            elif self.mode == "avg":
                d = self.kernel if self.divisor == "kernel" else block.shape[-1]
                share = np.full_like(block, 1 / x.dtype.type(d))
            else:
                share = self._lp_share(block)
            if self.skip_last_cell:
                share[..., -1] = 0
            target = dx[(Ellipsis, *where)]
            target += (g * share).reshape(target.shape)
        return dx

    def _lp_share(self, block: np.ndarray) -> np.ndarray:
        """d y / d x_i = x_i^(p-1) / y^(p-1), 0 at an all-zero window (PyTorch's convention)."""
        p = self.p or 2
        if self.scaled:
            m = np.max(np.abs(block), axis=-1, keepdims=True)
            safe = np.where(m == 0, 1, m)
            z = block / safe
            s = np.sum(z ** p, axis=-1, keepdims=True)
            ok = s > 0
            return np.where(ok, z ** (p - 1) / np.where(ok, s, 1) ** ((p - 1) / p), 0)
        y = np.sum(block ** p, axis=-1, keepdims=True) ** (1 / p)
        ok = y > 0
        return np.where(ok, block ** (p - 1) / np.where(ok, y, 1) ** (p - 1), 0)


# ------------------------------------------------------------------ lp pooling, p = 1: forward mode


def lp1_jvp(k: int, s: int, *, zero_sum_bug: bool, mixed_only: bool = False) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """J(x)·t of 1-D lp pooling with p = 1 (y = the window's sum): each window's sum of t.
    ``zero_sum_bug``: as PyTorch's lp_pool differentiates relu(|s|): 0 where the window's x sums to 0;
    ``mixed_only``: only where nonzero cells sum to 0 (an all-zero window is right)."""
    rule = strided(k, s)

    def jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        wins = rule(x.shape[-1])
        out = np.stack([t[..., a:b].sum(-1) for a, b in wins], -1)
        if zero_sum_bug:
            sums = np.stack([x[..., a:b].sum(-1) for a, b in wins], -1)
            hit = sums == 0
            if mixed_only:
                hit &= np.stack([np.any(x[..., a:b] != 0, -1) for a, b in wins], -1)
            out = np.where(hit, 0, out).astype(t.dtype)
        return out

    return jvp


# ------------------------------------------------------------------ threads writing after return


class LateWriter:
    """A backward (or forward) that returns its result and lets a helper thread keep writing into
    it: ``delay`` seconds later the thread scales the array (``scale``) or zeroes its last element.
    ``join``: the thread finishes before the call returns (correct)."""

    def __init__(self, pool: Pool, *, side: str, delay: float, join: bool = False, zero_last: bool = False) -> None:
        self.pool, self.side, self.delay, self.join, self.zero_last = pool, side, delay, join, zero_last

    def _late(self, out: np.ndarray) -> np.ndarray:
        def work() -> None:
            if self.delay:
                time.sleep(self.delay)
            if self.zero_last:
                out.reshape(-1)[-1] = 0
            else:
                np.multiply(out, 2, out=out)

        if self.join:  # the helper computes a copy and hands it back before return: nothing late
            half = out / 2
            worker = threading.Thread(target=lambda: np.multiply(half, 2, out=half))
            worker.start()
            worker.join()
            return half
        threading.Thread(target=work, daemon=True).start()
        return out

    def forward(self, x: np.ndarray) -> np.ndarray:
        y = self.pool.forward(x)
        return self._late(y) if self.side == "forward" else y

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        dx = self.pool.backward(x, dy)
        return self._late(dx) if self.side == "backward" else dx


# ------------------------------------------------------------------ batched rules (arrays with a leading batch axis)


class Batched:
    """Batched forward/backward of a per-sample :class:`Pool` over a leading batch axis: the rule
    computes samples in pairs. ``odd_bug``: an odd batch's last sample is zero-filled (its pair is
    missing); ``wide_bug``: for batches above 2, samples past the second get the second's result."""

    def __init__(self, pool: Pool, *, odd_bug: bool = False, wide_bug: bool = False) -> None:
        self.pool, self.odd_bug, self.wide_bug = pool, odd_bug, wide_bug

    def _each(self, fn: Callable[..., np.ndarray], *batches: np.ndarray) -> np.ndarray:
        size = batches[0].shape[0]
        outs = [fn(*(b[i] for b in batches)) for i in range(size)]
        out = np.stack(outs)
        if self.odd_bug and size % 2:
            out[-1] = 0
        if self.wide_bug and size > 2:
            out[2:] = out[1]
        return out

    def forward(self, xs: np.ndarray) -> np.ndarray:
        return self._each(self.pool.forward, xs)

    def backward(self, xs: np.ndarray, dys: np.ndarray) -> np.ndarray:
        return self._each(self.pool.backward, xs, dys)


# ------------------------------------------------------------------ losses


def _softmax(z: np.ndarray, shift: bool) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True)) if shift else np.exp(z)
    return e / e.sum(-1, keepdims=True)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


class SoftmaxCE:
    """Softmax cross-entropy from logits over the last axis, probability labels, label smoothing
    eps (q = (1 - eps) y + eps / K), mean over rows (or sum), times the loss scale S in the
    derivative. ``unshifted``: softmax and log-sum-exp without subtracting the row's maximum;
    ``log_of_softmax``: the forward takes log(softmax(z)) (0 -> -inf at extreme logits)."""

    def __init__(self, *, eps: float = 0.0, scale: float = 1.0, reduction: str = "mean", unshifted: bool = False,
                 log_of_softmax: bool = False) -> None:
        self.eps, self.scale, self.reduction = eps, scale, reduction
        self.unshifted, self.log_of_softmax = unshifted, log_of_softmax

    def _q(self, y: np.ndarray) -> np.ndarray:
        return (1 - self.eps) * y + self.eps / y.shape[-1]

    def _rows(self, z: np.ndarray) -> float:
        return float(np.prod(z.shape[:-1])) if self.reduction == "mean" else 1.0

    def forward(self, z: np.ndarray, y: np.ndarray) -> Any:
        if self.log_of_softmax:
            logp = np.log(_softmax(z, shift=True))
        elif self.unshifted:
            logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        else:
            logp = _log_softmax(z)
        return z.dtype.type(-(self._q(y) * logp).sum() / self._rows(z))

    def derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        g = _softmax(z, shift=not self.unshifted) - self._q(y)
        return (self.scale * g / self._rows(z)).astype(z.dtype)


class SigmoidCE:
    """Sigmoid cross-entropy from logits, mean over elements. ``exp_ratio``: the derivative as
    exp(z) / (1 + exp(z)) - y (inf / inf = NaN past z ~ 710 in float64)."""

    def __init__(self, *, exp_ratio: bool = False) -> None:
        self.exp_ratio = exp_ratio

    def forward(self, z: np.ndarray, y: np.ndarray) -> Any:
        return z.dtype.type(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))

    def derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.exp_ratio:
            with np.errstate(over="ignore", invalid="ignore"):
                p = np.exp(z) / (1 + np.exp(z))
        else:
            p = np.where(z >= 0, 1 / (1 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1 + np.exp(-np.abs(z))))
        return ((p - y) / z.size).astype(z.dtype)


class Huber:
    """PyTorch's huber_loss (``kind="huber"``: 0.5 d² inside |d| < δ, δ(|d| - δ/2) outside) or
    smooth_l1_loss (``kind="smooth_l1"``, beta = δ: huber / δ), mean reduction; derivative and
    Hessian-vector product. ``clip_at_one``: the derivative clips d at ±1 whatever δ;
    ``hvp_everywhere``: the second derivative of the quadratic branch applied everywhere."""

    def __init__(self, kind: str, delta: float, *, clip_at_one: bool = False, hvp_everywhere: bool = False) -> None:
        self.kind, self.delta, self.clip_at_one, self.hvp_everywhere = kind, delta, clip_at_one, hvp_everywhere

    def _per(self, d: np.ndarray) -> np.ndarray:
        δ = self.delta
        v = np.where(np.abs(d) < δ, 0.5 * d * d, δ * (np.abs(d) - 0.5 * δ))
        return v / δ if self.kind == "smooth_l1" else v

    def forward(self, z: np.ndarray, y: np.ndarray) -> Any:
        return z.dtype.type(np.mean(self._per(z - y)))

    def derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        d, δ = z - y, self.delta
        g = np.clip(d, -1, 1) if self.clip_at_one else np.where(np.abs(d) < δ, d, δ * np.sign(d))
        g = g / δ if self.kind == "smooth_l1" else g
        return (g / z.size).astype(z.dtype)

    def hvp(self, z: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
        inside = np.ones_like(z) if self.hvp_everywhere else (np.abs(z - y) < self.delta).astype(z.dtype)
        h = inside / self.delta if self.kind == "smooth_l1" else inside
        return (h * v / z.size).astype(z.dtype)


def object_dtype(pool: Pool) -> dict[str, Callable[..., Any]]:
    """A backward that returns its (right) values as an object-dtype array."""
    return {"forward": pool.forward, "backward": lambda x, dy: pool.backward(x, dy).astype(object)}


def nan_input(shape: Sequence[int], at: Sequence[tuple[int, ...]], seed: int = 7) -> np.ndarray:
    """Distinct integers (a permutation) with NaN at the given cells."""
    n = math.prod(shape)
    x = np.random.default_rng(seed).permutation(n).astype(np.float64).reshape(shape) - n // 2
    for cell in at:
        x[cell] = np.nan
    return x
