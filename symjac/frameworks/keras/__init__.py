"""Keras adapter: Keras pooling layers and ``keras.ops`` pools with their spec, on every Keras
backend (TensorFlow, JAX, PyTorch: each differentiates with its own autodiff,
``symjac.frameworks.keras._backend``); :mod:`symjac.frameworks.tensorflow` re-exports every op
here, and its ``configurations`` and ``make`` cover them on the TensorFlow backend.

A Keras layer casts its input to its dtype policy (float32 by default), so the ready-made
Keras ops build the layer with ``dtype=`` the input's dtype; a layer you wrap yourself
(``symjac.frameworks.tensorflow.wrap``) should be built that way too. The mapping of the
documented arguments onto specs is the table of :mod:`symjac.frameworks.tensorflow`:
``pool_size``/``strides``/``padding``/``data_format`` as TensorFlow's (``strides=None`` ->
``pool_size``; ``data_format=None`` -> ``keras.config.image_data_format()``), global pools
``GlobalPool(mode, rank)`` (``keepdims=False``: the (N, C) output is viewed as
(N, 1, .., 1, C)), adaptive pools ``AdaptivePool(mode, output_size)``.
"""

from __future__ import annotations

import sys

import dataclasses

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Config, Impl, Unsupported, call_text, label
from symjac.frameworks._check import public_names, keras_check as check  # noqa: F401 - symjac.frameworks.keras.check
from symjac.frameworks.keras._backend import backend_impl, dtype_name, import_keras
from symjac.frameworks.keras._backend import wrap as wrap
from symjac.frameworks.keras._tape import draw_ints, draw_shape, tf_layout, tf_padding, tf_sizes
from symjac.pool._spec import AdaptivePool, GlobalPool, Pool

def _keras_impl(make_call: Callable[[str], Callable[[Any], Any]], name: str, kwargs: dict[str, Any],
                build: str) -> Impl:
    """Keras layer/op per input dtype (a layer casts inputs to its dtype policy)."""
    cache: dict[str, Callable[[Any], Any]] = {}

    def call(t: Any) -> Any:
        dtype = dtype_name(t)
        if dtype not in cache:
            cache[dtype] = make_call(dtype)
        return cache[dtype](t)

    return backend_impl(call, name, kwargs, build)  # Keras's backend differentiates it


def _layer(cls_name: str, spec: Any, kwargs: dict[str, Any]) -> tuple[Any, Impl]:
    keras = import_keras()
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
    keras = import_keras()
    layout = tf_layout(data_format or keras.config.image_data_format())
    spec = GlobalPool(mode, rank=rank, layout=layout)
    cls_name = f"Global{'Average' if mode == 'avg' else 'Max'}Pooling{rank}D"
    kwargs = dict(data_format=data_format, keepdims=keepdims)
    _, impl = _layer(cls_name, spec, kwargs)
    if keepdims:
        return spec, impl
    return spec, _keepdims(impl, rank, layout)


def _keepdims(impl: Impl, rank: int, layout: str, batch: int = 0) -> Impl:
    """View a (N, C) global-pool output as symjac's (N, 1, .., 1, C) (or (N, C, 1, .., 1)); ``batch``
    leading axes (a vmapped one) are kept as they are."""
    def expand(y: np.ndarray) -> np.ndarray:
        if y.ndim != 2 + batch:
            return y  # not (N, C): leave it for the verifier to report
        return y.reshape(y.shape[:batch + 1] + (1,) * rank + y.shape[batch + 1:] if layout == "channels_last"
                         else y.shape + (1,) * rank)

    def flat(dy: np.ndarray) -> np.ndarray:
        return dy.reshape(dy.shape[:batch + 1] + (-1,))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return impl.backward(x, flat(dy))  # type: ignore[misc]

    jvp, second = impl.jvp, impl.double_backward

    def double_backward(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ddx, ddy = second(x, flat(dy), v)  # type: ignore[misc]
        return ddx, np.asarray(ddy).reshape(dy.shape)

    return dataclasses.replace(
        impl, forward=lambda x: expand(impl.forward(x)), backward=backward,
        jvp=None if jvp is None else (lambda x, t: expand(jvp(x, t))),
        double_backward=None if second is None else double_backward,
        vmap=_keepdims(impl.vmap, rank, layout, batch + 1) if isinstance(impl.vmap, Impl) else impl.vmap,
        modes={name: _keepdims(other, rank, layout, batch) for name, other in impl.modes.items()})


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
    keras = import_keras()
    layout = tf_layout(data_format or keras.config.image_data_format())
    spec = AdaptivePool(mode, tf_sizes(output_size, rank, "output_size", layout), layout=layout)
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
    keras = import_keras()
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
    keras = import_keras()
    layout = tf_layout(data_format or keras.config.image_data_format())
    kernel = tf_sizes(pool_size, rank, "pool_size", layout)
    stride = kernel if strides is None else tf_sizes(strides, rank, "strides", layout)
    return Pool(mode, kernel, stride=stride, padding=tf_padding(padding, rank, layout), layout=layout), layout


def keras_ops_adaptive_max_pool(output_size: Any, data_format: str | None = None, *,
                                rank: int | None = None) -> tuple[AdaptivePool, Impl]:
    """``keras.ops.adaptive_max_pool`` and its spec."""
    return _ops_adaptive("max", output_size, data_format, rank)


def keras_ops_adaptive_average_pool(output_size: Any, data_format: str | None = None, *,
                                    rank: int | None = None) -> tuple[AdaptivePool, Impl]:
    """``keras.ops.adaptive_average_pool`` and its spec."""
    return _ops_adaptive("avg", output_size, data_format, rank)


def _ops_adaptive(mode: str, output_size: Any, data_format: str | None, rank: int | None) -> tuple[AdaptivePool, Impl]:
    keras = import_keras()
    r = _ops_rank(output_size, rank, "output_size")
    layout = tf_layout(data_format or keras.config.image_data_format())
    spec = AdaptivePool(mode, tf_sizes(output_size, r, "output_size", layout), layout=layout)
    op = f"adaptive_{'average' if mode == 'avg' else 'max'}_pool"
    return _ops(op, mode, dict(output_size=output_size, data_format=data_format), spec)


# ------------------------------------------------------------------ configurations

_KERAS_POOLS = {"max": "MaxPooling", "avg": "AveragePooling"}


def _keras_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k = draw_shape(rng, rank), draw_ints(rng, rank)
        s = None if rng.random() < 0.3 else draw_ints(rng, rank)
        padding = "valid" if rng.random() < 0.5 else "same"
        op = f"{_KERAS_POOLS[mode]}{rank}D"
        return Config(op, {"pool_size": k, "strides": s, "padding": padding}, shape,
                      label(f"keras {op}", k=k, s=s, pad=padding))

    return draw


def _keras_ops_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k, s = draw_shape(rng, rank), draw_ints(rng, rank), draw_ints(rng, rank)
        padding = "valid" if rng.random() < 0.5 else "same"
        op = "keras_ops_max_pool" if mode == "max" else "keras_ops_average_pool"
        return Config(op, {"pool_size": k, "strides": s, "padding": padding}, shape,
                      label(op.replace("_ops_", ".ops."), k=k, s=s, pad=padding))

    return draw


def _global_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        keepdims = bool(rng.random() < 0.5)
        op = f"Global{_KERAS_POOLS[mode].replace('Pooling', '')}Pooling{rank}D"
        return Config(op, {"keepdims": keepdims}, draw_shape(rng, rank), label(f"keras {op}", keepdims=keepdims))

    return draw


def _adaptive_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape = draw_shape(rng, rank)
        out = tuple(int(rng.integers(1, n + 1)) for n in shape[1:-1])
        if rng.random() < 0.5:
            op = f"Adaptive{_KERAS_POOLS[mode].replace('Pooling', '')}Pooling{rank}D"
            return Config(op, {"output_size": out}, shape, label(f"keras {op}", o=out))
        op = f"keras_ops_adaptive_{'max' if mode == 'max' else 'average'}_pool"
        return Config(op, {"output_size": out}, shape, label(op.replace("_ops_", ".ops."), o=out))

    return draw


#: The Keras draws of the configuration matrix, each made per mode and rank, in the order
#: :func:`symjac.frameworks.tensorflow.configurations` draws them after ``tf.nn``'s.
FAMILIES = (_keras_family, _keras_ops_family, _global_family, _adaptive_family)


#: (issue 33 item 7a) ``dir()`` and ``import *`` show the documented names only.
__all__ = public_names(sys.modules[__name__])


def __dir__() -> list[str]:
    return list(__all__)
