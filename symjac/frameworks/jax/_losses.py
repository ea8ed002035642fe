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
``ctc_loss(logits, logit_paddings, labels,``         ``Loss("ctc", blank=blank_id,
``label_paddings, blank_id)``                        log_input=False)`` (no hvp): pred the
                                                    logits ``(T, N, C)``, time first
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
import functools
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Unsupported, grid_size, require
from symjac.frameworks.jax._context import cpu as _cpu, precision
from symjac.frameworks._loss_grid import LossConfig, ctc_draw, dyadic, generate_losses, probabilities, upstream_for
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


def ctc_loss(blank_id: int = 0, reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``optax.ctc_loss(logits, logit_paddings, labels, label_paddings, blank_id)`` and its spec
    ``Loss("ctc", blank=blank_id, log_input=False)``.

    The impl takes PyTorch's arguments, as ``verify_loss``'s sequence route calls it:
    ``derivative(logits, targets, input_lengths, target_lengths[, upstream])`` with ``logits``
    ``(T, N, C)`` (transposed to optax's ``(N, T, C)``), ``targets`` ``(N, S)`` and the lengths turned into
    optax's paddings (1.0 at ``t >= T_b`` and ``n >= L_b``); ``jax.grad`` of the reduction applied here
    (optax's loss is per sequence): ``"sum"``, ``"mean"`` (PyTorch's: each ``ℓ_b / max(L_b, 1)``, then
    averaged), ``"none"`` (the VJP ``grad(<u, ℓ>)``), ``jax.jit``-compiled (eagerly optax's ``lax.scan``
    takes seconds a call). No hvp (symjac has no second derivative of ctc).

    *Why the spec is the composition.* optax applies ``jax.nn.log_softmax`` to ``logits`` itself, so its
    loss is ``ℓ_b(log_softmax(z))`` and its gradient ``d/dz_{t,c} = p_{t,c}·Σ_k γ_b(t,k) - γ_b(t,c) =
    softmax(z)_{t,c} - γ_b(t,c)`` (``t < T_b``; ``Σ_k γ_b(t,k) = 1``; 0 at padded frames). Taking the
    logits as ``Loss("ctc", assume_log_softmax=True)``'s log-probabilities would expect ``ℓ_b(z)`` and
    ``e^z - γ_b``, equal only where ``Σ_c e^{z_{t,c}} = 1`` exactly: never at finite binary floats with
    C >= 2 (``e^a`` is transcendental for rational ``a != 0``, Lindemann), and the difference, ``Σ_t
    log Σ_c e^{z_{t,c}}`` in the loss and ``(1 - e^{-lse_t})·e^z`` in the gradient, is not bounded by the
    rounding model. So the spec states the composition: ``log_input=False`` makes symjac's exact
    evaluation take ``softmax(z)`` and ``log_softmax(z)`` in MPFR, the loss ``ℓ_b(log_softmax(z))``
    and the derivative ``r_b·(softmax(z) - γ_b)`` exactly, with the log_softmax's rounding charged in
    the bound (:mod:`symjac.loss._kinds.ctc`).

    optax approximates ``log 0`` by ``log_epsilon = -1e5`` (no ``-inf``): exact wherever every reachable
    state's ``log α`` stays above ``-1e5 + 745`` (``e^{-1e5}`` underflows, so a ``logaddexp`` with it
    returns its other operand unchanged), but an impossible alignment's loss is about ``1e5``, not
    ``+inf``, and there is no ``zero_infinity``: the conform grid draws no impossible alignment.
    """
    if reduction not in _REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    jax = require("jax")
    jnp = jax.numpy
    spec = Loss("ctc", reduction=reduction, blank=blank_id, log_input=False, scale=scale)
    factor = float(spec.scale)
    loss, grad = _ctc_functions(int(blank_id), reduction)

    def operands(z: np.ndarray, tg: Any, il: Any, tl: Any) -> tuple[Any, ...]:
        tg, il, tl = (np.asarray(a).astype(np.int64) for a in (tg, il, tl))
        pads = (np.arange(z.shape[0])[None, :] >= il[:, None]).astype(z.dtype)
        label_pads = (np.arange(tg.shape[1])[None, :] >= tl[:, None]).astype(z.dtype)
        return jnp.asarray(z), jnp.asarray(pads), jnp.asarray(tg), jnp.asarray(label_pads), jnp.asarray(tl)

    def forward(z: np.ndarray, tg: Any, il: Any, tl: Any) -> np.ndarray:
        with precision(z.dtype), _cpu():
            return np.asarray(loss(*operands(z, tg, il, tl)))

    def derivative(z: np.ndarray, tg: Any, il: Any, tl: Any, upstream: Any = None) -> np.ndarray:
        with precision(z.dtype), _cpu():
            args = operands(z, tg, il, tl)
            u = jnp.ones(z.shape[1], z.dtype) if upstream is None else jnp.asarray(upstream)
            return np.asarray(grad(*args, u) * factor)

    return spec, LossImpl(loss=spec, derivative=derivative, forward=forward)


@functools.lru_cache(maxsize=16)
def _ctc_functions(blank_id: int, reduction: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """optax's CTC reduced as ``reduction`` and its ``jax.grad`` (the VJP ``grad(<u, ℓ>)`` for ``"none"``;
    u is ignored by a reduced loss), both ``jax.jit``-compiled: optax's recursion is a ``lax.scan`` that
    eagerly takes seconds a call (measured 4.5 s at T = 6, N = 4)."""
    jax, optax = require("jax"), require("optax")
    jnp = jax.numpy

    def loss(z: Any, pads: Any, tg: Any, label_pads: Any, tl: Any) -> Any:
        out = optax.ctc_loss(jnp.transpose(z, (1, 0, 2)), pads, tg, label_pads, blank_id=blank_id)
        if reduction == "mean":  # PyTorch's: each loss over its target length (at least 1), then averaged
            return jnp.mean(out / jnp.maximum(tl, 1).astype(z.dtype))
        return jnp.sum(out) if reduction == "sum" else out

    def grad(z: Any, pads: Any, tg: Any, label_pads: Any, tl: Any, u: Any) -> Any:
        total = (lambda p: jnp.vdot(u, loss(p, pads, tg, label_pads, tl))) if reduction == "none" else \
            (lambda p: loss(p, pads, tg, label_pads, tl))
        return jax.grad(total)(z)

    return jax.jit(loss), jax.jit(grad)


def make_loss(config: LossConfig) -> tuple[Loss, LossImpl]:
    """``(loss, impl)`` of one loss configuration (its ``reproducer`` snippet set)."""
    op: Callable[..., tuple[Loss, LossImpl]] = getattr(sys.modules[__name__], config.op)
    loss, impl = op(**config.kwargs)
    if config.op == "ctc_loss":  # its own call (paddings, time-major logits): the reproducer is the impl's
        return loss, dataclasses.replace(impl, reproducer=_CTC_SNIPPET.format(**config.kwargs))
    kwargs = dict(config.kwargs)
    reduce = {"mean": "jnp.mean", "batch_mean": "jnp.mean", "sum": "jnp.sum",
              "none": ""}[kwargs.pop("reduction", "mean")]
    call = ", ".join(["p", "y", *(f"{k}={v!r}" for k, v in kwargs.items())])
    snippet = ("import jax\nimport jax.numpy as jnp\nimport optax\n"
               "jax.config.update('jax_enable_x64', pred.dtype == 'float64')\n\n\n"
               f"def loss(p, y):\n    return {reduce}(optax.losses.{config.op}({call}))\n\n\n" + _GRAD_JVP)
    return loss, dataclasses.replace(impl, reproducer=snippet)


#: ``ctc_loss``'s reproducer: ``label`` is ``(targets, input_lengths, target_lengths)``; no hvp.
_CTC_SNIPPET = (
    "import jax\nimport jax.numpy as jnp\nimport optax\n"
    "jax.config.update('jax_enable_x64', pred.dtype == 'float64')\n"
    "tg, il, tl = label\n"
    "pads = (np.arange(pred.shape[0])[None, :] >= il[:, None]).astype(pred.dtype)\n"
    "label_pads = (np.arange(tg.shape[1])[None, :] >= tl[:, None]).astype(pred.dtype)\n\n\n"
    "def loss(z):\n"
    "    out = optax.ctc_loss(jnp.transpose(z, (1, 0, 2)), pads, tg, label_pads, blank_id={blank_id})\n"
    "    reduction = {reduction!r}\n"
    "    if reduction == 'mean':\n"
    "        return jnp.mean(out / np.maximum(tl, 1).astype(pred.dtype))\n"
    "    return jnp.sum(out) if reduction == 'sum' else out\n\n\n"
    "total = loss if upstream is None else (lambda p: jnp.vdot(jnp.asarray(upstream), loss(p)))\n"
    "derivative = np.asarray(jax.grad(total)(jnp.asarray(pred)))\n"
    "hvp = None\n")


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
    """optax's losses over reductions, huber's delta, both softmax target forms, both KL target forms; then ctc_loss (a third
    as many, seeded apart: :func:`~symjac.frameworks._loss_grid.ctc_case` without impossible alignments); seeded."""
    yield from generate_losses(grid, [_drawer(op) for op in _FIRST])
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in KL_OPS], seed=32), grid_size(grid) // 6)
    yield from itertools.islice(generate_losses(grid, [_ctc_draw], seed=32), grid_size(grid) // 3)


def _ctc_draw(rng: np.random.Generator) -> LossConfig | None:
    """``ctc_loss`` at a seeded CTC case without an impossible alignment or zero_infinity (optax has neither)."""
    return ctc_draw(rng, "ctc_loss", "blank_id", possible_only=True)
