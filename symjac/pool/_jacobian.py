"""The exact Jacobian, VJP and forward, stamped from the class templates.

Each (window class, slot) pair is a *route*: the windows of the class, the input
cell each reads at that slot, and the exact derivative (an integer weight over a
common denominator ``q``). Within one route every window reads a different cell,
so scatter-adds are collision-free NumPy assignments, vectorised over the batch.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray, _int_array
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._beta import Beta, Tie, parse_tie
from symjac.pool._symbolic import TIE_POLICIES, class_weights, tie_members, window_classes


@dataclasses.dataclass(frozen=True, eq=False)
class Route:
    """Windows, the cell each reads at one slot, and the weight ``weight / q``.

    ``weight`` has shape (1, nw) when it does not depend on x (average pooling) or
    (batch, nw) when it does (max pooling at a given x).
    """

    windows: np.ndarray
    cells: np.ndarray
    weight: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Routes:
    geometry: Geometry
    routes: tuple[Route, ...]
    q: int


def _input(geometry_or_spec: Any, x: Any, name: str = "x") -> tuple[Geometry, ExactArray | None]:
    """Accept x (array-like: data) or an input shape (a tuple of ints)."""
    spec = check_pool_spec(geometry_or_spec)
    if isinstance(x, tuple) and all(isinstance(s, (int, np.integer)) for s in x):
        return resolve(spec, x), None
    exact = ExactArray.from_any(x, name)
    return resolve(spec, exact.shape), exact


def routes(geometry: Geometry, x: ExactArray | None, tie: str = "first") -> Routes:
    """The exact routes of ``geometry``; max pooling needs ``x`` to find its ties."""
    out: list[Route] = []
    if geometry.spec.mode == "avg":
        q = math.lcm(*(w.denominator for c in window_classes(geometry) for w in c.template.weights))
        for c in window_classes(geometry):
            for j, w in enumerate(c.template.weights):
                weight = np.full((1, c.windows.size), w.numerator * (q // w.denominator), dtype=np.int64)
                out.append(Route(c.windows, c.cells[:, j], weight))
        return Routes(geometry, tuple(out), q)
    if x is None:
        raise InputError("max pooling's Jacobian depends on x: pass the input values, not only its shape")
    xc = geometry.to_canonical(x.num)
    parts = [(c, class_weights(c, xc[:, c.cells], tie)) for c in window_classes(geometry)]  # values: (batch, nw, n)
    q = math.lcm(*(qc for _, (_, _, qc) in parts)) if parts else 1
    for c, (member, weights, qc) in parts:
        weights = weights * (q // qc)
        for j in range(member.shape[-1]):
            out.append(Route(c.windows, c.cells[:, j], weights[..., j]))
    return Routes(geometry, tuple(out), q)


def _apply(r: Routes, source: ExactArray, transpose: bool) -> ExactArray:
    """y = J x (transpose=False) or dx = J^T dy (transpose=True), exactly.

    Integers over the common denominator ``source.den * r.q``: int64 when no sum can
    reach 2^62 (each target gets at most one term per route), Python ints otherwise.
    """
    g = r.geometry
    src_spatial, dst_spatial = (g.out_spatial, g.in_spatial) if transpose else (g.in_spatial, g.out_spatial)
    s = g.to_canonical(source.num, src_spatial)
    wmax = max((int(np.abs(rt.weight).max()) for rt in r.routes if rt.weight.size), default=0)
    smax = int(np.abs(s).max()) if s.size else 0
    small = s.dtype != object and smax * wmax * max(len(r.routes), 1) < 2**62
    kind: Any = np.int64 if small else object
    s = s.astype(kind)
    acc = np.zeros((g.batch, math.prod(dst_spatial)), dtype=kind)
    for rt in r.routes:
        # Within one route every window reads a different cell: no index repeats.
        if transpose:
            acc[:, rt.cells] += s[:, rt.windows] * rt.weight.astype(kind)
        else:
            acc[:, rt.windows] += s[:, rt.cells] * rt.weight.astype(kind)
    return ExactArray(_int_array(g.from_canonical(acc, dst_spatial)), source.den * r.q)


@dataclasses.dataclass(frozen=True, eq=False)
class SparseJacobian:
    """An exact sparse Jacobian in COO form.

    Rows index the flattened output and columns the flattened input, both in the
    spec's layout order. Values are exact SymPy rationals; ``value_ids`` index
    ``table`` (the distinct values), so the object array costs one pointer an entry.

    Attributes:
      output_shape / input_shape: the full shapes in the spec's layout.
      rows, cols, value_ids: (nnz,) int64, sorted by (row, col).
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
        from symjac._exact import round_fractions

        table = np.empty(len(self.table), dtype=object)
        table[:] = [Fraction(int(v.p), int(v.q)) for v in self.table]
        dense = np.zeros(self.shape, dtype=dtype)
        if self.table:
            dense[self.rows, self.cols] = round_fractions(table, dtype)[self.value_ids]
        return dense


def _sparse(r: Routes) -> SparseJacobian:
    g = r.geometry
    rows, cols, weights = [], [], []
    batch = np.arange(g.batch)[:, None]
    for rt in r.routes:
        w = np.broadcast_to(rt.weight, (g.batch, rt.windows.size))
        nz = w != 0
        b = np.broadcast_to(batch, w.shape)[nz]
        rows.append(g.flat_index(b, np.broadcast_to(rt.windows, w.shape)[nz], g.out_spatial))
        cols.append(g.flat_index(b, np.broadcast_to(rt.cells, w.shape)[nz], g.in_spatial))
        weights.append(w[nz])
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    col = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    weight = np.concatenate(weights) if weights else np.zeros(0, np.int64)
    order = np.lexsort((col, row))
    distinct, ids = np.unique(weight, return_inverse=True)
    table = tuple(sympy.Rational(int(v), r.q) for v in distinct)
    return SparseJacobian(g.output_shape, g.input_shape, row[order], col[order], ids.reshape(-1)[order], table,
                          spec=g.spec)


def jacobian(spec: PoolSpec, x: Any, *, tie: Tie = "first") -> SparseJacobian:
    """The exact Jacobian of ``spec`` at ``x`` (or at any x, for average pooling).

    Args:
      spec: a pooling spec.
      x: the input values (array-like, in the spec's layout), or for average
        pooling just the input shape as a tuple of ints.
      tie: max pooling at ties: ``"first"`` (row-major first maximum: PyTorch, TF,
        JAX, ONNX Runtime), ``"last"``, ``"split"`` (1/|I| to each of the |I|
        tied cells, the minimal-norm element of the Clarke Jacobian), or
        :class:`symjac.Beta` ``(b)``: J_b = b·J_split + (1 − b)·J_first.
        Power-average (``"lp"``) pooling has no ties: its entries are exact
        algebraic numbers and ``spec.zero_window`` gives the rows where S = 0.

    Raises:
      SpecError: the spec does not fit the shape.
      InputError: x is not exact-convertible, or max pooling was given only a shape.
    """
    tie = parse_tie(tie, TIE_POLICIES)
    geometry, exact = _input(spec, x)
    if geometry.spec.mode == "lp":
        from symjac.pool._lp import lp_jacobian

        return lp_jacobian(geometry, exact)
    if isinstance(tie, Beta):
        from symjac.pool._beta import beta_jacobian

        return beta_jacobian(geometry, exact, tie)
    return _sparse(routes(geometry, exact, tie))


def vjp(spec: PoolSpec, x: Any, dy: Any, *, tie: Tie = "first") -> np.ndarray:
    """The exact input gradient ``J(x)^T dy``, an object array of SymPy rationals.

    ``x`` may be an input shape (tuple of ints) for average pooling.
    """
    tie = parse_tie(tie, TIE_POLICIES)
    geometry, exact = _input(spec, x)
    g = _check_dy(geometry, dy)
    if geometry.spec.mode == "lp":
        from symjac.pool._lp import lp_vjp

        return lp_vjp(geometry, exact, g)
    if isinstance(tie, Beta):
        from symjac.pool._beta import beta_vjp

        return beta_vjp(geometry, exact, g, tie).to_sympy()
    return _apply(routes(geometry, exact, tie), g, transpose=True).to_sympy()


def _check_dy(geometry: Geometry, dy: Any, name: str = "dy") -> ExactArray:
    exact = ExactArray.from_any(dy, name)
    if exact.shape != geometry.output_shape:
        raise InputError(f"{name} has shape {exact.shape}; the output shape is {geometry.output_shape}")
    return exact


def forward(spec: PoolSpec, x: Any) -> np.ndarray:
    """The exact forward values, an object array of SymPy rationals.

    Average pooling is linear (checked symbolically per template), so y = J x; max
    pooling takes the value of a cell in the tie set.
    """
    geometry, exact = _input(spec, x)
    if exact is None:
        raise InputError("forward needs the input values, not only a shape")
    if geometry.spec.mode == "lp":
        from symjac.pool._lp import exact_forward as lp_forward

        return lp_forward(geometry, exact)
    return exact_forward(geometry, exact).to_sympy()


def exact_forward(geometry: Geometry, x: ExactArray) -> ExactArray:
    """Exact forward on an exact input (for other stages)."""
    return _apply(routes(geometry, x, "first"), x, transpose=False)


def exact_vjp(geometry: Geometry, x: ExactArray | None, dy: ExactArray, tie: str = "first") -> ExactArray:
    """Exact input gradient on exact arrays (for other stages)."""
    return _apply(routes(geometry, x, tie), dy, transpose=True)


def tie_sets(spec: PoolSpec, x: Any) -> np.ndarray:
    """For max pooling at ``x``: per output window, the tuple of maximal input cells.

    Returns an object array in the output shape; each entry is a tuple of input
    multi-indices (layout order, row-major sorted); with ``pad_value=0`` the tuple
    omits the pad cells (empty when only pad cells attain the maximum).
    """
    geometry, exact = _input(spec, x)
    if exact is None or geometry.spec.mode != "max":
        raise SpecError("tie_sets needs a max pooling spec and input values")
    xc = geometry.to_canonical(exact.num)
    found: dict[tuple[int, int], list[int]] = {}
    for c in window_classes(geometry):
        member = tie_members(c.template, xc[:, c.cells])
        b, w, j = np.nonzero(member)
        cells = c.cells[w, j]
        rows = geometry.flat_index(b, c.windows[w], geometry.out_spatial)
        cols = geometry.flat_index(b, cells, geometry.in_spatial)
        for r, col in zip(rows.tolist(), cols.tolist()):
            found.setdefault(r, []).append(col)
    out = np.empty(math.prod(geometry.output_shape), dtype=object)
    for r in range(out.size):
        out[r] = tuple(tuple(int(i) for i in np.unravel_index(col, geometry.input_shape)) for col in sorted(found.get(r, [])))  # type: ignore[call-overload]
    return out.reshape(geometry.output_shape)


def expressions(spec: PoolSpec, input_shape: tuple[int, ...]) -> np.ndarray:
    """The exact forward of every output as a SymPy expression.

    Symbols are named by their input index in the layout, e.g. ``x[0,0,1,1]``.
    Meant for small shapes (inspection, docs): it builds one expression per window.
    """
    geometry = resolve(check_pool_spec(spec), tuple(input_shape))
    out = np.empty(math.prod(geometry.output_shape), dtype=object)
    names = np.arange(math.prod(geometry.input_shape)).reshape(geometry.input_shape)
    symbol = {}
    for idx in np.ndindex(*geometry.input_shape):
        symbol[int(names[idx])] = sympy.Symbol("x[" + ",".join(map(str, idx)) + "]", real=True)
    for c in window_classes(geometry):
        for b in range(geometry.batch):
            rows = geometry.flat_index(np.full(c.windows.size, b), c.windows, geometry.out_spatial)
            cols = geometry.flat_index(np.full(c.cells.shape, b), c.cells, geometry.in_spatial)
            for r, cells in zip(rows.tolist(), cols.tolist()):
                out[r] = c.template.expr.xreplace({s: symbol[k] for s, k in zip(c.template.symbols, cells)})
    return out.reshape(geometry.output_shape)
