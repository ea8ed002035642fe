"""JAX's losses (``optax``) as :class:`symjac.LossImpl` with their spec; :mod:`symjac.frameworks.jax`
re-exports these.

``impl.derivative`` is ``jax.grad`` (times the loss scale S; the VJP ``grad(<u, ℓ>)`` for
``reduction="none"``), ``impl.hvp`` is ``jax.jvp(jax.grad(L))`` along v: forward over reverse,
the Hessian-vector product :func:`symjac.verify_loss` checks against the exact Hessian.
optax's losses are per element (or per row); the reduction is applied here:

==================================================  =========================================
optax                                               symjac
==================================================  =========================================
``squared_error(p, y)``                             ``Loss("mse")``
``huber_loss(p, y, delta)``                         ``Loss("huber", delta=delta)``
``sigmoid_binary_cross_entropy(logits, labels)``    ``Loss("sigmoid_ce")``
``softmax_cross_entropy(logits, labels)``           ``Loss("softmax_ce")`` (probability rows)
``softmax_cross_entropy_with_integer_labels``       ``Loss("softmax_ce", labels="indices")``
``kl_divergence(log_predictions, targets)``         ``Loss("kld", log_input=True)``
``kl_divergence_with_log_targets``                  ``Loss("kld", log_input=True, log_target=True)``
``reduction="mean"/"sum"/"none"``                   ``jnp.mean`` / ``jnp.sum`` / per element
``reduction="batch_mean"/"sum"`` (the two KLs)      ``jnp.mean`` / ``jnp.sum`` of the row sums
==================================================  =========================================

optax's KL divergences sum each row (its last axis): their mean over rows is symjac's
``"batch_mean"``; a row sum is no per-element loss, so they take no ``"none"``.

Not covered (no symjac kind is the same function): ``hinge_loss`` (``max(0, 1 - y·z)``, labels ±1: a
binary hinge, where ``hinge_embedding`` is ``z`` at ``y = 1``), ``perceptron_loss``,
``multiclass_hinge_loss`` (``max_i(z_i + 1 - [i = y]) - z_y``: the largest hinge, where
``multi_margin`` sums them over the classes and divides by C; at C = 2 it is twice
``multi_margin``'s), ``multiclass_perceptron_loss``, ``poly_loss_cross_entropy``,
``sigmoid_focal_loss``, ``convex_kl_divergence``, ``generalized_kl_divergence``, the sparsemax,
Fenchel-Young, ranking, dice, cosine and ``ntxent`` losses; optax has no ``nll``, ``poisson_nll``,
``gaussian_nll``, ``soft_margin``, ``multilabel_soft_margin``, ``multi_margin`` or
``multilabel_margin``. (``triplet_margin_loss`` and ``ctc_loss`` are other adapters' work.)
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Unsupported, grid_size, require
from symjac.frameworks.jax._context import cpu as _cpu, precision
from symjac.frameworks._loss_grid import LossConfig, dyadic, generate_losses, probabilities, upstream_for
from symjac.loss._spec import Loss
from symjac.frameworks._adapter import LossImpl

_REDUCTIONS = ("mean", "sum", "none")


def loss_impl(fn: Callable[[Any, Any], Any], loss: Loss) -> LossImpl:
    """A JAX loss ``fn(pred, label) -> L`` (per element for ``"none"``) as a :class:`symjac.LossImpl`."""
    jax = require("jax")
    jnp = jax.numpy
    scale = float(loss.scale)

    def total(label: Any, upstream: Any) -> Callable[[Any], Any]:
        y = None if label is None else jnp.asarray(label)
        u = None if upstream is None else jnp.asarray(upstream)
        return lambda p: fn(p, y) if u is None else jnp.vdot(u, fn(p, y))

    def forward(pred: np.ndarray, label: Any) -> np.ndarray:
        with precision(pred.dtype), _cpu():
            return np.asarray(fn(jnp.asarray(pred), None if label is None else jnp.asarray(label)))

    def derivative(pred: np.ndarray, label: Any, upstream: Any = None) -> np.ndarray:
        with precision(pred.dtype), _cpu():
            return np.asarray(jax.grad(total(label, upstream))(jnp.asarray(pred)) * scale)

    def hvp(pred: np.ndarray, label: Any, v: np.ndarray, upstream: Any = None) -> np.ndarray:
        with precision(pred.dtype), _cpu():
            grad = jax.grad(total(label, upstream))
            return np.asarray(jax.jvp(grad, (jnp.asarray(pred),), (jnp.asarray(v),))[1] * scale)

    return LossImpl(loss=loss, derivative=derivative, forward=forward, hvp=hvp)


def _reduce(reduction: str) -> Callable[[Any], Any]:
    if reduction not in _REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    jnp = require("jax").numpy
    reduce: Callable[[Any], Any] = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda a: a}[reduction]
    return reduce


def _optax(name: str, kind: str, reduction: str, **options: Any) -> tuple[Loss, LossImpl]:
    optax = require("optax")
    op, reduce = getattr(optax, name), _reduce(reduction)
    delta = options.pop("delta", None)
    extra = {} if delta is None else {"delta": delta}
    spec = Loss(kind, reduction=reduction, **extra, **options)
    return spec, loss_impl(lambda p, y: reduce(op(p, y, **extra)), spec)


def squared_error(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``optax.squared_error`` reduced, and its spec ``Loss("mse")``."""
    return _optax("squared_error", "mse", reduction)


def huber_loss(reduction: str = "mean", delta: float = 1.0) -> tuple[Loss, LossImpl]:
    """``optax.huber_loss`` reduced, and its spec ``Loss("huber", delta=delta)``."""
    return _optax("huber_loss", "huber", reduction, delta=delta)


def sigmoid_binary_cross_entropy(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``optax.sigmoid_binary_cross_entropy`` reduced, and its spec ``Loss("sigmoid_ce")``."""
    return _optax("sigmoid_binary_cross_entropy", "sigmoid_ce", reduction)


def softmax_cross_entropy(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``optax.softmax_cross_entropy`` (probability rows) reduced over rows, and its spec."""
    return _optax("softmax_cross_entropy", "softmax_ce", reduction)


def softmax_cross_entropy_with_integer_labels(reduction: str = "mean") -> tuple[Loss, LossImpl]:
    """``optax.softmax_cross_entropy_with_integer_labels`` reduced over rows, and its spec."""
    return _optax("softmax_cross_entropy_with_integer_labels", "softmax_ce", reduction, labels="indices")


#: The KL divergences' reductions of their row sums.
_ROW_REDUCTIONS = ("batch_mean", "sum")


def _optax_kl(name: str, reduction: str, log_target: bool) -> tuple[Loss, LossImpl]:
    if reduction not in _ROW_REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: optax's {name} sums each row; give "
                          f"{' or '.join(map(repr, _ROW_REDUCTIONS))}")
    op, reduce = getattr(require("optax").losses, name), _reduce("mean" if reduction == "batch_mean" else "sum")
    spec = Loss("kld", reduction=reduction, log_input=True, log_target=log_target)
    return spec, loss_impl(lambda p, y: reduce(op(p, y)), spec)


def kl_divergence(reduction: str = "batch_mean") -> tuple[Loss, LossImpl]:
    """``optax.kl_divergence(log_predictions, targets)`` (row sums) reduced over rows, and its spec
    ``Loss("kld", log_input=True)``."""
    return _optax_kl("kl_divergence", reduction, False)


def kl_divergence_with_log_targets(reduction: str = "batch_mean") -> tuple[Loss, LossImpl]:
    """``optax.kl_divergence_with_log_targets`` (row sums) reduced over rows, and its spec
    ``Loss("kld", log_input=True, log_target=True)``."""
    return _optax_kl("kl_divergence_with_log_targets", reduction, True)


def make_loss(config: LossConfig) -> tuple[Loss, LossImpl]:
    """``(loss, impl)`` of one loss configuration (its ``reproducer`` snippet set)."""
    op: Callable[..., tuple[Loss, LossImpl]] = getattr(sys.modules[__name__], config.op)
    loss, impl = op(**config.kwargs)
    kwargs = dict(config.kwargs)
    reduce = {"mean": "jnp.mean", "batch_mean": "jnp.mean", "sum": "jnp.sum",
              "none": ""}[kwargs.pop("reduction", "mean")]
    call = ", ".join(["p", "y", *(f"{k}={v!r}" for k, v in kwargs.items())])
    snippet = ("import jax\nimport jax.numpy as jnp\nimport optax\n"
               "jax.config.update('jax_enable_x64', pred.dtype == 'float64')\n\n\n"
               f"def loss(p, y):\n    return {reduce}(optax.losses.{config.op}({call}))\n\n\n" + _GRAD_JVP)
    return loss, dataclasses.replace(impl, reproducer=snippet)


#: The reproducer's ``jax.grad`` and ``jax.jvp(jax.grad)`` of ``loss(p, y)``.
_GRAD_JVP = ("y = None if label is None else jnp.asarray(label)\n"
             "total = (lambda p: loss(p, y)) if upstream is None else "
             "(lambda p: jnp.vdot(jnp.asarray(upstream), loss(p, y)))\n"
             "derivative = np.asarray(jax.grad(total)(jnp.asarray(pred)))\n"
             "hvp = np.asarray(jax.jvp(jax.grad(total), (jnp.asarray(pred),), (jnp.asarray(v),))[1])\n")


_FIRST = ("squared_error", "huber_loss", "sigmoid_binary_cross_entropy", "softmax_cross_entropy",
          "softmax_cross_entropy_with_integer_labels")
#: drawn after the others, a stream of their own (the configurations above keep their numbers)
KL_OPS = ("kl_divergence", "kl_divergence_with_log_targets")
OPS = (*_FIRST, *KL_OPS)


def _draw(rng: np.random.Generator, op: str) -> LossConfig:
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    kl = op.startswith("kl_divergence")
    reduction = str(rng.choice(_ROW_REDUCTIONS if kl else _REDUCTIONS))
    kwargs: dict[str, Any] = {"reduction": reduction}
    shape: tuple[int, ...] = (n, c)
    pred = dyadic(rng, -4, 4, shape)
    target: np.ndarray
    if op in ("squared_error", "huber_loss"):
        target = dyadic(rng, -3, 3, shape)
        if op == "huber_loss":
            kwargs["delta"] = delta = float(rng.choice([0.5, 1.0, 2.0]))
            # off the kink |d| = delta, and off d = 0 (symjac's Hessian of huber refuses it: Abs in its template)
            d = np.abs(pred - target)
            target[(d == delta) | (d == 0)] += 1 / 128
    elif op == "sigmoid_binary_cross_entropy":
        target = rng.choice([0.0, 1.0, 0.25, 0.5], shape)
    elif kl:  # log-probabilities; targets as probability rows, or log-targets <= 0
        pred = dyadic(rng, -4, 0, shape)
        target = probabilities(rng, shape) if op == "kl_divergence" else dyadic(rng, -4, 0, shape)
    elif op == "softmax_cross_entropy":
        target, shape = probabilities(rng, shape), (n,)
    else:
        target, shape = rng.integers(0, c, n), (n,)
    words = [op] + [f"{k}={v}" for k, v in kwargs.items()]
    return LossConfig(op, kwargs, pred, target, upstream_for(rng, reduction, shape), " ".join(words))


def _drawer(op: str) -> Callable[[np.random.Generator], LossConfig]:
    return lambda rng: _draw(rng, op)


def loss_configurations(grid: str = "small") -> Iterator[LossConfig]:
    """optax's losses over reductions, huber's delta, both softmax target forms, both KL target forms; seeded."""
    yield from generate_losses(grid, [_drawer(op) for op in _FIRST])
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in KL_OPS], seed=32), grid_size(grid) // 6)
