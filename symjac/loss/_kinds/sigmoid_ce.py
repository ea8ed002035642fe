"""sigmoid_ce: binary cross-entropy from logits (PyTorch ``binary_cross_entropy_with_logits``)."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._exact import ExactArray
from symjac.loss import _fast
from symjac.loss._domain import per_class, probability_labels
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

    def fast_derivative(self, loss: Loss, z: np.ndarray, y: np.ndarray | None) -> _fast.FastDerivative | None:
        # w = pos_weight = 1 only: h = σ(z) - y, σ = 1/(1 + e^-z) (z >= 0) or e^z/(1 + e^z).
        # Its condition sum over (z, y, w, pos_weight) holds |∂h/∂y|·|y| = |y| (∂h/∂y =
        # -(p(1 - σ) + σ) = -1) and |∂h/∂w|·|w| = |h| (h is linear in w); the rest is >= 0.
        if loss.weight is not None or loss.pos_weight is not None:
            return None
        assert y is not None
        e = _fast.exp(_fast.Ball.exact(-np.abs(z)))
        one = _fast.Ball.exact(np.ones_like(z))
        sigma = _fast.div(_fast.where(z >= 0, one, e), _fast.add(one, e))
        h = _fast.sub(sigma, _fast.Ball.exact(y))
        return _fast.FastDerivative(h, _fast.lower(np.abs(y) + h.lower_abs()), np.zeros_like(z))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        c_last = int(z.shape[-1])
        w = per_class("weight", loss.weight, c_last, Fraction(1))
        pw = per_class("pos_weight", loss.pos_weight, c_last, Fraction(1))
        return [[wc, pc] for wc, pc in zip(w, pw)]

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return (np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]]),
                np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.75]]))
