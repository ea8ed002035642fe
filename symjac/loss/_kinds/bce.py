"""bce: binary cross-entropy from probabilities (PyTorch ``binary_cross_entropy``)."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._exact import ExactArray
from symjac.loss._domain import Convention, check_range, near_edge, per_class, probability_labels
from symjac.loss._kind import ElementwiseKind, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@register
class Bce(ElementwiseKind):
    """``ℓ = -w[y·log z + (1-y)·log(1-z)]``, ``w`` = weight per class along the last axis;
    predictions in the open (0, 1), labels in [0, 1]."""

    name = "bce"
    options = ("weight",)
    synonyms = ("binary_cross_entropy", "binary_crossentropy")
    samples = ({}, {"weight": (0.75, 1, 2)})

    def expressions(self, *key: Any) -> LossTemplate:
        z, y, w = real("z"), real("y"), real("w")
        return element_template(self.name, (z,), (y,), (w,), -w * (y * sympy.log(z) + (1 - y) * sympy.log(1 - z)))

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        probability_labels(self.name, t)
        check_range("pred", z, lambda n, d: (n > 0) & (n < d), "(0, 1)",
                    "bce takes probabilities, and its derivative (p - y)/(p(1 - p)) is infinite at 0 and 1")

    def fd_step(self, loss: Loss, z: float, h: float) -> float | None:
        room = min(z, 1 - z) / 2  # both stencil points strictly inside (0, 1)
        return min(h, float(2.0 ** np.floor(np.log2(room))))

    def stencil_inside(self, loss: Loss, zm: Any, zp: Any) -> bool:
        return bool(0 < zm and zp < 1)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        return [[wc] for wc in per_class("weight", loss.weight, int(z.shape[-1]), Fraction(1))]

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # probabilities e0 and 1 - e1 at the ends of (0, 1) (2^-30 and 1 - 2^-30 in float64; 2^-30 and
        # 1 - 2^-24 in float32; 2^-11 and 1 - 2^-11 in float16): the derivative -y/p + (1 - y)/(1 - p)
        # reaches ±1/e; a clip of p to [1e-7, 1 - 1e-7] (Keras) or a loss through log(max(p, ε)) is off there
        e0, e1 = near_edge(dt)
        return (np.array([[e0, 1 - e1, e0], [1 - e1, 2 * e0, 1 - 2 * e1]]),
                np.array([[1.0, 0.0, 0.5], [1.0, 0.25, 0.75]]))

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(values=(float("nan"),), at_nan=("zero",), refuse=True, evidence=(
            "NaN only (±inf is outside (0, 1)): PyTorch's binary_cross_entropy raises ('all elements of input "
            "should be between 0 and 1'); Keras' binary_crossentropy clips the probability to [ε, 1 - ε]: loss "
            "NaN, derivative 0 (the clip's). Raising, NaN and 0 are accepted at that element; every other element "
            "stays exact"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return (np.array([[0.25, 0.5, 0.75], [0.125, 0.625, 0.875]]),
                np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]]))
