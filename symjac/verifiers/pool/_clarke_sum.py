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
negative, a sink where positive). Each cell's bound is its own: what the windows bring to
cell c, net, must lie in ``[r_c - tol_c, r_c + tol_c]``, a flow with lower and upper
bounds on its edges; the λ exist iff that flow exists, decided exactly (integers, one
maximum flow with networkx: max-flow/min-cut). Cells no tied window routes to must have
r within their bound. A window a pad cell ties (``Pool(pad_value=0)``) may send any
part of its dy_w to the pad, where it reaches no cell: an unbounded edge to the sink
(from the source for dy_w < 0).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac.check._rounding import gamma
from symjac.pool._rows import ExactRows, cell_counts, scatter

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

#: Tied windows of one batch slice beyond which the flow is not built (the slice stays off).
MAX_FLOW_WINDOWS = 1 << 16


def clarke_sum_slices(g: Geometry, exact: ExactRows, dy: np.ndarray, dx: np.ndarray, tol: np.ndarray,
                      u: float, slices: np.ndarray) -> set[int]:
    """The batch slices among ``slices`` where ``dx`` (canonical) is ``J^T dy`` (canonical
    ``dy``) for some Clarke element at every tied window, within ``tol`` per cell (widened
    at tied cells to γ_{m+2} times the |dy| every tied window could route there)."""
    untied = scatter(g, dy * ~exact.tied, exact.rows)  # the unique part: exact rows at untied windows
    could = scatter(g, np.abs(dy) * exact.tied, exact.member.astype(np.float64))
    tol = tol + gamma(cell_counts(g) + 2, u) * could
    found = set()
    for b in (int(s) for s in slices):
        wins = np.flatnonzero(exact.tied[b])
        if wins.size == 0 or wins.size > MAX_FLOW_WINDOWS:
            continue
        r = dx[b] - untied[b]
        routed = np.zeros(g.n_in, dtype=bool)
        edges: list[tuple[Any, Any, float, float | None]] = []  # (from, to, lower, upper; None: unbounded)
        for w in wins.tolist():
            cells = g.cells[w][exact.member[b, w] & g.valid[w]]
            routed[cells] = True
            d = float(dy[b, w])
            pad = bool(exact.pad_tied[b, w])  # a pad cell ties: λ's share there reaches no cell
            if d > 0:
                edges.append(("s", ("w", w), d, d))
                edges.extend((("w", w), ("c", int(c)), 0.0, None) for c in cells)
                if pad:
                    edges.append((("w", w), "t", 0.0, None))
            elif d < 0:
                edges.append((("w", w), "t", -d, -d))
                edges.extend((("c", int(c)), ("w", w), 0.0, None) for c in cells)
                if pad:
                    edges.append(("s", ("w", w), 0.0, None))
        if (np.abs(r[~routed]) > tol[b, ~routed]).any():
            continue  # gradient where no tied window may route any
        for c in np.flatnonzero(routed).tolist():
            rc, tc = float(r[c]), float(tol[b, c])
            if rc + tc > 0:  # what the windows bring to c, net: in [r_c - tol_c, r_c + tol_c]
                edges.append((("c", c), "t", max(0.0, rc - tc), rc + tc))
            if tc - rc > 0:
                edges.append(("s", ("c", c), max(0.0, -rc - tc), tc - rc))
        if _feasible(edges):
            found.add(b)
    return found


def _feasible(edges: list[tuple[Any, Any, float, float | None]]) -> bool:
    """Whether a flow meets every edge's lower and upper bound, with ``t -> s`` unbounded (a
    circulation): the textbook reduction to one maximum flow (each lower bound moved into the
    nodes' excess, a super source and sink for those). Every bound is a float, a dyadic rational,
    so all of them times their largest denominator are integers: the decision is exact."""
    import networkx as nx

    scale = max((Fraction(v).denominator for e in edges for v in e[2:] if v), default=1)
    graph = nx.DiGraph()
    graph.add_edge("t", "s")  # no capacity: unbounded
    excess: dict[Any, int] = {}
    for a, z, lo, hi in edges:
        low = int(Fraction(lo) * scale)
        if hi is None:
            graph.add_edge(a, z)
        elif int(Fraction(hi) * scale) > low:
            graph.add_edge(a, z, capacity=int(Fraction(hi) * scale) - low)
        excess[z] = excess.get(z, 0) + low
        excess[a] = excess.get(a, 0) - low
    need = 0
    for node, e in excess.items():
        if e > 0:
            graph.add_edge("S", node, capacity=e)
            need += e
        elif e < 0:
            graph.add_edge(node, "T", capacity=-e)
    if need == 0:
        return True
    return bool(nx.maximum_flow_value(graph, "S", "T") == need)
