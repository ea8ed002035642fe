"""Exact reading of a loss's inputs against a domain, and per-class option values.

The kinds (:mod:`symjac.loss._kinds`) state their domains with :func:`check_range`
and their option values with :func:`per_class`; the evaluator and the verifier name
entries with :func:`index`.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray


def index(shape: tuple[int, ...], flat: int) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def value_at(values: ExactArray, flat: int) -> Fraction:
    """One element of an exact array as a Fraction (for a message)."""
    return Fraction(int(values.num.reshape(-1)[flat]), values.den)


def check_range(name: str, values: ExactArray, ok: Callable[[np.ndarray, int], Any], what: str, why: str) -> None:
    """Raise naming the first element (in C order) outside the domain: ``ok(num, den)`` says,
    elementwise, whether ``num/den`` is inside (``den > 0``, so ``0 <= v <= 1`` is
    ``0 <= num <= den``: exact integer comparisons, vectorised)."""
    inside = np.asarray(ok(values.num, values.den), dtype=bool).reshape(-1)
    if not inside.all():
        i = int(np.flatnonzero(~inside)[0])
        where = index(values.shape, i)
        raise InputError(f"{name}{where} = {float(value_at(values, i))!r} is outside {what}: {why}")


def probability_labels(kind: str, t: ExactArray | None) -> None:
    """Labels in [0, 1] (probabilities)."""
    assert t is not None
    check_range("label", t, lambda n, d: (n >= 0) & (n <= d), "[0, 1]", f"kind={kind!r} takes probability labels")


def per_class(name: str, values: tuple[Fraction, ...] | None, classes: int, default: Fraction) -> list[Fraction]:
    """An option's value per class along pred's last axis (one value broadcast)."""
    if values is None:
        return [default] * classes
    if len(values) == 1:
        return list(values) * classes
    if len(values) != classes:
        raise SpecError(
            f"{name} has {len(values)} entries but pred has {classes} classes along its last axis: "
            f"give one number or {classes}"
        )
    return list(values)
