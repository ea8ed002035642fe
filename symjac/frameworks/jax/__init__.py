"""JAX adapter: any JAX function through ``jax.vjp``; ``jax.lax.reduce_window`` and ``flax.linen`` pools.

float64 inputs run inside ``jax.enable_x64(True)``, a context manager that enables 64-bit
types for the calls symjac makes only: the process-wide ``jax_enable_x64`` flag (and so
every other JAX user in the process) is left as it was. Without it JAX would silently
compute a float64 input in float32.

Mapping of the documented arguments to the symjac spec:

=======================================  ===============================================
JAX / Flax                               symjac
=======================================  ===============================================
``flax.linen.max_pool/avg_pool``         ``layout="channels_last"`` (batch, window
                                         dims..., features)
``window_shape=(k, ...)``                ``kernel=(k, ...)``
``strides=None``                         ``stride=(1, ...)`` (Flax's default: 1, not the
                                         window)
``padding="VALID"`` / ``"SAME"``         ``"valid"`` / ``"same"`` (extra cell high)
``padding=((lo, hi), ...)``              ``padding=((lo, hi), ...)``
``avg_pool(count_include_pad=True)``     ``divisor="include_pad"`` (``False`` →
                                         ``"exclude_pad"``)
``lax.reduce_window`` ``window_*``       full rank: 1 on the batch and channel dims;
                                         the rest are the spatial ``kernel``/``stride``/
                                         ``dilation``; ``layout=`` says where channels are
``padding="SAME_LOWER"``                 ``"same_lower"``
``reduce_window_max``                    ``Pool("max", ...)``; ``window_dilation > 1``
                                         raises :class:`Unsupported` (JAX has no VJP)
``reduce_window_sum``                    ``Pool("avg", ..., divisor=1)``: a sum pool
=======================================  ===============================================
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._check import public_names, jax_check as check  # noqa: F401 - symjac.frameworks.jax.check
from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, call_text, generate, label, make as _make, require
from symjac.frameworks.jax._context import cpu as _cpu, precision as precision
from symjac.frameworks.jax._eager import JIT, with_eager
from symjac.pool._spec import Pool

FRAMEWORK = "jax"
#: The compiled mode ``conform`` checks beside the eager one: the adapter's own ``jax.jit``.
COMPILED_MODE = JIT


def _jax() -> Any:
    return require("jax")


def wrap(fn: Callable[..., Any], *, name: str | None = None, jit: bool = True, **kwargs: Any) -> Impl:
    """Turn a JAX function of one array into an :class:`Impl` (CPU; the dtype follows ``x``).

    Args:
      fn: ``fn(x, **kwargs)``: a ``jax.numpy``/``lax`` function, a Flax function, a ``jax.jit``
        function, a ``jax.custom_vjp`` function, a bound ``Module.apply`` with its variables.
      name: the op name in reports.
      jit: compile forward and VJP together with ``jax.jit`` (one XLA compilation per shape and
        dtype instead of one per primitive: many times faster for a verify run); ``False`` runs
        eagerly.
      **kwargs: further arguments of every call.

    Returns:
      ``Impl`` whose ``backward(x, dy)`` is ``jax.vjp(fn, x)[1](dy)``; with ``jit`` its ``mode`` is
      ``"jax.jit"`` and ``modes["eager"]`` runs every callable inside ``jax.disable_jit()``.
    """
    jax = _jax()
    call = (lambda t: fn(t, **kwargs)) if kwargs else fn

    def both(t: Any, g: Any) -> Any:
        y, pullback = jax.vjp(call, t)
        return y, pullback(g)[0]

    # One compiled program gives y and dx together: a verify run then compiles once per
    # shape and dtype, not twice. A function without a VJP still has a forward of its own.
    fwd, joint = (jax.jit(call), jax.jit(both)) if jit else (call, both)

    def forward(x: np.ndarray) -> np.ndarray:
        with precision(x.dtype), _cpu():
            t = jax.numpy.asarray(x)
            try:
                out = jax.eval_shape(call, t)
                return np.asarray(joint(t, jax.numpy.zeros(out.shape, out.dtype))[0])
            except Exception:  # noqa: BLE001 - no VJP (or no forward): the forward alone says which
                return np.asarray(fwd(t))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        with precision(x.dtype), _cpu():
            return np.asarray(joint(jax.numpy.asarray(x), jax.numpy.asarray(dy))[1])

    what = str(name or getattr(fn, "__name__", None) or type(fn).__name__)
    reproducer = ("import jax\nimport jax.numpy as jnp\njax.config.update('jax_enable_x64', x.dtype == 'float64')\n"
                  f"# fn = ...  # your {what}\n"
                  + f"f = lambda t: {call_text('fn', kwargs, 't')}\n" + _VJP)
    impl = Impl(forward, backward, FRAMEWORK, what, dict(kwargs), reproducer, *_autodiff(call, jit))
    return with_eager(impl, jit)  # (issue 34, compiled modes) jax.jit, and modes['eager'] beside it


def _autodiff(call: Callable[..., Any], jit: bool) -> tuple[Any, Any, Any]:
    """``jax.jvp``; the VJP differentiated again by ``jax.vjp`` (``(ddx, ddy)`` of ``<v, J(x)^T dy>``);
    the batching rule ``rule(in_axis, out_axis)``: ``jax.vmap(..., in_axes=in_axis, out_axes=out_axis)``
    of the forward, the VJP and the JVP (compiled once per position)."""
    jax = _jax()

    def vjp(t: Any, g: Any) -> Any:
        return jax.vjp(call, t)[1](g)[0]

    def tangent(t: Any, d: Any) -> Any:
        return jax.jvp(call, (t,), (d,))[1]

    def second(t: Any, g: Any, v: Any) -> Any:
        return jax.vjp(vjp, t, g)[1](v)

    def compiled(fn: Callable[..., Any], n_out: int = 1) -> Callable[..., Any]:
        run = jax.jit(fn) if jit else fn

        def numpy_call(*arrays: np.ndarray) -> Any:
            with precision(arrays[0].dtype), _cpu():
                out = run(*(jax.numpy.asarray(a) for a in arrays))
                return tuple(np.asarray(o) for o in out) if n_out > 1 else np.asarray(out)

        return numpy_call

    @functools.cache
    def rule(in_axis: int, out_axis: int) -> Impl:
        def mapped(fn: Callable[..., Any]) -> Callable[..., Any]:
            return compiled(jax.vmap(fn, in_axes=in_axis, out_axes=out_axis))

        return Impl(mapped(call), mapped(vjp), FRAMEWORK, "vmap", jvp=mapped(tangent))

    return compiled(tangent), compiled(second, 2), rule


_VJP = ("y, pullback = jax.vjp(f, jnp.asarray(x))\n(dx,) = pullback(jnp.asarray(dy))\n"
        "print('y =', y); print('dx =', dx)\n")


def _with(impl: Impl, op: str, kwargs: dict[str, Any], body: str) -> Impl:
    head = "import jax\nimport jax.numpy as jnp\njax.config.update('jax_enable_x64', x.dtype == 'float64')\n"
    return dataclasses.replace(impl, framework=FRAMEWORK, op=op, kwargs=kwargs, reproducer=head + body + _VJP)


# ------------------------------------------------------------------ flax.linen


def _pads(padding: Any, rank: int, field: str = "padding") -> Any:
    if isinstance(padding, str):
        mapping = {"VALID": "valid", "SAME": "same", "SAME_LOWER": "same_lower"}
        if padding.upper() not in mapping:
            raise Unsupported(f"{field}={padding!r}: give 'VALID', 'SAME', 'SAME_LOWER' or (low, high) pairs")
        return mapping[padding.upper()]
    pairs = tuple(tuple(int(v) for v in pair) for pair in padding)
    if len(pairs) != rank or any(len(p) != 2 for p in pairs):
        raise Unsupported(f"{field}={padding!r}: give {rank} (low, high) pairs")
    return pairs


def _flax(op: str, mode: str, window_shape: Sequence[int], strides: Sequence[int] | None, padding: Any,
          divisor: str = "exclude_pad", **extra: Any) -> tuple[Pool, Impl]:
    nn = require("flax.linen")
    kernel = tuple(int(k) for k in window_shape)
    stride = (1,) * len(kernel) if strides is None else tuple(int(s) for s in strides)
    spec = Pool(mode, kernel, stride=stride, padding=_pads(padding, len(kernel)), divisor=divisor,
                layout="channels_last")
    kwargs = dict(window_shape=window_shape, strides=strides, padding=padding, **extra)
    impl = wrap(getattr(nn, op), name=f"flax.linen.{op}", **kwargs)
    body = f"import flax.linen as nn\nf = lambda t: {call_text(f'nn.{op}', kwargs, 't')}\n"
    return spec, _with(impl, f"flax.linen.{op}", kwargs, body)


def max_pool(window_shape: Sequence[int], strides: Sequence[int] | None = None,
             padding: Any = "VALID") -> tuple[Pool, Impl]:
    """``flax.linen.max_pool`` (inputs: batch, window dims..., features) and its spec."""
    return _flax("max_pool", "max", window_shape, strides, padding)


def avg_pool(window_shape: Sequence[int], strides: Sequence[int] | None = None, padding: Any = "VALID",
             count_include_pad: bool = True) -> tuple[Pool, Impl]:
    """``flax.linen.avg_pool`` and its spec: ``count_include_pad=True`` (Flax's default) → ``include_pad``."""
    divisor = "include_pad" if count_include_pad else "exclude_pad"
    return _flax("avg_pool", "avg", window_shape, strides, padding, divisor, count_include_pad=count_include_pad)


# ------------------------------------------------------------------ jax.lax.reduce_window


def _spatial(layout: str, ndim: int) -> list[int]:
    if layout not in ("channels_first", "channels_last"):
        raise Unsupported(f"layout={layout!r}: give 'channels_first' or 'channels_last'")
    return list(range(2, ndim)) if layout == "channels_first" else list(range(1, ndim - 1))


def _lax_spec(mode: str, window_dimensions: Sequence[int], window_strides: Sequence[int], padding: Any,
              window_dilation: Sequence[int] | None, layout: str, divisor: str | int) -> Pool:
    ndim = len(window_dimensions)
    if not 3 <= ndim <= 5:
        raise Unsupported(f"window_dimensions={tuple(window_dimensions)!r}: give rank 3-5 (batch, channels and "
                          "1-3 spatial dims)")
    spatial = _spatial(layout, ndim)
    other = [d for d in range(ndim) if d not in spatial]
    dilation = tuple(window_dilation) if window_dilation is not None else (1,) * ndim
    fields = {"window_dimensions": window_dimensions, "window_strides": window_strides,
              "window_dilation": dilation}
    for field, values in fields.items():
        if len(values) != ndim or any(int(values[d]) != 1 for d in other):
            raise Unsupported(f"{field}={tuple(values)!r}: symjac pools the spatial dims only; give {ndim} "
                              f"entries with 1 on the batch and channel dims {other} ({layout})")
    if isinstance(padding, str):
        pads = _pads(padding, len(spatial))
    else:
        pairs = [tuple(int(v) for v in p) for p in padding]
        if len(pairs) != ndim or any(pairs[d] != (0, 0) for d in other):
            raise Unsupported(f"padding={padding!r}: give {ndim} (low, high) pairs with (0, 0) on the batch and "
                              f"channel dims {other}")
        pads = tuple(pairs[d] for d in spatial)
    def pick(values: Sequence[int]) -> tuple[int, ...]:
        return tuple(int(values[d]) for d in spatial)

    return Pool(mode, pick(window_dimensions), stride=pick(window_strides), padding=pads,
                dilation=pick(dilation), divisor=divisor, layout=layout)


def _reduce_window(kind: str, window_dimensions: Sequence[int], window_strides: Sequence[int], padding: Any,
                   window_dilation: Sequence[int] | None, layout: str) -> tuple[Pool, Impl]:
    jax = _jax()
    lax, jnp = jax.lax, jax.numpy
    mode, divisor = ("max", "exclude_pad") if kind == "max" else ("avg", 1)
    spec = _lax_spec(mode, window_dimensions, window_strides, padding, window_dilation, layout, divisor)
    if kind == "max" and any(d > 1 for d in spec.dilation):
        raise Unsupported(f"window_dilation={tuple(window_dilation or ())!r}: JAX has no VJP for reduce_window max "
                          "with window dilation (select_and_gather)")
    kwargs = dict(window_dimensions=tuple(window_dimensions), window_strides=tuple(window_strides),
                  padding=padding if isinstance(padding, str) else tuple(tuple(p) for p in padding),
                  window_dilation=None if window_dilation is None else tuple(window_dilation))
    init, computation, text = (-jnp.inf, lax.max, "-jnp.inf, jax.lax.max") if kind == "max" else \
        (0.0, lax.add, "0.0, jax.lax.add")

    def fn(t: Any) -> Any:
        return lax.reduce_window(t, np.array(init, t.dtype), computation, **kwargs)

    op = f"reduce_window_{kind}"
    body = f"f = lambda t: {call_text('jax.lax.reduce_window', kwargs, 't, ' + text)}\n"
    return spec, _with(wrap(fn, name=op), op, kwargs, body)


def reduce_window_max(window_dimensions: Sequence[int], window_strides: Sequence[int], padding: Any,
                      window_dilation: Sequence[int] | None = None, *,
                      layout: str = "channels_last") -> tuple[Pool, Impl]:
    """``jax.lax.reduce_window(x, -inf, lax.max, ...)`` (a max pool) and its spec.

    ``layout`` (symjac's, not a JAX argument) says which of the full-rank dims hold the channels.
    """
    return _reduce_window("max", window_dimensions, window_strides, padding, window_dilation, layout)


def reduce_window_sum(window_dimensions: Sequence[int], window_strides: Sequence[int], padding: Any,
                      window_dilation: Sequence[int] | None = None, *,
                      layout: str = "channels_last") -> tuple[Pool, Impl]:
    """``jax.lax.reduce_window(x, 0, lax.add, ...)`` (a sum pool: ``divisor=1``) and its spec."""
    return _reduce_window("sum", window_dimensions, window_strides, padding, window_dilation, layout)


def limitation(config: Config, dtype: Any) -> str | None:
    """Why the framework cannot run ``config`` in ``dtype``: none known for its generated configurations."""
    return None


def known_defect(config: Config) -> KnownDefect | None:
    """A known JAX defect ``config`` runs into (symjac reports it), or None."""
    if "max" in config.op:
        return KnownDefect(
            "JAX's max pooling propagates NaN in its forward but routes the gradient by select(ge) "
            "(reduce_window's VJP): a window holding NaN sends it to whichever cell the scan ends at, "
            "[nan, 1, 2] to the 2 and [inf, nan, 1] to the 1, neither a NaN cell nor a maximum "
            "(symjac's nonfinite family; tests/test_nonfinite_frameworks.py); a window whose scan ends at a padding "
            "cell (SAME) sends the cotangent nowhere",
            ("wrong_cells", "tie_not_subgradient", "partial_windows", "missing_windows"), ("nonfinite",))
    return None


def make(config: Config) -> tuple[Any, Impl]:
    """``(spec, impl)`` of one configuration."""
    return _make(sys.modules[__name__], config)


# ------------------------------------------------------------------ configurations

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}


def _draw_common(rng: np.random.Generator, rank: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                                               tuple[int, ...], Any]:
    lo, hi = _SIDES[rank]
    spatial = tuple(int(v) for v in rng.integers(lo, hi + 1, rank))
    channels = int(rng.integers(1, 3))
    kernel = tuple(int(v) for v in rng.integers(1, 4, rank))
    stride = tuple(int(v) for v in rng.integers(1, 4, rank))
    r = rng.random()
    padding: Any = "VALID" if r < 0.3 else "SAME" if r < 0.6 else \
        tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(rank))
    return spatial, (channels,), kernel, stride, padding


def _flax_family(op: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        spatial, (c,), kernel, stride, padding = _draw_common(rng, rank)
        kwargs: dict[str, Any] = {"window_shape": kernel, "strides": stride, "padding": padding}
        parts: dict[str, Any] = {"k": kernel, "s": stride, "pad": padding if isinstance(padding, str) else "explicit"}
        if op == "avg_pool":
            kwargs["count_include_pad"] = include = bool(rng.random() < 0.5)
            parts["include_pad" if include else "exclude_pad"] = True
        return Config(op, kwargs, (1, *spatial, c), label(f"flax {op}", **parts))

    return draw


def _lax_family(kind: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        spatial, (c,), kernel, stride, padding = _draw_common(rng, rank)
        if isinstance(padding, str) and rng.random() < 0.4:
            padding = "SAME_LOWER"
        dilation = tuple(int(v) for v in rng.integers(1, 3, rank)) if kind == "sum" and rng.random() < 0.4 \
            else (1,) * rank
        layout = "channels_last" if rng.random() < 0.5 else "channels_first"
        last = layout == "channels_last"
        shape = (1, *spatial, c) if last else (1, c, *spatial)

        def full(v: Sequence[Any], one: Any) -> tuple[Any, ...]:
            return (one, *v, one) if last else (one, one, *v)

        pads = padding if isinstance(padding, str) else full(padding, (0, 0))
        kwargs = {"window_dimensions": full(kernel, 1), "window_strides": full(stride, 1), "padding": pads,
                  "window_dilation": full(dilation, 1) if max(dilation) > 1 else None, "layout": layout}
        op = f"reduce_window_{kind}"
        parts = {"k": kernel, "s": stride, "d": dilation if max(dilation) > 1 else None,
                 "pad": padding if isinstance(padding, str) else "explicit", layout: True}
        return Config(op, kwargs, shape, label(op, **parts))

    return draw


def configurations(grid: str = "small") -> Iterator[Config]:
    """JAX/Flax pools over 1/2/3-D: ``flax.linen`` max/avg (VALID, SAME, explicit asymmetric pads,
    count_include_pad), ``lax.reduce_window`` max and sum (SAME_LOWER, dilated sum, both layouts).
    Seeded and deterministic; ``"small"`` a few dozen, ``"full"`` hundreds."""
    families = [_flax_family(op, r) for op in ("max_pool", "avg_pool") for r in (1, 2, 3)]
    families += [_lax_family(kind, r) for kind in ("max", "sum") for r in (1, 2, 3)]
    yield from generate(grid, families, make)


# ------------------------------------------------------------------ losses (optax)

from symjac.frameworks.jax._losses import (  # noqa: E402 - the losses are their own module; re-exported here
    ctc_loss as ctc_loss,
    huber_loss as huber_loss,
    kl_divergence as kl_divergence,
    kl_divergence_with_log_targets as kl_divergence_with_log_targets,
    loss_configurations as loss_configurations,
    loss_impl as loss_impl,
    make_loss as make_loss,
    sigmoid_binary_cross_entropy as sigmoid_binary_cross_entropy,
    softmax_cross_entropy as softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels as softmax_cross_entropy_with_integer_labels,
    squared_error as squared_error,
)


#: (issue 33 item 7a) ``dir()`` and ``import *`` show the documented names only.
__all__ = public_names(sys.modules[__name__])


def __dir__() -> list[str]:
    return list(__all__)
