"""Power-average (lp) pooling's machinery: exact algebraic forward and Jacobian, NumPy lowering, rounding bounds.

Read by lp's definition (:mod:`symjac.pool._ops.lp`), the only module that names the operator.

PyTorch's ``lp_pool1d/2d`` compute ``(sign(S)·relu(|S|))^(1/p)`` with
``S = k·avg(x^p) = Σ_window x^p``; since ``sign(S)·relu(|S|) = S`` this is

    y = S^(1/p),   S = Σ_i x_i^p          (p = 2: norm pooling, seed 001)

defined where S >= 0 (PyTorch returns NaN where S < 0 and p != 1; p = 1 is the
window sum for any sign). Its derivative off S = 0 is

    ∂y/∂x_i = x_i^(p-1) · S^(1/p - 1)      (p = 2: x_i/‖x‖; p = 1: 1 everywhere)

and with x = num/D exactly, ``∂y/∂x_i = num_i^(p-1) · S_num^((1-p)/p)`` (degree 0:
D cancels), an algebraic number SymPy keeps exact (2/√5 stays ``2*sqrt(5)/5``).

**Zero windows.** For p >= 2 the point S = 0 is nonsmooth; the spec's
``zero_window`` gives the row there: ``"zero"`` (PyTorch: "if the sum of all inputs
to the power of p is zero, the gradient is set to zero") or ``"one"``, the two
variants of seed 001. For even p, S = 0 means an all-zero window, where y is the
p-norm, Lipschitz, with Clarke set the dual unit ball {g : ‖g‖_q <= 1},
q = p/(p-1): "zero" is in it, "one" (‖1‖_q = n^(1/q)) only for a one-cell window.
For odd p >= 3, y is not locally Lipschitz at S = 0 (its gradient x_i^2/y^2 grows
without bound near S = 0 along mixed signs), so no Clarke set exists there. For
p = 1 the map is linear: the row is all ones everywhere and ``zero_window`` does
not apply (PyTorch's backward returns 0 where S = 0 for p = 1: it differentiates
``sign(S)·relu(|S|)``, whose derivative it takes as 0 at S = 0).

**Rounding bounds** (float, unit roundoff u, ``γ_k = k·u/(1 - k·u)``), for the
PyTorch algorithm and symjac's lowering alike. Forward: each ``x_i^p`` is within
``γ_p`` relative (p - 1 products, or libm pow within 2 ulp), the n-term sum and
PyTorch's ``/k``, ``·k`` within ``γ_{n+1}``, so ``|Ŝ - S| <= E_S = γ_{p+n+1}·Σ|x_i|^p``
and ``Ŝ = S(1 + η)``, ``|η| <= E_S/S``. The exponent ``r̂ = fl(1/p)`` is within
``u_r = u`` relative (0 if p is a power of two), and pow rounds within 2u::

    |ŷ - y| <= y·[(1 + 2u)·exp(u_r·|ln Ŝ|/p)·(1 + |η|/(p(1 - |η|))) - 1]

(``(1 + η)^(1/p)`` moves by at most ``|η|/(p(1 - |η|))``). Gradient: PyTorch forms
``dy · r̂·Â^(fl(r̂ - 1)) · k · (1/k) · p·x_i^(p-1)``: at most ``9 + p`` roundings
(``γ_{9+p}``), the exponent ``e = 1/p - 1`` off by ``|δ_e| <= u·(|e| + 1/p)``, and
``(1 + η)^e`` within ``|e|·|η|/(1 - |η|)``::

    |ĝ - g| <= |g|·[(1 + γ_{9+p})·(1 + u_r)·(1 + |e||η|/(1 - |η|))·exp(|δ_e|·|ln Ŝ|) - 1]

where ``|η| >= 1/2`` (S near 0 relative to Σ|x|^p, possible for odd p only) the
bound is not claimed and the comparison is skipped (reported as such).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray, round_fraction
from symjac.check._rounding import finfo, gamma, unit_roundoff
from symjac.pool._stamp import SparseJacobian

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry



@dataclasses.dataclass(frozen=True, eq=False)
class Windows:
    """The exact power sums of every window: numerators over ``den``.

    Attributes:
      num: (batch, W, K) object array of Python ints, the window cells' numerators.
      power_sum: (batch, W) object array, ``S_num = Σ num_i^p`` (S = S_num / den^p).
      den: the common denominator of x.
    """

    num: np.ndarray
    power_sum: np.ndarray
    den: int


def power(g: Geometry) -> int:
    """The spec's p."""
    p = getattr(g.spec, "p", None)
    assert isinstance(p, int), "lp pooling spec without p"
    return p


def _cells(g: Geometry) -> np.ndarray:
    # lp windows are full (valid padding, no dilation, no ceil overhang): every slot is a cell.
    assert g.valid.all()
    return g.cells


def windows(g: Geometry, x: ExactArray) -> Windows:
    """Exact power sums; raises where PyTorch's lp_pool is undefined (S < 0, p >= 2)."""
    p = power(g)
    num = g.to_canonical(x.num).astype(object)[:, _cells(g)]
    power_sum = (num ** p).sum(axis=-1) if num.shape[-1] else np.zeros(num.shape[:2], dtype=object)
    negative = np.argwhere(power_sum < 0)
    if p > 1 and negative.size:
        b, w = negative[0].tolist()
        raise InputError(f"lp pooling with p={p} is undefined where the window's power sum is negative "
                         f"(PyTorch returns NaN): output {g.output_index(b, w)} has Σ x^{p} < 0")
    return Windows(num, power_sum, x.den)


def _power(base: int, exponent: sympy.Rational) -> sympy.Expr:
    """``base^exponent`` exactly; SymPy's perfect-power search converts a huge base to a float
    (OverflowError beyond ~2^1024), where the power is kept unevaluated (still exact)."""
    try:
        return sympy.Integer(base) ** exponent
    except OverflowError:
        return sympy.Pow(sympy.Integer(base), exponent, evaluate=False)


def _root(s_num: int, p: int) -> sympy.Expr:
    return sympy.Integer(s_num) if p == 1 else _power(s_num, sympy.Rational(1, p))


def exact_forward(g: Geometry, x: ExactArray) -> np.ndarray:
    """y = S^(1/p) per window, an object array of exact SymPy algebraic numbers."""
    p = power(g)
    w = windows(g, x)
    cache: dict[int, sympy.Expr] = {}
    out = np.empty(w.power_sum.shape, dtype=object)
    for idx, s in np.ndenumerate(w.power_sum):
        if s not in cache:
            root = _root(int(s), p)
            try:
                cache[s] = root / w.den
            except OverflowError:  # an unevaluated huge root (see _power): keep the quotient so too
                cache[s] = sympy.Mul(root, sympy.Rational(1, w.den), evaluate=False)
        out[idx] = cache[s]
    return g.from_canonical(out)


def row_values(g: Geometry, w: Windows) -> np.ndarray:
    """(batch, W, K) exact ∂y_w/∂x at each window cell, SymPy algebraic numbers."""
    p = power(g)
    out = np.empty(w.num.shape, dtype=object)
    if p == 1:
        out[...] = sympy.Integer(1)
        return out
    zero_row = sympy.Integer(1 if g.spec.zero_window == "one" else 0)  # type: ignore[union-attr]
    factor: dict[int, sympy.Expr] = {}
    for (b, win), s in np.ndenumerate(w.power_sum):
        if s == 0:
            out[b, win] = zero_row
            continue
        if s not in factor:
            factor[s] = _power(int(s), sympy.Rational(1 - p, p))
        f = factor[s]
        out[b, win] = [sympy.Integer(int(n)) ** (p - 1) * f for n in w.num[b, win]]
    return out


def round_exact(value: Any, dtype: Any) -> Any:
    """An exact SymPy number rounded to nearest in ``dtype`` (via 60 significant digits)."""
    if isinstance(value, Fraction):
        return round_fraction(value, dtype)
    v = sympy.nsimplify(value) if isinstance(value, float) else sympy.sympify(value)
    if v.is_Rational:
        return round_fraction(Fraction(int(v.p), int(v.q)), dtype)
    f = sympy.Float(v.evalf(60), 60)
    sign, man, exp, _ = f._mpf_
    return round_fraction((-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp), dtype)


def round_array(values: np.ndarray, dtype: Any) -> np.ndarray:
    """Element-wise :func:`round_exact`, caching distinct values."""
    cache: dict[Any, Any] = {}
    out = np.empty(values.size, dtype=np.dtype(dtype))
    for i, v in enumerate(values.reshape(-1)):
        if v not in cache:
            cache[v] = round_exact(v, dtype)
        out[i] = cache[v]
    return out.reshape(values.shape)


def exact_vjp(g: Geometry, x: ExactArray, dy: ExactArray) -> np.ndarray:
    """dx = J(x)^T dy, exact SymPy values in the input's layout."""
    w = windows(g, x)
    rows = row_values(g, w)
    dyc = g.to_canonical(dy.num, g.out_spatial)
    cells = _cells(g)
    acc = np.empty((g.batch, g.n_in), dtype=object)
    acc[...] = sympy.Integer(0)
    scale = sympy.Rational(1, dy.den)
    for b in range(g.batch):
        for win in range(g.n_out):
            if dyc[b, win] == 0:
                continue
            up = int(dyc[b, win]) * scale
            for k, cell in enumerate(cells[win].tolist()):
                if rows[b, win, k] != 0:
                    acc[b, cell] = acc[b, cell] + up * rows[b, win, k]
    return g.from_canonical(acc, g.in_spatial)


def sparse_parts(g: Geometry, x: ExactArray) -> tuple[np.ndarray, np.ndarray, list[sympy.Expr]]:
    """COO (rows, cols, values) of the exact Jacobian, zero entries left out."""
    rows_v = row_values(g, windows(g, x))
    cells = _cells(g)
    b, win, k = np.nonzero(rows_v != 0)
    rows = g.flat_index(b, win, g.out_spatial)
    cols = g.flat_index(b, cells[win, k], g.in_spatial)
    return rows, cols, list(rows_v[b, win, k])


# -- floats: lowering and rounding bounds ------------------------------------------------


def overflow_shifts(top: np.ndarray, n: int, p: int, dtype: Any) -> np.ndarray:
    """(B, W) the exponent e of each window's scale 2^e: ``e = ⌊log2 max|x|⌋`` where ``n·max|x|^p``
    reaches half the dtype's largest value (x^p or the sum would overflow, though y may not),
    else 0 (no scaling). ``top`` is the window's max |x| in float64."""
    limit = math.log2(float(finfo(dtype).max)) - 1 - math.log2(max(n, 1))
    with np.errstate(divide="ignore"):
        big = p * np.log2(top) >= limit
    exponent = np.frexp(top)[1] - 1  # top = f·2^(e+1), f in [1/2, 1): top / 2^e in [1, 2)
    return np.where(big, exponent, 0).astype(np.int64)


def _float_windows(g: Geometry, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Each window's values and power sum in x's dtype, scaled by 2^-e (:func:`overflow_shifts`,
    exact) where they could overflow; and the scales 2^e (None: none scaled)."""
    p = power(g)
    vals = g.to_canonical(x)[:, _cells(g)]
    scale = None
    if vals.size:
        top = np.abs(vals.astype(np.float64))
        top = np.where(np.isfinite(top), top, 0.0).max(axis=-1)  # NaN and ±inf need no scale: they are the result
        shift = overflow_shifts(top, vals.shape[-1], p, x.dtype)
        if shift.any():
            vals = vals * (2.0 ** -shift).astype(x.dtype)[..., None]  # powers of two: exact
            scale = (2.0 ** shift).astype(x.dtype)
    s = (vals ** p).sum(axis=-1) if p > 1 else vals.sum(axis=-1)
    if p > 1 and (s < 0).any():
        raise InputError(f"lp pooling with p={p} is undefined where the window's power sum is negative")
    return vals, s, scale


def lowered_forward(g: Geometry, x: np.ndarray) -> np.ndarray:
    """y = S^(1/p) in x's dtype: the sum in the dtype, then sqrt (p = 2) or pow.

    Where x^p or the sum would overflow (a float16 window of 300 and 400: 400^2 > 65504,
    though y = 500) the window is scaled first: ``y = 2^e·(Σ (x/2^e)^p)^(1/p)``, 2^e <= max|x|,
    exact scalings; the root then reads ``T = S/2^(pe)`` with ``1 <= T <= S``, so the
    exponent's error ``exp(u_r·|ln T|/p)`` stays within the bound's ``|ln S|``
    (:func:`bounds` adds the scaled cells' possible underflow).
    """
    p = power(g)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and ±inf in x: IEEE's arithmetic
        _, s, scale = _float_windows(g, x)
    if p == 1:
        y = s
    elif p == 2:
        y = np.sqrt(s)
    else:
        y = np.power(s, x.dtype.type(1 / p))
    if scale is not None:
        y = y * scale
    return g.from_canonical(y.astype(x.dtype))


def lowered_vjp(g: Geometry, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy · x^(p-1) · S^(1/p - 1) in x's dtype (PyTorch's order), zero_window at S = 0."""
    p = power(g)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and ±inf in x: IEEE's arithmetic
        vals, s, _ = _float_windows(g, x)  # scaled windows: the row x^(p-1)·S^(1/p-1) has degree 0
    dyc = g.to_canonical(dy, g.out_spatial).astype(x.dtype)
    t = x.dtype.type
    if p == 1:
        rows = np.ones_like(vals)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):  # S = 0: replaced by zero_window below
            factor = np.power(s, t(1 / p) - t(1))
            rows = vals ** (p - 1) * factor[..., None]
        zero = t(1) if g.spec.zero_window == "one" else t(0)  # type: ignore[union-attr]
        rows = np.where((s == 0)[..., None], zero, rows)
    dx = np.zeros((g.batch, g.n_in), dtype=x.dtype)
    cells = _cells(g)
    with np.errstate(invalid="ignore"):  # 0·inf at a non-finite cell: NaN, a value the convention leaves open
        for k in range(cells.shape[1]):
            dx[:, cells[:, k]] += (dyc * rows[..., k]).astype(x.dtype)  # one slot: distinct cells
    return g.from_canonical(dx, g.in_spatial)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Per-window rounding bounds (float64 values, canonical (batch, W) / (batch, W, K)).

    Attributes:
      forward: |ŷ - y| bound per output.
      row: relative bound on every gradient entry of the window (|ĝ - g| <= row·|g|).
      claimed: where the bounds hold (False where |η| >= 1/2: S cancels).
    """

    forward: np.ndarray
    row: np.ndarray
    claimed: np.ndarray


def bounds(g: Geometry, x: ExactArray, dtype: Any) -> Bounds:
    """The module docstring's forward and gradient bounds at exact input ``x``."""
    p = power(g)
    u = unit_roundoff(dtype)
    u_r = 0.0 if p & (p - 1) == 0 else u
    w = windows(g, x)
    n = w.num.shape[-1]
    den_p = Fraction(w.den) ** p
    abs_sum = np.abs(w.num ** p).sum(axis=-1)
    fwd = np.zeros(w.power_sum.shape)
    row = np.zeros(w.power_sum.shape)
    claimed = np.ones(w.power_sum.shape, dtype=bool)
    e = 1 / p - 1
    gam_s = float(gamma(p + n + 1, u))
    # windows a correct implementation may scale by 2^e (symjac's lowering does, :func:`overflow_shifts`):
    # its scaled cells may underflow, p·λ each at most (λ the dtype's least subnormal), times 2^(pe)
    # (the largest |num| over den as Python ints: num alone may pass float64's range when den is large)
    top_num = np.abs(w.num).max(axis=-1, initial=0) if n else np.zeros(w.num.shape[:-1], dtype=object)
    top = np.array([int(t) / w.den for t in top_num.reshape(-1)], dtype=np.float64).reshape(top_num.shape)
    shifts = overflow_shifts(top, n, p, dtype)
    tiny = n * p * float(finfo(dtype).smallest_subnormal)
    for idx, s in np.ndenumerate(w.power_sum):
        if s == 0 and abs_sum[idx] == 0:
            continue  # all-zero window: every step is exact, y = 0
        s_val = Fraction(int(s)) / den_p
        under = tiny * float(Fraction(2) ** (p * int(shifts[idx])) / abs(s_val)) if shifts[idx] and s else 0.0
        if s == 0 or gam_s * float(Fraction(int(abs_sum[idx]), int(abs(s)))) + under >= 0.5:
            claimed[idx] = False
            continue
        eta = gam_s * float(Fraction(int(abs_sum[idx]), int(abs(s)))) + under
        log_s = math.log(abs(s_val.numerator)) - math.log(s_val.denominator)
        ln_s = abs(log_s)
        try:  # y in float64 from its logarithm (S itself may exceed float64: 1e308^2)
            y = math.exp(log_s / p)
        except OverflowError:  # y beyond float64: nothing to claim
            claimed[idx] = False
            continue
        fwd[idx] = y * ((1 + 2 * u) * math.exp(u_r * ln_s / p) * (1 + eta / (p * (1 - eta))) - 1)
        delta_e = 0.0 if p == 1 else u * (abs(e) + 1 / p)  # p = 1: the exponent r̂ - 1 = 0 is exact
        row[idx] = (1 + float(gamma(9 + p, u))) * (1 + u_r) * (1 + abs(e) * eta / (1 - eta)) * math.exp(delta_e * ln_s) - 1
    return Bounds(fwd, row, claimed)


# -- public-API shapes ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class AlgebraicJacobian(SparseJacobian):
    """A :class:`~symjac.SparseJacobian` whose entries are algebraic (lp pooling)."""

    def to_numpy(self, dtype: Any = np.float64) -> np.ndarray:
        """The dense matrix, each exact entry rounded to nearest in ``dtype``."""
        dense = np.zeros(self.shape, dtype=dtype)
        if self.table:
            table = np.empty(len(self.table), dtype=object)
            table[:] = list(self.table)
            dense[self.rows, self.cols] = round_array(table, dtype)[self.value_ids]
        return dense


def lp_jacobian(g: Geometry, x: ExactArray | None) -> AlgebraicJacobian:
    """The exact sparse Jacobian of lp pooling at ``x``."""
    if x is None:
        raise InputError("lp pooling's Jacobian depends on x: pass the input values, not only its shape")
    rows, cols, values = sparse_parts(g, x)
    order = np.lexsort((cols, rows))
    ids: dict[Any, int] = {}
    value_ids = np.array([ids.setdefault(v, len(ids)) for v in values], dtype=np.int64).reshape(-1)
    return AlgebraicJacobian(g.output_shape, g.input_shape, rows[order], cols[order], value_ids[order],
                             tuple(ids), spec=g.spec)


def lp_vjp(g: Geometry, x: ExactArray | None, dy: ExactArray) -> np.ndarray:
    """The exact input gradient of lp pooling, SymPy values."""
    if x is None:
        raise InputError("lp pooling's gradient depends on x: pass the input values, not only its shape")
    return exact_vjp(g, x, dy)


# -- the verifier's inputs and finite differences ----------------------------------------


def signed_input(g: Geometry, x: np.ndarray) -> np.ndarray:
    """The default x (signed integers, distinct within every window) where lp is defined.

    Even p and p = 1: as given (every power sum is >= 0; a backward that drops sign(x)
    from ``x^(p-1)`` is wrong at the negative cells). Odd p >= 3: ``S = Σ x^p`` must be
    > 0, and well clear of 0 (where ``S`` cancels the rounding bound is not claimed): the
    non-negative values are spread (v -> 2v + 2, where exact) to outweigh the negative ones, and
    negative cells of a window with ``S < Σ|x|^p / 4`` are made positive, until none is
    left: a flip only raises the sums of the windows holding the cell, so this ends
    (at worst with |x|), and the windows keep negative cells wherever they can.
    """
    p = power(g)
    if p == 1 or p % 2 == 0:
        return x
    # Odd p: the non-negative values v become 2v + 2, so a window's positive cells outweigh its
    # negative ones (-1, ..., -n/2) and keep them: [-1, 0] becomes [-1, 2] (S = 7), not [1, 0].
    spread = np.where(x < 0, x, 2 * x + 2).astype(x.dtype)
    if np.array_equal(spread.astype(np.float64), np.where(x < 0, x, 2 * x.astype(np.float64) + 2)):
        x = spread
    xc = g.to_canonical(x).copy()
    cells = _cells(g)
    while True:
        vals = xc[:, cells].astype(np.float64)  # small integers: exact powers
        short = (vals ** p).sum(axis=-1) * 4 < (np.abs(vals) ** p).sum(axis=-1)
        if not short.any():
            return g.from_canonical(xc, g.in_spatial)
        b, w = np.argwhere(short)[0]
        window = cells[w]
        xc[b, window] = np.abs(xc[b, window])


def zero_window_input(g: Geometry, x: np.ndarray) -> np.ndarray:
    """The tie pass's x (zeros and ones) with all-zero windows on purpose, so the nonsmooth
    point S = 0 (p >= 2) is reached whatever the seed. lp windows are full and undilated, so
    windows whose index along every axis is a multiple of 2·⌈k/s⌉ are disjoint and have a
    nonzero window between them; they are set to 0 (window 0 is one: present at any shape).
    For even p the ones get random signs (S > 0 for any sign: signed cells around them)."""
    p = power(g)
    xc = g.to_canonical(x).copy()
    if p % 2 == 0:
        signs = np.where(np.random.default_rng(int(np.abs(xc).sum())).random(xc.shape) < 0.5, -1, 1)
        xc = xc * signs.astype(xc.dtype)
    kernel: tuple[int, ...] = g.spec.kernel  # type: ignore[union-attr,assignment]
    stride: tuple[int, ...] = g.spec.stride  # type: ignore[union-attr,assignment]
    index = np.unravel_index(np.arange(g.n_out), g.out_spatial)
    chosen = np.ones(g.n_out, dtype=bool)
    for i, k, s in zip(index, kernel, stride):
        chosen &= i % (2 * -(-k // s)) == 0
    xc[:, _cells(g)[chosen].reshape(-1)] = 0
    return g.from_canonical(xc, g.in_spatial)


def fd_truncation(g: Geometry, x: np.ndarray, h: float) -> np.ndarray:
    """(B, W, K) a bound on ``|(y(x + h·e_k) - y(x))/h - ∂y/∂x_k|`` for each window's slot k.

    Along one cell, with c the other cells' power sum, ``φ(t) = (c + t^p)^(1/p)`` and
    ``φ''(t) = (p - 1)·c·t^(p-2)·(c + t^p)^(1/p - 2)``; Taylor's theorem bounds the
    one-sided difference's error by ``(h/2)·max|φ''|`` over ``t ∈ [a, a + h]``, and
    ``|φ''| <= (p - 1)·|c|·max(|a|, |a + h|)^(p-2)·(min (c + t^p))^(1/p - 2)`` (the
    exponent is negative). The minimum is ``c + a^p = S`` for odd p (t^p increases),
    ``c + min(a^p, (a + h)^p)`` for even p, ``c`` where the step crosses 0. Where it is 0
    (the step reaches an all-zero window, S = 0) the bound is inf. p = 1 is linear: 0.
    Evaluated in float64 and rounded up by a relative 2^-30 (the terms are exact or
    within a few ulps).
    """
    p = power(g)
    vals = g.to_canonical(x).astype(np.float64)[:, _cells(g)]
    if p == 1:
        return np.zeros(vals.shape)
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float64: inf, not bounded
        return _truncation(vals, p, h)


def _truncation(vals: np.ndarray, p: int, h: float) -> np.ndarray:
    terms = vals ** p
    c = terms.sum(axis=-1, keepdims=True) - terms
    a, b = vals, vals + h
    # c, S and the powers in float64: within (n + p + 2) ulps of their |terms| (exact for small integers)
    slack = 2 * (vals.shape[-1] + p + 2) * 2.0**-53 * (np.abs(terms).sum(axis=-1, keepdims=True) + np.abs(b) ** p)
    if p % 2:
        low = c + a ** p - slack
    else:
        crosses = (a < 0) & (b > 0)
        low = c + np.where(crosses, 0.0, np.minimum(a ** p, b ** p)) - slack
    top = np.maximum(np.abs(a), np.abs(b)) ** (p - 2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        curve = (p - 1) * (np.abs(c) + slack) * top * np.where(low > 0, low, np.nan) ** (1 / p - 2)
    bound = np.where(low > 0, h / 2 * curve * (1 + 2.0**-30), np.inf)
    return np.asarray(np.where(np.isfinite(bound), bound, np.inf))
