"""torch's own transforms of a callable, for :func:`symjac.frameworks.torch.wrap`: forward AD, the
double backward and the batching rule ``rule(in_axis, out_axis)`` (``torch.func.vmap``), and which of
them a ``torch.autograd.Function`` subclass does not define (:func:`lacks`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, require
from symjac.frameworks.torch._arrays import to_numpy, to_torch

FRAMEWORK = "torch"


def _first(y: Any) -> Any:
    return y[0] if isinstance(y, (tuple, list)) else y


def _zeros_if_none(grad: Any, like: Any) -> np.ndarray:
    torch = require("torch")
    return to_numpy(grad if grad is not None else torch.zeros_like(like))


def lacks(fn: Any) -> dict[str, str]:
    """Which derivatives a ``torch.autograd.Function`` subclass does not define, each with why
    (a transform torch would refuse, or get wrong, on it); nothing for any other callable, whose
    derivatives are torch's own."""
    function = require("torch").autograd.Function
    if not (isinstance(fn, type) and issubclass(fn, function)):
        return {}
    from torch.autograd.function import once_differentiable

    cls: Any = fn
    name, missing = cls.__name__, {}
    if cls.jvp is function.jvp:
        missing["jvp"] = f"{name} defines no jvp staticmethod (forward-mode AD)"
    if getattr(cls.backward, "__code__", None) is once_differentiable(lambda ctx: None).__code__:
        missing["double_backward"] = f"{name}'s backward is @once_differentiable (no double backward)"
    if cls.setup_context is function.setup_context:
        missing["vmap"] = f"{name}'s forward takes ctx (no setup_context staticmethod): torch.func.vmap cannot run it"
    elif cls.vmap is function.vmap and not getattr(cls, "generate_vmap_rule", False):
        missing["vmap"] = f"{name} defines no vmap staticmethod and does not set generate_vmap_rule=True"
    return missing


def autodiff(call: Callable[[Any], Any], lacks: dict[str, str]) -> tuple[Any, Any, Any]:
    """The forward-mode, second-order and batched transforms of ``call``, through torch's own
    autodiff: forward AD (dual numbers, which a custom ``autograd.Function``'s ``jvp`` serves),
    ``autograd.grad(create_graph=True)`` differentiated again, and the batching rule
    ``rule(in_axis, out_axis)``: ``torch.func.vmap(..., in_dims=in_axis, out_dims=out_axis)`` of
    the forward, the VJP and the JVP. A transform in ``lacks`` is None."""
    torch = require("torch")

    def jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        forward_ad: Any = torch.autograd.forward_ad

        with forward_ad.dual_level():
            y = _first(call(forward_ad.make_dual(to_torch(x), to_torch(t))))
            primal, tangent = forward_ad.unpack_dual(y)
        return _zeros_if_none(tangent, primal)

    def double_backward(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt, g = to_torch(x).requires_grad_(True), to_torch(dy).requires_grad_(True)
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(_first(call(xt)), xt, g, create_graph=True)
            if not dx.requires_grad:  # a backward computed outside autograd: it has no derivative of its own
                raise NotImplementedError("the backward's result has no grad_fn (computed outside autograd, or "
                                          "detached): it has no double backward")
            ddx, ddy = torch.autograd.grad(dx, (xt, g), to_torch(v), allow_unused=True)
        return _zeros_if_none(ddx, xt), _zeros_if_none(ddy, g)

    def rule(in_axis: int, out_axis: int) -> Impl:
        return _vmapped(call, in_axis, out_axis, "jvp" not in lacks)

    return (None if "jvp" in lacks else jvp, None if "double_backward" in lacks else double_backward,
            None if "vmap" in lacks else rule)


def _vmapped(call: Callable[[Any], Any], in_axis: int, out_axis: int, with_jvp: bool) -> Impl:
    """``torch.func.vmap`` of the forward, the VJP and (``with_jvp``) the JVP, the batch at
    ``in_axis`` in every argument and at ``out_axis`` in the result."""
    from torch import func

    def f(t: Any) -> Any:
        return _first(call(t))

    def batched(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
        mapped = func.vmap(fn, in_dims=in_axis, out_dims=out_axis)

        def run(*arrays: np.ndarray) -> np.ndarray:
            try:
                return to_numpy(mapped(*(to_torch(a) for a in arrays)))
            except RuntimeError as exc:  # a custom Function without functorch support: torch's own "cannot"
                if "vmap" in str(exc) and ("setup_context" in str(exc) or "generate_vmap_rule" in str(exc)):
                    raise NotImplementedError(f"torch.func.vmap: {exc}") from None
                raise

        return run

    return Impl(batched(f), batched(lambda x, g: func.vjp(f, x)[1](g)[0]), FRAMEWORK, "vmap",
                jvp=batched(lambda x, t: func.jvp(f, (x,), (t,))[1]) if with_jvp else None)
