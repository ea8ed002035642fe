"""Regression losses on ``d = z - y``: mse, mae, smooth_l1 and huber.

One module because they share their label structure (a label of pred's shape), their
domain (every real number), their default inputs and smooth_l1/huber's ``delta``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import SpecError
from symjac._exact import ExactArray
from symjac.loss import _fast, _numbers
from symjac.loss._domain import Convention, square_overflow
from symjac.loss._fields import number
from symjac.loss._kind import ElementwiseKind, Put, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

HALF = sympy.Rational(1, 2)


class _Regression(ElementwiseKind):
    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # both branches of huber/smooth_l1 at δ = 1 (|d| = 0.25, 0.25, 2.5, 0.75, 0.125, 2); no kink
        return (np.array([[0.5, -1.25, 2.0], [0.75, 0.0, -0.5]]),
                np.array([[0.25, -1.0, -0.5], [1.5, -0.125, 1.5]]))

    def expressions(self, *key: Any) -> LossTemplate:
        z, y = real("z"), real("y")
        params, loss = self.loss_of(z - y)
        return element_template(self.name, (z,), (y,), params, loss)

    def loss_of(self, d: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...], sympy.Expr]:
        """(option symbols, ℓ) in terms of ``d = z - y``."""
        raise NotImplementedError

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # |d| = |z - y| from 1.5G to 2G + 1/2: d² overflows the dtype and d, 2d and every
        # derivative do not, so a form through d² (|d| as sqrt(d²), sign(d) as d/sqrt(d²), a
        # branch chosen by d² < δ²) gives inf or 0, and mse expanded as z² - 2zy + y² gives
        # inf - inf = NaN where z and y share their sign ((0, 2) and (1, 0))
        g = square_overflow(dt)
        return (np.array([[g, -g, 2 * g], [-2 * g, 0.5, g / 2]]),
                np.array([[-g, g, g / 2], [-g / 2, -2 * g, -g]]))

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=self.nonfinite_evidence)

    nonfinite_evidence = ""


@register
class Mse(_Regression):
    """``ℓ = d²``."""

    name = "mse"
    synonyms = ("l2", "mean_squared_error")
    nonfinite_evidence = ("PyTorch mse_loss, JAX optax.squared_error and TensorFlow tf.square(p - y) (measured in "
                          "float64): a NaN prediction gives loss and derivative NaN at its element, every other "
                          "element exact; ±inf gives loss +inf and derivative ±inf, the limits")

    def loss_of(self, d: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...], sympy.Expr]:
        return (), d**2

    def fast_derivative(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                        column: np.ndarray | None = None) -> _fast.FastDerivative | None:
        # h = 2(z - y), SymPy's -2y + 2z: its condition sum is 2|z| + 2|y| exactly, and its
        # running error R = R(-2y) + R(2z) + (|2y| + |2z|) = 2|y| + 2|z| (the doublings are exact)
        assert y is not None
        d = _fast.sub(_fast.Ball.exact(z), _fast.Ball.exact(y))
        sums = 2 * np.abs(z) + 2 * np.abs(y)
        both, hi = _fast.lower(sums), _fast.upper(sums)
        return _fast.FastDerivative(_fast.Ball(2 * d.v, 2 * d.e), both, both, hi, hi)

    def fast_value(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                   column: np.ndarray | None = None) -> _fast.FastValue | None:
        # ℓ = d², d = z - y (SymPy's (-y + z)**2): its condition sum over (z, y) is
        # 2|d|·(|z| + |y|) exactly, its running error R = d² + 2|d|·(|y| + |z|) (the square
        # rounds once; R(-y + z) = |y| + |z|, times |2d|). Both increase with |d| >= 0: at
        # d's lower and upper |.| they bound below and above (lower/upper cover the float64
        # roundings of these few products, |z| + |y| included).
        assert y is not None
        d = _fast.sub(_fast.Ball.exact(z), _fast.Ball.exact(y))
        with np.errstate(all="ignore"):
            size = np.abs(z) + np.abs(y)
            lo, hi = d.lower_abs(), d.upper_abs()
            cond_lo, cond_hi = _fast.lower(2 * lo * size), _fast.upper(2 * hi * size)
            run_lo, run_hi = _fast.lower(lo * lo + 2 * lo * size), _fast.upper(hi * hi + 2 * hi * size)
        return _fast.FastValue(_fast.mul(d, d), cond_lo, run_lo, cond_hi, run_hi)


@register
class Mae(_Regression):
    """``ℓ = |d|``: a kink at ``d = 0``, Clarke set ``[-1, 1]``."""

    name = "mae"
    synonyms = ("l1", "mean_absolute_error")
    nonfinite_evidence = ("NaN: loss NaN in every framework; the derivative is 0 in PyTorch (l1_loss: sign(NaN) = "
                          "0), -1 in JAX (the gradient of jnp.abs takes its x < 0 branch) and NaN in TensorFlow "
                          "(tf.abs): any value between the limits -1 and 1 is accepted. ±inf: loss +inf, "
                          "derivative ±1 (the limits) in all three")

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("between_limits",), evidence=self.nonfinite_evidence)

    def loss_of(self, d: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...], sympy.Expr]:
        return (), sympy.Abs(d)


#: |z - y| of the default inputs at δ = 1 (_Regression.default_inputs): none is 1, and 1 <= δ/m < 2 for m the
#: power of two at or below δ, so scaled by m none is δ and both branches show (0.125m, 0.25m, 0.75m < δ < 2m, 2.5m).
BASE_GAPS = (Fraction(1, 8), Fraction(1, 4), Fraction(3, 4), Fraction(2), Fraction(5, 2))
#: The powers of two 2^e (e in this range) that keep the scaled inputs exact in float16: their values are
#: multiples of 1/8 of at most 2 (2 * 2^14 = 2^15 < 65504, the largest; 2^-3 * 2^-21 = 2^-24, the least subnormal).
SCALES = range(-21, 15)


class _Delta(_Regression):
    """A loss with ``delta`` > 0 (default 1): quadratic inside ``|d| < δ``, linear outside."""

    options = ("delta",)
    delta_hint = ""
    nonfinite_evidence = ("NaN: loss and derivative NaN at its element (PyTorch smooth_l1_loss and huber_loss, "
                          "optax.huber_loss, Keras Huber); ±inf: loss +inf, derivative the limit ±1 (smooth_l1) "
                          "or ±δ (huber) in PyTorch and optax, NaN in Keras Huber")

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        """The regression defaults times a power of two ``m`` that keeps every ``|d|`` off the kink ``|d| = δ``:
        ``m = 2^floor(log2 δ)`` (both branches; at δ = 1 the inputs are unchanged), or, for a δ beyond
        :data:`SCALES`, the nearest power of two in it that puts no ``|d|`` on δ (one branch only)."""
        assert loss.delta is not None
        pred, label = super().default_inputs(loss)
        delta = Fraction(loss.delta)
        e = delta.numerator.bit_length() - delta.denominator.bit_length()  # floor(log2 δ) or one above
        e -= Fraction(2) ** e > delta
        scale = min((x for x in SCALES if delta / Fraction(2) ** x not in BASE_GAPS), key=lambda x: (abs(x - e), x))
        return pred * 2.0**scale, None if label is None else label * 2.0**scale

    def validate(self, loss: Loss, put: Put) -> None:
        delta = number("delta", 1 if loss.delta is None else loss.delta, "a number > 0")
        if delta <= 0:
            raise SpecError(f"delta={loss.delta!r} is not valid: give a number > 0{self.delta_hint}")
        put("delta", delta)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.delta is not None
        return [[loss.delta]]


@register
class SmoothL1(_Delta):
    """PyTorch ``smooth_l1_loss`` with ``beta = delta`` (it divides by beta)."""

    name = "smooth_l1"
    synonyms = ("smoothl1",)
    delta_hint = " (smooth_l1 with beta = 0 is kind='mae')"
    samples = ({}, {"delta": 0.5})

    def loss_of(self, d: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...], sympy.Expr]:
        delta = sympy.Symbol("delta", positive=True)
        return (delta,), sympy.Piecewise((HALF * d**2 / delta, sympy.Abs(d) < delta),
                                         (sympy.Abs(d) - HALF * delta, True))

    def amplitude(self, loss: Loss) -> Any:
        # d²/(2δ): an underflow in d² is amplified by 1/δ
        assert loss.delta is not None
        return 1 / _numbers.number(loss.delta)


@register
class Huber(_Delta):
    """PyTorch ``huber_loss``: ``huber = δ·smooth_l1``."""

    name = "huber"
    samples = ({}, {"delta": 1.5})

    def loss_of(self, d: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...], sympy.Expr]:
        delta = sympy.Symbol("delta", positive=True)
        return (delta,), sympy.Piecewise((HALF * d**2, sympy.Abs(d) < delta),
                                         (delta * (sympy.Abs(d) - HALF * delta), True))
