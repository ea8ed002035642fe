"""Reading a loss spec's fields: exact numbers and per-class weights, each named in its error.

Shared by the spec (:mod:`symjac.loss._spec`) and the kinds' own validation
(:mod:`symjac.loss._kinds`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError
from symjac._exact import to_fraction

#: Significant decimal digits of every evaluation (MPFR at 200 bits, mpmath beyond 2^24), at any magnitude of the
#: logits: the exact values come from forms in which nothing cancels (see
#: symjac.loss._kinds: sigmoid_ce via log1p(e^±z), softmax_ce shifted by its max).
DPS = 60


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def number(field: str, value: Any, what: str) -> Fraction:
    try:
        return to_fraction(value, field)
    except InputError:
        raise SpecError(f"{field}={value!r} is not valid: give {what}") from None


def weights(field: str, value: Any) -> tuple[Fraction, ...]:
    what = "a number >= 0 or a sequence of numbers >= 0 (one per class, along the last axis)"
    items = tuple(value) if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, str) else (value,)
    if not items:
        raise SpecError(f"{field}={value!r} is not valid: it is empty; give {what}")
    out = tuple(number(field, v, what) for v in items)
    for v in out:
        if v < 0:
            raise SpecError(f"{field}={value!r} is not valid: {v} < 0; give {what}")
    return out
