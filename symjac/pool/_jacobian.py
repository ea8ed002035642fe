"""The public exact engine: Jacobian, VJP, JVP, forward and tie sets of a pooling spec.

Each entry point resolves the spec's geometry and reads the rule of its operator
(``geometry.operator``, :mod:`symjac.pool._ops`): the operator definitions sit below
these entry points and above the stamp machinery (:mod:`symjac.pool._stamp`,
:mod:`symjac.pool._ties`) they are built from.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray
from symjac.pool._beta import Tie, parse_tie
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._stamp import SparseJacobian, Stamp, stamp
from symjac.pool._symbolic import TIE_POLICIES, window_classes
from symjac.pool._ties import max_members, pad_cells

__all__ = ["SparseJacobian", "Stamp", "exact_forward", "exact_vjp", "expressions", "forward", "hvp", "jacobian",
           "jvp", "stamp", "tie_sets", "vjp"]


def _input(geometry_or_spec: Any, x: Any, name: str = "x") -> tuple[Geometry, ExactArray | None]:
    """Accept x (array-like: data) or an input shape (a tuple of ints)."""
    spec = check_pool_spec(geometry_or_spec)
    if isinstance(x, tuple) and all(isinstance(s, (int, np.integer)) for s in x):
        return resolve(spec, x), None
    exact = ExactArray.from_any(x, name)
    return resolve(spec, exact.shape), exact


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
    jac: SparseJacobian = geometry.operator.jacobian(geometry, exact, tie)
    return jac




def vjp(spec: PoolSpec, x: Any, dy: Any, *, tie: Tie = "first") -> np.ndarray:
    """The exact input gradient ``J(x)^T dy``, an object array of SymPy rationals.

    ``x`` may be an input shape (tuple of ints) for average pooling.
    """
    tie = parse_tie(tie, TIE_POLICIES)
    geometry, exact = _input(spec, x)
    g = _check(geometry.output_shape, dy, "dy", "the output shape")
    out: np.ndarray = geometry.operator.vjp(geometry, exact, g, tie)
    return out


def jvp(spec: PoolSpec, x: Any, t: Any, *, tie: Tie = "first") -> np.ndarray:
    """The exact directional derivative ``J(x) t`` (forward mode), an object array of SymPy values.

    ``t`` has the input's shape; the result the output's. ``x`` may be an input shape
    (tuple of ints) for average pooling; ``tie`` as for :func:`jacobian`.
    """
    tie = parse_tie(tie, TIE_POLICIES)
    geometry, exact = _input(spec, x)
    tangent = _check(geometry.input_shape, t, "t", "the input shape")
    out: np.ndarray = geometry.operator.jvp(geometry, exact, tangent, tie)
    return out


def hvp(spec: PoolSpec, x: Any, dy: Any, v: Any) -> np.ndarray:
    """The exact second derivative along ``v``: ``d/dε [J(x + εv)^T dy]`` at ε = 0, SymPy values
    in the input's layout (zero off ties for average and max pooling; lp's is not zero)."""
    geometry, exact = _input(spec, x)
    if exact is None:
        raise InputError("hvp needs the input values, not only a shape")
    upstream = _check(geometry.output_shape, dy, "dy", "the output shape")
    direction = _check(geometry.input_shape, v, "v", "the input shape")
    out: np.ndarray = geometry.operator.hvp(geometry, exact, upstream, direction)
    return out


def _check(shape: tuple[int, ...], a: Any, name: str, what: str) -> ExactArray:
    exact = ExactArray.from_any(a, name)
    if exact.shape != shape:
        raise InputError(f"{name} has shape {exact.shape}; {what} is {shape}")
    return exact


def forward(spec: PoolSpec, x: Any) -> np.ndarray:
    """The exact forward values, an object array of SymPy numbers.

    Average pooling is linear (checked symbolically per template), so y = J x; max
    pooling takes the value of a cell in the tie set.
    """
    geometry, exact = _input(spec, x)
    if exact is None:
        raise InputError("forward needs the input values, not only a shape")
    out: np.ndarray = geometry.operator.forward(geometry, exact)
    return out


def exact_forward(geometry: Geometry, x: ExactArray) -> ExactArray:
    """Exact forward on an exact input (for other stages): the operator's rational forward."""
    out: ExactArray = geometry.operator.exact_forward(geometry, x)
    return out


def exact_vjp(geometry: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie = "first") -> ExactArray:
    """Exact input gradient on exact arrays (for other stages), any tie policy."""
    out: ExactArray = geometry.operator.exact_vjp(geometry, x, dy, tie)
    return out


def tie_sets(spec: PoolSpec, x: Any) -> np.ndarray:
    """For max pooling at ``x``: per output window, the tuple of maximal input cells.

    Returns an object array in the output shape; each entry is a tuple of input
    multi-indices (layout order, row-major sorted); with ``pad_value=0`` the tuple
    omits the pad cells (empty when only pad cells attain the maximum).
    """
    geometry, exact = _input(spec, x)
    if exact is None or not geometry.operator.ties:
        raise SpecError("tie_sets needs a max pooling spec and input values")
    member = max_members(geometry, geometry.to_canonical(exact.num), pads=True) & geometry.valid  # pad cells left out
    out = np.empty(math.prod(geometry.output_shape), dtype=object)
    for b, w in np.ndindex(*member.shape[:2]):
        cells = geometry.cells[w, member[b, w]]
        cols = sorted(geometry.flat_index(np.full(cells.size, b), cells, geometry.in_spatial).tolist())
        row = int(geometry.flat_index(np.array(b), np.array(w), geometry.out_spatial))
        out[row] = tuple(tuple(int(i) for i in np.unravel_index(col, geometry.input_shape)) for col in cols)
    return out.reshape(geometry.output_shape)


def expressions(spec: PoolSpec, input_shape: tuple[int, ...]) -> np.ndarray:
    """The exact forward of every output as a SymPy expression.

    Symbols are named by their input index in the layout, e.g. ``x[0,0,1,1]``; with
    ``Pool(pad_value=0)`` a window holding pad cells has their constant 0 in its max
    (``Max(0, x[0,0,0])``). Meant for small shapes (inspection, docs): it builds one expression per window.
    """
    geometry = resolve(check_pool_spec(spec), tuple(input_shape))
    out = np.empty(math.prod(geometry.output_shape), dtype=object)
    names = np.arange(math.prod(geometry.input_shape)).reshape(geometry.input_shape)
    symbol = {}
    for idx in np.ndindex(*geometry.input_shape):
        symbol[int(names[idx])] = sympy.Symbol("x[" + ",".join(map(str, idx)) + "]", real=True)
    if not geometry.operator.kernel_windows:  # RoI pooling: each window's expression from its table
        return np.asarray(geometry.operator.table_expressions(geometry, symbol)).reshape(geometry.output_shape)
    pads = pad_cells(geometry)  # Pool(pad_value=0): windows holding pad cells take the constant 0 in too
    padded: np.ndarray = np.zeros(geometry.n_out, dtype=bool) if pads is None else np.asarray(pads.any(axis=1))
    for c in window_classes(geometry):
        for b in range(geometry.batch):
            rows = geometry.flat_index(np.full(c.windows.size, b), c.windows, geometry.out_spatial)
            cols = geometry.flat_index(np.full(c.cells.shape, b), c.cells, geometry.in_spatial)
            for w, r, cells in zip(c.windows.tolist(), rows.tolist(), cols.tolist()):
                expr = c.template.expr.xreplace({s: symbol[k] for s, k in zip(c.template.symbols, cells)})
                out[r] = geometry.operator.with_pad_cells(expr) if padded[w] else expr
    return out.reshape(geometry.output_shape)
