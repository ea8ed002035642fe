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
``tf.nn.fractional_max_pool`` (nonzero seed)    ``FractionalMaxPool(sequences=(rows, cols),``
                                                ``overlapping=)``: the sequences TF draws at the
                                                input shape
``tf.image.crop_and_resize`` (bilinear, boxes   ``RoiAlign(crop_size, sampling_ratio=1,``
in [0, 1])                                      ``aligned=True)``, boxes moved onto its points
                                                (``_crop``), on the NCHW view of the image
==============================================  ==============================================
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._check import public_names, tensorflow_check as check  # noqa: F401 - symjac.frameworks.tensorflow.check
from symjac.frameworks._adapter import Config, Impl, KnownDefect, Unsupported, call_text, combine, generate, grid_size, label
from symjac.frameworks._adapter import make as _make
from symjac.frameworks.keras._tape import FRAMEWORK as FRAMEWORK, GRAPH
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
from symjac.frameworks.tensorflow._crop import crop_and_resize as crop_and_resize
from symjac.frameworks.tensorflow._fractional import fractional_max_pool as fractional_max_pool
from symjac.pool._spec import Pool


#: The compiled mode ``conform`` checks beside the eager one (``Impl.modes``' key): ``tf.function``.
COMPILED_MODE = GRAPH


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
    return any(-(-length // o) + 1 > length for length, o in zip(_spatial(config), tuple(config.kwargs["output_size"])))


def limitation(config: Config, dtype: Any) -> str | None:
    """Why TensorFlow cannot run ``config`` in ``dtype`` (a kernel it does not have), or None."""
    if _windowed_3d(config) and np.dtype(dtype) == np.float64:
        return "TensorFlow has no float64 CPU kernel for MaxPool3D / AvgPool3D"
    if config.op == "crop_and_resize" and np.dtype(dtype) == np.float64:
        return "tf.image.crop_and_resize computes in float32 whatever the image's dtype (its output is float32)"
    return None


#: The categories of findings uninitialized memory in a gradient gives: any wrong value, run to run.
_GARBAGE = ("crashed", "bad_output", "nondeterministic", "wrong_cells", "wrong_weights", "partial_windows",
            "missing_windows", "not_fd_consistent", "tie_not_subgradient", "wrong_second_derivative")
#: The categories of a JVP or double backward zero in some windows, a different number from call to call
#: (partial_windows: the one-hot probes came back right and the dense call zeroed some windows, so the JVP
#: is not linear in t; in 3 of 25 conform runs of Keras adaptive max pooling under vmap, TF 2.21, orders family).
_ZEROED = ("missing_windows", "nondeterministic", "wrong_cells", "wrong_weights", "tie_not_subgradient",
           "partial_windows")


def _is_max(config: Config) -> bool:
    return "max" in config.op.lower() or config.kwargs.get("pooling_type") == "MAX"


def _spatial(config: Config) -> tuple[int, ...]:
    shape = config.input_shape
    return tuple(shape[2:] if config.kwargs.get("data_format") == "channels_first" else shape[1:-1])


def _identity_pool_fed(config: Config) -> bool:
    """Whether the op runs a max pool whose window is one cell (the identity) on another op's output:
    ``tf.nn.pool`` MAX with a window of 1 and dilations > 1 (SpaceToBatchND feeds it), or Keras's
    adaptive max pooling (``keras.src.backend.tensorflow.nn``: one stage per axis, each a pool of
    ceil(L/o) cells along it on the previous stage's gathered output) with o = L on an axis after the
    first (channels_first: on any axis, a transpose feeds the first)."""
    kw = config.kwargs
    if config.op == "pool":
        return kw.get("pooling_type") == "MAX" and max(kw["window_shape"]) == 1 and max(kw.get("dilations") or (1,)) > 1
    if "adaptive" not in config.op.lower() or not _is_max(config):
        return False
    pairs = list(zip(_spatial(config), tuple(kw["output_size"])))
    return any(length == o for length, o in pairs[0 if kw.get("data_format") == "channels_first" else 1:])


def _graph_defects(config: Config, transform: str, traced: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """The defects of TensorFlow's graph mode: a ``tf.function`` (``traced``) or ``tf.vectorized_map``."""
    if transform in ("jvp", "hvp", "vmap") and traced and _identity_pool_fed(config):
        what = {"jvp": "ForwardAccumulator's JVP", "hvp": "the nested tapes' ddy = J·v",
                "vmap": "ForwardAccumulator's JVP under tf.vectorized_map"}[transform]
        yield (f"TensorFlow in graph mode (tf.function, tf.vectorized_map): {what} through a max pool whose window "
               "is one cell (the identity: tf.nn.pool MAX with window 1 and dilations > 1, a stage of Keras "
               "adaptive max pooling with o = L) fed by another op comes back zero, in some or all windows and "
               "differently from call to call; eagerly it is right (tf.nn.max_pool1d(tf.nn.max_pool1d(x, 1, 1, "
               "'VALID'), 1, 1, 'VALID'): JVP [1 1 1 1] eagerly, [0 0 0 0] in a tf.function)", _ZEROED)
    if transform == "vmap" and _is_max(config) and config.op != "fractional_max_pool":
        yield ("tf.vectorized_map of ForwardAccumulator's JVP through a max pool comes back zero for a batch of "
               "one sample (batches of 2 and 3 are right: tf.nn.max_pool1d(x, 3, 1, 'SAME') on (1, 6, 2), zero "
               "at 30 of 30 random x with a batch of 1, right at 60 of 60 with 2 or 3; average pooling and "
               "tf.reduce_max are right); symjac's batched check runs batches of 1, 2 and 3", _ZEROED)
    if traced and "adaptive" in config.op.lower() and _big_window_exceeds_axis(config):
        yield ("Keras adaptive pooling on TensorFlow pools every axis with two windows, ceil(L/o) and ceil(L/o) + 1; "
               "where the second exceeds the axis (an output size of 1) a graph cannot be built: in a tf.function "
               "and under tf.vectorized_map the forward raises ('Negative dimension size' while tracing)",
               ("bad_output",))


def _eager_defects(config: Config, transform: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """The defects of ops run eagerly, one by one."""
    adaptive = "adaptive" in config.op.lower()
    if adaptive and _big_window_exceeds_axis(config):
        if _is_max(config):
            form = ("ForwardAccumulator's JVP raises ('Negative dimension size' in the gradient tape), or the forward "
                    "dies with SIGFPE" if transform == "jvp" else
                    "SIGFPE (kills the process) when it is the last spatial axis, else a gradient holding garbage "
                    "values (uninitialized memory: 1e+27, -7e+24, NaN) in cells whose exact derivative is 0")
            yield (f"Keras adaptive max pooling on TensorFlow with an output size of 1, eagerly: {form} (the pool of "
                   "ceil(L/o) + 1 cells exceeds the axis; oneDNN's MaxPool divides by zero when it is the last "
                   "spatial axis)", _GARBAGE)
        elif transform == "jvp":
            yield ("Keras adaptive average pooling on TensorFlow pools every axis with two windows, ceil(L/o) and "
                   "ceil(L/o) + 1; where the second exceeds the axis (an output size of 1) its AvgPool is empty: "
                   "eagerly the forward and the VJP are right, but ForwardAccumulator's JVP raises ('Negative "
                   "dimension size' in the gradient tape)", ("bad_output",))


def _defects(config: Config, transform: str, mode: str) -> Iterator[tuple[Any, ...]]:
    """Each documented defect ``config`` runs into under ``transform`` in ``mode``, with the finding
    categories it gives (as ``conform`` ran them on TF 2.21 / Keras 3.15: ``tests/test_conform*.py``) and,
    where it shows at some input families only, those: the arguments of :class:`KnownDefect`. A vmap cell
    runs in graph mode whatever the mode (``tf.vectorized_map`` traces)."""
    traced = mode != "eager" or transform == "vmap"
    if config.op == "crop_and_resize":
        yield ("tf.image.crop_and_resize interpolates as top + (bottom - top)·lerp: one ±inf corner gives "
               "inf - inf = NaN where the bilinear value is that infinity (measured, TF 2.21; symjac's nonfinite "
               "family, tests/test_crop_and_resize.py)", ("forward_values",), ("nonfinite",))
    if transform != "vjp" and config.op == "max_pool2d" and not isinstance(config.kwargs.get("padding", "VALID"), str):
        yield ("tf.nn.max_pool2d with explicit padding has no second derivative: MaxPoolGradGrad rejects "
               "padding 'EXPLICIT' (ForwardAccumulator's JVP and nested tapes raise)", ("bad_output",))
    if transform in ("jvp", "vmap") and config.op == "pool" and max(config.kwargs.get("dilations") or (1,)) > 1:
        yield ("tf.nn.pool with dilations > 1: each ForwardAccumulator JVP is right alone, but after 33 of "
               "them at other shapes in one process the next raises ('block_shape must have known size': the "
               "retraced gradient tape's SpaceToBatchND / BatchToSpaceND)", ("bad_output",))
    yield from _graph_defects(config, transform, traced)
    if not traced:
        yield from _eager_defects(config, transform)
    if transform in ("vjp", "vmap") and _windowed_3d(config) and _is_max(config):
        yield ("TensorFlow's MaxPool3DGrad sends the whole upstream gradient to every tied maximum, eagerly, in a "
               "tf.function and under tf.vectorized_map (any Clarke subgradient sums to 1; max_pool3d of ones "
               "(1, 2, 3, 3, 1), window 1x2x2, stride 1: the centre cells get 4)", ("tie_not_subgradient",))
    if config.op == "fractional_max_pool":
        yield ("tf.nn.fractional_max_pool starts each window's maximum at the dtype's lowest finite value: a window "
               "of -inf (or NaN) only is -1.8e308 in float64, not -inf; and its gradient recomputes the forward and "
               "compares it with the output, which fails wherever the output holds NaN (FractionalMaxPoolGrad raises "
               "'tensor_out_dup is not the same as tensor_out')", ("forward_values", "bad_output", "wrong_cells",
                                                                   "missing_windows", "partial_windows"), ("nonfinite",))
        return
    if _is_max(config):
        yield ("TensorFlow's max pooling ignores NaN in its forward ([nan, 1, 2] -> 2), gives -max for a window of "
               "-inf only, and its backward sends some NaN windows' gradient to the NaN cell, against its own "
               "forward (symjac's nonfinite family; tests/test_nonfinite_frameworks.py)",
               ("forward_values", "wrong_cells", "tie_not_subgradient", "partial_windows", "missing_windows",
                "bad_output"), ("nonfinite",))


def known_defect(config: Config, transform: str = "vjp", mode: str = "eager") -> KnownDefect | None:
    """The known TensorFlow/Keras defects ``config`` runs into under ``transform`` (``conform --transforms``)
    in ``mode`` (``"eager"`` or ``"tf.function"``; symjac reports them): their texts and the union of their
    categories, or None."""
    return combine([KnownDefect(*found) for found in _defects(config, transform, mode)])


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


def _fractional_family(rng: np.random.Generator) -> Config | None:
    shape = (1, int(rng.integers(4, 12)), int(rng.integers(4, 12)), int(rng.integers(1, 3)))
    ratio = [1.0, float(rng.choice([1.25, 1.44, 1.5, 1.73, 2.0])), float(rng.choice([1.25, 1.41, 1.5, 1.73, 2.0])), 1.0]
    pseudo, overlapping = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    kwargs = {"input_shape": shape, "pooling_ratio": ratio, "pseudo_random": pseudo, "overlapping": overlapping,
              "seed": int(rng.integers(1, 1000))}
    return Config("fractional_max_pool", kwargs, shape, label("tf.nn.fractional_max_pool", r=tuple(ratio[1:3]),
                                                              pseudo=pseudo, overlapping=overlapping))


#: fractional max pooling's configurations per grid configuration (after the others: their draws stay).
FRACTIONAL_SHARE = 6


def _crop_family(rng: np.random.Generator) -> Config | None:
    """``tf.image.crop_and_resize`` (bilinear): boxes at multiples of 1/8 in [0, 1] (inverted and point
    boxes among them), crops of 1, 2, 3 or 5 (crop - 1 a power of two: TensorFlow's float32 sample points
    are exact), several boxes per image."""
    n, h, w, c = int(rng.integers(1, 3)), int(rng.integers(3, 8)), int(rng.integers(3, 8)), int(rng.integers(1, 3))
    k = int(rng.integers(1, 4))
    boxes = [[float(v) for v in rng.integers(0, 9, 4) / 8] for _ in range(k)]
    indices = [int(v) for v in rng.integers(0, n, k)]
    crop = [int(rng.choice([1, 2, 3, 5])), int(rng.choice([1, 2, 3, 5]))]
    kwargs = {"image_shape": (n, h, w, c), "boxes": boxes, "box_indices": indices, "crop_size": crop}
    return Config("crop_and_resize", kwargs, (n, c, h, w), label("tf.image.crop_and_resize", crop=tuple(crop),
                                                                   boxes=k))


#: crop_and_resize's configurations per grid configuration (after the others: their draws stay).
CROP_SHARE = 6


def configurations(grid: str = "small") -> Iterator[Config]:
    """TensorFlow/Keras pools over 1/2/3-D (channels_last): ``tf.nn`` max/avg (VALID, SAME, explicit),
    ``tf.nn.pool`` (dilations), Keras pooling, global and adaptive layers, ``keras.ops`` pools, then
    ``tf.nn.fractional_max_pool`` (pseudo-random or random, overlapping or not, seeded) and
    ``tf.image.crop_and_resize`` (bilinear, dyadic boxes in [0, 1]). Seeded and
    deterministic; ``"full"`` is twice the common size, since a sixth of the configurations are 3-D
    pools TF has no float64 kernel for."""
    families = []
    for make_family in (_nn_family, _pool_family, *_KERAS_FAMILIES):
        families += [make_family(m, r) for m in ("max", "avg") for r in (1, 2, 3)]
    yield from generate(grid, families, make, scale=2 if grid == "full" else 1)
    yield from itertools.islice(generate(grid, [_fractional_family], make, seed=11), grid_size(grid) // FRACTIONAL_SHARE)
    yield from itertools.islice(generate(grid, [_crop_family], make, seed=13), grid_size(grid) // CROP_SHARE)


# ------------------------------------------------------------------ losses (tf.nn, keras.losses)

from symjac.frameworks.tensorflow._losses import (  # noqa: E402 - the losses are their own module; re-exported here
    ctc_loss as ctc_loss,
    keras_binary_crossentropy as keras_binary_crossentropy,
    keras_categorical_crossentropy as keras_categorical_crossentropy,
    keras_huber as keras_huber,
    keras_kl_divergence as keras_kl_divergence,
    keras_mean_absolute_error as keras_mean_absolute_error,
    keras_mean_squared_error as keras_mean_squared_error,
    keras_poisson as keras_poisson,
    keras_sparse_categorical_crossentropy as keras_sparse_categorical_crossentropy,
    known_loss_defect as known_loss_defect,
    loss_configurations as loss_configurations,
    log_poisson_loss as log_poisson_loss,
    loss_impl as loss_impl,
    make_loss as make_loss,
    sigmoid_cross_entropy_with_logits as sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits as softmax_cross_entropy_with_logits,
    sparse_softmax_cross_entropy_with_logits as sparse_softmax_cross_entropy_with_logits,
    weighted_cross_entropy_with_logits as weighted_cross_entropy_with_logits,
)


#: (issue 33 item 7a) ``dir()`` and ``import *`` show the documented names only.
__all__ = public_names(sys.modules[__name__])


def __dir__() -> list[str]:
    return list(__all__)
