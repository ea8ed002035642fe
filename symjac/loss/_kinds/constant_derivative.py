"""constant_derivative: ``ℓ = z``, the label ignored, so ``dℓ/dz = 1`` (a probe of the scale and reduction)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from symjac.loss._domain import Convention
from symjac.loss._kind import ElementwiseKind, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@register
class ConstantDerivative(ElementwiseKind):
    name = "constant_derivative"
    takes_label = False

    def expressions(self, *key: Any) -> LossTemplate:
        z = real("z")
        return element_template(self.name, (z,), (), (), z)

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]]), None

    def nonfinite(self, loss: Loss) -> Convention:
        # no extreme family: ℓ = z overflows only where the exact value does
        return Convention(evidence="PyTorch (ℓ = z, autograd): a NaN or ±inf prediction gives loss NaN or ±inf at its "
                                   "element and derivative 1, which does not depend on it (NaN accepted too)")
