"""Jacobian rows of pooling, per window: the exact ones at x, and what a backward was seen to send.

A row is (B, W, K): for batch item b and window w, the derivative of the window's
output with respect to each of its K cell slots (``g.cells[w]``; invalid slots are
padding and stay 0). Windows are separable, so rows are all the verifier needs:
``J^T v`` is a scatter of ``v[b, w] · row[b, w, k]`` into cells.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from symjac._exact import ExactArray
from symjac.check._rounding import gamma
from symjac.pool._geometry import Geometry
from symjac.pool._jacobian import routes
from symjac.pool._symbolic import constant_ties, tie_members, window_classes


@dataclasses.dataclass
class Rows:
    """What the backward sent to each cell of each window (B, W, K), as probed so far."""

    obs: np.ndarray  # (B, W, K) float64
    stray: dict[tuple[int, int], list[tuple[int, int, float]]]  # (b, w) -> [(b', cell, value)] outside the window
    one_hot: set[tuple[int, int]]  # windows whose row came from a one-hot probe (exact, not superposed)


@dataclasses.dataclass
class ExactRows:
    """The exact Jacobian rows at one x: policy "first" values, and for max pooling the
    tie sets (member) and which windows tie (|I| >= 2)."""

    rows: np.ndarray
    member: np.ndarray
    tied: np.ndarray
    gap: np.ndarray  # (B, W) max minus runner-up (inf for avg): finite differences need gap > 2h
    held: np.ndarray  # (B, W, K) the exact value is representable in the dtype: compared exactly
    pad_tied: np.ndarray  # (B, W) Pool(pad_value=0): a pad cell attains the max (then 0 is in the Clarke set)
    tol: np.ndarray | None = None  # (B, W, K) lp: the derived absolute bound per entry (replaces γ_3)


def exact_rows(g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> ExactRows:
    """The exact rows at ``x`` (policy "first" at ties), from the window-class templates.

    lp pooling: rows rounded from the exact algebraic values, with their bounds; its
    "tied" windows are those with power sum 0 (:mod:`symjac.verifiers._pool_lp`).
    """
    if g.spec.mode == "lp":
        return _lp_rows(g, x, dtype)
    ex = ExactArray.from_any(x) if g.spec.mode == "max" else None
    r = routes(g, ex, "first")
    K = g.cells.shape[1]
    rows = np.zeros((g.batch, g.n_out, K))
    member = np.zeros((g.batch, g.n_out, K), dtype=bool)
    gap = np.full((g.batch, g.n_out), np.inf)
    pad_tied = np.zeros((g.batch, g.n_out), dtype=bool)
    dyadic = np.ones((g.batch, g.n_out, K), dtype=bool)
    i = 0
    xc = g.to_canonical(x).astype(np.float64)
    for c in window_classes(g):
        slots = np.array(c.slots)
        for j in range(len(c.slots)):
            weight = np.broadcast_to(r.routes[i].weight, (g.batch, c.windows.size))
            rows[:, c.windows, c.slots[j]] = weight / r.q
            reduced = r.q // np.gcd(weight, r.q)  # the value's denominator in lowest terms
            dyadic[:, c.windows, c.slots[j]] = (reduced & (reduced - 1)) == 0
            i += 1
        if ex is not None:
            values = g.to_canonical(ex.num)[:, c.cells]
            member[:, c.windows[:, None], slots[None, :]] = tie_members(c.template, values)
            pad_tied[:, c.windows] = constant_ties(c.template, values)
            vals = xc[:, c.cells]
            if c.template.constant is not None:  # the pad cells' constant competes for the max too
                vals = np.concatenate([vals, np.full(vals.shape[:-1] + (1,), float(c.template.constant))], axis=-1)
            vals = np.sort(vals, axis=-1)
            gap[:, c.windows] = vals[..., -1] - vals[..., -2] if vals.shape[-1] > 1 else np.inf
    tied = member.sum(axis=2) + pad_tied >= 2
    with np.errstate(over="ignore", under="ignore"):
        held = dyadic & (rows.astype(dtype).astype(np.float64) == rows)
    return ExactRows(rows, member, tied, gap, held, pad_tied)


def _lp_rows(g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> ExactRows:
    from symjac.check._rounding import unit_roundoff
    from symjac.verifiers._pool_lp import exact_rows as lp_rows

    found = lp_rows(g, x, dtype, unit_roundoff(dtype))
    zero = found["zero"]
    member = zero[..., None] & g.valid[None]
    shape = zero.shape
    return ExactRows(found["rows"], member, zero, np.full(shape, np.inf), np.zeros(member.shape, dtype=bool),
                     np.zeros(shape, dtype=bool), tol=found["tol"])


def scatter(g: Geometry, per_window: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sum_w per_window[b, w] * rows[b, w, k]`` into cells: J^T v for row arrays."""
    out = np.zeros((g.batch, g.n_in))
    for k in range(g.cells.shape[1]):
        ok = g.valid[:, k]
        out[:, g.cells[ok, k]] += per_window[:, ok] * rows[:, ok, k]
    return out


def tolerance(exact: np.ndarray, u: float, terms: int | np.ndarray = 1) -> np.ndarray:
    """An entry from ``terms`` rounded products, one rounded weight and one rounded output:
    ``γ_{terms+2}·|e|`` (plus a 2^-60 relative guard for float64 noise in the bound itself)."""
    return np.asarray(gamma(np.asarray(terms) + 2, u) * np.abs(exact) + 2.0**-60 * np.abs(exact))


def row_tolerance(exact: ExactRows, u: float) -> np.ndarray:
    """One window's contribution in a probe: exact where the dtype holds the exact value,
    else one rounding of the weight and one of the product (γ_3); lp: its derived bound."""
    if exact.tol is not None:
        return exact.tol
    return np.where(exact.held, 0.0, tolerance(exact.rows, u))
