"""nll: the negative log-likelihood of log-probabilities (PyTorch ``nll_loss``, ONNX
``NegativeLogLikelihoodLoss``).

One loss element per row: pred holds log-probabilities along its last axis (any real
numbers: neither PyTorch nor ONNX checks them), the label one integer class per row,
``ℓ = -w_y·z_y``. With ``ignore_index`` the rows at that class contribute nothing, and
``"mean"`` divides by ``Σ w_{y_i}`` over the counted rows (PyTorch's and ONNX's
weighted mean), not by the number of rows.

The element is linear in the prediction, so its template is the explicit per-class SymPy
form ``-Σ_c w_c·t_c·z_c`` over the one-hot row ``t`` (O(C) symbols, built once per C).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, overflow_logit, per_class
from symjac.loss._fields import is_int
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: The largest number of classes the explicit template is built for: its SymPy work (the
#: derivatives' condition sums and their lowering) grows as C², once per process and C
#: (measured on the shared 2-core VM: verify_loss of 4 rows 7.6 s at C = 64, 46 s at C = 256,
#: the template's build nearly all of it). A class-generic form, as softmax_ce's
#: (symjac.loss._softmax), would lift this; a wider row is refused with this number.
MAX_CLASSES = 256


@functools.lru_cache(maxsize=32)
def _template(classes: int) -> LossTemplate:
    """``ℓ = -Σ_c w_c·t_c·z_c``, one symbol per class (t: the one-hot label row)."""
    z = tuple(real(f"z{c}") for c in range(classes))
    t = tuple(real(f"t{c}") for c in range(classes))
    w = tuple(real(f"w{c}") for c in range(classes))
    loss = -sympy.Add(*(w[c] * t[c] * z[c] for c in range(classes)))
    return element_template("nll", z, t, w, loss)


@register
class Nll(LossKind):
    """``ℓ = -w_y·z_y`` per row, ``z`` log-probabilities, ``y`` the class index (see :class:`symjac.Loss`)."""

    name = "nll"
    options = ("weight", "ignore_index")
    synonyms = ("nll_loss", "negative_log_likelihood", "negativeloglikelihoodloss", "neg_log_likelihood")
    class_axis = True
    explain_classes = 2
    samples = ({}, {"weight": (1, 0.5, 2)}, {"weight": (0.75, 2, 0.25), "ignore_index": 1})

    def validate(self, loss: Loss, put: Put) -> None:
        if loss.ignore_index is not None:
            if not is_int(loss.ignore_index):
                raise SpecError(f"ignore_index={loss.ignore_index!r} is not valid: give an integer class index")
            put("ignore_index", int(loss.ignore_index))

    def labels_are_indices(self, loss: Loss) -> bool:
        return True

    def template(self, loss: Loss, classes: int) -> Template:
        if not is_int(classes) or not 1 <= classes <= MAX_CLASSES:
            raise SpecError(f"classes={classes!r} is not valid for kind='nll': give the number of classes, an "
                            f"integer in [1, {MAX_CLASSES}]")
        return _template(int(classes))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        return [per_class("weight", loss.weight, classes, Fraction(1))]

    def mean_weights(self, loss: Loss, classes: int) -> list[Fraction] | None:
        # PyTorch and ONNX: "mean" divides by Σ w[label] over the rows not at ignore_index
        return per_class("weight", loss.weight, classes, Fraction(1))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # log-probabilities (rows of log softmax rounded to short dyadic fractions; the loss
        # does not need them normalised); labels at different classes, so a weight shows;
        # with ignore_index, a row at it (a third row unless a default row's class is the
        # ignored one), so the reduction's skip and the weighted denominator both show
        c = self.default_classes(loss)
        pred = np.array([np.resize([-1.25, -2.0, -0.5], c), np.resize([-0.75, -1.5, -3.0], c)])
        label = np.array([c - 1, 0])
        if loss.ignore_index is not None and loss.ignore_index not in label:
            pred = np.vstack([pred, np.resize([-0.25, -1.75, -2.5], c)])
            label = np.append(label, loss.ignore_index)
        return pred, label

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # log-probabilities -M and -2M (e^-M underflows in float32 and float64, e^-2M in every
        # dtype) at the labelled class: the loss is M·w, finite, while a form through the
        # probability e^z (-log(e^z), or a clip of it) takes the log of an underflowed 0
        m, c = overflow_logit(dt), self.default_classes(loss)
        pred = np.array([np.resize([-m, -0.5, -2 * m], c), np.resize([-2 * m, -m, -0.25], c)])
        label = np.array([0, 0])
        if loss.ignore_index == 0:
            label = np.array([2 % c, 1 % c])
        if loss.ignore_index is not None:
            pred = np.vstack([pred, np.resize([-m, -2 * m, -0.5], c)])
            label = np.append(label, loss.ignore_index)
        return pred, label

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "dℓ/dz_c = -w_c at the labelled class and 0 at the others, whatever z is: PyTorch nll_loss (measured in "
            "float64) gives loss NaN (or ∓inf, the limit) where the labelled log-probability is NaN (±inf) and the "
            "finite loss of the row where only another class's is; its derivative stays -w_y and 0 in every case "
            "(the constant derivative; NaN accepted too)"))
