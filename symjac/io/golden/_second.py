"""Forward mode and second order in golden data: ``t`` and ``jvp`` (pooling), ``v`` and ``hvp`` (losses).

- pooling (rational operators): a tangent ``t`` of the input's shape (distinct dyadic
  values from the case's seed, exact in every dtype) and ``jvp = J(x)·t``, exact, with
  the bound of ``y`` (a window's entry sums its cells' terms: ``γ(m + 3)·Σ|J_wc·t_c|``).
  The second derivative of average and max pooling is 0 off ties and is not written.
- losses: a direction ``v`` of pred's shape and ``hvp = S·∂²L/∂pred²·v``
  (:mod:`symjac.loss._hessian`, mpmath at >= 60 digits), with the bound
  :func:`symjac.verify_loss` derives for an hvp (:meth:`HessianEvaluation.bound`) plus
  half an ULP of the golden value. At a kink (no second derivative) no ``hvp`` is written.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError

#: Significand bits every dtype holds (bfloat16's 8): ``t`` and ``v`` are exact in all of them.
_EXACT_BITS = 8

NOTE = ("t (pooling) and v (losses) are directions (distinct dyadic values, from the case's seed, exact in every dtype); "
        "jvp = J(x)·t (pooling, bounded as y) and hvp = S·d²L/dpred²·v (losses, mpmath at >= 60 digits; bounded as "
        "symjac.verify_loss(hvp=...) bounds an hvp, plus half an ULP of the golden value; absent at a kink)")


def _direction(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Distinct quarter-integer magnitudes (at most 2^8 distinct) with random signs, as Fractions."""
    rng = np.random.default_rng(seed + 11)
    n = int(np.prod(shape))
    values = (rng.permutation(n) % 2**_EXACT_BITS + 1) * rng.choice([-1, 1], size=n)
    out = np.empty(n, dtype=object)
    out[:] = [Fraction(int(k), 4) for k in values]
    return out.reshape(shape)


def second_quantities(case: Any, qs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The direction and the JVP (pooling) or HVP (losses) of a case."""
    seed = int(case.inputs.get("seed", 0))
    if case.is_loss:
        from symjac.loss._hessian import hessian_of

        v = _direction(qs["pred"].shape, seed)
        try:
            h = hessian_of(case.operator, qs["pred"], qs.get("label"), qs.get("upstream"))
        except InputError:
            return {}  # at a kink: no second derivative
        return {"v": v, "hvp": np.asarray(h.hvp(v), dtype=object)}
    rows, cols, values = qs["jac_rows"], qs["jac_cols"], qs["jac_values"]
    t = _direction(qs["x"].shape, seed)
    flat_t = t.reshape(-1)
    out = np.empty(qs["y"].size, dtype=object)
    out[:] = [Fraction(0)] * out.size
    for r, c, w in zip(rows.tolist(), cols.tolist(), values):
        out[r] += Fraction(w) * flat_t[c]
    return {"t": t, "jvp": out.reshape(qs["y"].shape)}


def jvp_magnitudes(qs: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(Σ|terms|, rounded operations) per ``jvp`` entry (see ``symjac.io.golden._write.BOUND_NOTE``)."""
    if "jvp" not in qs:
        return {}
    rows, cols = qs["jac_rows"], qs["jac_cols"]
    weights = np.abs(np.array([float(Fraction(v)) for v in qs["jac_values"]], dtype=np.float64))
    t = np.abs(np.array([float(v) for v in qs["t"].reshape(-1)], dtype=np.float64))
    n = qs["jvp"].size
    return {"jvp": (np.bincount(rows, weights=weights * t[cols], minlength=n), np.bincount(rows, minlength=n) + 3.0)}


def hvp_bounds(loss: Any, qs: dict[str, np.ndarray], pred: Any, label: Any, upstream: Any,
               dt: Any) -> dict[str, np.ndarray]:
    """``hvp``'s bound in ``dt`` (inputs already rounded to it, exactly)."""
    if "hvp" not in qs:
        return {}
    from symjac.check._rounding import ulp_mp
    from symjac.loss import _numbers
    from symjac.loss._hessian import hessian_of

    v = np.array([float(x) for x in qs["v"].reshape(-1)]).reshape(qs["v"].shape)
    bound = hessian_of(loss, pred, label, upstream).bound(v, dt)
    with _numbers.context():
        total = [float((_numbers.from_mpf(b) + ulp_mp(dt, _numbers.from_mpf(e)) / 2) * (1 + _numbers.number(2.0**-30)))
                 for b, e in zip(bound.reshape(-1), qs["hvp"].reshape(-1))]
    return {"hvp": np.array(total).reshape(qs["hvp"].shape)}
