"""poisson_nll: the Poisson negative log-likelihood (PyTorch ``poisson_nll_loss``).

Element-wise, z the prediction and y the target (a count or rate):

- ``log_input=True`` (the default): z is the log-rate, ``ℓ = e^z - y·z`` (every real z);
- ``log_input=False``: z is the rate, ``ℓ = z - y·log(z + ε)``, z > -ε, ε = ``eps``
  (default 1e-8; Keras' ``Poisson`` is this form with ε = 1e-7);
- ``full=True`` adds the Stirling term ``y·log y - y + ½·log(2πy)`` where ``y > 1`` and 0
  elsewhere (PyTorch masks ``target <= 1``; TensorFlow's ``log_poisson_loss(compute_full_loss)``
  masks ``0 <= target <= 1``: the same for every target >= 0, the term (NaN) at a negative one):
  it does not depend on z, so only the loss value sees it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, check_range, near_edge
from symjac.loss._fields import number
from symjac.loss._kind import ElementwiseKind, Put, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss

#: PyTorch's default ε (``poisson_nll_loss(eps=1e-8)``), kept as the binary float it is.
DEFAULT_EPS = 1e-8


def flag(loss: Loss, put: Put, name: str, default: bool) -> None:
    """Normalise a True/False option (``default`` where unset)."""
    value = getattr(loss, name)
    if value is None:
        put(name, default)
    elif not isinstance(value, (bool, np.bool_)):
        raise SpecError(f"{name}={value!r} is not valid: give True or False")
    else:
        put(name, bool(value))


def stirling(y: sympy.Symbol) -> sympy.Expr:
    """``y·log y - y + ½·log(2πy)`` where ``y > 1``, else 0 (PyTorch's mask)."""
    return sympy.Piecewise((y * sympy.log(y) - y + sympy.log(2 * sympy.pi * y) / 2, y > 1), (sympy.S.Zero, True))


@register
class PoissonNll(ElementwiseKind):
    """``ℓ = e^z - y·z`` (``log_input``) or ``z - y·log(z + ε)``, plus the Stirling term with ``full``."""

    name = "poisson_nll"
    options = ("log_input", "full", "eps")
    synonyms = ("poisson_nll_loss", "poisson", "log_poisson_loss", "poissonnllloss")
    samples = ({}, {"full": True}, {"log_input": False}, {"log_input": False, "full": True, "eps": 2**-7})

    def validate(self, loss: Loss, put: Put) -> None:
        flag(loss, put, "log_input", True)
        flag(loss, put, "full", False)
        eps = number("eps", DEFAULT_EPS if loss.eps is None else loss.eps, "a number >= 0")
        if eps < 0:
            raise SpecError(f"eps={loss.eps!r} is not valid: give a number >= 0 (PyTorch's default is 1e-8)")
        put("eps", eps)

    def template_key(self, loss: Loss) -> tuple[Any, ...]:
        return bool(loss.log_input), bool(loss.full)

    def expressions(self, *key: Any) -> LossTemplate:
        log_input, full = key
        z, y, eps = real("z"), real("y"), real("eps")
        loss = sympy.exp(z) - y * z if log_input else z - y * sympy.log(z + eps)
        if full:
            loss = loss + stirling(y)
        return element_template(self.name, (z,), (y,), () if log_input else (eps,), loss)

    def params(self, loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
        assert loss.eps is not None
        return [[]] if loss.log_input else [[loss.eps]]

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        if loss.log_input:
            return
        assert loss.eps is not None
        eps = loss.eps
        # z + ε > 0, i.e. num·ε.den + ε.num·den > 0 (Python integers: ε's denominator is large)
        check_range("pred", z, lambda n, d: np.asarray(n, dtype=object) * eps.denominator + eps.numerator * d > 0,
                    f"(-{float(eps)!r}, inf)", "with log_input=False the prediction is a rate: log(z + eps) "
                    "needs z > -eps; give log_input=True for the log-rate")

    def fd_step(self, loss: Loss, z: float, h: float) -> float | None:
        if loss.log_input:
            return h
        assert loss.eps is not None
        room = (z + float(loss.eps)) / 2  # both stencil points with z ± h + ε > 0
        if not room > 0:
            return None
        return min(h, float(2.0 ** np.floor(np.log2(room))))

    def stencil_inside(self, loss: Loss, zm: Any, zp: Any) -> bool:
        return bool(loss.log_input or Fraction(float(zm)) + (loss.eps or 0) > 0)

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        # targets 0, 1/2, 1 (on the Stirling mask's edge: the term is 0 there), 2, 7/2, 6;
        # rates from 2^-10 (where ε = 1e-8 moves log(z + ε) by 1e-5 relatively: an ε left out
        # shows in float32 and float64) to 4
        label = np.array([[0.0, 0.5, 1.0], [2.0, 3.5, 6.0]])
        if loss.log_input:
            return np.array([[0.5, -1.25, 0.0], [1.5, -0.75, 2.0]]), label
        return np.array([[0.75, 2.0**-10, 1.5], [0.25, 4.0, 2.5]]), label

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        if loss.log_input:  # e^z and y·z overflow only where the exact values do
            return None
        # rates at the edge of the domain: z = -ε/2 and ε/4 in float32/64 (exact powers of two
        # near ε), where log(z) is NaN or off by far more than the bound, and log(z + ε) (ε
        # rounded to the dtype first) is what the exact value is; in float16 (ε below its
        # least subnormal) the least probabilities near_edge gives
        assert loss.eps is not None
        e0, _ = near_edge(dt)
        eps = float(loss.eps)
        tiny = float(2.0 ** np.floor(np.log2(eps))) if eps > 0 else 0.0
        if eps > 0 and tiny / 4 >= float(np.finfo(dt).smallest_subnormal):
            pred = np.array([[-tiny / 2, tiny / 4, e0], [tiny, 0.0, -tiny / 4]])
        else:
            pred = np.array([[e0, 2 * e0, 0.5], [4 * e0, e0, 0.25]])
        return pred, np.array([[1.0, 0.5, 2.0], [3.0, 0.25, 1.5]])

    def nonfinite(self, loss: Loss) -> Convention:
        if loss.log_input:
            return Convention(evidence=(
                "log-rate NaN: loss and derivative NaN at its element (PyTorch poisson_nll_loss, TensorFlow "
                "log_poisson_loss, measured in float64); +inf: loss +inf, derivative +inf (e^z - y); -inf: loss "
                "+inf where y > 0 (-y·z; 0 - 0·inf = NaN at y = 0 in PyTorch) and derivative -y, the limits"))
        return Convention(values=(float("nan"), float("inf")), evidence=(
            "rate NaN: loss and derivative NaN (PyTorch poisson_nll_loss(log_input=False), Keras Poisson); +inf: "
            "loss +inf and derivative 1 - y/(z + ε) -> 1, the limits (PyTorch: inf - y·inf = NaN where y > 0); "
            "-inf is outside z > -ε"))
