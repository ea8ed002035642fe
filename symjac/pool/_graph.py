"""Window graphs and probe plans.

The **window graph** (networkx ``DiGraph``) joins input cells to the output windows
that read them, each edge weighted by the exact ∂y/∂x; it is for inspection and
diagnosis at small shapes.

The **probe plan** colours the conflict graph of the windows (two windows conflict
when they share an input cell): windows of one colour touch disjoint cells, so one
backward call with dy supported on one colour recovers each of its windows' rows of
the implementation's Jacobian. Windows are separable, so two windows conflict iff
they overlap on every axis: the conflict graph is the strong product of the small
per-axis conflict graphs. Each axis is coloured greedily in index order and a window's colour
is the tuple of its axis colours — a valid colouring for any image size, optimal
(``ceil(k/s)`` colours per axis) for interval-like axes. The same construction on
the inputs (two inputs conflict when some window reads both) gives the
Curtis–Powell–Reid groups for compressed finite differences.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import networkx as nx
import numpy as np
import sympy

from symjac.pool._geometry import AxisWindows, Geometry, resolve
from symjac.pool._jacobian import _input
from symjac.pool._stamp import stamp
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._symbolic import window_classes
from symjac.pool._ties import max_members


def _colour(n: int, node: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Greedy colouring in index order of nodes 0..n-1 joined when they share a key
    (``node[i]`` has ``key[i]``): each node takes the least colour none of its lower
    neighbours has. Optimal for interval graphs, as an axis of windows is.

    The pairs are never listed (a key held by r nodes has r²/2 of them: a 1-D kernel
    of 255 at stride 1 has 255 windows on every cell). Each key keeps the colours its
    nodes took so far, as the bits of a Python int; a node's lower neighbours are the
    nodes already coloured that share one of its keys, so the colours they have are the
    union of its keys' sets, and its colour is the lowest bit not in it. Work is
    O(incidences x words), where the pairwise graph took O(sum over keys of r²).
    """
    order = np.argsort(node, kind="stable")
    bounds = np.searchsorted(node[order], np.arange(n + 1)).tolist()
    by_node = key[order]
    keys = by_node.tolist()
    used = np.zeros(int(key.max()) + 1 if key.size else 0, dtype=object)  # Python ints: any number of colours
    colours = []
    for i in range(n):
        lo, hi = bounds[i], bounds[i + 1]
        if hi - lo > 32:  # many keys (a large kernel): one NumPy pass over them
            mine = by_node[lo:hi]
            sets = used[mine]
            taken = int(np.bitwise_or.reduce(sets))
            bit = (taken + 1) & ~taken  # the lowest bit not taken
            used[mine] = sets | bit
        else:
            taken = 0
            for k in keys[lo:hi]:
                taken |= used[k]
            bit = (taken + 1) & ~taken
            for k in keys[lo:hi]:
                used[k] |= bit
        colours.append(bit.bit_length() - 1)
    return np.array(colours, dtype=np.int64)


def _axis_window_colours(axis: AxisWindows) -> np.ndarray:
    """Windows of an axis, joined when they read a common cell, coloured."""
    windows, slots = np.nonzero(axis.valid)
    return _colour(axis.cells.shape[0], windows, axis.cells[windows, slots])


def _axis_input_colours(axis: AxisWindows) -> np.ndarray:
    """Cells of an axis, joined when some window reads both, coloured."""
    windows, slots = np.nonzero(axis.valid)
    return _colour(axis.length, axis.cells[windows, slots], windows)


def _per_axis(geometry: Geometry, colour: Any) -> tuple[np.ndarray, int]:
    """Colour each axis's conflict graph (equal axes, as of a square map, once) and combine; a table
    geometry (RoI pooling: no axes) is coloured whole, as one axis."""
    if not geometry.axes:
        windows, slots = np.nonzero(geometry.valid)
        cells = geometry.cells[windows, slots]
        found = (_colour(geometry.n_out, windows, cells) if colour is _axis_window_colours
                 else _colour(geometry.n_in, cells, windows))
        found.setflags(write=False)
        return found, int(found.max(initial=-1)) + 1
    done: dict[tuple[Any, ...], np.ndarray] = {}
    colours = []
    for a in geometry.axes:
        key = (a.length, a.cells.shape, a.cells.tobytes(), a.valid.tobytes())
        if key not in done:
            done[key] = colour(a)
        colours.append(done[key])
    return _combine(colours)


def _combine(per_axis: list[np.ndarray]) -> tuple[np.ndarray, int]:
    radix = [int(c.max()) + 1 for c in per_axis]
    grid = np.meshgrid(*per_axis, indexing="ij")
    colours = np.ravel_multi_index(tuple(g.reshape(-1) for g in grid), radix)
    colours.setflags(write=False)  # cached and shared
    return colours, math.prod(radix)


@functools.lru_cache(maxsize=64)
def window_colouring(geometry: Geometry) -> tuple[np.ndarray, int]:
    """(colour of each window, number of colours); same-colour windows share no cell."""
    return _per_axis(geometry, _axis_window_colours)


def subset_colouring(geometry: Geometry, windows: np.ndarray) -> tuple[np.ndarray, int]:
    """(colour of each of ``windows``, number of colours): windows of one colour share no cell.

    The fewer-coloured of two valid colourings: the probe plan's (:func:`window_colouring`)
    restricted to ``windows`` and renumbered, and, for a few windows apart from each other
    (a probe of the windows that tie at one input), a greedy colouring of their own conflict
    graph (:func:`_colour`), which needs as many colours as windows meet at one cell among them.
    """
    restricted = window_colouring(geometry)[0][windows]
    used, colours = np.unique(restricted, return_inverse=True)
    best = (colours.reshape(-1), int(used.size))
    if used.size > 1 and windows.size * geometry.cells.shape[1] <= 2**20:
        node, slot = np.nonzero(geometry.valid[windows])
        own = _colour(windows.size, node, geometry.cells[windows[node], slot])
        count = int(own.max(initial=-1)) + 1
        if count < best[1]:
            best = (own, count)
    return best


@functools.lru_cache(maxsize=64)
def input_colouring(geometry: Geometry) -> tuple[np.ndarray, int]:
    """(colour of each spatial input cell, number of colours); no window reads two
    cells of one colour (Curtis–Powell–Reid groups for finite differences)."""
    return _per_axis(geometry, _axis_input_colours)


def window_graph(spec: PoolSpec, x: Any, *, tie: str = "first") -> nx.DiGraph:
    """The window graph: input-cell nodes -> window nodes, edges weighted by ∂y/∂x.

    Args:
      spec: a pooling spec.
      x: input values, or (average pooling, or max pooling's candidate edges) the
        input shape as a tuple of ints.
      tie: max pooling policy for edge weights at ties.

    Nodes are ``("x", index)`` and ``("y", index)`` with layout indices. Every edge
    carries ``weight`` (an exact SymPy value; for max pooling without x, None) and,
    for max pooling with x, ``tie`` (whether the cell attains the window maximum).
    Graph attributes: ``spec``, ``input_shape``, ``output_shape``.
    """
    geometry, exact = _input(check_pool_spec(spec), x)
    g = nx.DiGraph(spec=geometry.spec, input_shape=geometry.input_shape, output_shape=geometry.output_shape)
    for idx in np.ndindex(*geometry.input_shape):
        g.add_node(("x", idx), kind="input")
    for idx in np.ndindex(*geometry.output_shape):
        g.add_node(("y", idx), kind="window")
    weights: dict[tuple[int, int, int], int] = {}
    q = 1
    op = geometry.operator
    if op.rational and (exact is not None or not op.graph_needs_x):
        st = stamp(geometry, exact, tie)
        q = st.q
        num = np.broadcast_to(st.support * st.weight[..., None], (geometry.batch,) + geometry.cells.shape)
        for b, w, k in zip(*np.nonzero(geometry.valid[None] & np.ones((geometry.batch, 1, 1), dtype=bool))):
            weights[int(b), int(w), int(geometry.cells[w, k])] = int(num[b, w, k])
    member: dict[tuple[int, int, int], bool] = {}
    if op.ties and exact is not None:
        m = max_members(geometry, geometry.to_canonical(exact.num), pads=True)  # pad_value=0: a pad cell competes
        for b, w, k in zip(*np.nonzero(geometry.valid[None] & np.ones((geometry.batch, 1, 1), dtype=bool))):
            member[int(b), int(w), int(geometry.cells[w, k])] = bool(m[b, w, k])
    in_shape, out_shape = geometry.input_shape, geometry.output_shape
    for c in window_classes(geometry):
        for b in range(geometry.batch):
            rows = geometry.flat_index(np.full(c.windows.size, b), c.windows, geometry.out_spatial)
            cols = geometry.flat_index(np.full(c.cells.shape, b), c.cells, geometry.in_spatial)
            for i, win in enumerate(c.windows.tolist()):
                yi = tuple(int(v) for v in np.unravel_index(int(rows[i]), out_shape))
                for j, cell in enumerate(c.cells[i].tolist()):
                    xi = tuple(int(v) for v in np.unravel_index(int(cols[i, j]), in_shape))
                    attrs: dict[str, Any] = {}
                    key = (b, win, cell)
                    attrs["weight"] = sympy.Rational(weights[key], q) if key in weights else None
                    if key in member:
                        attrs["tie"] = member[key]
                    g.add_edge(("x", xi), ("y", yi), **attrs)
    return g


def probe_plan(spec: PoolSpec, input_shape: tuple[int, ...]) -> dict[str, Any]:
    """How many backward and forward calls verification needs at this shape."""
    geometry = resolve(check_pool_spec(spec), tuple(input_shape))
    _, n_win = window_colouring(geometry)
    _, n_in = input_colouring(geometry)
    return {"window_colours": n_win, "input_colours": n_in, "windows": geometry.n_out * geometry.batch}

