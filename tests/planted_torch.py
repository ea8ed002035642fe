"""Custom ``torch.autograd.Function`` pools with one planted bug each, in one transform
(not a test module itself; tests/test_frameworks_transforms.py uses them).

Every one is ``max_pool2d(kernel_size=2, stride=2)``: its forward and VJP are PyTorch's own
(``max_pool2d(return_indices=True)`` and ``max_unpool2d``), so only the planted transform is
wrong. On a (1, 1, 6, 6) input the output is (1, 1, 3, 3): window (0, 0, i, j) reads rows
2i..2i+1 and columns 2j..2j+1.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402


def _route(gy: torch.Tensor, idx: torch.Tensor, size: torch.Size) -> torch.Tensor:
    return F.max_unpool2d(gy, idx, 2, 2, output_size=size)


def _gather(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """J·t of a max pool: each window takes the tangent of its maximum's cell."""
    return t.flatten(-2).gather(-1, idx.flatten(-2)).view(idx.shape)


class _MaxPool2x2(torch.autograd.Function):
    """PyTorch's own max_pool2d(2, 2) forward and VJP; the subclasses plant a wrong ``jvp``."""

    @staticmethod
    def forward(ctx, x):
        y, idx = F.max_pool2d(x, 2, 2, return_indices=True)
        ctx.save_for_backward(idx)
        ctx.idx, ctx.size = idx, x.shape[-2:]
        return y

    @staticmethod
    def backward(ctx, gy):
        (idx,) = ctx.saved_tensors
        return _route(gy, idx, ctx.size)


class ZeroJvp(_MaxPool2x2):
    """Forward mode returns zeros (as MaxPool1d's forward-AD Jacobian did: pytorch/pytorch 78342)."""

    @staticmethod
    def jvp(ctx, t):
        return torch.zeros(t.shape[:-2] + (t.shape[-2] // 2, t.shape[-1] // 2), dtype=t.dtype)


class LastColumnJvp(_MaxPool2x2):
    """Forward mode right except in the last column of windows (j = 2), whose tangent is dropped."""

    @staticmethod
    def jvp(ctx, t):
        out = _gather(t, ctx.idx)
        out[..., -1] = 0
        return out


class _WrongRoute(torch.autograd.Function):
    """dx = unpool(gy), the VJP; its own backward (the double backward in gy, J·ggx) is planted:
    the last row of windows (i = 2) gathers the first row's cells."""

    @staticmethod
    def forward(ctx, gy, idx, size):
        ctx.save_for_backward(idx)
        return _route(gy, idx, size)

    @staticmethod
    def backward(ctx, ggx):
        (idx,) = ctx.saved_tensors
        out = _gather(ggx, idx)
        out[..., -1, :] = out[..., 0, :]
        return out, None, None


class WrongDoubleBackward(torch.autograd.Function):
    """Forward and VJP right; the VJP's derivative with respect to dy is wrong in the last row."""

    @staticmethod
    def forward(ctx, x):
        y, idx = F.max_pool2d(x, 2, 2, return_indices=True)
        ctx.save_for_backward(idx)
        ctx.size = x.shape[-2:]
        return y

    @staticmethod
    def backward(ctx, gy):
        (idx,) = ctx.saved_tensors
        return _WrongRoute.apply(gy, idx, ctx.size)


class ReversedBatchRule(torch.autograd.Function):
    """A hand-written batching rule (``vmap`` staticmethod) that returns the samples in reverse
    order; the per-sample forward and VJP are right."""

    @staticmethod
    def forward(x):
        return F.max_pool2d(x, 2, 2)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        _, idx = F.max_pool2d(x, 2, 2, return_indices=True)
        return _route(gy, idx, x.shape[-2:])

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        out = F.max_pool2d(x.flatten(0, 1), 2, 2).unflatten(0, (x.shape[0], -1))
        return out.flip(0), 0
