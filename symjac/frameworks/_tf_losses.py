"""TensorFlow's losses (``tf.nn``, ``keras.losses``) as :class:`symjac.LossImpl` with their spec;
:mod:`symjac.frameworks.tensorflow` re-exports these.

``impl.derivative`` is ``tf.GradientTape``'s gradient (times the loss scale S; with an upstream
for ``reduction="none"``), ``impl.hvp`` two nested tapes: the inner gradient differentiated by the
outer one along v, the Hessian-vector product :func:`symjac.verify_loss` checks.

=====================================================  ========================================
TensorFlow / Keras                                     symjac
=====================================================  ========================================
``tf.nn.sigmoid_cross_entropy_with_logits``            ``Loss("sigmoid_ce")``
``tf.nn.softmax_cross_entropy_with_logits``            ``Loss("softmax_ce")`` (probability rows)
``tf.nn.sparse_softmax_cross_entropy_with_logits``     ``Loss("softmax_ce", labels="indices")``
``keras.losses.MeanSquaredError()``                    ``Loss("mse", reduction="mean")``
``reduction="mean"/"sum"/"none"`` (``tf.nn``)          ``reduce_mean`` / ``reduce_sum`` / per element
=====================================================  ========================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Unsupported
from symjac.frameworks._keras_backend import import_keras
from symjac.frameworks._tf import import_tf
from symjac.loss._spec import Loss
from symjac.frameworks._adapter import LossImpl

_REDUCTIONS = ("mean", "sum", "none")


def loss_impl(fn: Callable[[Any, Any], Any], loss: Loss) -> LossImpl:
    """A TF loss ``fn(pred, label) -> L`` (per element for ``"none"``) as a :class:`symjac.LossImpl`."""
    tf = import_tf()
    scale = float(loss.scale)

    def constant(a: Any) -> Any:
        return None if a is None else tf.constant(a)

    def gradient(p: Any, label: Any, upstream: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = fn(p, constant(label))
        return tape.gradient(value, p, output_gradients=constant(upstream))

    def forward(pred: np.ndarray, label: Any) -> np.ndarray:
        return np.array(fn(tf.constant(pred), constant(label)))

    def derivative(pred: np.ndarray, label: Any, upstream: Any = None) -> np.ndarray:
        return np.array(gradient(tf.constant(pred), label, upstream) * scale)

    def hvp(pred: np.ndarray, label: Any, v: np.ndarray, upstream: Any = None) -> np.ndarray:
        p = tf.constant(pred)
        with tf.GradientTape() as outer:
            outer.watch(p)
            g = gradient(p, label, upstream)
        h = outer.gradient(g, p, output_gradients=tf.constant(v))
        return np.zeros_like(pred) if h is None else np.array(h * scale)

    return LossImpl(loss=loss, derivative=derivative, forward=forward, hvp=hvp)


def _reduce(reduction: str) -> Callable[[Any], Any]:
    if reduction not in _REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    tf = import_tf()
    reduce: Callable[[Any], Any] = {"mean": tf.reduce_mean, "sum": tf.reduce_sum, "none": lambda a: a}[reduction]
    return reduce


def sigmoid_cross_entropy_with_logits(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``tf.nn.sigmoid_cross_entropy_with_logits`` reduced, and its spec ``Loss("sigmoid_ce")``."""
    tf, reduce = import_tf(), _reduce(reduction)
    spec = Loss("sigmoid_ce", reduction=reduction)
    return spec, loss_impl(lambda p, y: reduce(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=p)), spec)


def softmax_cross_entropy_with_logits(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``tf.nn.softmax_cross_entropy_with_logits`` (probability rows) reduced over rows, and its spec."""
    tf, reduce = import_tf(), _reduce(reduction)
    spec = Loss("softmax_ce", reduction=reduction)
    return spec, loss_impl(lambda p, y: reduce(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=p)), spec)


def sparse_softmax_cross_entropy_with_logits(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``tf.nn.sparse_softmax_cross_entropy_with_logits`` (class indices) reduced over rows, and its spec."""
    tf, reduce = import_tf(), _reduce(reduction)
    spec = Loss("softmax_ce", reduction=reduction, labels="indices")
    return spec, loss_impl(lambda p, y: reduce(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=p)),
                           spec)


def keras_mean_squared_error() -> tuple[Loss, LossImpl]:
    """``keras.losses.MeanSquaredError()`` (mean over the last axis, then over the batch) and its
    spec ``Loss("mse")``: every row has the same length, so it is the mean over all elements."""
    keras = import_keras()
    spec = Loss("mse")
    # the loss's dtype follows the input (Keras's default would cast float64 to float32)
    return spec, loss_impl(lambda p, y: keras.losses.MeanSquaredError(dtype=p.dtype.name)(y, p), spec)
