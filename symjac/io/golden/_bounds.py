"""Golden data's error bounds: ``max_abs_error[dtype]`` for every computed entry, the bound a
correct implementation computing in ``dtype`` from the golden inputs stays within
(:data:`BOUND_NOTE`), and the same in ULPs of the golden value."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from symjac.check._rounding import float_dtype, gamma, ulps, unit_roundoff
from symjac.io.golden._held import per_object
from symjac.io.golden._second import hvp_bounds, jvp_magnitudes
from symjac.io.golden._ties import tie_magnitudes
from symjac.pool._geometry import resolved


BOUND_NOTE = ("max_abs_error[dtype] bounds |implementation - golden[dtype]| for a correct implementation computing in "
              "dtype from the golden inputs: gamma(k) * M (Higham), gamma(k) = k*u/(1 - k*u), u the unit roundoff, "
              "M the sum of |terms| of the entry and k = (number of terms) + 3 (input rounding, weight and product, "
              "the golden value's own rounding), and where k*u >= 1 (gamma(k) undefined) (1 - u)^-k - 1, the bound "
              "gamma(k) stands for; an entry that is one term of weight 1 (a copy of an input: max pooling's dx where one window "
              "routes to the cell, a Jacobian entry 1) rounds nothing and has 0, as has y where the verifier's forward "
              "tolerance is 0 (max pooling: y is one of its inputs); inputs (x, dy) have none; max_ulp is max_abs_error in ULPs of golden[dtype] "
              "(null where golden[dtype] is 0 and the bound is not: terms that cancel); RoI Align, whose weights "
              "round with its sample coordinates, has for y, dx, jac_values and jvp the verifier's own rounding "
              "model instead (its forward bound; its rows' bounds, through the dense checks' tolerances) plus |exact - golden[dtype]|, "
              "so that every implementation the verifier accepts lies within them")


def _pool_magnitudes(qs: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per computed quantity of a pooling case: (M, k), the sum of |terms| of each entry
    and its number of rounded operations (see :data:`BOUND_NOTE`). Inputs (x, dy)
    have no bound: they are given, not computed."""
    rows, cols = qs["jac_rows"], qs["jac_cols"]
    weights = np.abs(per_object(qs["jac_values"], float, np.float64))
    x, dy = (np.abs(qs[k].astype(np.float64)).reshape(-1) for k in ("x", "dy"))

    copy = weights == 1  # a term x * 1 rounds nothing: an entry of one such term is a copy of a held input

    def gather(n: int, at: np.ndarray, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        count = np.bincount(at, minlength=n)
        copied = (count == 1) & (np.bincount(at, weights=copy, minlength=n) == 1)
        return np.where(copied, 0.0, np.bincount(at, weights=terms, minlength=n)), count + 3.0

    out = {}
    out["y"] = gather(qs["y"].size, rows, weights * x[cols])
    out["dx"] = gather(qs["dx"].size, cols, weights * dy[rows])
    out["jac_values"] = (np.where(copy, 0.0, weights), np.full(weights.size, 3.0))
    out.update({**tie_magnitudes(qs), **jvp_magnitudes(qs)})
    return out


def error_bounds(case: Any, qs: dict[str, np.ndarray], dtypes: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per dtype, ``max_abs_error`` per element of each float quantity (float64 arrays)."""
    if case.is_loss:
        return {dt: _loss_bounds(case, qs, dt) for dt in dtypes}
    if case.is_scatter:
        from symjac.io.golden._unpool import unpool_bounds

        return unpool_bounds(qs, dtypes)
    magnitudes = _pool_magnitudes(qs)  # the same terms for every dtype
    out: dict[str, dict[str, np.ndarray]] = {}
    for dt in dtypes:
        u = unit_roundoff(dt)
        # float64 evaluation of an exact bound: the factor covers its own rounding errors.
        out[dt] = {name: (gamma(k, u) * mass * (1 + 2.0**-30)).reshape(qs[name].shape)
                   for name, (mass, k) in magnitudes.items()}
        g = resolved(case.operator, tuple(qs["x"].shape))
        if g.operator.weighted_sum_rounding:
            out[dt]["y"] = np.where(_forward_exact(g, qs, dt), 0.0, out[dt]["y"])
        else:  # its weights round too (RoI Align's sample coordinates): the operator's own model
            from symjac.io.golden._verified import verified_bounds

            out[dt].update({k: v.reshape(qs[k].shape) for k, v in verified_bounds(g, qs, dt).items()})
    return out


def _forward_exact(g: Any, qs: dict[str, np.ndarray], dtype: str) -> np.ndarray:
    """Where the verifier's forward tolerance (the operator's :meth:`forward_bound`) is 0:
    a correct forward in ``dtype`` is exact there (max pooling: y is one of its inputs, and
    rounding the inputs to ``dtype`` rounds their maximum alike)."""
    from symjac._exact import ExactArray

    x = np.asarray(qs["x"])
    tol = g.operator.forward_bound(g, x.astype(np.float64), lambda: ExactArray.from_any(x), float_dtype(dtype),
                                   unit_roundoff(dtype))[1]
    return np.asarray(g.from_canonical(tol, g.out_spatial) == 0).reshape(qs["y"].shape)


def _loss_bounds(case: Any, qs: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The loss verifier's own bounds (value and derivative, from the expression's
    rounding depth and condition) plus half an ULP for the golden value's rounding, at the
    case's inputs, which ``dtype`` holds (:mod:`symjac.io.golden._held`).
    """
    from symjac.check._rounding import float_dtype, ulp_mp
    from symjac.loss import _numbers
    from symjac.loss._evaluate import evaluate_checked
    from symjac.loss._bounds import Bounds, ForwardSums
    from symjac.loss._spec import kind_of
    from symjac.verifiers.loss._inputs import prepare_inputs

    dt = float_dtype(dtype)
    label = qs.get("label")
    if label is not None and kind_of(case.operator).labels_are_indices(case.operator):  # class indices as integers
        label = np.array([int(v) for v in label.reshape(-1)], dtype=np.int64).reshape(label.shape)
    pred, label, upstream, rounded = prepare_inputs(case.operator, qs["pred"], label, qs.get("upstream"), dt)
    assert not rounded, "golden data is computed at inputs its dtypes hold (symjac.io.golden._held)"
    ev = evaluate_checked(case.operator, pred, label, upstream, values=True, derivatives=True, bounds=True)
    bounds = Bounds(ev, dt)
    sums = ForwardSums(bounds)
    value = list(sums.errs) if case.operator.reduction == "none" else [sums.at()[1]]
    derivative = list(bounds.derivative(case.operator.scale).reshape(-1))

    def total(bs: list[Any], exact: np.ndarray) -> np.ndarray:
        with _numbers.context():
            return np.array([float((b + ulp_mp(dt, v) / 2) * (1 + _numbers.number(2.0**-30)))
                             for b, v in zip(bs, exact.reshape(-1))]).reshape(exact.shape)

    return {"value": total(value, qs["value"]), "derivative": total(derivative, qs["derivative"]),
            **hvp_bounds(case.operator, qs, pred, label, upstream, dt)}


def ulp_bound(bound: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """``bound`` in ULPs of the golden value; NaN where that value is 0 but the bound is
    not (terms that cancel exactly): a ULP of 0 is the smallest subnormal, so the count
    would be astronomical (float32) or overflow (float64) and say nothing."""
    golden = rounded.astype(np.float64)
    with np.errstate(over="ignore"):
        out = ulps(bound, golden, rounded.dtype)
    return np.asarray(np.where((golden == 0) & (bound > 0), np.nan, out))


def ulp_list(bound: np.ndarray, rounded: np.ndarray) -> list[float | None]:
    """:func:`ulp_bound` as JSON: null where it is NaN (JSON has no NaN or Infinity)."""
    return [None if math.isnan(v) else v for v in ulp_bound(bound, rounded).reshape(-1).tolist()]
