"""Second order of pooling: the ``ddx`` half of an implementation's double backward.

``double_backward(x, dy, v) -> (ddx, ddy)`` differentiates ``⟨v, J(x)ᵀdy⟩``. Its ``ddy``
is ``J(x)·v`` and goes through the JVP's probes (:mod:`symjac.verifiers.pool._jvp`);
its ``ddx = ∇²_x(dyᵀf)·v`` is checked here, on every call the probes made:

- average and max pooling (``operator.second_derivative_zero``): the VJP is piecewise
  constant in x, so ``ddx`` must be exactly 0 (at ties too: every piece's derivative is 0);
- lp pooling: the exact algebraic HVP (``operator.hvp``) at the dense ``v``. The bound
  counts the roundings of the formula of :meth:`symjac.pool._ops.lp.Lp.hvp`: per window
  the power sum S (K terms of p - 1 products each: K·p roundings), its power
  ``S^(1/p - 1)`` (2, and S's relative error passes through times |1/p - 1| <= 1), the along-sum ``Σ x_j^(p-1) v_j`` (K·p), the products and the difference
  (p + 4); over the c windows that read a cell, c more for the accumulation. So each
  cell is within ``γ_m·M`` with ``m = c·(2K·p + p + 8)`` and ``M`` the same formula
  with every term in absolute value (computed in float64; the 2^-40 headroom covers
  that evaluation's own relative error, below 2^-45 at these depths).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import MAX_LISTED, Finding, fmt_index, listing
from symjac.check._rounding import gamma, unit_roundoff
from symjac.pool._geometry import Geometry
from symjac.pool._lp import power
from symjac.pool._rows import cell_counts, scatter


def packed(double_backward: Callable[..., Any], g: Geometry) -> Callable[..., Any]:
    """``double_backward`` returning one flat array ``[ddx, ddy]``, so its calls run back to back
    as one sequence (:meth:`Guard.arrays`); a result that is no pair of the right shapes raises
    a TypeError saying so (a ``bad_output`` finding), a wrong dtype is kept (and flagged)."""
    n_x, n_y = math.prod(g.input_shape), math.prod(g.output_shape)

    def call(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> np.ndarray:
        value = double_backward(x, dy, v)
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            raise TypeError(f"double_backward returned {type(value).__name__}, not a pair (ddx, ddy): give the "
                            "gradients with respect to x and to dy")
        ddx, ddy = (np.asarray(a) for a in value)
        for name, a, n, shape in (("ddx", ddx, n_x, g.input_shape), ("ddy", ddy, n_y, g.output_shape)):
            if a.size != n or (a.ndim and a.shape != shape):
                raise TypeError(f"double_backward's {name} has shape {a.shape}; expected {shape}")
        kind = ddx.dtype if ddx.dtype != x.dtype else ddy.dtype  # a wrong dtype shows in the packed result
        return np.concatenate([ddx.reshape(-1), ddy.reshape(-1)]).astype(kind, copy=False)

    return call


_READ = np.zeros(0)  # what a tangent read already is replaced with


class SecondOrder:
    """Calls the double backward with a fixed dy, hands ddy to the JVP probes and reads ddx.

    Where the exact second derivative is 0 (max, avg) each call's ddx is read as it comes (its
    largest magnitude; the first nonzero one kept for the finding): a long kernel's probe plan
    (4096 calls of a (111, 8192) ddx) would otherwise hold ~30 GB. lp keeps every call's ddx
    (its dense tangent's is compared with the exact HVP) until :meth:`clear`."""

    def __init__(self, g: Geometry, guard: Guard, dt: np.dtype[Any], dy: np.ndarray):
        self.g, self.guard, self.dt, self.dy = g, guard, dt, dy
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []  # lp: (canonical v, canonical float64 ddx)
        self.ddx_max_abs = 0.0
        self.clear()

    def clear(self) -> None:
        """Forget the calls read since the last check (:meth:`check_ddx`)."""
        self.calls.clear()
        self.seen, self.nonzero, self.seen_max = 0, 0, 0.0  # calls, calls with a nonzero ddx, max |ddx|
        self.first_nonzero: tuple[np.ndarray, np.ndarray] | None = None

    def _read(self, v: np.ndarray, ddx: np.ndarray) -> None:
        if not self.g.operator.second_derivative_zero:
            self.calls.append((v, ddx))
            return
        self.seen += 1
        self.seen_max = max(self.seen_max, float(np.abs(ddx).max(initial=0.0)))
        if np.count_nonzero(ddx):
            self.nonzero += 1
            if self.first_nonzero is None:
                self.first_nonzero = (v, ddx)

    def each(self, x: np.ndarray, vs: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        """ddy (canonical float64) for each canonical v, the calls run back to back; None once unusable."""
        g = self.g
        n_x = math.prod(g.input_shape)
        kept: list[np.ndarray] = []

        def args() -> Generator[tuple[Any, ...], None, None]:
            for v in vs:
                kept.append(v)
                yield (x, self.dy, g.from_canonical(v.astype(self.dt), g.in_spatial))

        size = n_x + math.prod(g.output_shape)
        for i, out in enumerate(self.guard.arrays(args(), shape=(size,), dtype=self.dt, index_name="[ddx, ddy]")):
            if out is None:
                yield None
                return
            flat = out.astype(np.float64)
            self._read(kept[i], g.to_canonical(flat[:n_x].reshape(g.input_shape)))
            kept[i] = _READ  # read: let it go (not a view of flat, which would keep flat)
            yield g.to_canonical(flat[n_x:].reshape(g.output_shape), g.out_spatial)

    def check_ddx(self, x: np.ndarray, findings: list[Finding], dense: np.ndarray | None) -> None:
        """ddx of the recorded calls against the exact HVP: zero, or (lp) at the dense v."""
        g = self.g
        op = g.operator
        if op.second_derivative_zero:
            self.ddx_max_abs = max(self.ddx_max_abs, self.seen_max)
            if self.first_nonzero is not None:
                _, ddx = self.first_nonzero
                cells = np.argwhere(ddx != 0)
                names = [fmt_index(g.input_index(b, c)) for b, c in cells.tolist()]
                findings.append(Finding(
                    "wrong_second_derivative",
                    f"ddx (the derivative of the VJP with respect to x) is nonzero at {len(cells)} of {ddx.size} "
                    f"cells in {self.nonzero} of {self.seen} calls; the exact ∇²_x(dyᵀf)·v is 0 "
                    f"({op.name} pooling's VJP is piecewise constant in x): {listing(names)}",
                    cells=tuple(g.input_index(b, c) for b, c in cells[:MAX_LISTED].tolist()),
                    expected=[0.0] * min(len(cells), MAX_LISTED),
                    observed=[float(ddx[b, c]) for b, c in cells[:MAX_LISTED].tolist()]))
            return
        if dense is None:
            return  # lp at its all-zero windows: no second derivative to compare with
        found = [ddx for v, ddx in self.calls if v is dense]
        if not found:
            return
        ddx = found[0]
        want, tol = lp_hvp_bound(g, x, self.dy, dense, self.dt)
        self.ddx_max_abs = float(np.abs(ddx - want).max(initial=0.0))
        off = np.argwhere(np.abs(ddx - want) > tol)
        if off.size:
            names = [fmt_index(g.input_index(b, c)) for b, c in off.tolist()]
            findings.append(Finding(
                "wrong_second_derivative",
                f"ddx differs from the exact ∇²_x(dyᵀf)·v at {len(off)} of {ddx.size} cells beyond the derived "
                f"bound: {listing(names)}",
                cells=tuple(g.input_index(b, c) for b, c in off[:MAX_LISTED].tolist()),
                expected=[float(want[b, c]) for b, c in off[:MAX_LISTED].tolist()],
                observed=[float(ddx[b, c]) for b, c in off[:MAX_LISTED].tolist()]))


def _lp_hvp_mpfr(g: Geometry, x: np.ndarray, dy: np.ndarray, v_c: np.ndarray) -> np.ndarray:
    """The formula of :meth:`symjac.pool._ops.lp.Lp.hvp` (the exact engine's, SymPy per window)
    evaluated on every window at once in 200-bit MPFR from the exact float inputs, rounded to
    float64: within half an ULP of float64 plus 2^-190 relative of the exact value, far below
    any dtype's bound (``tests/test_transforms_pool.py`` checks it against the SymPy values)."""
    from symjac.loss import _numbers

    p = power(g)
    with _numbers.context():
        xs = g.gather(_numbers.from_floats(g.to_canonical(np.asarray(x, dtype=np.float64))).reshape(g.batch, -1),
                      fill=_numbers.number(0))
        vs = g.gather(_numbers.from_floats(v_c).reshape(g.batch, -1), fill=_numbers.number(0))
        dyc = _numbers.from_floats(g.to_canonical(np.asarray(dy, dtype=np.float64), g.out_spatial))
        zero = _numbers.number(0)
        s = (xs**p).sum(axis=-1)
        live = np.asarray(s != zero, dtype=bool) & (p > 1)
        safe = np.where(live, s, _numbers.number(1))
        along = (xs ** (p - 1) * vs).sum(axis=-1)
        factor = np.where(live, dyc * (p - 1) * safe ** (_numbers.number(1) / p - 1), zero)
        terms = xs ** (p - 2) * vs - xs ** (p - 1) * (along / safe)[..., None] if p >= 2 else xs * 0
        per = np.where(g.valid[None], factor[..., None] * terms, zero)
        acc = np.full((g.batch, g.n_in), zero, dtype=object)
        for k in range(g.cells.shape[1]):
            ok = g.valid[:, k]
            acc[:, g.cells[ok, k]] += per[:, ok, k]  # one slot: distinct cells
        return np.asarray(acc.astype(np.float64))


def lp_hvp_bound(g: Geometry, x: np.ndarray, dy: np.ndarray, v_c: np.ndarray,
                 dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The exact lp HVP (rounded to float64) and its bound (see the module docstring), canonical (B, n_in)."""
    want = _lp_hvp_mpfr(g, x, dy, v_c)
    p = power(g)
    xs = np.abs(g.gather(g.to_canonical(np.asarray(x, dtype=np.float64))))
    vs = np.abs(g.gather(v_c))
    dyc = np.abs(g.to_canonical(np.asarray(dy, dtype=np.float64), g.out_spatial))
    s = (xs**p).sum(axis=-1)
    along = (xs ** (p - 1) * vs).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(s > 0, dyc * (p - 1) * s ** (1.0 / p - 1), 0.0)
        terms = xs ** (p - 2) * vs + xs ** (p - 1) * np.where(s > 0, along / s, 0.0)[..., None] if p >= 2 else 0 * xs
    magnitude = scatter(g, factor, np.where(g.valid[None], terms, 0.0))
    k = g.cells.shape[1]
    m = cell_counts(g) * (2 * k * p + p + 8)
    tol = gamma(m, unit_roundoff(dt))[None] * magnitude * (1 + 2.0**-40)
    return want, tol
