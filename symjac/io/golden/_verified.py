"""Golden bounds of ``y`` and ``dx`` from the operator's own rounding model, for an operator whose
weights themselves round in the dtype (:attr:`~symjac.pool._ops._protocol.Operator.weighted_sum_rounding`
False: RoI Align, whose bilinear weights come from sample coordinates such as a third of a box).

Golden's weighted-sum model (``γ_k·Σ|terms|``, :data:`symjac.io.golden._bounds.BOUND_NOTE`) takes
the weights as exact; where they are not, a correct implementation may be further off than it says
(ONNX Runtime's float32 RoiAlign was up to 8x its per-element bound, torchvision's backward 2x
in dx). The verifier's forward bound and rows do model the coordinates, so golden reads them
here: there is one rounding model of the operator, and everything the verifier accepts as correct
lies within the golden bounds by the derivation below. Write ``e`` for the exact value, ``g`` for
``golden[dtype]`` (``e`` rounded once) and ``f`` for a float result the verifier accepts; all at
the golden inputs, which the dtype holds (:mod:`symjac.io.golden._held`).

``y``: the verifier accepts ``|f - e| <= T``, ``T`` the operator's
:meth:`~symjac.pool._ops._protocol.Operator.forward_bound` at x; so
``|f - g| <= T + |e - g|``, and ``|e - g|`` is computed exactly (0 where the dtype holds ``e``).

``dx``: the verifier accepts rows ``obs`` (``J``'s rows as the backward gives them) within
``ρ`` of the exact rows ``J``, entry by entry (the operator's
:meth:`~symjac.pool._ops._protocol.Operator.rows`, ``tol``), and a dense ``dx`` within
``t = dense_tolerance(B, S, m)`` (:func:`symjac.pool._rows.dense_tolerance`, the verifier's own)
of ``P = Σ_w dy_w·obs_w`` at each cell read by m (window, slot) pairs, where
``B = Σ_w |dy_w·obs_w|`` and ``S <= 2^-52·B + (1 + 2^-52)·Σ_w |dy_w|·|obs_w - J_w|``. With
``M = Σ_w |dy_w|·|J_w|`` and ``R = Σ_w |dy_w|·ρ_w``: ``B <= M + R``, ``S <= 2^-52·(M + R) +
(1 + 2^-52)·R`` and ``|P - J^T dy| <= R``; ``t`` grows with B and S, so
``|f - e| <= dense_tolerance(M + R, 2^-52·(M + R) + (1 + 2^-52)·R, m) + R`` and
``|f - g| <=`` that ``+ |e - g|``.

Each bound is evaluated in float64 and multiplied by ``1 + 2^-30``, which covers that
evaluation's own rounding errors (as :func:`symjac.io.golden._bounds.error_bounds` does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac._exact import ExactArray, round_fraction, to_fraction
from symjac.check._rounding import float_dtype, unit_roundoff
from symjac.io.golden._held import per_object
from symjac.pool._rows import cell_counts, dense_tolerance, scatter_pair

GUARD = 1 + 2.0**-30


def verified_bounds(g: Any, qs: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """``max_abs_error[dtype]`` of ``y`` and ``dx`` per element, from the operator's own rounding
    model (the derivation above); ``g`` is the case's geometry at the golden inputs ``qs``.

    Raises:
      InputError: a float forward in ``dtype`` is not decided at these inputs (the operator's
        :meth:`forward_bound` names the box), as the verifier refuses it.
    """
    op, dt, u = g.operator, float_dtype(dtype), unit_roundoff(dtype)
    x = np.asarray(qs["x"])
    x64 = np.array([float(v) for v in x.reshape(-1)]).reshape(x.shape)

    def exact_of() -> ExactArray:
        return ExactArray.from_any(x)

    tol_y = g.from_canonical(np.asarray(op.forward_bound(g, x64, exact_of, dt, u)[1]), g.out_spatial)
    exact = op.rows(g, x64, dt, exact_of)
    assert exact.tol is not None, "an operator whose weights round gives each row entry's bound"
    dy = np.abs(g.to_canonical(np.array([float(v) for v in np.asarray(qs["dy"]).reshape(-1)])
                               .reshape(qs["dy"].shape), g.out_spatial))
    mass = scatter_pair(g, dy, np.abs(exact.rows), magnitude=False)[0]   # M
    reach = scatter_pair(g, dy, exact.tol, magnitude=False)[0]           # R
    count = np.broadcast_to(cell_counts(g).astype(np.float64), mass.shape)
    shift = 2.0**-52 * (mass + reach) + (1 + 2.0**-52) * reach
    tol_dx = g.from_canonical(dense_tolerance(mass + reach, shift, count, u) + reach, g.in_spatial)
    return {"y": _plus_rounding(tol_y, qs["y"], dt), "dx": _plus_rounding(tol_dx, qs["dx"], dt)}


def _plus_rounding(tol: np.ndarray, exact: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``(tol + |e - g|)·(1 + 2^-30)``, ``|e - g|`` the exact distance of each exact value to its
    rounding in ``dt`` (the golden value), shaped as ``exact``."""
    def off(v: Any) -> float:
        f = to_fraction(v)
        return float(abs(f - to_fraction(float(round_fraction(f, dt)))))

    rounding = per_object(exact, off, np.float64).reshape(np.asarray(exact).shape)
    return np.asarray((np.asarray(tol, dtype=np.float64).reshape(rounding.shape) + rounding) * GUARD)
