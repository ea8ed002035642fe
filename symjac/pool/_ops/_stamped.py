"""Operators whose Jacobian is piecewise constant and rational: every derivative from one stamp.

Average and max pooling give, at any x, a Jacobian whose entries are integer weights
over a common denominator (:class:`~symjac.pool._stamp.Stamp`, built by the
operator's :meth:`~symjac.pool._ops._protocol.Operator.stamp` rule). The first
derivative in both directions comes from the same stamp: ``J^T dy`` (VJP) and
``J t`` (JVP), exactly; the β family of max pooling's tie policies is
``β·J_split + (1 − β)·J_first`` of two stamps. The second derivative is zero off ties.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._exact import ExactArray
from symjac.pool._beta import Beta, Tie, beta_apply, beta_jacobian
from symjac.pool._ops._protocol import ForwardBound, Operator
from symjac.pool._stamp import SparseJacobian, apply, sparse, vjp_terms

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


class StampedOperator(Operator):
    """An :class:`Operator` whose derivatives all come from its :meth:`stamp` rule."""

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> SparseJacobian:
        if isinstance(tie, Beta):
            return beta_jacobian(g, x, tie)
        return sparse(self.stamp(g, x, tie))

    def exact_vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> ExactArray:
        if isinstance(tie, Beta):
            return beta_apply(g, x, dy, tie, transpose=True)
        return apply(self.stamp(g, x, tie), dy, transpose=True)

    def exact_jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> ExactArray:
        """``J(x) t`` as a rational array: the stamp applied forward (JVP = J·t)."""
        if isinstance(tie, Beta):
            return beta_apply(g, x, t, tie, transpose=False)
        return apply(self.stamp(g, x, tie), t, transpose=False)

    def vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_vjp(g, x, dy, tie).to_sympy()

    def jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_jvp(g, x, t, tie).to_sympy()

    def forward(self, g: Geometry, x: ExactArray) -> np.ndarray:
        return self.exact_forward(g, x).to_sympy()

    def dense_terms(self, g: Geometry, x: ExactArray | None,
                    dy: ExactArray) -> tuple[ExactArray, np.ndarray, np.ndarray]:
        return vjp_terms(g, x, dy)

    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        exact_y = self.exact_forward(g, exact_of())
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        tol = self.forward_tolerance(g, x, e_c, u)
        # Fractions only if a finding lists them (building one per output costs ~2 us each)
        return e_c, tol, lambda: g.to_canonical(exact_y.to_fractions(), g.out_spatial)

    def forward_tolerance(self, g: Geometry, x: np.ndarray, e_c: np.ndarray, u: float) -> np.ndarray:
        """(B, W) how far a correct float forward may be from the exact one (0: exact)."""
        return np.zeros_like(e_c)
