"""cosine_embedding: PyTorch ``cosine_embedding_loss(x1, x2, y, margin)``, per row ``1 - cos`` at ``y = 1``
and ``[cos - m]₊`` at ``y = -1``.

PyTorch's definition (aten ``Loss.cpp``, ``cosine_embedding_loss``; ``#define EPSILON 1e-12``)::

    prod_sum = (x1 * x2).sum(1); mag_square1 = (x1 * x1).sum(1) + EPSILON
    mag_square2 = (x2 * x2).sum(1) + EPSILON; cos = prod_sum / sqrt(mag_square1 * mag_square2)

so ``cos = Σ x1·x2 / sqrt((Σ x1² + ε)(Σ x2² + ε))``. ε is the float32 nearest 1e-12,
``9.999999960041972e-13``, in float64 too: measured on PyTorch 2.13 in float64, its forward at
``x1 = (1e-7, 0)``, ``x2 = (1, 0)``, ``y = -1``, ``margin = -1`` is ``1.0995037192177795``, which is
mpmath's value with that ε to the last bit (with the double 1e-12: ``1.0995037190209491``), and
at ``x1 = 0``, ``x2 = (1, 1/2)`` its gradient in x1 is ``-x2/sqrt(ε·(5/4 + ε))`` with that ε
(``tests/test_margin_pairs.py``). ε is part of the exact definition here: a zero x1 or x2 has
the finite cosine 0 and the derivative of PyTorch's definition there, not a pole.

Layout: PyTorch's loss has two differentiable inputs, x1 and x2 of shape ``(N, D)``; a loss
kind has one, pred. As gaussian_nll and margin_ranking make their pairs part of pred, one
loss element is one row of pred of ``2·D`` entries, ``pred[..., :D]`` = x1 and
``pred[..., D:]`` = x2, so ``S·dL/dpred`` holds both gradients and every stage applies
unchanged. The label has pred's shape: ``label[..., 0]`` = y in {-1, 1}, every other entry 0
(a label in another layout shows). ``"mean"`` divides by the number of rows, PyTorch's N.

``margin`` m: any finite number (default 0). PyTorch's documentation says it "should be a
number from -1 to 1"; its implementation accepts any (measured: ``margin=2`` gives 0 and
``-1.5`` gives ``cos + 1.5`` at ``y = -1``), and so does this definition. At ``cos = m``,
``y = -1``, the Clarke set (the segment between 0 and ``∇cos``) is accepted (PyTorch's
``clamp_min`` backward passes the gradient there). With ε in the definition no short dyadic
input has ``cos = m`` for ``m ≠ 0``; at the default ``m = 0`` the defaults reach the kink on
purpose (an orthogonal pair at ``y = -1``: ``Σ x1·x2 = 0``, so ``cos = 0`` exactly).

The exact values: the template's stable form is its SymPy expression, ``Σx1·x2·((A + ε)(B + ε))^(-1/2)``,
evaluated in MPFR (a power with exponent ±1/2 and ±3/2 is correctly rounded there, at the
working precision). The rounding model charges the power as a transcendental function
(:func:`symjac.loss._templates.running_error`: ``|f'(a)|·E(a) + 2|f(a)|``, 2u where IEEE's
sqrt is within u and a division another u: no narrower than sqrt-then-divide), each sum,
square and product its roundings, and the condition term ε's own rounding in the dtype
(``fl32(1e-12)``). An implementation that squares entries beyond the square root of its
largest value overflows where the exact cosine is finite: the ``extreme`` family (PyTorch's,
as written, returns NaN there).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, square_overflow
from symjac.loss._fields import number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._kinds.hinge_embedding import signed_first_labels
from symjac.loss._templates import LossTemplate, element_template, positive_part

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: PyTorch's ``EPSILON`` (aten Loss.cpp, 1e-12) as PyTorch applies it in every dtype, float32's nearest
#: (measured in float64: the module docstring), added to each squared norm.
EPS = Fraction(float(np.float32(1e-12)))
#: The default rows' D (x1 and x2 of 2 entries each: a row of 4).
DEFAULT_DIM = 2
#: The default rows (x1 | x2) and labels: row 0 at y = 1; row 1 orthogonal at y = -1 (cos = 0: the kink at
#: margin 0); row 2 at y = -1 inside the hinge (cos > 0); row 3 at y = -1 beyond it (cos < 0); row 4 at y = 1
#: with cos < 0. Every squared norm is >= 1/4: float16 holds every derivative. No row is parallel
#: (x1 = ±c·x2): there ∇cos is of order ε, all cancellation, and no bound on it is informative.
ROWS = ((0.5, -1.0, 1.5, 0.25), (1.0, 0.5, -0.5, 1.0), (0.75, 1.25, 1.0, 0.5), (1.0, -0.5, -1.0, 0.25),
        (-0.5, 0.75, 1.0, 0.25))
LABELS = (1.0, -1.0, -1.0, -1.0, 1.0)


@functools.lru_cache(maxsize=16)
def row_template(dim: int) -> LossTemplate:
    """``ℓ = (1 + y)/2·(1 - cos) + (1 - y)/2·[cos - m]₊``, ``cos = Σx1·x2·((Σx1² + ε)(Σx2² + ε))^(-1/2)``, one
    symbol per entry of x1 and x2; the label symbols t0 = y and t1... (0)."""
    x1 = tuple(real(f"a{k}") for k in range(dim))
    x2 = tuple(real(f"b{k}") for k in range(dim))
    t = tuple(real(f"t{k}") for k in range(2 * dim))
    eps, m = sympy.Symbol("eps", positive=True), real("margin")  # ε > 0: the norms' power is real
    prod = sympy.Add(*(a * b for a, b in zip(x1, x2)))
    mag1, mag2 = sympy.Add(*(a**2 for a in x1)) + eps, sympy.Add(*(b**2 for b in x2)) + eps
    cos = prod * (mag1 * mag2) ** sympy.Rational(-1, 2)
    y = t[0]
    loss = (1 + y) / 2 * (1 - cos) + (1 - y) / 2 * positive_part(cos - m)
    return element_template("cosine_embedding", x1 + x2, t, (eps, m), loss)


def _dim(classes: int) -> int:
    if classes < 2 or classes % 2:
        raise InputError(f"pred has {classes} entries along its last axis: kind='cosine_embedding' takes rows "
                         "[x1 | x2] of 2·D entries there, pred[..., :D] = x1 and pred[..., D:] = x2")
    return classes // 2


def _labels(y: list[float], classes: int) -> np.ndarray:
    out = np.zeros((len(y), classes))
    out[:, 0] = y
    return out


@register
class CosineEmbedding(LossKind):
    """``ℓ = 1 - cos`` at ``y = 1``, ``[cos - m]₊`` at ``y = -1``, per row ``[x1 | x2]`` (see the module docstring)."""

    name = "cosine_embedding"
    options = ("margin",)
    synonyms = ("cosine_embedding_loss", "cosineembeddingloss", "cosineembedding", "cosine_embedding_criterion")
    class_axis = True
    explain_classes = 2 * DEFAULT_DIM
    kinks_at_defaults = True

    def validate(self, loss: Loss, put: Put) -> None:
        put("margin", number("margin", 0 if loss.margin is None else loss.margin, "a finite number (the margin)"))

    def template(self, loss: Loss, classes: int) -> Template:
        return row_template(_dim(classes))

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.margin is not None
        return [[EPS, loss.margin]]

    def default_classes(self, loss: Loss) -> int:
        return 2 * DEFAULT_DIM

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        _dim(int(z.num.shape[-1]))
        signed_first_labels(self.name, t, "the row (y, 0, ..., 0)")

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(evidence=(
            "NaN or ±inf in x1 or x2: loss NaN and every derivative of its row NaN in PyTorch cosine_embedding_loss "
            "(a NaN propagates; ±inf makes inf/inf), at y = 1 and y = -1 alike, measured in float64; the limits "
            "at ±inf (cos goes to the other vector's entry over its norm) accepted too"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        return np.array(ROWS), _labels(list(LABELS), 2 * DEFAULT_DIM)

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # entries of G (G² overflows the dtype, 4G does not): Σx² as written is inf and cos = x/inf or
        # inf/inf (PyTorch: NaN), while cos itself is finite and every derivative of order 1/G; a
        # correct implementation scales each vector by its largest entry before squaring. Rows with one
        # vector large and the other of order 1 too; none at cos = 0 (off the kink).
        g = square_overflow(dt)
        pred = np.array([[g, g / 2, g, -g], [-g, g, g / 2, g], [g, 0.5, 0.25, 1.0], [0.5, -1.0, g, g / 2]])
        return pred, _labels([1.0, -1.0, -1.0, 1.0], 2 * DEFAULT_DIM)
