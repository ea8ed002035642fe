"""What both native routes send for an operator: forward/backward of a pool (or of max unpooling, with
its indices), loss/derivative of a loss.

:class:`PoolCalls` and :class:`LossCalls` turn NumPy calls into requests (op, settings,
inputs, the output symjac expects) for a transport: the process route
(:mod:`symjac.frameworks.native.process`) or the shared-library route
(:mod:`symjac.frameworks.native.ctypes`). A transport is ``send(op, lines, inputs, output) -> array``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks.native._wire import check_settings_fit, settings, wire_dtype
from symjac.loss._spec import Loss
from symjac.pool._geometry import resolve
from symjac.pool._ops.unpool import MaxUnpool, output_shape
from symjac.pool._spec import PoolSpec, check_pool_spec

#: Why a native kernel's report names its JVP, double backward and batching rule as not checked: the
#: protocol has no requests for them (every route says the same, so their reports compare equal).
NOT_IN_PROTOCOL = {name: "the native protocol carries forward and backward requests only (docs/native.md)"
                   for name in ("jvp", "double_backward", "vmap")}

#: ``send(op, settings lines, [(name, array or None)], (output name, dtype, shape)) -> result``
Send = Callable[[str, list[str], list[tuple[str, Any]], tuple[str, str, tuple[int, ...]]], np.ndarray]


class PoolCalls:
    """forward/backward of one pooling spec; the settings are written once per input shape.

    Raises:
      SpecError: the spec's settings do not fit in a request (:func:`check_settings_fit`).
    """

    def __init__(self, send: Send, spec: PoolSpec):
        check_settings_fit(spec)
        self.send, self.spec = send, spec
        self._shapes: dict[tuple[int, ...], tuple[list[str], tuple[int, ...]]] = {}

    def _setup(self, shape: tuple[int, ...]) -> tuple[list[str], tuple[int, ...]]:
        got = self._shapes.get(shape)
        if got is None:
            geometry = resolve(self.spec, shape)
            got = self._shapes[shape] = (settings(self.spec, geometry.pads), geometry.output_shape)
        return got

    def forward(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        lines, out_shape = self._setup(x.shape)
        return self.send("forward", lines, [("x", x)], ("y", wire_dtype(x), out_shape))

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        x, dy = np.asarray(x), np.asarray(dy)
        lines, _ = self._setup(x.shape)
        return self.send("backward", lines, [("x", x), ("dy", dy)], ("dx", wire_dtype(x), x.shape))


class ScatterCalls:
    """forward/backward of max unpooling (:class:`symjac.MaxUnpool`): the indices travel as an int64
    input array, after x (``forward(x, indices)``, ``backward(x, indices, dy)``); the settings are the
    spec's fields but its indices, with ``rank`` and the max pooling's ``pads``."""

    def __init__(self, send: Send, spec: MaxUnpool):
        check_settings_fit(spec)
        self.send, self.spec = send, spec
        self.lines = settings(dataclasses.replace(spec, indices=None), spec.padding)

    def forward(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        x, indices = np.asarray(x), np.asarray(indices)
        return self.send("forward", self.lines, [("x", x), ("indices", indices)],
                         ("y", wire_dtype(x), output_shape(self.spec, x.shape)))

    def backward(self, x: np.ndarray, indices: np.ndarray, dy: np.ndarray) -> np.ndarray:
        x, indices, dy = np.asarray(x), np.asarray(indices), np.asarray(dy)
        return self.send("backward", self.lines, [("x", x), ("indices", indices), ("dy", dy)],
                         ("dx", wire_dtype(x), x.shape))


def check_native_spec(spec: Any) -> PoolSpec | MaxUnpool:
    """``spec`` if the native routes take it: a pooling spec or max unpooling.

    Raises:
      SpecError: ``spec`` is neither (:func:`symjac.pool._spec.check_pool_spec`'s message).
    """
    return spec if isinstance(spec, MaxUnpool) else check_pool_spec(spec)


def spec_calls(send: Send, spec: PoolSpec | MaxUnpool) -> Any:
    """The calls of a checked spec (:func:`check_native_spec`), by its type: a :class:`PoolCalls`, or a
    :class:`ScatterCalls`, whose callables take the indices too (typed ``Any``: ``Impl`` holds either)."""
    return ScatterCalls(send, spec) if isinstance(spec, MaxUnpool) else PoolCalls(send, spec)


class LossCalls:
    """derivative/forward of one loss spec."""

    def __init__(self, send: Send, loss: Loss):
        check_settings_fit(loss)
        self.send, self.loss = send, loss
        self.lines = settings(loss)
        self.per_element = loss.reduction == "none"

    def derivative(self, pred: np.ndarray, label: np.ndarray | None = None,
                   upstream: np.ndarray | None = None) -> np.ndarray:
        pred = np.asarray(pred)
        inputs = [("pred", pred), ("label", _array(label)), ("upstream", _array(upstream))]
        return self.send("derivative", self.lines, inputs, ("dpred", wire_dtype(pred), pred.shape))

    def forward(self, pred: np.ndarray, label: np.ndarray | None = None) -> np.ndarray:
        pred = np.asarray(pred)
        # one number, or one per element for reduction "none" (a kernel whose elements are
        # rows, softmax_ce, answers with its own shape)
        shape = pred.shape if self.per_element else ()
        return self.send("loss", self.lines, [("pred", pred), ("label", _array(label))],
                         ("value", wire_dtype(pred), shape))


def _array(a: Any) -> np.ndarray | None:
    return None if a is None else np.asarray(a)
