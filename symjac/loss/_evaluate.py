"""Losses: a validated spec, exact SymPy expressions and derivatives, mpmath values.

A :class:`Loss` says *which* loss is meant (kind, reduction, loss scale S, options);
its kind's definition (:mod:`symjac.loss._kinds`) gives every rule that differs per
kind. For every element-wise kind SymPy builds the per-element loss ``ℓ`` once over
symbols for the prediction, the label and the options, and differentiates it with
:func:`sympy.diff`; nothing is differentiated by hand. ``softmax_ce`` is evaluated
class-generically (:mod:`symjac.loss._softmax`): per class, short forms in the class's
own numbers and per-row sums, which SymPy proves are ℓ's derivatives for every number
of classes at once, so no SymPy work grows with C. The expressions are lowered
with :func:`sympy.lambdify` to MPFR (:mod:`symjac.loss._numbers`: every element of
the input at once, each operation correctly rounded to 200 bits) and
evaluated at ``DPS`` = 60 significant digits on the exact rational values of the inputs
(:class:`symjac.exact.ExactArray`); elements with an input beyond 2^24 in magnitude
(beyond MPFR's exponent range once exponentiated) go through mpmath, element by
element (:mod:`symjac.loss._elements`). The inputs are read exactly and the reduction
is exact, rational factors (:mod:`symjac.loss._inputs`).

Values returned by :func:`loss_value`, :func:`loss_derivative` and
:func:`loss_derivative_set` are ``mpmath.mpf`` numbers (a scalar, or an ``object``
ndarray of them) carrying at least ``DPS`` digits; ``float(v)`` or
:func:`to_numpy` rounds them to a dtype.

The loss-scale contract: the derivative a layer emits is ``d(S·L)/dpred = S·dL/dpred``.

Example (seed 003, S = 8, sigmoid cross-entropy, logit 0, label 1)::

    >>> import symjac
    >>> loss = symjac.Loss("sigmoid_ce", scale=8)
    >>> [float(v) for v in symjac.loss_derivative(loss, [0.0], [1.0])]
    [-4.0]
"""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._exact import ExactArray, round_fraction
from symjac.check._rounding import finfo
from symjac.loss import _numbers
from symjac.loss._elements import element_values, evaluate_elements, loss_template
from symjac.loss._inputs import (complete_inputs, default_inputs, numbers_of, read_labels, read_pred,
                                 reduction_factors, columns)
from symjac.loss._kind import LossKind, Template
from symjac.loss._spec import DPS, Loss, check_loss, kind_of

__all__ = ["DPS", "LossEvaluation", "complete_inputs", "default_inputs", "element_values", "evaluate", "loss_derivative",
           "loss_derivative_set", "loss_template", "loss_value", "to_numpy"]

# -------------------------------------------------------------------- evaluation


@dataclasses.dataclass(frozen=True, eq=False)
class LossEvaluation:
    """Everything exact about one loss at one input, at :data:`DPS`-digit precision.

    Values are MPFR numbers (:mod:`symjac.loss._numbers`) in ``object`` arrays; the
    public functions below hand them out as mpmath numbers.

    Shapes: ``pred_shape``; the element shape is ``pred_shape`` (element-wise kinds)
    or ``pred_shape[:-1]`` (``softmax_ce``: one element per row).

    Attributes:
      loss: the spec.
      kind: its kind's definition (:mod:`symjac.loss._kinds`).
      template: the SymPy template used.
      pred: exact prediction (an :class:`ExactArray`: integer numerators over one denominator).
      columns: the template's arguments (MPFR numbers, exact for binary floats), one
        array per template symbol over the flattened elements (see :func:`element_values`).
      counted: per element, False for rows equal to ``ignore_index``.
      elements: ``ℓ_i`` (0 for ignored rows).
      element_cond: ``Σ_m |∂ℓ_i/∂x_m|·|x_m|`` (None unless ``bounds``).
      element_run: :func:`running_error` of ``ℓ_i`` in units of u (None unless ``bounds``).
      h: per prediction entry, the unreduced unscaled ``dℓ_i/dz_j``.
      h_cond: ``Σ_m |∂h_j/∂x_m|·|x_m|`` (None unless ``bounds``).
      h_run: :func:`running_error` of ``h_j`` in units of u (None unless ``bounds``).
      h_lo / h_hi: the Clarke set of ``dℓ_i/dz_j`` (equal to ``h`` where smooth).
      factor: per element, the exact reduction factor ``r_i`` (1/D, 1/B, 1, or the
        upstream ``u_i`` for ``"none"``; 0 for ignored rows).
      denominator: D (or B, or 1).
      denominator_ops: roundings an implementation needs to form D in floats
        (0 if D is an integer count, else the terms of the weight sum).
      dps: digits used.
    """

    loss: Loss
    kind: LossKind
    template: Template
    pred: ExactArray
    columns: list[np.ndarray]
    counted: np.ndarray
    elements: np.ndarray
    element_cond: np.ndarray | None
    element_run: np.ndarray | None
    h: np.ndarray
    h_cond: np.ndarray | None
    h_run: np.ndarray | None
    h_lo: np.ndarray
    h_hi: np.ndarray
    factor: np.ndarray
    denominator: Fraction
    denominator_ops: int
    dps: int

    @property
    def pred_shape(self) -> tuple[int, ...]:
        return tuple(self.pred.shape)

    @property
    def element_shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)

    def expand(self, per_element: np.ndarray) -> np.ndarray:
        """Broadcast a per-element array to pred's shape (repeat over the class axis)."""
        if not self.kind.class_axis:
            return per_element
        return np.repeat(per_element[..., None], self.template.classes, axis=-1)

    def value(self) -> Any:
        """``L``: one number for reduced losses, an object array of ``ℓ_i`` for ``"none"``."""
        if self.loss.reduction == "none":
            return self.elements.copy()
        with _numbers.context():
            return _numbers.total(self.elements.reshape(-1)) / _numbers.number(self.denominator)

    def derivative(self, scale: Fraction | None = None) -> np.ndarray:
        """``S·r_i·dℓ_i/dz_j`` in pred's shape (S = the spec's scale unless given)."""
        s = self.loss.scale if scale is None else scale
        return self._scaled(self.h, s)

    def derivative_set(self, scale: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Clarke set of the scaled derivative, elementwise ``[lo, hi]``."""
        s = self.loss.scale if scale is None else scale
        if self.smooth:
            d = self._scaled(self.h, s)
            return d, d
        a, b = self._scaled(self.h_lo, s), self._scaled(self.h_hi, s)
        return np.minimum(a, b), np.maximum(a, b)

    @functools.cached_property
    def smooth(self) -> bool:
        """No entry at a kink: the Clarke set is the derivative everywhere."""
        return bool(np.all(self.h_lo == self.h) and np.all(self.h_hi == self.h))

    @functools.cached_property
    def factor_numbers(self) -> np.ndarray:
        """:attr:`factor` as MPFR numbers, in pred's shape (repeated over softmax_ce's classes)."""
        with _numbers.context():
            return _numbers.from_fractions(self.expand(self.factor))

    def _scaled(self, h: np.ndarray, s: Fraction) -> np.ndarray:
        with _numbers.context():
            return np.asarray(self.factor_numbers * _numbers.number(s) * h, dtype=object)


def evaluate(
    loss: Loss,
    pred: Any,
    label: Any = None,
    upstream: Any = None,
    *,
    values: bool = True,
    derivatives: bool = True,
    bounds: bool = False,
) -> LossEvaluation:
    """Validate the inputs and evaluate the loss exactly (mpmath, >= DPS digits).

    Args:
      loss: the spec.
      pred: predictions (logits, probabilities, ... per kind), at least 1-D.
      label: labels (see :class:`Loss`); ignored (may be None) for ``constant_derivative``.
      upstream: ``"none"``: the per-element upstream gradient (default all ones);
        other reductions: None or one number multiplying the derivative.
      values / derivatives / bounds: what to compute (bounds: the condition sums
        the verifier's error bounds need).

    Raises:
      SpecError: the spec does not fit the input (e.g. weight length vs classes).
      InputError: an input is malformed or outside the loss's domain; the message
        names the argument and the first offending index.
    """
    check_loss(loss)
    return evaluate_checked(loss, pred, label, upstream, values=values, derivatives=derivatives, bounds=bounds)


def evaluate_checked(loss: Loss, pred: Any, label: Any = None, upstream: Any = None, *, values: bool = True,
                     derivatives: bool = True, bounds: bool = False) -> LossEvaluation:
    """:func:`evaluate` of a ``loss`` already known to be a :class:`Loss` (the verifier checks it once)."""
    z = read_pred(pred)
    kind = kind_of(loss)
    classes = kind.classes(tuple(z.shape))
    tpl = kind.template(loss, classes)
    element_shape = kind.element_shape(tuple(z.shape))
    t, counted, indices = read_labels(loss, z, label, element_shape, classes)
    kind.check_domain(loss, z, t)
    params = kind.params(loss, z, classes)
    factor, den, denominator_ops = reduction_factors(loss, upstream, element_shape, indices, counted, classes)
    with _numbers.context():
        cols = columns(tpl, kind.class_axis, numbers_of(pred, z), None if t is None else numbers_of(label, t), params,
                       element_shape)
    fields = evaluate_elements(tpl, cols, counted, tuple(z.shape), values, derivatives, bounds)
    return LossEvaluation(loss=loss, kind=kind, template=tpl, pred=z, columns=cols, counted=counted, factor=factor,
                          denominator=den, denominator_ops=denominator_ops, dps=DPS, **fields)


def loss_value(loss: Loss, pred: Any, label: Any = None) -> Any:
    """The exact loss ``L`` (unscaled), at >= :data:`DPS` significant digits.

    Returns:
      ``mpmath.mpf`` for ``"mean"``, ``"batch_mean"``, ``"sum"``; for ``"none"`` an
      ``object`` ndarray of ``mpf``, one per loss element.

    Raises:
      SpecError, InputError: as :func:`evaluate`.

    Example::

        >>> import symjac, mpmath
        >>> v = symjac.loss_value(symjac.Loss("softmax_ce"), [[0.0, 0.0]], [[1.0, 0.0]])
        >>> mpmath.nstr(v, 50)   # -log softmax([0, 0])_0 = log 2
        '0.69314718055994530941723212145817656807550013436026'
    """
    return value_of(check_loss(loss), pred, label)


def value_of(loss: Loss, pred: Any, label: Any = None) -> Any:
    """:func:`loss_value` of a ``loss`` its entry checked (golden data)."""
    kind = kind_of(loss)
    if kind.whole:  # a sequence loss (ctc): its own exact evaluation
        return _numbers.to_mpf(kind.evaluate_whole(loss, pred, label).value())
    return _numbers.to_mpf(evaluate_checked(loss, pred, label, values=True, derivatives=False).value())


def loss_derivative(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> np.ndarray:
    """The exact emitted derivative ``S·dL/dpred`` (``S·Σ_i u_i·dℓ_i/dpred`` for ``"none"``).

    At a kink (``mae`` at ``pred == label``) the minimal-norm element of the Clarke
    set (0) is returned; :func:`loss_derivative_set` gives the whole set.

    Returns:
      An ``object`` ndarray of ``mpmath.mpf`` of pred's shape.

    Raises:
      SpecError, InputError: as :func:`evaluate`.
    """
    return derivative_of(check_loss(loss), pred, label, upstream)


def derivative_of(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> np.ndarray:
    """:func:`loss_derivative` of a ``loss`` its entry checked (golden data, conform's exact values)."""
    kind = kind_of(loss)
    if kind.whole:  # a sequence loss (ctc): its own exact evaluation (NaN where there is no derivative)
        return _numbers.mpf_array(kind.evaluate_whole(loss, pred, label, upstream).derivative())
    return _numbers.mpf_array(evaluate_checked(loss, pred, label, upstream, values=False, derivatives=True).derivative())


def loss_derivative_set(
    loss: Loss, pred: Any, label: Any = None, upstream: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """The Clarke set of ``S·dL/dpred`` as elementwise intervals ``(lo, hi)``.

    ``lo == hi`` wherever the loss is differentiable. (Every loss here is separable
    across elements, so the Clarke set is the product of these intervals.)
    """
    lo, hi = evaluate(loss, pred, label, upstream, values=False, derivatives=True).derivative_set()
    return _numbers.mpf_array(lo), _numbers.mpf_array(hi)


def to_numpy(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """Round mpf values (scalar or object array) to ``dtype``, to nearest.

    Rounds through an exact binary fraction of the mpf, so there is no double
    rounding through float64; values beyond the dtype's range become +-inf (IEEE
    round to nearest), not an OverflowError.
    """
    dt = np.dtype(dtype)
    info = finfo(dt)  # bfloat16 included
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.size, dtype=dt)
    for i, v in enumerate(arr.reshape(-1)):
        v = v if isinstance(v, mpmath.mpf) else _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)
        if not mpmath.isfinite(v):  # inf and nan carry no binary fraction
            out[i] = float(v)
            continue
        sign, man, exp, bc = v._mpf_  # exact binary value; man_exp would drop the sign
        if man and exp + bc < int(info.minexp) - int(info.nmant) - 1:
            # |v| < 2^(exp+bc) <= η/2 (half the smallest subnormal): rounds to a signed
            # zero, and 2**exp of a 1e300-sized logit's e^-|z| would never finish
            out[i] = -dt.type(0) if sign else dt.type(0)
            continue
        if man and exp + bc > int(info.maxexp) + 1:  # |v| >= 2^(maxexp+1): beyond max + ulp/2
            out[i] = dt.type(-np.inf if sign else np.inf)
            continue
        f = (-1 if sign else 1) * Fraction(int(man)) * (Fraction(2) ** int(exp))
        out[i] = round_fraction(f, dtype)
    return out.reshape(arr.shape)
