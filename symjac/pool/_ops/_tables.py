"""What RoI pooling and RoI Align share: boxes read exactly, windows given as a table, linear tables applied exactly.

RoI operators (:mod:`symjac.pool._ops.roi_align`, :mod:`symjac.pool._ops.roi_pool`) have no kernel:
each box is cut into ``out_h x out_w`` bins, and a bin is a window that reads cells of the plane of
the box's batch item. Their geometry is a table (:class:`Table`, read by
:class:`symjac.pool._geometry.TableGeometry`): for every window (box k, bin (i, j)), flat in
(K, out_h, out_w) order, the cells it reads in the flat (N, H, W) input of one channel, and for a
linear operator (RoI Align's average) the exact weight of each as an integer over one common
denominator ``q``. The boxes are a spec field, held as exact rationals (``Fraction``); the
derivative with respect to them is out of scope (the map's derivative is what a backward returns
as ``dx``; a box-gradient is not checked).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import NAN, NEG_INF, POS_INF, ExactArray, nonfinite_codes, to_fraction
from symjac.pool._ops._edges import Counts, Nonfinite, proxy, sum_value

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry
    from symjac.pool._stamp import SparseJacobian

#: One box: (batch index, x1, y1, x2, y2), the coordinates exact rationals (torchvision's ``rois`` row).
Box = tuple[int, Fraction, Fraction, Fraction, Fraction]


def show(f: Fraction) -> str:
    """A rational as a spec file and a report write it: ``3``, ``-5/2``."""
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def box_words(k: int, box: Box) -> str:
    """``box k (batch item n, x x1..x2, y y1..y2)``: how a report names a box."""
    return f"box {k} (batch item {box[0]}, x {show(box[1])}..{show(box[3])}, y {show(box[2])}..{show(box[4])})"


class BoxesSpec:
    """What a RoI spec (a frozen dataclass with ``output_size``, ``boxes`` and ``spatial_scale``)
    gets from its boxes: the layout and rank of its map, the boxes as torchvision's ``rois`` array,
    the coverage plan's map size, and the parts of its repr and spec table that name the boxes."""

    __slots__ = ()
    output_size: tuple[int, int]
    boxes: tuple[Box, ...]
    spatial_scale: Fraction

    @property
    def layout(self) -> str:
        return "channels_first"

    @property
    def rank(self) -> int:
        return 2

    def rois(self, dtype: Any = np.float64) -> np.ndarray:
        """The boxes as torchvision's (K, 5) ``rois`` array in ``dtype`` (rounded where not exact)."""
        return np.array([[float(v) for v in box] for box in self.boxes], dtype=dtype)

    def extent(self, margin: int) -> tuple[int, int]:
        """(H, W) reaching every box's scaled corner, plus ``margin`` cells, within 2..64."""
        ys = [abs(v) * self.spatial_scale for b in self.boxes for v in (b[2], b[4])]
        xs = [abs(v) * self.spatial_scale for b in self.boxes for v in (b[1], b[3])]
        return max(2, min(64, math.ceil(max(ys)) + margin)), max(2, min(64, math.ceil(max(xs)) + margin))

    def boxes_arrays(self) -> dict[str, np.ndarray]:
        """The boxes exactly, for a test in C: ``boxes_num`` and ``boxes_den``, both (K, 5) int64, box k's
        entry i is ``boxes_num[k, i] / boxes_den[k, i]`` (the batch index over 1)."""
        fractions = [[Fraction(v) for v in box] for box in self.boxes]
        shape = (len(self.boxes), 5)
        num = np.array([[f.numerator for f in row] for row in fractions], dtype=np.int64).reshape(shape)
        den = np.array([[f.denominator for f in row] for row in fractions], dtype=np.int64).reshape(shape)
        return {"boxes_num": num, "boxes_den": den}

    def boxes_repr(self, default: tuple[Box, ...]) -> str:
        """``, boxes=((0, '1', ...),)`` for boxes other than ``default``, else ``""``."""
        if self.boxes == default:
            return ""
        return ", boxes=(" + ", ".join("(" + ", ".join([str(b[0])] + [repr(show(v)) for v in b[1:]]) + ")"
                                       for b in self.boxes) + ",)"

    def boxes_table(self, **options: Any) -> dict[str, Any]:
        """The spec file's table: ``output_size``, ``spatial_scale``, the operator's ``options``, then
        ``boxes`` (rationals as exact text)."""
        return {"output_size": list(self.output_size), "spatial_scale": show(self.spatial_scale), **options,
                "boxes": [[b[0]] + [show(v) for v in b[1:]] for b in self.boxes]}


def read_boxes(value: Any, default: tuple[Box, ...]) -> tuple[Box, ...]:
    """``boxes`` as exact (batch index, x1, y1, x2, y2) rows: ints, dyadic floats, ``Fraction``,
    ``"1/3"``; None gives ``default``.

    Raises:
      SpecError: not a sequence of 5-number rows, a batch index that is not an integer >= 0, or a
        coordinate that is not a finite rational.
    """
    if value is None:
        return default
    rows = value.tolist() if isinstance(value, np.ndarray) else value
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise SpecError(f"boxes={value!r} is not valid: give rows (batch_index, x1, y1, x2, y2), as torchvision's "
                        "rois tensor of shape (K, 5)")
    out: list[Box] = []
    for k, row in enumerate(rows):
        items = list(row) if hasattr(row, "__iter__") and not isinstance(row, (str, bytes)) else [row]
        if len(items) != 5:
            raise SpecError(f"boxes[{k}]={row!r} is not valid: give 5 numbers (batch_index, x1, y1, x2, y2)")
        b = items[0]
        try:
            index = to_fraction(b, f"boxes[{k}][0]")
        except InputError as e:
            raise SpecError(str(e)) from None
        if index.denominator != 1 or index < 0:
            raise SpecError(f"boxes[{k}][0]={b!r} is not valid: the batch index must be an integer >= 0")
        coords = []
        for i, v in enumerate(items[1:]):
            try:
                coords.append(to_fraction(v, f"boxes[{k}][{i + 1}]"))
            except InputError as e:
                raise SpecError(f"{e}: give box coordinates as exact rationals (int, float, Fraction, '1/3')") from None
        out.append((int(index), coords[0], coords[1], coords[2], coords[3]))
    if not out:
        raise SpecError("boxes=() is not valid: give at least one box (batch_index, x1, y1, x2, y2)")
    return tuple(out)


def read_scale(value: Any) -> Fraction:
    """``spatial_scale`` as an exact rational > 0."""
    try:
        scale = to_fraction(value, "spatial_scale")
    except InputError as e:
        raise SpecError(f"{e}: give a rational > 0 (e.g. 1/16)") from None
    if scale <= 0:
        raise SpecError(f"spatial_scale={value!r} is not valid: give a rational > 0 (e.g. 1/16)")
    return scale


def read_output_size(value: Any) -> tuple[int, int]:
    """``output_size`` (out_h, out_w): an int or two ints >= 1."""
    items = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    try:
        pair = tuple(items)
    except TypeError:
        pair = ()
    if (len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 2**16
                                  for v in pair)):
        raise SpecError(f"output_size={value!r} is not valid: give an int or (out_h, out_w), integers in 1..65536")
    return int(pair[0]), int(pair[1])


def check_map(spec: Any, input_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a RoI operator's feature map, every box's batch index below N.

    Raises:
      SpecError: the shape is not 4-D, or a box names a batch item the map does not have.
    """
    if len(input_shape) != 4:
        raise SpecError(f"input_shape={input_shape!r} is not valid for {type(spec).__name__}: the feature map is "
                        "(N, C, H, W)")
    n = input_shape[0]
    for k, box in enumerate(spec.boxes):
        if box[0] >= n:
            raise SpecError(f"box {k} reads batch item {box[0]}, but input_shape={input_shape!r} has N={n}: give a "
                            f"map with N > {box[0]}")
    return input_shape[0], input_shape[1], input_shape[2], input_shape[3]


def plan_shapes(spec: Any, large: bool) -> list[tuple[int, ...]]:
    """A RoI operator's coverage plan: the map at the size its boxes were drawn for and one more row and
    column (a box's cut against the edge moves), with 2 and 3 channels; ``large`` adds 37 channels."""
    n = max(b[0] for b in spec.boxes) + 1
    h, w = spec.map_size
    shapes: list[tuple[int, ...]] = [(n, 2, h, w), (n, 3, h + 1, w + 1)]
    if large:
        shapes.append((n, 37, h, w))
    return shapes


@dataclasses.dataclass(frozen=True, eq=False)
class Table:
    """The windows of a RoI operator at one map shape.

    Attributes:
      out_spatial: (K, out_h, out_w).
      cells / valid: (windows, S) the flat (N, H, W) cells each window reads, -1 and False past its own.
      num / q: (windows, S) exact weights ``num / q`` of a linear operator (RoI Align); ones for RoI pooling.
      terms: (windows, S) how many (sample point, corner) products add into each entry (its rounding depth).
      samples: (windows,) sample points of each window (RoI Align's grid, 0 for RoI pooling).
      starts: (windows, 3) each window's first cell (n, y, x).
      words: (windows,) each window in the operator's terms: its box and bin, and where the box's
        bins and sample points lie (findings quote it).
      edge: (windows, S) the weight of sample points lying exactly on a discontinuity of the operator
        (RoI Align's edge test y = -1 or H), or None.
    """

    out_spatial: tuple[int, int, int]
    cells: np.ndarray
    valid: np.ndarray
    num: np.ndarray
    q: int
    terms: np.ndarray
    samples: np.ndarray
    starts: np.ndarray
    words: tuple[str, ...]
    edge: np.ndarray | None = None


def build_table(out_spatial: tuple[int, int, int], rows: list[dict[int, tuple[Fraction, int]]],
                starts: list[tuple[int, int, int]], samples: list[int], words: list[str]) -> Table:
    """A :class:`Table` from each window's ``{cell: (weight, terms)}`` (cells in the order read)."""
    width = max((len(r) for r in rows), default=0)
    width = max(width, 1)
    n = len(rows)
    q = math.lcm(*(f.denominator for r in rows for f, _ in r.values())) if any(rows) else 1
    big = any(abs(f.numerator) * (q // f.denominator) >= 2**62 for r in rows for f, _ in r.values())
    cells = np.full((n, width), -1, dtype=np.int64)
    num = np.zeros((n, width), dtype=object if big else np.int64)
    terms = np.zeros((n, width), dtype=np.int64)
    for w, r in enumerate(rows):
        for s, (cell, (f, t)) in enumerate(sorted(r.items())):
            cells[w, s], num[w, s], terms[w, s] = cell, f.numerator * (q // f.denominator), t
    valid = cells >= 0
    for a in (cells, valid, num, terms):
        a.setflags(write=False)
    return Table(out_spatial, cells, valid, num, q, terms, np.asarray(samples, dtype=np.int64),
                 np.asarray(starts, dtype=np.int64).reshape(n, 3), tuple(words))


def table_of_arrays(out_spatial: tuple[int, int, int], windows: list[tuple[np.ndarray, np.ndarray, int, np.ndarray,
                                                                         np.ndarray]],
                    starts: list[tuple[int, int, int]], samples: list[int], words: list[str]) -> Table:
    """A :class:`Table` from each window's (cells sorted, integer numerators, their denominator, terms,
    edge weights as floats): the numerators brought over one common denominator."""
    n = len(windows)
    width = max([w[0].size for w in windows] + [1])
    q = math.lcm(*(w[2] for w in windows)) if windows else 1
    big = any(w[1].size and int(np.abs(w[1]).max()) * (q // w[2]) >= 2**62 for w in windows)
    cells = np.full((n, width), -1, dtype=np.int64)
    num = np.zeros((n, width), dtype=object if big else np.int64)
    terms = np.zeros((n, width), dtype=np.int64)
    edge = np.zeros((n, width))
    for w, (c, v, qw, t, e) in enumerate(windows):
        cells[w, :c.size], terms[w, :c.size], edge[w, :c.size] = c, t, e
        num[w, :c.size] = v.astype(object) * (q // qw) if big else v * (q // qw)
    valid = cells >= 0
    for a in (cells, valid, num, terms, edge):
        a.setflags(write=False)
    return Table(out_spatial, cells, valid, num, q, terms, np.asarray(samples, dtype=np.int64),
                 np.asarray(starts, dtype=np.int64).reshape(n, 3), tuple(words), edge)


# -- a linear table applied exactly ------------------------------------------------------------
def _canonical_num(g: Geometry, a: ExactArray, spatial: tuple[int, ...]) -> np.ndarray:
    return np.asarray(g.to_canonical(a.num, spatial), dtype=object)


def linear_forward(g: Geometry, x: ExactArray) -> ExactArray:
    """``y = J x`` of a linear table (RoI Align), exactly: Python-int sums over each window's cells."""
    t: Table = g.table  # type: ignore[attr-defined]
    xc = _canonical_num(g, x, g.in_spatial)
    ext = np.concatenate([xc, np.zeros((g.batch, 1), dtype=object)], axis=1)
    y = (ext[:, t.cells] * np.asarray(t.num, dtype=object)[None]).sum(axis=2)
    return ExactArray(_ints(g.from_canonical(y, g.out_spatial)), x.den * t.q)


def linear_vjp(g: Geometry, dy: ExactArray) -> ExactArray:
    """``J^T dy`` of a linear table, exactly: each window's dy spread over its cells by its weights."""
    t: Table = g.table  # type: ignore[attr-defined]
    dyc = _canonical_num(g, dy, g.out_spatial)
    dx = np.zeros((g.batch, g.n_in + 1), dtype=object)
    dx[:] = 0
    terms = dyc[:, :, None] * np.asarray(t.num, dtype=object)[None]
    cells = np.where(t.valid, t.cells, g.n_in)
    for b in range(g.batch):
        np.add.at(dx[b], cells.reshape(-1), terms[b].reshape(-1))
    return ExactArray(_ints(g.from_canonical(dx[:, :-1], g.in_spatial)), dy.den * t.q)


def _ints(a: np.ndarray) -> np.ndarray:
    """Python ints to int64 where every one fits (ExactArray's fast paths), else kept as objects."""
    flat = a.reshape(-1)
    if not flat.size or max(abs(int(v)) for v in flat) < 2**62:
        return np.asarray(a, dtype=np.int64) if flat.size else np.zeros(a.shape, dtype=np.int64)
    return a


def table_jacobian(g: Geometry, num: np.ndarray, q: int) -> SparseJacobian:
    """The COO Jacobian of per-(slice, window, slot) exact entries ``num / q`` (zeros dropped)."""
    from symjac.pool._stamp import SparseJacobian

    t: Table = g.table  # type: ignore[attr-defined]
    full = np.broadcast_to(num, (g.batch,) + t.cells.shape)
    b, w, s = np.nonzero(t.valid[None] & (full != 0))
    values = full[b, w, s]
    rows = g.flat_index(b, w, g.out_spatial)
    cols = g.flat_index(b, t.cells[w, s], g.in_spatial)
    order = np.lexsort((cols, rows))
    distinct = sorted({int(v) for v in values})
    index = {v: i for i, v in enumerate(distinct)}
    ids = np.array([index[int(v)] for v in values], dtype=np.int64)[order]
    table = tuple(sympy.Rational(v, q) for v in distinct)
    return SparseJacobian(g.output_shape, g.input_shape, np.asarray(rows)[order].astype(np.int64),
                          np.asarray(cols)[order].astype(np.int64), ids, table, spec=g.spec)


@functools.lru_cache(maxsize=32)
def float_weights(g: Geometry) -> np.ndarray:
    """(windows, S) the exact weights rounded to float64 (0 past a window's cells)."""
    t: Table = g.table  # type: ignore[attr-defined]
    out = np.array([[float(Fraction(int(v), t.q)) for v in row] for row in t.num], dtype=np.float64)
    out = out.reshape(t.cells.shape)
    out.setflags(write=False)
    return out


class TableLayout:
    """The layout of a table geometry (:class:`symjac.pool._geometry.TableGeometry`, which mixes this
    into :class:`~symjac.pool._geometry.Geometry`): canonical slices are the channels, the input (N,
    C, H, W) is (C, flat (N, H, W)) (``in_spatial`` (N, H, W)), the output (K, C, oh, ow) is (C, flat
    (K, oh, ow)) (``out_spatial`` (K, oh, ow)); a window of box k reads cells of k's batch item's
    plane, so its ``cells`` index the flat (N, H, W) input of one channel."""

    input_shape: tuple[int, ...]
    out_spatial: tuple[int, ...]
    in_spatial: tuple[int, ...]
    table: Any
    starts: Any

    @functools.cached_property
    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        return self.table.cells, self.table.valid

    @functools.cached_property
    def padded(self) -> np.ndarray:
        """No padding: the valid slots."""
        return np.asarray(self.table.valid)

    @property
    def batch(self) -> int:
        """The channels."""
        return int(self.input_shape[1])

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (self.out_spatial[0], self.batch) + self.out_spatial[1:]

    def to_canonical(self, array: np.ndarray, spatial: tuple[int, ...] | None = None) -> np.ndarray:
        spatial = self.in_spatial if spatial is None else spatial
        return np.moveaxis(np.asarray(array), 1, 0).reshape(self.batch, math.prod(spatial))

    def from_canonical(self, array: np.ndarray, spatial: tuple[int, ...] | None = None) -> np.ndarray:
        spatial = self.out_spatial if spatial is None else spatial
        return np.moveaxis(np.asarray(array).reshape((self.batch,) + spatial), 0, 1)

    def flat_index(self, batch: np.ndarray, position: np.ndarray, spatial: tuple[int, ...]) -> np.ndarray:
        plane = math.prod(spatial[1:])
        return np.asarray((position // plane) * (self.batch * plane) + batch * plane + position % plane)

    def window_starts(self) -> np.ndarray:
        return np.asarray(self.starts)

    @property
    def slots_repeat(self) -> bool:
        """Two boxes' windows may read one cell at one slot."""
        return True


def weighted_nonfinite(g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
    """A linear table's reading of an x holding NaN or ±inf: a window's value is IEEE 754's sum of ``w·x``
    over the cells it reads with a weight > 0 (NaN with a NaN or with both infinities, else the infinity:
    every weight is positive); its rows are the weights at every x (the proxy: non-finite cells 0)."""
    t: Table = g.table  # type: ignore[attr-defined]
    codes = nonfinite_codes(x)
    codes_c = np.zeros((g.batch, g.n_in), dtype=np.int8) if codes is None else g.to_canonical(codes)
    gathered = np.where((np.asarray(t.num) != 0)[None] & t.valid[None], g.gather(codes_c, 0), 0)
    c = Counts(codes_c, (gathered == NAN).sum(axis=2), (gathered == POS_INF).sum(axis=2),
               (gathered == NEG_INF).sum(axis=2))
    special, value = sum_value(c)
    finite, exact = proxy(g, x)
    return Nonfinite(policy, finite, exact, special, value)


def edge_weights(t: Table) -> np.ndarray:
    """(windows, S) a table's weights of sample points exactly on a discontinuity (:attr:`Table.edge`)."""
    assert t.edge is not None
    return t.edge
