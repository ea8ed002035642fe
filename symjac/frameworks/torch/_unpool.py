"""PyTorch's ``max_unpool1d/2d/3d`` with their :class:`symjac.MaxUnpool` spec, configurations and known defect.

===========================  ===================================================
PyTorch                      symjac
===========================  ===================================================
``kernel_size``, ``stride``  ``kernel``, ``stride`` (None: ``kernel``)
``padding=p``                ``padding=((p, p),)*rank``
``output_size``              ``output_size`` (spatial; within default ± stride)
``indices``                  an index counts its (N, C) plane: ``flat="plane"``
===========================  ===================================================

The callables take the indices after x (:mod:`symjac.verifiers.unpool`): ``forward(x, indices)``,
``backward(x, indices, dy)`` (``torch.autograd.grad``), ``jvp(x, indices, t)`` (``torch.func.jvp``),
``double_backward(x, indices, dy, v)``. Measured (torch 2.13, CPU): the backward is
``dy.gather(indices)`` for every input cell, so at a repeated index the overwritten value gets a
gradient (:func:`known_defect`), and the double backward's ``ddy`` sums the writes to one cell; a plane
split between threads lets a different write win from call to call (PyTorch's documented nondeterminism).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Config, Impl, KnownDefect, call_text, grid_size, label, require
from symjac.frameworks.torch._arrays import ints, to_numpy, to_torch
from symjac.pool._ops.unpool import MaxUnpool

#: Unpooling configurations per grid: this share of the grid's size.
SHARE = 6
#: The input families whose indices repeat whatever the kernel (:mod:`symjac.verifiers.unpool._inputs`).
REPEATING = ("repeats", "equal_values", "extreme", "nonfinite")


def _ints(value: Any, rank: int, field: str) -> tuple[int, ...]:
    return ints(value, rank, field, f"torch's max_unpool{rank}d takes")


def _max_unpool(rank: int, kernel_size: Any, stride: Any, padding: Any, output_size: Any) -> tuple[MaxUnpool, Impl]:
    torch = require("torch")
    op = f"max_unpool{rank}d"
    fn = getattr(torch.nn.functional, op)
    kernel = _ints(kernel_size, rank, "kernel_size")
    strides = kernel if stride is None else _ints(stride, rank, "stride")
    pads = _ints(padding, rank, "padding")
    size = None if output_size is None else _ints(output_size, rank, "output_size")
    spec = MaxUnpool(kernel, stride=strides, padding=tuple((p, p) for p in pads), output_size=size)
    kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "output_size": output_size}

    def call(xt: Any, it: Any) -> Any:
        return fn(xt, it, kernel_size, stride, padding, output_size)

    def forward(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return to_numpy(call(to_torch(x), to_torch(indices)))

    def backward(x: np.ndarray, indices: np.ndarray, dy: np.ndarray) -> np.ndarray:
        xt = to_torch(x).requires_grad_(True)
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(call(xt, to_torch(indices)), xt, to_torch(dy))
        return to_numpy(dx)

    def jvp(x: np.ndarray, indices: np.ndarray, t: np.ndarray) -> np.ndarray:
        it = to_torch(indices)
        return to_numpy(torch.func.jvp(lambda a: call(a, it), (to_torch(x),), (to_torch(t),))[1])

    def double_backward(x: np.ndarray, indices: np.ndarray, dy: np.ndarray,
                        v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt, dyt = to_torch(x).requires_grad_(True), to_torch(dy).requires_grad_(True)
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(call(xt, to_torch(indices)), xt, dyt, create_graph=True)
            ddx, ddy = torch.autograd.grad(dx, (xt, dyt), to_torch(v), allow_unused=True)
        return (to_numpy(ddx) if ddx is not None else np.zeros_like(x), to_numpy(ddy))

    reproducer = ("import torch\nxt = torch.tensor(x, requires_grad=True)\nit = torch.tensor(indices)\n"
                  f"y = {call_text(f'torch.nn.functional.{op}', kwargs, 'xt, it')}\n"
                  "(dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))\n"
                  "print('y =', y.detach().numpy()); print('dx =', dx.numpy())\n")
    fns: dict[str, Any] = {"forward": forward, "backward": backward, "jvp": jvp, "double_backward": double_backward}
    return spec, Impl(fns["forward"], fns["backward"], "torch", op, kwargs, reproducer, jvp=fns["jvp"],
                      double_backward=fns["double_backward"],
                      missing={"vmap": "symjac does not check max unpooling's batching rule"})


def max_unpool1d(kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> tuple[MaxUnpool, Impl]:
    """``torch.nn.functional.max_unpool1d`` and its spec (input N, C, L; indices of its shape)."""
    return _max_unpool(1, kernel_size, stride, padding, output_size)


def max_unpool2d(kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> tuple[MaxUnpool, Impl]:
    """``torch.nn.functional.max_unpool2d`` and its spec (input N, C, H, W)."""
    return _max_unpool(2, kernel_size, stride, padding, output_size)


def max_unpool3d(kernel_size: Any, stride: Any = None, padding: Any = 0,
                 output_size: Any = None) -> tuple[MaxUnpool, Impl]:
    """``torch.nn.functional.max_unpool3d`` and its spec (input N, C, D, H, W)."""
    return _max_unpool(3, kernel_size, stride, padding, output_size)


def unpool_configurations(grid: str) -> Iterator[Config]:
    """Seeded max_unpool1d/2d/3d configurations: kernel 2 or 3, stride 1 to 3, padding up to half the kernel
    (PyTorch's max pooling's rule), output_size given or not; inputs of one or two planes."""
    rng = np.random.default_rng(11)
    seen: set[str] = set()
    for i in range(4 * max(grid_size(grid) // SHARE, 1)):
        rank = 1 + i % 3
        k, s = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        p = int(rng.integers(0, k // 2 + 1))
        shape = (1, int(rng.integers(1, 3))) + (int(rng.integers(2, 4)),) * rank
        default = (shape[2] - 1) * s + k - 2 * p
        size = default + int(rng.integers(0, s)) if rng.random() < 0.4 else None
        kwargs = {"kernel_size": k, "stride": s, "padding": p, "output_size": None if size is None else [size] * rank}
        config = Config(f"max_unpool{rank}d", kwargs, shape, label(f"max_unpool{rank}d", k=k, s=s, p=p, out=size))
        if default >= 1 and repr(config) not in seen and len(seen) < grid_size(grid) // SHARE:
            seen.add(repr(config))
            yield config


def known_defect(config: Config, transform: str = "vjp") -> KnownDefect:
    """PyTorch's max unpooling at a repeated index (torch 2.13, tests/test_unpool.py): the backward gathers dy for
    every input cell, so a value a later write overwrote gets a gradient (``wrong_cells``), and the double
    backward's ``ddy`` adds the writes to one cell up; a plane split between threads lets another write win,
    differently from call to call (``forward_values``, ``nondeterministic``, as its documentation warns). At
    the families whose indices repeat whatever the kernel, and at the pooled one where windows overlap."""
    threads = "its forward's winning write at a repeated index varies between threads (from call to call)"
    text = (f"torch.func.jvp's tangent at a repeated index is another write's than its primal's (x = [1, 2], "
            f"indices [0, 0]: y[0] = 2, the tangent t[0]); and {threads}") if transform == "jvp" else (
        "max_unpool's backward is dy.gather(indices) for every input cell: at a repeated index the overwritten "
        f"value gets a gradient (the double backward's ddy adds the writes up); and {threads}")
    kernel = config.kwargs["kernel_size"]
    stride = config.kwargs["stride"] if config.kwargs["stride"] is not None else kernel
    overlapping = np.any(np.asarray(kernel) > np.asarray(stride))
    categories: tuple[str, ...] = ("wrong_cells", "forward_values", "nondeterministic", "not_fd_consistent")
    if transform == "jvp":  # the tangent of an overwritten write: the winner's missing, the loser's sent
        categories += ("missing_windows",)
    families = REPEATING + (("pooled",) if overlapping else ())
    return KnownDefect(text, categories, families)
