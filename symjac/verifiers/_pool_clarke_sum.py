"""A dense backward call at tied inputs: is its dx ``J^T dy`` for *some* element of the Clarke set?

At a window tied on the cells I, any row ``λ >= 0`` on I with ``Σ λ = 1`` is a valid
generalized derivative, and a backward may choose another one on every call (a random
tied cell, atomics racing to the same maximum). A dense call then need not equal the
superposition of the rows the probes saw, yet be right: its dx is right exactly when

    dx = Σ_{untied w} dy_w·row_w + Σ_{tied w} dy_w·λ_w,   λ_w in the simplex on I_w.

With the untied windows' exact share taken off (the residual r), this is a flow problem
per batch slice (windows of one slice read cells of that slice only): a tied window with
``dy_w > 0`` supplies ``dy_w`` to its tied cells, one with ``dy_w < 0`` takes ``|dy_w|``
from them, and each tied cell must end with its residual ``r_c`` (a source where it is
negative, a sink where positive). The λ exist iff the maximum flow saturates every
supply and demand (max-flow/min-cut), decided here with networkx. Cells no tied window
routes to must have r within their bound. The rounding slack is the sum of the cells'
bounds over the slice (sums of dy values: exact for the generated quarter-integers
unless a dtype's integers run out). Windows a pad cell ties (``Pool(pad_value=0)``,
whose Clarke rows may send less than dy_w anywhere) are not decided here: those slices
stay as the superposition check found them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from symjac.check._rounding import gamma
from symjac.verifiers._pool_rows import ExactRows, cell_counts, scatter

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

#: Tied windows of one batch slice beyond which the flow is not built (the slice stays off).
MAX_FLOW_WINDOWS = 1 << 16


def clarke_sum_slices(g: Geometry, exact: ExactRows, dy: np.ndarray, dx: np.ndarray, tol: np.ndarray,
                      u: float, slices: np.ndarray) -> set[int]:
    """The batch slices among ``slices`` where ``dx`` (canonical) is ``J^T dy`` (canonical
    ``dy``) for some Clarke element at every tied window, within ``tol`` per cell (widened
    at tied cells to γ_{m+2} times the |dy| every tied window could route there)."""
    import networkx as nx

    untied = scatter(g, dy * ~exact.tied, exact.rows)  # the unique part: exact rows at untied windows
    could = scatter(g, np.abs(dy) * exact.tied, exact.member.astype(np.float64))
    tol = tol + gamma(cell_counts(g) + 2, u) * could
    found = set()
    for b in (int(s) for s in slices):
        wins = np.flatnonzero(exact.tied[b])
        if wins.size == 0 or wins.size > MAX_FLOW_WINDOWS or exact.pad_tied[b, wins].any():
            continue
        r = dx[b] - untied[b]
        routed = np.zeros(g.n_in, dtype=bool)
        graph = nx.DiGraph()
        supply = demand = 0.0
        for w in wins.tolist():
            cells = g.cells[w][exact.member[b, w] & g.valid[w]]
            routed[cells] = True
            d = float(dy[b, w])
            if d > 0:
                graph.add_edge("s", ("w", w), capacity=d)
                graph.add_edges_from((("w", w), ("c", int(c))) for c in cells)  # no capacity: unbounded
                supply += d
            elif d < 0:
                graph.add_edge(("w", w), "t", capacity=-d)
                graph.add_edges_from((("c", int(c)), ("w", w)) for c in cells)
                demand -= d
        if (np.abs(r[~routed]) > tol[b, ~routed]).any():
            continue  # gradient where no tied window may route any
        for c in np.flatnonzero(routed).tolist():
            if r[c] > 0:
                graph.add_edge(("c", c), "t", capacity=float(r[c]))
                demand += float(r[c])
            elif r[c] < 0:
                graph.add_edge("s", ("c", c), capacity=float(-r[c]))
                supply += float(-r[c])
        slack = float(tol[b, routed].sum()) + 2.0**-60 * max(supply, demand)
        if abs(supply - demand) > slack:
            continue
        flow = nx.maximum_flow_value(graph, "s", "t") if "s" in graph and "t" in graph else 0.0
        if flow >= supply - slack:
            found.add(b)
    return found
