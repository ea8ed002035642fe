"""RoI Align (torchvision ``roi_align``, Detectron2 ``ROIAlignV2``, ONNX ``RoiAlign`` in ``mode="avg"``;
``reduction="max"``, ONNX Runtime's ``mode="max"``, is :mod:`symjac.pool._ops.align_max`).

Each box ``(n, x1, y1, x2, y2)`` of batch item n is scaled by ``spatial_scale`` and shifted by ``-1/2``
when ``aligned`` (ONNX ``"half_pixel"``; ``aligned=False`` is ``"output_half_pixel"``), else it is at
least 1 x 1 (torchvision's malformed boxes). Its ``out_h x out_w`` bins each hold ``g_h x g_w`` sample
points, ``g = sampling_ratio`` if > 0 else ``ceil(box size / bins)`` (adaptive: per box), at
``start + i·bin + (j + 1/2)·bin/g``. A point's value is the bilinear interpolation of the map
(torchvision's ``bilinear_interpolate``): 0 where ``y < -1 or y > H`` (x likewise), else y clamped to
0 below and past row H - 1 to H - 1; the bin's value is their sum divided by ``max(g_h·g_w, 1)``.

Everything above is exact at rational boxes: the cells' weights are rational, ``y = J x`` with ``J``
independent of x, the backward is ``J^T`` and the second derivative 0. The boxes' derivative is out
of scope: ``dx`` (the map's) is checked.

Rounding model: a float implementation computes each sample's coordinates, its four weights
``hy·hx, hy·lx, ly·hx, ly·lx``, four products and their sum, the bin's sum and one divide. Where
every intermediate of the coordinates (``x1·scale - offset``, the box size, ``size/bins``,
``(j + 1/2)·bin/g``, the point, ``ly``, ``hy``) is exact in the dtype (dyadic boxes), the weights
are exact and only the sums round: ``γ_{G+8}·Σ|w||x|`` (G sample points). Otherwise a coordinate
may be off by ``γ_8`` of its magnitude, and each weight by twice that (a point on an inner grid line
may read the row before it, with such a weight: :func:`_corners`); and where a sample point
lies within that of the edge test (``y = -1``, ``y = H``) or an adaptive grid's ``size/bins`` within
it of an integer, the float result is not decided: the verifier refuses the input there
(:class:`symjac.InputError` naming the box), as its verdict would be looser than its proof.
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

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray, round_fraction
from symjac.check._rounding import finfo, gamma, unit_roundoff
from symjac.pool._foreign import accept_only_fields
from symjac.pool._ops._protocol import ForwardBound, Operator
from symjac.pool._ops._tables import (
    Box,
    BoxesSpec,
    box_words,
    check_map,
    float_weights,
    linear_forward,
    linear_vjp,
    plan_shapes,
    read_boxes,
    read_output_size,
    read_scale,
    show,
    table_jacobian,
    table_of_arrays,
    weighted_nonfinite,
    edge_weights,
)
from symjac.pool._rows import ExactRows

if TYPE_CHECKING:
    from symjac.pool._beta import Tie
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._edges import Nonfinite
    from symjac.pool._ops._tables import Table
    from symjac.pool._stamp import SparseJacobian

HALF = Fraction(1, 2)

#: The default boxes, drawn on a 6 x 7 map (N = 2) to reach the edge cases at output_size 2 and the
#: adaptive grid: inside (0), partly outside at the top-left (1: points below -1, at x = -1 and in
#: (-1, 0)), sample points exactly at y = H and x = W (2; 3 and 7 with ``aligned``), wholly outside (4),
#: a point box (5: degenerate; none with ``aligned``), an inverted box (6); four boxes per batch item.
DEFAULT_BOXES: tuple[Box, ...] = tuple((b, Fraction(x1), Fraction(y1), Fraction(x2), Fraction(y2)) for b, x1, y1, x2, y2 in (
    (0, 1, 1, 4, Fraction(7, 2)),
    (0, Fraction(-5, 2), -2, Fraction(3, 2), 2),
    (1, Fraction(11, 2), Fraction(9, 2), Fraction(15, 2), Fraction(13, 2)),
    (1, 6, 5, 8, 7),
    (0, 9, 8, 12, 11),
    (1, 3, 2, 3, 2),
    (0, 5, 4, 2, 1),
    (1, -1, -1, 1, 1),
))
DEFAULT_MAP = (6, 7)
#: ``reduction`` -> the registry name of the operator it selects (the spec's ``mode``).
REDUCTIONS = {"avg": "roi_align", "max": "roi_align_max"}


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class RoiAlign(BoxesSpec):
    """RoI Align over a (N, C, H, W) map (torchvision ``roi_align``, ONNX ``RoiAlign`` ``mode="avg"``).

    Args:
      output_size: bins per box, an int or (out_h, out_w) (torchvision's ``output_size``, ONNX's
        ``output_height``/``output_width``).
      boxes: rows (batch_index, x1, y1, x2, y2) (torchvision's ``rois`` tensor of shape (K, 5); ONNX's
        ``rois`` with ``batch_indices``), exact rationals (int, dyadic float, ``Fraction``, ``"1/3"``).
        None: :data:`DEFAULT_BOXES`, drawn to reach the edge cases.
      spatial_scale: box coordinates times this are map coordinates (a rational > 0, e.g. 1/16).
      sampling_ratio: sample points per bin along each axis; <= 0: adaptive, ``ceil(box size / bins)``
        per box (torchvision's -1, ONNX's 0).
      aligned: shift boxes by -1/2 (torchvision ``aligned=True``, Detectron2 ``ROIAlignV2``, ONNX
        ``coordinate_transformation_mode="half_pixel"``); False: ONNX ``"output_half_pixel"``, and a
        box is at least 1 x 1.
      reduction: ``"avg"`` (the bin's points averaged) or ``"max"`` (ONNX ``mode="max"`` as ONNX Runtime
        computes it: :mod:`symjac.pool._ops.align_max`); a spec file's ``mode``.

    The output is (K, C, out_h, out_w); ``forward(x)`` and ``backward(x, dy)`` take the map and read
    the boxes from the spec (:meth:`rois`: torchvision's float array).
    """

    output_size: tuple[int, int]
    boxes: tuple[Box, ...] = dataclasses.field(default=None, kw_only=True)  # type: ignore[arg-type]
    spatial_scale: Fraction = dataclasses.field(default=Fraction(1), kw_only=True)
    sampling_ratio: int = dataclasses.field(default=-1, kw_only=True)
    aligned: bool = dataclasses.field(default=False, kw_only=True)
    reduction: str = dataclasses.field(default="avg", kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "output_size", read_output_size(self.output_size))
        put(self, "boxes", read_boxes(self.boxes, DEFAULT_BOXES))
        put(self, "spatial_scale", read_scale(self.spatial_scale))
        r = self.sampling_ratio
        if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or abs(r) > 2**10:
            raise SpecError(f"sampling_ratio={r!r} is not valid: give an integer (<= 0: adaptive, "
                            "ceil(box size / bins)), at most 1024")
        put(self, "sampling_ratio", int(r))
        if not isinstance(self.aligned, (bool, np.bool_)):
            raise SpecError(f"aligned={self.aligned!r} is not valid: give True or False")
        put(self, "aligned", bool(self.aligned))
        if self.reduction not in REDUCTIONS:
            raise SpecError(f"reduction={self.reduction!r} is not valid: give 'avg' (the bin's sample points "
                            "averaged) or 'max' (ONNX RoiAlign mode='max': the largest weighted corner)")

    def at_default(self, name: str) -> bool:
        """``reduction="avg"`` is left out of the wire's settings and golden's operator object."""
        return name == "reduction" and self.reduction == "avg"

    @property
    def mode(self) -> str:
        """The operator's registry name (``roi_align``; ``roi_align_max`` for ``reduction="max"``)."""
        return REDUCTIONS[self.reduction]

    @property
    def map_size(self) -> tuple[int, int]:
        """(H, W) of the coverage plan's map: the default boxes' 6 x 7, else the boxes' extent."""
        return DEFAULT_MAP if self.boxes == DEFAULT_BOXES else self.extent(0)

    def __repr__(self) -> str:
        return (f"RoiAlign(output_size={self.output_size!r}{self.boxes_repr(DEFAULT_BOXES)}, "
                f"spatial_scale={show(self.spatial_scale)!r}, sampling_ratio={self.sampling_ratio!r}, "
                f"aligned={self.aligned!r}{'' if self.reduction == 'avg' else f', reduction={self.reduction!r}'})")


# -- the sample points ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Axis:
    """One axis of one box: its start, size, bin size and grid, every intermediate the float
    evaluation forms (for the exactness test) and per bin its sample points."""

    start: Fraction
    size: Fraction
    grid: int
    points: tuple[tuple[Fraction, ...], ...]
    intermediates: tuple[Fraction, ...]


def _axis(lo: Fraction, hi: Fraction, spec: RoiAlign, bins: int) -> _Axis:
    offset = HALF if spec.aligned else Fraction(0)
    a, b = lo * spec.spatial_scale, hi * spec.spatial_scale
    start, end = a - offset, b - offset
    size = end - start if spec.aligned else max(end - start, Fraction(1))
    bin_size = size / bins
    grid = spec.sampling_ratio if spec.sampling_ratio > 0 else math.ceil(bin_size)
    inter = [a, b, start, end, size, bin_size]
    points = []
    for i in range(bins):
        row = []
        for j in range(max(grid, 0)):
            step = (j + HALF) * bin_size
            inter += [i * bin_size, start + i * bin_size, step, step / grid]
            row.append(start + i * bin_size + step / grid)
        points.append(tuple(row))
    return _Axis(start, size, grid, tuple(points), tuple(inter))


def _corners(p: Fraction, length: int, below: bool = False) -> list[tuple[int, Fraction]]:
    """torchvision's ``bilinear_interpolate`` along one axis: (cell, weight) pairs, none outside; ``below``:
    a point on an inner grid line names the row before too (weight 0: a float point just below reads it)."""
    if p < -1 or p > length:
        return []
    p = max(p, Fraction(0))
    low = math.floor(p)
    before = [(int(p) - 1, Fraction(0))] if below and p.denominator == 1 and 1 <= p <= length - 1 else []
    if low >= length - 1:  # past the last row: low = high = H - 1 and the point moved onto it (ly = 0)
        return [(length - 1, Fraction(1)), (length - 1, Fraction(0))] + before
    frac = p - low
    return [(low, 1 - frac), (low + 1, frac)] + before


def _bin_weights(points: tuple[Fraction, ...], length: int) -> dict[int, tuple[Fraction, int, Fraction]]:
    """Per cell of one axis: (weight, corner terms, the weight of points exactly on an edge test)."""
    out: dict[int, tuple[Fraction, int, Fraction]] = {}
    for p in points:
        on_edge = p in (-1, length)
        for cell, w in _corners(p, length, below=True):
            old = out.get(cell, (Fraction(0), 0, Fraction(0)))
            out[cell] = (old[0] + w, old[1] + 1, old[2] + (w if on_edge else 0))
    return out


def _axis_arrays(ax: _Axis, bins: int, length: int) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray]], int]:
    """Per bin of one axis of a box: (cells, weight numerators, terms, edge numerators) over one
    denominator (returned), cells in increasing order."""
    found = [_bin_weights(ax.points[i], length) for i in range(bins)]
    den = math.lcm(1, *(f.denominator for b in found for w, _, e in b.values() for f in (w, e)))
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for b in found:
        keys = sorted(b)
        out.append((np.array(keys, dtype=np.int64), np.array([int(b[c][0] * den) for c in keys], dtype=np.int64),
                    np.array([b[c][1] for c in keys], dtype=np.int64),
                    np.array([int(b[c][2] * den) for c in keys], dtype=np.int64)))
    return out, den


@functools.lru_cache(maxsize=64)
def _table(spec: RoiAlign, input_shape: tuple[int, ...]) -> Table:
    _, _, height, width = check_map(spec, input_shape)
    oh, ow = spec.output_size
    windows, starts, samples, words = [], [], [], []
    for k, box in enumerate(spec.boxes):
        n = box[0]
        ay, ax = _axis(box[2], box[4], spec, oh), _axis(box[1], box[3], spec, ow)
        count = max(ay.grid * ax.grid, 1)
        (ys, dy), (xs, dx) = _axis_arrays(ay, oh, height), _axis_arrays(ax, ow, width)
        q = dy * dx * count  # the box's weights are integers over it: exact products, no Fraction per cell
        for i, (ry, ny, ty, ey) in enumerate(ys):
            for j, (cx, nx, tx, ex) in enumerate(xs):
                cells = ((n * height + ry[:, None]) * width + cx[None, :]).reshape(-1)
                # points on an edge test: a float point rounded across it reads nothing (or the edge row)
                edge = (np.outer(ey, nx) + np.outer(ny, ex)).reshape(-1).astype(np.float64) / q
                windows.append((cells, np.outer(ny, nx).reshape(-1), q, np.outer(ty, tx).reshape(-1), edge))
                starts.append((n, int(math.floor(ay.start + i * (ay.size / oh))),
                               int(math.floor(ax.start + j * (ax.size / ow)))))
                samples.append(max(ay.grid, 0) * max(ax.grid, 0))
                words.append(f"{box_words(k, box)}, bin ({i}, {j}): sample points y {_points(ay.points[i], height)}, "
                             f"x {_points(ax.points[j], width)}, divided by {count}")
    return table_of_arrays((len(spec.boxes), oh, ow), windows, starts, samples, words)


@functools.lru_cache(maxsize=64)
def _zero_reads(spec: RoiAlign, input_shape: tuple[int, ...]) -> np.ndarray:
    """(N·H·W,) cells some sample point reads with weight 0 (a corner on a grid line, the clamped row), or
    as ONNX Runtime's outside point does (cell (0, 0) of the plane): ``0·x`` is NaN there at NaN or ±inf."""
    _, _, height, width = input_shape
    out = np.zeros(input_shape[0] * height * width, dtype=bool)
    for box in spec.boxes:
        ay, ax = _axis(box[2], box[4], spec, spec.output_size[0]), _axis(box[1], box[3], spec, spec.output_size[1])
        for py in (p for row in ay.points for p in row):
            for px in (p for row in ax.points for p in row):
                cy, cx = _corners(py, height, below=True), _corners(px, width, below=True)
                out[box[0] * height * width] |= not cy or not cx
                out[[(box[0] * height + r) * width + c for r, wr in cy for c, wc in cx if wr * wc == 0]] = True
    return out


def _points(points: tuple[Fraction, ...], length: int) -> str:
    shown = [show(p) + (" (outside)" if p < -1 or p > length else "") for p in points]
    return "[" + ", ".join(shown) + "]" if shown else "none"


@functools.lru_cache(maxsize=64)
def _coordinate_error(spec: RoiAlign, input_shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """(windows,) how far a float coordinate of each window's sample points may be off (0: every
    intermediate exact in ``dtype``).

    Raises:
      InputError: a sample point within that of the edge test, or an adaptive grid's size/bins
        within it of an integer: the float result is not decided there.
    """
    _, _, height, width = input_shape
    oh, ow = spec.output_size
    u = unit_roundoff(dtype)
    out = []
    for k, box in enumerate(spec.boxes):
        axes = ((_axis(box[2], box[4], spec, oh), height, "y"), (_axis(box[1], box[3], spec, ow), width, "x"))
        err = 0.0
        for ax, length, name in axes:
            if all(round_fraction(v, dtype) == v for v in ax.intermediates):
                continue
            magnitude = max(abs(float(v)) for v in ax.intermediates)
            delta = float(gamma(8, u)) * magnitude
            err = max(err, delta)
            # a point exactly on an edge is either side (the tolerance takes both, _edge_weights); one
            # within rounding of it but not on it is refused, as an adaptive grid within it of an integer
            near = [p for row in ax.points for p in row for edge in (-1, length) if 0 < abs(float(p - edge)) <= delta]
            if spec.sampling_ratio <= 0:
                ratio = ax.size / (oh if name == "y" else ow)
                if abs(float(ratio - round(ratio))) <= delta:
                    near.append(ratio)
            if near:
                raise InputError(f"box {k} of {spec!r}: its {name} sample point or grid {show(near[0])} is within "
                                 f"{delta:.3g} (the rounding of its coordinates in {dtype}) of an edge test (-1, "
                                 f"{length}) or an integer grid: a float RoI Align may take either side there, so it "
                                 "is not decided; give boxes exact in the dtype (dyadic) or away from the edges")
        out.append(err)
    return np.repeat(np.asarray(out), oh * ow)


class RoiAlignOp(Operator):
    """RoI Align (:class:`RoiAlign`): linear in the map, its rational Jacobian a table."""

    name = "roi_align"
    any_geometry = False
    kernel_windows = False
    spec_name = "symjac.RoiAlign"
    finite_differences = False
    extra_families = False
    weighted_sum_rounding = False  # its weights round with the sample coordinates: golden reads forward_bound, rows
    # small maps (the generic tests differentiate every window symbolically): a box partly outside,
    # two on one item (one a point) with ``aligned``, and a fixed grid with a scale
    samples = ({"output_size": 2, "boxes": ((0, -1, 0, 2, 3),)},
               {"output_size": (2, 1), "aligned": True, "boxes": ((0, 0, 1, 3, 2), (0, 1, 1, 1, 1))},
               {"output_size": 1, "sampling_ratio": 2, "spatial_scale": Fraction(1, 2), "boxes": ((0, 0, 0, 4, 6),)})

    # -- spec and geometry ---------------------------------------------------------------
    def tables(self, spec: Any, input_shape: tuple[int, ...]) -> Table:
        return _table(spec, input_shape)

    def table_size(self, spec: Any, input_shape: tuple[int, ...]) -> int:
        check_map(spec, input_shape)
        oh, ow = spec.output_size
        per_axis = [[2 * max(spec.sampling_ratio if spec.sampling_ratio > 0 else
                             math.ceil(max(abs(b[hi] - b[lo]) * spec.spatial_scale, Fraction(1)) / bins), 1), length]
                     for b in spec.boxes for lo, hi, bins, length in ((2, 4, oh, input_shape[2]), (1, 3, ow, input_shape[3]))]
        cells = sum(min(a[0], a[1]) * min(c[0], c[1]) for a, c in zip(per_axis[::2], per_axis[1::2]))
        return int(cells * oh * ow * input_shape[1])

    def plan_shapes(self, spec: Any, large: bool) -> list[tuple[int, ...]]:
        return plan_shapes(spec, large)

    def table_expressions(self, g: Geometry, symbol: dict[int, Any]) -> np.ndarray:
        t = g.table  # type: ignore[attr-defined]
        out = np.empty(g.batch * g.n_out, dtype=object)
        for b in range(g.batch):
            for w in range(g.n_out):
                cells = g.flat_index(np.full(t.cells.shape[1], b), t.cells[w], g.in_spatial)
                terms = [sympy.Rational(int(v), t.q) * symbol[int(c)]
                         for v, c, ok in zip(t.num[w], cells, t.valid[w]) if ok and v != 0]
                out[int(g.flat_index(np.array(b), np.array(w), g.out_spatial))] = sympy.Add(*terms)
        return out

    def window_words(self, g: Geometry, w: int) -> str:
        return str(g.table.words[w])  # type: ignore[attr-defined]

    def golden_arrays(self, spec: Any) -> dict[str, np.ndarray]:
        return BoxesSpec.boxes_arrays(spec)

    def spec_table(self, spec: Any) -> dict[str, Any]:
        return BoxesSpec.boxes_table(spec, sampling_ratio=spec.sampling_ratio, aligned=spec.aligned)

    def neighbour_changes(self, spec: Any, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        """One convention away: ``aligned`` flipped, the scale ignored (1), the grid fixed at 1 or 2 or adaptive."""
        changes: list[dict[str, Any]] = [{"aligned": not spec.aligned}]
        if spec.spatial_scale != 1:
            changes.append({"spatial_scale": Fraction(1)})
        changes += [{"sampling_ratio": r} for r in (-1, 1, 2) if (r > 0) != (spec.sampling_ratio > 0)
                    or (r > 0 and r != spec.sampling_ratio)]
        return changes

    # -- exact ---------------------------------------------------------------------------
    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        return linear_forward(g, x)

    def forward(self, g: Geometry, x: ExactArray) -> np.ndarray:
        return self.exact_forward(g, x).to_sympy()

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> SparseJacobian:
        t = g.table  # type: ignore[attr-defined]
        return table_jacobian(g, np.asarray(t.num)[None], t.q)

    def exact_vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> ExactArray:
        return linear_vjp(g, dy)

    def exact_jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> ExactArray:
        """``J t``: the map's forward applied to t (linear)."""
        return linear_forward(g, t)

    def vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_vjp(g, x, dy, tie).to_sympy()

    def jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> np.ndarray:
        return self.exact_jvp(g, x, t, tie).to_sympy()

    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        return ("extreme", "nonfinite")  # sums of points near the overflow threshold; NaN and ±inf propagate

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """Up to ``max/(2G)`` (G: a bin's most points), a sign per slice: a bin's sum of points stays finite."""
        return float(finfo(dtype).max) / (2 * max(int(g.table.samples.max(initial=1)), 1)), "slices"  # type: ignore[attr-defined]

    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        return weighted_nonfinite(g, x, policy)

    def nonfinite_note(self, policy: str) -> str:
        return ("RoI Align at NaN and ±inf: a bin is IEEE 754's sum of w·x over the cells its points read with "
                "weight > 0 (NaN with a NaN or both infinities, else the infinity), its derivative the weights")

    def nonfinite_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """x with its NaN and ±inf moved, spread out, to cells read with weight > 0 and by no point with
        weight 0 (``0·inf`` is NaN in a kernel that multiplies every corner, 0 in one that skips it)."""
        t, zero = g.table, _zero_reads(g.spec, g.input_shape)  # type: ignore[attr-defined]
        read = np.zeros(g.n_in, dtype=bool)
        read[t.cells[(np.asarray(t.num) != 0) & t.valid]] = True
        xc = g.to_canonical(x).copy()
        for b in range(g.batch):
            bad, free = np.flatnonzero(~np.isfinite(xc[b]) & zero), np.flatnonzero(read & ~zero & np.isfinite(xc[b]))
            k = min(bad.size, free.size)
            xc[b, free[np.linspace(0, free.size - 1, k).astype(np.int64)] if k else free[:0]] = xc[b, bad[:k]]
            xc[b, bad] = 0.25
        return g.from_canonical(xc, g.in_spatial)

    # -- rounding model ------------------------------------------------------------------
    def _magnitudes(self, g: Geometry, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, W) Σ|w||x| and Σ terms·|x|/count over each window's cells (float64)."""
        t = g.table  # type: ignore[attr-defined]
        ax = g.gather(np.abs(g.to_canonical(x).astype(np.float64)))
        weighted = (ax * np.abs(float_weights(g))[None]).sum(axis=2)
        count = np.maximum(t.samples, 1).astype(np.float64)
        with np.errstate(over="ignore"):
            spread = (ax * t.terms[None]).sum(axis=2) / count
        return weighted, spread

    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        exact_y = self.exact_forward(g, exact_of())
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        delta = _coordinate_error(g.spec, g.input_shape, np.dtype(dtype))
        weighted, spread = self._magnitudes(g, x)
        depth = g.table.samples + 8  # type: ignore[attr-defined]
        ax = g.gather(np.abs(g.to_canonical(x).astype(np.float64)))
        with np.errstate(over="ignore", invalid="ignore"):  # extreme inputs: a term only where coordinates round
            on_edge = np.where(delta > 0, (ax * edge_weights(g.table)[None]).sum(axis=2), 0.0)  # type: ignore[attr-defined]
            tol = gamma(depth, u) * weighted + np.where(delta > 0, (2 * delta + float(gamma(2, u))) * spread, 0.0) + on_edge
        return e_c, np.asarray(tol + 2.0**-60 * np.abs(e_c)), lambda: g.to_canonical(exact_y.to_fractions(),
                                                                                        g.out_spatial)

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """The table's weights (the same at every x and channel), each within the rounding of its
        sample points' products and sums (and of their coordinates where those are not exact)."""
        t = g.table  # type: ignore[attr-defined]
        u = unit_roundoff(dtype)
        weights = float_weights(g)
        delta = _coordinate_error(g.spec, g.input_shape, np.dtype(dtype))
        count = np.maximum(t.samples, 1).astype(np.float64)[:, None]
        tol = gamma(t.terms + 4, u) * np.abs(weights) + (2 * delta[:, None] + float(gamma(2, u))) * t.terms / count \
            * (delta[:, None] > 0) + edge_weights(t) * (delta[:, None] > 0)
        shape = (g.batch,) + t.cells.shape
        none = np.zeros(shape[:2], dtype=bool)
        return ExactRows(np.broadcast_to(weights, shape).copy(), np.zeros(shape, dtype=bool), none,
                         np.zeros((1, shape[1]), dtype=bool), none.copy(),
                         tol=np.broadcast_to(np.where(t.valid, tol, 0.0), shape).copy())

    # -- lowering ------------------------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The table's weights rounded to x's dtype, summed cell by cell (a reference, not torchvision's order)."""
        w = float_weights(g).astype(x.dtype)
        vals = g.gather(g.to_canonical(x), fill=0)
        return g.from_canonical(np.asarray((vals * w[None]).sum(axis=2), dtype=x.dtype), g.out_spatial)

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        t = g.table  # type: ignore[attr-defined]
        w = float_weights(g).astype(x.dtype)
        dyc = g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in + 1), dtype=x.dtype)
        cells = np.where(t.valid, t.cells, g.n_in).reshape(-1)
        for b in range(g.batch):
            np.add.at(dx[b], cells, (dyc[b][:, None] * w).reshape(-1))
        return g.from_canonical(dx[:, :-1], g.in_spatial)

    def exact_entry(self, g: Geometry, w: int) -> Fraction:
        t = g.table  # type: ignore[attr-defined]
        nz = [int(v) for v in t.num[w] if v != 0]
        return Fraction(nz[0], t.q) if nz else Fraction(0)

    def slot_entry(self, g: Geometry, w: int, k: int) -> Fraction:
        t = g.table  # type: ignore[attr-defined]
        return Fraction(int(t.num[w, k]), t.q)


ROI_ALIGN = RoiAlignOp()
ROI_ALIGN.spec_class = RoiAlign
