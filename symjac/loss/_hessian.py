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
from symjac.check._rounding import finfo, gamma_mp, unit_roundoff_mp
from symjac.loss import _numbers
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import LossEvaluation, evaluate_checked
from symjac.loss._softmax import _MPFR, SoftmaxTemplate
from symjac.loss._spec import DPS, Loss, check_loss
from symjac.loss._templates import LossTemplate, kink_side, rounding_depth, running_error

__all__ = ["HessianEvaluation", "hessian_of", "loss_hessian", "loss_hvp"]


def _mp(v: Any) -> Any:
    return _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)


def _second_exprs(tpl: LossTemplate) -> list[sympy.Expr]:
    """``d_ck = ∂h_c/∂z_k`` of the stable derivatives, row by row (DiracDelta, from d sign, is 0 off the kinks)."""
    return [sympy.diff(h, z).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
            for h in tpl.stable_derivatives for z in tpl.pred]


@functools.lru_cache(maxsize=64)
def _second(tpl: LossTemplate) -> tuple[Any, Any, int]:
    """For a template of C prediction symbols (1 element-wise): MPFR (vectorised) and mpmath
    functions of its arguments giving ``[d_ck...] + [cond(d_ck)...] + [R(d_ck)...]`` (C² each,
    row by row), and the deepest depth(d_ck); ``d_ck = ∂²ℓ/∂z_c∂z_k`` of the stable derivatives."""
    ds = _second_exprs(tpl)
    conds = []
    for d in ds:
        terms = []
        for s in tpl.symbols:
            gd = sympy.diff(d, s).replace(sympy.DiracDelta, lambda *a: sympy.S.Zero)
            if gd != 0:
                terms.append(sympy.Abs(gd, evaluate=False) * sympy.Abs(s))
        conds.append(sympy.Add(*terms))
    exprs = ds + conds + [running_error(d) for d in ds]
    return (_numbers.lambdify(tpl.symbols, exprs), sympy.lambdify(tpl.symbols, exprs, modules="mpmath", cse=True),
            max(rounding_depth(d) for d in ds))


@functools.lru_cache(maxsize=64)
def _second_sides(tpl: LossTemplate) -> Any:
    """MPFR function of the template's arguments: every ``d_ck`` with the kinks' signs at -1, then at +1
    (:func:`symjac.loss._templates.kink_side`): where they differ the second derivative jumps at a kink
    whose first derivative is continuous (``[a]₊²``)."""
    ds = _second_exprs(tpl)
    return _numbers.lambdify(tpl.symbols, [kink_side(d, -1) for d in ds] + [kink_side(d, 1) for d in ds])


@functools.lru_cache(maxsize=64)
def _boundaries(tpl: LossTemplate) -> Any:
    """MPFR (vectorised) function of the template's arguments giving ``lhs − rhs`` of every
    Piecewise condition of the second derivative (huber's ``|d| − δ``): where one is 0 the
    branches meet, and the second derivative may jump (huber's does: 1 inside, 0 outside)."""
    d = sympy.diff(tpl.stable_derivatives[0], tpl.pred[0])
    sides = sorted({rel.lhs - rel.rhs for pw in d.atoms(sympy.Piecewise) for _, cond in pw.args
                    for rel in getattr(cond, "atoms", lambda *_: set())(sympy.core.relational.Relational)}, key=str)
    return _numbers.lambdify(tpl.symbols, sides) if sides else None


def _no_second_derivative(tpl: Any, cols: list[np.ndarray]) -> np.ndarray:
    """Per element: no second derivative there. Either the derivative jumps (a sign()
    argument at 0 whose Clarke hull is wider than a point: mae at d = 0, not huber at d = 0,
    where sign(d) sits in the branch not taken) or a Piecewise boundary of the second
    derivative (smooth_l1/huber at |d| = δ)."""
    at = np.asarray(tpl.at_kink(cols), dtype=bool)
    if at.any():
        kept = [c[at] for c in cols]
        lo, hi = tpl.clarke_at(kept)
        jumps = (lo != hi).any(axis=1)
        if isinstance(tpl, LossTemplate):  # or the second derivative jumps there ([a]₊² at a = 0)
            got = [_column(v, len(kept[0])) for v in _second_sides(tpl)(*kept)]
            half = len(got) // 2
            jumps |= np.any([got[i] != got[half + i] for i in range(half)], axis=0)
        at[at] = np.asarray(jumps, dtype=bool)
    if not isinstance(tpl, SoftmaxTemplate) and (sides := _boundaries(tpl)) is not None:
        for side in sides(*cols):
            at |= np.asarray(_column(side, len(at)) == 0, dtype=bool)
    return at


def _column(value: Any, n: int) -> np.ndarray:
    arr = np.asarray(value, dtype=object)
    return arr if arr.shape == (n,) else np.broadcast_to(arr, (n,)).copy()


class HessianEvaluation:
    """The exact Hessian blocks of one loss at one input (MPFR numbers, 200 bits; mpmath
    element by element for inputs beyond ``symjac.loss._numbers.LIMIT``).

    Attributes:
      ev: the first-order evaluation (:class:`~symjac.loss._evaluate.LossEvaluation`).
      blocks: (elements, C, C) ``S·r_i·∇²ℓ_i`` (C = 1 element-wise; 0 for ignored rows).
      skipped: per element (flat), left out at a kink (``skip_kinks``).
    """

    def __init__(self, ev: LossEvaluation, skip_kinks: bool = False):
        """Raises :class:`symjac.InputError` at an element on a kink, where the second derivative
        does not exist; with ``skip_kinks`` those elements are left out instead (their blocks 0,
        :attr:`skipped` marks them: the hvp check does not compare their entries)."""
        self.ev = ev
        tpl = ev.template
        n, c = ev.counted.size, tpl.classes
        counted = ev.counted.reshape(-1)
        with _numbers.context():
            self.sr = np.abs(_numbers.from_fractions(ev.factor.reshape(-1), ev.loss.scale))  # |S·r_i|
            signed = _numbers.from_fractions(ev.factor.reshape(-1), ev.loss.scale)
            kinks = _no_second_derivative(tpl, [_column(col, n) for col in ev.columns]) & counted
            self.skipped = kinks if skip_kinks else np.zeros(n, dtype=bool)
            counted = counted & ~self.skipped
            if kinks.any() and not skip_kinks:
                raise InputError(
                    f"pred{_index(ev.pred_shape, int(np.flatnonzero(kinks)[0]))} is at a kink of {ev.loss.kind} (the "
                    "derivative or its derivative jumps there): the second derivative does not exist; give inputs "
                    "off the kinks")
            limit = _numbers.number(_numbers.LIMIT)
            self.big = np.zeros(n, dtype=bool)
            for col in ev.columns:
                self.big |= np.asarray(np.abs(_column(col, n)) > limit, dtype=bool)
            cols = [_column(col, n) for col in ev.columns]
            if isinstance(tpl, SoftmaxTemplate):
                rows = tpl._rows(cols, _MPFR)  # noqa: SLF001 - p and W of every row at once
                self.p, self.w = rows.p, np.abs(rows.w_total)
                eye = np.eye(c, dtype=np.int64)
                hess = rows.w_total[:, :, None] * rows.p[:, :, None] * (eye[None] - rows.p[:, None, :])
                self.z = rows.z
            else:
                vec, _, _ = _second(tpl)
                got = [_column(v, n) for v in vec(*cols)]
                self.d, self.cond, self.run = (np.stack(got[i * c * c:(i + 1) * c * c], axis=1).reshape(n, c, c)
                                               for i in range(3))
                hess = self.d
            self.blocks = np.asarray(signed[:, None, None] * hess, dtype=object)
            self.blocks[~counted] = _numbers.number(0)
        for i in np.flatnonzero(self.big & counted):  # beyond MPFR's comfortable range: mpmath, one element
            self._element(int(i))

    def _element(self, i: int) -> None:
        ev, tpl = self.ev, self.ev.template
        with mpmath.workdps(DPS + 10):
            a = [_mp(_column(col, ev.counted.size)[i]) for col in ev.columns]
            h = ev.kind.second_derivative(tpl, *a)
            s = mpmath.mpf(ev.loss.scale.numerator) / ev.loss.scale.denominator
            f = ev.factor.reshape(-1)[i]
            sr = s * mpmath.mpf(f.numerator) / f.denominator
            with _numbers.context():
                self.blocks[i] = [[_numbers.from_mpf(sr * h[j][k]) for k in range(len(h))] for j in range(len(h))]
                if not isinstance(tpl, SoftmaxTemplate):
                    got = [_numbers.from_mpf(mpmath.mpf(x)) for x in _second(tpl)[1](*a)]
                    c2 = len(got) // 3
                    for j, arr in enumerate((self.d, self.cond, self.run)):
                        arr[i] = np.array(got[j * c2:(j + 1) * c2], dtype=object).reshape(arr.shape[1:])

    def dense(self) -> np.ndarray:
        """The full Hessian, pred's shape twice (object array of mpf)."""
        shape = self.ev.pred_shape
        n, c = self.blocks.shape[:2]
        out = np.empty((n * c, n * c), dtype=object)
        out[...] = mpmath.mpf(0)
        mp = _numbers.mpf_array(self.blocks)
        for i in range(n):
            out[i * c:(i + 1) * c, i * c:(i + 1) * c] = mp[i]
        return out.reshape(shape + shape)

    def hvp_numbers(self, v: np.ndarray) -> np.ndarray:
        """``H·v`` as MPFR numbers, (elements, C); v exact numbers (floats or Fractions) of pred's shape."""
        n, c = self.blocks.shape[:2]
        flat = np.asarray(v, dtype=object).reshape(-1)
        with _numbers.context():
            vv = np.array([_numbers.number(x) for x in flat], dtype=object).reshape(n, 1, c)
            return np.asarray((self.blocks * vv).sum(axis=-1), dtype=object)

    def hvp(self, v: np.ndarray) -> np.ndarray:
        """``H·v`` in pred's shape (mpf)."""
        return _numbers.mpf_array(self.hvp_numbers(v)).reshape(self.ev.pred_shape)

    def bound(self, v: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
        """Per entry of ``H·v``, how far a correct implementation in ``dtype`` may be (mpf; module docstring)."""
        return _numbers.mpf_array(self.bound_numbers(v, dtype))

    def bound_numbers(self, v: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
        """:meth:`bound` as MPFR numbers, in pred's shape."""
        ev, tpl = self.ev, self.ev.template
        n, c = self.blocks.shape[:2]
        counted = ev.counted.reshape(-1)
        with _numbers.context():
            u = unit_roundoff_mp(dtype)
            eta = _numbers.number(float(finfo(dtype).smallest_subnormal))
            av = np.abs(np.array([_numbers.number(float(x)) for x in np.asarray(v).reshape(-1)],
                                 dtype=object).reshape(n, c))
            one = _numbers.number(1)
            if isinstance(tpl, SoftmaxTemplate):
                top = self.z.max(axis=1)[:, None] if c else self.z
                rho = gamma_mp(c + 4, u) + 2 * u * np.abs(self.z - top).max(axis=1)[:, None]
                dot = (self.p * av).sum(axis=1)[:, None]
                sw = self.sr[:, None] * self.w
                out = sw * self.p * (av + dot) * (2 * rho + gamma_mp(3 * c + 9, u)) \
                    + (c + 8) * eta * np.maximum(one, sw)
            else:
                p_bits = int(finfo(dtype).nmant) + 1
                den = ev.denominator
                k_r = 2 + ev.denominator_ops + (0 if den.denominator == 1 and den.numerator <= 2**p_bits else 1)
                # a row of C classes sums C products d_jk·v_k: C - 1 more roundings (none element-wise)
                k = tpl.loss_depth + tpl.derivative_depth + _second(tpl)[2] + k_r + 1 + (c - 1)
                g = gamma_mp(k, u)
                amp = one
                for col in ev.columns[len(tpl.pred) + len(tpl.label):]:
                    amp = max([amp] + [abs(x) for x in _column(col, n)])
                sr, vk = self.sr[:, None], av[:, None, :]
                body = u * (1 + g) * np.abs(self.run) + g * (np.abs(self.d) + np.abs(self.cond))  # (n, c, c)
                row_v = av.sum(axis=1)[:, None]
                out = sr * (body * vk).sum(axis=2) + k * eta * np.maximum(one, sr * amp) * np.maximum(one, row_v)
            out = np.asarray(out, dtype=object)
            out[~counted] = _numbers.number(0)
        return out.reshape(ev.pred_shape)


def hessian_of(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> HessianEvaluation:
    """The exact Hessian blocks of a ``loss`` its entry checked (validating the inputs as
    :func:`symjac.loss_value` does)."""
    return HessianEvaluation(evaluate_checked(loss, pred, label, upstream, values=False, derivatives=True))


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
    return hessian_of(check_loss(loss), pred, label, upstream).dense()


def loss_hvp(loss: Loss, pred: Any, label: Any, v: Any, upstream: Any = None) -> np.ndarray:
    """The exact ``H·v`` (:func:`loss_hessian` times a direction ``v`` of pred's shape), mpf values."""
    h = hessian_of(check_loss(loss), pred, label, upstream)
    direction = np.asarray(v)
    if direction.shape != h.ev.pred_shape:
        raise InputError(f"v has shape {direction.shape}; pred's shape is {h.ev.pred_shape}")
    return h.hvp(direction)
