"""Held-out PyTorch objects for benchmarks/heldout34.py (issue 34): ``torch.autograd.Function``
subclasses with hand-written backward, forward-mode (``jvp``) and batching (``vmap``) rules, each
correct or with one planted defect. Written from the issue's descriptions only.

``avg2d(...)``: 2-D average pooling, kernel 2, stride 2, VALID (N, C, H, W); ``max1d(...)``: 1-D
max pooling, kernel k, stride s, VALID (N, C, L). Each returns a new class, so one object carries
exactly one defect.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812


def _avg(x: Any) -> Any:
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    x = x[..., :h, :w]
    return (x[..., 0::2, 0::2] + x[..., 0::2, 1::2] + x[..., 1::2, 0::2] + x[..., 1::2, 1::2]) / 4


def _merge(x: Any, bdim: int) -> tuple[Any, int]:
    """The batch axis moved to 0 and merged with N: the per-sample op runs on (B*N, C, ...)."""
    x = x.movedim(bdim, 0)
    return x.reshape((-1,) + tuple(x.shape[2:])), x.shape[0]


def avg2d(*, jvp_bug: str | None = None, second_bug: bool = False, vmap_bug: str | None = None,
          abort_in_jvp: bool = False) -> type:
    """2-D average pooling k=2 s=2 as an autograd.Function.

    Args:
      jvp_bug: ``"weights"``: the JVP divides by 2, not 4.
      second_bug: the backward multiplies by ``x - x.detach() + 1`` (1 in value, so first order is
        right; its derivative in x is 1, so the double backward's ddx is not 0).
      vmap_bug: ``"odd"`` (an odd batch's last sample zero-filled), ``"in_dims"`` (the rule ignores
        in_dims: it pools the batched tensor as it comes and says the batch is on axis 0).
      abort_in_jvp: the JVP aborts the process (a crash in forward mode).
    """

    class Avg2d(torch.autograd.Function):
        @staticmethod
        def forward(x: Any) -> Any:
            return _avg(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            (x,) = inputs
            ctx.shape = tuple(x.shape)
            ctx.save_for_backward(x)

        @staticmethod
        def backward(ctx: Any, dy: Any) -> Any:
            h, w = ctx.shape[-2:]
            up = dy.repeat_interleave(2, -2).repeat_interleave(2, -1) / 4
            dx = F.pad(up, (0, w - up.shape[-1], 0, h - up.shape[-2]))
            if second_bug:
                (x,) = ctx.saved_tensors
                dx = dx * (x - x.detach() + 1)
            return dx

        @staticmethod
        def jvp(ctx: Any, t: Any) -> Any:
            if abort_in_jvp:
                os.abort()
            out = _avg(t)
            return out * 2 if jvp_bug == "weights" else out

        @staticmethod
        def vmap(info: Any, in_dims: Any, x: Any) -> Any:
            (bdim,) = in_dims
            if bdim is None:
                return _avg(x), None
            if vmap_bug == "in_dims":
                return _avg(x), 0
            merged, size = _merge(x, bdim)
            out = _avg(merged)
            out = out.reshape((size, -1) + tuple(out.shape[1:]))
            if vmap_bug == "odd" and size % 2:
                out = torch.cat([out[:-1], torch.zeros_like(out[-1:])])
            return out, 0

    return Avg2d


def max1d(k: int = 2, s: int = 2, *, jvp_bug: str | None = None, vmap_bug: str | None = None) -> type:
    """1-D max pooling (VALID) as an autograd.Function, routing to the first maximum.

    Args:
      jvp_bug: ``"last_cell"``: the JVP takes each window's last cell's tangent, not its maximum's.
      vmap_bug: ``"wide"`` (for batches above 2, samples past the second get the second's result),
        ``"out_dims"`` (the rule computes with the batch on axis 0 but returns out_dims = in_dims).
    """

    def index(x: Any) -> Any:
        win = x.unfold(-1, k, s)
        first = torch.arange(win.shape[-2], device=x.device) * s
        return first + torch.argmax(win, dim=-1)

    class Max1d(torch.autograd.Function):
        @staticmethod
        def forward(x: Any) -> Any:
            return x.unfold(-1, k, s).amax(-1)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            (x,) = inputs
            ctx.shape = tuple(x.shape)
            ctx.idx = index(x)  # an intermediate both the backward and the JVP read

        @staticmethod
        def backward(ctx: Any, dy: Any) -> Any:
            return torch.zeros(ctx.shape, dtype=dy.dtype).scatter_add(-1, ctx.idx, dy)

        @staticmethod
        def jvp(ctx: Any, t: Any) -> Any:
            idx = ctx.idx
            if jvp_bug == "last_cell":
                idx = torch.arange(idx.shape[-1]) * s + (k - 1)
                idx = idx.expand(t.shape[:-1] + idx.shape)
            return t.gather(-1, idx)

        @staticmethod
        def vmap(info: Any, in_dims: Any, x: Any) -> Any:
            (bdim,) = in_dims
            if bdim is None:
                return Max1d.forward(x), None
            moved = x.movedim(bdim, 0)
            out = moved.unfold(-1, k, s).amax(-1)
            if vmap_bug == "wide" and moved.shape[0] > 2:
                out = torch.cat([out[:2], out[1:2].expand((moved.shape[0] - 2,) + tuple(out.shape[1:]))])
            if vmap_bug == "out_dims":
                return out, bdim
            return out, 0

    return Max1d
