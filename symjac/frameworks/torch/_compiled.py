"""The ``torch.compile`` twin of a torch :class:`Impl`: each callable one compiled program.

``conform --modes compiled`` checks it beside the eager ``Impl`` (``Impl.modes["torch.compile"]``).
Each transform is compiled as its users compile it: the forward with ``torch.compile(f)`` and its
VJP through autograd on the compiled forward (AOTAutograd's compiled backward, as
``torch.compile(model)`` trains); forward mode, second order and batching as ``torch.func``
functions compiled whole (``torch.func.jvp``; the VJP of the VJP; ``torch.func.vmap``):
autograd's dual tensors pass through a compiled function with their tangent dropped, and
AOTAutograd's compiled backward refuses ``create_graph=True`` (its donated buffers).

Nothing compiles until a callable is first called (importing ``torch._dynamo`` costs seconds).
Every call runs with Dynamo's recompile limit lifted and ``fail_on_recompile_limit_hit``: past the
limit Dynamo would otherwise run the function eagerly, silently, and a compiled cell would check the
eager code (the callables of every ``Impl`` share their code objects, so their compilations count
against one limit).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, require
from symjac.frameworks.torch._arrays import to_numpy, to_torch
from symjac.frameworks.torch._autodiff import _first

#: PyTorch's compiled mode (``Impl.modes``' key).
COMPILE = "torch.compile"
#: Dynamo's recompile limits while symjac calls (a compiled cell never falls back to eager code).
_LIMITS = {"recompile_limit": 1 << 20, "accumulated_recompile_limit": 1 << 20, "fail_on_recompile_limit_hit": True}


def _lazily(build: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """``build()``'s function (a ``torch.compile``), built at the first call, run with :data:`_LIMITS`."""
    torch = require("torch")
    made: list[Callable[..., Any]] = []

    def run(*tensors: Any) -> Any:
        if not made:
            made.append(build())
        with torch._dynamo.config.patch(**_LIMITS):
            return made[0](*tensors)

    return run


def compiled(call: Callable[[Any], Any], framework: str, op: str) -> Impl:
    """``call`` (a tensor -> tensor, or a tuple whose first item is the output) as an :class:`Impl` whose
    callables run ``torch.compile``'d (see the module's docstring); mode ``"torch.compile"``."""
    torch = require("torch")
    from torch import func

    def f(t: Any) -> Any:
        return _first(call(t))

    def vjp(x: Any, g: Any) -> Any:
        return func.vjp(f, x)[1](g)[0]

    def tangent(x: Any, t: Any) -> Any:
        return func.jvp(f, (x,), (t,))[1]

    def second(x: Any, g: Any, v: Any) -> Any:
        return func.vjp(vjp, x, g)[1](v)

    compiled_f = _lazily(lambda: torch.compile(f))

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return to_numpy(compiled_f(to_torch(x)))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        t = to_torch(x).requires_grad_(True)
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(compiled_f(t), t, to_torch(dy), allow_unused=True)
        return to_numpy(dx if dx is not None else torch.zeros_like(t))

    def numpy(fn: Callable[..., Any]) -> Callable[..., Any]:
        run = _lazily(lambda: torch.compile(fn))

        def numpy_call(*arrays: np.ndarray) -> Any:
            out = run(*(to_torch(a) for a in arrays))
            return tuple(to_numpy(o) for o in out) if isinstance(out, tuple) else to_numpy(out)

        return numpy_call

    @functools.cache
    def batched(in_axis: int, out_axis: int) -> Impl:  # the batching rule at a batch position (Impl.vmap)
        def mapped(fn: Callable[..., Any]) -> Callable[..., Any]:
            return numpy(func.vmap(fn, in_dims=in_axis, out_dims=out_axis))

        return Impl(mapped(f), mapped(vjp), framework, "vmap", jvp=mapped(tangent), mode=COMPILE)

    return Impl(forward, backward, framework, op, jvp=numpy(tangent), double_backward=numpy(second), vmap=batched,
                mode=COMPILE)


def with_compiled(impl: Impl, call: Callable[[Any], Any]) -> Impl:
    """``impl`` with its ``torch.compile`` twin in ``modes``."""
    return dataclasses.replace(impl, modes={COMPILE: compiled(call, impl.framework, impl.op)})
