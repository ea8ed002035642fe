"""Hypothesis property tests for symjac's pooling: linearity, mass conservation, tie
sets and lowering accuracy.

Expected values come from definitions computed here, independently of symjac: a
small reference (``ref_windows``) builds every window from the conventions in
DESIGN.md (SAME_UPPER/SAME_LOWER, PyTorch ceil_mode, include_pad counting, PyTorch
adaptive windows) with plain Python loops, and exact arithmetic uses
``fractions.Fraction``. symjac's geometry is never used to compute an expectation.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import symjac
from sampling import examples

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.filter_too_much, HealthCheck.too_slow]}
MAX_SPATIAL = {1: 7, 2: 4, 3: 3}
# symjac differentiates SymPy's Max over all cells of a window; its cost grows fast
# (~0.7 s at 12 cells, ~20 s at 32), so max windows here have at most 12 cells.
MAX_MAX_CELLS = 12


# ------------------------------------------------------------------ the parameters
@dataclasses.dataclass(frozen=True)
class Case:
    """A drawn configuration, kept apart from the symjac spec built from it."""

    kind: str  # "pool", "adaptive", "global"
    mode: str
    rank: int
    spatial: tuple[int, ...]
    layout: str
    batch: str  # "NC", "C", "none"
    n: int
    c: int
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    padding: object = "valid"  # "valid" / "same" / "same_lower" / tuple of (lo, hi)
    ceil_mode: bool = False
    divisor: object = "exclude_pad"
    output_size: tuple[int, ...] = ()

    def spec(self):
        if self.kind == "adaptive":
            return symjac.AdaptivePool(self.mode, self.output_size, layout=self.layout)
        if self.kind == "global":
            return symjac.GlobalPool(self.mode, rank=self.rank, layout=self.layout)
        kw: dict = {"stride": self.stride, "dilation": self.dilation, "padding": self.padding,
                    "ceil_mode": self.ceil_mode, "layout": self.layout}
        if self.mode == "avg":
            kw["divisor"] = self.divisor
        return symjac.Pool(self.mode, self.kernel, **kw)

    @property
    def shape(self) -> tuple[int, ...]:
        """The input shape in the spec's layout."""
        if self.batch == "none":
            return self.spatial
        if self.batch == "C":
            return (self.c, *self.spatial) if self.layout == "channels_first" else (*self.spatial, self.c)
        return (self.n, self.c, *self.spatial) if self.layout == "channels_first" else (self.n, *self.spatial, self.c)

    @property
    def nc(self) -> tuple[int, int]:
        return {"none": (1, 1), "C": (1, self.c), "NC": (self.n, self.c)}[self.batch]

    def to_layout(self, a: np.ndarray) -> np.ndarray:
        """(N, C, *spatial) -> the spec's layout."""
        if self.batch == "none":
            return a[0, 0]
        if self.batch == "C":
            a = a[0]
            return np.moveaxis(a, 0, -1) if self.layout == "channels_last" else a
        return np.moveaxis(a, 1, -1) if self.layout == "channels_last" else a

    def from_layout(self, a: np.ndarray) -> np.ndarray:
        """The spec's layout -> (N, C, *spatial)."""
        a = np.asarray(a)
        if self.batch == "none":
            return a[None, None]
        if self.batch == "C":
            a = np.moveaxis(a, -1, 0) if self.layout == "channels_last" else a
            return a[None]
        return np.moveaxis(a, -1, 1) if self.layout == "channels_last" else a


# --------------------------------------------------------------- reference windows
class Infeasible(Exception):
    """The configuration has no valid operator (symjac must raise SpecError)."""


def ref_axis(case: Case, axis: int) -> list[tuple[list[int], int]]:
    """Windows along one axis: (slot coordinates, possibly outside [0, L); counted cells)."""
    L = case.spatial[axis]
    if case.kind == "global":
        return [(list(range(L)), L)]
    if case.kind == "adaptive":
        o = case.output_size[axis]
        if o > L:
            raise Infeasible
        # PyTorch: window i spans [floor(i*L/o), ceil((i+1)*L/o)).
        return [(list(range(i * L // o, -(-(i + 1) * L // o))), -(-(i + 1) * L // o) - i * L // o) for i in range(o)]
    k, s, d = case.kernel[axis], case.stride[axis], case.dilation[axis]
    extent = d * (k - 1) + 1
    if case.padding == "valid":
        lo = hi = 0
    elif case.padding in ("same", "same_lower"):
        out = -(-L // s)
        total = max((out - 1) * s + extent - L, 0)
        lo, hi = (total // 2, total - total // 2) if case.padding == "same" else (total - total // 2, total // 2)
    else:
        lo, hi = case.padding[axis]
    padded = L + lo + hi
    if case.ceil_mode:
        # PyTorch/ONNX: ceil, then drop a last window that starts in the high padding.
        # PyTorch's pooling_output_shape: floor((padded - extent + s - 1) / s) + 1 with
        # floor division, so a kernel longer than the input still gives a window when
        # that is >= 1 (avg_pool1d([1, 2], 3, 3, ceil_mode=True) = [1.5]).
        out = -(-(padded - extent) // s) + 1
        if (out - 1) * s >= L + lo:
            out -= 1
        if out < 1:
            raise Infeasible
    else:
        if extent > padded:
            raise Infeasible
        out = (padded - extent) // s + 1
    wins = []
    for o in range(out):
        cells = [o * s - lo + j * d for j in range(k)]
        # include_pad counts slots inside [-lo, L + hi): pad cells yes, ceil overhang no.
        wins.append((cells, sum(-lo <= c < L + hi for c in cells)))
    return wins


def ref_windows(case: Case) -> list[tuple[tuple[int, ...], list[tuple[int, ...]], int]]:
    """Every window: (output position, valid input cells in row-major order, divisor)."""
    axes = [ref_axis(case, a) for a in range(case.rank)]
    out = []
    for pos in itertools.product(*(range(len(w)) for w in axes)):
        slots = [axes[a][pos[a]][0] for a in range(case.rank)]
        cells = [c for c in itertools.product(*slots) if all(0 <= c[a] < case.spatial[a] for a in range(case.rank))]
        if not cells:
            raise Infeasible  # a window of padding only
        if case.kind == "pool" and case.mode == "avg" and case.divisor == "include_pad":
            div = math.prod(axes[a][pos[a]][1] for a in range(case.rank))
        elif case.kind == "pool" and case.mode == "avg" and isinstance(case.divisor, int):
            div = case.divisor
        else:
            div = len(cells)
        out.append((pos, cells, div))
    return out


def out_spatial(case: Case) -> tuple[int, ...]:
    return tuple(len(ref_axis(case, a)) for a in range(case.rank))


def feasible_windows(case: Case):
    """Reference windows; if there are none, check symjac agrees, and discard the example."""
    try:
        wins = ref_windows(case)
    except Infeasible:
        with pytest.raises(symjac.SpecError):
            symjac.resolve(case.spec(), case.shape)
        assume(False)
    g = symjac.resolve(case.spec(), case.shape)
    assert g.output_shape == case.to_layout(np.empty((*case.nc, *out_spatial(case)))).shape
    return wins


def ref_forward(case: Case, wins, x_ncs: np.ndarray) -> np.ndarray:
    """Exact forward on (N, C, *spatial) Fractions."""
    n, c = case.nc
    y = np.empty((n, c, *out_spatial(case)), dtype=object)
    for b in itertools.product(range(n), range(c)):
        for pos, cells, div in wins:
            vals = [x_ncs[b + cell] for cell in cells]
            y[b + pos] = max(vals) if case.mode == "max" else sum(vals, Fraction(0)) / div
    return y


def ref_vjp(case: Case, wins, x_ncs: np.ndarray, dy_ncs: np.ndarray, tie: str):
    """Exact dx, and per cell: sum |terms| and the number of windows reading it."""
    n, c = case.nc
    dx = np.full(x_ncs.shape, Fraction(0), dtype=object)
    mag = np.full(x_ncs.shape, Fraction(0), dtype=object)
    reads = np.zeros(x_ncs.shape, dtype=np.int64)
    for b in itertools.product(range(n), range(c)):
        for pos, cells, div in wins:
            g = dy_ncs[b + pos]
            for cell in cells:
                reads[b + cell] += 1
            if case.mode == "avg":
                weights = {cell: Fraction(1, div) for cell in cells}
            else:
                top = max(x_ncs[b + cell] for cell in cells)
                tied = [cell for cell in cells if x_ncs[b + cell] == top]  # row-major order
                weights = {"first": {tied[0]: Fraction(1)}, "last": {tied[-1]: Fraction(1)},
                           "split": {cell: Fraction(1, len(tied)) for cell in tied}}[tie]
            for cell, w in weights.items():
                dx[b + cell] += g * w
                mag[b + cell] += abs(g) * w
    return dx, mag, reads


def frac(v) -> Fraction:
    if isinstance(v, (float, np.floating)):
        return Fraction(float(v))
    if isinstance(v, (int, np.integer, Fraction)):
        return Fraction(v)
    return Fraction(int(v.p), int(v.q))


def gamma(n: int, u: Fraction) -> Fraction:
    return n * u / (1 - n * u)


# -------------------------------------------------------------------- strategies
@st.composite
def cases(draw, modes=("max", "avg"), kinds=("pool", "pool", "pool", "adaptive", "global"),
          paddings=("valid", "same", "same_lower", "int", "pairs"),
          divisors=("exclude_pad", "include_pad", "include_pad", "int"),
          max_cells: int | None = None) -> Case:
    kind = draw(st.sampled_from(kinds))
    mode = draw(st.sampled_from(modes))
    rank = draw(st.integers(1, 3))
    spatial = tuple(draw(st.integers(1, MAX_SPATIAL[rank])) for _ in range(rank))
    layout = draw(st.sampled_from(("channels_first", "channels_last")))
    batch = draw(st.sampled_from(("NC", "C", "none")))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    base = {"kind": kind, "mode": mode, "rank": rank, "spatial": spatial, "layout": layout, "batch": batch,
            "n": n, "c": c}
    if kind == "adaptive":
        case = Case(**base, output_size=tuple(draw(st.integers(1, L)) for L in spatial))
    elif kind == "global":
        case = Case(**base)
    else:
        kernel = tuple(draw(st.integers(1, 3 if rank < 3 else 2)) for _ in range(rank))
        stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
        dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
        pad_kind = draw(st.sampled_from(paddings))
        if pad_kind == "int":
            p = draw(st.integers(0, 2))
            padding: object = ((p, p),) * rank
        elif pad_kind == "pairs":
            padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank))
        else:
            padding = pad_kind
        ceil_mode = draw(st.booleans()) if pad_kind not in ("same", "same_lower") else False
        divisor: object = "exclude_pad"
        if mode == "avg":
            divisor = draw(st.sampled_from(divisors))
            if divisor == "int":
                divisor = draw(st.integers(1, 5))
        case = Case(**base, kernel=kernel, stride=stride, dilation=dilation, padding=padding,
                    ceil_mode=ceil_mode, divisor=divisor)
    limit = max_cells if max_cells is not None else (MAX_MAX_CELLS if mode == "max" else None)
    if limit is not None:
        try:
            assume(max(len(cells) for _, cells, _ in ref_windows(case)) <= limit)
        except Infeasible:
            pass  # kept: the test checks that symjac rejects it
    return case


def small_ints(data, shape, lo, hi) -> np.ndarray:
    size = math.prod(shape)
    values = data.draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size))
    return np.array(values, dtype=np.int64).reshape(shape)


# ------------------------------------------------------------------------- tests
@settings(max_examples=examples(100), **SETTINGS)
@given(case=cases(modes=("avg",)), data=st.data())
def test_avg_jacobian_equals_exact_central_differences(case, data):
    """Average pooling is linear, so the exact central difference with h = 1,
    (f(x + e_j) - f(x - e_j)) / 2, is exactly column j of the Jacobian."""
    n_in = math.prod(case.shape)
    assume(n_in <= 24)
    wins = feasible_windows(case)
    spec = case.spec()
    J = symjac.jacobian(spec, case.shape).todense()
    x = small_ints(data, case.shape, -9, 9)
    y0 = symjac.forward(spec, x).reshape(-1)
    assert J.shape == (y0.size, n_in)
    for j in range(n_in):
        e = np.zeros(n_in, dtype=np.int64)
        e[j] = 1
        e = e.reshape(case.shape)
        col = (symjac.forward(spec, x + e).reshape(-1) - symjac.forward(spec, x - e).reshape(-1)) / 2
        assert list(col) == list(J[:, j]), j
    # The entries themselves, from the reference windows: 1/divisor on each valid cell.
    out_shape = case.to_layout(np.empty((*case.nc, *out_spatial(case)))).shape
    out_idx = case.from_layout(np.arange(y0.size).reshape(out_shape))
    in_idx = case.from_layout(np.arange(n_in).reshape(case.shape))
    want = sympy.zeros(*J.shape)
    for b in itertools.product(*map(range, case.nc)):
        for pos, cells, div in wins:
            for cell in cells:
                want[int(out_idx[b + pos]), int(in_idx[b + cell])] = sympy.Rational(1, div)
    assert J == want


@settings(max_examples=examples(200), **SETTINGS)
@given(case=cases(modes=("avg",), divisors=("exclude_pad",)), data=st.data())
def test_exclude_pad_vjp_conserves_mass(case, data):
    """divisor="exclude_pad" (and adaptive/global, whose divisor is the cell count):
    window w averages its |V_w| valid cells, J_wj = 1/|V_w| for j in V_w, so every row
    of J sums to 1 and sum_j dx_j = sum_j sum_w dy_w J_wj = sum_w dy_w * 1 = sum_w dy_w."""
    feasible_windows(case)
    spec = case.spec()
    g = symjac.resolve(spec, case.shape)
    dy = small_ints(data, g.output_shape, -20, 20)
    dx = symjac.vjp(spec, case.shape, dy)
    assert sum(frac(v) for v in dx.reshape(-1)) == int(dy.sum())


def test_include_pad_counts_pad_cells_but_not_the_ceil_overhang():
    """By hand: L = 4, kernel 3, stride 2, padding 1, ceil_mode. Padded length 6:
    out = ceil((6 - 3) / 2) + 1 = 3; the last window starts at padded 4 < L + lo = 5, so
    it stays. Window 2 reads slots 3, 4, 5: cell 3, the high pad cell 4 (< L + hi = 5,
    counted) and the overhang 5 (not counted): include_pad divisor 2, exclude_pad 1.
    Window 0 reads pad -1 and cells 0, 1 (divisor 3 / 2), window 1 cells 1, 2, 3 (3 / 3).
    x = [1, 2, 4, 8]: include_pad y = [3/3, 14/3, 8/2]; exclude_pad y = [3/2, 14/3, 8]."""
    x = [1, 2, 4, 8]
    inc = symjac.Pool("avg", (3,), stride=2, padding=1, ceil_mode=True, divisor="include_pad")
    exc = symjac.Pool("avg", (3,), stride=2, padding=1, ceil_mode=True, divisor="exclude_pad")
    assert [frac(v) for v in symjac.forward(inc, x)] == [1, Fraction(14, 3), 4]
    assert [frac(v) for v in symjac.forward(exc, x)] == [Fraction(3, 2), Fraction(14, 3), 8]


def test_include_pad_vjp_does_not_conserve_mass():
    """Counterexample, by hand: L = 1, kernel 2, stride 1, padding 1. Windows read
    slots {-1, 0} and {0, 1}; with include_pad both pad slots count, so both divisors
    are 2 and dx_0 = dy_0/2 + dy_1/2: with dy = [1, 1], sum dx = 1 != 2 = sum dy.
    With exclude_pad the divisors are 1 and dx_0 = 2 = sum dy."""
    include = symjac.Pool("avg", (2,), stride=1, padding=1, divisor="include_pad")
    exclude = symjac.Pool("avg", (2,), stride=1, padding=1, divisor="exclude_pad")
    assert [frac(v) for v in symjac.vjp(include, (1,), [1, 1])] == [1]
    assert [frac(v) for v in symjac.vjp(exclude, (1,), [1, 1])] == [2]


@settings(max_examples=examples(200), **SETTINGS)
@given(case=cases(modes=("max",), paddings=("valid", "valid", "pairs", "same")), data=st.data())
def test_max_tie_sets_and_jacobian_rows(case, data):
    """With values in {0, 1, 2}, windows tie often. Each tie set must be exactly the
    window's cells attaining the maximum (reference windows), sorted row-major; each
    Jacobian row must be the indicator of the first / last tied cell, or 1/|I| on each."""
    wins = feasible_windows(case)
    spec = case.spec()
    x = small_ints(data, case.shape, 0, 2)
    x_ncs = case.from_layout(x)
    ties = symjac.tie_sets(spec, x)
    ties_ncs = case.from_layout(ties)
    in_idx = case.from_layout(np.arange(x.size).reshape(case.shape))
    n_out = math.prod(ties.shape)
    out_idx = case.from_layout(np.arange(n_out).reshape(ties.shape))
    expected_rows: dict[str, dict[int, dict[int, sympy.Rational]]] = {"first": {}, "last": {}, "split": {}}
    for b in itertools.product(*map(range, case.nc)):
        for pos, cells, _ in wins:
            top = max(int(x_ncs[b + cell]) for cell in cells)
            tied = [cell for cell in cells if int(x_ncs[b + cell]) == top]  # row-major
            got = ties_ncs[b + pos]
            assert [int(np.ravel_multi_index(t, case.shape)) for t in got] == [int(in_idx[b + t]) for t in tied], (
                b, pos, got, tied)
            row = int(out_idx[b + pos])
            expected_rows["first"][row] = {int(np.ravel_multi_index(got[0], case.shape)): sympy.Integer(1)}
            expected_rows["last"][row] = {int(np.ravel_multi_index(got[-1], case.shape)): sympy.Integer(1)}
            expected_rows["split"][row] = {int(in_idx[b + t]): sympy.Rational(1, len(tied)) for t in tied}
    for tie, want in expected_rows.items():
        J = symjac.jacobian(spec, x, tie=tie)
        assert J.shape == (n_out, x.size)
        rows: dict[int, dict[int, sympy.Rational]] = {r: {} for r in range(n_out)}
        for r, col, v in zip(J.rows.tolist(), J.cols.tolist(), J.values):
            rows[r][col] = v
        assert rows == want, tie


UNIT_ROUNDOFF = {np.float16: Fraction(1, 2**11), np.float32: Fraction(1, 2**24), np.float64: Fraction(1, 2**53)}


@settings(max_examples=examples(300), **SETTINGS)
@given(case=cases(), data=st.data(), dtype=st.sampled_from(list(UNIT_ROUNDOFF)),
       tie=st.sampled_from(("first", "last", "split")))
def test_lowering_within_rounding_of_exact(case, data, dtype, tie):
    """symjac.lower in float16/32/64 against the exact reference, and symjac's exact
    forward/vjp against the reference exactly.

    Inputs are multiples of 1/4 in [-16, 16] and dy multiples of 1/8 in [-2, 2]: exact in
    float16 (<= 7 significant bits). Bounds (gamma_n = n u / (1 - n u), Higham Lemma 3.1):
    * avg forward over K valid cells: each term x_i/D goes through <= 2 roundings
      (reciprocal 1/D, multiply; or one division) and the K - 1 additions of the sum, so
      |err| <= gamma_{K+1} sum_i |x_i|/D; we use n = K + 2 (one spare: 1/D reaches float16
      through float64, a double rounding worth slightly more than u).
    * vjp at a cell read by m windows: terms dy_w * J_wj (<= 2 roundings each) and m - 1
      additions: n = m + 2 with sum |terms| = sum_w |dy_w| |J_wj|. Max with first/last
      only adds dyadic dy's (<= 8 windows * 16 eighths, exact in float16): exact.
    * max forward picks one input value: exact.
    No term underflows: the smallest nonzero term is 1/8 / 27 > 2**-14 (float16's
    smallest normal), and a sum whose result is subnormal is exact.
    """
    wins = feasible_windows(case)
    spec = case.spec()
    u = UNIT_ROUNDOFF[dtype]
    x = small_ints(data, case.shape, -64, 64) / 4
    x_ncs = np.vectorize(Fraction, otypes=[object])(case.from_layout(x) * 4) / 4
    y_ncs = ref_forward(case, wins, x_ncs)
    dy_ncs = np.vectorize(Fraction, otypes=[object])(small_ints(data, y_ncs.shape, -16, 16)) / 8
    dy = case.to_layout(dy_ncs.astype(np.float64))
    dx_ncs, mag, reads = ref_vjp(case, wins, x_ncs, dy_ncs, tie)

    # symjac's exact stage against the reference: exactly.
    assert np.array_equal(np.vectorize(frac, otypes=[object])(case.from_layout(symjac.forward(spec, x))), y_ncs)
    got_dx = case.from_layout(symjac.vjp(spec, x, dy, tie=tie))
    assert np.array_equal(np.vectorize(frac, otypes=[object])(got_dx), dx_ncs)

    low = symjac.lower(spec, case.shape)
    y_low = case.from_layout(low.forward(x.astype(dtype)))
    dx_low = case.from_layout(low.vjp(x.astype(dtype), dy.astype(dtype), tie=tie))
    assert y_low.dtype == dtype and dx_low.dtype == dtype
    window_size = {pos: (cells, div) for pos, cells, div in wins}
    for idx in np.ndindex(*y_ncs.shape):
        got, want = Fraction(float(y_low[idx])), y_ncs[idx]
        if case.mode == "max":
            assert got == want, (idx, got, want)
        else:
            cells, div = window_size[idx[2:]]
            s = sum((abs(x_ncs[idx[:2] + c]) for c in cells), Fraction(0)) / div
            assert abs(got - want) <= gamma(len(cells) + 2, u) * s, (idx, float(got), float(want))
    for idx in np.ndindex(*dx_ncs.shape):
        got, want = Fraction(float(dx_low[idx])), dx_ncs[idx]
        if case.mode == "max" and tie != "split":
            assert got == want, (idx, got, want)
        else:
            assert abs(got - want) <= gamma(int(reads[idx]) + 2, u) * mag[idx], (idx, float(got), float(want))
