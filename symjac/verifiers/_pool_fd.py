"""The second oracle: compressed central differences of the implementation's own forward.

Inputs that feed no common window are perturbed together (Curtis–Powell–Reid), so
the cost is 2 × (input colours) forward calls, not 2n. With h = 1/4 every perturbed
input stays exact in the dtype (checked), and each forward output carries at most
``B_w = γ_{n+1}·Σ|x|/d`` (avg; max is exact), so ``(y+ - y-)/(2h)`` is within
``(B_w(x+) + B_w(x-))/(2h)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.check._report import Finding, fmt_index, listing
from symjac.check._rounding import gamma
from symjac.pool._geometry import Geometry
from symjac.pool._graph import input_colouring
from symjac.verifiers._pool_rows import Rows, tolerance

STEP = 0.25


def finite_differences(g: Geometry, forward: Callable[[np.ndarray], np.ndarray | None], x: np.ndarray,
                       dtype: np.dtype[Any], u: float) -> tuple[np.ndarray, np.ndarray] | None:
    """FD Jacobian rows (B, W, K) and their error bounds, or None when the forward failed
    or ``x ± h`` is not exact in the dtype."""
    h = STEP
    xc = g.to_canonical(x).astype(np.float64)
    if not (np.array_equal((xc + h).astype(dtype), xc + h) and np.array_equal((xc - h).astype(dtype), xc - h)):
        return None
    in_colours, n = input_colouring(g)
    fd = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
    tol = np.zeros_like(fd)
    n_cells = g.valid.sum(axis=1)
    safe = np.where(g.valid, g.cells, 0)
    for colour in range(n):
        e = (in_colours == colour).astype(np.float64)
        plus = forward(g.from_canonical(xc + h * e, g.in_spatial).astype(dtype))
        minus = forward(g.from_canonical(xc - h * e, g.in_spatial).astype(dtype))
        if plus is None or minus is None:
            return None
        p, m = g.to_canonical(plus, g.out_spatial), g.to_canonical(minus, g.out_spatial)
        slope = (p - m) / (2 * h)
        hit = (in_colours[safe] == colour) & g.valid  # (W, K): at most one per window
        if g.spec.mode == "avg":
            mass_p = np.abs(np.where(g.valid, (xc + h * e)[:, safe], 0)).sum(axis=2) / g.divisor
            mass_m = np.abs(np.where(g.valid, (xc - h * e)[:, safe], 0)).sum(axis=2) / g.divisor
            err = gamma(n_cells + 1, u) * (mass_p + mass_m) / (2 * h)
        else:
            err = np.zeros_like(slope)
        err = err + 2.0**-52 * np.abs(slope)
        w_idx, k_idx = np.nonzero(hit)
        fd[:, w_idx, k_idx] = slope[:, w_idx]
        tol[:, w_idx, k_idx] = err[:, w_idx]
    return fd, tol


def check_fd(g: Geometry, rows: Rows, fd: np.ndarray, fd_tol: np.ndarray, usable: np.ndarray, u: float,
             findings: list[Finding]) -> bool:
    """Backward rows vs central differences, on the ``usable`` windows (FD exact enough there)."""
    bad = ((np.abs(rows.obs - fd) > fd_tol + tolerance(rows.obs, u)) & g.valid[None]).any(axis=2)
    for key in rows.stray:
        bad[key] = True
    where = np.argwhere(bad & usable)
    if where.size:
        names = [fmt_index(g.output_index(b, w)) for b, w in where.tolist()]
        b, w = where[0].tolist()
        valid = g.valid[w]
        findings.append(Finding(
            "not_fd_consistent",
            f"backward disagrees with central differences of its own forward at {len(where)} windows: {listing(names)}",
            window=g.output_index(b, w), cells=tuple(g.input_index(b, int(c)) for c in g.cells[w][valid]),
            expected=[float(v) for v in fd[b, w][valid]], observed=[float(v) for v in rows.obs[b, w][valid]]))
    return not where.size
