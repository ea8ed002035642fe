"""ONNX Runtime's losses as forward-only :class:`symjac.LossImpl` with their spec;
:mod:`symjac.frameworks.onnxruntime` re-exports these.

ONNX Runtime has no autodiff: ``impl.derivative`` and ``impl.hvp`` are None, and
:func:`symjac.verify_loss` checks the forward's values against the exact loss within the
forward's derived bound and reports the derivative not checked
(:mod:`symjac.verifiers.loss._forward_only`). Each op runs as a one-node model built with
``onnx.helper`` (the pools' opset and IR version), on the CPU provider:

======================================================  ==========================================
ONNX (opset 22)                                         symjac
======================================================  ==========================================
``NegativeLogLikelihoodLoss(input, target, weight)``    ``Loss("nll", weight, ignore_index)``
``SoftmaxCrossEntropyLoss(scores, labels, weights)``    ``Loss("softmax_ce", labels="indices",
                                                        weight, ignore_index)``
``reduction="mean"/"sum"/"none"``                       the same (``"mean"``: the weighted mean,
                                                        ``Σ ℓ / Σ w[label]`` over the rows not at
                                                        ``ignore_index``, in ONNX as in symjac)
class axis 1: ``(N, C, d1, ..)``                        class axis last: symjac's pred ``(N, d1, ..,
                                                        C)`` is moved to ONNX's layout in the call
======================================================  ==========================================

The weight is an input of the model, fed in the dtype of the call: give weights exact in it (the
grid's are dyadic), or the spec's exact weights are not ONNX's. ``SoftmaxCrossEntropyLoss``'s
optional second output (``log_prob``, the log-softmax of the scores) is not a loss and is not
asked for. The CPU provider has float16, float32 and float64 kernels for both ops (1.32); no
bfloat16 kernel (:func:`loss_limitation`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac.frameworks._adapter import LossImpl, Unsupported, require
from symjac.frameworks._loss_grid import LossConfig, dyadic, generate_losses
from symjac.frameworks._onnx_version import IR_VERSION, OPSET
from symjac.loss._spec import Loss

_REDUCTIONS = ("mean", "sum", "none")
#: The ops' ONNX names by the adapter's op name.
ONNX_NAMES = {"negative_log_likelihood_loss": "NegativeLogLikelihoodLoss",
              "softmax_cross_entropy_loss": "SoftmaxCrossEntropyLoss"}


def build_loss_model(op: str, attributes: dict[str, Any], dtype: Any, weighted: bool) -> bytes:
    """The serialized one-node model ``Y = op(X, T[, W], **attributes)``: X of ``dtype`` (any rank), T int64."""
    helper = require("onnx").helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = ["X", "T", "W"] if weighted else ["X", "T"]
    inputs = [helper.make_tensor_value_info("X", elem, None),
              helper.make_tensor_value_info("T", helper.np_dtype_to_tensor_dtype(np.dtype(np.int64)), None),
              helper.make_tensor_value_info("W", elem, None)][:len(names)]
    node = helper.make_node(op, names, ["Y"], **attributes)
    graph = helper.make_graph([node], f"symjac_{op}", inputs, [helper.make_tensor_value_info("Y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return bytes(model.SerializeToString())


def run_loss_node(op: str, attributes: dict[str, Any], weight: Sequence[float] | None) -> Callable[..., np.ndarray]:
    """``forward(pred, label)`` with symjac's layout (classes last): one session per dtype (cached)."""
    ort = require("onnxruntime")
    sessions: dict[str, Any] = {}

    def forward(pred: np.ndarray, label: Any) -> np.ndarray:
        missing = loss_limitation(pred.dtype)
        if missing is not None:
            raise NotImplementedError(missing)
        key = np.dtype(pred.dtype).str
        if key not in sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            sessions[key] = ort.InferenceSession(build_loss_model(op, attributes, pred.dtype, weight is not None),
                                                 options, providers=["CPUExecutionProvider"])
        feed = {"X": np.ascontiguousarray(np.moveaxis(pred, -1, 1)), "T": np.asarray(label, dtype=np.int64)}
        if weight is not None:
            feed["W"] = np.asarray(weight, dtype=pred.dtype)
        return np.asarray(sessions[key].run(None, feed)[0])

    return forward


def _loss(name: str, kind: str, reduction: str, weight: Sequence[float] | None, ignore_index: int | None,
          **options: Any) -> tuple[Loss, LossImpl]:
    if reduction not in _REDUCTIONS:
        raise Unsupported(f"reduction={reduction!r}: give one of {', '.join(map(repr, _REDUCTIONS))}")
    w = None if weight is None else tuple(float(v) for v in weight)
    options.update(reduction=reduction, weight=w, ignore_index=ignore_index)  # floats: symjac reads them exactly
    spec = Loss(kind, **options)
    attributes: dict[str, Any] = {"reduction": reduction}
    if ignore_index is not None:
        attributes["ignore_index"] = int(ignore_index)
    op = ONNX_NAMES[name]
    return spec, LossImpl(loss=spec, derivative=None, forward=run_loss_node(op, attributes, w),
                          reproducer=_reproducer(op, attributes, w))


def negative_log_likelihood_loss(reduction: str = "mean", weight: Sequence[float] | None = None,
                                 ignore_index: int | None = None) -> tuple[Loss, LossImpl]:
    """ONNX ``NegativeLogLikelihoodLoss`` run by ONNX Runtime (forward only), and its spec ``Loss("nll")``."""
    return _loss("negative_log_likelihood_loss", "nll", reduction, weight, ignore_index)


def softmax_cross_entropy_loss(reduction: str = "mean", weight: Sequence[float] | None = None,
                               ignore_index: int | None = None) -> tuple[Loss, LossImpl]:
    """ONNX ``SoftmaxCrossEntropyLoss`` run by ONNX Runtime (forward only), and its spec
    ``Loss("softmax_ce", labels="indices")``."""
    return _loss("softmax_cross_entropy_loss", "softmax_ce", reduction, weight, ignore_index, labels="indices")


def _reproducer(op: str, attributes: dict[str, Any], weight: tuple[float, ...] | None) -> str:
    """The snippet: the one-node model on ``pred``/``label`` (classes moved to axis 1); it sets ``loss_value``."""
    attrs = ", ".join(f"{k}={v!r}" for k, v in attributes.items())
    names = ["X", "T", "W"] if weight is not None else ["X", "T"]
    feed = "{'X': np.ascontiguousarray(np.moveaxis(pred, -1, 1)), 'T': np.asarray(label, dtype=np.int64)" + (
        f", 'W': np.asarray({list(weight)!r}, dtype=pred.dtype)}}" if weight is not None else "}")
    return ("import onnxruntime as ort\nfrom onnx import TensorProto, helper\n"
            "elem = helper.np_dtype_to_tensor_dtype(pred.dtype)\n"
            f"node = helper.make_node({op!r}, {names!r}, ['Y'], {attrs})\n"
            "inputs = [helper.make_tensor_value_info('X', elem, None), "
            "helper.make_tensor_value_info('T', TensorProto.INT64, None),\n"
            f"          helper.make_tensor_value_info('W', elem, None)][:{len(names)}]\n"
            "graph = helper.make_graph([node], 'g', inputs, [helper.make_tensor_value_info('Y', elem, None)])\n"
            f"model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', {OPSET})])\n"
            f"model.ir_version = {IR_VERSION}\n"
            "sess = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])\n"
            f"loss_value = sess.run(None, {feed})[0]\n")


def make_loss(config: LossConfig) -> tuple[Loss, LossImpl]:
    """``(loss, impl)`` of one loss configuration."""
    op: Callable[..., tuple[Loss, LossImpl]] = getattr(sys.modules[__name__], config.op)
    return op(**config.kwargs)


def loss_limitation(dtype: Any) -> str | None:
    """Why ONNX Runtime cannot run its losses in ``dtype``, or None."""
    if np.dtype(dtype).name == "bfloat16":
        return "ONNX Runtime's CPU provider has no bfloat16 kernel for NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss"
    return None


def _draw(rng: np.random.Generator, op: str) -> LossConfig:
    n, c = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    shape = (n, c) if rng.random() < 0.7 else (n, int(rng.integers(2, 4)), c)  # (N, d1, C): ONNX's (N, C, d1)
    kwargs: dict[str, Any] = {"reduction": str(rng.choice(_REDUCTIONS))}
    if rng.random() < 0.6:
        kwargs["weight"] = tuple(float(w) for w in dyadic(rng, 0.25, 2, (c,), 2))
    label = rng.integers(0, c, shape[:-1])
    if rng.random() < 0.5:
        kwargs["ignore_index"] = ignore = int(rng.integers(0, c))
        label.reshape(-1)[0] = ignore  # one ignored row at least
        label.reshape(-1)[-1] = (ignore + 1) % c  # and one counted: the weighted mean's denominator is > 0
    pred = dyadic(rng, -4, 0, shape) if op == "negative_log_likelihood_loss" else dyadic(rng, -4, 4, shape)
    words = [op] + [f"{k}={v}" for k, v in kwargs.items()] + [f"shape={shape}"]
    return LossConfig(op, kwargs, pred, label, None, " ".join(words))


def _drawer(op: str) -> Callable[[np.random.Generator], LossConfig]:
    return lambda rng: _draw(rng, op)


def loss_configurations(grid: str = "small") -> Iterator[LossConfig]:
    """``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` over the reductions, weights, ignore_index
    and (N, C) or (N, C, d1) inputs; seeded."""
    yield from generate_losses(grid, [_drawer(op) for op in ONNX_NAMES])
