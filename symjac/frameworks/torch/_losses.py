"""PyTorch's losses (``torch.nn.functional``) as :class:`symjac.LossImpl` with their spec.

:mod:`symjac.frameworks.torch` re-exports these. Each ready-made loss maps PyTorch's
documented arguments onto a :class:`symjac.Loss` and returns ``(loss, impl)``: ``impl.forward``
is PyTorch's value, ``impl.derivative`` its autograd gradient (times the loss scale S), and
``impl.hvp`` its double backward: ``autograd.grad(create_graph=True)`` differentiated again
along v, the Hessian-vector product ``S·∂²L/∂pred²·v`` :func:`symjac.verify_loss` checks.

==============================================  ===========================================
PyTorch                                         symjac
==============================================  ===========================================
``reduction="mean"/"sum"/"none"``               the same reduction
``kl_div(reduction="batchmean")``               ``reduction="batch_mean"``
``mse_loss`` / ``l1_loss``                      ``Loss("mse")`` / ``Loss("mae")``
``smooth_l1_loss(beta)`` / ``huber_loss``       ``Loss("smooth_l1", delta=beta)`` / ``huber``
``binary_cross_entropy(weight)``                ``Loss("bce", weight)`` (per class, last axis)
``binary_cross_entropy_with_logits``            ``Loss("sigmoid_ce", weight, pos_weight)``
``cross_entropy`` (class-index target)          ``Loss("softmax_ce", labels="indices",
                                                weight, label_smoothing, ignore_index)``
``cross_entropy`` (probability target)          ``labels="probabilities"``
``kl_div(input=log Q, log_target)``             ``Loss("kld", log_input=True, log_target)``
``nll_loss(weight, ignore_index)``              ``Loss("nll", weight, ignore_index)``
``poisson_nll_loss(log_input, full, eps)``      ``Loss("poisson_nll", log_input, full, eps)``
``gaussian_nll_loss(input, target, var,``       ``Loss("gaussian_nll", full, eps)``: pred
``full, eps)``                                  ``[..., 0]`` the input, ``[..., 1]`` var
``hinge_embedding_loss(margin)``                ``Loss("hinge_embedding", margin)``
``soft_margin_loss``                            ``Loss("soft_margin")``
``multilabel_soft_margin_loss(weight)``         ``Loss("multilabel_soft_margin", weight)``
``multi_margin_loss(p, margin, weight)``        ``Loss("multi_margin", p, margin, weight)`` (no hvp)
``multilabel_margin_loss``                      ``Loss("multilabel_margin")`` (no hvp)
``margin_ranking_loss(x1, x2, y, margin)``      ``Loss("margin_ranking", margin)``: pred ``[..., 0]``
                                                x1, ``[..., 1]`` x2; label ``(y, 0)`` pairs
``cosine_embedding_loss(x1, x2, y, margin)``    ``Loss("cosine_embedding", margin)``: pred rows
                                                ``[x1 | x2]`` (2·D); label rows ``(y, 0, ...)``
``triplet_margin_loss(anchor, positive,``       ``Loss("triplet_margin", margin, p, eps,``
``negative, margin, p, eps, swap)``             ``swap)``: pred's rows ``[a | q | n]``, 3·D
``ctc_loss(blank, zero_infinity)``              ``Loss("ctc", blank, zero_infinity,``
(log_probs ``(T, N, C)``, targets, lengths)     ``assume_log_softmax=True)`` (no hvp): its
                                                backward is the gradient through the
                                                ``log_softmax`` it documents ``log_probs``
                                                came from
==============================================  ===========================================
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import KnownDefect, grid_size, require
from symjac.frameworks.torch._arrays import to_numpy, to_torch
from symjac.frameworks._loss_grid import LossConfig, dyadic, generate_losses, probabilities, upstream_for
from symjac.frameworks.torch._margins import MARGIN_OPS, PAIR_OPS, draw_margin, draw_pair
from symjac.loss._spec import Loss
from symjac.frameworks._adapter import LossImpl
from symjac.frameworks.torch._ctc import ctc_draw as _ctc_draw, ctc_loss as ctc_loss, ctc_reproducer

_REDUCTIONS = {"mean": "mean", "sum": "sum", "none": "none", "batchmean": "batch_mean"}


def _torch() -> Any:
    return require("torch")


_tensor, _numpy = to_torch, to_numpy  # (bfloat16 through ml_dtypes)


def _label(label: Any, dtype: Any) -> Any:
    if label is None:
        return None
    t = _tensor(np.asarray(label))
    return t.long() if not t.is_floating_point() else t.to(dtype)


def _per_class(values: Sequence[float] | None, dtype: Any) -> Any:
    torch = _torch()
    return None if values is None else torch.tensor(list(values), dtype=dtype)


def loss_impl(fn: Callable[[Any, Any], Any], loss: Loss) -> LossImpl:
    """A torch loss ``fn(pred, label) -> L`` (per element for ``reduction="none"``) as a
    :class:`symjac.LossImpl` for ``loss``: ``derivative`` is ``S·∂L/∂pred`` through
    ``torch.autograd.grad`` (the VJP with an upstream for ``"none"``), ``hvp`` its double
    backward along v (``create_graph=True``, then ``grad`` again), S the spec's loss scale."""
    torch = _torch()
    scale = float(loss.scale)

    def run(p: Any, label: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # kl_div's reduction='mean' warning
            return fn(p, _label(label, p.dtype))

    def forward(pred: np.ndarray, label: Any) -> np.ndarray:
        with torch.no_grad():
            return _numpy(run(_tensor(pred), label))

    def gradient(p: Any, label: Any, upstream: Any, create_graph: bool) -> Any:
        value = run(p, label)
        u = torch.ones_like(value) if upstream is None else _tensor(upstream)
        (g,) = torch.autograd.grad(value, p, u, create_graph=create_graph)
        return g

    def derivative(pred: np.ndarray, label: Any, upstream: Any = None) -> np.ndarray:
        p = _tensor(pred).requires_grad_(True)
        with torch.enable_grad():
            g = gradient(p, label, upstream, False)
        return _numpy(g * scale)

    def hvp(pred: np.ndarray, label: Any, v: np.ndarray, upstream: Any = None) -> np.ndarray:
        p = _tensor(pred).requires_grad_(True)
        with torch.enable_grad():
            g = gradient(p, label, upstream, True)
            # a gradient that does not depend on pred (kl_div's -P in log Q) has no graph: H = 0
            h = torch.autograd.grad(g, p, _tensor(v), allow_unused=True)[0] if g.requires_grad else None
        out = torch.zeros_like(p) if h is None else torch.zeros_like(p) + h * scale  # + : a ZeroTensor made dense
        return _numpy(out)

    return LossImpl(loss=loss, derivative=derivative, forward=forward, hvp=hvp)


def _reduction(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        from symjac.frameworks._adapter import Unsupported

        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    return _REDUCTIONS[reduction]


def _spec(kind: str, reduction: str, **fields: Any) -> Loss:
    """The spec, with the options PyTorch left at their defaults (None) unset."""
    options: dict[str, Any] = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in fields.items()
                               if v is not None}
    return Loss(kind, reduction=_reduction(reduction), **options)


def _F() -> Any:  # noqa: N802 - PyTorch's own name for the module
    return _torch().nn.functional


def mse_loss(reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.mse_loss`` and its spec ``Loss("mse")``."""
    spec = _spec("mse", reduction, scale=scale)
    return spec, loss_impl(lambda p, y: _F().mse_loss(p, y, reduction=reduction), spec)


def l1_loss(reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.l1_loss`` and its spec ``Loss("mae")``."""
    spec = _spec("mae", reduction, scale=scale)
    return spec, loss_impl(lambda p, y: _F().l1_loss(p, y, reduction=reduction), spec)


def smooth_l1_loss(reduction: str = "mean", beta: float = 1.0, *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.smooth_l1_loss`` (it divides by beta) and its spec ``Loss("smooth_l1", delta=beta)``."""
    spec = _spec("smooth_l1", reduction, delta=beta, scale=scale)
    return spec, loss_impl(lambda p, y: _F().smooth_l1_loss(p, y, reduction=reduction, beta=beta), spec)


def huber_loss(reduction: str = "mean", delta: float = 1.0, *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.huber_loss`` and its spec ``Loss("huber", delta=delta)``."""
    spec = _spec("huber", reduction, delta=delta, scale=scale)
    return spec, loss_impl(lambda p, y: _F().huber_loss(p, y, reduction=reduction, delta=delta), spec)


def binary_cross_entropy(weight: Sequence[float] | None = None, reduction: str = "mean", *,
                         scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.binary_cross_entropy`` (probabilities; ``weight`` per class along the last axis)."""
    spec = _spec("bce", reduction, weight=weight, scale=scale)
    return spec, loss_impl(lambda p, y: _F().binary_cross_entropy(p, y, weight=_per_class(weight, p.dtype),
                                                                   reduction=reduction), spec)


def binary_cross_entropy_with_logits(weight: Sequence[float] | None = None, reduction: str = "mean",
                                     pos_weight: Sequence[float] | None = None, *,
                                     scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.binary_cross_entropy_with_logits`` and its spec ``Loss("sigmoid_ce", weight, pos_weight)``."""
    spec = _spec("sigmoid_ce", reduction, weight=weight, pos_weight=pos_weight, scale=scale)
    return spec, loss_impl(lambda p, y: _F().binary_cross_entropy_with_logits(
        p, y, weight=_per_class(weight, p.dtype), pos_weight=_per_class(pos_weight, p.dtype),
        reduction=reduction), spec)


def cross_entropy(weight: Sequence[float] | None = None, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, *, target: str = "indices", scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.cross_entropy`` (logits over the last axis of a (N, C) input) and its spec.

    ``target`` (symjac's, not a PyTorch argument) says which target form is passed:
    ``"indices"`` (class indices; ``ignore_index`` applies) or ``"probabilities"``.
    """
    indices = target == "indices"
    spec = _spec("softmax_ce", reduction, weight=weight, label_smoothing=label_smoothing or None,
                 labels="indices" if indices else "probabilities", ignore_index=ignore_index if indices else None,
                 scale=scale)
    return spec, loss_impl(lambda p, y: _F().cross_entropy(
        p, y, weight=_per_class(weight, p.dtype), ignore_index=ignore_index, reduction=reduction,
        label_smoothing=label_smoothing), spec)


def kl_div(reduction: str = "mean", log_target: bool = False, *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.kl_div(input, target)`` with ``input = log Q`` and its spec ``Loss("kld", log_input=True)``."""
    spec = _spec("kld", reduction, log_input=True, log_target=log_target, scale=scale)
    return spec, loss_impl(lambda p, y: _F().kl_div(p, y, reduction=reduction, log_target=log_target), spec)


def nll_loss(weight: Sequence[float] | None = None, ignore_index: int = -100, reduction: str = "mean", *,
             scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.nll_loss`` (log-probabilities over the last axis of a (N, C) input, class indices) and its spec."""
    spec = _spec("nll", reduction, weight=weight, ignore_index=ignore_index, scale=scale)
    return spec, loss_impl(lambda p, y: _F().nll_loss(p, y, weight=_per_class(weight, p.dtype),
                                                      ignore_index=ignore_index, reduction=reduction), spec)


def poisson_nll_loss(log_input: bool = True, full: bool = False, eps: float = 1e-8, reduction: str = "mean", *,
                     scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.poisson_nll_loss`` and its spec ``Loss("poisson_nll", log_input, full, eps)``."""
    spec = _spec("poisson_nll", reduction, log_input=log_input, full=full, eps=eps, scale=scale)
    return spec, loss_impl(lambda p, y: _F().poisson_nll_loss(p, y, log_input=log_input, full=full, eps=eps,
                                                              reduction=reduction), spec)


def gaussian_nll_loss(full: bool = False, eps: float = 1e-6, reduction: str = "mean", *,
                      scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.gaussian_nll_loss(input, target, var)`` with pred's last axis the pair (input, var) and the
    label's (target, 0), and its spec ``Loss("gaussian_nll", full, eps)``: the derivative with respect
    to var is pred's second entry's."""
    spec = _spec("gaussian_nll", reduction, full=full, eps=eps, scale=scale)
    return spec, loss_impl(lambda p, y: _F().gaussian_nll_loss(p[..., 0], y[..., 0], p[..., 1], full=full, eps=eps,
                                                               reduction=reduction), spec)
def hinge_embedding_loss(margin: float = 1.0, reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.hinge_embedding_loss`` (labels ±1) and its spec ``Loss("hinge_embedding", margin=margin)``."""
    spec = _spec("hinge_embedding", reduction, margin=margin, scale=scale)
    return spec, loss_impl(lambda p, y: _F().hinge_embedding_loss(p, y, margin=margin, reduction=reduction), spec)


def soft_margin_loss(reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.soft_margin_loss`` (labels ±1) and its spec ``Loss("soft_margin")``. PyTorch evaluates
    log(1 + exp(-y·x)) as written: inf where -y·x is beyond the dtype's log of its largest value."""
    spec = _spec("soft_margin", reduction, scale=scale)
    return spec, loss_impl(lambda p, y: _F().soft_margin_loss(p, y, reduction=reduction), spec)


def multilabel_soft_margin_loss(weight: Sequence[float] | None = None, reduction: str = "mean", *,
                                scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.multilabel_soft_margin_loss`` ((N, C) logits, labels in [0, 1]) and its spec ``Loss("multilabel_soft_margin")``."""
    spec = _spec("multilabel_soft_margin", reduction, weight=weight, scale=scale)
    return spec, loss_impl(lambda p, y: _F().multilabel_soft_margin_loss(
        p, y, weight=_per_class(weight, p.dtype), reduction=reduction), spec)


def multi_margin_loss(p: int = 1, margin: float = 1.0, weight: Sequence[float] | None = None,
                      reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.multi_margin_loss`` ((N, C) logits, one class index per row) and its spec ``Loss("multi_margin")``.
    No hvp: PyTorch has no double backward of it ("derivative for aten::multi_margin_loss_backward is
    not implemented")."""
    spec = _spec("multi_margin", reduction, p=p, margin=margin, weight=weight, scale=scale)
    impl = loss_impl(lambda z, y: _F().multi_margin_loss(z, y, p=p, margin=margin, weight=_per_class(weight, z.dtype),
                                                         reduction=reduction), spec)
    return spec, dataclasses.replace(impl, hvp=None)


def multilabel_margin_loss(reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.multilabel_margin_loss`` ((N, C) logits, rows of class indices ended by -1) and its spec
    ``Loss("multilabel_margin")``. No hvp: PyTorch has no double backward of it."""
    spec = _spec("multilabel_margin", reduction, scale=scale)
    impl = loss_impl(lambda z, y: _F().multilabel_margin_loss(z, y, reduction=reduction), spec)
    return spec, dataclasses.replace(impl, hvp=None)


def margin_ranking_loss(margin: float = 0.0, reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.margin_ranking_loss(x1, x2, y)`` with pred's last axis the pair (x1, x2) and the label's (y, 0),
    and its spec ``Loss("margin_ranking", margin)``: the derivative with respect to x2 is pred's second
    entry's. Its hvp is 0 (PyTorch's gradient of the hinge has no graph: piecewise constant)."""
    spec = _spec("margin_ranking", reduction, margin=margin, scale=scale)
    return spec, loss_impl(lambda p, y: _F().margin_ranking_loss(p[..., 0], p[..., 1], y[..., 0], margin=margin,
                                                                 reduction=reduction), spec)


def cosine_embedding_loss(margin: float = 0.0, reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.cosine_embedding_loss(x1, x2, y)`` ((N, D) each) with pred's rows ``[x1 | x2]`` (N, 2·D) and the
    label's rows ``(y, 0, ..., 0)``, and its spec ``Loss("cosine_embedding", margin)``: the derivative with
    respect to x2 is pred's second half's. PyTorch squares the entries as written: NaN where a squared
    norm overflows (the ``extreme`` family's inputs)."""
    spec = _spec("cosine_embedding", reduction, margin=margin, scale=scale)

    def fn(p: Any, y: Any) -> Any:
        d = p.shape[-1] // 2
        return _F().cosine_embedding_loss(p[..., :d], p[..., d:], y[..., 0], margin=margin, reduction=reduction)

    return spec, loss_impl(fn, spec)


def triplet_margin_loss(margin: float = 1.0, p: int = 2, eps: float = 1e-6, swap: bool = False,
                        reduction: str = "mean", *, scale: Any = 1) -> tuple[Loss, LossImpl]:
    """``F.triplet_margin_loss(anchor, positive, negative)`` with pred's rows ``[anchor | positive | negative]``
    (3·D entries each; no label), and its spec ``Loss("triplet_margin", margin, p, eps, swap)``: the
    derivative with respect to all three is pred's. PyTorch's norm forms Σ(x - y + ε)² (p = 2), which
    overflows at the ``extreme`` family's magnitudes while the distance is finite."""
    spec = _spec("triplet_margin", reduction, margin=margin, p=p, eps=eps, swap=swap, scale=scale)

    def loss(z: Any, _: Any) -> Any:
        d = z.shape[-1] // 3
        return _F().triplet_margin_loss(z[..., :d], z[..., d:2 * d], z[..., 2 * d:], margin=margin, p=p, eps=eps,
                                        swap=swap, reduction=reduction)
    return spec, loss_impl(loss, spec)


def known_loss_defect(config: LossConfig, dtype: Any, transform: str) -> KnownDefect | None:
    """A known PyTorch defect a loss configuration runs into in ``dtype`` under ``transform``
    (``"derivative"`` or ``"hvp"``), or None."""
    if config.op == "binary_cross_entropy" and transform == "hvp" and np.dtype(dtype) == np.float64:
        return KnownDefect("PyTorch's binary_cross_entropy double backward adds eps = 1e-12 to z and to 1 - z "
                           "((z^2 - 2zy + y) / ((z + eps)^2 (1 - z + eps)^2)): relative error about 1e-11 in "
                           "float64", ("wrong_second_derivative",))
    return None


def make_loss(config: LossConfig) -> tuple[Loss, LossImpl]:
    """``(loss, impl)`` of one loss configuration (its ``reproducer`` snippet set)."""
    op: Callable[..., tuple[Loss, LossImpl]] = getattr(sys.modules[__name__], config.op)
    loss, impl = op(**config.kwargs)
    return loss, dataclasses.replace(impl, reproducer=_reproducer(config.op, config.kwargs))


#: The reproducer's double backward of ``loss(p, y)`` (``pred``, ``label``, ``upstream``, ``v`` defined before it).
_DOUBLE_BACKWARD = (
    "p = torch.tensor(pred, requires_grad=True)\n"
    "y = None if label is None else torch.tensor(label, dtype=p.dtype) if label.dtype.kind == 'f' "
    "else torch.tensor(label).long()\n"
    "value = loss(p, y)\n"
    "u = torch.ones_like(value) if upstream is None else torch.tensor(upstream)\n"
    "(g,) = torch.autograd.grad(value, p, u, create_graph=True)\n"
    "derivative = g.detach().numpy()\n"
    "hvp = torch.autograd.grad(g, p, torch.tensor(v))[0].numpy() if g.requires_grad else 0 * pred\n")


#: The operands of an op whose pred is not PyTorch's one input (gaussian_nll_loss: the (input, var) pairs).
_OPERANDS = {"gaussian_nll_loss": "p[..., 0], y[..., 0], p[..., 1]",
             "margin_ranking_loss": "p[..., 0], p[..., 1], y[..., 0]",
             "cosine_embedding_loss": "p[..., :p.shape[-1] // 2], p[..., p.shape[-1] // 2:], y[..., 0]",
             "triplet_margin_loss": "*p.reshape(*p.shape[:-1], 3, -1).unbind(-2)"}  # [a | q | n] rows


def _reproducer(op: str, kwargs: Any) -> str:
    if op == "ctc_loss":
        return ctc_reproducer(kwargs)
    args = []
    for key, value in kwargs.items():
        if key == "target":  # symjac's: which target form the label is
            continue
        if key in ("weight", "pos_weight") and value is not None:
            args.append(f"{key}=torch.tensor({list(value)!r}, dtype=p.dtype)")
        else:
            args.append(f"{key}={value!r}")
    call = ", ".join([_OPERANDS.get(op, "p, y"), *args])
    return f"import torch\n\n\ndef loss(p, y):\n    return torch.nn.functional.{op}({call})\n\n\n" + _DOUBLE_BACKWARD


# ------------------------------------------------------------------ configurations


def _draw(rng: np.random.Generator, op: str) -> LossConfig:
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    reductions = ["mean", "sum", "none"] + (["batchmean"] if op == "kl_div" else [])
    reduction = str(rng.choice(reductions))
    kwargs: dict[str, Any] = {"reduction": reduction}
    shape: tuple[int, ...] = (n, c)

    def weights(lo: float, hi: float) -> tuple[float, ...] | None:
        return tuple(float(w) for w in dyadic(rng, lo, hi, (c,), 2)) if rng.random() < 0.4 else None

    target: np.ndarray | None
    if op in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
        pred, target = dyadic(rng, -3, 3, shape), dyadic(rng, -3, 3, shape)
        delta = float(rng.choice([0.5, 1.0, 2.0]))
        if op == "smooth_l1_loss":
            kwargs["beta"] = delta
        if op == "huber_loss":
            kwargs["delta"] = delta
        # off the kinks (d = 0 for l1, |d| = delta for smooth_l1 / huber), where the second
        # derivative does not exist: 1/128 is off the 1/64 grid the values are on
        d = np.abs(pred - target)
        target[(d == 0) | (d == delta)] += 1 / 128
    elif op == "binary_cross_entropy":
        pred, target = dyadic(rng, 1 / 32, 31 / 32, shape, 8), rng.choice([0.0, 1.0, 0.25], shape)
        kwargs["weight"] = weights(0.25, 2)
    elif op == "binary_cross_entropy_with_logits":
        pred, target = dyadic(rng, -6, 6, shape), rng.choice([0.0, 1.0, 0.25, 0.5], shape)
        kwargs.update(weight=weights(0.25, 2), pos_weight=weights(0.25, 4))
    elif op == "cross_entropy":
        pred = dyadic(rng, -5, 5, shape)
        kwargs.update(weight=weights(0.25, 3), label_smoothing=float(rng.choice([0.0, 0.0, 0.125, 0.25])))
        if rng.random() < 0.6:
            kwargs["target"] = "indices"
            target = rng.integers(0, c, n)
            if n > 1 and rng.random() < 0.4:
                target[int(rng.integers(0, n))] = -100  # an ignored row
        else:
            kwargs["target"] = "probabilities"
            target = probabilities(rng, shape)
        shape = (n,)
    elif op in _LIKELIHOOD:
        pred, target, shape = _LIKELIHOOD[op](rng, kwargs, shape, weights)
    elif op in MARGIN_OPS:
        pred, target, shape = draw_margin(rng, op, kwargs, n, c, weights)
    elif op in PAIR_OPS:
        pred, target, shape = draw_pair(rng, op, kwargs, n, c)
    else:  # kl_div: log Q input
        log_target = bool(rng.random() < 0.4)
        kwargs["log_target"] = log_target
        pred = dyadic(rng, -3, 0, shape)
        target = dyadic(rng, -3, 0, shape) if log_target else rng.choice([0.0, 0.125, 0.25, 0.5, 0.75], shape)
    words = [op] + [f"{k}={v}" for k, v in kwargs.items() if v is not None]
    return LossConfig(op, kwargs, pred, target, upstream_for(rng, reduction, shape), " ".join(words))


def _nll_draw(rng: np.random.Generator, kwargs: dict[str, Any], shape: tuple[int, ...],
              weights: Callable[[float, float], tuple[float, ...] | None]) -> tuple[np.ndarray, np.ndarray,
                                                                                    tuple[int, ...]]:
    # log-probabilities (any real numbers to nll_loss), a class per row, at times an ignored row
    n, c = shape
    kwargs["weight"] = weights(0.25, 3)
    target = rng.integers(0, c, n)
    if n > 1 and rng.random() < 0.4:
        target[int(rng.integers(0, n))] = -100
    return dyadic(rng, -5, 0, shape), target, (n,)


def _poisson_draw(rng: np.random.Generator, kwargs: dict[str, Any], shape: tuple[int, ...],
                  weights: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    # log-rates, or rates >= 1/64 (log(z + eps) defined); counts on both sides of the Stirling mask y > 1
    log_input = bool(rng.random() < 0.6)
    kwargs.update(log_input=log_input, full=bool(rng.random() < 0.5))
    pred = dyadic(rng, -3, 2, shape) if log_input else dyadic(rng, 1 / 64, 4, shape)
    return pred, rng.choice([0.0, 0.5, 1.0, 2.0, 3.5, 6.0], shape), shape


def _gaussian_draw(rng: np.random.Generator, kwargs: dict[str, Any], shape: tuple[int, ...],
                   weights: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    # (input, var) pairs along a last axis, var from 1/8 (above eps: the clamp does not bind); label (target, 0)
    kwargs["full"] = bool(rng.random() < 0.5)
    mean, var, target = dyadic(rng, -3, 3, shape), dyadic(rng, 1 / 8, 4, shape), dyadic(rng, -3, 3, shape)
    return np.stack([mean, var], axis=-1), np.stack([target, np.zeros(shape)], axis=-1), shape


_LIKELIHOOD = {"nll_loss": _nll_draw, "poisson_nll_loss": _poisson_draw, "gaussian_nll_loss": _gaussian_draw}

OPS = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
       "binary_cross_entropy_with_logits", "cross_entropy", "cross_entropy", "kl_div")
#: The likelihood losses: a stream of their own after OPS' (a third of the grid's size, seeded apart), so
#: the configurations above keep their indices and draws.
LIKELIHOOD_OPS = tuple(_LIKELIHOOD)


def loss_configurations(grid: str = "small") -> Iterator[LossConfig]:
    """``torch.nn.functional`` losses over reductions, weights, pos_weight, label smoothing,
    ignore_index, both cross-entropy target forms, kl_div's log_target; then nll_loss, and
    poisson_nll_loss's and gaussian_nll_loss's log_input and full; then the margin family
    (issue 32: hinge_embedding, soft_margin, multilabel_soft_margin, multi_margin, multilabel_margin,
    triplet_margin, some inputs on a hinge's kink); then the pairwise ones (margin_ranking, cosine_embedding);
    then ctc_loss (blank positions, reductions, zero_infinity, repeated labels, impossible alignments, varied
    lengths: :func:`~symjac.frameworks._loss_grid.ctc_case`); seeded."""
    yield from generate_losses(grid, [_drawer(op) for op in OPS])
    # each family after them (a third as many, seeded apart): the configurations above keep their numbers
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in LIKELIHOOD_OPS], seed=32),
                                grid_size(grid) // 3)
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in MARGIN_OPS], seed=32),
                                grid_size(grid) // 3)
    yield from itertools.islice(generate_losses(grid, [_drawer(op) for op in PAIR_OPS], seed=33),
                                grid_size(grid) // 6)
    yield from itertools.islice(generate_losses(grid, [_ctc_draw], seed=32), grid_size(grid) // 3)


def _drawer(op: str) -> Callable[[np.random.Generator], LossConfig]:
    return lambda rng: _draw(rng, op)
