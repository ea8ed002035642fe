"""Lowering: the class templates as NumPy forward and VJP for float16/bfloat16/32/64.

The same SymPy templates the exact stage uses are lowered with
:func:`sympy.lambdify`: the forward expression of each class, its constant
derivatives (average pooling) and the Heaviside arguments of ``d Max`` (max
pooling). Arithmetic happens in the input's dtype, batched over N and C, in the
spec's layout. These are reference implementations: the verifier checks them like
any other, and they agree with the exact values within float rounding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._rounding import is_float
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._beta import Beta, Tie, parse_tie
from symjac.pool._symbolic import TIE_POLICIES, check_tie, policy_weights, tie_members, window_classes


def _check_float(name: str, a: Any, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(a)
    if not is_float(arr.dtype):
        raise InputError(f"{name} has dtype {arr.dtype}; lowered functions take float16, bfloat16, float32 or float64")
    if arr.shape != shape:
        raise InputError(f"{name} has shape {arr.shape}; expected {shape}")
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class Lowered:
    """NumPy forward and VJP of one spec at one input shape.

    Attributes:
      geometry: the resolved windows.
    """

    geometry: Geometry

    def forward(self, x: Any) -> np.ndarray:
        """Pooling forward in x's dtype (float16, bfloat16, float32, float64), x in the spec's layout."""
        g = self.geometry
        x = _check_float("x", x, g.input_shape)
        if g.spec.mode == "lp":
            from symjac.pool._lp import lowered_forward

            return lowered_forward(g, x)
        xc = g.to_canonical(x)
        y = np.empty((g.batch, g.n_out), dtype=x.dtype)
        for c in window_classes(g):
            slots = [xc[:, c.cells[:, j]] for j in range(c.cells.shape[1])]
            y[:, c.windows] = c.template.forward_numpy(*slots)
        return g.from_canonical(y)

    def vjp(self, x: Any, dy: Any, tie: Tie = "first") -> np.ndarray:
        """Input gradient ``J(x)^T dy`` in x's dtype; ``tie`` as for :func:`symjac.jacobian`."""
        tie = parse_tie(tie, TIE_POLICIES)
        if isinstance(tie, Beta):  # seed 001: β·J_split + (1 − β)·J_first, combined in x's dtype
            split, first = self.vjp(x, dy, "split"), self.vjp(x, dy, "first")
            b = split.dtype.type(float(tie.value))
            return np.asarray(b * split + (split.dtype.type(1) - b) * first)
        check_tie(tie)
        g = self.geometry
        x = _check_float("x", x, g.input_shape)
        dy = _check_float("dy", dy, g.output_shape).astype(x.dtype, copy=False)
        if g.spec.mode == "lp":
            from symjac.pool._lp import lowered_vjp

            return lowered_vjp(g, x, dy)
        xc, dyc = g.to_canonical(x), g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in), dtype=x.dtype)
        for c in window_classes(g):
            g_up = dyc[:, c.windows]
            if g.spec.mode == "avg":
                for j, d in enumerate(c.template.derivatives_numpy):
                    dx[:, c.cells[:, j]] += g_up * x.dtype.type(d(*([0] * c.cells.shape[1])))
                continue
            member = tie_members(c.template, xc[:, c.cells])
            weights, q = policy_weights(member, tie)
            for j in range(c.cells.shape[1]):
                w = weights[..., j]
                if q == 1:
                    dx[:, c.cells[:, j]] += np.where(w != 0, g_up, x.dtype.type(0))
                else:
                    dx[:, c.cells[:, j]] += g_up * (w / q).astype(x.dtype)
        return g.from_canonical(dx, g.in_spatial)


def lower(spec: PoolSpec, input_shape: tuple[int, ...]) -> Lowered:
    """Lower ``spec`` at ``input_shape`` to NumPy forward/VJP functions."""
    return Lowered(resolve(check_pool_spec(spec), tuple(input_shape)))
