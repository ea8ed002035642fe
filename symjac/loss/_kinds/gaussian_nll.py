"""gaussian_nll: the Gaussian negative log-likelihood (PyTorch ``gaussian_nll_loss``), its
derivative with respect to the mean and the variance alike.

A loss kind has one differentiable input, pred. The least invasive sound way to check the
variance's derivative too is to make it part of pred: one loss element per pair along
pred's last axis, ``pred[..., 0]`` the mean μ (PyTorch's ``input``) and ``pred[..., 1]`` the
variance v (its ``var``), so ``S·dL/dpred`` holds both derivatives and every stage (the
exact route, the bounds, finite differences, the families, the Hessian, golden data)
applies to both unchanged. The label has pred's shape: ``label[..., 0]`` the target y,
``label[..., 1]`` 0 (it is no input; a nonzero value is refused, so a label given in the
wrong layout shows). ``"mean"`` divides by the number of pairs, PyTorch's element count.

``ℓ = ½·(log m + (μ - y)²/m)`` with ``m = max(v, ε)`` (``+ ½·log 2π`` with ``full``), ε =
``eps`` (default 1e-6). Written ``m = (v + ε + |v - ε|)/2`` so SymPy differentiates it:
``∂ℓ/∂μ = (μ - y)/m``, ``∂ℓ/∂v = ½·(1/m - (μ - y)²/m²)`` above ε and 0 below it (the loss
does not depend on v there), the Clarke set (the hull of both) at ``v = ε``.

PyTorch clamps under ``torch.no_grad()``, so below ε its var gradient is the derivative at
ε, not 0: not the derivative of its own forward, which symjac reports there (the default
inputs keep v above ε). A variance shared across the entries of a row (PyTorch's ``var``
of shape ``(N, 1)``) is the same v in each pair; its gradient is the sum of the pairs'
(``tests/test_losses_nll.py`` checks PyTorch's against that sum).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, check_range, square_overflow
from symjac.loss._fields import number
from symjac.loss._kind import LossKind, Put, Template, real, register
from symjac.loss._kinds.poisson_nll import flag
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: PyTorch's default clamp of the variance (``gaussian_nll_loss(eps=1e-6)``), the binary float it is.
DEFAULT_EPS = 1e-6
#: Entries per element along pred's last axis: the mean and the variance.
PAIR = 2


def _template(full: bool) -> LossTemplate:
    mu, v, y, unused, eps = real("mu"), real("v"), real("y"), real("t1"), real("eps")
    m = (v + eps + sympy.Abs(v - eps)) / 2
    loss = (sympy.log(m) + (mu - y) ** 2 / m) / 2
    if full:
        loss = loss + sympy.log(2 * sympy.pi) / 2
    return element_template("gaussian_nll", (mu, v), (y, unused), (eps,), loss)


_TEMPLATES = {full: _template(full) for full in (False, True)}


def _pairs(mu: np.ndarray, var: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pred, label) of one (mean, variance) pair per row, from same-shaped arrays."""
    pred = np.stack([mu.reshape(-1), var.reshape(-1)], axis=-1)
    return pred, np.stack([y.reshape(-1), np.zeros(y.size)], axis=-1)


@register
class GaussianNll(LossKind):
    """``ℓ = ½·(log max(v, ε) + (μ - y)²/max(v, ε))`` per (μ, v) pair along the last axis."""

    name = "gaussian_nll"
    options = ("full", "eps")
    synonyms = ("gaussian_nll_loss", "gaussiannllloss", "gaussian_negative_log_likelihood", "normal_nll")
    class_axis = True
    explain_classes = PAIR
    samples = ({}, {"full": True, "eps": 2**-3})

    def validate(self, loss: Loss, put: Put) -> None:
        flag(loss, put, "full", False)
        eps = number("eps", DEFAULT_EPS if loss.eps is None else loss.eps, "a number > 0")
        if eps <= 0:
            raise SpecError(f"eps={loss.eps!r} is not valid: give a number > 0 (the variance's clamp; PyTorch's "
                            "default is 1e-6)")
        put("eps", eps)

    def template(self, loss: Loss, classes: int) -> Template:
        if classes != PAIR:
            raise InputError(f"pred has {classes} entries along its last axis: kind='gaussian_nll' takes pairs "
                             "(mean, variance) there, pred[..., 0] the mean and pred[..., 1] the variance")
        return _TEMPLATES[bool(loss.full)]

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.eps is not None
        return [[loss.eps]]

    def default_classes(self, loss: Loss) -> int:
        return PAIR

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        assert t is not None
        var = ExactArray(z.num[..., 1], z.den)
        check_range("pred[..., 1]", var, lambda n, d: n >= 0, "[0, inf)",
                    "it is the variance (PyTorch's gaussian_nll_loss raises on a negative one)")
        check_range("label[..., 1]", ExactArray(t.num[..., 1], t.den), lambda n, d: n == 0, "{0}",
                    "gaussian_nll's label is (target, 0) per pair: the target in label[..., 0], 0 beside it")

    def fd_step(self, loss: Loss, z: float, h: float) -> float | None:
        # the rule sees one entry, not which of the pair it is: an entry >= 0 may be a variance,
        # so its stencil stays within z/2 of z (>= 0; a mean there is only narrowed); a negative
        # entry is a mean. A stencil across v = ε straddles the kink and is skipped as any is.
        if z < 0:
            return h
        if z == 0:
            return None
        return min(h, float(2.0 ** np.floor(np.log2(z / 2))))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # 6 pairs (rows of pred): means and targets on both sides of each other, variances from 1/8 to 4
        # (above ε = 1e-6: the clamp does not bind, so PyTorch's no_grad clamp and the exact
        # derivative agree; with a given eps the variances stay above it)
        mu = np.array([[0.5, -1.25, 2.0], [0.75, 0.375, -0.5]])
        y = np.array([[0.25, -1.0, -0.5], [1.5, -0.125, 1.5]])
        var = np.array([[0.5, 2.0, 0.25], [1.5, 4.0, 0.125]])
        assert loss.eps is not None
        if loss.eps >= Fraction(1, 8):  # above the clamp still, by a power of two
            var = var * float(2.0 ** np.ceil(np.log2(float(loss.eps) * 16)))
        return _pairs(mu, var, y)

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # |μ - y| from 3G/2 to 2G with v = G (G = square_overflow: G² overflows the dtype, 4G
        # does not): ℓ ≈ d²/(2v) and both derivatives are finite, while a form through (μ - y)²
        # (PyTorch's) overflows: loss inf, and the variance's derivative -d²/(2v²) -inf
        g = square_overflow(dt)
        mu = np.array([[g, -g, g / 2], [0.5, -g, g]])
        y = np.array([[-g / 2, g / 2, -g], [-3 * g / 2, g, -g]])
        var = np.array([[g, g, 2 * g], [g, 2 * g, g]])
        return _pairs(mu, var, y)

    def nonfinite(self, loss: Loss) -> Convention:
        return Convention(values=(float("nan"), float("inf")), evidence=(
            "NaN mean or variance: loss NaN and both derivatives NaN at its pair (PyTorch gaussian_nll_loss, "
            "measured in float64); +inf mean: loss +inf, derivatives +inf and -inf (the limits); +inf variance: "
            "loss +inf and derivatives 0, the limits; -inf is no variance (PyTorch raises), so the family holds "
            "NaN and +inf only"))
