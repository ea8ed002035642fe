"""hinge_embedding: PyTorch ``hinge_embedding_loss``, ``ℓ = z`` at ``y = 1`` and ``[m - z]₊`` at ``y = -1``."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._exact import ExactArray
from symjac.loss._domain import Convention, check_range
from symjac.loss._fields import number
from symjac.loss._kind import ElementwiseKind, Put, real, register
from symjac.loss._templates import LossTemplate, element_template, positive_part

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: The default predictions as offsets from the margin (in units of its binary magnitude g) and their
#: labels: (0, 0) sits on the kink z = m at y = -1, (0, 1) and (1, 1) inside the hinge (ℓ = m - z),
#: (1, 2) beyond it (ℓ = 0), (0, 2) and (1, 0) at y = 1 (ℓ = z; (1, 0) at z = m, no kink there).
OFFSETS = ((0.0, -0.5, 1.0), (0.0, -1.25, 0.25))
LABELS = ((-1.0, -1.0, 1.0), (1.0, -1.0, -1.0))


def margin_grid(m: Fraction) -> tuple[float, float]:
    """``(base, g)``: ``g = 2^floor(log2 |m|)`` (1 for m = 0) and ``base`` m rounded to the grid
    g/4, so ``base + k·g/4`` for small k is exact in float16 (``base = m`` wherever m has at most 3
    significant bits: the defaults then reach the kink at ``z = m``)."""
    if m == 0:
        return 0.0, 1.0
    e = abs(m).numerator.bit_length() - abs(m).denominator.bit_length()
    e -= Fraction(2) ** e > abs(m)
    e = max(min(e, 12), -12)  # inside float16's range with room for the offsets
    g = Fraction(2) ** e
    return float(round(m / (g / 4)) * (g / 4)), float(g)


def signed_labels(kind: str, t: ExactArray | None) -> None:
    """Labels in {-1, 1} (PyTorch's definitions of the margin losses take these)."""
    assert t is not None
    check_range("label", t, lambda n, d: (n == d) | (n == -d), "{-1, 1}",
                f"kind={kind!r} takes labels 1 and -1, as PyTorch's definition")


def signed_first_labels(kind: str, t: ExactArray | None, layout: str) -> None:
    """Label rows ``(y, 0, ..., 0)``, y in {-1, 1} (the pairwise margin losses: margin_ranking's pairs,
    cosine_embedding's rows); ``layout`` names the row in the message."""
    assert t is not None
    check_range("label[..., 0]", ExactArray(t.num[..., 0], t.den), lambda n, d: (n == d) | (n == -d), "{-1, 1}",
                f"kind={kind!r} takes labels 1 and -1 in label[..., 0], as PyTorch's definition")
    pair = t.num.shape[-1] == 2
    rest = ExactArray(t.num[..., 1] if pair else t.num[..., 1:], t.den)
    check_range("label[..., 1]" if pair else "label[..., 1:]", rest, lambda n, d: n == 0, "{0}",
                f"{kind}'s label is {layout}: y in label[..., 0], 0 beside it")


@register
class HingeEmbedding(ElementwiseKind):
    """``ℓ = (1 + y)/2·z + (1 - y)/2·[m - z]₊`` for ``y`` in {-1, 1} (PyTorch: ``z`` where ``y = 1``,
    ``max(0, m - z)`` where ``y = -1``), ``m`` = margin (default 1). At ``z = m``, ``y = -1``, the
    Clarke set ``[-1, 0]`` is accepted (PyTorch's ``clamp_min`` backward passes the gradient there: -1)."""

    name = "hinge_embedding"
    options = ("margin",)
    synonyms = ("hinge_embedding_loss", "hingeembedding")
    samples = ({}, {"margin": 0.5}, {"margin": -2})
    kinks_at_defaults = True

    def validate(self, loss: Loss, put: Put) -> None:
        put("margin", number("margin", 1 if loss.margin is None else loss.margin, "a finite number (the margin)"))

    def expressions(self, *key: Any) -> LossTemplate:
        z, y, m = real("z"), real("y"), real("margin")
        loss = (1 + y) / 2 * z + (1 - y) / 2 * positive_part(m - z)
        return element_template(self.name, (z,), (y,), (m,), loss)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.margin is not None
        return [[loss.margin]]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        signed_labels(self.name, t)

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(at_nan=("between_limits",), evidence=(
            "NaN at y = -1: loss NaN, derivative 0 in PyTorch hinge_embedding_loss (clamp_min's backward masks "
            "the NaN comparison; 0 lies between the limits -1 and 0), the constant 1 at y = 1; ±inf: the limits "
            "(y = -1: loss 0 and derivative 0 at +inf, +inf and -1 at -inf; y = 1: ±inf and 1), measured in "
            "float64"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        assert loss.margin is not None
        base, g = margin_grid(loss.margin)
        return base + g * np.array(OFFSETS), np.array(LABELS)
