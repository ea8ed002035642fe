"""Power-average (lp) pooling: y = (Σ_window x^p)^(1/p), PyTorch's ``lp_pool`` (p = 2: norm pooling).

Defined as the recipe in CONTRIBUTING.md ("Add a pooling operator") says: this
module holds every rule the stages read; its machinery sits below the registry:
:mod:`symjac.pool._lp` (exact power sums and algebraic rows, the NumPy lowering and
the rounding bounds derived there) and :mod:`symjac.pool._lp_rows` (rows
rounded to float64 with their bounds, the zero-window checks).

- **spec**: ``Pool`` only (PyTorch's lp_pool geometry: no padding, dilation or
  ceil_mode); ``p`` an integer >= 1 and ``zero_window`` (``"zero"``, PyTorch's, or
  ``"one"``) its own fields.
- **exact**: ``y = S^(1/p)`` and ``∂y/∂x_i = x_i^(p-1)·S^(1/p - 1)``, S = Σ x^p: exact
  algebraic numbers (SymPy keeps 2/√5 as ``2*sqrt(5)/5``); JVP = J·t from the same
  rows; the template ``(a^p + r)^(1/p)`` (``r`` the other slots' power sum) is the one
  SymPy differentiates for ``explain``. The second derivative is not zero
  (:meth:`Lp.hvp`).
- **ties**: none, but S = 0 (p >= 2) is a nonsmooth point: the verifier probes an
  input with all-zero windows (the tie input) and accepts the spec's ``zero_window``
  row or, for even p, any element of the Clarke set, the dual unit ball.
- **rounding model**: the forward and gradient bounds of :mod:`symjac.pool._lp`; no
  extra input families (no rational dense ``J^T dy`` to compare with).
- **inputs**: signed where lp is defined (:func:`symjac.pool._lp.signed_input`: any sign
  for even p and p = 1, S > 0 kept for odd p), all-zero windows on purpose in the tie
  pass (:func:`symjac.pool._lp.zero_window_input`), and finite differences of the
  implementation's forward away from zero windows, at step 2^-⌊prec/2⌋, within its
  curvature (:func:`symjac.pool._lp.fd_truncation`) and its forward bound at both points.
- **extreme** (:meth:`Lp.extreme_magnitude`, p >= 2): cells whose ``x^p`` overflows the dtype
  while y stays far below its range: a forward that raises to the power before it scales
  (PyTorch's ``lp_pool`` and ONNX Runtime's ``LpPool`` both do: float32 cells of 2^65 give
  inf where y = 5.5e19) is wrong there, as is a backward that forms ``S^(1/p - 1)`` from an
  overflowed S (its gradient 0). p = 1 is a sum: avg's magnitudes.
- **non-finite** (:meth:`Lp.nonfinite`): y is IEEE 754's ``(Σ x^p)^(1/p)``: NaN with a NaN; for
  even p any infinity is +inf (``x^p``); for odd p both infinities make NaN, else the
  infinity (odd p >= 3 takes no -inf: S < 0 is outside its domain). The derivative: p = 1 is
  linear, its rows 1 at every x (PyTorch's 0 at a NaN window is its sign(S)·relu(|S|) again,
  the known defect at S = 0); for p >= 2 at a window whose value is an infinity, the limit
  ``x_j^(p-1)·S^(1/p - 1) -> 0`` at every finite cell (what PyTorch and JAX return), and any
  value at an infinite cell (PyTorch: NaN; the limit is ±1 for one such cell, none for two); at
  a window whose value is NaN, any value (PyTorch: NaN).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import FINITE, POS_INF, ExactArray
from symjac.check._rounding import finfo, precision, unit_roundoff
from symjac.pool._lp import (
    AlgebraicJacobian,
    bounds,
    exact_forward,
    fd_truncation,
    lowered_forward,
    lowered_vjp,
    lp_jacobian,
    lp_vjp,
    power,
    row_values,
    signed_input,
    windows,
    zero_window_input,
)
from symjac.pool._ops._edges import Nonfinite, cells_read, counts, proxy, sum_value
from symjac.pool._ops._protocol import ForwardBound, Operator
from symjac.pool._symbolic import PAIR, Template
from symjac.pool._lp_rows import clarke_ok, exact_rows, forward_tolerance, zero_window_policy
from symjac.pool._rows import ExactRows, Rows

if TYPE_CHECKING:
    from symjac.pool._beta import Tie
    from symjac.pool._geometry import Geometry
    from symjac.pool._spec import Pool


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class LpForms:
    """The SymPy forms of the power-average reduction (:class:`symjac.pool._symbolic.Forms`):
    ``f(a, r) = (a^p + r)^(1/p)`` with ``r`` the power sum of the other slots."""

    p: int
    identity: sympy.Expr = sympy.Integer(0)

    def pair(self, divisor: int) -> sympy.Expr:
        a, r = PAIR
        return (a**self.p + r) ** sympy.Rational(1, self.p)

    def reduce(self, symbols: tuple[sympy.Symbol, ...], divisor: int) -> sympy.Expr:
        return sympy.Add(*(s**self.p for s in symbols)) ** sympy.Rational(1, self.p)

    def rest(self, others: list[sympy.Symbol]) -> sympy.Expr:
        return sympy.Add(*(s**self.p for s in others))


@functools.lru_cache(maxsize=64)
def template(p: int, n: int, divisor: int) -> Template:
    """The template of a class with ``n`` slots: SymPy's ``d/da (a^p + r)^(1/p)``."""
    forms = LpForms(p)
    a, _ = PAIR
    return Template("lp", n, divisor, sympy.diff(forms.pair(divisor), a), forms)


class Lp(Operator):
    """lp pooling (:class:`symjac.Pool` only: PyTorch's lp_pool geometry)."""

    name = "lp"
    samples = ({"p": 2}, {"p": 3, "zero_window": "one"}, {"p": 1})
    any_geometry = False
    tie_family = True  # its all-zero windows are its nonsmooth points
    rational = False
    fd_directions = False  # fd_error bounds coordinate steps only
    extra_families = False
    second_derivative_zero = False

    # -- spec ----------------------------------------------------------------------
    def check_power(self, spec: Pool, zero_window: str) -> None:
        """``p`` an integer >= 1; PyTorch lp_pool's geometry (no padding, dilation or ceil_mode)."""
        if not _is_int(spec.p) or spec.p < 1:  # type: ignore[operator]
            raise SpecError(f"p={spec.p!r} is not valid for mode='lp': give an integer power >= 1 (2 is norm pooling)")
        # torch.nn.functional.lp_pool1d/2d take no padding or dilation; their ceil-mode
        # overhang windows are scaled by kernel/valid cells, which is not an lp norm.
        if spec.padding != "valid" and spec.padding != ((0, 0),) * spec.rank:
            raise SpecError(f"padding={spec.padding!r} is not valid for mode='lp': lp pooling (PyTorch lp_pool) "
                            "has no padding; give padding='valid'")
        if spec.dilation != (1,) * spec.rank or spec.ceil_mode:
            raise SpecError("mode='lp' takes no dilation and no ceil_mode (PyTorch lp_pool's geometry); "
                            "leave them at 1 and False")
        object.__setattr__(spec, "p", int(spec.p))  # type: ignore[arg-type]

    def spec_table(self, spec: Pool) -> dict[str, Any]:
        return {"p": spec.p, "zero_window": spec.zero_window}

    def repr_fields(self, spec: Pool) -> list[str]:
        return [f"p={spec.p!r}", f"zero_window={spec.zero_window!r}"]

    # -- symbolic and exact ----------------------------------------------------------
    def template(self, spec: Any, n: int, divisor: int) -> Template:
        return template(int(spec.p), n, divisor)

    def clear_caches(self) -> None:
        template.cache_clear()

    def jacobian(self, g: Geometry, x: ExactArray | None, tie: Tie) -> AlgebraicJacobian:
        return lp_jacobian(g, x)

    def vjp(self, g: Geometry, x: ExactArray | None, dy: ExactArray, tie: Tie) -> np.ndarray:
        return lp_vjp(g, x, dy)

    def jvp(self, g: Geometry, x: ExactArray | None, t: ExactArray, tie: Tie) -> np.ndarray:
        """``J(x) t``: each window's exact row (the VJP's) against t's cells, Σ_k row_k·t_k."""
        x = self.require_x(x, "derivative")
        rows = row_values(g, windows(g, x))  # (B, W, K) exact
        tc = g.to_canonical(t.num).astype(object)[:, g.cells] * sympy.Rational(1, t.den)  # (B, W, K)
        out = (rows * tc).sum(axis=-1) if rows.shape[-1] else np.zeros(rows.shape[:2], dtype=object)
        return g.from_canonical(out, g.out_spatial)

    def forward(self, g: Geometry, x: ExactArray) -> np.ndarray:
        return exact_forward(g, x)

    def hvp(self, g: Geometry, x: ExactArray, dy: ExactArray, v: ExactArray) -> np.ndarray:
        """``Σ_w dy_w H_w v``, H_w the Hessian of ``y_w = S^(1/p)``, exactly (SymPy algebraic numbers).

        With ``g_i = x_i^(p-1)·S^(1/p - 1)`` the derivative of ``g_i`` along x_j is::

            ∂g_i/∂x_j = (p - 1)·S^(1/p - 1)·[x_i^(p-2)·δ_ij − x_i^(p-1)·x_j^(p-1)/S]

        (product rule, ``∂S/∂x_j = p·x_j^(p-1)``), so a window adds
        ``dy_w·(p - 1)·S^(1/p - 1)·[x_i^(p-2)·v_i − x_i^(p-1)·(Σ_j x_j^(p-1)·v_j)/S]`` to cell i.
        p = 1 is linear (zero); at S = 0 (p >= 2) the gradient is the spec's constant
        ``zero_window`` row, whose derivative is taken as 0 there.
        """
        p = power(g)
        xs = g.to_canonical(x.num).astype(object)[:, g.cells]  # (B, W, K) numerators over x.den
        vs = g.to_canonical(v.num).astype(object)[:, g.cells]
        dyc = g.to_canonical(dy.num, g.out_spatial)
        acc = np.empty((g.batch, g.n_in), dtype=object)
        acc[...] = sympy.Integer(0)
        if p == 1:
            return g.from_canonical(acc, g.in_spatial)
        rx, rv, rdy = sympy.Rational(1, x.den), sympy.Rational(1, v.den), sympy.Rational(1, dy.den)
        for b, w in np.ndindex(*dyc.shape):
            cells = [sympy.Integer(int(n)) * rx for n in xs[b, w]]
            s = sum((c**p for c in cells), sympy.Integer(0))
            if dyc[b, w] == 0 or s == 0:
                continue
            dirs = [sympy.Integer(int(n)) * rv for n in vs[b, w]]
            along = sum((c ** (p - 1) * d for c, d in zip(cells, dirs)), sympy.Integer(0))
            factor = int(dyc[b, w]) * rdy * (p - 1) * s ** (sympy.Rational(1, p) - 1)
            for k, cell in enumerate(g.cells[w].tolist()):
                term = factor * (cells[k] ** (p - 2) * dirs[k] - cells[k] ** (p - 1) * along / s)
                acc[b, cell] = acc[b, cell] + term
        return g.from_canonical(acc, g.in_spatial)

    # -- rounding model --------------------------------------------------------------
    def forward_bound(self, g: Geometry, x: np.ndarray, exact_of: Callable[[], ExactArray],
                      dtype: np.dtype[Any], u: float) -> ForwardBound:
        """The bound of :mod:`symjac.pool._lp` (algebraic values: the exact ones rounded to float64)."""
        e_c, tol = forward_tolerance(g, x, dtype)
        exact_y = g.to_canonical(exact_forward(g, exact_of()), g.out_spatial)
        return e_c, tol, lambda: exact_y

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """Rows rounded from the exact algebraic values with their bounds; "tied": power sum 0."""
        found = exact_rows(g, x, dtype, unit_roundoff(dtype))
        zero = found["zero"]
        member = zero[..., None] & g.valid[None]
        shape = zero.shape
        return ExactRows(found["rows"], member, zero, np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool),
                         tol=found["tol"])

    # -- lowering and inputs -----------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        return lowered_forward(g, x)

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        return lowered_vjp(g, x, dy)

    def default_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """Signed where lp is defined: as given for even p and p = 1, odd p's windows kept at S > 0."""
        return signed_input(g, x)

    def tie_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """All-zero windows on purpose (one window colour zeroed), signed ones around them for even p."""
        return zero_window_input(g, x)

    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """extreme (a power that overflows before the root) and nonfinite (NaN and ±inf)."""
        return ("extreme", "nonfinite")

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """p >= 2: magnitudes in (2^e, 2^(e+1)] with ``2^(e·p) >= 2·max``, so every ``x^p`` overflows the
        dtype while ``y <= n^(1/p)·2^(e+1)`` stays far below it; signed for even p, positive for odd
        p (S > 0). p = 1 (a sum): up to ``max/(2n)``, as average pooling's."""
        p = power(g)
        top = float(finfo(dtype).max)
        if p == 1:
            return top / (2 * max(int(g.cells.shape[1]), 1)), "slices"
        e = -(-(int(np.frexp(top)[1]) + 1) // p)  # max < 2^f (f = frexp's exponent), so 2^(e·p) >= 2^(f+1) > 2·max
        # y <= n^(1/p)·2^(e+1) must stay within max/4: a window of thousands of cells takes smaller cells
        # (then only their power sum overflows)
        room = math.floor(math.log2(top / (4 * g.cells.shape[1] ** (1 / p))))
        return float(2.0 ** min(e + 1, room)), "±" if p % 2 == 0 else "+"

    def overflows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray | None:
        """Windows whose exact y, with its rounding bound, reaches the dtype's overflow threshold: there the
        correctly rounded y may be inf, and a scaled evaluation's last multiply may overflow."""
        top = float(finfo(dtype).max)
        xa = np.abs(np.asarray(x, dtype=np.float64))
        if not xa.size or float(xa.max()) * g.cells.shape[1] < top / 2:
            return None  # y <= n·max|x| (any p >= 1): nowhere near (one max over x)
        y, tol = forward_tolerance(g, x, dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            near = ~(y + np.where(np.isfinite(tol), tol, 0.0) < top * (1 - float(finfo(dtype).eps)))
        return np.asarray(near) if near.any() else None

    def nonfinite_input(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """Odd p >= 3 takes no -inf (S < 0 is outside its domain): those cells are +inf."""
        p = power(g)
        return np.where(np.isneginf(x), x.dtype.type(np.inf), x) if p % 2 and p > 1 else x

    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """The module docstring's convention. The proxy puts the largest finite magnitude (times
        2^⌈log2 K⌉ for odd p, so S > 0) at the non-finite cells: rows there are replaced."""
        p = power(g)
        c = counts(g, x)
        if p % 2 and p > 1 and (c.neg > 0).any():
            b, w = np.argwhere(c.neg > 0)[0].tolist()
            raise InputError(f"lp pooling with p={p} is undefined where the window's power sum is negative: output "
                             f"{g.output_index(b, w)} holds -inf (give +inf or NaN, or an even p)")
        special, value = sum_value(c, signed=p % 2 == 1)
        finite = np.abs(np.asarray(x, dtype=np.float64))
        top = float(finite[np.isfinite(finite)].max(initial=0.0)) or 1.0
        fill = min(top * 2.0 ** int(g.cells.shape[1]).bit_length(), float(np.finfo(np.float64).max)) if p % 2 else top
        read, exact = proxy(g, x, fill)
        if p == 1:
            return Nonfinite(policy, read, exact, special, value)  # linear: its rows are 1 at every x
        at_nan = special & np.isnan(value)
        free = cells_read(g, at_nan) | (c.codes >= POS_INF)
        zero = (special & ~at_nan)[..., None] & g.valid[None] & (g.gather(c.codes, 0) == FINITE)
        return Nonfinite(policy, read, exact, special, value, free, zero)

    def nonfinite_note(self, policy: str) -> str:
        return ("lp pooling at NaN and ±inf: y is IEEE 754's (Σ x^p)^(1/p) (NaN with a NaN; +inf with an infinity "
                "for even p; odd p: NaN with both infinities, else the infinity); its derivative is 1 everywhere "
                "for p = 1, and for p >= 2 the limit 0 at the finite cells of a window whose value is infinite, "
                "any value at its infinite cells and at every cell of a window whose value is NaN")

    def fd_step(self, dtype: np.dtype[Any]) -> float:
        """2^-⌊prec/2⌋: a smooth forward's one-sided difference errs by O(h) (curvature) plus
        O(u/h) (rounding): balanced near h ≈ √u (2^-26 in float64, 2^-12 in float32)."""
        return float(2.0 ** -(precision(dtype) // 2))

    def fd_error(self, g: Geometry, x: np.ndarray, h: float, in_colours: np.ndarray,
                 dtype: np.dtype[Any]) -> np.ndarray | None:
        """Curvature (:func:`~symjac.pool._lp.fd_truncation`) plus the forward bound at x and at
        x + h·e_k (each colour's step moves one cell of a window), over h; inf where not claimed."""
        xc = g.to_canonical(x).astype(np.float64)

        def tolerance(xs: np.ndarray) -> np.ndarray:  # (B, W) |ŷ - y| of a correct forward at xs
            b = bounds(g, ExactArray.from_any(g.from_canonical(xs, g.in_spatial)), dtype)
            return np.where(b.claimed, b.forward * (1 + 2.0**-52), np.inf)

        moved = np.full((g.batch, g.n_out, g.cells.shape[1]), np.inf)
        for colour in range(int(in_colours.max()) + 1 if in_colours.size else 0):
            slots = in_colours[g.cells] == colour  # (W, K): at most one slot a window
            moved = np.where(slots[None], tolerance(xc + h * (in_colours == colour))[:, :, None], moved)
        return np.asarray(fd_truncation(g, x, h) + (tolerance(xc)[:, :, None] + moved) / h)

    # -- diagnosis ---------------------------------------------------------------------
    def clarke_ok(self, g: Geometry, rows: Rows, exact: ExactRows, u: float) -> np.ndarray:
        return clarke_ok(g, rows.obs, exact.tied, u)

    def zero_window_policy(self, g: Geometry, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]],
                           u: float) -> str | None:
        ok = exact.tied.copy()
        for key in suspects:
            ok[key] = False
        return zero_window_policy(g, rows.obs, exact.tied, ok, u)

    def tied_detail(self, g: Geometry, exact: ExactRows, b: int, w: int, cells: list[Any]) -> tuple[str, str]:
        p = power(g)
        return (f"; all-zero window (power sum 0, the nonsmooth point of lp pooling with p={p})",
                f"the spec's zero_window row or, for even p, a row with Σ|g|^q <= 1 (q = {p}/{p - 1})")

    # -- metadata ----------------------------------------------------------------------
    def census_tied(self, g: Geometry, vals: np.ndarray) -> np.ndarray:
        """The window is all zero."""
        zero: np.ndarray = ((vals == 0) | ~g.valid[None]).all(axis=-1)
        return zero

    def census_policies(self, betas: tuple[Any, Any]) -> tuple[Any, Any]:
        return ("zero", "one")

    def census_difference(self, g: Geometry, x: ExactArray, dy: ExactArray, policies: tuple[Any, Any]) -> ExactArray:
        """J_one − J_zero is 1 on every cell of a window with S = 0 (p >= 2), else 0."""
        p = power(g)
        zero_sum = windows(g, x).power_sum == 0 if p > 1 else np.zeros((g.batch, g.n_out), dtype=bool)
        up = np.where(zero_sum, g.to_canonical(dy.num, g.out_spatial), 0)
        acc = np.zeros((g.batch, g.n_in), dtype=up.dtype)
        for k in range(g.cells.shape[1]):
            acc[:, g.cells[:, k]] += up  # one slot: distinct cells
        return ExactArray(g.from_canonical(acc, g.in_spatial), dy.den)

    def clarke_ball(self, g: Geometry, x: ExactArray) -> tuple[np.ndarray, int] | None:
        """(B, W) the windows whose rows must lie in the dual unit ball (power sum 0, p >= 2), and p."""
        p = power(g)
        if p < 2:
            return None
        return np.asarray(windows(g, x).power_sum == 0), p


LP = Lp()
