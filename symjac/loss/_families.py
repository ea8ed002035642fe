"""A loss's extra input families, extreme magnitudes and non-finite predictions, and the
exact side of a prediction that holds NaN or ±inf.

Beyond its default inputs (:func:`symjac.loss._inputs.default_inputs`) :func:`symjac.verify_loss`
runs the families of :data:`symjac.loss._domain.FAMILIES` that a kind has
(:func:`families_of`), each built from its definition's rules (:mod:`symjac.loss._kinds`):

- ``extreme`` (:meth:`~symjac.loss._kind.LossKind.extreme_inputs`): magnitudes at which the
  exact values are finite in the dtype and so is a correct float evaluation, while a naive
  one overflows, takes the log of an underflowed 0 or cancels (softmax_ce exponentiating
  without the max shift, ``log(softmax(z))``, sigmoid_ce through ``e^-z``, ...). Kinds whose
  float evaluation overflows only where their exact value does have none (constant_derivative).
- ``nonfinite`` (:func:`nonfinite_inputs`, the kind's
  :class:`~symjac.loss._domain.Convention`): NaN, +inf and -inf predictions in some elements
  and finite ones in the others. A loss is separable: a non-finite entry reaches its own
  element (its row for softmax_ce) and nothing else, so every other element keeps its exact
  values; at the element itself the convention says what is accepted.

:class:`Nonfinite` is what the exact side knows about a prediction with non-finite entries:
where they are, the entries they reach, and a finite *stand-in* the exact route evaluates
(NaN replaced by 1/2, inside every kind's domain; ±inf by ±2^64, where each kind's derivative
is its limit at ±inf to far more digits than any dtype holds, and its rounding bound is the
bound of that limit's evaluation); :func:`element_limits` gives the limits themselves.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.loss._domain import FAMILIES, index
from symjac.loss._inputs import _default_inputs, completed
from symjac.loss._spec import Loss, kind_of
from symjac.loss._templates import LossTemplate

#: What the stand-in holds for a NaN prediction (inside every kind's domain) and for ±inf.
PLACEHOLDER = 0.5
STAND_IN = 2.0**64
#: The codes of :attr:`Nonfinite.codes`: a finite entry, NaN, +inf, -inf.
FINITE, NAN, POS, NEG = 0, 1, 2, 3
#: How messages and stats name each non-finite value.
NAMES = {NAN: "nan", POS: "inf", NEG: "-inf"}


def families_of(loss: Loss) -> tuple[str, ...]:
    """The extra families ``loss``'s kind has (``extreme`` where it has extreme inputs)."""
    kind = kind_of(loss)
    return tuple(f for f in FAMILIES if f != "extreme" or kind.extreme_inputs(loss, np.dtype(np.float64)) is not None)


def family_inputs(loss: Loss, family: str, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray | None,
                                                                       np.ndarray | None] | None:
    """``(pred, label, upstream)`` of one family in dtype ``dt`` (the upstream for
    ``reduction="none"``, else None), or None where the kind has no such family."""
    if family == "extreme":
        got = kind_of(loss).extreme_inputs(loss, dt)
        return None if got is None else completed(loss, *got)
    if family == "nonfinite":
        return nonfinite_inputs(loss)
    raise ValueError(f"family={family!r} is not one of {FAMILIES}")


def nonfinite_inputs(loss: Loss) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The default inputs with the kind's non-finite values in some elements: an element-wise
    kind's entries (0, 1), (1, 0) and (1, C - 1) hold NaN, +inf and -inf (as many as its
    convention takes); a class axis kind gets one more row per value, a copy of a counted
    default row with the value at class 1, 0 and C - 1. Every other element stays finite."""
    kind = kind_of(loss)
    values = kind.nonfinite(loss).values
    pred, label, _ = _default_inputs(loss)
    pred = pred.astype(np.float64)
    c = pred.shape[-1]
    if not kind.class_axis:
        for v, at in zip(values, ((0, 1 % c), (1, 0), (1, c - 1))):
            pred[at] = v
        return completed(loss, pred, label)
    counted = [r for r in range(pred.shape[0]) if not (label is not None and kind.labels_are_indices(loss)
                                                         and label[r] == loss.ignore_index)]
    r = counted[0]
    rows = [pred[r].copy() for _ in values]
    for row, v, k in zip(rows, values, (1 % c, 0, c - 1)):
        row[k] = v
    pred = np.vstack([pred] + rows)
    if label is not None:  # a class-axis kind without a label (triplet_margin) has none to copy
        label = np.concatenate([label, np.repeat(label[r:r + 1], len(values), axis=0)])
    return completed(loss, pred, label)


@dataclasses.dataclass(frozen=True)
class Nonfinite:
    """Where a prediction holds NaN or ±inf, and the finite stand-in the exact route evaluates.

    Attributes:
      codes: per pred entry :data:`FINITE`, :data:`NAN`, :data:`POS` or :data:`NEG`.
      entries: per pred entry, whether a non-finite entry reaches its derivative (its own element, the
        whole row for a class axis unless the kind's rows are separable: ``separable_rows``).
      elements: per loss element (flat), whether it holds a non-finite entry.
      standin: pred (float64) with NaN replaced by :data:`PLACEHOLDER` and ±inf by ±:data:`STAND_IN`.
    """

    codes: np.ndarray
    entries: np.ndarray
    elements: np.ndarray
    standin: np.ndarray

    @classmethod
    def of(cls, loss: Loss, pred: np.ndarray) -> Nonfinite | None:
        """The split of a float ``pred``, or None when every entry is finite.

        Raises:
          InputError: a non-finite value the kind's convention does not take (±inf where the
            predictions lie in a bounded interval), named with its index.
        """
        if np.isfinite(np.asarray(pred)).all():  # no float64 copy of a large finite input
            return None
        p = np.asarray(pred, dtype=np.float64)
        kind = kind_of(loss)
        codes = np.where(np.isnan(p), NAN, np.where(p == np.inf, POS, np.where(p == -np.inf, NEG, FINITE)))
        taken = {NAN if math.isnan(v) else POS if v > 0 else NEG for v in kind.nonfinite(loss).values}
        outside = ~np.isin(codes, [FINITE, *taken])
        if outside.any():
            j = int(np.flatnonzero(outside.reshape(-1))[0])
            raise InputError(
                f"pred{index(p.shape, j)} = {p.reshape(-1)[j]} is outside kind={loss.kind!r}'s domain, which takes "
                f"{', '.join(NAMES[t] for t in sorted(taken))} as its only non-finite prediction(s)")
        if kind.class_axis:
            rows = (codes != FINITE).reshape(-1, p.shape[-1]).any(axis=1)
            # a row's sum of per-class terms (separable_rows): the entry reaches its own derivative only
            entries = codes != FINITE if kind.separable_rows else \
                np.repeat(rows[:, None], p.shape[-1], axis=1).reshape(p.shape)
        else:
            rows, entries = (codes != FINITE).reshape(-1), codes != FINITE
        standin = np.where(codes == NAN, PLACEHOLDER, np.where(codes == POS, STAND_IN,
                                                               np.where(codes == NEG, -STAND_IN, p)))
        return cls(codes, entries, rows, standin)

    def limit_slot(self, element: int, per: int) -> tuple[int, int] | None:
        """``(slot, sign)`` of an element's one ±inf entry (``per`` entries an element), or
        None where it holds a NaN or more than one non-finite entry (no limit is taken)."""
        codes = self.codes.reshape(-1)[element * per:(element + 1) * per]
        bad = np.flatnonzero(codes != FINITE)
        if bad.size != 1 or codes[bad[0]] == NAN:
            return None
        return int(bad[0]), 1 if codes[bad[0]] == POS else -1


def constant_derivative(template: Any) -> bool:
    """Does no derivative of the template depend on its predictions (kld with ``log_input``:
    ``-P``; constant_derivative: 1)? Then its value at a NaN prediction is its value anywhere."""
    if not isinstance(template, LossTemplate):  # softmax_ce's class-generic template: it does
        return False
    return not any(h.free_symbols & set(template.pred) for h in template.derivatives)


def element_limits(loss: Loss, template: Any, args: list[Fraction], slot: int, sign: int) -> tuple[Any, list[Any]]:
    """``(ℓ, [dℓ/dz_c])`` of one element as its prediction ``slot`` goes to ``sign``·∞ (the
    kind's :meth:`~symjac.loss._kind.LossKind.limits`), ``args`` its template arguments."""
    return kind_of(loss).limits(loss, template, args, slot, sign)
