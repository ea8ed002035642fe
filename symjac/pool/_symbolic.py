"""Symbolic templates: one SymPy expression per window class, differentiated once.

Windows fall into few classes: the same valid slots and the same divisor up to
translation (interior, edges, corners). For each class SymPy builds the forward
expression over slot symbols ``s0, s1, ...`` (``(s0 + s1 + s2)/3`` or
``Max(s0, s1, s2, s3)``) and differentiates it once; the Jacobian stage stamps the
result over all windows of the class with NumPy. SymPy work is O(classes), array
work O(nnz); no per-window ``diff``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from symjac._lastaxis import max_last
from symjac._errors import InputError
from symjac.pool import _geometry
from symjac.pool._geometry import Geometry

TIE_POLICIES = ("first", "last", "split")


@dataclasses.dataclass(frozen=True, eq=False)
class Template:
    """The forward expression of one window class and its exact partial derivative.

    Both window reductions are symmetric and associative, so SymPy works on a
    two-argument form whatever the window size: ``f(a, r)`` with ``a`` one slot
    and ``r`` the reduction of the other slots, which does not depend on ``a``:

    - avg: ``sum(s)/D = (a + r)/D`` and ``d/da (a + r)/D = 1/D`` (a constant);
    - max: ``Max(s) = Max(a, r)`` and ``d/da Max(a, r) = Heaviside(a - r)``.

    By symmetry every slot's derivative is that one result at ``(s_i, r_i)``: the
    SymPy work of a class is O(1) in its cell count (a 1,369-cell adaptive window
    costs what a 9-cell one does). The n-slot expressions are built only on demand
    (:attr:`expr`, :attr:`derivatives`), for inspection at small shapes.

    Attributes:
      mode: ``"avg"`` or ``"max"``.
      n: number of valid slots.
      divisor: the averaging divisor D.
      derivative: ``diff(pair, a)`` as SymPy returned it (avg: ``diff((a + r)·w, a)``
        at ``w = 1/D``, see :func:`_generic_avg`).
      weight: avg only: the derivative as an exact fraction (it is a constant).
      tie_arg: max only: NumPy function ``(a, r) -> a - r``, the argument of SymPy's
        ``Heaviside``: > 0 means s_i is the strict maximum, == 0 that it ties for the
        maximum, < 0 that it loses.
    """

    mode: str
    n: int
    divisor: int
    derivative: sympy.Expr
    weight: Fraction | None = None
    tie_arg: Callable[..., Any] | None = None

    @functools.cached_property
    def pair(self) -> sympy.Expr:
        """``f(a, r)``, the two-argument form (built on demand: inspection only)."""
        if self.mode == "avg":
            return _generic_avg()[0].xreplace({_WEIGHT: sympy.Rational(1, self.divisor)})
        return _max_pair()[0]

    @functools.cached_property
    def symbols(self) -> tuple[sympy.Symbol, ...]:
        """One symbol per valid slot, ``s0 .. s{n-1}``."""
        return tuple(sympy.symbols(f"s0:{self.n}", real=True)) if self.n > 1 else (sympy.Symbol("s0", real=True),)

    @functools.cached_property
    def expr(self) -> sympy.Expr:
        """The n-slot forward expression (O(n) to build: inspection only)."""
        a, r = _PAIR
        if self.n == 1:
            return self.pair.xreplace({a: self.symbols[0], r: _IDENTITY[self.mode]})
        if self.mode == "avg":
            return sympy.Add(*self.symbols) / sympy.Integer(self.divisor)
        return sympy.Max(*self.symbols, evaluate=False)

    @functools.cached_property
    def derivatives(self) -> tuple[sympy.Expr, ...]:
        """``d expr/d s_i`` per slot: :attr:`derivative` at ``(s_i, r_i)`` (O(n^2): inspection only)."""
        a, r = _PAIR
        if self.n == 1:
            return (self.pair.xreplace({r: _IDENTITY[self.mode]}).diff(a),)
        out = []
        for s in self.symbols:
            others = [o for o in self.symbols if o is not s]
            rest = sympy.Add(*others) if self.mode == "avg" else sympy.Max(*others, evaluate=False)
            out.append(self.derivative.xreplace({a: s, r: rest}))
        return tuple(out)


# Generic slot a and the reduction r of the other slots; the identity of each
# reduction stands in for r when a window has one slot.
_PAIR = sympy.symbols("a r", real=True)
_IDENTITY = {"avg": sympy.Integer(0), "max": sympy.S.NegativeInfinity}


@functools.lru_cache(maxsize=256)
def template(mode: str, n: int, divisor: int) -> Template:
    """The template of a class with ``n`` valid slots. Its two-argument form does not
    depend on n, nor on the divisor but through w = 1/D: SymPy differentiates it once
    per mode (:func:`_generic_avg`, :func:`_max_pair`), and each class instantiates the
    result (an exact substitution, no differentiation)."""
    if mode == "avg":
        d = _generic_avg()[1].xreplace({_WEIGHT: sympy.Rational(1, divisor)})
        if not d.is_Rational:
            raise AssertionError(f"average template for divisor {divisor} has a non-constant derivative {d}")
        return Template(mode, n, divisor, d, weight=Fraction(int(d.p), int(d.q)))
    # The Heaviside argument, a - r as _max_pair checked, lowered to NumPy: the sign of a
    # difference is exact in floating point too (it is 0 only when a == r).
    return Template(mode, n, divisor, _max_pair()[1], tie_arg=np.subtract)


# The averaging weight 1/D of a window, as a symbol: one differentiation serves every divisor.
_WEIGHT = sympy.Symbol("w", positive=True)


@functools.lru_cache(maxsize=1)
def _generic_avg() -> tuple[sympy.Expr, sympy.Expr]:
    """Build and differentiate ``(a + r)·w`` once (O(1) SymPy work): (pair, d pair/da)."""
    a, r = _PAIR
    pair = (a + r) * _WEIGHT
    d = sympy.diff(pair, a)
    if d.free_symbols - {_WEIGHT}:
        raise AssertionError(f"average template {pair} has a derivative {d} that depends on the slots")
    # Linear and symmetric: pair(a, r) == pair(r, a), so d pair/dr = d too (a constant),
    # and pair(0, 0) = 0: pair == d*a + d*r exactly and y = J x with every slot weighted by d.
    if pair.xreplace({a: r, r: a}) != pair or pair.xreplace({a: 0, r: 0}) != 0:
        raise AssertionError(f"average template {pair} is not linear and symmetric")
    return pair, d


@functools.lru_cache(maxsize=1)
def _max_pair() -> tuple[sympy.Expr, sympy.Expr]:
    """Build and differentiate ``Max(a, r)`` once: (pair, Heaviside(a - r))."""
    a, r = _PAIR
    pair = sympy.Max(a, r, evaluate=False)  # what Max(a, r) of two real symbols evaluates to, without the search
    d = sympy.diff(pair, a)
    if d != sympy.Heaviside(a - r):
        raise AssertionError(f"d Max(a, r)/da = {d}: expected Heaviside(a - r) from SymPy")
    return pair, d


def clear_caches(templates: bool = True) -> None:
    """Forget every resolved geometry, its window classes and (``templates``) every
    template (benchmarks time cold runs; the other caches key on geometries, so they
    start afresh too)."""
    _geometry._resolve.cache_clear()
    _classes.cache_clear()
    slabs.cache_clear()
    _LAST_MEMBERS.clear()  # keyed on geometries: let the arrays go with them
    _LAST_POLICY.clear()
    _LAST_ROUTE.clear()
    if templates:
        template.cache_clear()
        _generic_avg.cache_clear()
        _max_pair.cache_clear()


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
    mode = geometry.spec.mode
    classes: list[WindowClass] = []
    dense = np.zeros(counts.size, dtype=np.int64)
    for c in np.flatnonzero(counts):
        windows = order[bounds[c] : bounds[c + 1]]
        first = int(windows[0])
        slots = tuple(int(i) for i in np.flatnonzero(geometry.valid[first]))
        divisor = int(geometry.divisor[first])
        dense[c] = len(classes)
        classes.append(WindowClass(geometry, slots, divisor, windows, template(mode, len(slots), divisor)))
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
      cells: the input cell each pair reads; all distinct within a line (in a slot
        line window starts differ along every axis; in a window line slots do), so
        scatter-adds over a line are collision-free.
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
        for k in range(n_slots):
            w = np.flatnonzero(valid_t[k])
            yield Line(w, np.full(w.size, k), cells_t[k][w], None)
    else:
        for win in range(n_win):
            slots = np.flatnonzero(geometry.valid[win])
            yield Line(np.full(slots.size, win), slots, geometry.cells[win, slots], win)


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


def pads_compete(geometry: Geometry) -> bool:
    """Whether pad cells hold the constant 0 and take part in the max (``Pool(pad_value=0)``)."""
    return geometry.spec.mode == "max" and getattr(geometry.spec, "pad_value", None) is not None


def pad_cells(geometry: Geometry) -> np.ndarray | None:
    """``Pool(pad_value=0)``: (windows, K) the pad slots (constants 0 in the max); else None."""
    if not pads_compete(geometry):
        return None
    pads: np.ndarray = geometry.padded & ~geometry.valid
    return pads


# The last tie sets computed: jacobian, vjp, forward and the verifier's exact rows
# ask for the same x in turn. Keyed by the input's bytes (exact: no hash collision
# can return another x's sets), numeric dtypes only; read-only so no caller can
# alter a shared result.
_LAST_MEMBERS: dict[tuple[Any, ...], np.ndarray] = {}


def max_members(geometry: Geometry, xc: np.ndarray, pads: bool = False) -> np.ndarray:
    """Max pooling: which slots of every window attain its maximum (:func:`_max_members`), cached for the last x."""
    pads = pads and pad_cells(geometry) is not None  # without pad cells both ask for the same sets
    key = None if xc.dtype == object else (geometry, pads, xc.dtype.str, xc.shape, np.ascontiguousarray(xc).tobytes())
    if key is not None and key in _LAST_MEMBERS:
        return _LAST_MEMBERS[key]
    member = _max_members(geometry, xc, pads=True) if pads else _max_members(geometry, xc)
    member.setflags(write=False)
    if key is not None:
        _LAST_MEMBERS.clear()
        _LAST_MEMBERS[key] = member
    return member


def _max_members(geometry: Geometry, xc: np.ndarray, pads: bool = False) -> np.ndarray:
    """Max pooling: which slots of every window attain its maximum.

    Every max class has the template ``Max(a, r)`` whose SymPy derivative is
    ``Heaviside(a - r)`` (:func:`template`): slot k is in the tie set iff that
    argument is >= 0 at ``a = s_k`` and ``r`` = the max of the other slots
    (:func:`tie_members`). Windows go in blocks of about 2^22 (window, slot) values,
    with invalid slots below every value, so memory stays O(block) beyond the result.

    Args:
      geometry: the windows.
      xc: (batch, n_in) canonical input values (exact integers, or floats: the sign
        of ``a - r`` is exact in floating point too).
      pads: ``Pool(pad_value=0)``: the pad slots (:func:`pad_cells`) hold the value 0
        and take part in the max (0 is 0 in canonical integers too).

    Returns:
      (batch, windows, K) bool, False on invalid slots (pad slots may be True when
      ``pads``).
    """
    tmpl = template("max", 2, 2)
    n_win, n_slots = geometry.cells.shape
    pad = pad_cells(geometry) if pads else None
    xc, low = _comparable(xc)
    # One sentinel column after the cells: invalid slots (cell -1) read ``low``, so a
    # single gather gives every window's values and no invalid slot can tie.
    xs = np.concatenate([xc, np.full((xc.shape[0], 1), low, dtype=xc.dtype)], axis=1)
    member = np.zeros((xc.shape[0], n_win, n_slots), dtype=bool)
    step = max(1, 2**22 // max(1, xc.shape[0] * n_slots))
    for start in range(0, n_win, step):
        block = slice(start, start + step)
        values = xs[:, geometry.cells[block]]
        if pad is not None:  # pad cells hold the constant 0, a competitor in the max
            values = np.where(pad[block], 0, values)
        member[:, block] = tie_members(tmpl, values, scratch=True)  # values is this block's own gather
    return member


# The last first/last routes computed, per policy: jacobian, vjp and forward ask for the
# same x in turn. Keyed like _LAST_MEMBERS (the input's bytes: exact), read-only results.
_LAST_ROUTE: dict[str, tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}


def max_route(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max pooling, policy ``first``/``last``: each window's one slot and its maximum
    (:func:`_max_route`), cached for the last x of each policy.

    Returns:
      (slot, top, cell): (batch, windows) the slot (column of ``geometry.cells``) the
      policy routes the window's gradient to, -1 for none (a pad cell of
      ``Pool(pad_value=0)`` won); the window's maximum, in ``xc``'s values (0 where a
      pad cell won); and the flat spatial input cell of the slot (-1 for none).
    """
    check_tie(tie)
    if tie not in ("first", "last"):
        raise ValueError(f"tie={tie!r}: only first/last route to one slot a window")
    key = (geometry, xc.dtype.str, xc.shape, np.ascontiguousarray(xc).tobytes()) if xc.dtype != object else None
    last = _LAST_ROUTE.get(tie)
    if key is not None and last is not None and last[0] == key:
        return last[1]
    small = xc.shape[0] * geometry.n_out * math.prod(ax.cells.shape[1] for ax in geometry.axes) <= ROUTE_BY_MEMBERS
    route = _route_by_members(geometry, xc, tie) if small else _max_route(geometry, xc, tie)
    for a in route:
        a.setflags(write=False)  # shared by the next caller with the same x
    if key is not None:
        _LAST_ROUTE[tie] = (key, route)
    return route


#: Up to this many (batch, window, slot) entries :func:`max_route` reads the tie sets
#: (:func:`max_members`, one gather of every window's slots, which verify needs at the
#: same x anyway) rather than going axis by axis: below it the levels' fixed steps cost
#: more (3x3 at 32^2, 9,216 entries: ~0.11 ms by axis, ~0.05 ms by the tie sets).
ROUTE_BY_MEMBERS = 2**15


def _route_by_members(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`max_route` from the tie sets: the first (last) member of each window's row-major
    slots is its first (last) maximal slot, as :func:`policy_support` picks it. With
    ``Pool(pad_value=0)`` pad slots compete, and a window they win routes to no input."""
    slot = _pick(max_members(geometry, xc, pads=pads_compete(geometry)), tie)
    cell = geometry.cells[np.arange(geometry.n_out), slot]  # -1 at a slot outside the input: a pad cell
    xc, _ = _comparable(xc)
    top = xc[np.arange(xc.shape[0])[:, None], np.maximum(cell, 0)]
    top[cell < 0] = 0  # a pad cell of pad_value=0 won: the window's max is that 0
    return np.where(cell >= 0, slot, -1), top, cell


def _max_route(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`max_route`, one spatial axis at a time: O(sum_a K_a) work per window, never
    a (batch, windows, K) array (but in 1-D, where that is the one level's array).

    A window is the product of its axis windows and its slots are numbered row-major
    (axis 0 most significant), so a slot is a tuple (j_0, ..., j_{r-1}) and the first
    (last) maximal slot is the lexicographically smallest (largest) maximal tuple. Max
    is associative: ``Max(s) = Max_{j_0} M_0(j_0)`` with ``M_a(j_0..j_a) =
    Max_{j_{a+1}} M_{a+1}(j_0..j_{a+1})``, and the chain rule through the template
    ``Max(a, r)``, whose SymPy derivative is ``Heaviside(a - r)`` (:func:`template`),
    gives ``d Max(s)/d s_j = prod_a Heaviside(M_a(j_0..j_a) - r_a)``, r_a the max of
    the other entries at level a: slot j is in the tie set iff it ties at every level,
    and at each level ``tie_arg(M, Max M) >= 0`` is that level's test (as in
    :func:`tie_members`). The lexicographically first maximal tuple is therefore found
    innermost axis first: along axis r-1, each row's first member; then along axis
    r-2 the first member among the row maxima, carrying the inner choice of the row it
    picks; and so on out to axis 0 (``last``: the last member at every level).

    Each level gathers one axis: a (batch, ..., o_a, K_a, ...) array over the input
    cells of the outer axes and the windows of the inner ones (O(windows x K_a) for
    stride 1). Slots outside the window or the padded input read a value below every
    other (never the max); with ``Pool(pad_value=0)`` pad slots read 0 and compete, and
    a level that picks one routes the window to no input (slot -1), as
    :func:`max_support` does. The choice carried from level to level is one int64,
    ``slot * n_in + cell``: slot and flat input cell are both sums of one term per axis.
    """
    tmpl = template("max", 2, 2)
    assert tmpl.tie_arg is not None
    pads = pads_compete(geometry)
    xc, low = _comparable(xc)
    val = xc.reshape((xc.shape[0],) + geometry.in_spatial)  # levels reduce it axis by axis, last first
    # Each entry's choice among the axes reduced so far, as one int64: slot * n_in + cell
    # (both sums of per-axis terms, so one carried array serves both), -1 for no input.
    n_in = geometry.n_in
    assert math.prod(ax.cells.shape[1] for ax in geometry.axes) * n_in < 2**62  # the budget keeps both far below
    route: np.ndarray | None = None
    width, cell_step = 1, 1  # slots of the axes reduced so far; input cells of one step along axis a
    for a in reversed(range(len(geometry.axes))):
        ax, axis = geometry.axes[a], a + 1
        o, k = ax.cells.shape
        # One sentinel cell past the axis end for slots outside the window (low), one more
        # for pad cells (0, pad_value=0); both carry slot -1 (no input).
        idx = np.where(ax.valid, ax.cells, ax.length)
        fills = [low]
        if pads:
            idx = np.where(ax.padded & ~ax.valid, ax.length + 1, idx)
            fills.append(0)
        edge = val.shape[:axis] + (1,) + val.shape[axis + 1:]
        ext = np.concatenate([val] + [np.full(edge, f, dtype=val.dtype) for f in fills], axis=axis)
        values = np.take(ext, idx, axis=axis)  # (..., o, k, ...): level a's entries, window by window
        del ext
        # the slots' axis is innermost on the last level: max_last, not NumPy's short-row pass
        last = axis + 1 == values.ndim - 1
        top = max_last(values, keepdims=True) if last else values.max(axis=axis + 1, keepdims=True)
        member = np.asarray(tmpl.tie_arg(values, top, out=values)) >= 0  # values is this level's own gather
        del values
        if tie == "first":
            j = member.argmax(axis=axis + 1)
        else:
            j = k - 1 - np.flip(member, axis=axis + 1).argmax(axis=axis + 1)
        del member
        pos = idx[np.arange(o).reshape((o,) + (1,) * (len(geometry.axes) - 1 - a)), j]  # the cell j reads
        if route is None:  # innermost axis: nothing carried yet
            inner: Any = np.where(pos < ax.length, 0, -1)
        else:
            ext_route = np.concatenate([route] + [np.full(edge, -1, dtype=np.int64)] * len(fills), axis=axis)
            inner = np.take_along_axis(ext_route, pos, axis=axis)
        route = np.where(inner >= 0, inner + (j * (width * n_in) + pos * cell_step), -1)
        val = np.squeeze(top, axis=axis + 1)
        width, cell_step = width * k, cell_step * ax.length
    assert route is not None
    route = route.reshape(xc.shape[0], -1)
    has = route >= 0
    slot, cell = np.where(has, route // n_in, -1), np.where(has, route % n_in, -1)
    return slot, val.reshape(xc.shape[0], -1), cell


def _comparable(xc: np.ndarray) -> tuple[np.ndarray, Any]:
    """``xc`` in a dtype whose differences are exact (int64 beyond 2^60 becomes Python ints),
    and a value below every value and below 0 (pad cells' value): the max of no slots."""
    if xc.dtype.kind == "f":
        return xc, -np.inf
    xc = xc if xc.dtype == object or not xc.size or int(np.abs(xc).max()) < 2**60 else xc.astype(object)
    return xc, min(xc.min() if xc.size else 0, 0) - 1


def tie_members(tmpl: Template, values: np.ndarray, scratch: bool = False) -> np.ndarray:
    """Which slots attain the window maximum, from SymPy's derivative of ``Max``.

    Args:
      tmpl: a max template.
      values: (..., n) slot values (exact integers, or floats: the sign of
        ``s_i - max(others)`` is exact in floating point too).
      scratch: ``values`` may be overwritten (no second array of its size).

    Returns:
      (..., n) bool: slot i is in the tie set (its Heaviside argument is >= 0).
    """
    n = values.shape[-1]
    if n == 1:
        return np.ones(values.shape, dtype=bool)  # a lone cell always attains the max
    assert tmpl.tie_arg is not None
    # r_i, the max of the other slots, is the window max t for every slot that is
    # not the (first) argmax; for that slot r_i = second largest <= t = s_i, and
    # s_i - r_i >= 0 as s_i - t = 0 >= 0. So ``tie_arg(s_i, t) >= 0`` is the same
    # verdict for every slot, with one reduction instead of four.
    top = max_last(values, keepdims=True)
    arg = tmpl.tie_arg(values, top, out=values) if scratch else tmpl.tie_arg(values, top)
    return np.asarray(arg) >= 0


def check_tie(tie: str) -> str:
    """Raise :class:`InputError` unless ``tie`` names a policy."""
    if tie not in TIE_POLICIES:
        raise InputError(f"tie={tie!r} is not valid: give one of {', '.join(map(repr, TIE_POLICIES))}")
    return tie


def policy_support(member: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The Jacobian element a tie policy picks, as support and per-window weight.

    Args:
      member: (..., windows, K) tie sets (:func:`max_members`).
      tie: ``first``/``last`` put 1 on the first/last tied slot (row-major order),
        ``split`` puts 1/|I| on each of the |I| tied slots (the minimal-norm Clarke
        element).

    Returns:
      (support, weight, q): ``support`` (..., windows, K) bool, ``weight`` (...,
      windows) int64; the Jacobian row of each window is ``support * weight / q``.
    """
    check_tie(tie)
    n = member.shape[-1]
    if tie == "split":
        count = member.sum(axis=-1)
        q = int(np.lcm.reduce(np.unique(count[count > 0]))) if (count > 0).any() else 1
        return member, (q // np.maximum(count, 1)).astype(np.int64), q
    pick = _pick(member, tie)
    has = member.any(axis=-1)
    support = np.zeros(member.shape, dtype=bool)
    rows = support.reshape(-1, n)  # a view: one row a window
    rows[np.arange(rows.shape[0]), pick.reshape(-1)] = has.reshape(-1)
    return support, np.ones(member.shape[:-1], dtype=np.int64), 1


def _pick(member: np.ndarray, tie: str) -> np.ndarray:
    """(..., windows) the first (``tie="first"``) or last member slot of each window's row-major tie set."""
    if tie == "first":
        return np.asarray(member.argmax(axis=-1))
    return np.asarray(member.shape[-1] - 1 - member[..., ::-1].argmax(axis=-1))


def policy_weights(member: np.ndarray, tie: str) -> tuple[np.ndarray, int]:
    """Integer routing weights over a common denominator for a tie policy.

    Returns (weights, q) with ``weights / q`` the Jacobian row of each window
    (:func:`policy_support`, multiplied out).
    """
    support, weight, q = policy_support(member, tie)
    return support * weight[..., None], q


def max_support(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Max pooling: :func:`policy_support` of the tie sets at canonical values ``xc``
    (the Jacobian's ``split`` policy and the lowering; ``first``/``last`` take
    :func:`max_route`, with no (batch, windows, K) array).

    With ``Pool(pad_value=0)`` the policy runs over every slot of the padded window
    in row-major order, pad cells included; a window routed to a pad cell (a
    constant) then sends its gradient to no input, so the support keeps only valid
    slots.
    """
    pads = pad_cells(geometry) is not None
    member = max_members(geometry, xc, pads=pads)
    last = _LAST_POLICY.get(tie)
    if last is not None and last[0] is member:  # the same cached tie sets (jacobian, then vjp, of one x)
        return last[1]
    support, weight, q = policy_support(member, tie)
    if pads:
        support = support & geometry.valid
    for a in (support, weight):
        a.setflags(write=False)  # shared by the next caller with the same tie sets
    _LAST_POLICY.clear()
    _LAST_POLICY[tie] = (member, (support, weight, q))
    return support, weight, q


# The last policy applied, keyed by tie and held with the tie sets it was applied to
# (compared by identity: max_members returns its cached array for the same x).
_LAST_POLICY: dict[str, tuple[np.ndarray, tuple[np.ndarray, np.ndarray, int]]] = {}
