"""sigmoid_ce: binary cross-entropy from logits (PyTorch ``binary_cross_entropy_with_logits``)."""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._exact import ExactArray
from symjac.loss import _fast
from symjac.loss._domain import Convention, overflow_logit, per_class, probability_labels
from symjac.loss._kind import ElementwiseKind, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@register
class SigmoidCe(ElementwiseKind):
    """``ℓ = -w[p·y·log σ(z) + (1-y)·log(1-σ(z))]``, ``p`` = pos_weight, ``w`` = weight,
    per class along the last axis; labels in [0, 1]; every real logit."""

    name = "sigmoid_ce"
    options = ("pos_weight", "weight")
    synonyms = ("binary_cross_entropy_with_logits", "bce_with_logits", "sigmoid_cross_entropy")
    samples = ({}, {"weight": (0.5, 2, 1), "pos_weight": 3})

    def expressions(self, *key: Any) -> LossTemplate:
        z, y = real("z"), real("y")
        w, p = real("w"), real("pos_weight")
        # -log σ(z) = log(1 + e^-z) and -log(1 - σ(z)) = z + log(1 + e^-z): the same
        # function, written without 1 - σ (the form implementations evaluate, so the
        # running-error bounds model it).
        softplus = sympy.log(1 + sympy.exp(-z))
        loss = w * (p * y * softplus + (1 - y) * (z + softplus))
        # For the exact values: log1p(e^-z) and log1p(e^z), where nothing cancels at
        # any |z| and log1p keeps e^-|z| when tiny, so mpmath needs no extra digits.
        stable = w * (p * y * log1p(sympy.exp(-z)) + (1 - y) * log1p(sympy.exp(z)))
        # SymPy's derivative over one denominator, w(-p·y + (1 - y)e^z)/(e^z + 1): the
        # 1 - e^-z/(1 + e^-z) of the raw form would cancel ~|z|·log10(e) digits. E0 = e^z
        # is computed once per element and read by the loss and the derivative alike.
        return element_template(self.name, (z,), (y,), (w, p), loss, stable=stable,
                                stable_derivatives=lambda hs: tuple(sympy.together(h) for h in hs),
                                exponentials=(sympy.Symbol("E0", positive=True),))

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        probability_labels(self.name, t)

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # logits of ±M, ±2M, ±M/2 (e^M overflows the dtype): e^-z at z = -M is inf, so the
        # raw -y·e^-z/(1 + e^-z) is inf/inf = NaN; σ rounds to 0 or 1, so log σ(-M) (y = 1)
        # and log(1 - σ(M)) (y = 0) are -inf and (1 - y)·log(1 - σ(M/2)) at y = 1 is 0·(-inf)
        # = NaN, where log1p(e^-|z|) + max(-z, 0) stays finite
        m = overflow_logit(dt)
        return (np.array([[m, -m, 2 * m], [-2 * m, m / 2, -m / 2]]),
                np.array([[0.0, 1.0, 0.5], [0.25, 1.0, 0.75]]))

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "NaN: loss and derivative NaN at its element (PyTorch binary_cross_entropy_with_logits, "
            "optax.sigmoid_binary_cross_entropy, tf.nn.sigmoid_cross_entropy_with_logits, measured in float64); "
            "±inf: the derivative's limits, w(1 - y) at +inf and -w·p·y at -inf, in all three; the loss its limit "
            "(+inf, or 0 at y = 1, z = +inf) or NaN (PyTorch and TensorFlow where y > 0 at +inf or y < 1 at -inf)"))

    def fast_derivative(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                        column: np.ndarray | None = None) -> _fast.FastDerivative | None:
        # h = w·((1 - y)σ - p·y·σ'), σ = σ(z), σ' = 1 - σ, both from e = e^-|z| without a
        # subtraction (σ = 1/(1 + e) or e/(1 + e)); w = weight, p = pos_weight (>= 0, per
        # column of pred's last axis), y in [0, 1]. The bound's terms from the SymPy forms
        # of h (tests/test_loss_fast.py checks them against the exact route's), written in
        # σ, σ' (e^-z/(1 + e^-z) = σ'): the condition sum over (z, y, w, p) is
        #   p·w·y·σ' + |h| + w·y·(p·σ' + σ) + |z|·w·σσ'·(p·y + 1 - y),
        # the running error
        #   w·[A·p·y + (1 + y)σ + (A + 1 + 4σ')(1 - y) + 2σ(1 - y) + 6σ'·p·y] + |h|,
        # A = σ'(1 + σ + 3σ') (SymPy's (1/(1 + e^-z) + (1 + 3e^-z)/(1 + e^-z)²)·e^-z).
        # Every term is >= 0: the lower bounds keep some, the upper ones take all.
        assert y is not None
        with np.errstate(all="ignore"):  # inf and NaN leave an entry undecided
            return _fast_form(loss, z, y, column)

    def fast_value(self, loss: Loss, z: np.ndarray, y: np.ndarray | None,
                   column: np.ndarray | None = None) -> _fast.FastValue | None:
        # ℓ = w·(p·y·sp(-z) + (1 - y)·sp(z)), sp(±z) = max(±z, 0) + log1p(e^-|z|) (no
        # cancellation: every term >= 0). The bound's terms from SymPy's form
        # w·(p·y·sp + (1 - y)·(z + sp)), sp = log(1 + e^-z) = sp(-z), written in σ = σ(z),
        # σ' = 1 - σ ((1 + 3e^-z)/(1 + e^-z) = σ + 3σ'):
        #   cond = |h|·|z| + |w·(p·sp(-z) - sp(z))|·|y| + |ℓ| + w·p·y·sp(-z)
        #   (∂ℓ/∂z = h, ∂ℓ/∂y, ∂ℓ/∂w·w = ℓ, ∂ℓ/∂p·p), and the running error
        #   R = w·[(2sp(-z) + σ + 3σ')·p·y + (1 + y)·sp(z) + (3sp(-z) + |z| + σ + 3σ')(1 - y)
        #        + 3sp(-z)·p·y + 2(1 - y)·sp(z)] + |ℓ|.
        # Every factor is >= 0 (w, p >= 0, y in [0, 1]) and each sum increases with them:
        # at the balls' lower |.| it bounds below, at their upper |.| above (lower/upper cover
        # the float64 roundings of these products).
        assert y is not None
        with np.errstate(all="ignore"):
            w, p, sigma, other, yb, neg = _pieces(loss, z, y, column)
            soft = _fast.log1p(_fast.exp(_fast.Ball.exact(-np.abs(z))))
            sp_neg = _fast.add(_fast.Ball.exact(np.maximum(-z, 0.0)), soft)
            sp_pos = _fast.add(_fast.Ball.exact(np.maximum(z, 0.0)), soft)
            inner = _fast.add(_fast.mul(_fast.mul(p, yb), sp_neg), _fast.mul(neg, sp_pos))
            ell = _fast.mul(w, inner)
            h = _fast.mul(w, _fast.sub(_fast.mul(neg, sigma), _fast.mul(_fast.mul(p, yb), other)))
            dy = _fast.mul(w, _fast.sub(_fast.mul(p, sp_neg), sp_pos))
            az, ay = np.abs(z), np.abs(y)
            sides = []
            for at in (_fast.Ball.lower_abs, _fast.Ball.upper_abs):
                wa, pa, sn, spo, sg, ot, na = (at(b) for b in (w, p, sp_neg, sp_pos, sigma, other, neg))
                cond = at(h) * az + at(dy) * ay + at(ell) + wa * pa * ay * sn
                run = wa * ((2 * sn + sg + 3 * ot) * pa * ay + (1 + ay) * spo + (3 * sn + az + sg + 3 * ot) * na
                            + 3 * sn * pa * ay + 2 * na * spo) + at(ell)
                sides.append((cond, run))
            (cond_lo, run_lo), (cond_hi, run_hi) = sides
            return _fast.FastValue(ell, _fast.lower(cond_lo), _fast.lower(run_lo), _fast.upper(cond_hi),
                                   _fast.upper(run_hi))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        c_last = int(z.shape[-1])
        w = per_class("weight", loss.weight, c_last, Fraction(1))
        pw = per_class("pos_weight", loss.pos_weight, c_last, Fraction(1))
        return [[wc, pc] for wc, pc in zip(w, pw)]

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return (np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]]),
                np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.75]]))


@functools.lru_cache(maxsize=8)
def _options(loss: Loss) -> tuple[_fast.Ball, _fast.Ball]:
    """weight and pos_weight as balls (exact rationals), one per given value (the
    verifier has checked their lengths against pred's last axis)."""
    balls = []
    for values in (loss.weight or (Fraction(1),), loss.pos_weight or (Fraction(1),)):
        got = [_fast.Ball.of(q) for q in values]
        balls.append(_fast.Ball(np.array([float(b.v) for b in got]), np.array([float(b.e) for b in got])))
    return balls[0], balls[1]


def _per_column(loss: Loss, shape: tuple[int, ...], column: np.ndarray | None) -> tuple[_fast.Ball, _fast.Ball]:
    """weight and pos_weight at each entry (``column``: its index along pred's last axis)."""
    if loss.weight is None and loss.pos_weight is None:
        one = _fast.Ball.exact(np.ones(shape))
        return one, one
    assert column is not None, "a per-class option needs each entry's column"
    out = []
    for ball in _options(loss):
        at = column if ball.v.size > 1 else np.zeros(column.shape, dtype=np.intp)
        out.append(_fast.Ball(ball.v[at].reshape(shape), ball.e[at].reshape(shape)))
    return out[0], out[1]


def _pieces(loss: Loss, z: np.ndarray, y: np.ndarray,
            column: np.ndarray | None) -> tuple[_fast.Ball, _fast.Ball, _fast.Ball, _fast.Ball, _fast.Ball, _fast.Ball]:
    """(w, p, σ, σ', y, 1 - y) enclosed: σ = 1/(1 + e) or e/(1 + e), e = e^-|z| (no subtraction)."""
    w, p = _per_column(loss, z.shape, column)
    e = _fast.exp(_fast.Ball.exact(-np.abs(z)))
    one = _fast.Ball.exact(np.ones_like(z))
    den = _fast.add(one, e)
    sigma = _fast.div(_fast.where(z >= 0, one, e), den)
    other = _fast.div(_fast.where(z >= 0, e, one), den)
    yb = _fast.Ball.exact(y)
    return w, p, sigma, other, yb, _fast.sub(one, yb)


def _fast_form(loss: Loss, z: np.ndarray, y: np.ndarray, column: np.ndarray | None) -> _fast.FastDerivative:
    """:meth:`SigmoidCe.fast_derivative`'s enclosures (derived there)."""
    w, p, sigma, other, yb, neg = _pieces(loss, z, y, column)
    h = _fast.mul(w, _fast.sub(_fast.mul(neg, sigma), _fast.mul(_fast.mul(p, yb), other)))
    sl, sh, ol, oh = sigma.lower_abs(), sigma.upper_abs(), other.lower_abs(), other.upper_abs()
    wl, wh, pl, ph = w.lower_abs(), w.upper_abs(), p.lower_abs(), p.upper_abs()
    nh, ay = neg.upper_abs(), np.abs(y)
    cond_lo = _fast.lower(wl * ay * (pl * ol + sl) + h.lower_abs())
    a_hi = oh * (1 + sh + 3 * oh)
    cond_hi = _fast.upper(ph * wh * ay * oh + h.upper_abs() + wh * ay * (ph * oh + sh)
                          + np.abs(z) * wh * sh * oh * (ph * ay + nh))
    run_hi = _fast.upper(wh * (a_hi * ph * ay + (1 + ay) * sh + (a_hi + 1 + 4 * oh) * nh + 2 * sh * nh
                               + 6 * oh * ph * ay) + h.upper_abs())
    return _fast.FastDerivative(h, cond_lo, np.zeros_like(z), cond_hi, run_hi)
