"""softmax_ce: cross-entropy over the last axis from logits (PyTorch ``cross_entropy``, both target forms).

One loss element per row; the label is a row of probabilities of pred's shape, or
(``labels="indices"``) one integer class per row. Evaluated class-generically
(:class:`symjac.loss._softmax.SoftmaxTemplate`); the explicit per-class SymPy template
here is for display and is what the class-generic forms are tested against.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import sympy

from symjac._errors import SpecError, did_you_mean
from symjac._exact import ExactArray
from symjac.loss._domain import per_class, probability_labels
from symjac.loss._fields import is_int, number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._softmax import SoftmaxTemplate
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

LABEL_FORMS = ("probabilities", "indices")


@functools.lru_cache(maxsize=64)
def explicit_template(classes: int) -> LossTemplate:
    """``ℓ = -Σ_c a_c·(z_c - log Σ_k e^{z_k})``, ``a_c = ((1 - ε)·t_c + ε/C)·w_c``, one
    symbol per class (O(C²) SymPy work: for display and tests)."""
    z = tuple(real(f"z{c}") for c in range(classes))
    t = tuple(real(f"t{c}") for c in range(classes))
    w = tuple(real(f"w{c}") for c in range(classes))
    eps = real("epsilon")
    lse = sympy.log(sympy.Add(*(sympy.exp(zc) for zc in z)))
    a = [((1 - eps) * t[c] + eps / classes) * w[c] for c in range(classes)]
    loss = -sympy.Add(*(a[c] * (z[c] - lse) for c in range(classes)))
    return element_template("softmax_ce", z, t, w + (eps,), loss)


@functools.lru_cache(maxsize=64)
def _generic(classes: int) -> SoftmaxTemplate:
    return SoftmaxTemplate(classes, explicit_template)


@register
class SoftmaxCe(LossKind):
    """``ℓ = -Σ_c t̃_c·w_c·log softmax(z)_c``, ``t̃ = (1-ε)·t + ε/C`` (see :class:`symjac.Loss`)."""

    name = "softmax_ce"
    options = ("weight", "label_smoothing", "ignore_index", "labels")
    synonyms = ("cross_entropy", "crossentropy", "ce", "categorical_crossentropy", "sparse_categorical_crossentropy",
                "softmax_cross_entropy", "nll")
    class_axis = True
    explain_classes = 2
    samples = ({}, {"labels": "indices"}, {"weight": (1, 0.5, 2), "label_smoothing": 0.25},
               {"labels": "indices", "weight": (1, 0.5, 2), "label_smoothing": 0.125, "ignore_index": 0})

    def validate(self, loss: Loss, put: Put) -> None:
        eps = number("label_smoothing", 0 if loss.label_smoothing is None else loss.label_smoothing,
                     "a number in [0, 1]")
        if not 0 <= eps <= 1:
            raise SpecError(f"label_smoothing={loss.label_smoothing!r} is not valid: give a number in [0, 1]")
        put("label_smoothing", eps)
        labels = "probabilities" if loss.labels is None else loss.labels
        if labels not in LABEL_FORMS:
            raise SpecError(
                f"labels={loss.labels!r} is not valid{did_you_mean(labels, LABEL_FORMS)}: give one of "
                f"{', '.join(map(repr, LABEL_FORMS))}"
            )
        put("labels", labels)
        if loss.ignore_index is not None:
            if not is_int(loss.ignore_index):
                raise SpecError(f"ignore_index={loss.ignore_index!r} is not valid: give an integer class index")
            if labels != "indices":
                raise SpecError(
                    f"ignore_index={loss.ignore_index!r} needs labels='indices' (class indices); "
                    "probability labels have no index to ignore"
                )
            put("ignore_index", int(loss.ignore_index))

    def labels_are_indices(self, loss: Loss) -> bool:
        return loss.labels == LABEL_FORMS[1]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        if not self.labels_are_indices(loss):  # one-hot rows from indices are in [0, 1] by construction
            probability_labels(self.name, t)

    def template(self, loss: Loss, classes: int) -> Template:
        if not is_int(classes) or classes < 1:
            raise SpecError(f"classes={classes!r} is not valid: give the number of classes, an integer >= 1")
        return _generic(int(classes))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        return [per_class("weight", loss.weight, classes, Fraction(1)) + [loss.label_smoothing or Fraction(0)]]

    def mean_weights(self, loss: Loss, classes: int) -> list[Fraction] | None:
        # PyTorch with class indices: the mean divides by Σ w[label] over the counted rows
        return per_class("weight", loss.weight, classes, Fraction(1)) if self.labels_are_indices(loss) else None

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        if self.labels_are_indices(loss):
            return pred, np.array([2, 0])
        return pred, np.array([[0.0, 0.0, 1.0], [0.75, 0.25, 0.0]])
