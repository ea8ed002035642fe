"""Symbolic templates: one SymPy expression per window class, differentiated once.

Windows fall into few classes: the same valid slots and the same divisor up to
translation (interior, edges, corners). For each class the operator's ``template``
rule (:mod:`symjac.pool._ops`) gives the forward expression over slot symbols
``s0, s1, ...`` (``(s0 + s1 + s2)/3`` or ``Max(s0, s1, s2, s3)``) and its derivative,
differentiated once; the Jacobian stage stamps the result over all windows of the
class with NumPy. SymPy work is O(classes), array work O(nnz); no per-window ``diff``.
Also here: the lines and slabs every stage walks the (windows, slots) grid by.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import sympy

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

#: Max pooling's named tie policies (the β family adds :class:`symjac.Beta`).
TIE_POLICIES = ("first", "last", "split")


class Forms(Protocol):
    """What an operator gives its templates: the SymPy forms of its window reduction.

    ``pair(divisor)`` is the two-argument form ``f(a, r)`` (``a`` one slot, ``r`` the
    reduction of the others); ``identity`` stands in for ``r`` when a window has one
    slot; ``reduce(symbols, divisor)`` is the n-slot forward and ``rest(others)`` the
    reduction of the other slots (what ``r`` is at a slot).
    """

    @property
    def identity(self) -> sympy.Expr: ...

    def pair(self, divisor: int) -> sympy.Expr: ...

    def reduce(self, symbols: tuple[sympy.Symbol, ...], divisor: int) -> sympy.Expr: ...

    def rest(self, others: list[sympy.Symbol]) -> sympy.Expr: ...


@dataclasses.dataclass(frozen=True, eq=False)
class Template:
    """The forward expression of one window class and its exact partial derivative.

    Every window reduction of a pooling operator is symmetric and associative, so SymPy
    works on a two-argument form whatever the window size: ``f(a, r)`` with ``a`` one
    slot and ``r`` the reduction of the other slots, which does not depend on ``a``
    (the operator's :class:`Forms`):

    - avg: ``sum(s)/D = (a + r)/D`` and ``d/da (a + r)/D = 1/D`` (a constant);
    - max: ``Max(s) = Max(a, r)`` and ``d/da Max(a, r) = Heaviside(a - r)``.

    By symmetry every slot's derivative is that one result at ``(s_i, r_i)``: the
    SymPy work of a class is O(1) in its cell count (a 1,369-cell adaptive window
    costs what a 9-cell one does). The n-slot expressions are built only on demand
    (:attr:`expr`, :attr:`derivatives`), for inspection at small shapes.

    Attributes:
      mode: the operator's name.
      n: number of valid slots.
      divisor: the averaging divisor D.
      derivative: ``diff(pair, a)`` as SymPy returned it (avg: ``diff((a + r)·w, a)``
        at ``w = 1/D``).
      forms: the operator's SymPy forms (:class:`Forms`).
      weight: avg only: the derivative as an exact fraction (it is a constant).
      tie_arg: max only: NumPy function ``(a, r) -> a - r``, the argument of SymPy's
        ``Heaviside``: > 0 means s_i is the strict maximum, == 0 that it ties for the
        maximum, < 0 that it loses.
    """

    mode: str
    n: int
    divisor: int
    derivative: sympy.Expr
    forms: Forms
    weight: Fraction | None = None
    tie_arg: Callable[..., Any] | None = None

    @functools.cached_property
    def pair(self) -> sympy.Expr:
        """``f(a, r)``, the two-argument form (built on demand: inspection only)."""
        return self.forms.pair(self.divisor)

    @functools.cached_property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """One symbol per valid slot, ``s0 .. s{n-1}``."""
        return tuple(sympy.symbols(f"s0:{self.n}", real=True)) if self.n > 1 else (sympy.Symbol("s0", real=True),)

    @functools.cached_property
    def expr(self) -> sympy.Expr:
        """The n-slot forward expression (O(n) to build: inspection only)."""
        a, r = PAIR
        if self.n == 1:
            return self.pair.xreplace({a: self.symbols[0], r: self.forms.identity})
        return self.forms.reduce(self.symbols, self.divisor)

    @functools.cached_property
    def derivatives(self) -> tuple[sympy.Expr, ...]:
        """``d expr/d s_i`` per slot: :attr:`derivative` at ``(s_i, r_i)`` (O(n^2): inspection only)."""
        a, r = PAIR
        if self.n == 1:
            return (self.pair.xreplace({r: self.forms.identity}).diff(a),)
        out = []
        for s in self.symbols:
            others = [o for o in self.symbols if o is not s]
            out.append(self.derivative.xreplace({a: s, r: self.forms.rest(others)}))
        return tuple(out)


#: Generic slot a and the reduction r of the other slots (every operator's pair form).
PAIR = sympy.symbols("a r", real=True)


@dataclasses.dataclass(frozen=True, eq=False)
class WindowClass:
    """Windows sharing valid slots and divisor.

    Attributes:
      geometry: the geometry the windows belong to.
      slots: indices of the valid slots (columns of ``geometry.cells``).
      divisor: the averaging divisor.
      windows: (nw,) window numbers.
      template: the class's :class:`Template`.
    """

    geometry: Geometry
    slots: tuple[int, ...]
    divisor: int
    windows: np.ndarray
    template: Template

    @functools.cached_property
    def cells(self) -> np.ndarray:
        """(nw, n) flat spatial input cell of each valid slot (a copy: built on demand)."""
        cells: np.ndarray = self.geometry.cells[self.windows][:, list(self.slots)]
        return cells


def window_classes(geometry: Geometry) -> tuple[WindowClass, ...]:
    """Group the windows of ``geometry`` into classes and attach their templates."""
    return _classes(geometry)[0]


def class_ids(geometry: Geometry) -> np.ndarray:
    """(windows,) the index into :func:`window_classes` of each window."""
    return _classes(geometry)[1]


@functools.lru_cache(maxsize=64)
def _classes(geometry: Geometry) -> tuple[tuple[WindowClass, ...], np.ndarray]:
    # Windows are separable, so a window's class is the tuple of its per-axis
    # classes (valid pattern and include-pad count of the axis window): classify
    # each small axis, then combine the ids in mixed radix.
    ids = np.zeros(1, dtype=np.int64)
    for axis in geometry.axes:
        inverse = _axis_classes(axis.valid, axis.counted)
        ids = (ids[:, None] * (int(inverse.max()) + 1) + inverse[None, :]).reshape(-1)  # mixed radix, row-major
    order = np.argsort(ids, kind="stable")
    counts = np.bincount(ids)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    op = geometry.operator
    classes: list[WindowClass] = []
    dense = np.zeros(counts.size, dtype=np.int64)
    for c in np.flatnonzero(counts):
        windows = order[bounds[c] : bounds[c + 1]]
        first = int(windows[0])
        slots = tuple(int(i) for i in np.flatnonzero(geometry.valid[first]))
        divisor = int(geometry.divisor[first])
        dense[c] = len(classes)
        classes.append(WindowClass(geometry, slots, divisor, windows, op.template(geometry.spec, len(slots), divisor)))
    ids = dense[ids]
    ids.setflags(write=False)
    return tuple(classes), ids


def _axis_classes(valid: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """(o,) class id of each window of one axis: equal ids for equal (valid pattern,
    include-pad count), numbered in sorted order of the pair (the pattern read as bits,
    slot 0 first).

    An axis window's valid slots are a run: slot j reads ``start + d·j``, valid while
    inside the input and the window, so the j that are form an interval [f, l]. Read as
    bits, a run that starts earlier sorts higher, and of two that start together the
    longer; no run sorts lowest. So (k - f, l + 1), (0, 0) for no run, numbers the
    patterns in that order: three numbers a window whatever k is (a 1-D kernel of 255
    has 255-bit patterns).
    """
    o, k = valid.shape
    count = valid.sum(axis=1)
    f = valid.argmax(axis=1)
    last = k - 1 - valid[:, ::-1].argmax(axis=1)
    if not np.all((count == 0) | (last - f + 1 == count)):
        raise AssertionError("an axis window's valid slots are not a run")
    run = count > 0
    keys = np.stack([np.where(run, k - f, 0), np.where(run, last + 1, 0), counted], axis=1).astype(np.int64)
    inverse = np.unique(keys, axis=0, return_inverse=True)[1]
    return np.asarray(inverse, dtype=np.int64).reshape(-1)


def window_weights(geometry: Geometry) -> tuple[np.ndarray, int]:
    """Average pooling: every window's exact weight, stamped from its class template.

    Returns:
      (weights, q): (windows,) int64 with ``weights[w] / q`` the derivative of window
      w with respect to each of its valid cells (the same for every slot, by the
      symmetry of the sum).
    """
    classes = window_classes(geometry)
    fractions = [c.template.weight for c in classes]
    assert all(f is not None for f in fractions)
    q = math.lcm(*(f.denominator for f in fractions if f is not None))
    weights = [f.numerator * (q // f.denominator) for f in fractions if f is not None]
    # Python ints when q or a weight leaves int64 (many distinct divisors: lcm(128..255) ~ 2^180)
    per_class = np.array(weights, dtype=np.int64 if max(q, *map(abs, weights)) < 2**63 else object)
    return per_class[class_ids(geometry)], q


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of the (windows, slots) grid of a geometry: a slot across all windows,
    or a window across all its slots, whichever the grid has fewer of.

    Attributes:
      w, k: index arrays of the line's (window, slot) pairs (valid slots only).
      cells: the input cell each pair reads; all distinct within a line (in a window
        line slots do; in a slot line window starts differ along some axis, except where
        adaptive upsampling repeats a start: that slot is then split into several lines),
        so scatter-adds over a line are collision-free.
      window: the window of a window line, None for a slot line.
    """

    w: np.ndarray
    k: np.ndarray
    cells: np.ndarray
    window: int | None


@functools.lru_cache(maxsize=4)
def _slot_major(geometry: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """``valid.T`` and ``cells.T`` contiguous (int32 when the cells fit): a slot line reads
    one contiguous row instead of a column of the window-major arrays (a cache line a pair)."""
    cells = geometry.cells.T.astype(np.int32 if geometry.n_in < 2**31 else np.int64, order="C")
    valid = np.ascontiguousarray(geometry.valid.T)
    for a in (cells, valid):
        a.setflags(write=False)
    return valid, cells


#: Geometries with at most this many (window, slot) slots keep their lines (~12 bytes a
#: pair): building them costs ~5 us a line, as much as using them on a small map.
CACHED_LINES = 2**20


def lines(geometry: Geometry) -> Iterable[Line]:
    """Cover the valid (window, slot) pairs by min(windows, slots) collision-free lines.

    Python iterations stay at most sqrt(windows x slots): 9 for a 3x3 pool at any
    size, one for global pooling, 49 for an adaptive 7x7 head. Small geometries
    (:data:`CACHED_LINES`) keep theirs; larger ones build each line when it is reached.
    """
    return _kept_lines(geometry) if geometry.cells.size <= CACHED_LINES else _build_lines(geometry)


@functools.lru_cache(maxsize=4)
def _kept_lines(geometry: Geometry) -> tuple[Line, ...]:
    kept = tuple(_build_lines(geometry))
    for line in kept:
        for a in (line.w, line.k, line.cells):
            a.setflags(write=False)  # shared by every caller
    return kept


def _build_lines(geometry: Geometry) -> Iterator[Line]:
    n_win, n_slots = geometry.cells.shape
    if n_slots <= n_win:
        valid_t, cells_t = _slot_major(geometry)
        # Two windows read one cell at one slot only if their starts agree along every axis:
        # never where each axis's starts increase (every Pool), only in adaptive upsampling.
        repeats = geometry.slots_repeat
        for k in range(n_slots):
            w = np.flatnonzero(valid_t[k])
            if not repeats:
                yield Line(w, np.full(w.size, k), cells_t[k][w], None)
                continue
            for part in _distinct_parts(cells_t[k][w]):
                yield Line(w[part], np.full(part.size, k), cells_t[k][w[part]], None)
    else:
        for win in range(n_win):
            slots = np.flatnonzero(geometry.valid[win])
            yield Line(np.full(slots.size, win), slots, geometry.cells[win, slots], win)


def _distinct_parts(cells: np.ndarray) -> list[np.ndarray]:
    """Positions of ``cells`` in groups of distinct cells: the first occurrence of every cell, then
    the second, ... (the number of groups is the largest number of windows sharing a cell)."""
    order = np.argsort(cells, kind="stable")
    ordered = cells[order]
    first = np.searchsorted(ordered, ordered)  # where each value's run begins
    occurrence = np.empty(cells.size, dtype=np.int64)
    occurrence[order] = np.arange(cells.size) - first
    return [np.flatnonzero(occurrence == r) for r in range(int(occurrence.max(initial=-1)) + 1)]


@dataclasses.dataclass(frozen=True)
class Slab:
    """One slot of the (windows, slots) grid as strided boxes: the windows that have
    the slot (a box of the output grid) and the cells they read there (a box of the
    input grid, with the stride as step), as one slice per spatial axis.

    Attributes:
      k: the slot (column of ``geometry.cells``).
      windows: per axis, the slice of output positions.
      cells: per axis, the slice of input positions, in the same order.
    """

    k: int
    windows: tuple[slice, ...]
    cells: tuple[slice, ...]


@functools.lru_cache(maxsize=64)
def slabs(geometry: Geometry) -> tuple[Slab, ...] | None:
    """Cover the valid (window, slot) pairs by one :class:`Slab` per slot, or None.

    A slot's windows and cells are boxes when, along every axis, the windows that
    have the axis slot are consecutive and their cells advance by one step: always so
    for :class:`Pool` (window starts advance by the stride, every window has every
    slot that falls inside the input), and for adaptive axes whose windows are all
    alike. Then a slot's scatter or gather is one NumPy slice operation over the
    spatial grids, with no index arrays: K operations for the whole grid, each
    contiguous along the last axis when the stride is 1. None when there are more slots
    than windows (a global pool's K is every input cell): :func:`lines` then takes
    fewer Python steps, one a window. Built once per geometry (O(K·rank) slices).
    """
    if geometry.cells.shape[1] > geometry.n_out:
        return None
    per_axis = []
    for ax in geometry.axes:
        valid = ax.valid
        n_out = valid.shape[0]
        step = int(ax.starts[1] - ax.starts[0]) if n_out > 1 else 1
        if step < 1 or (n_out > 2 and np.any(np.diff(ax.starts) != step)):
            return None
        count = valid.sum(axis=0)
        first = valid.argmax(axis=0)
        last = n_out - 1 - valid[::-1].argmax(axis=0)
        if np.any((count > 0) & (last - first + 1 != count)):
            return None  # a slot's windows are not consecutive
        axis_slabs = []
        for j in range(valid.shape[1]):
            n, w0 = int(count[j]), int(first[j])
            c0 = int(ax.cells[w0, j]) if n else 0
            axis_slabs.append((slice(w0, w0 + n), slice(c0, c0 + (n - 1) * step + 1 if n else c0, step)))
        per_axis.append(axis_slabs)
    out = []
    for k, combo in enumerate(itertools.product(*per_axis)):  # row-major over axis slots: geometry's slot order
        if all(w.stop > w.start for w, _ in combo):
            out.append(Slab(k, tuple(w for w, _ in combo), tuple(c for _, c in combo)))
    return tuple(out)
