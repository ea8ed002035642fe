"""margin_ranking: PyTorch ``margin_ranking_loss(x1, x2, y, margin)``, ``ℓ = [-y·(x1 - x2) + m]₊``.

PyTorch's loss has two differentiable inputs, x1 and x2; a loss kind has one, pred. As
gaussian_nll does (its module docstring), both are made part of pred: one loss element per
pair along pred's last axis, ``pred[..., 0]`` = x1 and ``pred[..., 1]`` = x2, so
``S·dL/dpred`` holds both derivatives and every stage (the exact route, the bounds, finite
differences, the families, golden data) applies to both unchanged. The label has pred's
shape: ``label[..., 0]`` = y in {-1, 1}, ``label[..., 1]`` = 0 (no input; a nonzero value
is refused, so a label in the wrong layout shows). ``"mean"`` divides by the number of
pairs, PyTorch's element count of x1.

``∂ℓ/∂x1 = -y·[a > 0]``, ``∂ℓ/∂x2 = y·[a > 0]`` with ``a = -y·(x1 - x2) + m``; at the kink
``a = 0`` the Clarke set is the segment ``θ·(-y, y)``, θ in [0, 1], accepted there (PyTorch's
``clamp_min`` backward passes the gradient at ``a = 0``: θ = 1). The default inputs reach the
kink on purpose.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention
from symjac.loss._fields import number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._kinds.hinge_embedding import margin_grid, signed_first_labels
from symjac.loss._templates import LossTemplate, element_template, positive_part

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: Entries per element along pred's last axis: x1 and x2.
PAIR = 2
#: The default pairs as offsets of x1 - x2 from y·m (in units of the margin's binary magnitude g),
#: with their labels: offset 0 sits on the kink a = 0 (two such pairs, y = 1 and y = -1), a positive
#: offset beyond the hinge (ℓ = 0), a negative one inside it (ℓ = -y·offset·g > 0).
OFFSETS = ((0.0, -0.5, 1.0), (0.0, 1.25, -0.75))
LABELS = ((1.0, -1.0, 1.0), (-1.0, -1.0, -1.0))
#: x2 of each default pair (x1 = x2 + y·m + y·offset·g).
SECOND = ((0.5, -1.0, 0.25), (-0.75, 1.5, 0.0))


def _template() -> LossTemplate:
    x1, x2, y, unused, m = real("x1"), real("x2"), real("y"), real("t1"), real("margin")
    return element_template("margin_ranking", (x1, x2), (y, unused), (m,), positive_part(-y * (x1 - x2) + m))


_TEMPLATE = _template()


@register
class MarginRanking(LossKind):
    """``ℓ = [-y·(x1 - x2) + m]₊`` per (x1, x2) pair along the last axis, y in {-1, 1}, ``m`` = margin
    (default 0, any finite number)."""

    name = "margin_ranking"
    options = ("margin",)
    synonyms = ("margin_ranking_loss", "marginrankingloss", "marginranking", "ranking_hinge")
    class_axis = True
    explain_classes = PAIR
    kinks_at_defaults = True
    samples = ({}, {"margin": 0.5}, {"margin": -2})

    def validate(self, loss: Loss, put: Put) -> None:
        put("margin", number("margin", 0 if loss.margin is None else loss.margin, "a finite number (the margin)"))

    def template(self, loss: Loss, classes: int) -> Template:
        if classes != PAIR:
            raise InputError(f"pred has {classes} entries along its last axis: kind='margin_ranking' takes pairs "
                             "(x1, x2) there, pred[..., 0] = x1 and pred[..., 1] = x2")
        return _TEMPLATE

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.margin is not None
        return [[loss.margin]]

    def default_classes(self, loss: Loss) -> int:
        return PAIR

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        signed_first_labels(self.name, t, "(y, 0) per pair")

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("one_side",), evidence=(
            "NaN x1 or x2: loss NaN, both derivatives of its pair 0 in PyTorch margin_ranking_loss (clamp_min's "
            "backward masks the NaN comparison as false: the pair's derivatives at the limit on the side where "
            "-y·(x1 - x2) goes to -inf), measured in float64; ±inf: the limits (where -y·(x1 - x2) goes to -inf "
            "loss 0 and derivatives 0, where it goes to +inf loss +inf and derivatives (-y, y))"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        assert loss.margin is not None
        base, g = margin_grid(loss.margin)  # base = m where m has at most 3 significant bits: the kink
        y, x2 = np.array(LABELS), np.array(SECOND)
        x1 = x2 + y * (base + g * np.array(OFFSETS))
        pred = np.stack([x1.reshape(-1), x2.reshape(-1)], axis=-1)
        return pred, np.stack([y.reshape(-1), np.zeros(y.size)], axis=-1)
