"""kld: the Kullback-Leibler divergence KL(P‖Q) per element, P the label, Q the prediction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import SpecError
from symjac._exact import ExactArray
from symjac.loss._domain import Convention, check_range, near_edge, overflow_logit, probability_labels
from symjac.loss._kind import ElementwiseKind, Put, real, register
from symjac.loss._templates import LossTemplate, element_template

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@register
class Kld(ElementwiseKind):
    """``ℓ = P·(log P - log Q)`` with ``0·log 0 = 0``; ``log_input``: the prediction is
    ``log Q`` (PyTorch ``kl_div``), else Q in (0, 1]; ``log_target``: the label is
    ``log P`` <= 0, else P in [0, 1]."""

    name = "kld"
    options = ("log_input", "log_target")
    synonyms = ("kl_div", "kl_divergence", "kullback_leibler")
    samples = tuple({"log_input": i, "log_target": t} for i in (False, True) for t in (False, True))

    def validate(self, loss: Loss, put: Put) -> None:
        for name in ("log_input", "log_target"):
            value = getattr(loss, name)
            if value is None:
                put(name, False)
            elif not isinstance(value, (bool, np.bool_)):
                raise SpecError(f"{name}={value!r} is not valid: give True or False")
            else:
                put(name, bool(value))

    def template_key(self, loss: Loss) -> tuple[Any, ...]:
        return bool(loss.log_input), bool(loss.log_target)

    def expressions(self, *key: Any) -> LossTemplate:
        log_input, log_target = key
        z, y = real("z"), real("y")
        logq = z if log_input else sympy.log(z)
        if log_target:
            loss = sympy.exp(y) * (y - logq)
        else:  # 0·log 0 = 0 (xlogy), as PyTorch
            loss = sympy.Piecewise((sympy.S.Zero, sympy.Eq(y, 0)), (y * sympy.log(y) - y * logq, True))
        return element_template(self.name, (z,), (y,), (), loss)

    def check_domain(self, loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
        assert t is not None
        if loss.log_target:
            check_range("label", t, lambda n, d: n <= 0, "(-inf, 0]", "with log_target=True the label is log P, P <= 1")
        else:
            probability_labels(self.name, t)
        if not loss.log_input:
            check_range("pred", z, lambda n, d: (n > 0) & (n <= d), "(0, 1]",
                        "kld takes the probability Q (log Q and -P/Q need Q > 0); use log_input=True for log Q")

    def fd_step(self, loss: Loss, z: float, h: float) -> float | None:
        if loss.log_input:
            return h
        if z >= 1:  # Q = 1: no centred stencil inside (0, 1]
            return None
        room = min(z / 2, 1 - z)
        return min(h, float(2.0 ** np.floor(np.log2(room))))

    def stencil_inside(self, loss: Loss, zm: Any, zp: Any) -> bool:
        return bool(loss.log_input or (0 < zm and zp <= 1))

    def extreme_inputs(self, loss: Loss, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
        # log Q (log_input) and log P (log_target) of -M, -2M (e^-M underflows the dtype in
        # float32 and float64, e^-2M in every dtype): a form through Q = e^z takes log 0 = -inf
        # (loss inf, and a derivative -P/Q·Q = NaN), one through P = e^y forms P·log P = 0·(-inf)
        # = NaN; Q (and P) near 0 otherwise (2^-30, 2^-11 in float16): a clip to [1e-7, 1] is off there
        m, (e, _) = overflow_logit(dt), near_edge(dt)
        pred = (np.array([[-m, -2 * m, -0.5], [-2 * m, -m / 2, -m]]) if loss.log_input
                else np.array([[e, 0.5, 2 * e], [0.25, e, 1.0]]))
        label = (np.array([[-m, -0.75, -2 * m], [-1.5, -2 * m, -m]]) if loss.log_target
                 else np.array([[0.5, 0.25, e], [0.25, 0.5, 0.125]]))
        return pred, label

    def nonfinite(self, loss: Loss) -> Convention:
        if loss.log_input:
            return Convention(evidence=(
                "log Q NaN: loss NaN and derivative -P at its element, which does not depend on log Q (PyTorch "
                "kl_div, optax.kl_divergence; NaN accepted too); log Q = ±inf: loss ∓inf (NaN where P = 0: 0·inf) "
                "and derivative -P (with log_target, -e^y), the limits"))
        return Convention(values=(float("nan"),), at_nan=("zero",), refuse=True, evidence=(
            "Q NaN only (±inf is outside (0, 1]): Keras' KLDivergence clips Q to [ε, 1]: loss NaN, derivative 0 (the "
            "clip's); raising (as PyTorch's range checks do for probabilities), NaN and 0 are accepted at that "
            "element"))

    def default_inputs(self, loss: Loss) -> tuple[np.ndarray, np.ndarray | None]:
        q = np.array([[0.25, 0.5, 0.25], [0.125, 0.375, 0.5]])
        pred = np.array([[-1.5, -0.75, -1.25], [-2.0, -1.0, -0.625]]) if loss.log_input else q
        p = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
        label = np.array([[-0.75, -1.5, -1.25], [-1.5, -1.0, -0.625]]) if loss.log_target else p
        return pred, label
