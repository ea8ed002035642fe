"""TensorFlow and Keras adapter: any TF callable through ``tf.GradientTape``; ``tf.nn`` pools, Keras
pooling layers and ``keras.ops`` pools with their spec (the Keras ops are
:mod:`symjac.frameworks.keras`'s, re-exported here; the tape and TF's argument conventions are
``symjac.frameworks.keras._tape``'s).

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

from symjac.frameworks._check import tensorflow_check as check  # noqa: F401 - symjac.frameworks.tensorflow.check
from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, call_text, generate, label, make as _make
from symjac.frameworks.keras._tape import FRAMEWORK as FRAMEWORK
from symjac.frameworks.keras._tape import TAPE, draw_ints, draw_shape, import_tf, tape, tf_layout, tf_padding, tf_sizes
from symjac.frameworks.keras import FAMILIES as _KERAS_FAMILIES
from symjac.frameworks.keras import (  # the Keras ops are TensorFlow's too: configurations() and make() run them
    AdaptiveAveragePooling1D as AdaptiveAveragePooling1D,
    AdaptiveAveragePooling2D as AdaptiveAveragePooling2D,
    AdaptiveAveragePooling3D as AdaptiveAveragePooling3D,
    AdaptiveMaxPooling1D as AdaptiveMaxPooling1D,
    AdaptiveMaxPooling2D as AdaptiveMaxPooling2D,
    AdaptiveMaxPooling3D as AdaptiveMaxPooling3D,
    AveragePooling1D as AveragePooling1D,
    AveragePooling2D as AveragePooling2D,
    AveragePooling3D as AveragePooling3D,
    GlobalAveragePooling1D as GlobalAveragePooling1D,
    GlobalAveragePooling2D as GlobalAveragePooling2D,
    GlobalAveragePooling3D as GlobalAveragePooling3D,
    GlobalMaxPooling1D as GlobalMaxPooling1D,
    GlobalMaxPooling2D as GlobalMaxPooling2D,
    GlobalMaxPooling3D as GlobalMaxPooling3D,
    MaxPooling1D as MaxPooling1D,
    MaxPooling2D as MaxPooling2D,
    MaxPooling3D as MaxPooling3D,
    keras_ops_adaptive_average_pool as keras_ops_adaptive_average_pool,
    keras_ops_adaptive_max_pool as keras_ops_adaptive_max_pool,
    keras_ops_average_pool as keras_ops_average_pool,
    keras_ops_max_pool as keras_ops_max_pool,
)
from symjac.pool._spec import Pool


def wrap(fn: Any, *, name: str | None = None, **kwargs: Any) -> Impl:
    """Turn a TensorFlow callable (a ``tf.nn`` op, a ``tf.function``, a Keras layer or model, a
    ``tf.custom_gradient`` function) into an :class:`Impl`; ``backward`` is ``tf.GradientTape``'s.

    Args:
      fn: called as ``fn(x, **kwargs)`` on a ``tf.Tensor`` of ``x``'s dtype (CPU).
      name: the op name in reports.
      **kwargs: further arguments of every call.
    """
    what = str(name or getattr(fn, "__name__", None) or type(fn).__name__)
    reproducer = f"import tensorflow as tf\n# fn = ...  # your {what}\n" + TAPE.format(call=call_text("fn", kwargs, "xt"))
    return tape(lambda t: fn(t, **kwargs), what, dict(kwargs), reproducer)


# ------------------------------------------------------------------ mapping


def _nn(op: str, mode: str, rank: int, ksize: Any, strides: Any, padding: Any, data_format: str | None,
        dilations: Any = None, extra: dict[str, Any] | None = None) -> tuple[Pool, Impl]:
    tf = import_tf()
    layout = tf_layout(data_format)
    kernel = tf_sizes(ksize, rank, "ksize", layout)
    stride = (1,) * rank if strides is None else tf_sizes(strides, rank, "strides", layout)
    dilation = (1,) * rank if dilations is None else tf_sizes(dilations, rank, "dilations", layout)
    spec = Pool(mode, kernel, stride=stride, padding=tf_padding(padding, rank, layout), dilation=dilation,
                layout=layout)
    kwargs = dict(extra or {}, **({"ksize": ksize} if op != "pool" else {}), strides=strides, padding=padding,
                  data_format=data_format)
    if op == "pool":
        kwargs["dilations"] = dilations
    fn = getattr(tf.nn, op)
    reproducer = "import tensorflow as tf\n" + TAPE.format(call=call_text(f"tf.nn.{op}", kwargs, "xt"))
    return spec, tape(lambda t: fn(t, **kwargs), f"tf.nn.{op}", kwargs, reproducer)


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
    if padding.upper() == "SAME" and dilations is not None and max(tf_sizes(dilations, rank, "dilations",
                                                                           tf_layout(data_format))) > 1:
        raise Unsupported("tf.nn.pool: 'SAME' padding is not implemented for dilations > 1 (TF raises ValueError)")
    if strides is not None and any(s > k for s, k in zip(tf_sizes(strides, rank, "strides", tf_layout(data_format)),
                                                       window_shape)):
        raise Unsupported("tf.nn.pool: strides > window_shape is not supported (TF raises ValueError)")
    return _nn("pool", pooling_type.lower(), rank, window_shape, strides, padding,
               data_format, dilations, {"window_shape": window_shape, "pooling_type": pooling_type})


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


def _big_window_exceeds_axis(config: Config) -> bool:
    """Whether Keras' adaptive pooling (``keras.src.backend.tensorflow.nn``: windows of ceil(L/o) and
    ceil(L/o) + 1 cells, stride 1, VALID) has a big window longer than its axis L."""
    shape = config.input_shape
    spatial = shape[2:] if config.kwargs.get("data_format") == "channels_first" else shape[1:-1]
    return any(-(-length // o) + 1 > length for length, o in zip(spatial, tuple(config.kwargs["output_size"])))


def limitation(config: Config, dtype: Any) -> str | None:
    """Why TensorFlow cannot run ``config`` in ``dtype`` (a kernel it does not have), or None."""
    if _windowed_3d(config) and np.dtype(dtype) == np.float64:
        return "TensorFlow has no float64 CPU kernel for MaxPool3D / AvgPool3D"
    return None


#: The categories of findings uninitialized memory in a gradient gives: any wrong value, run to run.
_GARBAGE = ("crashed", "bad_output", "nondeterministic", "wrong_cells", "wrong_weights", "partial_windows",
            "missing_windows", "not_fd_consistent", "tie_not_subgradient", "wrong_second_derivative")


def _defects(config: Config, transform: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each documented defect ``config`` runs into under ``transform``, with the finding categories it
    gives (as ``conform`` ran them on TF 2.21 / Keras 3.15: ``tests/test_conform*.py``)."""
    if transform != "vjp":
        explicit = not isinstance(config.kwargs.get("padding", "VALID"), str)
        if explicit and config.op == "max_pool2d":
            yield ("tf.nn.max_pool2d with explicit padding has no second derivative: MaxPoolGradGrad rejects "
                   "padding 'EXPLICIT' (ForwardAccumulator's JVP and nested tapes raise)", ("bad_output",))
        if transform in ("jvp", "vmap") and "adaptive" in config.op.lower() and "average" in config.op.lower() \
                and _big_window_exceeds_axis(config):
            yield ("Keras adaptive average pooling on TensorFlow pools every axis with two windows, ceil(L/o) and "
                   "ceil(L/o) + 1; where the second exceeds the axis (an output size of 1) its AvgPool is empty, "
                   "and ForwardAccumulator's JVP raises ('Negative dimension size' in the gradient tape), "
                   "under tf.vectorized_map the forward too", ("bad_output",))
        if transform in ("jvp", "vmap") and config.op == "pool" and max(config.kwargs.get("dilations") or (1,)) > 1:
            yield ("tf.nn.pool with dilations > 1: each ForwardAccumulator JVP is right alone, but after 33 of "
                   "them at other shapes in one process the next raises ('block_shape must have known size': the "
                   "retraced gradient tape's SpaceToBatchND / BatchToSpaceND); under tf.vectorized_map the MAX "
                   "pool's JVP comes back zero in every window", ("bad_output", "missing_windows"))
        if transform == "vmap" and "adaptive" in config.op.lower() and "max" in config.op.lower():
            yield ("Keras adaptive max pooling under tf.vectorized_map: ForwardAccumulator's JVP comes back "
                   "zero in most windows, a different number of them from call to call (per sample it is right); in "
                   "float32 from the first call, in float64 after a few in one process (a fresh float64 cell may "
                   "pass: fixed?)",
                   ("missing_windows", "nondeterministic", "wrong_cells", "wrong_weights", "tie_not_subgradient"))
    is_max = "max" in config.op.lower() or config.kwargs.get("pooling_type") == "MAX"
    adaptive = "adaptive" in config.op.lower()
    if adaptive and is_max and 1 in tuple(config.kwargs["output_size"]):
        yield ("Keras adaptive max pooling on TensorFlow with an output size of 1: SIGFPE (kills the process) "
               "when it is the last spatial axis, else a gradient holding garbage values (uninitialized "
               "memory: 1e+27, -7e+24, NaN) in cells whose exact derivative is 0", _GARBAGE)
    if _windowed_3d(config) and is_max:
        yield ("TensorFlow's MaxPool3DGrad sends the whole upstream gradient to every tied maximum "
               "(any Clarke subgradient sums to 1)", ("tie_not_subgradient",))


def known_defect(config: Config, transform: str = "vjp") -> KnownDefect | None:
    """The known TensorFlow/Keras defects ``config`` runs into under ``transform`` (``conform --transforms``;
    symjac reports them): their texts and the union of their categories, or None."""
    found = list(_defects(config, transform))
    if not found:
        return None
    categories = tuple(dict.fromkeys(c for _, cs in found for c in cs))
    return KnownDefect("; and: ".join(text for text, _ in found), categories)


# ------------------------------------------------------------------ configurations

def _nn_family(mode: str, rank: int) -> Callable[[np.random.Generator], Config | None]:
    def draw(rng: np.random.Generator) -> Config | None:
        shape, k, s = draw_shape(rng, rank), draw_ints(rng, rank), draw_ints(rng, rank)
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
        shape, k = draw_shape(rng, rank), draw_ints(rng, rank)
        dilated = rng.random() < 0.5
        d = draw_ints(rng, rank, 1, 2) if dilated else (1,) * rank
        # TF: strides > 1 need dilations 1, and strides <= window_shape.
        s = (1,) * rank if dilated else tuple(int(rng.integers(1, kk + 1)) for kk in k)
        padding = "VALID" if dilated or rng.random() < 0.5 else "SAME"
        kwargs = {"window_shape": list(k), "pooling_type": mode.upper(), "strides": list(s), "padding": padding,
                  "dilations": list(d)}
        return Config("pool", kwargs, shape, label(f"tf.nn.pool {mode.upper()}", k=k, s=s, d=d, pad=padding))

    return draw


def configurations(grid: str = "small") -> Iterator[Config]:
    """TensorFlow/Keras pools over 1/2/3-D (channels_last): ``tf.nn`` max/avg (VALID, SAME, explicit),
    ``tf.nn.pool`` (dilations), Keras pooling, global and adaptive layers, ``keras.ops`` pools.
    Seeded and deterministic; ``"full"`` is twice the common size, since a sixth of the configurations
    are 3-D pools TF has no float64 kernel for."""
    families = []
    for make_family in (_nn_family, _pool_family, *_KERAS_FAMILIES):
        families += [make_family(m, r) for m in ("max", "avg") for r in (1, 2, 3)]
    yield from generate(grid, families, make, scale=2 if grid == "full" else 1)


# ------------------------------------------------------------------ losses (tf.nn, keras.losses)

from symjac.frameworks.tensorflow._losses import (  # noqa: E402 - the losses are their own module; re-exported here
    keras_binary_crossentropy as keras_binary_crossentropy,
    keras_categorical_crossentropy as keras_categorical_crossentropy,
    keras_huber as keras_huber,
    keras_kl_divergence as keras_kl_divergence,
    keras_mean_absolute_error as keras_mean_absolute_error,
    keras_mean_squared_error as keras_mean_squared_error,
    keras_sparse_categorical_crossentropy as keras_sparse_categorical_crossentropy,
    known_loss_defect as known_loss_defect,
    loss_configurations as loss_configurations,
    loss_impl as loss_impl,
    make_loss as make_loss,
    sigmoid_cross_entropy_with_logits as sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits as softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits as sparse_softmax_cross_entropy_with_logits,
    weighted_cross_entropy_with_logits as weighted_cross_entropy_with_logits,
)
