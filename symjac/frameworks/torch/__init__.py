"""PyTorch adapter: any torch callable through ``torch.autograd``; ``torch.nn.functional`` pools with their spec.

Mapping of PyTorch's documented arguments to the symjac spec (layout NCL/NCHW/NCDHW =
``channels_first``):

===========================  ===================================================
PyTorch                      symjac
===========================  ===================================================
``kernel_size=k``            ``kernel=(k,)*rank`` (an int is repeated per dim)
``stride=None``              ``stride=kernel`` (PyTorch's default)
``padding=p``                ``padding=((p, p),)*rank`` (0 → ``"valid"``): implicit
                             ``-inf`` (max) / zero (avg) cells
``dilation=d`` (max only)    ``dilation=d``
``ceil_mode=True``           ``ceil_mode=True`` (a last window starting in the
                             high padding is dropped)
``count_include_pad=True``   ``divisor="include_pad"`` (pad cells count, the
                             ceil-mode overhang does not); ``False`` →
                             ``"exclude_pad"``
``divisor_override=n``       ``divisor=n``
``adaptive_*(output_size)``  ``AdaptivePool(mode, output_size)``
``fractional_max_pool*d``    ``FractionalMaxPool(kernel, output_size, samples=)``:
(``_random_samples`` given)  every plane the spec's samples, in torch's order
                             (2-D: W, H; 3-D: T, H, W)
===========================  ===================================================
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from symjac.frameworks._check import public_names, torch_check as check  # noqa: F401 - symjac.frameworks.torch.check
from symjac.frameworks.torch._arrays import ints, to_numpy as to_numpy, to_torch as to_torch
from symjac.frameworks.torch._autodiff import FRAMEWORK, autodiff as _autodiff, lacks as _lacks
from symjac.frameworks.torch._compiled import COMPILE, with_compiled
from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, combine, call_text, generate, grid_size, label, make as _make, require
from symjac.frameworks.torch._fractional import float_starts_differ, fractional_max_pool as _fractional_max_pool
from symjac.pool._spec import AdaptivePool, FractionalMaxPool, Pool
from symjac.frameworks.torch import _unpool
from symjac.frameworks.torch._unpool import max_unpool1d as max_unpool1d, max_unpool2d as max_unpool2d
from symjac.frameworks.torch._unpool import max_unpool3d as max_unpool3d

#: The compiled mode ``conform --modes compiled`` checks (``Impl.modes``' key). Not by default:
#: Inductor compiles for seconds per shape and transform (docs/case-conform.md measures it).
COMPILED_MODE = COMPILE
COMPILED_BY_DEFAULT = False


def _torch() -> Any:
    return require("torch")


def _callable(fn: Any, kwargs: dict[str, Any]) -> Callable[[Any], Any]:
    torch = _torch()
    if isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        # Function.apply takes positional arguments only: kwargs are passed in order.
        return lambda t: fn.apply(t, *kwargs.values())  # type: ignore[attr-defined]
    return lambda t: fn(t, **kwargs)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _target(fn: Any) -> str | None:
    """``module.qualname`` of a function importable by that name, else None."""
    module = getattr(fn, "__module__", None)
    if module and inspect.isroutine(fn) and "<" not in _name(fn) and module != "__main__":
        return f"{module}.{_name(fn)}"
    return None


def _reproducer(target: str | None, kwargs: dict[str, Any], what: str = "fn") -> str:
    if target:
        module = target.rsplit(".", 1)[0]
        head = "import torch\n" + (f"import {module}\n" if module != "torch" else "")
    else:
        target = "fn"
        head = f"import torch\n# fn = ...  # your {what}\n"
    return (head + "xt = torch.tensor(x, requires_grad=True)\n"
            + f"y = {call_text(target, kwargs, 'xt')}\n"
            + "y = y[0] if isinstance(y, tuple) else y\n"
            + "(dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))\n"
            + "print('y =', y.detach().numpy()); print('dx =', dx.numpy())\n")


def wrap(fn: Any, *, name: str | None = None, **kwargs: Any) -> Impl:
    """Turn a torch callable into an :class:`Impl` (CPU; the dtype follows ``x``).

    Args:
      fn: a function of one tensor (``torch.nn.functional.max_pool2d``, a C++ extension op, a
        lambda), an ``nn.Module`` instance, or a ``torch.autograd.Function`` subclass (its
        ``apply`` is called; ``kwargs`` are then passed positionally, in order).
      name: the op name in reports (default: ``fn``'s name).
      **kwargs: further arguments of every call, ``fn(x, **kwargs)``.

    Returns:
      ``Impl`` whose ``backward(x, dy)`` is ``torch.autograd.grad(fn(x), x, dy)`` (zeros for an input
      the output does not depend on), with torch's forward mode, double backward and batching rule
      (:func:`symjac.frameworks.torch._autodiff.autodiff`); a ``torch.autograd.Function``'s that the
      class lacks are None (``_autodiff.lacks``). ``modes["torch.compile"]`` runs each callable
      compiled (``symjac.frameworks.torch._compiled``; nothing compiles until it is called).
    """
    torch = _torch()
    call = _callable(fn, kwargs)

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return to_numpy(call(to_torch(x)))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        t = to_torch(x).requires_grad_(True)
        with torch.enable_grad():
            y = call(t)
            y = y[0] if isinstance(y, (tuple, list)) else y
            (dx,) = torch.autograd.grad(y, t, to_torch(dy), allow_unused=True)
        return to_numpy(dx if dx is not None else torch.zeros_like(t))

    lacks = _lacks(fn)
    jvp, double_backward, vmap = _autodiff(call, lacks)
    impl = Impl(forward, backward, FRAMEWORK, name or _name(fn), dict(kwargs), _reproducer(_target(fn), kwargs, _name(fn)),
                jvp=jvp, double_backward=double_backward, vmap=vmap, missing=lacks)
    return with_compiled(impl, call)  # (issue 34, compiled modes) modes['torch.compile'] beside it


def adapt(obj: Any) -> Impl | None:
    """A ``torch.autograd.Function`` subclass as an :class:`Impl` (through :func:`wrap`), for
    ``symjac.verify(spec, F)``; None for any other object. The verifiers find this function by the
    ``symjac.object_adapters`` entry point named ``torch`` (pyproject.toml)."""
    function = _torch().autograd.Function
    return wrap(obj) if isinstance(obj, type) and issubclass(obj, function) else None


# ------------------------------------------------------------------ ready-made ops


def _dims(value: Any, rank: int, field: str) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)) and len(value) == 1 and rank > 1:
        return (int(value[0]),) * rank  # torch's pools repeat a one-element size
    return ints(value, rank, field, f"torch's {rank}-D pools take")


def _functional(op: str, spec: Any, kwargs: dict[str, Any]) -> tuple[Any, Impl]:
    torch = _torch()
    impl = wrap(getattr(torch.nn.functional, op), name=op, **kwargs)
    return spec, dataclasses.replace(impl, reproducer=_reproducer(f"torch.nn.functional.{op}", kwargs))


def _pool(mode: str, rank: int, op: str, kwargs: dict[str, Any], divisor: str | int = "exclude_pad",
          dilation: Any = 1) -> tuple[Pool, Impl]:
    kernel = _dims(kwargs["kernel_size"], rank, "kernel_size")
    stride = kwargs["stride"]
    # PyTorch: stride=None (or an empty list) means stride = kernel_size.
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else _dims(stride, rank, "stride")
    pads = _dims(kwargs["padding"], rank, "padding")
    padding: Any = tuple((p, p) for p in pads) if any(pads) else "valid"
    spec = Pool(mode, kernel, stride=stride, padding=padding, dilation=_dims(dilation, rank, "dilation"),
                ceil_mode=bool(kwargs["ceil_mode"]), divisor=divisor)
    return _functional(op, spec, kwargs)


def _max(rank: int, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
         return_indices: bool) -> tuple[Pool, Impl]:
    kwargs = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                  return_indices=return_indices)
    return _pool("max", rank, f"max_pool{rank}d", kwargs, dilation=dilation)


def _divisor(count_include_pad: bool, divisor_override: int | None) -> str | int:
    if divisor_override is not None:
        return int(divisor_override)
    return "include_pad" if count_include_pad else "exclude_pad"


def max_pool1d(kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> tuple[Pool, Impl]:
    """``torch.nn.functional.max_pool1d`` and its spec (input N, C, L)."""
    return _max(1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> tuple[Pool, Impl]:
    """``torch.nn.functional.max_pool2d`` and its spec (input N, C, H, W)."""
    return _max(2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> tuple[Pool, Impl]:
    """``torch.nn.functional.max_pool3d`` and its spec (input N, C, D, H, W)."""
    return _max(3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> tuple[Pool, Impl]:
    """``torch.nn.functional.avg_pool1d`` (no ``divisor_override`` in PyTorch's 1-D pool) and its spec."""
    kwargs = dict(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad)
    return _pool("avg", 1, "avg_pool1d", kwargs, _divisor(count_include_pad, None))


def avg_pool2d(kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> tuple[Pool, Impl]:
    """``torch.nn.functional.avg_pool2d`` and its spec: ``count_include_pad=True`` (default) → ``include_pad``."""
    kwargs = dict(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad, divisor_override=divisor_override)
    return _pool("avg", 2, "avg_pool2d", kwargs, _divisor(count_include_pad, divisor_override))


def avg_pool3d(kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> tuple[Pool, Impl]:
    """``torch.nn.functional.avg_pool3d`` and its spec."""
    kwargs = dict(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                  count_include_pad=count_include_pad, divisor_override=divisor_override)
    return _pool("avg", 3, "avg_pool3d", kwargs, _divisor(count_include_pad, divisor_override))


def _lp(rank: int, norm_type: Any, kernel_size: Any, stride: Any, ceil_mode: bool) -> tuple[Pool, Impl]:
    kwargs = dict(norm_type=norm_type, kernel_size=kernel_size, stride=stride, ceil_mode=ceil_mode)
    if isinstance(norm_type, float) and norm_type.is_integer():
        norm_type = int(norm_type)
    if not isinstance(norm_type, int) or isinstance(norm_type, bool) or norm_type < 1:
        raise Unsupported(f"norm_type={norm_type!r}: symjac's lp pooling takes an integer power >= 1")
    kernel = _dims(kernel_size, rank, "kernel_size")
    strides = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else \
        _dims(stride, rank, "stride")
    # ceil_mode: the spec's windows are ceil_mode=False's; where a last window overhangs (see
    # limitation) PyTorch's differs, else ceil_mode changes nothing
    spec = Pool("lp", kernel, stride=strides, p=norm_type)
    return _functional(f"lp_pool{rank}d", spec, kwargs)


def lp_pool1d(norm_type: Any, kernel_size: Any, stride: Any = None, ceil_mode: bool = False) -> tuple[Pool, Impl]:
    """``torch.nn.functional.lp_pool1d`` and its spec ``Pool("lp", p=norm_type)`` (PyTorch: the gradient is
    zero where a window's power sum is, ``zero_window="zero"``)."""
    return _lp(1, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(norm_type: Any, kernel_size: Any, stride: Any = None, ceil_mode: bool = False) -> tuple[Pool, Impl]:
    """``torch.nn.functional.lp_pool2d`` and its spec ``Pool("lp", p=norm_type)``."""
    return _lp(2, norm_type, kernel_size, stride, ceil_mode)


def _adaptive(mode: str, rank: int, output_size: Any, kwargs: dict[str, Any]) -> tuple[AdaptivePool, Impl]:
    if output_size is None or (isinstance(output_size, (tuple, list)) and None in output_size):
        raise Unsupported(f"output_size={output_size!r}: None (keep the input size) depends on the input; "
                          "give the sizes")
    spec = AdaptivePool(mode, _dims(output_size, rank, "output_size"))
    return _functional(f"adaptive_{mode}_pool{rank}d", spec, dict(output_size=output_size, **kwargs))


def adaptive_avg_pool1d(output_size: Any) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_avg_pool1d`` and its spec."""
    return _adaptive("avg", 1, output_size, {})


def adaptive_avg_pool2d(output_size: Any) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_avg_pool2d`` and its spec."""
    return _adaptive("avg", 2, output_size, {})


def adaptive_avg_pool3d(output_size: Any) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_avg_pool3d`` and its spec."""
    return _adaptive("avg", 3, output_size, {})


def adaptive_max_pool1d(output_size: Any, return_indices: bool = False) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_max_pool1d`` and its spec."""
    return _adaptive("max", 1, output_size, {"return_indices": return_indices})


def adaptive_max_pool2d(output_size: Any, return_indices: bool = False) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_max_pool2d`` and its spec."""
    return _adaptive("max", 2, output_size, {"return_indices": return_indices})


def adaptive_max_pool3d(output_size: Any, return_indices: bool = False) -> tuple[AdaptivePool, Impl]:
    """``torch.nn.functional.adaptive_max_pool3d`` and its spec."""
    return _adaptive("max", 3, output_size, {"return_indices": return_indices})


def fractional_max_pool2d(kernel_size: Any, output_size: Any, samples: Any = None) -> tuple[FractionalMaxPool, Impl]:
    """``torch.nn.functional.fractional_max_pool2d`` with ``_random_samples`` given (``samples``: per
    spatial axis H, W; None: the spec's defaults) and its spec."""
    return _fractional_max_pool(2, kernel_size, output_size, samples, wrap)


def fractional_max_pool3d(kernel_size: Any, output_size: Any, samples: Any = None) -> tuple[FractionalMaxPool, Impl]:
    """``torch.nn.functional.fractional_max_pool3d`` with ``_random_samples`` given (``samples``: per
    spatial axis D, H, W) and its spec."""
    return _fractional_max_pool(3, kernel_size, output_size, samples, wrap)


def _overhangs(config: Config) -> bool:
    """An lp_pool with ceil_mode whose last window overhangs the input along some axis."""
    kw = config.kwargs
    rank = len(config.input_shape) - 2
    kernel = _dims(kw["kernel_size"], rank, "kernel_size")
    stride = kernel if kw.get("stride") is None else _dims(kw["stride"], rank, "stride")
    return any(-(-(n - k) // s) != (n - k) // s for n, k, s in zip(config.input_shape[2:], kernel, stride) if n >= k)


def limitation(config: Config, dtype: Any) -> str | None:
    """Why symjac cannot check ``config`` as PyTorch computes it: an lp_pool whose ceil_mode window overhangs;
    a fractional_max_pool whose window starts PyTorch, computing them in ``dtype``, places elsewhere."""
    if config.op.startswith("fractional_max_pool") and config.input_shape:
        spec = make(config)[0]
        if float_starts_differ(spec, tuple(config.input_shape[2:]), dtype):
            return (f"{config.op}: PyTorch computes the window starts floor((i + u)·α) in {dtype}, and at "
                    f"{tuple(config.input_shape)} a rounded product falls below the integer the exact start is")
    if config.op.startswith("lp_pool") and config.kwargs.get("ceil_mode") and _overhangs(config):
        return ("lp_pool with ceil_mode: PyTorch's overhanging last window is avg_pool's mean over its valid cells "
                "times the kernel's size, (k/valid · Σ x^p)^(1/p), which is no lp norm symjac's spec has")
    return None


def known_defect(config: Config, transform: str = "vjp") -> KnownDefect | None:
    """A known PyTorch defect ``config`` runs into under ``transform``, with the categories its findings have
    (torch 2.13; ``tests/test_frameworks_torch_lp.py`` reproduces each from a closed form), or None."""
    if config.op.startswith("max_unpool"):
        return _unpool.known_defect(config, transform)
    if not config.op.startswith("lp_pool"):
        return None
    overflow = KnownDefect(
        "lp_pool forms Σ x^p before the root, unscaled: where x^p passes the dtype's range (float32 cells of 2^65 "
        "and 2^64: inf; the exact y is 2^64·√5 = 4.1e19) the forward is inf and the gradient 0 or NaN "
        "(symjac's extreme family; tests/test_extreme.py)", ("bad_output", "missing_windows"), ("extreme",))
    if float(config.kwargs["norm_type"]) == 1:
        return KnownDefect(
            "lp_pool with norm_type=1 is the window's sum Σx (linear: every cell's derivative is 1), but where "
            "that sum is 0 PyTorch's gradient, forward-AD JVP and double backward's J·v are 0: its "
            "sign(S)·relu(|S|) has derivative 0 at S = 0", ("missing_windows", "not_fd_consistent"))
    if transform != "vjp":
        return combine([KnownDefect(
            "lp_pool (norm_type >= 2) at an all-zero window: the backward's row is 0 (PyTorch's documented "
            "convention), but the forward-AD JVP and the double backward's ddy = J·v are NaN there "
            "(0·(1/p)·0^(1/p - 1) = 0·inf in (S)^(1/p)'s derivative)", ("bad_output", "missing_windows")),
            overflow])
    return overflow


def make(config: Config) -> tuple[Any, Impl]:
    """``(spec, impl)`` of one configuration (``getattr(this_module, config.op)(**config.kwargs)``)."""
    return _make(sys.modules[__name__], config)


# ------------------------------------------------------------------ configurations

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}  # input side ranges per rank: small, so a run stays fast


def _shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    lo, hi = _SIDES[rank]
    return (1, int(rng.integers(1, 3))) + tuple(int(v) for v in rng.integers(lo, hi + 1, rank))


def _pool_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = _shape(rng, rank)
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 4))
        d = int(rng.integers(1, 3)) if mode == "max" and rng.random() < 0.4 else 1
        # PyTorch: padding at most half the kernel size, dilation or not (torch 2.13: max_pool1d(k=3,
        # dilation=2, padding=2) raises "padding should be at most half of kernel size");
        # avg_pool3d also rejects an unpadded side shorter than the kernel.
        p = int(rng.integers(0, k // 2 + 1))
        if mode == "avg" and rank == 3 and min(shape[2:]) < k:
            return None
        ceil = bool(rng.random() < 0.4)
        kwargs: dict[str, Any] = {"kernel_size": k, "stride": None if s == k and rng.random() < 0.3 else s,
                                  "padding": p, "ceil_mode": ceil}
        parts: dict[str, Any] = {"k": k, "s": s, "p": p, "d": d if d > 1 else None, "ceil": ceil}
        if mode == "max":
            kwargs["dilation"] = d
        else:
            kwargs["count_include_pad"] = include = bool(rng.random() < 0.5)
            parts["include_pad" if include else "exclude_pad"] = True
            if rank > 1 and rng.random() < 0.25:
                kwargs["divisor_override"] = parts["div"] = int(rng.integers(1, 10))
        op = f"{mode}_pool{rank}d"
        return Config(op, kwargs, shape, label(op, **parts))

    return draw


def _adaptive_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = _shape(rng, rank)
        out = tuple(int(rng.integers(1, n + 1)) for n in shape[2:])
        op = f"adaptive_{mode}_pool{rank}d"
        return Config(op, {"output_size": out if rank > 1 else out[0]}, shape, label(op, o=out))

    return draw


def _lp_family(rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = _shape(rng, rank)
        k, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        p = int(rng.choice([1, 2, 2, 3, 4]))
        ceil = bool(rng.random() < 0.3)
        op = f"lp_pool{rank}d"
        kwargs: dict[str, Any] = {"norm_type": p, "kernel_size": k, "stride": None if s == k else s, "ceil_mode": ceil}
        return Config(op, kwargs, shape, label(op, p=p, k=k, s=s, ceil=ceil))

    return draw


def _fractional_family(rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = (1, int(rng.integers(1, 3))) + tuple(int(v) for v in rng.integers(4, 10 if rank == 2 else 7, rank))
        k = tuple(int(rng.integers(1, 4)) for _ in range(rank))
        # PyTorch: o + k - 1 <= L in 2-D, o + k - 1 < L in 3-D (its fractional_max_pool3d refuses equality)
        top = [n - kk + (1 if rank == 2 else 0) for n, kk in zip(shape[2:], k)]
        if min(top) < 1:
            return None
        out = tuple(int(rng.integers(1, t + 1)) for t in top)
        samples = tuple(f"{int(rng.integers(0, 8))}/8" for _ in range(rank))
        op = f"fractional_max_pool{rank}d"
        return Config(op, {"kernel_size": k, "output_size": out, "samples": samples}, shape,
                      label(op, k=k, o=out, u="x".join(samples)))

    return draw


#: lp configurations per grid configuration (after the others: their seeded draws stay as they were).
LP_SHARE = 6
#: fractional max pooling's likewise (after lp's).
FRACTIONAL_SHARE = 6


def configurations(grid: str = "small") -> Iterator[Config]:
    """PyTorch's pools over 1/2/3-D: max (dilation, ceil), avg (ceil, include/exclude pad, divisor_override),
    adaptive max/avg, then lp_pool1d/2d (p = 1 to 4, ceil_mode), then fractional_max_pool2d/3d (samples in
    eighths), then max_unpool1d/2d/3d. Seeded and deterministic; ``"small"`` a few dozen, ``"full"`` hundreds."""
    families = [_pool_family(m, r) for m in ("max", "avg") for r in (1, 2, 3)]
    families += [_adaptive_family(m, r) for m in ("max", "avg") for r in (1, 2, 3)]
    families = families[:6] * 2 + families[6:]  # fixed-window pools twice as often as adaptive ones
    yield from generate(grid, families, make)
    yield from itertools.islice(generate(grid, [_lp_family(1), _lp_family(2)], make, seed=10),
                                grid_size(grid) // LP_SHARE)
    yield from itertools.islice(generate(grid, [_fractional_family(2), _fractional_family(3)], make, seed=11),
                                grid_size(grid) // FRACTIONAL_SHARE)
    yield from _unpool.unpool_configurations(grid)


# ------------------------------------------------------------------ losses (torch.nn.functional)

from symjac.frameworks.torch._losses import (  # noqa: E402 - the losses are their own module; re-exported here
    binary_cross_entropy as binary_cross_entropy,
    binary_cross_entropy_with_logits as binary_cross_entropy_with_logits,
    cross_entropy as cross_entropy,
    ctc_loss as ctc_loss,
    gaussian_nll_loss as gaussian_nll_loss,
    huber_loss as huber_loss,
    kl_div as kl_div,
    known_loss_defect as known_loss_defect,
    l1_loss as l1_loss,
    loss_configurations as loss_configurations,
    loss_impl as loss_impl,
    nll_loss as nll_loss,
    poisson_nll_loss as poisson_nll_loss,
    make_loss as make_loss,
    mse_loss as mse_loss,
    smooth_l1_loss as smooth_l1_loss,
    hinge_embedding_loss as hinge_embedding_loss,
    soft_margin_loss as soft_margin_loss,
    multilabel_soft_margin_loss as multilabel_soft_margin_loss,
    multi_margin_loss as multi_margin_loss,
    multilabel_margin_loss as multilabel_margin_loss,
    margin_ranking_loss as margin_ranking_loss,
    cosine_embedding_loss as cosine_embedding_loss,
    triplet_margin_loss as triplet_margin_loss,
)


#: (issue 33 item 7a) ``dir()`` and ``import *`` show the documented names only.
__all__ = public_names(sys.modules[__name__], "to_numpy", "to_torch")


def __dir__() -> list[str]:
    return list(__all__)
