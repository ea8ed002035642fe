"""RoI Align with ``reduction="max"``: ONNX ``RoiAlign`` ``mode="max"`` as ONNX Runtime computes it.

The boxes, bins and sample points are RoI Align's (:mod:`symjac.pool._ops.roi_align`: both
``coordinate_transformation_mode``\\ s, fixed and adaptive grids). What differs is the reduction.
ONNX Runtime (``roialign.cc``, measured on 1.32; its log says the max mode's "summation" is kept
as it is) takes, per sample point p with corners ``c_1..c_4`` (``(y_low, x_low)``,
``(y_low, x_high)``, ``(y_high, x_low)``, ``(y_high, x_high)``) and bilinear weights
``w_1 = hy·hx, w_2 = hy·lx, w_3 = ly·hx, w_4 = ly·lx``::

    v_p = max(max(max(w_1·x[c_1], w_2·x[c_2]), w_3·x[c_3]), w_4·x[c_4])

and the bin's value is ``max_p v_p`` over its points in row-major order (``iy`` then ``ix``), not
divided by their count. A point outside the map (``y < -1``, ``y > H``, x likewise) has all four
weights 0 (its corners read cell (0, 0) of the plane): ``v_p = 0``. A corner of weight 0 (a point on
a grid line, or clamped past the last row) still competes with ``0·x = 0``: an all-negative bin is
0 where a point lies on a grid line. A bin without sample points (``aligned`` and a point box, an
adaptive grid of 0) is 0.

So ``y = max_k w_k·x[c_k]`` over the bin's candidates k (four per point), a maximum of linear
functions with rational weights: exact at rational boxes. Its derivative with respect to the map is
``w_k*`` at cell ``c_k*`` for the winning candidate ``k*`` (0 for a weight-0 or outside winner).
Ties (equal weighted values ``w_k·x[c_k]``, with different gradients ``w_k·e_{c_k}``) are handled
as max pooling's: the Clarke set is the convex hull of the tied candidates' gradients (with 0 among
them where a weight-0 candidate ties), the policy ``first`` (ONNX Runtime's ``std::max`` keeps the
earlier of equals: the first candidate in point-then-corner order) gives the rows, and any element
of the hull is accepted from a backward. The second derivative is zero off ties.

Non-finite inputs (:meth:`AlignMaxOp.nonfinite`): a candidate of weight > 0 is IEEE 754's ``w·x``
(NaN at a NaN, the infinity at an infinity); one of weight 0 (a corner on a grid line, the clamped
row, an outside point) is 0 whatever its cell holds (``0·inf`` is NaN in a kernel that multiplies
every corner, 0 in one that skips zero weights: not decided, and the ``nonfinite`` family keeps NaN
and ±inf off such cells, as RoI Align's average does). The bin is max pooling's maximum of its
candidates: +inf and -inf ordered values (a bin of -inf candidates only is -inf), a NaN read by the
NaN policy ``propagate`` (the default, IEEE 754-2019 *maximum*: the bin is NaN) or ``ignore``
(*maximumNumber*: the largest other candidate, NaN only where all are), the forward deciding which;
the derivative is the winner's ``w·e_c``, the first in point-then-corner order (tied infinities: the
hull). ONNX Runtime (1.32, float32 and float64, measured) follows neither: its ``std::max`` chain
keeps a NaN only from the first corner of a bin's first point (a NaN at corner (0, 0) of a one-point
bin gives NaN, at corner (1, 1) the largest other candidate): a known defect of the adapter
(:mod:`symjac.frameworks.onnxruntime`). ±inf and magnitudes up to the dtype's largest (the ``extreme``
family: ``w·x`` with ``w <= 1`` cannot overflow) it gets right.

Rounding model: a float implementation forms each weight (one product of ``hy``/``ly`` by
``hx``/``lx``) and one product ``w·x``; the max selects one of them. Each candidate's value is within
``γ_2·|w||x|`` (plus, where a coordinate is not exact in the dtype, RoI Align's coordinate error
``2δ·|x|``), so the selected value is within the largest of those over the bin's candidates of the
exact maximum, whichever candidate a float evaluation picks among near-equals.
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

from symjac._exact import NAN, NEG_INF, POS_INF, ExactArray, nonfinite_codes
from symjac._lastaxis import any_last
from symjac.check._rounding import finfo, gamma, unit_roundoff
from symjac.pool._ops._edges import Nonfinite, code_values, proxy
from symjac.pool._ops._protocol import ForwardBound
from symjac.pool._ops._tables import check_map, table_jacobian
from symjac.pool._ops._tables import edge_weights
from symjac.pool._ops.roi_align import RoiAlign, RoiAlignOp, _axis, _coordinate_error, _corners, _table
from symjac.pool._rows import ExactRows

if TYPE_CHECKING:
    from symjac.pool._beta import Tie
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._tables import Table
    from symjac.pool._rows import Rows
    from symjac.pool._stamp import SparseJacobian


@dataclasses.dataclass(frozen=True, eq=False)
class Candidates:
    """Every bin's candidates ``w_k·x[c_k]``, in ONNX Runtime's order (point, then corner).

    Attributes:
      cell: (windows, M) the flat (N, H, W) cell of each candidate (an outside point's: (n, 0, 0)).
      slot: (windows, M) its slot in the window's table row, -1 for weight 0 (no derivative).
      num / q: (windows, M) exact weights ``num / q``, int64 (>= 0).
      valid: (windows, M) a candidate (False past a window's own).
    """

    cell: np.ndarray
    slot: np.ndarray
    num: np.ndarray
    q: int
    valid: np.ndarray


@functools.lru_cache(maxsize=64)
def candidates(spec: RoiAlign, input_shape: tuple[int, ...]) -> Candidates:
    """The candidates of every bin of ``spec`` at ``input_shape`` (slots index :func:`max_table`'s rows)."""
    _, _, height, width = check_map(spec, input_shape)
    oh, ow = spec.output_size
    table = max_table(spec, input_shape)
    found: list[list[tuple[int, Fraction]]] = []
    for box in spec.boxes:
        n = box[0]
        ay, ax = _axis(box[2], box[4], spec, oh), _axis(box[1], box[3], spec, ow)
        for i in range(oh):
            for j in range(ow):
                row: list[tuple[int, Fraction]] = []
                for py in ay.points[i]:
                    for px in ax.points[j]:
                        cy, cx = _corners(py, height), _corners(px, width)
                        if not cy or not cx:  # outside: ONNX Runtime's weights 0 at pos 0 of the plane
                            row += [(n * height * width, Fraction(0))] * 4
                            continue
                        row += [((n * height + r) * width + c, wr * wc) for r, wr in cy for c, wc in cx]
                found.append(row)
    q = math.lcm(1, *(w.denominator for row in found for _, w in row))
    size = max([len(r) for r in found] + [1])
    cell = np.zeros((len(found), size), dtype=np.int64)
    slot = np.full((len(found), size), -1, dtype=np.int64)
    num = np.zeros((len(found), size), dtype=np.int64)
    valid = np.zeros((len(found), size), dtype=bool)
    for w, row in enumerate(found):
        where = {int(c): s for s, c in enumerate(table.cells[w]) if table.valid[w, s]}
        for k, (c, f) in enumerate(row):
            cell[w, k], num[w, k], valid[w, k] = c, f.numerator * (q // f.denominator), True
            slot[w, k] = where[c] if f != 0 else -1
    for a in (cell, slot, num, valid):
        a.setflags(write=False)
    return Candidates(cell, slot, num, q, valid)


@functools.lru_cache(maxsize=64)
def max_table(spec: RoiAlign, input_shape: tuple[int, ...]) -> Table:
    """RoI Align's table (the cells each bin reads), its words saying the max instead of the average."""
    t = _table(spec, input_shape)
    words = tuple(w.rsplit(", divided by", 1)[0] + ", the largest weighted corner of its points" for w in t.words)
    return dataclasses.replace(t, words=words)


@dataclasses.dataclass
class AlignMaxRows(ExactRows):
    """Exact rows with the tie sets' Clarke hull per slot: the least and largest weight a tied
    candidate at that slot has (``lo``/``hi``, 0 where none), and whether 0 (a weight-0 or outside
    candidate) is among the tied gradients (``zero``, (B, W))."""

    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    zero: np.ndarray | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Ordered(ExactArray):
    """x's finite proxy (non-finite cells 0) with the non-finite convention's order of its candidates
    (:meth:`AlignMaxOp.nonfinite`): ``codes`` (B, n_in) canonical non-finite codes, ``policy`` the NaN
    policy. :func:`_values` puts a weight > 0 candidate at a +inf cell above every finite one (tied
    with the other +inf candidates, whatever their weights), at -inf below, at NaN above +inf
    (``propagate``) or below -inf (``ignore``)."""

    codes: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), dtype=np.int8))
    policy: str = "propagate"


def _values(g: Geometry, x: ExactArray) -> tuple[np.ndarray, np.ndarray]:
    """(B, W, M) the candidates' exact values ``num·x`` (numerators over ``q·x.den``; invalid slots far
    below every value; at an :class:`Ordered` x its non-finite candidates above or below every finite
    one) and (B, W) the index of each bin's first maximal candidate (-1: none)."""
    c = candidates(g.spec, g.input_shape)
    xc = np.asarray(g.to_canonical(x.num))
    top = int(np.abs(xc).max()) if xc.size else 0
    level = top * max(int(c.num.max(initial=0)), 1) + 1  # above every finite candidate's magnitude
    big = xc.dtype == object or level + 3 >= 2**61
    ext = np.concatenate([xc.astype(object if big else np.int64), np.zeros((xc.shape[0], 1), dtype=xc.dtype)], axis=1)
    num = c.num.astype(object) if big else c.num
    vals = ext[:, c.cell] * num[None]
    if isinstance(x, Ordered):
        codes = np.concatenate([x.codes, np.zeros((x.codes.shape[0], 1), dtype=np.int8)], axis=1)[:, c.cell]
        codes = np.where((c.num > 0)[None], codes, 0)  # a weight-0 candidate is 0 whatever its cell holds
        nan = level + 2 if x.policy == "propagate" else -(level + 2)
        vals = np.select([codes == POS_INF, codes == NEG_INF, codes == NAN], [level + 1, -(level + 1), nan], vals)
    floor = -(level + 3)
    vals = np.where(c.valid[None], vals, floor)
    if big:
        arg = np.array([[max(range(len(r)), key=lambda k, r=r: (r[k], -k)) for r in per] for per in vals],  # type: ignore[misc]
                       dtype=np.int64).reshape(vals.shape[:2])
    else:
        arg = np.argmax(vals, axis=2)  # the first maximum: std::max keeps the earlier of equals
    return vals, np.where(np.asarray(c.valid.any(axis=1))[None], arg, -1)


def _stamp(g: Geometry, x: ExactArray | None, op: AlignMaxOp) -> np.ndarray:
    """(B, W, S) the Jacobian's numerators (over the candidates' q) at x, policy ``first``."""
    x = op.require_x(x)
    c = candidates(g.spec, g.input_shape)
    _, arg = _values(g, x)
    out = np.zeros((g.batch,) + g.cells.shape, dtype=np.int64)
    b, w = np.nonzero(arg >= 0)
    k = arg[b, w]
    s = c.slot[w, k]
    keep = s >= 0
    out[b[keep], w[keep], s[keep]] = c.num[w[keep], k[keep]]
    return out


def _ties(g: Geometry, x: ExactArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(B, W) tied (two tied candidates with different gradients), (B, W, S) per slot the least and
    largest tied weight (0: none), (B, W) 0 among the tied gradients."""
    c = candidates(g.spec, g.input_shape)
    vals, arg = _values(g, x)
    best = np.take_along_axis(vals, np.maximum(arg, 0)[..., None], axis=2)
    at = (vals == best) & c.valid[None] & (arg >= 0)[..., None]
    zero = any_last(at & (c.slot[None] < 0))
    shape = (g.batch,) + g.cells.shape
    lo, hi = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    b, w, k = np.nonzero(at & (c.slot[None] >= 0))
    s, v = c.slot[w, k], c.num[w, k]
    np.maximum.at(hi, (b, w, s), v)
    first = np.full(shape, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, (b, w, s), v)
    lo = np.where(hi > 0, first, 0)
    distinct = np.count_nonzero(hi > 0, axis=2) + zero + np.asarray(any_last(lo != hi))
    return distinct >= 2, lo, hi, zero


class AlignMaxOp(RoiAlignOp):
    """RoI Align with ``reduction="max"`` (:class:`RoiAlign`): the largest weighted corner, its
    derivative the winner's weight at its cell."""

    name = "roi_align_max"
    spec_kind = "roi_align"
    ties = True
    reuses_exact_input = True
    graph_needs_x = True
    second_derivative_zero = True
    explain_note = ("max of weighted corners: at a tie (two candidates w·x[c] equal, with different w·e_c) the "
                    "derivative is a convex combination of the tied candidates' w·e_c (0 for a weight-0 corner)")
    samples = ({"output_size": 2, "reduction": "max", "boxes": ((0, -1, 0, 2, 3),)},
               {"output_size": (2, 1), "aligned": True, "reduction": "max", "boxes": ((0, 0, 1, 3, 2), (0, 1, 1, 1, 1))},
               {"output_size": 1, "sampling_ratio": 2, "reduction": "max", "spatial_scale": Fraction(1, 2),
                "boxes": ((0, 0, 0, 4, 6),)})

    nan_policies = ("propagate", "ignore")

    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """Magnitudes up to the dtype's largest, one sign per slice (a bin of negative candidates only: a
        finite sentinel such as ``-FLT_MAX`` in a double kernel wins over them), and NaN and ±inf (the
        module's convention; RoI Align's input keeps them off weight-0 reads)."""
        return ("extreme", "nonfinite")

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """Up to the dtype's largest: a candidate ``w·x`` (``w <= 1``) and the max stay finite."""
        return float(finfo(dtype).max), "slices"

    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """The module's convention as an order of the candidates (:class:`Ordered`): a bin's first maximal
        candidate in it routes the gradient (its weight at its cell), and the bin's value is not finite
        where that candidate (of weight > 0) reads a non-finite cell."""
        finite, exact = proxy(g, x)
        codes = nonfinite_codes(x)
        codes_c = np.zeros((g.batch, g.n_in), dtype=np.int8) if codes is None else g.to_canonical(codes)
        read = Ordered(exact.num, exact.den, codes=codes_c, policy=policy)
        c = candidates(g.spec, g.input_shape)
        _, arg = _values(g, read)
        k = np.maximum(arg, 0)
        w = np.arange(g.n_out)[None]
        cell = np.where((arg >= 0) & (c.num[w, k] > 0), c.cell[w, k], g.n_in)
        won = np.concatenate([codes_c, np.zeros((g.batch, 1), dtype=np.int8)], axis=1)[np.arange(g.batch)[:, None], cell]
        return Nonfinite(policy, finite, read, np.asarray(won != 0), code_values(won))

    def nonfinite_note(self, policy: str) -> str:
        rule = ("a bin with a NaN candidate is NaN, its gradient to the first (IEEE 754-2019 maximum)" if
                policy == "propagate" else "a bin is its largest candidate other than NaN, NaN only where all are "
                "(IEEE 754-2019 maximumNumber)")
        return (f"RoI Align max at NaN and ±inf, NaN policy {policy!r}: its candidates w·x of weight > 0 are IEEE "
                f"754's (weight 0: 0), {rule}; ±inf are ordered values, the gradient the winner's w·e_c")

    def tables(self, spec: Any, input_shape: tuple[int, ...]) -> Table:
        return max_table(spec, input_shape)

    def spec_table(self, spec: Any) -> dict[str, Any]:
        return {**super().spec_table(spec), "mode": spec.reduction}

    def table_expressions(self, g: Geometry, symbol: dict[int, Any]) -> np.ndarray:
        c = candidates(g.spec, g.input_shape)
        out = np.empty(g.batch * g.n_out, dtype=object)
        for b in range(g.batch):
            for w in range(g.n_out):
                cells = g.flat_index(np.full(c.cell.shape[1], b), c.cell[w], g.in_spatial)
                terms = [sympy.Rational(int(v), c.q) * symbol[int(cc)] for v, cc, ok in zip(c.num[w], cells, c.valid[w])
                         if ok]
                out[int(g.flat_index(np.array(b), np.array(w), g.out_spatial))] = \
                    sympy.Max(*terms) if terms else sympy.Integer(0)
        return out

    def neighbour_changes(self, spec: Any, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        """RoI Align's neighbours, and the average instead of the max."""
        return [{"reduction": "avg"}] + super().neighbour_changes(spec, divisors)

    def default_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """x's values moved away from 0 by B, signs kept (``±(B + |x|)``), where the dtype holds them: two
        candidates ``w_1·x_1 = w_2·x_2`` of one sign then need ``|x_1/x_2 - 1| = |w_2/w_1 - 1|``, at least
        ``1/q`` (weights k/q) for unequal weights but under ``max|x|/B < 1/q``: no tie but between equal
        weights at equal values, and no positive weight's candidate at 0. Where the dtype cannot hold
        them (float16 and fine weights) x stays, and its ties are the verifier's (the Clarke hull)."""
        c = candidates(g.spec, g.input_shape)
        top = float(np.abs(x).max(initial=0.0))
        base = 2.0 ** math.ceil(math.log2(2 * (top + 1) * c.q))
        moved = np.where(x < 0, x.astype(np.float64) - base, x.astype(np.float64) + base)
        with np.errstate(over="ignore"):
            held = moved.astype(x.dtype)
        return held if bool(np.isfinite(held).all() and (held.astype(np.float64) == moved).all()) else x

    # -- exact ---------------------------------------------------------------------------
    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        c = candidates(g.spec, g.input_shape)
        vals, arg = _values(g, x)
        y = np.take_along_axis(vals, np.maximum(arg, 0)[..., None], axis=2)[..., 0]
        y = np.where(arg >= 0, y, 0)
        out = np.asarray(g.from_canonical(y, g.out_spatial))
        ints = out.astype(np.int64) if out.dtype != object or all(abs(int(v)) < 2**62 for v in out.reshape(-1)) else out
        return ExactArray(ints, x.den * c.q)

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> SparseJacobian:
        return table_jacobian(g, _stamp(g, x, self), candidates(g.spec, g.input_shape).q)

    def exact_vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> ExactArray:
        st = _stamp(g, x, self)
        dyc = np.asarray(g.to_canonical(dy.num, g.out_spatial), dtype=object)
        dx = np.zeros((g.batch, g.n_in + 1), dtype=object)
        dx[:] = 0
        cells = np.where(g.valid, g.cells, g.n_in).reshape(-1)
        for b in range(g.batch):
            np.add.at(dx[b], cells, (dyc[b][:, None] * st[b].astype(object)).reshape(-1))
        out = np.asarray(g.from_canonical(dx[:, :-1], g.in_spatial))
        return ExactArray(_ints(out), dy.den * candidates(g.spec, g.input_shape).q)

    def exact_jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> ExactArray:
        st = _stamp(g, x, self)
        vals = g.gather(np.asarray(g.to_canonical(t.num), dtype=object), fill=0)
        y = (vals * st.astype(object)).sum(axis=2)
        return ExactArray(_ints(np.asarray(g.from_canonical(y, g.out_spatial))),
                          t.den * candidates(g.spec, g.input_shape).q)

    # -- rounding model ------------------------------------------------------------------
    def _largest(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(B, W) the largest ``|w||x|`` and ``|x|`` over each bin's candidates (float64)."""
        c = candidates(g.spec, g.input_shape)
        ax = np.abs(g.to_canonical(x).astype(np.float64))
        at = ax[:, c.cell] * c.valid[None]
        w = c.num.astype(np.float64) / c.q
        return (at * w[None]).max(axis=2, initial=0.0), at.max(axis=2, initial=0.0)

    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        exact_y = self.exact_forward(g, exact_of())
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        delta = _coordinate_error(g.spec, g.input_shape, np.dtype(dtype))
        weighted, largest = self._largest(g, x, np.dtype(dtype))
        ax = g.gather(np.abs(g.to_canonical(x).astype(np.float64)))
        with np.errstate(over="ignore", invalid="ignore"):  # extreme inputs: a term only where coordinates round
            on_edge = np.where(delta > 0, (ax * edge_weights(g.table)).max(axis=2, initial=0.0), 0.0)  # type: ignore[attr-defined]
        tol = gamma(2, u) * weighted + (2 * delta + float(gamma(2, u))) * largest * (delta > 0) + on_edge
        return e_c, np.asarray(tol + 2.0**-60 * np.abs(e_c)), lambda: g.to_canonical(exact_y.to_fractions(),
                                                                                        g.out_spatial)

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """One entry per bin, the winner's weight at its cell (policy ``first``), within the rounding of
        the weight (and of the coordinates where those are not exact); the tie sets' hull."""
        ex = exact_of()
        c = candidates(g.spec, g.input_shape)
        st = _stamp(g, ex, self).astype(np.float64) / c.q
        tied, lo, hi, zero = _ties(g, ex)
        u = unit_roundoff(dtype)
        delta = _coordinate_error(g.spec, g.input_shape, np.dtype(dtype))[None, :, None]
        tol = float(gamma(2, u)) * np.maximum(np.abs(st), hi / c.q) + (2 * delta + float(gamma(2, u))) * (delta > 0)
        tol = np.where(g.valid[None], tol, 0.0)
        none = np.zeros(st.shape[:2], dtype=bool)
        return AlignMaxRows(st, hi > 0, tied, np.zeros((1, st.shape[1]), dtype=bool), none,
                            tol=np.broadcast_to(tol, st.shape).copy(), lo=lo / c.q, hi=hi / c.q, zero=zero)

    # -- ties ----------------------------------------------------------------------------
    def clarke_ok(self, g: Geometry, rows: Rows, exact: ExactRows, u: float) -> np.ndarray:
        """The row is ``Σ_k λ_k·w_k·e_{c_k}`` over the tied candidates, ``λ >= 0``, ``Σλ = 1``: per slot
        its share ``Λ_s = r_s / w`` lies in ``[r_s / hi_s, r_s / lo_s]``, the shares' lower ends sum to at
        most 1 and their upper ends to at least 1 (any sum up to 1 where 0 is among the tied gradients)."""
        assert isinstance(exact, AlignMaxRows) and exact.lo is not None and exact.hi is not None
        obs, member = rows.obs, exact.member
        tol = gamma(4, u)
        outside = any_last(~member & g.valid[None] & (np.abs(obs) > tol * exact.hi.max(axis=2, keepdims=True)))
        outside |= any_last(member & (obs < -tol * exact.hi))
        with np.errstate(divide="ignore", invalid="ignore"):
            low = np.where(member, np.maximum(obs, 0) / np.where(member, exact.hi, 1), 0).sum(axis=2)
            high = np.where(member, np.maximum(obs, 0) / np.where(member, exact.lo, 1), 0).sum(axis=2)
        slack = gamma(8, u) * (1 + high)
        ok = (low <= 1 + slack) & (np.asarray(exact.zero) | (high >= 1 - slack))
        return np.asarray(~outside & ok)

    def tied_detail(self, g: Geometry, exact: ExactRows, b: int, w: int, cells: list[Any]) -> tuple[str, str]:
        assert isinstance(exact, AlignMaxRows) and exact.lo is not None and exact.hi is not None
        from symjac.check._report import fmt_index, listing

        slots = np.flatnonzero(exact.member[b, w] & g.valid[w])
        parts = [f"{fmt_index(cells[s])} (weight {exact.lo[b, w, s]:g}" +
                 ("" if exact.lo[b, w, s] == exact.hi[b, w, s] else f"..{exact.hi[b, w, s]:g}") + ")" for s in slots]
        zero = " and 0 (a weight-0 corner)" if exact.zero is not None and exact.zero[b, w] else ""
        return (f"; weighted corners tie at {listing(parts)}{zero}",
                f"a convex combination of the tied candidates' w·e_c: {listing(parts)}{zero}")

    # -- lowering ------------------------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """ONNX Runtime's order: the weights rounded to x's dtype, each ``w·x`` rounded, the first maximum."""
        c = candidates(g.spec, g.input_shape)
        w = (c.num.astype(np.float64) / c.q).astype(x.dtype)
        vals = np.where(c.valid[None], g.to_canonical(x)[:, c.cell] * w[None], -np.inf).astype(x.dtype)
        y = np.where(np.asarray(c.valid.any(axis=1))[None], vals.max(axis=2, initial=-np.inf), 0)
        return g.from_canonical(np.asarray(y, dtype=x.dtype), g.out_spatial)

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        c = candidates(g.spec, g.input_shape)
        w = (c.num.astype(np.float64) / c.q).astype(x.dtype)
        vals = np.where(c.valid[None], g.to_canonical(x)[:, c.cell] * w[None], -np.inf).astype(x.dtype)
        arg = np.argmax(vals, axis=2)
        dyc = g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in + 1), dtype=x.dtype)
        b, win = np.nonzero(np.broadcast_to(np.asarray(c.valid.any(axis=1))[None], arg.shape))
        k = arg[b, win]
        cells = np.where(c.slot[win, k] >= 0, c.cell[win, k], g.n_in)
        np.add.at(dx, (b, cells), dyc[b, win] * w[win, k])
        return g.from_canonical(dx[:, :-1], g.in_spatial)

    def exact_entry(self, g: Geometry, w: int) -> Fraction:
        c = candidates(g.spec, g.input_shape)
        nz = [int(v) for v in c.num[w] if v != 0]
        return Fraction(max(nz), c.q) if nz else Fraction(0)

    def slot_entry(self, g: Geometry, w: int, k: int) -> Fraction:
        c = candidates(g.spec, g.input_shape)
        at = [int(v) for v, s in zip(c.num[w], c.slot[w]) if s == k]
        return Fraction(max(at), c.q) if at else Fraction(0)


def _ints(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(-1)
    if not flat.size or max(abs(int(v)) for v in flat) < 2**62:
        return np.asarray(a, dtype=np.int64) if flat.size else np.zeros(a.shape, dtype=np.int64)
    return a


ROI_ALIGN_MAX = AlignMaxOp()
ROI_ALIGN_MAX.spec_class = RoiAlign
