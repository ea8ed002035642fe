"""TensorFlow and Keras adapter: any TF callable through ``tf.GradientTape``; ``tf.nn`` pools, Keras
pooling layers and ``keras.ops`` pools with their spec.

Keras runs on its TensorFlow backend here (the tape records TF ops only). A Keras layer casts
its input to its dtype policy (float32 by default), so the ready-made Keras ops build the layer
with ``dtype=`` the input's dtype; a layer you wrap yourself should be built that way too.

Mapping of the documented arguments to the symjac spec:

==============================================  ==============================================
TensorFlow / Keras                              symjac
==============================================  ==============================================
``data_format="NWC"/"NHWC"/"NDHWC"`` (default)  ``layout="channels_last"``; ``"NC..."`` →
Keras ``data_format=None`` → ``image_data_``    ``"channels_first"``
``format()`` (``"channels_last"``)
``ksize=k`` / ``pool_size=k``                   ``kernel=(k,)*rank``; a list of rank + 2
                                                entries must have 1 on batch and channels
``strides`` (tf.nn: required; Keras ``None``    ``stride``; Keras ``None`` → ``pool_size``;
→ ``pool_size``; ``tf.nn.pool`` ``None`` → 1)   ``tf.nn.pool`` ``None`` → 1
``padding="VALID"`` / ``"valid"``               ``"valid"``
``padding="SAME"`` / ``"same"``                 ``"same"`` (TF SAME: extra cell high)
``padding=[[0, 0], [lo, hi], ..., [0, 0]]``     ``((lo, hi), ...)`` (``tf.nn.max_pool1d/2d``)
(explicit, max pools only)
``tf.nn.pool(dilations=d)``                     ``dilation=d`` (TF: strides must be 1 then)
average pools (every padding)                   ``divisor="exclude_pad"`` ("the reduction never
                                                includes out-of-bounds positions")
``GlobalAveragePooling2D`` / ``GlobalMax...``   ``GlobalPool(mode, rank)``; ``keepdims=False``:
                                                the (N, C) output is viewed as (N, 1, .., 1, C)
``AdaptiveAveragePooling2D(output_size)``       ``AdaptivePool(mode, output_size)``
``keras.ops.max_pool/average_pool``             as the layers (``rank=`` when ``pool_size`` is
``keras.ops.adaptive_*_pool``                   an int: ``keras.ops`` takes it from the input)
==============================================  ==============================================
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Config, Impl, Unsupported, call_text, generate, label, make as _make, require
from symjac.pool._spec import AdaptivePool, GlobalPool, Pool

FRAMEWORK = "tensorflow"
_LAST = {"NWC", "NHWC", "NDHWC", "channels_last"}
_FIRST = {"NCW", "NCHW", "NCDHW", "channels_first"}


def _tf() -> Any:
    return require("tensorflow")


def _keras() -> Any:
    keras = require("keras")
    if keras.backend.backend() != "tensorflow":
        raise Unsupported(f"Keras runs on the {keras.backend.backend()!r} backend; symjac.frameworks.tensorflow "
                          "differentiates Keras through tf.GradientTape and needs KERAS_BACKEND=tensorflow "
                          "(for JAX-backed Keras use symjac.frameworks.jax.wrap)")
    return keras


def _tape(call: Callable[[Any], Any], name: str, kwargs: dict[str, Any], reproducer: str,
          framework: str = FRAMEWORK) -> Impl:
    tf = _tf()

    def forward(x: np.ndarray) -> np.ndarray:
        return np.array(call(tf.constant(x)))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        t = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = call(t)
        dx = tape.gradient(y, t, output_gradients=tf.constant(dy))
        return np.zeros_like(x) if dx is None else np.array(dx)

    return Impl(forward, backward, framework, name, kwargs, reproducer)


_TAPE = ("xt = tf.constant(x)\nwith tf.GradientTape() as tape:\n    tape.watch(xt)\n    y = {call}\n"
         "dx = tape.gradient(y, xt, output_gradients=tf.constant(dy))\nprint('y =', y.numpy()); print('dx =', dx.numpy())\n")


def wrap(fn: Any, *, name: str | None = None, **kwargs: Any) -> Impl:
    """Turn a TensorFlow callable (a ``tf.nn`` op, a ``tf.function``, a Keras layer or model, a
    ``tf.custom_gradient`` function) into an :class:`Impl`; ``backward`` is ``tf.GradientTape``'s.

    Args:
      fn: called as ``fn(x, **kwargs)`` on a ``tf.Tensor`` of ``x``'s dtype (CPU).
      name: the op name in reports.
      **kwargs: further arguments of every call.
    """
    what = str(name or getattr(fn, "__name__", None) or type(fn).__name__)
    reproducer = f"import tensorflow as tf\n# fn = ...  # your {what}\n" + _TAPE.format(call=call_text("fn", kwargs, "xt"))
    return _tape(lambda t: fn(t, **kwargs), what, dict(kwargs), reproducer)


# ------------------------------------------------------------------ mapping


def _layout(data_format: str | None) -> str:
    if data_format is None:
        return "channels_last"
    if data_format in _LAST:
        return "channels_last"
    if data_format in _FIRST:
        return "channels_first"
    raise Unsupported(f"data_format={data_format!r}: give one of {sorted(_LAST | _FIRST)}")


def _sizes(value: Any, rank: int, field: str, layout: str) -> tuple[int, ...]:
    """TF's int / rank / rank+2 list convention (Keras: int or rank tuple)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * rank
    values = [int(v) for v in value]
    if len(values) == 1:
        return (values[0],) * rank
    if len(values) == rank:
        return tuple(values)
    if len(values) == rank + 2:
        spatial = values[1:-1] if layout == "channels_last" else values[2:]
        other = [values[0], values[-1]] if layout == "channels_last" else values[:2]
        if other == [1, 1]:
            return tuple(spatial)
    raise Unsupported(f"{field}={value!r}: give an int, {rank} ints, or {rank + 2} with 1 on batch and channels")


def _padding(padding: Any, rank: int, layout: str) -> Any:
    if isinstance(padding, str):
        if padding.upper() not in ("VALID", "SAME"):
            raise Unsupported(f"padding={padding!r}: give 'VALID', 'SAME' or explicit [[lo, hi], ...] pairs")
        return padding.lower()
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) == rank + 2:
        spatial, other = (pairs[1:-1], [pairs[0], pairs[-1]]) if layout == "channels_last" else (pairs[2:], pairs[:2])
        if other == [(0, 0), (0, 0)]:
            return tuple(spatial)
    raise Unsupported(f"padding={padding!r}: explicit padding is {rank + 2} [lo, hi] pairs with [0, 0] on the "
                      "batch and channel dims")


def _nn(op: str, mode: str, rank: int, ksize: Any, strides: Any, padding: Any, data_format: str | None,
        dilations: Any = None, extra: dict[str, Any] | None = None) -> tuple[Pool, Impl]:
    tf = _tf()
    layout = _layout(data_format)
    kernel = _sizes(ksize, rank, "ksize", layout)
    stride = (1,) * rank if strides is None else _sizes(strides, rank, "strides", layout)
    dilation = (1,) * rank if dilations is None else _sizes(dilations, rank, "dilations", layout)
    spec = Pool(mode, kernel, stride=stride, padding=_padding(padding, rank, layout), dilation=dilation,
                layout=layout)
    kwargs = dict(extra or {}, **({"ksize": ksize} if op != "pool" else {}), strides=strides, padding=padding,
                  data_format=data_format)
    if op == "pool":
        kwargs["dilations"] = dilations
    fn = getattr(tf.nn, op)
    reproducer = "import tensorflow as tf\n" + _TAPE.format(call=call_text(f"tf.nn.{op}", kwargs, "xt"))
    return spec, _tape(lambda t: fn(t, **kwargs), f"tf.nn.{op}", kwargs, reproducer)


def max_pool1d(ksize: Any, strides: Any, padding: Any, data_format: str = "NWC") -> tuple[Pool, Impl]:
    """``tf.nn.max_pool1d`` and its spec."""
    return _nn("max_pool1d", "max", 1, ksize, strides, padding, data_format)


def max_pool2d(ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC") -> tuple[Pool, Impl]:
    """``tf.nn.max_pool2d`` and its spec (explicit padding: ``[[0, 0], [t, b], [l, r], [0, 0]]``)."""
    return _nn("max_pool2d", "max", 2, ksize, strides, padding, data_format)


def max_pool3d(ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC") -> tuple[Pool, Impl]:
    """``tf.nn.max_pool3d`` and its spec. TF's MaxPool3DGrad sends the whole gradient to every tied
    maximum (see :data:`KNOWN_DEFECTS`)."""
    return _nn("max_pool3d", "max", 3, ksize, strides, padding, data_format)


def avg_pool1d(ksize: Any, strides: Any, padding: Any, data_format: str = "NWC") -> tuple[Pool, Impl]:
    """``tf.nn.avg_pool1d`` and its spec (SAME excludes the padding from the divisor)."""
    return _nn("avg_pool1d", "avg", 1, ksize, strides, padding, data_format)


def avg_pool2d(ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC") -> tuple[Pool, Impl]:
    """``tf.nn.avg_pool2d`` and its spec."""
    return _nn("avg_pool2d", "avg", 2, ksize, strides, padding, data_format)


def avg_pool3d(ksize: Any, strides: Any, padding: Any, data_format: str = "NDHWC") -> tuple[Pool, Impl]:
    """``tf.nn.avg_pool3d`` and its spec."""
    return _nn("avg_pool3d", "avg", 3, ksize, strides, padding, data_format)


def pool(window_shape: Sequence[int], pooling_type: str, strides: Sequence[int] | None = None,
         padding: str = "VALID", data_format: str | None = None,
         dilations: Sequence[int] | None = None) -> tuple[Pool, Impl]:
    """``tf.nn.pool`` (N-D, with ``dilations``) and its spec."""
    if pooling_type not in ("MAX", "AVG"):
        raise Unsupported(f"pooling_type={pooling_type!r}: give 'MAX' or 'AVG'")
    rank = len(window_shape)
    if padding.upper() == "SAME" and dilations is not None and max(_sizes(dilations, rank, "dilations",
                                                                           _layout(data_format))) > 1:
        raise Unsupported("tf.nn.pool: 'SAME' padding is not implemented for dilations > 1 (TF raises ValueError)")
    if strides is not None and any(s > k for s, k in zip(_sizes(strides, rank, "strides", _layout(data_format)),
                                                       window_shape)):
        raise Unsupported("tf.nn.pool: strides > window_shape is not supported (TF raises ValueError)")
    return _nn("pool", pooling_type.lower(), rank, window_shape, strides, padding,
               data_format, dilations, {"window_shape": window_shape, "pooling_type": pooling_type})


# ------------------------------------------------------------------ Keras


def _keras_impl(make_call: Callable[[str], Callable[[Any], Any]], name: str, kwargs: dict[str, Any],
                build: str) -> Impl:
    """Keras layer/op per input dtype (a layer casts inputs to its dtype policy)."""
    cache: dict[str, Callable[[Any], Any]] = {}

    def call(t: Any) -> Any:
        dtype = t.dtype.name
        if dtype not in cache:
            cache[dtype] = make_call(dtype)
        return cache[dtype](t)

    reproducer = "import tensorflow as tf\nimport keras\n" + build + _TAPE.format(call="f(xt)")
    return _tape(call, name, kwargs, reproducer, "keras")


def _layer(cls_name: str, spec: Any, kwargs: dict[str, Any]) -> tuple[Any, Impl]:
    keras = _keras()
    cls = getattr(keras.layers, cls_name)
    build = f"f = {call_text(f'keras.layers.{cls_name}', kwargs)[:-1]}, dtype=str(x.dtype))\n".replace("(, ", "(")
    impl = _keras_impl(lambda dtype: cls(**kwargs, dtype=dtype), f"keras.layers.{cls_name}", kwargs, build)
    return spec, impl


def _keras_pool(cls_name: str, mode: str, rank: int, pool_size: Any, strides: Any, padding: str,
                data_format: str | None) -> tuple[Pool, Impl]:
    spec, _ = _keras_pool_spec(mode, rank, pool_size, strides, padding, data_format)
    kwargs = dict(pool_size=pool_size, strides=strides, padding=padding, data_format=data_format)
    return _layer(cls_name, spec, kwargs)


def MaxPooling1D(pool_size: Any = 2, strides: Any = None, padding: str = "valid",  # noqa: N802 - Keras's name
                 data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.MaxPooling1D`` and its spec."""
    return _keras_pool("MaxPooling1D", "max", 1, pool_size, strides, padding, data_format)


def MaxPooling2D(pool_size: Any = (2, 2), strides: Any = None, padding: str = "valid",  # noqa: N802
                 data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.MaxPooling2D`` and its spec."""
    return _keras_pool("MaxPooling2D", "max", 2, pool_size, strides, padding, data_format)


def MaxPooling3D(pool_size: Any = (2, 2, 2), strides: Any = None, padding: str = "valid",  # noqa: N802
                 data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.MaxPooling3D`` and its spec."""
    return _keras_pool("MaxPooling3D", "max", 3, pool_size, strides, padding, data_format)


def AveragePooling1D(pool_size: Any = 2, strides: Any = None, padding: str = "valid",  # noqa: N802
                     data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.AveragePooling1D`` and its spec."""
    return _keras_pool("AveragePooling1D", "avg", 1, pool_size, strides, padding, data_format)


def AveragePooling2D(pool_size: Any = (2, 2), strides: Any = None, padding: str = "valid",  # noqa: N802
                     data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.AveragePooling2D`` and its spec."""
    return _keras_pool("AveragePooling2D", "avg", 2, pool_size, strides, padding, data_format)


def AveragePooling3D(pool_size: Any = (2, 2, 2), strides: Any = None, padding: str = "valid",  # noqa: N802
                     data_format: str | None = None) -> tuple[Pool, Impl]:
    """``keras.layers.AveragePooling3D`` and its spec."""
    return _keras_pool("AveragePooling3D", "avg", 3, pool_size, strides, padding, data_format)


def _global(mode: str, rank: int, data_format: str | None, keepdims: bool) -> tuple[GlobalPool, Impl]:
    keras = _keras()
    layout = _layout(data_format or keras.config.image_data_format())
    spec = GlobalPool(mode, rank=rank, layout=layout)
    cls_name = f"Global{'Average' if mode == 'avg' else 'Max'}Pooling{rank}D"
    kwargs = dict(data_format=data_format, keepdims=keepdims)
    _, impl = _layer(cls_name, spec, kwargs)
    if keepdims:
        return spec, impl
    return spec, _keepdims(impl, rank, layout)


def _keepdims(impl: Impl, rank: int, layout: str) -> Impl:
    """View a (N, C) global-pool output as symjac's (N, 1, .., 1, C) (or (N, C, 1, .., 1))."""
    def expand(y: np.ndarray) -> np.ndarray:
        if y.ndim != 2:
            return y  # not (N, C): leave it for the verifier to report
        return y.reshape(y.shape[:1] + (1,) * rank + y.shape[1:] if layout == "channels_last"
                         else y.shape + (1,) * rank)

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return impl.backward(x, dy.reshape(dy.shape[0], -1))  # type: ignore[misc]

    return Impl(lambda x: expand(impl.forward(x)), backward, impl.framework, impl.op, impl.kwargs, impl.reproducer)


def GlobalAveragePooling1D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalAveragePooling1D`` and its spec."""
    return _global("avg", 1, data_format, keepdims)


def GlobalAveragePooling2D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalAveragePooling2D`` and its spec."""
    return _global("avg", 2, data_format, keepdims)


def GlobalAveragePooling3D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalAveragePooling3D`` and its spec."""
    return _global("avg", 3, data_format, keepdims)


def GlobalMaxPooling1D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalMaxPooling1D`` and its spec."""
    return _global("max", 1, data_format, keepdims)


def GlobalMaxPooling2D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalMaxPooling2D`` and its spec."""
    return _global("max", 2, data_format, keepdims)


def GlobalMaxPooling3D(data_format: str | None = None, keepdims: bool = False) -> tuple[GlobalPool, Impl]:  # noqa: N802
    """``keras.layers.GlobalMaxPooling3D`` and its spec."""
    return _global("max", 3, data_format, keepdims)


def _adaptive_layer(mode: str, rank: int, output_size: Any, data_format: str | None) -> tuple[AdaptivePool, Impl]:
    keras = _keras()
    layout = _layout(data_format or keras.config.image_data_format())
    spec = AdaptivePool(mode, _sizes(output_size, rank, "output_size", layout), layout=layout)
    cls_name = f"Adaptive{'Average' if mode == 'avg' else 'Max'}Pooling{rank}D"
    return _layer(cls_name, spec, dict(output_size=output_size, data_format=data_format))


def AdaptiveAveragePooling1D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveAveragePooling1D`` and its spec."""
    return _adaptive_layer("avg", 1, output_size, data_format)


def AdaptiveAveragePooling2D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveAveragePooling2D`` and its spec."""
    return _adaptive_layer("avg", 2, output_size, data_format)


def AdaptiveAveragePooling3D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveAveragePooling3D`` and its spec."""
    return _adaptive_layer("avg", 3, output_size, data_format)


def AdaptiveMaxPooling1D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveMaxPooling1D`` and its spec."""
    return _adaptive_layer("max", 1, output_size, data_format)


def AdaptiveMaxPooling2D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveMaxPooling2D`` and its spec."""
    return _adaptive_layer("max", 2, output_size, data_format)


def AdaptiveMaxPooling3D(output_size: Any, data_format: str | None = None) -> tuple[AdaptivePool, Impl]:  # noqa: N802
    """``keras.layers.AdaptiveMaxPooling3D`` and its spec."""
    return _adaptive_layer("max", 3, output_size, data_format)


def _ops_rank(size: Any, rank: int | None, field: str) -> int:
    if isinstance(size, (tuple, list)):
        return len(size)
    if rank is None:
        raise Unsupported(f"{field}={size!r}: keras.ops takes the rank from the input; give a tuple or rank=")
    return rank


def _ops(op: str, mode: str, kwargs: dict[str, Any], spec: Any) -> tuple[Any, Impl]:
    keras = _keras()
    fn = getattr(keras.ops, op)
    build = f"f = lambda t: {call_text(f'keras.ops.{op}', kwargs, 't')}\n"
    return spec, _keras_impl(lambda dtype: lambda t: fn(t, **kwargs), f"keras.ops.{op}", kwargs, build)


def keras_ops_max_pool(pool_size: Any, strides: Any = None, padding: str = "valid", data_format: str | None = None,
                       *, rank: int | None = None) -> tuple[Pool, Impl]:
    """``keras.ops.max_pool`` and its spec (``rank`` is symjac's: needed when ``pool_size`` is an int)."""
    r = _ops_rank(pool_size, rank, "pool_size")
    spec, _ = _keras_pool_spec("max", r, pool_size, strides, padding, data_format)
    return _ops("max_pool", "max", dict(pool_size=pool_size, strides=strides, padding=padding,
                                        data_format=data_format), spec)


def keras_ops_average_pool(pool_size: Any, strides: Any = None, padding: str = "valid",
                           data_format: str | None = None, *, rank: int | None = None) -> tuple[Pool, Impl]:
    """``keras.ops.average_pool`` and its spec."""
    r = _ops_rank(pool_size, rank, "pool_size")
    spec, _ = _keras_pool_spec("avg", r, pool_size, strides, padding, data_format)
    return _ops("average_pool", "avg", dict(pool_size=pool_size, strides=strides, padding=padding,
                                            data_format=data_format), spec)


def _keras_pool_spec(mode: str, rank: int, pool_size: Any, strides: Any, padding: str,
                     data_format: str | None) -> tuple[Pool, str]:
    keras = _keras()
    layout = _layout(data_format or keras.config.image_data_format())
    kernel = _sizes(pool_size, rank, "pool_size", layout)
    stride = kernel if strides is None else _sizes(strides, rank, "strides", layout)
    return Pool(mode, kernel, stride=stride, padding=_padding(padding, rank, layout), layout=layout), layout


def keras_ops_adaptive_max_pool(output_size: Any, data_format: str | None = None, *,
                                rank: int | None = None) -> tuple[AdaptivePool, Impl]:
    """``keras.ops.adaptive_max_pool`` and its spec."""
    return _ops_adaptive("max", output_size, data_format, rank)


def keras_ops_adaptive_average_pool(output_size: Any, data_format: str | None = None, *,
                                    rank: int | None = None) -> tuple[AdaptivePool, Impl]:
    """``keras.ops.adaptive_average_pool`` and its spec."""
    return _ops_adaptive("avg", output_size, data_format, rank)


def _ops_adaptive(mode: str, output_size: Any, data_format: str | None, rank: int | None) -> tuple[AdaptivePool, Impl]:
    keras = _keras()
    r = _ops_rank(output_size, rank, "output_size")
    layout = _layout(data_format or keras.config.image_data_format())
    spec = AdaptivePool(mode, _sizes(output_size, r, "output_size", layout), layout=layout)
    op = f"adaptive_{'average' if mode == 'avg' else 'max'}_pool"
    return _ops(op, mode, dict(output_size=output_size, data_format=data_format), spec)


def make(config: Config) -> tuple[Any, Impl]:
    """``(spec, impl)`` of one configuration."""
    return _make(sys.modules[__name__], config)


_THREE_D = {"max_pool3d", "avg_pool3d", "MaxPooling3D", "AveragePooling3D"}


def _rank(config: Config) -> int:
    return len(config.input_shape) - 2


def _windowed_3d(config: Config) -> bool:
    """Runs TF's MaxPool3D / AvgPool3D kernels (Keras's adaptive 3-D pools do too)."""
    return config.op in _THREE_D or (_rank(config) == 3 and (
        config.op in ("pool", "keras_ops_max_pool", "keras_ops_average_pool") or "adaptive" in config.op.lower()))


def limitation(config: Config, dtype: Any) -> str | None:
    """Why TensorFlow cannot run ``config`` in ``dtype`` (a kernel it does not have), or None."""
    if _windowed_3d(config) and np.dtype(dtype) == np.float64:
        return "TensorFlow has no float64 CPU kernel for MaxPool3D / AvgPool3D"
    return None


def known_defect(config: Config) -> str | None:
    """A known TensorFlow/Keras defect ``config`` runs into (symjac reports it), or None."""
    is_max = "max" in config.op.lower() or config.kwargs.get("pooling_type") == "MAX"
    adaptive = "adaptive" in config.op.lower()
    if adaptive and is_max and 1 in tuple(config.kwargs["output_size"]):
        return ("Keras adaptive max pooling on TensorFlow with an output size of 1: SIGFPE (kills the process) "
                "when it is the last spatial axis, else a gradient holding garbage values (uninitialized "
                "memory: 1e+27, -7e+24, NaN) in cells whose exact derivative is 0")
    if _windowed_3d(config) and is_max:
        return ("TensorFlow's MaxPool3DGrad sends the whole upstream gradient to every tied maximum "
                "(any Clarke subgradient sums to 1)")
    return None


# ------------------------------------------------------------------ configurations

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}
_KERAS_POOLS = {"max": "MaxPooling", "avg": "AveragePooling"}


def _shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    lo, hi = _SIDES[rank]
    return (1, *(int(v) for v in rng.integers(lo, hi + 1, rank)), int(rng.integers(1, 3)))


def _ints(rng: np.random.Generator, rank: int, lo: int = 1, hi: int = 3) -> tuple[int, ...]:
    return tuple(int(v) for v in rng.integers(lo, hi + 1, rank))


def _nn_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k, s = _shape(rng, rank), _ints(rng, rank), _ints(rng, rank)
        padding: Any = "VALID" if rng.random() < 0.5 else "SAME"
        if mode == "max" and rank == 2 and rng.random() < 0.3:
            padding = [[0, 0], *([int(v) for v in rng.integers(0, 2, 2)] for _ in range(2)), [0, 0]]
        op = f"{mode}_pool{rank}d"
        pad = padding if isinstance(padding, str) else "explicit"
        return Config(op, {"ksize": list(k), "strides": list(s), "padding": padding}, shape,
                      label(f"tf.nn.{op}", k=k, s=s, pad=pad))

    return draw


def _pool_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k = _shape(rng, rank), _ints(rng, rank)
        dilated = rng.random() < 0.5
        d = _ints(rng, rank, 1, 2) if dilated else (1,) * rank
        # TF: strides > 1 need dilations 1, and strides <= window_shape.
        s = (1,) * rank if dilated else tuple(int(rng.integers(1, kk + 1)) for kk in k)
        padding = "VALID" if dilated or rng.random() < 0.5 else "SAME"
        kwargs = {"window_shape": list(k), "pooling_type": mode.upper(), "strides": list(s), "padding": padding,
                  "dilations": list(d)}
        return Config("pool", kwargs, shape, label(f"tf.nn.pool {mode.upper()}", k=k, s=s, d=d, pad=padding))

    return draw


def _keras_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k = _shape(rng, rank), _ints(rng, rank)
        s = None if rng.random() < 0.3 else _ints(rng, rank)
        padding = "valid" if rng.random() < 0.5 else "same"
        op = f"{_KERAS_POOLS[mode]}{rank}D"
        return Config(op, {"pool_size": k, "strides": s, "padding": padding}, shape,
                      label(f"keras {op}", k=k, s=s, pad=padding))

    return draw


def _keras_ops_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k, s = _shape(rng, rank), _ints(rng, rank), _ints(rng, rank)
        padding = "valid" if rng.random() < 0.5 else "same"
        op = "keras_ops_max_pool" if mode == "max" else "keras_ops_average_pool"
        return Config(op, {"pool_size": k, "strides": s, "padding": padding}, shape,
                      label(op.replace("_ops_", ".ops."), k=k, s=s, pad=padding))

    return draw


def _global_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        keepdims = bool(rng.random() < 0.5)
        op = f"Global{_KERAS_POOLS[mode].replace('Pooling', '')}Pooling{rank}D"
        return Config(op, {"keepdims": keepdims}, _shape(rng, rank), label(f"keras {op}", keepdims=keepdims))

    return draw


def _adaptive_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = _shape(rng, rank)
        out = tuple(int(rng.integers(1, n + 1)) for n in shape[1:-1])
        if rng.random() < 0.5:
            op = f"Adaptive{_KERAS_POOLS[mode].replace('Pooling', '')}Pooling{rank}D"
            return Config(op, {"output_size": out}, shape, label(f"keras {op}", o=out))
        op = f"keras_ops_adaptive_{'max' if mode == 'max' else 'average'}_pool"
        return Config(op, {"output_size": out}, shape, label(op.replace("_ops_", ".ops."), o=out))

    return draw


def configurations(grid: str = "small") -> Iterator[Config]:
    """TensorFlow/Keras pools over 1/2/3-D (channels_last): ``tf.nn`` max/avg (VALID, SAME, explicit),
    ``tf.nn.pool`` (dilations), Keras pooling, global and adaptive layers, ``keras.ops`` pools.
    Seeded and deterministic; ``"full"`` is twice the common size, since a sixth of the configurations
    are 3-D pools TF has no float64 kernel for."""
    families = []
    for make_family in (_nn_family, _pool_family, _keras_family, _keras_ops_family, _global_family,
                        _adaptive_family):
        families += [make_family(m, r) for m in ("max", "avg") for r in (1, 2, 3)]
    yield from generate(grid, families, make, scale=2 if grid == "full" else 1)
