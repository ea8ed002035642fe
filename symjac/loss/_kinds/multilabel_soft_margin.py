"""multilabel_soft_margin: PyTorch ``multilabel_soft_margin_loss``, a row's sigmoid cross-entropies averaged over its C classes."""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._exact import ExactArray
from symjac.loss._domain import Convention, overflow_logit, per_class, probability_labels
from symjac.loss._kind import LossKind, Template, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@functools.lru_cache(maxsize=64)
def row_template(classes: int) -> LossTemplate:
    """``ℓ = (1/C)·Σ_c w_c·(y_c·log(1 + e^{-z_c}) + (1 - y_c)·(z_c + log(1 + e^{-z_c})))``, one symbol per
    class (PyTorch: ``-(y·logσ(z) + (1 - y)·logσ(-z))·w``, summed over the row and divided by C)."""
    z = tuple(real(f"z{c}") for c in range(classes))
    y = tuple(real(f"y{c}") for c in range(classes))
    w = tuple(real(f"w{c}") for c in range(classes))
    softplus = [sympy.log(1 + sympy.exp(-zc)) for zc in z]
    loss = sympy.Add(*(w[c] * (y[c] * softplus[c] + (1 - y[c]) * (z[c] + softplus[c]))
                       for c in range(classes))) / classes
    # the exact values from log1p(e^∓z) (nothing cancels at any |z|) and each derivative over one
    # denominator, as sigmoid_ce's
    stable = sympy.Add(*(w[c] * (y[c] * log1p(sympy.exp(-z[c])) + (1 - y[c]) * log1p(sympy.exp(z[c])))
                         for c in range(classes))) / classes
    return element_template("multilabel_soft_margin", z, y, w, loss, stable=stable,
                            stable_derivatives=lambda hs: tuple(sympy.together(h) for h in hs))


@register
class MultilabelSoftMargin(LossKind):
    """One element per row of C classes, labels in [0, 1], ``weight`` per class (see :func:`row_template`)."""

    name = "multilabel_soft_margin"
    options = ("weight",)
    synonyms = ("multilabel_soft_margin_loss", "multilabelsoftmargin")
    class_axis = True
    separable_rows = True
    explain_classes = 2
    samples = ({}, {"weight": (0.5, 2, 1)})

    def template(self, loss: Loss, classes: int) -> Template:
        return row_template(classes)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        return [per_class("weight", loss.weight, classes, Fraction(1))]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        probability_labels(self.name, t)

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # sigmoid_ce's: logits of ±M, ±2M, ±M/2 (e^M overflows the dtype), where log σ(z) as written is
        # log 0 = -inf or e^-z/(1 + e^-z) is inf/inf = NaN, and log1p(e^-|z|) + max(-z, 0) stays finite
        m, c = overflow_logit(dt), self.default_classes(loss)
        return (np.array([np.resize([m, -m, 2 * m], c), np.resize([-2 * m, m / 2, -m / 2], c)]),
                np.array([np.resize([0.0, 1.0, 0.5], c), np.resize([0.25, 1.0, 0.75], c)]))

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "NaN: loss NaN for its row, derivative NaN at its entry (the row's others exact: the loss is a sum "
            "over the row) in PyTorch multilabel_soft_margin_loss (logsigmoid), float64; ±inf: the limits at the "
            "entry, w(1 - y)/C at +inf and -w·y/C at -inf; the loss its limit or NaN"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        c = self.default_classes(loss)
        return (np.array([np.resize([0.5, -1.0, 2.0], c), np.resize([-0.25, 1.5, -2.0], c)]),
                np.array([np.resize([1.0, 0.0, 1.0], c), np.resize([0.0, 1.0, 0.25], c)]))
