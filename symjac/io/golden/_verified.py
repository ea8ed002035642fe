"""Golden bounds of ``y``, ``dx``, ``jac_values`` and ``jvp`` from the operator's own rounding model, for an operator whose
weights themselves round in the dtype (:attr:`~symjac.pool._ops._protocol.Operator.weighted_sum_rounding`
False: RoI Align, whose bilinear weights come from sample coordinates such as a third of a box).

Golden's weighted-sum model (``γ_k·Σ|terms|``, :data:`symjac.io.golden._bounds.BOUND_NOTE`) takes
the weights as exact; where they are not, a correct implementation may be further off than it says
(at bins a third of a box ONNX Runtime's float32 RoiAlign y was up to 10x its per-element bound,
and a transcription of torchvision's kernels up to 10x in dx and 21x in the Jacobian's entries). The verifier's forward bound and rows do model the coordinates, so golden reads them
here: there is one rounding model of the operator, and everything the verifier accepts as correct
lies within the golden bounds by the derivation below. Write ``e`` for the exact value, ``g`` for
``golden[dtype]`` (``e`` rounded once) and ``f`` for a float result the verifier accepts; all at
the golden inputs, which the dtype holds (:mod:`symjac.io.golden._held`).

``y``: the verifier accepts ``|f - fl64(e)| <= T``, ``T`` the operator's
:meth:`~symjac.pool._ops._protocol.Operator.forward_bound` at x; so
``|f - g| <= T + 2^-53·|e| + |e - g|``, and ``|e - g|`` is computed exactly (0 where the dtype
holds ``e``).

``jac_values``: the verifier accepts each entry of a row within ``ρ`` of ``J``'s (below); so
``|f - g| <= ρ + |e - g|``.

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

``jvp`` (``J t``): the verifier accepts rows within ``ρ`` as for ``dx`` and a dense JVP within
``superposition_tolerance(B_t, K)`` (:func:`symjac.pool._rows.superposition_tolerance`, K slots a
window) of the float64 superposition ``fl64(Σ_k obs_k·t_k)``, ``B_t = Σ_k |obs_k·t_k| <= M_t + R_t``
(``M_t = Σ_k |J_k|·|t_k|``, ``R_t = Σ_k ρ_k·|t_k|``), which is within ``K·2^-52·B_t`` of the exact
superposition, itself within ``R_t`` of ``J t``; so ``|f - g| <= superposition_tolerance(M_t + R_t, K)
+ K·2^-52·(M_t + R_t) + R_t + |e - g|``.

Each bound is evaluated in float64 and multiplied by ``1 + 2^-30``, which covers that
evaluation's own rounding errors (as :func:`symjac.io.golden._bounds.error_bounds` does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac._exact import ExactArray, round_fraction, to_fraction
from symjac.check._rounding import float_dtype, unit_roundoff
from symjac.io.golden._held import per_object
from symjac.pool._rows import cell_counts, dense_tolerance, scatter_pair, superposition_tolerance

GUARD = 1 + 2.0**-30


def verified_bounds(g: Any, qs: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """``max_abs_error[dtype]`` of ``y``, ``dx``, ``jac_values`` (and ``jvp``, where written) per element, from the operator's own rounding
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

    e_y, tol_y, _ = op.forward_bound(g, x64, exact_of, dt, u)
    tol_y = g.from_canonical(np.asarray(tol_y) + 2.0**-53 * np.abs(e_y), g.out_spatial)
    exact = op.rows(g, x64, dt, exact_of)
    assert exact.tol is not None, "an operator whose weights round gives each row entry's bound"
    out = {"y": _plus_rounding(tol_y, qs["y"], dt), "jac_values": _entries(g, qs, exact.tol, dt)}
    dy = np.abs(g.to_canonical(np.array([float(v) for v in np.asarray(qs["dy"]).reshape(-1)])
                               .reshape(qs["dy"].shape), g.out_spatial))
    mass = scatter_pair(g, dy, np.abs(exact.rows), magnitude=False)[0]   # M
    reach = scatter_pair(g, dy, exact.tol, magnitude=False)[0]           # R
    count = np.broadcast_to(cell_counts(g).astype(np.float64), mass.shape)
    shift = 2.0**-52 * (mass + reach) + (1 + 2.0**-52) * reach
    tol_dx = g.from_canonical(dense_tolerance(mass + reach, shift, count, u) + reach, g.in_spatial)
    out["dx"] = _plus_rounding(tol_dx, qs["dx"], dt)
    if "jvp" in qs:
        t = np.abs(g.gather(g.to_canonical(np.array([float(v) for v in np.asarray(qs["t"]).reshape(-1)])
                                           .reshape(x.shape))))
        slots = g.cells.shape[1]
        mass_t, reach_t = (np.abs(exact.rows) * t).sum(axis=-1), (exact.tol * t).sum(axis=-1)
        tol_jvp = superposition_tolerance(mass_t + reach_t, slots, u) + slots * 2.0**-52 * (mass_t + reach_t) + reach_t
        out["jvp"] = _plus_rounding(g.from_canonical(tol_jvp, g.out_spatial), qs["jvp"], dt)
    return out


def _entries(g: Any, qs: dict[str, np.ndarray], tol: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``ρ + |e - g|`` per entry of the Jacobian's COO (``jac_rows``, ``jac_cols``: flat indices of
    the spec's y and x), ``ρ`` the bound of that (window, slot) of the rows, found by its indices."""
    y_at = g.to_canonical(np.arange(qs["y"].size).reshape(qs["y"].shape), g.out_spatial)  # (B, W) flat y index
    x_at = g.to_canonical(np.arange(qs["x"].size).reshape(qs["x"].shape))                 # (B, n_in) flat x index
    b, w, k = np.nonzero(np.broadcast_to(g.valid[None], tol.shape))
    keys = y_at[b, w].astype(np.int64) * qs["x"].size + x_at[b, g.cells[w, k]].astype(np.int64)
    order = np.argsort(keys, kind="stable")
    want = np.asarray(qs["jac_rows"], dtype=np.int64) * qs["x"].size + np.asarray(qs["jac_cols"], dtype=np.int64)
    at = np.minimum(np.searchsorted(keys[order], want), max(order.size - 1, 0))
    assert order.size == 0 and want.size == 0 or bool(np.all(keys[order][at] == want)), \
        "every Jacobian entry is a (window, slot) of the rows"
    return _plus_rounding(tol[b, w, k][order][at] if want.size else np.zeros(0), qs["jac_values"], dt)


def _plus_rounding(tol: np.ndarray, exact: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """``(tol + |e - g|)·(1 + 2^-30)``, ``|e - g|`` the exact distance of each exact value to its
    rounding in ``dt`` (the golden value), shaped as ``exact``."""
    def off(v: Any) -> float:
        f = to_fraction(v)
        return float(abs(f - to_fraction(float(round_fraction(f, dt)))))

    rounding = per_object(exact, off, np.float64).reshape(np.asarray(exact).shape)
    return np.asarray((np.asarray(tol, dtype=np.float64).reshape(rounding.shape) + rounding) * GUARD)
