"""TensorFlow's fractional max pooling (``tf.nn.fractional_max_pool``) with its pooling sequences fixed.

TensorFlow draws the row and column pooling sequences from its ``seed`` (a nonzero seed makes every
call draw the same ones: ``deterministic``) and returns them beside the output; its gradient
(``FractionalMaxPoolGrad``) takes them back. The spec (:class:`symjac.FractionalMaxPool` with
``sequences``) is read from one call at the configuration's input shape, and every later call
checks that TensorFlow drew the same sequences (a call that did not would pool other windows,
and raises saying so). Windows: [s_i, s_{i+1}), or [s_i, s_{i+1}] (clamped) with ``overlapping``
(checked against TensorFlow 2.21's forward and gradient in ``tests/test_fractional_max.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported
from symjac.frameworks.keras._tape import GRAPH, TAPE, import_tf, tape
from symjac.pool._spec import FractionalMaxPool


def _ratio(pooling_ratio: Any) -> list[float]:
    ratio = [float(r) for r in pooling_ratio] if isinstance(pooling_ratio, (list, tuple)) else [float(pooling_ratio)]
    if len(ratio) == 2:
        ratio = [1.0, *ratio, 1.0]
    if len(ratio) != 4 or ratio[0] != 1.0 or ratio[3] != 1.0 or min(ratio) < 1.0:
        raise Unsupported(f"pooling_ratio={pooling_ratio!r}: TensorFlow takes [1, rows, cols, 1], each >= 1")
    return ratio


def fractional_max_pool(input_shape: Any, pooling_ratio: Any, pseudo_random: bool = False, overlapping: bool = False,
                        seed: int = 1) -> tuple[FractionalMaxPool, Impl]:
    """``tf.nn.fractional_max_pool`` (NHWC) at ``input_shape`` with a nonzero ``seed`` and its spec: the
    pooling sequences TensorFlow draws there."""
    tf = import_tf()
    if not seed:
        raise Unsupported("seed=0: TensorFlow draws new pooling sequences at every call; give a nonzero seed")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 4:
        raise Unsupported(f"input_shape={input_shape!r}: tf.nn.fractional_max_pool takes (N, H, W, C)")
    kwargs = {"pooling_ratio": _ratio(pooling_ratio), "pseudo_random": bool(pseudo_random),
              "overlapping": bool(overlapping), "seed": int(seed)}
    _, rows, cols = tf.nn.fractional_max_pool(tf.zeros(shape, tf.float32), **kwargs)
    drawn = (tuple(int(v) for v in rows.numpy()), tuple(int(v) for v in cols.numpy()))
    spec = FractionalMaxPool(sequences=drawn, overlapping=bool(overlapping), layout="channels_last")

    def call(t: Any) -> Any:
        y, r, c = tf.nn.fractional_max_pool(t, **kwargs)
        if tf.executing_eagerly() and (tuple(np.asarray(r).tolist()), tuple(np.asarray(c).tolist())) != drawn:
            raise RuntimeError(f"tf.nn.fractional_max_pool drew the sequences {np.asarray(r).tolist()}, "
                               f"{np.asarray(c).tolist()}, not the spec's {drawn}")
        return y

    reproducer = ("import tensorflow as tf\n" + TAPE.format(call="tf.nn.fractional_max_pool(xt, " + ", ".join(
        f"{k}={v!r}" for k, v in kwargs.items()) + ")[0]"))
    impl = tape(call, "tf.nn.fractional_max_pool", dict(kwargs, input_shape=shape), reproducer)
    return spec, dataclasses.replace(_first_order(impl), modes={GRAPH: _first_order(impl.modes[GRAPH])})


#: What TensorFlow 2.21 defines no rule for: its FractionalMaxPoolGrad has no gradient (forward mode is
#: the double-backward trick in TF) and pfor has no converter for FractionalMaxPool.
LACKS = {"jvp": "TensorFlow registers no gradient for FractionalMaxPoolGrad: no forward mode (ForwardAccumulator "
                "differentiates the backward) for tf.nn.fractional_max_pool",
         "double_backward": "TensorFlow registers no gradient for FractionalMaxPoolGrad: no second derivative",
         "vmap": "tf.vectorized_map has no pfor converter for FractionalMaxPool"}


def _first_order(impl: Impl) -> Impl:
    """``impl`` with the transforms TensorFlow lacks for the op declared missing, each with why."""
    return dataclasses.replace(impl, jvp=None, double_backward=None, vmap=None, missing=dict(LACKS))
