"""The eager twin of a ``jax.jit`` :class:`Impl`: the same callables run op by op.

:func:`symjac.frameworks.jax.wrap` compiles every transform with ``jax.jit`` (one XLA program per
shape and dtype), the mode users ship; JAX also runs each primitive on its own, eagerly, where XLA
fuses and rounds nothing across primitives. ``conform`` checks both (``Impl.modes``): here the jitted
``Impl`` is labelled ``jax.jit`` and gets ``modes["eager"]``, whose every callable (the batched ones
too) runs inside ``jax.disable_jit()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from symjac.frameworks._adapter import Impl, require

#: JAX's compiled mode (``Impl.mode``; ``conform``'s compiled columns).
JIT = "jax.jit"


def _eager(fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
    if fn is None:
        return None
    jax = require("jax")
    call = fn

    def run(*arrays: Any) -> Any:
        with jax.disable_jit():
            return call(*arrays)

    return run


def _twin(impl: Impl) -> Impl:
    forward = _eager(impl.forward)
    assert forward is not None  # an Impl always has a forward
    return dataclasses.replace(impl, forward=forward, backward=_eager(impl.backward),
                               jvp=_eager(impl.jvp), double_backward=_eager(impl.double_backward),
                               vmap=_relabelled(impl.vmap, _twin), mode="eager", modes={})


def _relabelled(rule: Any, change: Callable[[Impl], Impl]) -> Any:
    """A batching rule ``rule(in_axis, out_axis) -> Impl`` (:class:`Impl`'s ``vmap``) whose batched
    ``Impl``s go through ``change``; None stays None."""
    if rule is None:
        return None
    if isinstance(rule, Impl):
        return change(rule)

    def at(in_axis: int, out_axis: int) -> Impl:
        return change(rule(in_axis, out_axis))

    return at


def with_eager(impl: Impl, jit: bool) -> Impl:
    """``impl`` (made by ``wrap``) labelled ``jax.jit`` with its eager twin in ``modes["eager"]`` when
    ``jit``; an eager ``impl`` (``jit=False``) as it is."""
    if not jit:
        return impl
    batched = _relabelled(impl.vmap, lambda b: dataclasses.replace(b, mode=JIT))
    return dataclasses.replace(impl, vmap=batched, mode=JIT, modes={"eager": _twin(impl)})
