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
``tf.nn.weighted_cross_entropy_with_logits``           ``Loss("sigmoid_ce", pos_weight)`` (per class)
``tf.nn.log_poisson_loss(compute_full_loss)``          ``Loss("poisson_nll", full=...)`` (log-rate
                                                       input; targets >= 0, see below)
``reduction="mean"/"sum"/"none"`` (``tf.nn``)          ``reduce_mean`` / ``reduce_sum`` / per element
``tf.nn.ctc_loss(labels, logits, label_length,``        ``Loss("ctc", blank=blank_index,
``logit_length, logits_time_major, blank_index)``      log_input=False)`` (no hvp): logits
                                                       ``(T, N, C)``, time-major
``keras.losses.MeanSquaredError()``                    ``Loss("mse", reduction="mean")``
``keras.losses.MeanAbsoluteError()``                   ``Loss("mae")``
``keras.losses.Huber(delta)``                          ``Loss("huber", delta=delta)``
``keras.losses.BinaryCrossentropy(from_logits)``       ``Loss("sigmoid_ce")`` / ``Loss("bce")``
``keras.losses.CategoricalCrossentropy``               ``Loss("softmax_ce", label_smoothing)``
``keras.losses.SparseCategoricalCrossentropy``         ``Loss("softmax_ce", labels="indices")``
``keras.losses.KLDivergence()``                        ``Loss("kld", reduction="batch_mean")``
``keras.losses.Poisson()``                             ``Loss("poisson_nll", log_input=False,
                                                       eps=keras.config.epsilon())`` (the mean)
Keras ``reduction="sum_over_batch_size"/"sum"/None``   ``"mean"`` / ``"sum"`` / ``"none"`` (per row:
                                                       the cross-entropies only)
=====================================================  ========================================

Keras's element-wise losses average over the last axis per sample, then over the batch: the mean
over every element, their one reduction here (``"sum"`` would be ``1/C`` of symjac's sum).

``tf.nn.log_poisson_loss`` adds the Stirling term ``y·log y - y + ½·log(2πy)`` except where
``0 <= y <= 1``; PyTorch (and symjac's ``poisson_nll``) adds it where ``y > 1``: the same for
every count ``y >= 0``, but at a negative target (no Poisson count) TF adds the term, NaN from
``log y``, where PyTorch adds 0. The grid's targets are counts and rates >= 0.

Not covered (no symjac kind is the same function): ``keras.losses.Hinge`` and ``SquaredHinge``
(``mean(max(1 - y·z, 0)[²])`` over the last axis, labels in {0, 1} mapped to {-1, 1}: a binary hinge,
where ``hinge_embedding`` is ``z`` at ``y = 1``), ``CategoricalHinge`` (``max(0, 1 + max_{i≠y} z_i -
z_y)``, one-hot rows: the largest hinge, where ``multi_margin`` sums them over the classes and
divides by C); TF and Keras have no ``nll``, ``gaussian_nll``, ``soft_margin``,
``multilabel_soft_margin``, ``multi_margin`` or ``multilabel_margin``.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import KnownDefect, Unsupported, grid_size
from symjac.frameworks.keras._backend import import_keras
from symjac.frameworks._loss_grid import LossConfig, ctc_draw, dyadic, generate_losses, probabilities, upstream_for
from symjac.frameworks.keras._tape import import_tf
from symjac.loss._spec import Loss
from symjac.frameworks._adapter import LossImpl

_REDUCTIONS = ("mean", "sum", "none")


def _numpy(t: Any) -> np.ndarray:
    """A tensor as a NumPy array (``.numpy()``: ``np.array`` of a 0-d bfloat16 tensor raises)."""
    return np.array(t.numpy(), copy=True)


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
        return _numpy(fn(tf.constant(pred), constant(label)))

    def derivative(pred: np.ndarray, label: Any, upstream: Any = None) -> np.ndarray:
        return _numpy(gradient(tf.constant(pred), label, upstream) * scale)

    def hvp(pred: np.ndarray, label: Any, v: np.ndarray, upstream: Any = None) -> np.ndarray:
        p = tf.constant(pred)
        with tf.GradientTape() as outer:
            outer.watch(p)
            g = gradient(p, label, upstream)
        h = outer.gradient(g, p, output_gradients=tf.constant(v))
        return np.zeros_like(pred) if h is None else _numpy(h * scale)

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


def weighted_cross_entropy_with_logits(pos_weight: Sequence[float], reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``tf.nn.weighted_cross_entropy_with_logits`` (``pos_weight`` per class, along the last axis)
    reduced, and its spec ``Loss("sigmoid_ce", pos_weight=pos_weight)``."""
    tf, reduce = import_tf(), _reduce(reduction)
    spec = _spec("sigmoid_ce", reduction=reduction, pos_weight=tuple(pos_weight))
    return spec, loss_impl(lambda p, y: reduce(tf.nn.weighted_cross_entropy_with_logits(
        labels=y, logits=p, pos_weight=tf.constant(list(pos_weight), p.dtype))), spec)


def log_poisson_loss(compute_full_loss: bool = False, reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``tf.nn.log_poisson_loss(targets, log_input, compute_full_loss)`` reduced, and its spec
    ``Loss("poisson_nll", full=compute_full_loss)`` (the log-rate input; targets >= 0: the module docstring)."""
    tf, reduce = import_tf(), _reduce(reduction)
    spec = Loss("poisson_nll", reduction=reduction, full=bool(compute_full_loss))
    return spec, loss_impl(lambda p, y: reduce(tf.nn.log_poisson_loss(
        targets=y, log_input=p, compute_full_loss=bool(compute_full_loss))), spec)


def ctc_loss(blank_index: int = 0, reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``tf.nn.ctc_loss(labels, logits, label_length, logit_length, logits_time_major=True, blank_index)``
    (dense labels) and its spec ``Loss("ctc", blank=blank_index, log_input=False)``.

    The impl takes PyTorch's arguments, as ``verify_loss``'s sequence route calls it:
    ``derivative(logits, targets, input_lengths, target_lengths[, upstream])`` with ``logits`` ``(T, N, C)``
    time-major, ``targets`` ``(N, S)`` dense, the lengths as ``logit_length`` and ``label_length``; the
    tape's gradient of the reduction applied here (TF's loss is per sequence): ``"sum"``, ``"mean"``
    (PyTorch's: each ``ℓ_b / max(L_b, 1)``, then averaged), ``"none"`` (``output_gradients``). No hvp.

    TF applies ``log_softmax`` to the logits itself (its docs: "logits: unnormalized"), so its loss is
    ``ℓ_b(log_softmax(z))`` and its gradient ``softmax(z) - γ_b``: the spec is that composition,
    ``log_input=False``, evaluated exactly by symjac (the derivation is
    :func:`symjac.frameworks.jax.ctc_loss`'s: the same for optax). Without ``zero_infinity``: an
    impossible alignment's loss is ``+inf`` and the conform grid draws none.
    """
    if reduction not in _REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    tf = import_tf()
    spec = Loss("ctc", reduction=reduction, blank=blank_index, log_input=False, scale=scale)
    factor = float(spec.scale)

    def run(z: Any, tg: Any, il: Any, tl: Any) -> Any:
        out = tf.nn.ctc_loss(tf.constant(np.asarray(tg), tf.int32), z, tf.constant(np.asarray(tl), tf.int32),
                             tf.constant(np.asarray(il), tf.int32), logits_time_major=True, blank_index=blank_index)
        if reduction == "mean":
            return tf.reduce_mean(out / tf.constant(np.maximum(np.asarray(tl), 1), z.dtype))
        return tf.reduce_sum(out) if reduction == "sum" else out

    def forward(z: np.ndarray, tg: Any, il: Any, tl: Any) -> np.ndarray:
        return _numpy(run(tf.constant(z), tg, il, tl))

    def derivative(z: np.ndarray, tg: Any, il: Any, tl: Any, upstream: Any = None) -> np.ndarray:
        p = tf.constant(z)
        with tf.GradientTape() as tape:
            tape.watch(p)
            value = run(p, tg, il, tl)
        g = tape.gradient(value, p, output_gradients=None if upstream is None else tf.constant(upstream))
        return _numpy(g * factor)

    return spec, LossImpl(loss=spec, derivative=derivative, forward=forward)


def _spec(kind: str, **options: Any) -> Loss:
    """The spec from the framework's arguments (floats, tuples; symjac reads them as exact numbers)."""
    return Loss(kind, **options)


_KERAS_REDUCTIONS = {"sum_over_batch_size": "mean", "sum": "sum", None: "none", "none": "none"}


def _keras(name: str, spec: Loss, **kwargs: Any) -> LossImpl:
    """``keras.losses.<name>(**kwargs)`` called as ``loss(y_true, y_pred)``; its dtype follows the
    input (Keras's default would compute a float64 input in float32)."""
    keras = import_keras()
    return loss_impl(lambda p, y: getattr(keras.losses, name)(dtype=p.dtype.name, **kwargs)(y, p), spec)


def _keras_reduction(reduction: Any) -> str:
    if reduction not in _KERAS_REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _KERAS_REDUCTIONS))}")
    return _KERAS_REDUCTIONS[reduction]


def keras_mean_squared_error() -> tuple[Loss, LossImpl]:
    """``keras.losses.MeanSquaredError()`` (mean over the last axis, then over the batch) and its
    spec ``Loss("mse")``: every row has the same length, so it is the mean over all elements."""
    spec = Loss("mse")
    return spec, _keras("MeanSquaredError", spec)


def keras_mean_absolute_error() -> tuple[Loss, LossImpl]:
    """``keras.losses.MeanAbsoluteError()`` and its spec ``Loss("mae")`` (the mean over all elements)."""
    spec = Loss("mae")
    return spec, _keras("MeanAbsoluteError", spec)


def keras_huber(delta: float = 1.0) -> tuple[Loss, LossImpl]:
    """``keras.losses.Huber(delta)`` and its spec ``Loss("huber", delta=delta)``."""
    spec = _spec("huber", delta=delta)
    return spec, _keras("Huber", spec, delta=delta)


def keras_binary_crossentropy(from_logits: bool = False) -> tuple[Loss, LossImpl]:
    """``keras.losses.BinaryCrossentropy(from_logits)``: ``Loss("sigmoid_ce")`` from logits, else
    ``Loss("bce")`` (Keras clips the probabilities to [1e-7, 1 - 1e-7]: the grid stays inside)."""
    spec = Loss("sigmoid_ce" if from_logits else "bce")
    return spec, _keras("BinaryCrossentropy", spec, from_logits=from_logits)


def keras_categorical_crossentropy(from_logits: bool = True, label_smoothing: float = 0.0,
                                   reduction: Any = "sum_over_batch_size") -> tuple[Loss, LossImpl]:
    """``keras.losses.CategoricalCrossentropy`` (probability rows; logits only: from probabilities
    Keras normalises and clips, another loss) and its spec ``Loss("softmax_ce", label_smoothing)``."""
    if not from_logits:
        raise Unsupported("keras CategoricalCrossentropy(from_logits=False): symjac's softmax_ce takes logits")
    spec = _spec("softmax_ce", reduction=_keras_reduction(reduction), label_smoothing=label_smoothing or None)
    return spec, _keras("CategoricalCrossentropy", spec, from_logits=True, label_smoothing=label_smoothing,
                        reduction=reduction)


def keras_sparse_categorical_crossentropy(reduction: Any = "sum_over_batch_size") -> tuple[Loss, LossImpl]:
    """``keras.losses.SparseCategoricalCrossentropy(from_logits=True)`` and its spec."""
    spec = Loss("softmax_ce", reduction=_keras_reduction(reduction), labels="indices")
    return spec, _keras("SparseCategoricalCrossentropy", spec, from_logits=True, reduction=reduction)


def keras_kl_divergence() -> tuple[Loss, LossImpl]:
    """``keras.losses.KLDivergence()`` (KL(y_true || y_pred) summed over the last axis, averaged over
    the batch) and its spec ``Loss("kld", reduction="batch_mean")``; Keras clips both to [1e-7, 1]:
    the grid's labels are positive."""
    spec = Loss("kld", reduction="batch_mean")
    return spec, _keras("KLDivergence", spec)


def keras_poisson() -> tuple[Loss, LossImpl]:
    """``keras.losses.Poisson()``: ``z - y·log(z + ε)`` averaged over the last axis, then over the batch
    (ε = ``keras.config.epsilon()``, 1e-7 unless set), and its spec ``Loss("poisson_nll",
    log_input=False, eps=ε)``: the mean over all elements."""
    spec = _spec("poisson_nll", log_input=False, eps=float(import_keras().config.epsilon()))
    return spec, _keras("Poisson", spec)


def known_loss_defect(config: LossConfig, dtype: Any, transform: str) -> KnownDefect | None:
    """A known TensorFlow defect a loss configuration runs into (``transform``: ``"derivative"`` or
    ``"hvp"``), or None."""
    if config.op == "weighted_cross_entropy_with_logits" and (np.asarray(config.pred) == 0).any():
        return KnownDefect("tf.nn.weighted_cross_entropy_with_logits at logits == 0: the gradient is 1 - y, not "
                           "(1 - y - pos_weight·y)/2, and the second derivative 0, not (pos_weight·y + 1 - y)/4 "
                           "(the subgradients of abs and relu at 0 in its formula; the loss is smooth there)",
                           # the finite difference of the smooth loss disagrees with that gradient too
                           ("wrong_values", "not_fd_consistent") if transform == "derivative"
                           else ("wrong_second_derivative",))
    return None


def make_loss(config: LossConfig) -> tuple[Loss, LossImpl]:
    """``(loss, impl)`` of one loss configuration (its ``reproducer`` snippet set)."""
    op: Callable[..., tuple[Loss, LossImpl]] = getattr(sys.modules[__name__], config.op)
    loss, impl = op(**config.kwargs)
    return loss, dataclasses.replace(impl, reproducer=_reproducer(config.op, dict(config.kwargs)))


_KERAS_NAMES = {"keras_mean_squared_error": "MeanSquaredError", "keras_mean_absolute_error": "MeanAbsoluteError",
                "keras_huber": "Huber", "keras_binary_crossentropy": "BinaryCrossentropy",
                "keras_categorical_crossentropy": "CategoricalCrossentropy",
                "keras_sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
                "keras_kl_divergence": "KLDivergence", "keras_poisson": "Poisson"}
#: The reproducer's nested tapes around ``loss(p, y)``.
_NESTED_TAPES = (
    "p, y = tf.constant(pred), None if label is None else tf.constant(label)\n"
    "with tf.GradientTape() as outer:\n    outer.watch(p)\n"
    "    with tf.GradientTape() as inner:\n        inner.watch(p)\n        value = loss(p, y)\n"
    "    g = inner.gradient(value, p, output_gradients=None if upstream is None else tf.constant(upstream))\n"
    "h = outer.gradient(g, p, output_gradients=tf.constant(v))\n"
    "derivative = g.numpy()\nhvp = 0 * pred if h is None else h.numpy()\n")


#: ``ctc_loss``'s reproducer: ``label`` is ``(targets, input_lengths, target_lengths)``; no hvp.
_CTC_SNIPPET = (
    "import tensorflow as tf\n\n"
    "tg, il, tl = label\n"
    "p = tf.constant(pred)\n"
    "with tf.GradientTape() as tape:\n"
    "    tape.watch(p)\n"
    "    out = tf.nn.ctc_loss(tf.constant(tg, tf.int32), p, tf.constant(tl, tf.int32), tf.constant(il, tf.int32), "
    "logits_time_major=True, blank_index={blank_index})\n"
    "    reduction = {reduction!r}\n"
    "    value = (tf.reduce_mean(out / tf.constant(np.maximum(tl, 1), p.dtype)) if reduction == 'mean' else "
    "tf.reduce_sum(out) if reduction == 'sum' else out)\n"
    "g = tape.gradient(value, p, output_gradients=None if upstream is None else tf.constant(upstream))\n"
    "derivative = g.numpy()\nhvp = None\n")


def _reproducer(op: str, kwargs: dict[str, Any]) -> str:
    if op == "ctc_loss":
        return _CTC_SNIPPET.format(**kwargs)
    if op in _KERAS_NAMES:
        if op == "keras_categorical_crossentropy":
            kwargs = {"from_logits": True, **kwargs}
        if op == "keras_sparse_categorical_crossentropy":
            kwargs = {"from_logits": True, **kwargs}
        args = ", ".join(["dtype=p.dtype.name", *(f"{k}={v!r}" for k, v in kwargs.items())])
        head, body = "import keras\nimport tensorflow as tf\n", f"keras.losses.{_KERAS_NAMES[op]}({args})(y, p)"
    else:
        reduce = {"mean": "tf.reduce_mean", "sum": "tf.reduce_sum", "none": ""}[kwargs.pop("reduction", "mean")]
        if op == "log_poisson_loss":
            call = f"targets=y, log_input=p, compute_full_loss={bool(kwargs.get('compute_full_loss'))!r}"
        else:
            call = "labels=y, logits=p" + "".join(f", {k}=tf.constant({list(v)!r}, p.dtype)" for k, v in kwargs.items())
        head, body = "import tensorflow as tf\n", f"{reduce}(tf.nn.{op}({call}))"
    return f"{head}\n\ndef loss(p, y):\n    return {body}\n\n\n" + _NESTED_TAPES


# ------------------------------------------------------------------ configurations

_TF_NN = ("sigmoid_cross_entropy_with_logits", "weighted_cross_entropy_with_logits",
          "softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits", "log_poisson_loss")
_FIRST = ("sigmoid_cross_entropy_with_logits", "weighted_cross_entropy_with_logits",
          "softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits", "keras_mean_squared_error",
          "keras_mean_absolute_error", "keras_huber", "keras_binary_crossentropy", "keras_categorical_crossentropy",
          "keras_sparse_categorical_crossentropy", "keras_kl_divergence")
#: issue 32's: drawn after the others, a stream of their own (the configurations above keep their numbers)
POISSON_OPS = ("log_poisson_loss", "keras_poisson")
OPS = (*_FIRST, *POISSON_OPS)
#: Poisson targets: counts and rates >= 0, on both sides of the Stirling mask's edge y = 1 (and at it).
_COUNTS = (0.0, 0.5, 1.0, 2.0, 3.5, 6.0)


def _draw(rng: np.random.Generator, op: str) -> LossConfig:
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    shape: tuple[int, ...] = (n, c)
    kwargs: dict[str, Any] = {}
    symjac_reduction = "mean"
    if op in _TF_NN:
        kwargs["reduction"] = symjac_reduction = str(rng.choice(_REDUCTIONS))
    elif op in ("keras_categorical_crossentropy", "keras_sparse_categorical_crossentropy"):
        keras_reduction = [None, "sum_over_batch_size", "sum"][int(rng.integers(0, 3))]
        kwargs["reduction"] = keras_reduction
        symjac_reduction = _KERAS_REDUCTIONS[keras_reduction]
    pred = dyadic(rng, -4, 4, shape)
    target: np.ndarray
    if op in ("sigmoid_cross_entropy_with_logits", "weighted_cross_entropy_with_logits"):
        target = rng.choice([0.0, 1.0, 0.25, 0.5], shape)
        if op == "weighted_cross_entropy_with_logits":
            kwargs["pos_weight"] = tuple(float(w) for w in dyadic(rng, 0.25, 4, (c,), 2))
    elif op in ("softmax_cross_entropy_with_logits", "keras_categorical_crossentropy"):
        target = probabilities(rng, shape)
        if op == "keras_categorical_crossentropy":
            kwargs["label_smoothing"] = float(rng.choice([0.0, 0.125, 0.25]))
        shape = (n,)
    elif op in ("sparse_softmax_cross_entropy_with_logits", "keras_sparse_categorical_crossentropy"):
        target, shape = rng.integers(0, c, n), (n,)
    elif op == "keras_binary_crossentropy":
        kwargs["from_logits"] = logits = bool(rng.random() < 0.5)
        if not logits:
            pred = dyadic(rng, 1 / 32, 31 / 32, shape, 8)
        target = rng.choice([0.0, 1.0, 0.25], shape)
    elif op in ("log_poisson_loss", "keras_poisson"):
        target = rng.choice(_COUNTS, shape)
        if op == "log_poisson_loss":
            kwargs["compute_full_loss"] = bool(rng.random() < 0.5)
            pred = dyadic(rng, -3, 2, shape)  # log-rates
        else:
            pred = dyadic(rng, 1 / 64, 4, shape)  # rates
    elif op == "keras_kl_divergence":  # positive rows: Keras clips a zero label to 1e-7
        pred, target = dyadic(rng, 1 / 16, 1, shape, 6), dyadic(rng, 1 / 16, 1, shape, 6)
    else:  # mse, mae, huber
        target = dyadic(rng, -3, 3, shape)
        if op == "keras_huber":
            kwargs["delta"] = delta = float(rng.choice([0.5, 1.0, 2.0]))
        else:
            delta = -1.0
        # off the kinks (d = 0 for mae and huber's Hessian, |d| = delta): 1/128 is off the 1/64 grid
        d = np.abs(pred - target)
        target[(d == 0) | (d == delta)] += 1 / 128
    words = [op] + [f"{k}={v}" for k, v in kwargs.items()]
    return LossConfig(op, kwargs, pred, target, upstream_for(rng, symjac_reduction, shape), " ".join(words))


def _drawer(op: str) -> Callable[[np.random.Generator], LossConfig]:
    return lambda rng: _draw(rng, op)


def loss_configurations(grid: str = "small") -> Iterator[LossConfig]:
    """``tf.nn`` losses (reductions, pos_weight, log Poisson with and without the Stirling term) and
    ``keras.losses`` (MSE, MAE, Huber's delta, binary cross-entropy from logits or probabilities,
    categorical with label smoothing and Keras's reductions, sparse categorical, KL divergence,
    Poisson); then ``tf.nn.ctc_loss`` (a third as many, seeded apart:
    :func:`~symjac.frameworks._loss_grid.ctc_case` without impossible alignments); seeded."""
    yield from generate_losses(grid, [_drawer(op) for op in _FIRST])
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in POISSON_OPS], seed=32),
                                grid_size(grid) // 3)
    yield from itertools.islice(generate_losses(grid, [_ctc_draw], seed=32), grid_size(grid) // 3)


def _ctc_draw(rng: np.random.Generator) -> LossConfig:
    """``tf.nn.ctc_loss`` at a seeded CTC case without an impossible alignment or zero_infinity."""
    return ctc_draw(rng, "ctc_loss", "blank_index", possible_only=True)
