"""Lowering: the class templates as NumPy forward and VJP for float16/bfloat16/32/64.

The same SymPy templates the exact stage uses, evaluated in floats: the sum of
each average window times its template's exact derivative 1/D rounded to the
dtype, and the Heaviside argument of ``d Max(a, r)/da`` (a NumPy subtraction) for the tie
sets of max windows. Arithmetic happens in the input's dtype, batched over N and
C, one slot at a time over all windows, in the spec's layout. These are reference
implementations: the verifier checks them like any other, and they agree with the
exact values within float rounding.
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
from symjac.pool._symbolic import TIE_POLICIES
from symjac.pool._beta import check_tie


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

    Both run one line of the (windows, slots) grid at a time
    (:func:`symjac.pool._symbolic.lines`: O(batch x line) memory, whatever the window size), in the input's dtype.

    Attributes:
      geometry: the resolved windows.
    """

    geometry: Geometry

    def forward(self, x: Any) -> np.ndarray:
        """Pooling forward in x's dtype (float16, bfloat16, float32, float64), x in the spec's layout.

        The operator's ``lower_forward`` rule (avg: the template's sum, slot by slot in
        slot order, times its exact derivative 1/D rounded to the dtype; max: the
        template's ``Max``).
        """
        g = self.geometry
        x = _check_float("x", x, g.input_shape)
        out: np.ndarray = g.operator.lower_forward(g, x)
        return out

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
        out: np.ndarray = g.operator.lower_vjp(g, x, dy, tie)
        return out


def lower(spec: PoolSpec, input_shape: tuple[int, ...]) -> Lowered:
    """Lower ``spec`` at ``input_shape`` to NumPy forward/VJP functions."""
    return Lowered(resolve(check_pool_spec(spec), tuple(input_shape)))
