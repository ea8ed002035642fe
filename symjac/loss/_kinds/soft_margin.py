"""soft_margin: PyTorch ``soft_margin_loss``, ``ℓ = log(1 + e^{-y·z})`` for labels ±1."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
from sympy.codegen.cfunctions import log1p

from symjac._exact import ExactArray
from symjac.loss._domain import Convention, overflow_logit
from symjac.loss._kind import ElementwiseKind, real, register
from symjac.loss._kinds.hinge_embedding import signed_labels
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@register
class SoftMargin(ElementwiseKind):
    """``ℓ = log(1 + e^{-y·z})``, ``y`` in {-1, 1}; every real prediction. Smooth (no kink)."""

    name = "soft_margin"
    synonyms = ("soft_margin_loss", "softmargin")

    def expressions(self, *key: Any) -> LossTemplate:
        z, y = real("z"), real("y")
        loss = sympy.log(1 + sympy.exp(-y * z))
        # log1p(e^{-yz}): nothing cancels at any magnitude (the exact values); SymPy's derivative
        # -y·e^{-yz}/(1 + e^{-yz}) over one denominator
        return element_template(self.name, (z,), (y,), (), loss, stable=log1p(sympy.exp(-y * z)),
                                stable_derivatives=lambda hs: tuple(sympy.together(h) for h in hs))

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        signed_labels(self.name, t)

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # margins -y·z of M, 2M, M/2 and -M, -2M, -M/2 (e^M overflows the dtype): log(1 + e^{-yz}) as
        # written is log(inf) = inf where the loss is about -y·z, and its derivative -y·e/(1 + e) is
        # inf/inf = NaN where it is -y; log(1 + e^{-|yz|}) + max(-yz, 0) stays finite
        m = overflow_logit(dt)
        return (np.array([[-m, m, 2 * m], [-2 * m, m / 2, -m / 2]]),
                np.array([[1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]))

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "NaN: loss and derivative NaN at its element (PyTorch soft_margin_loss, float64); ±inf: where -y·z "
            "goes to -inf the limits (loss 0, derivative -0); where it goes to +inf loss +inf and derivative NaN "
            "(e/(1 + e) at e = inf) in PyTorch, the limit -y accepted too"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return (np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]]),
                np.array([[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]]))
