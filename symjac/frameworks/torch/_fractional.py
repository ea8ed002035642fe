"""PyTorch's fractional max pooling (``fractional_max_pool2d/3d``) with its samples given.

PyTorch draws ``_random_samples`` of shape (N, C, rank) when none are given; given, they fix
the windows (:class:`symjac.FractionalMaxPool`). Two conventions of PyTorch's are mapped here:

- the order of a plane's samples: ``fractional_max_pool2d`` reads them (W, H), the reverse of
  the spatial axes, ``fractional_max_pool3d`` (T, H, W), in axis order (torch 2.13,
  ``FractionalMaxPool2d.cpp`` / ``FractionalMaxPool3d.cpp``; checked against the exact windows in
  ``tests/test_fractional_max.py``);
- every plane gets the spec's samples (PyTorch allows one sample set per (n, c) plane; the
  spec's windows are the same for every plane).

PyTorch computes a window start, floor((i + u)·α) - floor(u·α), in the input's dtype, where the
spec computes it exactly: where the two differ (a product (i + u)·α that is an integer, or
nearly, and rounds below it), :func:`float_starts_differ` says so and ``conform`` reports the
configuration as a limitation rather than a finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, require
from symjac.frameworks.torch._arrays import ints
from symjac.pool._fractional import fractional_starts
from symjac.pool._spec import FractionalMaxPool


def _dims(value: Any, rank: int, field: str) -> tuple[int, ...]:
    return ints(value, rank, field, f"torch's fractional_max_pool{rank}d takes")


def torch_order(spec: FractionalMaxPool) -> tuple[Any, ...]:
    """The spec's samples (spatial axis order) in the order PyTorch reads a plane's samples."""
    samples = tuple(spec.samples or ())
    return samples[::-1] if spec.rank == 2 else samples


def float_starts_differ(spec: FractionalMaxPool, spatial: tuple[int, ...], dtype: Any) -> bool:
    """Whether PyTorch's window starts, computed in ``dtype`` as its ``generate_intervals`` does
    (α = (L - k)/(o - 1) rounded, then each (i + u)·α rounded and truncated), differ from the exact
    ones at input lengths ``spatial``."""
    assert spec.kernel is not None and spec.output_size is not None and spec.samples is not None
    dt = np.dtype(dtype) if str(dtype) != "bfloat16" else np.dtype(np.float32)
    for length, k, o, u in zip(spatial, spec.kernel, spec.output_size, spec.samples):
        if o < 2:
            continue
        uf = np.array(float(u), dtype=dt)
        alpha = (np.array(length - k, dtype=dt) / np.array(o - 1, dtype=dt)).astype(dt)
        i = np.arange(o - 1).astype(dt)
        floated = np.trunc(((i + uf).astype(dt) * alpha).astype(dt)) - np.trunc((uf * alpha).astype(dt))
        if not np.array_equal(floated.astype(np.int64), fractional_starts(length, k, o, u)[:-1]):
            return True
    return False


def fractional_max_pool(rank: int, kernel_size: Any, output_size: Any, samples: Any,
                        wrap: Callable[..., Impl]) -> tuple[FractionalMaxPool, Impl]:
    """``torch.nn.functional.fractional_max_pool{rank}d`` with ``_random_samples`` the spec's samples
    (every plane the same; None: the spec's default samples), and its spec; ``wrap`` is the
    adapter's (:func:`symjac.frameworks.torch.wrap`)."""
    torch = require("torch")
    spec = FractionalMaxPool(_dims(kernel_size, rank, "kernel_size"), _dims(output_size, rank, "output_size"),
                             samples=samples)
    order = [float(u) for u in torch_order(spec)]
    fn = getattr(torch.nn.functional, f"fractional_max_pool{rank}d")
    kernel, out = spec.kernel, spec.output_size

    def pool(t: Any) -> Any:
        planes = (1, t.shape[0]) if t.dim() == rank + 1 else tuple(t.shape[:2])
        given = torch.tensor(order, dtype=t.dtype).expand(*planes, rank).contiguous()
        return fn(t, kernel, output_size=out, _random_samples=given)

    name = f"fractional_max_pool{rank}d"
    kwargs = {"kernel_size": kernel, "output_size": out, "samples": tuple(str(u) for u in spec.samples or ())}
    impl = wrap(pool, name=name)
    text = ("import torch\nfrom fractions import Fraction\n"
            f"u = [float(Fraction(v)) for v in {[str(u) for u in torch_order(spec)]!r}]  # torch's order of the axes\n"
            "xt = torch.tensor(x, requires_grad=True)\n"
            f"given = torch.tensor(u, dtype=xt.dtype).expand(xt.shape[0], xt.shape[1], {rank}).contiguous()\n"
            f"y = torch.nn.functional.{name}(xt, {kernel!r}, output_size={out!r}, _random_samples=given)\n"
            "(dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))\n"
            "print('y =', y.detach().numpy()); print('dx =', dx.numpy())\n")
    return spec, dataclasses.replace(impl, kwargs=kwargs, reproducer=text)
