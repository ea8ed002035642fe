"""Average pooling: y = (sum of the window's cells) / D, linear, every derivative a constant 1/D.

The template ``(a + r)·w`` at ``w = 1/D`` is differentiated once by SymPy
(:func:`generic_avg`); it is linear and symmetric, so every slot of a window has
the weight 1/D, ``y = J x`` exactly and ``J t`` (JVP) and ``J^T dy`` (VJP) are the
same stamp applied both ways; the second derivative is zero. The divisor is the
number of valid cells (``exclude_pad``), the padded window's (``include_pad``,
PyTorch ``count_include_pad``) or a given int (``divisor_override``).

Rounding: a float forward sums n terms and scales once, within ``γ_{n+1}·Σ|x|/D`` of
the exact value; the finite differences carry that bound too. A sum may overflow where the
mean would not: every framework measured sums in the dtype (or wider) and divides after, and
all four return inf for three float32 cells of 3e38 (PyTorch 2.13, JAX 0.10, TensorFlow 2.21,
ONNX Runtime); in float16 JAX and TensorFlow overflow at a sum beyond 65504 where PyTorch and
ONNX Runtime, which accumulate float16 in float32, do not. So a correct forward may return a
non-finite value where ``Σ|x|`` can reach the dtype's overflow threshold
(:meth:`Avg.overflows`), and must be finite elsewhere. Inputs: the near-ties family
(accumulation of overlapping windows) and the extreme family (window sums at most half the
threshold: an accumulator narrower than the dtype, or a sum scaled up before the divide,
overflows there, no correct one does).

Non-finite inputs (:meth:`Avg.nonfinite`): the forward is IEEE 754's sum over D: NaN where the
window holds a NaN or both infinities, else the infinity it holds; the derivative is 1/D at
every x, so ``J^T dy`` is the same finite stamp at NaN and ±inf (PyTorch, JAX and TensorFlow
all return 1/D there; ONNX Runtime has no backward).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac.check._rounding import finfo, gamma
from symjac.pool._ops._edges import Nonfinite, counts, proxy, sum_value
from symjac.pool._ops._stamped import StampedOperator
from symjac.pool._stamp import Stamp, apply, window_mass
from symjac.pool._symbolic import PAIR, Template, lines, window_weights
from symjac.pool._rows import ExactRows, stamp_rows

if TYPE_CHECKING:
    from symjac._exact import ExactArray
    from symjac.pool._geometry import Geometry
    from symjac.pool._spec import Pool
    from symjac.pool._symbolic import WindowClass

# The averaging weight 1/D of a window, as a symbol: one differentiation serves every divisor.
WEIGHT = sympy.Symbol("w", positive=True)


@functools.lru_cache(maxsize=1)
def generic_avg() -> tuple[sympy.Expr, sympy.Expr]:
    """Build and differentiate ``(a + r)·w`` once (O(1) SymPy work): (pair, d pair/da)."""
    a, r = PAIR
    pair = (a + r) * WEIGHT
    d = sympy.diff(pair, a)
    if d.free_symbols - {WEIGHT}:
        raise AssertionError(f"average template {pair} has a derivative {d} that depends on the slots")
    # Linear and symmetric: pair(a, r) == pair(r, a), so d pair/dr = d too (a constant),
    # and pair(0, 0) = 0: pair == d*a + d*r exactly and y = J x with every slot weighted by d.
    if pair.xreplace({a: r, r: a}) != pair or pair.xreplace({a: 0, r: 0}) != 0:
        raise AssertionError(f"average template {pair} is not linear and symmetric")
    return pair, d


@functools.lru_cache(maxsize=256)
def template(n: int, divisor: int) -> Template:
    """The template of a class with ``n`` valid slots: SymPy's ``d/da (a + r)·w`` at w = 1/D
    (an exact substitution of the one differentiation, :func:`generic_avg`)."""
    d = generic_avg()[1].xreplace({WEIGHT: sympy.Rational(1, divisor)})
    if not d.is_Rational:
        raise AssertionError(f"average template for divisor {divisor} has a non-constant derivative {d}")
    return Template("avg", n, divisor, d, AVG, weight=Fraction(int(d.p), int(d.q)))


class Avg(StampedOperator):
    """Average pooling (:class:`symjac.Pool`, :class:`symjac.AdaptivePool`, :class:`symjac.GlobalPool`)."""

    name = "avg"
    samples = ({}, {"padding": 1, "divisor": "include_pad"}, {"padding": 1, "ceil_mode": True, "divisor": 3})
    identity = sympy.Integer(0)

    # -- the template's SymPy forms (symjac.pool._symbolic.Forms) ------------------
    def pair(self, divisor: int) -> sympy.Expr:
        return generic_avg()[0].xreplace({WEIGHT: sympy.Rational(1, divisor)})

    def reduce(self, symbols: tuple[sympy.Symbol, ...], divisor: int) -> sympy.Expr:
        return sympy.Add(*symbols) / sympy.Integer(divisor)

    def rest(self, others: list[sympy.Symbol]) -> sympy.Expr:
        return sympy.Add(*others)

    # -- spec ----------------------------------------------------------------------
    def spec_table(self, spec: Pool) -> dict[str, Any]:
        return {"divisor": spec.divisor}

    def counts_padding(self, spec: Pool) -> bool:
        return spec.divisor == "include_pad"

    # -- symbolic and exact ----------------------------------------------------------
    def template(self, spec: Any, n: int, divisor: int) -> Template:
        return template(n, divisor)

    def clear_caches(self) -> None:
        template.cache_clear()
        generic_avg.cache_clear()

    def stamp(self, g: Geometry, x: ExactArray | None, tie: str) -> Stamp:
        """Every valid slot of window w has the weight 1/D_w of its class template, at any x."""
        weight, q = window_weights(g)
        return Stamp(g, weight[None], q, full=True, mask=g.valid[None])

    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        """Linear (checked symbolically per template): y = J x."""
        return apply(self.stamp(g, x, "first"), x, transpose=False)

    # -- rounding model --------------------------------------------------------------
    def forward_tolerance(self, g: Geometry, x: np.ndarray, e_c: np.ndarray, u: float) -> np.ndarray:
        """γ_{n+1}·Σ|x|/D: n rounded additions and one scaling (plus a 2^-60 guard)."""
        xc = np.abs(g.to_canonical(x).astype(np.float64))
        n = g.valid.sum(axis=1)
        # Σ|x| of four cells of 1e308 overflows float64 (an inf tolerance would pass anything):
        # there sum |x|·2^-s (2^s > the largest window, so the mass, raised to a bound by
        # window_mass, stays finite; exact scalings) and scale back once multiplied by γ
        shift = int(max(int(n.max()) if n.size else 1, 1)).bit_length()
        if xc.size and float(xc.max()) * 2.0**shift >= 2.0**1023:
            scaled = gamma(n + 1, u) * (window_mass(g, xc * 2.0**-shift) / g.divisor) * 2.0**shift
        else:
            scaled = gamma(n + 1, u) * (window_mass(g, xc) / g.divisor)
        return np.asarray(scaled + 2.0**-60 * np.abs(e_c))

    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        return stamp_rows(g, self.stamp(g, None, "first"), dtype)

    # -- lowering --------------------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The template's sum, slot by slot in slot order, times its exact derivative 1/D rounded to the dtype.

        A window whose sum could overflow (n·max|x| >= max/2, where the mean itself may
        well be finite: four cells of 1e308) is summed scaled by 2^-s (2^s > 2n) and
        scaled back after the 1/D: power-of-two scalings round nothing (but a cell far
        below the window's largest may lose bits to underflow, at most n·2^(s+emin-p+1)
        in all, far below γ_{n+1}·Σ|x|/D there), so the rounding bound is the unscaled one.
        """
        xc = g.to_canonical(x)
        scale = _overflow_scales(g, xc)
        acc = np.zeros((g.batch, g.n_out), dtype=x.dtype)
        with np.errstate(invalid="ignore"):  # inf + -inf is NaN: IEEE's sum, the convention at non-finite x
            return self._sum_lines(g, x, xc, scale, acc)

    def _sum_lines(self, g: Geometry, x: np.ndarray, xc: np.ndarray, scale: tuple[np.ndarray, np.ndarray] | None,
                   acc: np.ndarray) -> np.ndarray:
        for line in lines(g):
            values = xc[:, line.cells]
            if scale is not None:
                values = values * scale[0][:, line.w]
            if line.window is None:
                acc[:, line.w] = np.add(acc[:, line.w], values)
            else:
                acc[:, line.window] = np.add(acc[:, line.window], np.add.reduce(values, axis=1))
        y = acc * _weights(g, x.dtype)
        return g.from_canonical(y if scale is None else y * scale[1])

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        dyc = g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in), dtype=x.dtype)
        up = dyc * _weights(g, x.dtype)
        for line in lines(g):
            dx[:, line.cells] += up[:, line.w]
        return g.from_canonical(dx, g.in_spatial)

    def overflows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray | None:
        """Windows whose sum may overflow in ``dtype`` in some order: ``Σ|x|·(1 + γ_{n+1})`` reaches
        the overflow threshold (max + half an ulp; below it no partial sum rounds beyond it)."""
        info = finfo(dtype)
        threshold = float(info.max) * (1 + float(info.eps) / 4)
        xc = np.abs(g.to_canonical(np.asarray(x, dtype=np.float64)))
        if not xc.size or float(xc.max()) * g.cells.shape[1] < threshold / 2:
            return None  # no window comes near (the common case: one max over x)
        n = g.valid.sum(axis=1)
        mass = window_mass(g, xc * 0.5) * 2  # halved: a float64 sum of cells near 1.8e308 stays finite
        risky = mass * (1 + gamma(n + 1, float(info.eps) / 2)) >= threshold
        return np.asarray(risky) if risky.any() else None

    # -- non-finite inputs -----------------------------------------------------------
    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """IEEE 754's sum over D at a window holding NaN or ±inf; the rows 1/D at every x (the
        proxy: x with its non-finite cells 0)."""
        special, value = sum_value(counts(g, x))
        finite, exact = proxy(g, x)
        return Nonfinite(policy, finite, exact, special, value)

    def nonfinite_note(self, policy: str) -> str:
        return ("average pooling at NaN and ±inf: a window's value is IEEE 754's sum over D (NaN with a NaN or "
                "with both infinities, else the infinity), its derivative 1/D at every x (J^T dy is finite)")

    # -- inputs and diagnosis ----------------------------------------------------------
    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """near_ties (accumulation of overlapping windows), extreme (sums near the overflow
        threshold), nonfinite (NaN and ±inf propagate)."""
        return ("near_ties", "extreme", "nonfinite")

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """Magnitudes up to ``max/(2n)``, n the largest window's cell count, one sign per slice:
        every window's ``Σ|x|`` stays within half the overflow threshold (no correct sum, in any
        order, overflows), while a sum in a narrower accumulator, or one scaled up before the
        divide, does."""
        n = max(int(g.valid.sum(axis=1).max(initial=1)), 1)
        return float(finfo(dtype).max) / (2 * n), "slices"

    def exact_entry(self, g: Geometry, w: int) -> Fraction:
        return Fraction(1, int(g.divisor[w]))

    def fd_rounding(self) -> bool:
        return True

    # -- metadata ----------------------------------------------------------------------
    def class_note(self, c: WindowClass) -> str:
        return f", divisor {c.divisor}"

    def infer_divisors(self, divisors: tuple[Any, ...]) -> tuple[Any, ...]:
        return divisors


def _overflow_scales(g: Geometry, xc: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Per window (B, W), 2^-s and 2^s in the dtype for windows whose sum could overflow
    (n·max|x| >= max/2; s the least with 2^s > 2n), 1 elsewhere; None where no window could."""
    big = float(finfo(xc.dtype).max) / 2
    n = np.maximum(g.valid.sum(axis=1), 1)
    ax = np.abs(xc.astype(np.float64))
    ax[~np.isfinite(ax)] = 0.0  # a NaN or an infinity is the sum's anyway: no scale for it
    if not xc.size or float(ax.max()) < big / int(n.max()):
        return None
    top = np.zeros((g.batch, g.n_out))
    for line in lines(g):
        if line.window is None:  # a slot line: distinct windows
            top[:, line.w] = np.maximum(top[:, line.w], ax[:, line.cells])
        else:  # a window line: one window, all its slots
            top[:, line.window] = np.maximum(top[:, line.window], ax[:, line.cells].max(axis=1, initial=0.0))
    s = np.where(top >= big / n, np.array([int(2 * v).bit_length() for v in n.tolist()]), 0)
    return (2.0 ** -s).astype(xc.dtype), (2.0 ** s).astype(xc.dtype)


def _weights(g: Geometry, dtype: np.dtype[Any]) -> np.ndarray:
    """(windows,) each window's exact derivative 1/D (its class template's) rounded to ``dtype``."""
    weight, q = window_weights(g)
    return np.array([float(Fraction(int(w), q)) for w in np.unique(weight)], dtype=dtype)[
        np.searchsorted(np.unique(weight), weight)]


AVG = Avg()
