"""Clarke-set membership of a Jacobian's rows, exactly.

Each output of a pooling layer depends on its own window only, so the Clarke
Jacobian at x is a product of per-row sets and membership is decided row by row:

- average pooling is linear: the set is the one exact row;
- max pooling: the convex hull of the one-hot rows of the window's tie set I,
  i.e. rows >= 0, supported on I, summing to 1;
- lp pooling (``y = (Σ x^p)^(1/p)``): where S = Σ x^p != 0 (or p = 1) y is smooth
  and the set is the exact gradient row; at an all-zero window with even p, y is
  the p-norm and the set is the dual unit ball ``{g : Σ|g_i|^q <= 1}``,
  q = p/(p - 1), over the window's cells; with odd p >= 3 y is not locally
  Lipschitz at S = 0, so no Clarke set exists there and no row is in it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._jacobian import jacobian
from symjac.pool._spec import check_pool_spec


def _dense_rows(J: Any, n_rows: int, n_cols: int) -> list[dict[int, Any]]:
    """Row r -> {col: exact nonzero value}, from a SparseJacobian or a dense matrix."""
    rows: list[dict[int, Any]] = [{} for _ in range(n_rows)]
    if hasattr(J, "rows") and hasattr(J, "value_ids"):
        for r, c, v in zip(J.rows.tolist(), J.cols.tolist(), J.values):
            rows[r][c] = sympy.sympify(v)
        return rows
    m = np.asarray(J.tolist() if isinstance(J, sympy.MatrixBase) else J, dtype=object)
    if m.shape != (n_rows, n_cols):
        raise InputError(f"J has shape {m.shape}; the Jacobian of this spec at x is {(n_rows, n_cols)}")
    for (r, c), v in np.ndenumerate(m):
        value = sympy.nsimplify(v) if isinstance(v, float) else sympy.sympify(v)
        if value != 0:
            rows[r][c] = value
    return rows


def _equal(a: Any, b: Any) -> bool:
    d = sympy.sympify(a - b)
    return bool(d == 0 or d.equals(0))


def in_clarke_set(J: Any, x: Any, *, spec: Any = None) -> np.ndarray:
    """Whether each row of ``J`` lies in the Clarke Jacobian of the pooling at ``x``.

    Args:
      J: a :class:`symjac.SparseJacobian` (it knows its spec), or a dense matrix
        (SymPy, NumPy or nested lists; rows = flattened outputs, columns =
        flattened inputs in the layout) together with ``spec``.
      x: the input values.
      spec: the pooling spec; defaults to ``J.spec``.

    Returns:
      A bool array in the output shape, exact (no tolerance).

    Raises:
      InputError: no spec, or J's shape does not fit the spec at x.
    """
    spec = spec if spec is not None else getattr(J, "spec", None)
    if spec is None:
        raise InputError("in_clarke_set needs the spec: pass a SparseJacobian from symjac.jacobian, or spec=...")
    spec = check_pool_spec(spec)
    exact = ExactArray.from_any(x, "x")
    g = resolve(spec, exact.shape)
    rows = _dense_rows(J, int(np.prod(g.output_shape)), int(np.prod(g.input_shape)))
    if g.operator.ties:
        ok = _max_rows(g, exact, rows)
    else:
        ok = _smooth_rows(g, exact, rows)
    return ok.reshape(g.output_shape)


def _window_cols(g: Geometry, b: int, w: int) -> list[int]:
    cells = g.cells[w][g.valid[w]]
    return [int(c) for c in g.flat_index(np.full(cells.shape, b), cells, g.in_spatial)]


def _max_rows(g: Geometry, exact: ExactArray, rows: list[dict[int, Any]]) -> np.ndarray:
    xc = g.to_canonical(exact.num)
    ok = np.zeros(len(rows), dtype=bool)
    for b in range(g.batch):
        for w in range(g.n_out):
            cols = _window_cols(g, b, w)
            vals = xc[b, g.cells[w][g.valid[w]]]
            tied = {c for c, v in zip(cols, vals) if v == vals.max()}
            r = int(g.flat_index(np.array(b), np.array(w), g.out_spatial))
            row = rows[r]
            ok[r] = set(row) <= tied and all(v >= 0 for v in row.values()) and sum(row.values()) == 1
    return ok


def _smooth_rows(g: Geometry, exact: ExactArray, rows: list[dict[int, Any]]) -> np.ndarray:
    """avg and lp: the exact row where smooth; lp's all-zero windows: the dual ball."""
    ref = _dense_rows(jacobian(g.spec, exact.to_fractions()), len(rows), 0)
    ok = np.zeros(len(rows), dtype=bool)
    ball = g.operator.clarke_ball(g, exact)  # lp's all-zero windows: the dual unit ball
    for b in range(g.batch):
        for w in range(g.n_out):
            r = int(g.flat_index(np.array(b), np.array(w), g.out_spatial))
            row = rows[r]
            if ball is not None and ball[0][b, w]:
                ok[r] = _dual_ball(row, set(_window_cols(g, b, w)), ball[1])
                continue
            want = ref[r]
            ok[r] = set(row) == set(want) and all(_equal(row[c], want[c]) for c in want)
    return ok


def _dual_ball(row: dict[int, Any], cols: set[int], p: int) -> bool:
    if p % 2 == 1:
        return False  # odd p >= 3: not locally Lipschitz at S = 0
    if not set(row) <= cols:
        return False
    q = sympy.Rational(p, p - 1)
    total = sum((sympy.Abs(v) ** q for v in row.values()), start=sympy.Integer(0))
    return bool(sympy.simplify(total - 1) <= 0)
