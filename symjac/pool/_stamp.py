"""Stamps: an exact Jacobian as per-window integer weights over the (windows, slots) grid, applied exactly.

A :class:`Stamp` holds, for every window and slot of the geometry, whether the
entry is nonzero and its exact value (an integer weight over a common denominator
``q``), taken from the window's class template by the operator's ``stamp`` rule
(:mod:`symjac.pool._ops`). Work runs one slot across all windows, or one window
across all slots, whichever is shorter (a line): within a line every pair reads a
different cell, so scatter-adds are collision-free NumPy assignments, vectorised
over the batch; Python loops are O(min(windows, K)), never O(classes x K) or O(nnz).
:func:`apply` gives ``J x`` (a JVP) and ``J^T dy`` (a VJP) from the same stamp;
:func:`sparse` its COO form.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray, _int_array, _shifted, _unique_int64, round_fractions, strip_twos
from symjac.pool._symbolic import Line, Slab, lines, slabs

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


@dataclasses.dataclass(frozen=True, eq=False)
class Stamp:
    """The exact Jacobian of a geometry, stamped from the class templates.

    Entry (b, w, k) of the Jacobian, the derivative of window w of slice b with
    respect to the cell ``geometry.cells[w, k]``, is ``support * weight / q``.
    Arrays have a leading axis of 1 when they do not depend on x (average
    pooling: the support is the valid mask, the weight the class template's 1/D)
    or of ``batch`` when they do (max pooling at a given x and tie policy).

    Attributes:
      geometry: the windows.
      weight: (1 | batch, windows) int64 numerator of every window's entries.
      q: the common denominator.
      full: the support is exactly ``geometry.valid`` (average pooling), so a line's
        coefficients need no support lookup.
      slot: when every window has at most one entry (max pooling, ``first``/``last``),
        (1 | batch, windows) its slot, -1 for none; else None.
      mask: the support (:attr:`support`) when ``slot`` is None.
      cell: with ``slot``, (1 | batch, windows) the flat spatial input cell it reads.
    """

    geometry: Geometry
    weight: np.ndarray
    q: int
    full: bool = False  # the support is every valid slot (average pooling)
    slot: np.ndarray | None = None  # (batch, windows) the one slot of each window's row, -1: none
    mask: np.ndarray | None = None  # (1 | batch, windows, K) the support, unless given by slot
    cell: np.ndarray | None = None  # with slot: (batch, windows) the input cell of the slot, -1: none

    @functools.cached_property
    def support(self) -> np.ndarray:
        """(1 | batch, windows, K) bool, the nonzero entries.

        A one-slot-a-window stamp builds it on demand from :attr:`slot`, O(windows x K):
        only readers of whole rows ask (the verifier's exact rows, the window graph);
        the Jacobian, VJP and forward go by :attr:`slot` and :attr:`entries`.
        """
        if self.mask is not None:
            return self.mask
        assert self.slot is not None
        n_slots = self.geometry.cells.shape[1]
        support = np.zeros(self.slot.shape + (n_slots,), dtype=bool)
        rows = support.reshape(-1, n_slots)  # a view: one row a window
        has = self.slot.reshape(-1) >= 0
        rows[np.flatnonzero(has), self.slot.reshape(-1)[has]] = True
        support.setflags(write=False)
        return support

    @property
    def depth(self) -> int:
        """The leading axis of the arrays: 1 (independent of x) or batch."""
        return int(self.weight.shape[0])

    @functools.cached_property
    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The support's nonzero entries over every slice at once, slice-major, then window,
        then slot (row-major): (slice, window, input cell), each (nnz of the stamp,).
        What a sparse support is scattered over, with no Python step per slice."""
        g = self.geometry
        if self.slot is not None:  # one slot a window at most: O(windows), no (windows, K) pass
            assert self.cell is not None
            flat = np.flatnonzero(self.slot >= 0)
            sl, w = np.divmod(flat, g.n_out) if self.depth > 1 else (_zeros(flat.size), flat)
            return sl, w, self.cell.reshape(-1)[flat]
        support = self.support
        per_window = np.count_nonzero(support, axis=2).reshape(-1)
        w = np.repeat(np.tile(np.arange(g.n_out), self.depth), per_window)
        if self.depth == 1:
            return _zeros(w.size), w, g.cells[support[0]]
        sl = np.repeat(np.arange(self.depth), per_window.reshape(self.depth, -1).sum(axis=1))
        return sl, w, np.broadcast_to(g.cells, support.shape)[support]

    @functools.cached_property
    def size(self) -> int:
        """Number of nonzero entries of the support (all slices)."""
        return int(np.count_nonzero(self.slot >= 0) if self.slot is not None else np.count_nonzero(self.support))

    def coefficients(self, line: Line) -> np.ndarray:
        """(1 | batch, len(line)) integer entries of a line (0 where the support leaves a slot out)."""
        if self.full:  # a line holds valid slots only
            return np.asarray(self.weight[:, line.w])
        if self.slot is not None:
            return np.where(self.slot[:, line.w] == line.k, self.weight[:, line.w], 0)
        return np.where(self.support[:, line.w, line.k], self.weight[:, line.w], 0)


def _zeros(n: int) -> np.ndarray:
    """n zeros of one slice's entries, as a read-only view of a single 0 (no n-sized array)."""
    return np.broadcast_to(np.intp(0), (n,))


def stamp(geometry: Geometry, x: ExactArray | None, tie: str = "first") -> Stamp:
    """The exact Jacobian of ``geometry`` at ``x`` under a named tie policy: its operator's ``stamp`` rule."""
    st: Stamp = geometry.operator.stamp(geometry, x, tie)
    return st


def apply(st: Stamp, source: ExactArray, transpose: bool) -> ExactArray:
    """y = J x (transpose=False) or dx = J^T dy (transpose=True), exactly.

    Integers over the common denominator ``source.den * st.q``, one line of the
    (windows, slots) grid at a time (:func:`lines`): float64 when no sum can reach
    2^53 (a target gets at most K terms, so every partial sum is an integer a double
    holds exactly; NumPy's float scatter is the fastest), int64 below 2^62, Python
    ints otherwise.
    """
    g = st.geometry
    src_spatial, dst_spatial = (g.out_spatial, g.in_spatial) if transpose else (g.in_spatial, g.out_spatial)
    # J is linear: a power of two common to the source (2^971 and more near float64's overflow
    # threshold) is taken out, the product made in int64 or float64, and put back on the result
    num, twos = strip_twos(source.num)
    if twos:
        out = apply(st, ExactArray(num, source.den), transpose)
        if out.num.dtype == object:
            return ExactArray(_int_array(out.num << twos), out.den)
        top = int(np.abs(out.num).max()) if out.num.size else 0
        return ExactArray(out.num << twos if top.bit_length() + twos <= 62 else _shifted(out.num, twos), out.den)
    s = g.to_canonical(num, src_spatial)
    n_slots = math.prod(ax.cells.shape[1] for ax in g.axes)  # K, without building the (windows, K) table
    wmax = int(np.abs(st.weight).max()) if st.weight.size else 0
    smax = int(np.abs(s).max()) if s.size else 0
    small = s.dtype != object and smax * wmax * max(n_slots, 1) < 2**62
    n_dst = math.prod(dst_spatial)
    room = 62 - (smax * max(n_slots, 1)).bit_length()  # bits a weight may have for int64 sums
    boxes = slabs(g) if not small and st.full and s.dtype != object and room >= 8 else None
    if boxes is not None:
        num = _limbs(st, s.astype(np.int64), boxes, transpose, room)
        return ExactArray(_int_array(g.from_canonical(num, dst_spatial)), source.den * st.q)
    by_weight = None if small or not st.full else _by_weight(st, s, transpose, n_dst)
    if by_weight is not None:
        return ExactArray(_int_array(g.from_canonical(by_weight, dst_spatial)), source.den * st.q)
    kind: Any = (np.float64 if smax * wmax * max(n_slots, 1) < 2**53 else np.int64) if small else object
    s = s.astype(kind)
    acc = np.zeros((g.batch, n_dst), dtype=kind)
    _accumulate(st, s, acc, transpose)
    return ExactArray(_int_array(g.from_canonical(acc, dst_spatial)), source.den * st.q)


def _limbs(st: Stamp, s: np.ndarray, boxes: tuple[Slab, ...], transpose: bool, room: int) -> np.ndarray:
    """:func:`apply` for a full support whose slots are boxes, where a product with its weight leaves
    int64 (a large common denominator: k15 windows have 36 divisors, lcm ~2^37) but ``s`` times a
    ``room``-bit weight summed over K slots does not: forward, each window's sum in int64 times its
    weight in Python ints; transposed, the weights cut into ``room``-bit limbs (w = sum_j limb_j 2^(room j),
    the top limb signed), one int64 box pass a limb, combined in Python ints. O(limbs x pairs) int64 work
    and O(targets x limbs) object work."""
    g = st.geometry
    weight = st.weight.reshape(st.weight.shape[:1] + g.out_spatial)
    if not transpose:
        products: np.ndarray = _window_sums(g, s, boxes).astype(object) * weight.astype(object)
        return products.reshape(s.shape[0], -1)
    wide = weight.astype(object)
    bits = max(int(abs(int(weight.max()))).bit_length(), int(abs(int(weight.min()))).bit_length(), 1)
    src = s.reshape((s.shape[0],) + g.out_spatial)
    top = -(-bits // room) - 1  # the top limb keeps the sign; the others are masked to room bits
    total: Any = 0
    for j in reversed(range(top + 1)):
        limb = wide >> (room * j) if j == top else (wide >> (room * j)) & ((1 << room) - 1)
        part = np.zeros((s.shape[0],) + g.in_spatial, dtype=np.int64)
        terms = src * limb.astype(np.int64)
        for box in boxes:
            part[(slice(None),) + box.cells] += terms[(slice(None),) + box.windows]
        total = (total << room) + part.astype(object)  # the top limb's: 0 << room + part
    return np.asarray(total).reshape(s.shape[0], -1)


def _by_weight(st: Stamp, s: np.ndarray, transpose: bool, n_dst: int) -> np.ndarray | None:
    """:func:`apply` for a full support (average pooling) whose sums leave int64 only through the
    weights (a large common denominator: k15 windows have 36 divisors, lcm ~2^37), or None.

    Every entry of a window is its one weight, and windows share few weights: sum the
    source in int64 per (target, weight) (at most K terms each), then combine the few
    weights in Python ints. O(pairs) int64 work and O(targets x weights) object work,
    instead of O(pairs) object work.
    """
    g = st.geometry
    values, group = np.unique(st.weight[0], return_inverse=True)
    n_pairs = int(np.count_nonzero(g.valid))
    if s.dtype == object or int(np.abs(s).max(initial=0)) * g.cells.shape[1] >= 2**62 or values.size * n_dst > n_pairs:
        return None
    acc = np.zeros((g.batch, n_dst, values.size), dtype=np.int64)
    for line in lines(g):  # within a line targets are distinct, so (target, group) pairs are too
        if transpose:
            acc[:, line.cells, group[line.w]] += s[:, line.w]
        elif line.window is None:
            acc[:, line.w, group[line.w]] += s[:, line.cells]
        else:
            acc[:, line.window, group[line.window]] += s[:, line.cells].sum(axis=1)
    out: np.ndarray = acc.astype(object) @ values.astype(object)
    return out


def _accumulate(st: Stamp, s: np.ndarray, acc: np.ndarray, transpose: bool) -> None:
    """``acc += J s`` or ``J^T s`` with J's entries ``support * weight`` (the ``q`` left out), in ``acc``'s dtype:
    over the support's own pairs when it is sparse, else one line of the (windows, slots) grid at a time."""
    g = st.geometry
    if not st.full and 2 * st.size <= int(_valid_counts(g).sum()):
        _apply_pairs(st, s, acc, transpose)
        return
    boxes = slabs(g) if st.full and acc.flags.c_contiguous else None  # contiguous: reshaped, acc is a view
    if boxes is not None:
        _apply_slabs(st, s, acc, transpose, boxes)
        return
    for line in lines(g):
        coeff = st.coefficients(line).astype(acc.dtype)
        if transpose:
            acc[:, line.cells] += s[:, line.w] * coeff
        elif line.window is None:
            acc[:, line.w] += s[:, line.cells] * coeff
        else:
            acc[:, line.window] += (s[:, line.cells] * coeff).sum(axis=1)


def _apply_slabs(st: Stamp, s: np.ndarray, acc: np.ndarray, transpose: bool, boxes: tuple[Slab, ...]) -> None:
    """:func:`_accumulate` for a full support (average pooling) whose slots are boxes (:func:`slabs`).

    Every entry of window w is its weight: ``dx[cells] += (s * weight)[windows]`` one
    slot at a time (transpose), or ``y[windows] += x[cells]`` then times the weight. No
    sum has more than K terms of magnitude <= max|s|·max|weight|, the bound
    :func:`apply` chose ``acc``'s dtype by, so both orders are exact.
    """
    g = st.geometry
    lead = (acc.shape[0],)
    weight = st.weight.astype(acc.dtype).reshape(st.weight.shape[:1] + g.out_spatial)
    dst = acc.reshape(lead + (g.in_spatial if transpose else g.out_spatial))
    if transpose:
        src = s.reshape(lead + g.out_spatial) * weight
        for box in boxes:
            dst[(slice(None),) + box.cells] += src[(slice(None),) + box.windows]
        return
    dst += _window_sums(g, s, boxes) * weight


def window_mass(g: Geometry, values: np.ndarray) -> np.ndarray:
    """(B, W): an upper bound of each window's sum of the canonical (B, n_in) nonnegative float64
    ``values`` over its real cells (a rounding bound's mass): one slice a slot where the slots are
    boxes (:func:`slabs`: no (B, W, K) gather), else the gathered rows summed; either float sum of K
    nonnegative terms is within a factor 1 - γ_{K-1} of the exact one, so it is raised by 2K·2^-53."""
    boxes = slabs(g)
    if boxes is None:
        sums = g.gather(values).sum(axis=2)
    else:
        sums = _window_sums(g, np.ascontiguousarray(values, dtype=np.float64), boxes).reshape(values.shape[0], -1)
    return np.asarray(sums * (1 + 2 * max(g.cells.shape[1], 1) * 2.0**-53))


def _window_sums(g: Geometry, s: np.ndarray, boxes: tuple[Slab, ...]) -> np.ndarray:
    """(batch, *out_spatial): each window's sum of the canonical (batch, cells) ``s``, one box
    slot at a time, in ``s``'s dtype."""
    src = s.reshape((s.shape[0],) + g.in_spatial)
    sums = np.zeros((s.shape[0],) + g.out_spatial, dtype=s.dtype)
    for box in boxes:
        sums[(slice(None),) + box.windows] += src[(slice(None),) + box.cells]
    return sums


def _apply_pairs(st: Stamp, s: np.ndarray, acc: np.ndarray, transpose: bool) -> None:
    """:func:`_accumulate` over the support's own (window, slot) pairs, every slice at once.

    For a sparse support (max pooling's one slot a window, or any x-dependent
    support) this is O(support) instead of O(windows x K) lines; pairs may share a
    cell, so the scatter is ``np.add.at`` (exact on int64 and on Python ints), or ``np.bincount`` into floats.
    """
    b, w, cells, coeff = _batch_entries(st)
    coeff = coeff.astype(acc.dtype)
    target, terms = (cells, s[b, w] * coeff) if transpose else (w, s[b, cells] * coeff)
    if acc.dtype.kind == "f":  # float sums in any order (bincount is ~5x faster than add.at)
        acc += np.bincount(_flat(b, target, acc.shape), weights=terms, minlength=acc.size).reshape(acc.shape)
    else:  # exact on int64 and on Python ints
        np.add.at(acc, (b, target), terms)


def _flat(b: np.ndarray, target: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Flat positions ``b * shape[1] + target`` in a (batch, n) array (``target`` itself for one slice)."""
    return target if shape[0] == 1 else b * shape[1] + target


def _batch_entries(st: Stamp) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:attr:`Stamp.entries` for every batch slice with each entry's integer weight:
    (batch index, window, input cell, weight)."""
    sl, w, cells = st.entries
    weight = st.weight[0, w] if st.depth == 1 else st.weight[sl, w]
    b, (w, cells, weight) = _every_slice(st, sl, w, cells, weight)
    return b, w, cells, weight


def _every_slice(st: Stamp, sl: np.ndarray, *per_entry: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The batch index of each entry, and the per-entry arrays, over every batch slice: a
    stamp of depth 1 (the same support in every slice) is repeated slice by slice."""
    batch = st.geometry.batch
    if st.depth == batch:
        return sl, per_entry
    n = sl.size
    return np.repeat(np.arange(batch), n), tuple(np.tile(a, batch) for a in per_entry)


@dataclasses.dataclass(frozen=True, eq=False)
class SparseJacobian:
    """An exact sparse Jacobian in COO form.

    Rows index the flattened output and columns the flattened input, both in the
    spec's layout order. Values are exact SymPy rationals; ``value_ids`` index
    ``table`` (the distinct values), so the object array costs one pointer an entry.

    Attributes:
      output_shape / input_shape: the full shapes in the spec's layout.
      rows, cols: (nnz,) int64, sorted by (row, col).
      value_ids: (nnz,) signed integers indexing ``table`` (the engine stores the narrowest
        type that holds them: int8 for up to 128 distinct values).
      table: distinct exact values.
      spec: the pooling spec it is the Jacobian of (for :func:`symjac.in_clarke_set`).
    """

    output_shape: tuple[int, ...]
    input_shape: tuple[int, ...]
    rows: np.ndarray
    cols: np.ndarray
    value_ids: np.ndarray
    table: tuple[sympy.Rational, ...]
    spec: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        return (math.prod(self.output_shape), math.prod(self.input_shape))

    @property
    def nnz(self) -> int:
        return int(self.rows.size)

    @property
    def values(self) -> np.ndarray:
        """(nnz,) object array of exact SymPy values."""
        table = np.empty(len(self.table), dtype=object)
        table[:] = list(self.table)
        return np.asarray(table[self.value_ids])

    def entry(self, out_index: Any, in_index: Any) -> sympy.Rational:
        """Exact ∂y[out_index]/∂x[in_index] (multi-indices in the layout); 0 if absent."""
        try:
            row = int(np.ravel_multi_index(tuple(out_index), self.output_shape))
            col = int(np.ravel_multi_index(tuple(in_index), self.input_shape))
        except (ValueError, TypeError):
            raise InputError(
                f"entry({out_index!r}, {in_index!r}): indices must lie in output shape "
                f"{self.output_shape} and input shape {self.input_shape}"
            ) from None
        lo = np.searchsorted(self.rows, row, side="left")
        hi = np.searchsorted(self.rows, row, side="right")
        hit = np.flatnonzero(self.cols[lo:hi] == col)
        return self.table[int(self.value_ids[lo + hit[0]])] if hit.size else sympy.Integer(0)

    def todense(self) -> sympy.Matrix:
        """The dense exact matrix (small shapes only: it is O(inputs x outputs))."""
        m = sympy.zeros(*self.shape)
        for r, c, v in zip(self.rows.tolist(), self.cols.tolist(), self.value_ids.tolist()):
            m[r, c] = self.table[v]
        return m

    def to_numpy(self, dtype: Any = np.float64) -> np.ndarray:
        """The dense matrix with each exact value correctly rounded into ``dtype``."""
        table = np.empty(len(self.table), dtype=object)
        table[:] = [Fraction(int(v.p), int(v.q)) for v in self.table]
        dense = np.zeros(self.shape, dtype=dtype)
        if self.table:
            dense[self.rows, self.cols] = round_fractions(table, dtype)[self.value_ids]
        return dense


def sparse(st: Stamp) -> SparseJacobian:
    """COO of the stamp, sorted by (row, col), without a sort where the layout allows.

    Entries are generated slice by slice, window-major with slots in row-major
    order, so both rows and (within a row) columns increase; only channels_last
    with several channels interleaves rows and needs a stable sort by row.
    """
    g = st.geometry
    # per-window weights (never per entry): few distinct values in a narrow range, numbered
    # without a sort, in the narrowest integer type (value_ids is one of the nnz-sized outputs)
    distinct, inverse = _unique_int64(st.weight.reshape(-1))
    id_type = next(t for t in (np.int8, np.int16, np.int32, np.int64) if distinct.size <= np.iinfo(t).max + 1)
    weight_ids = inverse.astype(id_type).reshape(st.weight.shape)
    # every slice at once, slice-major, window-major, slots row-major (a depth-1 stamp repeated per slice)
    if st.depth == 1 and st.full:  # every valid slot: read row-major from the table (no count pass)
        w = np.repeat(np.arange(g.n_out), _valid_counts(g))
        sl, cells, vid = _zeros(w.size), g.cells[g.valid], np.repeat(weight_ids[0], _valid_counts(g))
    else:
        sl, w, cells = st.entries
        vid = weight_ids[0, w] if st.depth == 1 else weight_ids[sl, w]
    b, (w, cells, vid) = _every_slice(st, sl, w, cells, vid)
    if g.batch == 1 and not g.trail:  # one slice: flat index = canonical index, no copy
        row, col = w, cells
    else:
        row, col = g.flat_index(b, w, g.out_spatial), g.flat_index(b, cells, g.in_spatial)
    del b, sl, w, cells
    if math.prod(g.trail) > 1:  # channels_last with several channels: rows interleave
        order = np.argsort(row, kind="stable")
        row, col, vid = row[order], col[order], vid[order]
    table = tuple(sympy.Rational(int(v), st.q) for v in distinct)
    return SparseJacobian(g.output_shape, g.input_shape, row, col, vid, table, spec=g.spec)


def _valid_counts(g: Geometry) -> np.ndarray:
    """(windows,) valid slots per window: the product of the per-axis counts (valid is their outer and)."""
    counts = np.ones(1, dtype=np.int64)
    for ax in g.axes:
        counts = np.multiply.outer(counts, np.count_nonzero(ax.valid, axis=1)).reshape(-1)
    return counts


def vjp_terms(geometry: Geometry, x: ExactArray | None, dy: ExactArray) -> tuple[ExactArray, np.ndarray, np.ndarray]:
    """What checking a float VJP at ``dy`` needs, from one stamp (policy "first"): ``J^T dy``
    exactly, and per cell in float64 (canonical (B, n_in)) the magnitude of its terms
    ``(|J|^T |dy|)`` and their number m (J with its entries set to 1, applied to ones).

    Each is one pass over the support's pairs or the grid's lines, never a (B, W, K) array.
    """
    g = geometry
    st = stamp(g, x, "first")
    want = apply(st, dy, transpose=True)
    dy_abs = np.abs(g.to_canonical(dy.to_numpy(np.float64), g.out_spatial))
    bound, count = np.zeros((g.batch, g.n_in)), np.zeros((g.batch, g.n_in))
    if st.full:  # every valid slot: by lines, and the windows reading each cell
        _accumulate(dataclasses.replace(st, weight=np.abs(st.weight) / st.q, q=1), dy_abs, bound, transpose=True)
        count[:] = np.bincount(g.cells[g.valid], minlength=g.n_in)
        return want, bound, count
    b, w, cells, weight = _batch_entries(st)  # over the support's own pairs
    target = _flat(b, cells, bound.shape)
    bound[:] = np.bincount(target, weights=dy_abs[b, w] * np.abs(weight) / st.q, minlength=bound.size).reshape(bound.shape)
    count[:] = np.bincount(target, minlength=count.size).reshape(count.shape)
    return want, bound, count
