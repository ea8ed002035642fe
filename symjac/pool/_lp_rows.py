"""lp pooling in the verifier: exact rows with their rounding bounds, and the zero-window check.

lp rows are algebraic, so no float holds them exactly: each observed entry is
compared with the exact value within the gradient bound derived in
:mod:`symjac.pool._lp` (``row·|g|`` per entry, plus half an ulp for rounding the
exact value to float64); windows where that bound is not claimed (S cancels,
odd p) are not compared. The forward is compared within the forward bound.

At a window whose power sum is 0 (p >= 2: the nonsmooth point) the verifier
accepts, like a tie of max pooling, any element of the Clarke set, the dual unit
ball ``Σ|g_i|^q <= 1`` (q = p/(p − 1), even p), and also the spec's own
``zero_window`` row (the only choice for odd p, where no Clarke set exists);
anything else is ``tie_not_subgradient``. The rows seen there are named
``zero``, ``one`` or ``other`` (``stats["zero_window"]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._exact import ExactArray
from symjac.check._rounding import gamma
from symjac.pool._lp import bounds, power, round_array, row_values, windows
from symjac.pool._lp import exact_forward as lp_forward

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


def exact_rows(g: Geometry, x: np.ndarray, dtype: np.dtype[Any], u: float) -> dict[str, np.ndarray]:
    """Rows (B, W, K) rounded to float64, their tolerance, and the zero-sum windows (B, W)."""
    ex = ExactArray.from_any(x)
    w = windows(g, ex)
    rows = round_array(row_values(g, w), np.float64)
    b = bounds(g, ex, dtype)
    tol = b.row[..., None] * np.abs(rows) * (1 + 2.0**-52) + 2.0**-53 * np.abs(rows)
    tol = np.where(b.claimed[..., None], tol, np.inf)
    zero = (w.power_sum == 0) if power(g) > 1 else np.zeros(w.power_sum.shape, dtype=bool)
    return {"rows": rows, "tol": tol, "zero": np.asarray(zero, dtype=bool)}


def forward_tolerance(g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The exact forward rounded to float64 and its bound, canonical (B, W)."""
    ex = ExactArray.from_any(x)
    y = g.to_canonical(round_array(lp_forward(g, ex), np.float64), g.out_spatial)
    b = bounds(g, ex, dtype)
    tol = np.where(b.claimed, b.forward * (1 + 2.0**-52) + 2.0**-53 * np.abs(y), np.inf)
    return y, tol


def zero_row(g: Geometry) -> float:
    """The spec's zero_window row entry: 0 or 1."""
    return 1.0 if getattr(g.spec, "zero_window", "zero") == "one" else 0.0


def clarke_ok(g: Geometry, obs: np.ndarray, zero: np.ndarray, u: float) -> np.ndarray:
    """(B, W) at zero-sum windows: the row is in the dual unit ball (even p) or is the spec's row."""
    p = power(g)
    valid = g.valid[None]
    spec_row = (np.abs(obs - zero_row(g)) <= gamma(3, u) * valid).all(axis=2)
    if p % 2 == 1:
        return np.asarray(spec_row)
    q = p / (p - 1)
    n = valid.sum(axis=2)
    # Σ|o|^q with o within γ_3 of the implementation's intended values.
    ball = (np.abs(obs) ** q * valid).sum(axis=2) <= 1 + q * gamma(3, u) * n
    return np.asarray(ball | spec_row)


def zero_window_policy(g: Geometry, obs: np.ndarray, zero: np.ndarray, ok: np.ndarray, u: float) -> str | None:
    """Name the rows seen at valid zero-sum windows: ``zero``, ``one`` or ``other``."""
    sel = zero & ok
    if not sel.any():
        return None
    valid = g.valid[None]
    for name, value in (("zero", 0.0), ("one", 1.0)):
        if ((np.abs(obs - value) <= gamma(3, u)) | ~valid).all(axis=2)[sel].all():
            return name
    return "other"
