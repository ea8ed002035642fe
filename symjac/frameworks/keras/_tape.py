"""What the TensorFlow and Keras adapters share: the frameworks imported on demand, an
:class:`Impl` whose backward is ``tf.GradientTape``'s, TensorFlow's documented argument
conventions (``data_format``, the int / rank / rank + 2 sizes, explicit padding pairs) and
the draws of the configuration matrix's shapes.

:mod:`symjac.frameworks.tensorflow` (``tf.nn``) and :mod:`symjac.frameworks.keras` (Keras
layers, ``keras.ops``) map their ops onto specs with these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported, require

FRAMEWORK = "tensorflow"
_LAST = {"NWC", "NHWC", "NDHWC", "channels_last"}
_FIRST = {"NCW", "NCHW", "NCDHW", "channels_first"}


def import_tf() -> Any:
    return require("tensorflow")


#: TensorFlow's compiled mode (``Impl.modes``' key): each callable traced into one graph per shape
#: and dtype, as Keras's ``fit`` and a user's ``@tf.function`` training step run it.
GRAPH = "tf.function"


def tape(call: Callable[[Any], Any], name: str, kwargs: dict[str, Any], reproducer: str,
         framework: str = FRAMEWORK) -> Impl:
    """``call`` (a tf.Tensor -> tf.Tensor) as an :class:`Impl`, its backward through ``tf.GradientTape``,
    run eagerly; ``modes["tf.function"]`` runs each callable (the forward, the tape's VJP, the forward
    accumulator's JVP, the nested tapes' second derivative) inside one ``tf.function`` instead.
    Both share the batched transform: ``tf.vectorized_map`` traces a graph whatever the mode."""
    vmapped = _batched(call, framework)
    graph = _impl(call, framework, name, kwargs, reproducer, vmapped, traced=True)
    return dataclasses.replace(_impl(call, framework, name, kwargs, reproducer, vmapped, traced=False),
                               modes={GRAPH: graph})


def _transforms(call: Callable[[Any], Any]) -> dict[str, Callable[..., Any]]:
    """The TF-level callables: the op, the tape's VJP, ``tf.autodiff.ForwardAccumulator``'s JVP and two
    nested ``GradientTape``s (the gradient of ``<v, J^T dy>`` with respect to x and dy)."""
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

    def second(t: Any, g: Any, v: Any) -> Any:
        with tf.GradientTape() as outer:
            outer.watch([t, g])
            dx = vjp(t, g)
        ddx, ddy = outer.gradient(dx, [t, g], output_gradients=v)
        return (tf.zeros_like(t) if ddx is None else ddx), (tf.zeros_like(g) if ddy is None else ddy)

    return {"forward": call, "backward": vjp, "jvp": tangent, "double_backward": second}


def _impl(call: Callable[[Any], Any], framework: str, name: str, kwargs: dict[str, Any], reproducer: str,
          vmapped: Impl, *, traced: bool) -> Impl:
    """The NumPy callables of :func:`_transforms`, each in a ``tf.function`` of its own when ``traced``."""
    tf = import_tf()
    fns = {k: tf.function(fn) if traced else fn for k, fn in _transforms(call).items()}

    def run(key: str) -> Callable[..., Any]:
        fn = fns[key]

        def numpy_call(*arrays: np.ndarray) -> Any:
            out = fn(*(tf.constant(a) for a in arrays))
            return tuple(np.array(o) for o in out) if isinstance(out, (tuple, list)) else np.array(out)

        return numpy_call

    return Impl(run("forward"), run("backward"), framework, name, kwargs, reproducer, jvp=run("jvp"),
                double_backward=run("double_backward"), vmap=vmapped, mode=GRAPH if traced else "eager")


def _batched(call: Callable[[Any], Any], framework: str) -> Impl:
    """``tf.vectorized_map`` of the forward, the tape's VJP and the accumulator's JVP, without its
    while-loop fallback: an op pfor has no converter for is :class:`Unsupported` (no batching rule, not
    a slow loop passing for one); any other error raised inside is the op's, a finding."""
    tf = import_tf()

    def batched(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
        # one tf.function per transform: pfor traces once per shape and dtype, not once per call
        mapped = tf.function(lambda *elems: tf.vectorized_map(lambda e: fn(*e), elems, fallback_to_while_loop=False))

        def run(*arrays: np.ndarray) -> np.ndarray:
            try:
                out = mapped(*(tf.constant(a) for a in arrays))
            except ValueError as exc:
                reason = no_batching_rule(exc)
                if reason is not None:
                    raise Unsupported(f"tf.vectorized_map: {reason}") from None
                raise
            return np.array(out)

        return run

    fns = _transforms(call)
    return Impl(batched(call), batched(fns["backward"]), framework, "vectorized_map", jvp=batched(fns["jvp"]),
                mode=GRAPH)


#: What TensorFlow's pfor raises when it has no batching rule for an op (``pfor.py``: no converter
#: registered, or a converter that does not take a batched input in that position).
_NO_RULE = ("No pfor vectorization defined for ", "expected to be not loop invariant",
            "expected to be loop invariant")


def no_batching_rule(exc: BaseException) -> str | None:
    """The line of ``exc`` that says pfor has no batching rule for an op, or None: any other error
    (one raised inside an op while tracing or running the batched graph; every traced error's text
    mentions pfor and vectorized_map) is the op's failure, not a missing capability."""
    for line in str(exc).splitlines():
        if any(marker in line for marker in _NO_RULE):
            return line.strip()
    return None


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
