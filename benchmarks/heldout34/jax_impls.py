"""Held-out JAX functions for benchmarks/heldout34.py (issue 34): ``jax.custom_jvp`` and
``jax.custom_vjp`` pools with hand-written rules, each correct or with one planted defect.
Written from the issue's descriptions only. Arrays are (N, C, L); windows VALID.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def avg1d_custom_jvp(*, first_window_bug: bool = False) -> Any:
    """1-D average pooling, kernel 2, stride 1, with a custom JVP rule; ``first_window_bug``: the
    rule gives the first window no tangent."""

    @jax.custom_jvp
    def avg(x: Any) -> Any:
        return (x[..., :-1] + x[..., 1:]) / 2

    @avg.defjvp
    def avg_jvp(primals: Any, tangents: Any) -> Any:
        (x,), (t,) = primals, tangents
        out = (t[..., :-1] + t[..., 1:]) / 2
        if first_window_bug:
            out = out.at[..., 0].set(0)
        return avg(x), out

    return avg


def l2pool_custom_vjp(*, stop_gradient_bug: bool = False) -> Any:
    """1-D L2 pooling (lp, p = 2), kernel 2, stride 2, with a custom VJP: dx = dy * x / y, 0 at an
    all-zero window. ``stop_gradient_bug``: the backward treats y as a constant, so its own
    derivative (the double backward) is wrong though the first derivative is right."""

    def norm(x: Any) -> Any:
        pairs = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
        return jnp.sqrt(jnp.sum(pairs * pairs, axis=-1))

    @jax.custom_vjp
    def l2(x: Any) -> Any:
        return norm(x[..., : x.shape[-1] // 2 * 2])

    def fwd(x: Any) -> Any:
        return l2(x), x

    def bwd(x: Any, dy: Any) -> Any:
        even = x[..., : x.shape[-1] // 2 * 2]
        y = norm(even)
        if stop_gradient_bug:
            y = jax.lax.stop_gradient(y)
        nonzero = y > 0
        safe = jnp.where(nonzero, y, 1)  # the double-where: no NaN in the unused branch's derivative
        scale = jnp.where(nonzero, dy / safe, 0)
        dx = even * jnp.repeat(scale, 2, axis=-1)
        return (jnp.pad(dx, [(0, 0)] * (x.ndim - 1) + [(0, x.shape[-1] - even.shape[-1])]),)

    l2.defvjp(fwd, bwd)
    return l2
