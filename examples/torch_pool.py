"""PyTorch pooling as an implementation under test: a factory for `symjac sweep`.

``make(spec)`` returns NumPy ``forward(x)`` / ``backward(x, dy)`` callables backed by
torch.nn.functional, for the configurations torch supports natively (explicit
symmetric padding, no SAME); others raise NotImplementedError and are skipped.

    symjac sweep examples/sweep_small.toml --impl examples/torch_pool.py:make -j 2
"""

from types import SimpleNamespace

import numpy as np


def make(spec):
    import torch
    import torch.nn.functional as F

    name = type(spec).__name__
    rank = spec.rank
    if name == "Pool":
        if isinstance(spec.padding, str) and spec.padding != "valid":
            raise NotImplementedError("torch pooling has no SAME padding")
        pads = (0,) * rank if spec.padding == "valid" else tuple(lo for lo, _ in spec.padding)
        if spec.padding != "valid" and any(lo != hi for lo, hi in spec.padding):
            raise NotImplementedError("torch pooling pads symmetrically")
        if any(2 * p > k for p, k in zip(pads, spec.kernel)):
            raise NotImplementedError("torch needs padding <= kernel / 2")
        if spec.mode == "max":
            fn = getattr(F, f"max_pool{rank}d")
            op = lambda t: fn(t, spec.kernel, spec.stride, pads, spec.dilation, ceil_mode=spec.ceil_mode)  # noqa: E731
        else:
            if any(d != 1 for d in spec.dilation):
                raise NotImplementedError("torch avg pooling has no dilation")
            if isinstance(spec.divisor, int) and rank == 1:
                raise NotImplementedError("avg_pool1d has no divisor_override")
            fn = getattr(F, f"avg_pool{rank}d")
            kw = dict(ceil_mode=spec.ceil_mode, count_include_pad=spec.divisor == "include_pad")
            if isinstance(spec.divisor, int):
                kw["divisor_override"] = spec.divisor
            op = lambda t: fn(t, spec.kernel, spec.stride, pads, **kw)  # noqa: E731
    elif name == "AdaptivePool":
        fn = getattr(F, f"adaptive_{spec.mode}_pool{rank}d")
        op = lambda t: fn(t, spec.output_size)  # noqa: E731
    else:
        fn = getattr(F, f"adaptive_{spec.mode}_pool{rank}d")
        op = lambda t: fn(t, (1,) * rank)  # noqa: E731

    last = spec.layout == "channels_last"

    def to_torch(a):
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.movedim(-1, 1) if last else t

    def to_numpy(t):
        return (t.movedim(1, -1) if last else t).detach().contiguous().numpy()

    def forward(x):
        with torch.no_grad():
            return to_numpy(op(to_torch(x)))

    def backward(x, dy):
        t = to_torch(x).clone().requires_grad_(True)
        op(t).backward(to_torch(dy))
        return to_numpy(t.grad)

    return SimpleNamespace(forward=forward, backward=backward)
