"""What the TensorFlow and Keras adapters share: the frameworks imported on demand, an
:class:`Impl` whose backward is ``tf.GradientTape``'s, TensorFlow's documented argument
conventions (``data_format``, the int / rank / rank + 2 sizes, explicit padding pairs) and
the draws of the configuration matrix's shapes.

:mod:`symjac.frameworks.tensorflow` (``tf.nn``) and :mod:`symjac.frameworks.keras` (Keras
layers, ``keras.ops``) map their ops onto specs with these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported, require

FRAMEWORK = "tensorflow"
_LAST = {"NWC", "NHWC", "NDHWC", "channels_last"}
_FIRST = {"NCW", "NCHW", "NCDHW", "channels_first"}


def import_tf() -> Any:
    return require("tensorflow")


def tape(call: Callable[[Any], Any], name: str, kwargs: dict[str, Any], reproducer: str,
         framework: str = FRAMEWORK) -> Impl:
    """``call`` (a tf.Tensor -> tf.Tensor) as an :class:`Impl`, its backward through ``tf.GradientTape``."""
    tf = import_tf()

    def forward(x: np.ndarray) -> np.ndarray:
        return np.array(call(tf.constant(x)))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        t = tf.constant(x)
        with tf.GradientTape() as gradient_tape:
            gradient_tape.watch(t)
            y = call(t)
        dx = gradient_tape.gradient(y, t, output_gradients=tf.constant(dy))
        return np.zeros_like(x) if dx is None else np.array(dx)

    return Impl(forward, backward, framework, name, kwargs, reproducer, *_autodiff(call, framework))


def _autodiff(call: Callable[[Any], Any], framework: str) -> tuple[Any, Any, Impl]:
    """``tf.autodiff.ForwardAccumulator`` (forward mode); two nested ``GradientTape``s (the
    gradient of ``<v, J^T dy>`` with respect to x and dy); ``tf.vectorized_map`` of the forward,
    the tape's VJP and the accumulator's JVP, without its while-loop fallback (a batching rule
    that does not exist is :class:`Unsupported`, not a slow loop passing for one)."""
    tf = import_tf()

    def vjp(t: Any, g: Any) -> Any:
        with tf.GradientTape() as inner:
            inner.watch(t)
            y = call(t)
        dx = inner.gradient(y, t, output_gradients=g)
        return tf.zeros_like(t) if dx is None else dx

    def tangent(t: Any, d: Any) -> Any:
        with tf.autodiff.ForwardAccumulator(t, d) as acc:
            y = call(t)
        out = acc.jvp(y)
        return tf.zeros_like(y) if out is None else out

    def jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.array(tangent(tf.constant(x), tf.constant(t)))

    def double_backward(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t, g = tf.constant(x), tf.constant(dy)
        with tf.GradientTape() as outer:
            outer.watch([t, g])
            dx = vjp(t, g)
        ddx, ddy = outer.gradient(dx, [t, g], output_gradients=tf.constant(v))
        return (np.zeros_like(x) if ddx is None else np.array(ddx)), (np.zeros_like(dy) if ddy is None else np.array(ddy))

    def batched(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
        # one tf.function per transform: pfor traces once per shape and dtype, not once per call
        mapped = tf.function(lambda *elems: tf.vectorized_map(lambda e: fn(*e), elems, fallback_to_while_loop=False))

        def run(*arrays: np.ndarray) -> np.ndarray:
            try:
                out = mapped(*(tf.constant(a) for a in arrays))
            except ValueError as exc:  # pfor has no converter for an op: no batching rule
                if "pfor" in str(exc) or "converter" in str(exc) or "vectoriz" in str(exc):
                    raise Unsupported(f"tf.vectorized_map: {str(exc).splitlines()[0]}") from None
                raise
            return np.array(out)

        return run

    vmapped = Impl(batched(call), batched(vjp), framework, "vectorized_map", jvp=batched(tangent))
    return jvp, double_backward, vmapped


#: The reproducer's tape around a ``{call}`` of ``xt``.
TAPE = ("xt = tf.constant(x)\nwith tf.GradientTape() as tape:\n    tape.watch(xt)\n    y = {call}\n"
        "dx = tape.gradient(y, xt, output_gradients=tf.constant(dy))\nprint('y =', y.numpy()); print('dx =', dx.numpy())\n")


# ------------------------------------------------------------------ TF's argument conventions


def tf_layout(data_format: str | None) -> str:
    """``"NHWC"``-style or Keras ``"channels_last"``-style ``data_format`` -> symjac's layout."""
    if data_format is None:
        return "channels_last"
    if data_format in _LAST:
        return "channels_last"
    if data_format in _FIRST:
        return "channels_first"
    raise Unsupported(f"data_format={data_format!r}: give one of {sorted(_LAST | _FIRST)}")


def tf_sizes(value: Any, rank: int, field: str, layout: str) -> tuple[int, ...]:
    """TF's int / rank / rank+2 list convention (Keras: int or rank tuple)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * rank
    values = [int(v) for v in value]
    if len(values) == 1:
        return (values[0],) * rank
    if len(values) == rank:
        return tuple(values)
    if len(values) == rank + 2:
        spatial = values[1:-1] if layout == "channels_last" else values[2:]
        other = [values[0], values[-1]] if layout == "channels_last" else values[:2]
        if other == [1, 1]:
            return tuple(spatial)
    raise Unsupported(f"{field}={value!r}: give an int, {rank} ints, or {rank + 2} with 1 on batch and channels")


def tf_padding(padding: Any, rank: int, layout: str) -> Any:
    """``"VALID"`` / ``"SAME"`` (any case), or rank + 2 explicit ``[lo, hi]`` pairs -> the spec's padding."""
    if isinstance(padding, str):
        if padding.upper() not in ("VALID", "SAME"):
            raise Unsupported(f"padding={padding!r}: give 'VALID', 'SAME' or explicit [[lo, hi], ...] pairs")
        return padding.lower()
    pairs = [tuple(int(v) for v in p) for p in padding]
    if len(pairs) == rank + 2:
        spatial, other = (pairs[1:-1], [pairs[0], pairs[-1]]) if layout == "channels_last" else (pairs[2:], pairs[:2])
        if other == [(0, 0), (0, 0)]:
            return tuple(spatial)
    raise Unsupported(f"padding={padding!r}: explicit padding is {rank + 2} [lo, hi] pairs with [0, 0] on the "
                      "batch and channel dims")


# ------------------------------------------------------------------ configuration draws

_SIDES = {1: (3, 10), 2: (3, 7), 3: (2, 5)}


def draw_shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    """A channels-last input shape of ``rank`` spatial axes: batch 1, 1 or 2 channels."""
    lo, hi = _SIDES[rank]
    return (1, *(int(v) for v in rng.integers(lo, hi + 1, rank)), int(rng.integers(1, 3)))


def draw_ints(rng: np.random.Generator, rank: int, lo: int = 1, hi: int = 3) -> tuple[int, ...]:
    return tuple(int(v) for v in rng.integers(lo, hi + 1, rank))
