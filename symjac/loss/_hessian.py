"""Second derivatives of losses: the exact Hessian ``S·∂²L/∂pred²``, its product with a direction, and bounds.

A loss is separable over its elements, so its Hessian is block diagonal: element i
contributes ``S·r_i·∇²ℓ_i`` (``r_i`` the exact reduction factor: 1/D, 1/B, 1, or the
upstream ``u_i`` for ``"none"``; 0 for a row equal to ``ignore_index``), a 1×1 block for
an element-wise kind and a C×C block for ``softmax_ce``. ``∇²ℓ_i`` is the kind's
:meth:`~symjac.loss._kind.LossKind.second_derivative` rule: one more SymPy
differentiation of the template's derivatives (element-wise kinds), or
``W·(diag(p) − p·pᵀ)`` (``softmax_ce``, proved class-generically), evaluated at
:data:`~symjac.loss._spec.DPS` digits on the exact inputs. At a kink (``mae`` at
``pred == label``, ``smooth_l1``/``huber`` at ``|d| = δ``) the second derivative does not
exist and :class:`symjac.InputError` names the element.

Rounding bound of an implementation's ``H·v`` in a dtype (u its unit roundoff,
``γ_k = k·u/(1 − k·u)``, η its smallest subnormal), entry j of element i:

- element-wise kinds, with ``d = ∂²ℓ/∂z²`` the SymPy second derivative of the stable
  derivative (the form implementations differentiate), as the first derivative's bound
  (:mod:`symjac.loss._bounds`) one order up::

      |S·r_i|·|v_j|·[u·R(d) + γ_k·(|d| + Σ_m |∂d/∂x_m|·|x_m|)] + k·η·max(1, |S·r_i|·A)·max(1, |v_j|)

  ``R`` the running error of d as SymPy writes it, the sum its condition (every input
  x_m: prediction, label, options), ``k = depth(ℓ) + depth(h) + depth(d) + k_r + 1``
  (the forward, first and second derivative's roundings, the reduction's, the product with v);
- ``softmax_ce``, ``(H v)_j = S·r_i·W·p_j·(v_j − Σ_k p_k v_k)``: each p_k is within relative
  ``ρ = γ_{C+4} + 2u·max_m |z_m − max z|`` (the shift by max z rounds to ``u·|z_m − max z|``
  in the exponent, exp and the C-term sum and division round) and W (a C-term sum of
  ``a_c``, each a few roundings) within ``γ_{2C+4}``; the dot product, the difference and
  the three products add ``γ_{C+5}``; so::

      |S·r_i|·W·p_j·(|v_j| + Σ_k p_k·|v_k|)·(2ρ + γ_{3C+9}) + (C + 8)·η·max(1, |S·r_i|·W)
"""

from __future__ import annotations

import functools
from typing import Any

import mpmath
import numpy as np
import sympy

from symjac._errors import InputError
from symjac.check._rounding import finfo, precision
from symjac.loss import _numbers
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import LossEvaluation, evaluate
from symjac.loss._softmax import SoftmaxTemplate
from symjac.loss._spec import DPS, Loss
from symjac.loss._templates import LossTemplate, rounding_depth, running_error

__all__ = ["HessianEvaluation", "hessian_of", "loss_hessian", "loss_hvp"]


def _mp(v: Any) -> Any:
    return _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)


@functools.lru_cache(maxsize=64)
def _second_bounds(tpl: LossTemplate) -> tuple[Any, int]:
    """mpmath: args -> [d, cond(d), R(d)] for an element-wise template, and depth(d)."""
    d = sympy.diff(tpl.stable_derivatives[0], tpl.pred[0]).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
    terms = []
    for s in tpl.symbols:
        gd = sympy.diff(d, s).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
        if gd != 0:
            terms.append(sympy.Abs(gd, evaluate=False) * sympy.Abs(s))
    fn = sympy.lambdify(tpl.symbols, [d, sympy.Add(*terms), running_error(d)], modules="mpmath", cse=True)
    return fn, rounding_depth(d)


class HessianEvaluation:
    """The exact Hessian blocks of one loss at one input, at :data:`DPS` digits (mpmath).

    Attributes:
      ev: the first-order evaluation (:class:`~symjac.loss._evaluate.LossEvaluation`).
      blocks: (elements, C, C) ``S·r_i·∇²ℓ_i`` (object array of mpf; C = 1 element-wise).
      args: per element the template's arguments (mpmath), None for an ignored row.
    """

    def __init__(self, ev: LossEvaluation):
        self.ev = ev
        tpl, kind = ev.template, ev.kind
        n, c = ev.counted.size, tpl.classes
        counted = ev.counted.reshape(-1)
        with mpmath.workdps(DPS + 10):
            s = mpmath.mpf(ev.loss.scale.numerator) / ev.loss.scale.denominator
            factors = [mpmath.mpf(f.numerator) / f.denominator for f in ev.factor.reshape(-1)]
            self.sr = [s * f for f in factors]
            self.args: list[list[Any] | None] = [
                [_mp(col[i]) for col in ev.columns] if counted[i] else None for i in range(n)]
            with _numbers.context():
                kinks = np.asarray(tpl.at_kink(list(ev.columns)), dtype=bool)
            if kinks.any():
                at = np.flatnonzero(kinks & counted)
                if at.size:
                    raise InputError(
                        f"pred{_index(ev.pred_shape, int(at[0]))} is at a kink of {ev.loss.kind} (the derivative jumps "
                        "there): the second derivative does not exist; give inputs off the kinks")
            blocks = np.empty((n, c, c), dtype=object)
            blocks[...] = mpmath.mpf(0)
            for i, a in enumerate(self.args):
                if a is not None and self.sr[i] != 0:
                    h = kind.second_derivative(tpl, *a)
                    for j in range(c):
                        for k in range(c):
                            blocks[i, j, k] = self.sr[i] * h[j][k]
        self.blocks = blocks

    def dense(self) -> np.ndarray:
        """The full Hessian, pred's shape twice (object array of mpf)."""
        shape = self.ev.pred_shape
        n, c = self.blocks.shape[:2]
        out = np.empty((n * c, n * c), dtype=object)
        out[...] = mpmath.mpf(0)
        for i in range(n):
            out[i * c:(i + 1) * c, i * c:(i + 1) * c] = self.blocks[i]
        return out.reshape(shape + shape)

    def hvp(self, v: np.ndarray) -> np.ndarray:
        """``H·v`` in pred's shape (mpf), v exact numbers (floats or Fractions) of pred's shape."""
        n, c = self.blocks.shape[:2]
        with mpmath.workdps(DPS + 10):
            vv = [mpmath.mpf(x) if not hasattr(x, "numerator") else mpmath.mpf(x.numerator) / x.denominator
                  for x in np.asarray(v, dtype=object).reshape(-1)]
            out = np.empty(n * c, dtype=object)
            for i in range(n):
                for j in range(c):
                    out[i * c + j] = mpmath.fsum(self.blocks[i, j, k] * vv[i * c + k] for k in range(c))
        return out.reshape(self.ev.pred_shape)

    def bound(self, v: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
        """Per entry of ``H·v``, how far a correct implementation in ``dtype`` may be (mpf; module docstring)."""
        ev, tpl = self.ev, self.ev.template
        n, c = self.blocks.shape[:2]
        vf = np.asarray(v, dtype=np.float64).reshape(n, c)
        out = np.empty((n, c), dtype=object)
        with mpmath.workdps(DPS + 10):
            u = mpmath.ldexp(1, -precision(dtype))
            eta = mpmath.mpf(float(finfo(dtype).smallest_subnormal))

            def gamma(k: int) -> Any:
                return k * u / (1 - k * u) if k * u < 1 else mpmath.inf

            p_bits = int(finfo(dtype).nmant) + 1
            den = ev.denominator
            k_r = 2 + ev.denominator_ops + (0 if den.denominator == 1 and den.numerator <= 2**p_bits else 1)
            for i, a in enumerate(self.args):
                sr = abs(self.sr[i])
                if a is None or sr == 0:
                    out[i] = mpmath.mpf(0)
                    continue
                if isinstance(tpl, SoftmaxTemplate):
                    r = tpl._row(a)  # noqa: SLF001 - the class-generic numbers of one row
                    p = [mpmath.mpf(_mp(x)) for x in r.p[0]]
                    w = abs(mpmath.mpf(_mp(r.w_total[0, 0])))
                    z = [mpmath.mpf(x) for x in a[:c]]
                    rho = gamma(c + 4) + 2 * u * max(abs(x - max(z)) for x in z)
                    dot = mpmath.fsum(pk * abs(vk) for pk, vk in zip(p, vf[i]))
                    for j in range(c):
                        out[i, j] = sr * w * p[j] * (abs(vf[i, j]) + dot) * (2 * rho + gamma(3 * c + 9)) \
                            + (c + 8) * eta * max(1, sr * w)
                    continue
                fn, depth = _second_bounds(tpl)
                d, cond, run = fn(*a)
                k = tpl.loss_depth + tpl.derivative_depth + depth + k_r + 1
                g = gamma(k)
                amp = max([mpmath.mpf(1)] + [abs(mpmath.mpf(x)) for x in a[len(tpl.pred) + len(tpl.label):]])
                vj = abs(mpmath.mpf(vf[i, 0]))
                out[i, 0] = sr * vj * (u * (1 + g) * abs(run) + g * (abs(d) + abs(cond))) \
                    + k * eta * max(1, sr * amp) * max(1, vj)
        return out.reshape(ev.pred_shape)


def hessian_of(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> HessianEvaluation:
    """The exact Hessian blocks (validating the inputs as :func:`symjac.loss_value` does)."""
    return HessianEvaluation(evaluate(loss, pred, label, upstream, values=False, derivatives=True))


def loss_hessian(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> np.ndarray:
    """The exact Hessian ``S·∂²L/∂pred²`` (``S·Σ_i u_i·∇²ℓ_i`` for ``"none"``), loss scale included.

    Returns:
      An ``object`` ndarray of ``mpmath.mpf`` (at least :data:`DPS` digits) of shape
      ``pred.shape + pred.shape``: entry ``[j..., k...]`` is ``∂²(S·L)/∂pred_j∂pred_k``.
      Block diagonal: the elements are independent (a row of classes for ``softmax_ce``).

    Raises:
      SpecError, InputError: as :func:`symjac.loss_value`; InputError also at a kink,
      where the second derivative does not exist.

    Example (mse, mean over 2 elements, S = 4: ``∂²/∂z² (4·Σ(z - y)²/2) = 4``)::

        >>> import symjac
        >>> h = symjac.loss_hessian(symjac.Loss("mse", scale=4), [0.5, 1.0], [0.0, 0.0])
        >>> [[float(v) for v in row] for row in h]
        [[4.0, 0.0], [0.0, 4.0]]
    """
    return hessian_of(loss, pred, label, upstream).dense()


def loss_hvp(loss: Loss, pred: Any, label: Any, v: Any, upstream: Any = None) -> np.ndarray:
    """The exact ``H·v`` (:func:`loss_hessian` times a direction ``v`` of pred's shape), mpf values."""
    h = hessian_of(loss, pred, label, upstream)
    direction = np.asarray(v)
    if direction.shape != h.ev.pred_shape:
        raise InputError(f"v has shape {direction.shape}; pred's shape is {h.ev.pred_shape}")
    return h.hvp(direction)
