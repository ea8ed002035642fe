"""RoI max pooling (torchvision ``roi_pool``, ONNX ``MaxRoiPool``, Caffe's ``ROIPooling``).

Each box ``(n, x1, y1, x2, y2)`` is scaled by ``spatial_scale`` and rounded to cells (C's
``round``: half away from zero), ``start = round(x1·scale)``, ``end = round(x2·scale)``; its size
``max(end - start + 1, 1)`` (an inverted or point box is one cell) is cut into ``out_h x out_w``
bins, bin i spanning ``[floor(i·size/out), ceil((i+1)·size/out))`` from the start (bins overlap
where size/out is not an integer), clamped to the map. A bin's value is the maximum of its cells,
0 for an empty bin (clamped away: a box outside the map); its derivative is 1 at the first maximal
cell in row-major order (torchvision's and ONNX Runtime's strict ``>`` scan: the convention at a
tie, as max pooling's ``first``) and 0 elsewhere, an empty bin's row 0. The forward is exact in
every dtype (a max selects an input); the derivative with respect to the boxes is out of scope.

Float evaluation: torchvision and ONNX Runtime compute ``size/out`` and ``i·(size/out)`` in the
input's dtype, and ``x1·scale`` too; where one of them rounds across an integer (or ``x1·scale``
across a half) the float bins are not the exact ones. The verifier then refuses the input
(:class:`symjac.InputError` naming the box and bin), rather than judge by bins an implementation
does not have.

Non-finite inputs (:meth:`RoiPoolOp.nonfinite`): max pooling's convention, bin by bin. +inf and
-inf are ordered values (a bin of -inf only is -inf, its gradient to its first cell, a tie among
them); a NaN is read by one of two policies, the forward deciding which:

- ``ignore`` (the default; IEEE 754-2019 *maximumNumber*, the strict ``x > maxval`` scan of
  torchvision, Caffe and Detectron): a bin is the maximum of its cells other than NaN, its
  gradient goes there; a bin of NaN only is NaN, its gradient to its first cell.
- ``propagate`` (IEEE 754-2019 *maximum*, NumPy's ``max``): a bin holding a NaN is NaN, its
  gradient to its first NaN cell.

What kernels do, measured (ONNX Runtime 1.32, float32; torchvision read from its
``roi_pool_kernel.cpp``, run through ``tests/test_roi_pool.py``'s transcription, as its wheel does
not load against torch 2.13's CPU build): torchvision starts each bin at ``-FLT_MAX`` (in float64
too) and keeps ``argmax = -1`` until a cell is larger, so it ignores NaN, but a bin of -inf and NaN
only is ``-FLT_MAX`` with no gradient (not -inf, or NaN), and in float64 so is a bin of values
below ``-FLT_MAX`` (the ``extreme`` family): findings, not a convention. ONNX Runtime's
``MaxRoiPool`` gives ``-FLT_MAX`` for a bin of -inf only too, and keeps a NaN until the next cell
replaces it (``[5, nan, 1]`` -> 1, ``[1, 5, nan]`` -> NaN): a bin's value depends on where its
NaN sits, which no policy allows (a known defect of the adapter, :mod:`symjac.frameworks.onnxruntime`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray, nonfinite_codes
from symjac.check._rounding import finfo
from symjac.pool._foreign import accept_only_fields
from symjac.pool._ops._edges import Nonfinite, code_values, ordered
from symjac.pool._ops._protocol import ForwardBound, Operator
from symjac.pool._ops._tables import (
    Box,
    BoxesSpec,
    box_words,
    build_table,
    check_map,
    plan_shapes,
    read_boxes,
    read_output_size,
    read_scale,
    show,
    table_jacobian,
)
from symjac.pool._rows import ExactRows

if TYPE_CHECKING:
    from symjac.pool._beta import Tie
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._tables import Table
    from symjac.pool._stamp import SparseJacobian

#: The default boxes, drawn on a 6 x 7 map (N = 2): inside with overlapping bins (0: 5 rows in 2
#: bins share row 2), coordinates at halves (1: 5/2 rounds to 3 away from zero, 2 to even; -1/2 to
#: -1, partly outside), wholly outside (2: every bin empty, 0), a point box (3), an inverted box (4),
#: one past the bottom-right corner (5: its last bins clamped empty), several boxes per batch item.
DEFAULT_BOXES: tuple[Box, ...] = tuple((b, Fraction(x1), Fraction(y1), Fraction(x2), Fraction(y2)) for b, x1, y1, x2, y2 in (
    (0, 1, 0, 4, 4),
    (0, Fraction(-1, 2), Fraction(5, 2), Fraction(5, 2), Fraction(11, 2)),
    (1, 8, 7, 10, 9),
    (1, 3, 2, 3, 2),
    (0, 5, 4, 2, 1),
    (1, 4, 3, 7, 6),
))
DEFAULT_MAP = (6, 7)


def c_round(v: Fraction) -> int:
    """C's ``round``: half away from zero."""
    r = math.floor(abs(v) + Fraction(1, 2))
    return r if v >= 0 else -r


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class RoiPool(BoxesSpec):
    """RoI max pooling over a (N, C, H, W) map (torchvision ``roi_pool``, ONNX ``MaxRoiPool``).

    Args:
      output_size: bins per box, an int or (out_h, out_w) (ONNX's ``pooled_shape``).
      boxes: rows (batch_index, x1, y1, x2, y2), exact rationals; None: :data:`DEFAULT_BOXES`
        (overlapping bins, coordinates at halves, boxes outside, point and inverted boxes, several
        per batch item).
      spatial_scale: box coordinates times this are map coordinates (a rational > 0).

    The output is (K, C, out_h, out_w); :meth:`rois` gives the boxes as torchvision's float array.
    """

    output_size: tuple[int, int]
    boxes: tuple[Box, ...] = dataclasses.field(default=None, kw_only=True)  # type: ignore[arg-type]
    spatial_scale: Fraction = dataclasses.field(default=Fraction(1), kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "output_size", read_output_size(self.output_size))
        put(self, "boxes", read_boxes(self.boxes, DEFAULT_BOXES))
        put(self, "spatial_scale", read_scale(self.spatial_scale))

    @property
    def mode(self) -> str:
        """The operator's registry name."""
        return "roi_pool"

    @property
    def map_size(self) -> tuple[int, int]:
        """(H, W) of the coverage plan's map: the default boxes' 6 x 7, else the boxes' extent."""
        return DEFAULT_MAP if self.boxes == DEFAULT_BOXES else self.extent(1)

    def __repr__(self) -> str:
        return (f"RoiPool(output_size={self.output_size!r}{self.boxes_repr(DEFAULT_BOXES)}, "
                f"spatial_scale={show(self.spatial_scale)!r})")


def _axis(lo: Fraction, hi: Fraction, scale: Fraction, bins: int, length: int) -> tuple[int, list[tuple[int, int]]]:
    """One axis of a box: its rounded start, and per bin the clamped [start, end) cells."""
    start, end = c_round(lo * scale), c_round(hi * scale)
    size = max(end - start + 1, 1)
    out = []
    for i in range(bins):
        a = math.floor(Fraction(i * size, bins)) + start
        b = math.ceil(Fraction((i + 1) * size, bins)) + start
        out.append((min(max(a, 0), length), min(max(b, 0), length)))
    return start, out


@functools.lru_cache(maxsize=64)
def _table(spec: RoiPool, input_shape: tuple[int, ...]) -> Table:
    _, _, height, width = check_map(spec, input_shape)
    oh, ow = spec.output_size
    rows, starts, words = [], [], []
    for k, box in enumerate(spec.boxes):
        n = box[0]
        _, ys = _axis(box[2], box[4], spec.spatial_scale, oh, height)
        _, xs = _axis(box[1], box[3], spec.spatial_scale, ow, width)
        for i, (y0, y1) in enumerate(ys):
            for j, (x0, x1) in enumerate(xs):
                rows.append({(n * height + r) * width + c: (Fraction(1), 1) for r in range(y0, y1) for c in range(x0, x1)})
                starts.append((n, y0, x0))
                cells = f"rows {y0}..{y1 - 1}, columns {x0}..{x1 - 1}" if y1 > y0 and x1 > x0 else "no cell (empty)"
                words.append(f"{box_words(k, box)}, bin ({i}, {j}): {cells}")
    return build_table((len(spec.boxes), oh, ow), rows, starts, [0] * len(rows), words)


@functools.lru_cache(maxsize=64)
def _check_float_bins(spec: RoiPool, input_shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    """Raise :class:`InputError` where torchvision's float evaluation of the bins in ``dtype`` parts
    from the exact bins (a rounding across an integer or a half)."""
    _, _, height, width = input_shape
    oh, ow = spec.output_size
    t = dtype.type
    for k, box in enumerate(spec.boxes):
        for lo, hi, bins, length, name in ((box[2], box[4], oh, height, "y"), (box[1], box[3], ow, width, "x")):
            start, exact = _axis(lo, hi, spec.spatial_scale, bins, length)
            f_start = c_round(Fraction(float(t(t(lo) * t(spec.spatial_scale)))))
            f_end = c_round(Fraction(float(t(t(hi) * t(spec.spatial_scale)))))
            size = max(f_end - f_start + 1, 1)
            bin_size = t(t(size) / t(bins))
            floats = [(min(max(int(math.floor(float(t(t(i) * bin_size)))) + f_start, 0), length),
                       min(max(int(math.ceil(float(t(t(i + 1) * bin_size)))) + f_start, 0), length)) for i in range(bins)]
            if floats != exact:
                i = next(i for i in range(bins) if floats[i] != exact[i])
                raise InputError(f"box {k} of {spec!r}: in {dtype} its {name} bin {i} is cells {floats[i]} where the "
                                 f"exact bin is {exact[i]} (a rounding of the box's coordinates or of size/bins "
                                 "across an integer): the float bins are not the exact ones; give boxes whose "
                                 "coordinates times spatial_scale are exact in the dtype")


def _argmax(g: Geometry, xc: np.ndarray) -> np.ndarray:
    """(B, W) the slot of the first maximal cell of each window, -1 for an empty bin."""
    vals = g.gather(xc, fill=-np.inf)
    arg = np.argmax(vals, axis=2)  # the first maximum: torchvision's strict > scan in row-major order
    return np.where(_nonempty(g)[None], arg, -1)


def _nonempty(g: Geometry) -> np.ndarray:
    """(W,) the bins holding a cell."""
    return np.asarray(np.count_nonzero(g.valid, axis=1) > 0)


def _first_max(row: Any) -> int:
    """The first slot holding the row's maximum (exact Python ints)."""
    best = 0
    for s in range(1, len(row)):
        if row[s] > row[best]:
            best = s
    return best


class RoiPoolOp(Operator):
    """RoI max pooling (:class:`RoiPool`): a table of bins, the max's first maximal cell its derivative."""

    name = "roi_pool"
    any_geometry = False
    kernel_windows = False
    spec_name = "symjac.RoiPool"
    finite_differences = False
    extra_families = False
    nan_policies = ("ignore", "propagate")
    samples = ({"output_size": 2, "boxes": ((0, -1, 0, 2, 3),)},
               {"output_size": (2, 1), "boxes": ((0, 0, 1, 3, 2), (0, 1, 1, 1, 1), (0, 9, 9, 9, 9))},
               {"output_size": 1, "spatial_scale": Fraction(1, 2), "boxes": ((0, 0, 1, 3, 5),)})

    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """Extreme negative values (below a finite sentinel a kernel's scan may start from: ``-FLT_MAX``
        in a double kernel, which would win) and NaN and ±inf (the module's convention)."""
        return ("extreme", "nonfinite")

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        return float(finfo(dtype).max), "-"

    # -- non-finite inputs ---------------------------------------------------------------
    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """Max pooling's order (:func:`~symjac.pool._ops._edges.ordered`: +inf above every finite value,
        -inf below, NaN below -inf under ``ignore``, above +inf under ``propagate``): a bin's first
        maximal cell in that order routes its gradient, and its value is not finite where that cell is
        not (an empty bin: 0)."""
        finite, read, codes = ordered(g, x, policy)
        st = self._stamp(g, read)
        arg = np.where(st.any(axis=2), st.argmax(axis=2), -1)
        codes_c = np.zeros((g.batch, g.n_in + 1), dtype=np.int8)
        if codes is not None:
            codes_c[:, :-1] = g.to_canonical(codes)
        cell = np.where(arg >= 0, g.cells[np.arange(g.n_out)[None], np.maximum(arg, 0)], g.n_in)
        won = codes_c[np.arange(g.batch)[:, None], cell]  # an empty bin reads the finite column
        return Nonfinite(policy, finite, read, np.asarray(won != 0), code_values(won))

    def nonfinite_note(self, policy: str) -> str:
        if policy == "propagate":
            return ("RoI max pooling's NaN policy 'propagate' (IEEE 754-2019 maximum): a bin holding NaN is NaN, its "
                    "gradient to its first NaN cell; ±inf are ordered values (a bin of -inf only is -inf)")
        return ("RoI max pooling's NaN policy 'ignore' (IEEE 754-2019 maximumNumber, torchvision's x > maxval scan): "
                "a bin is the maximum of its cells other than NaN, its gradient there (NaN only where all are); "
                "±inf are ordered values: a bin of -inf only is -inf, its gradient to its first cell (not a "
                "sentinel such as -FLT_MAX, and not dropped)")

    # -- spec and geometry ---------------------------------------------------------------
    def tables(self, spec: Any, input_shape: tuple[int, ...]) -> Table:
        return _table(spec, input_shape)

    def table_size(self, spec: Any, input_shape: tuple[int, ...]) -> int:
        _, channels, height, width = check_map(spec, input_shape)
        return len(spec.boxes) * height * width * channels  # a box's bins overlap by at most a row: < 4 x its cells

    def plan_shapes(self, spec: Any, large: bool) -> list[tuple[int, ...]]:
        return plan_shapes(spec, large)

    def window_words(self, g: Geometry, w: int) -> str:
        return str(g.table.words[w])  # type: ignore[attr-defined]

    def tie_rule(self, tie: Any) -> str | None:
        return "first"  # a bin's maximum attained twice: the first maximal cell, torchvision's and ONNX's only rule

    def golden_arrays(self, spec: Any) -> dict[str, np.ndarray]:
        return BoxesSpec.boxes_arrays(spec)

    def spec_table(self, spec: Any) -> dict[str, Any]:
        return BoxesSpec.boxes_table(spec)

    def neighbour_changes(self, spec: Any, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        """One convention away: the scale ignored (1)."""
        return [{"spatial_scale": Fraction(1)}] if spec.spatial_scale != 1 else []

    # -- exact ---------------------------------------------------------------------------
    def _stamp(self, g: Geometry, x: ExactArray | None) -> np.ndarray:
        """(B, W, S) the Jacobian's 0/1 entries at x."""
        x = self.require_x(x)
        xc = g.to_canonical(x.num)
        if xc.dtype == object:  # Python ints beyond int64: compared exactly, one window at a time
            vals = g.gather(xc, fill=-math.inf)
            arg = np.array([[_first_max(row) for row in per] for per in vals], dtype=np.int64).reshape(vals.shape[:2])
        else:  # int64 numerators over one denominator: their order is the values' (no float64 rounding)
            vals = g.gather(xc.astype(np.int64), fill=np.iinfo(np.int64).min)
            arg = np.argmax(vals, axis=2)
        arg = np.where(_nonempty(g)[None], arg, -1)
        out = np.zeros(vals.shape, dtype=np.int64)
        b, w = np.nonzero(arg >= 0)
        out[b, w, arg[b, w]] = 1
        return out

    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        st = self._stamp(g, x)
        xc = np.asarray(g.to_canonical(x.num))
        vals = g.gather(xc.astype(object), fill=0)
        y = (vals * st).sum(axis=2)
        return ExactArray(np.asarray(g.from_canonical(y, g.out_spatial)).astype(xc.dtype), x.den)

    def forward(self, g: Geometry, x: ExactArray) -> np.ndarray:
        return self.exact_forward(g, x).to_sympy()

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> SparseJacobian:
        return table_jacobian(g, self._stamp(g, x), 1)

    def exact_vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> ExactArray:
        st = self._stamp(g, x)
        dyc = np.asarray(g.to_canonical(dy.num, g.out_spatial), dtype=object)
        dx = np.zeros((g.batch, g.n_in + 1), dtype=object)
        dx[:] = 0
        cells = np.where(g.valid, g.cells, g.n_in).reshape(-1)
        for b in range(g.batch):
            np.add.at(dx[b], cells, (dyc[b][:, None] * st[b]).reshape(-1))
        return ExactArray(np.asarray(g.from_canonical(dx[:, :-1], g.in_spatial)).astype(dy.num.dtype), dy.den)

    def exact_jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> ExactArray:
        st = self._stamp(g, x)
        tc = np.asarray(g.to_canonical(t.num), dtype=object)
        vals = g.gather(tc, fill=0)
        return ExactArray(np.asarray(g.from_canonical((vals * st).sum(axis=2), g.out_spatial)).astype(t.num.dtype),
                          t.den)

    def vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_vjp(g, x, dy, tie).to_sympy()

    def jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_jvp(g, x, t, tie).to_sympy()

    def table_expressions(self, g: Geometry, symbol: dict[int, Any]) -> np.ndarray:
        t = g.table  # type: ignore[attr-defined]
        out = np.empty(g.batch * g.n_out, dtype=object)
        for b in range(g.batch):
            for w in range(g.n_out):
                cells = g.flat_index(np.full(t.cells.shape[1], b), t.cells[w], g.in_spatial)
                members = [symbol[int(c)] for c, ok in zip(cells, t.valid[w]) if ok]
                out[int(g.flat_index(np.array(b), np.array(w), g.out_spatial))] = \
                    sympy.Max(*members) if members else sympy.Integer(0)
        return out

    # -- rounding model: a max selects an input, exact in every dtype ----------------------
    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        _check_float_bins(g.spec, g.input_shape, np.dtype(dtype))
        exact_y = self.exact_forward(g, exact_of())
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        return e_c, np.zeros_like(e_c), lambda: g.to_canonical(exact_y.to_fractions(), g.out_spatial)

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """One-hot rows at each bin's first maximal cell (exact in every dtype), empty bins 0."""
        _check_float_bins(g.spec, g.input_shape, np.dtype(dtype))
        st = self._stamp(g, exact_of()).astype(np.float64)
        none = np.zeros(st.shape[:2], dtype=bool)
        return ExactRows(st, np.zeros(st.shape, dtype=bool), none, np.ones((1, st.shape[1]), dtype=bool), none.copy())

    # -- lowering ------------------------------------------------------------------------
    def _lower_arg(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """(B, W) each bin's routed slot (-1: empty); at NaN or ±inf by the default NaN policy's order."""
        if nonfinite_codes(x) is None:
            return _argmax(g, g.to_canonical(x))
        st = self._stamp(g, self.nonfinite(g, x, self.nan_policies[0]).exact)
        return np.where(st.any(axis=2), st.argmax(axis=2), -1)

    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        xc = g.to_canonical(x)
        arg = self._lower_arg(g, x)
        vals = g.gather(xc, fill=0)
        y = np.where(arg >= 0, np.take_along_axis(vals, np.maximum(arg, 0)[..., None], axis=2)[..., 0], 0)
        return g.from_canonical(y.astype(x.dtype), g.out_spatial)

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        arg = self._lower_arg(g, x)
        dyc = g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in + 1), dtype=x.dtype)
        b, w = np.nonzero(arg >= 0)
        np.add.at(dx, (b, g.cells[w, arg[b, w]]), dyc[b, w])
        return g.from_canonical(dx[:, :-1], g.in_spatial)


ROI_POOL = RoiPoolOp()
ROI_POOL.spec_class = RoiPool
