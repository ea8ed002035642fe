"""Exact reading of a loss's inputs against a domain, per-class option values, and the extra families' rules.

The kinds (:mod:`symjac.loss._kinds`) state their domains with :func:`check_range`
and their option values with :func:`per_class`; the evaluator and the verifier name
entries with :func:`index`. Beyond the finite domain, each kind states what it answers
at a non-finite prediction (:class:`Convention`), and its extreme-magnitude inputs are
built from the dtype's range (:func:`overflow_logit`, :func:`square_overflow`,
:func:`near_edge`): :mod:`symjac.loss._families` builds both families from these rules.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray
from symjac.check._rounding import finfo


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


# ------------------------------------------------------------------ the extra input families' rules

#: The families of inputs :func:`symjac.verify_loss` runs beyond its default inputs
#: (:mod:`symjac.loss._families`): extreme magnitudes, and NaN/±inf predictions.
FAMILIES = ("extreme", "nonfinite")

#: The answers a kind's :class:`Convention` may accept at a NaN prediction entry besides NaN.
NAN_POLICIES = {
    "nan": "NaN (IEEE propagation)",
    "constant": "the exact derivative, where it does not depend on that entry",
    "between_limits": "a value between the derivative's limits at -inf and +inf (a sign or comparison of NaN)",
    "zero": "0 (a clip of the input to the domain, whose derivative is 0 outside it)",
    "one_side": "the loss and every derivative of the element at their limits as the entry goes to -inf, or all at "
                "+inf (a hinge reading its comparison with NaN as false)",
}


@dataclasses.dataclass(frozen=True)
class Convention:
    """What a kind answers at a non-finite prediction: the ``nonfinite`` family's rule.

    Every kind accepts, at an entry whose element holds a NaN, the derivative NaN and the
    loss NaN; at an element whose one non-finite entry is ±inf, NaN or the limit of the
    derivative and of the loss as that entry goes to ±inf (SymPy's, or the kind's own
    :meth:`symjac.loss._kind.LossKind.limits`); where an element's factor is 0 (an ignored
    row), 0 as well. Every other element keeps its exact finite values within their bound:
    a loss is separable, so a non-finite entry reaches its own element (its row for
    softmax_ce) and nothing else. The derivative's own answer is also accepted where it
    does not depend on the entry (kld with ``log_input``: ``-P``; constant_derivative: 1).

    Attributes:
      values: the non-finite predictions the family holds and :func:`symjac.verify_loss`
        accepts (``nan``, ``inf``, ``-inf``); a kind whose predictions lie in a bounded
        interval takes NaN only (±inf is outside its domain: an InputError, as for 2).
      at_nan: answers accepted for the derivative at a NaN entry besides NaN
        (:data:`NAN_POLICIES`).
      refuse: raising on a non-finite prediction is accepted too (it is outside the
        kind's domain, which an implementation may check, as PyTorch's does).
      evidence: what PyTorch, JAX/optax and TensorFlow/Keras do, measured (docs and tests).
    """

    values: tuple[float, ...] = (math.nan, math.inf, -math.inf)
    at_nan: tuple[str, ...] = ()
    refuse: bool = False
    evidence: str = ""


def overflow_logit(dt: np.dtype[Any]) -> float:
    """The least power of two ``M`` with ``e^M`` beyond the dtype's largest finite value: 16
    in float16, 128 in float32 and bfloat16, 1024 in float64. An exponential of a logit of
    this size overflows unless it is shifted first."""
    return float(2.0 ** math.ceil(math.log2(math.log(float(finfo(dt).max)))))


def square_overflow(dt: np.dtype[Any]) -> float:
    """A power of two ``G`` whose square overflows the dtype while ``4G`` does not:
    ``2^(e/2 + e/8)`` for the dtype's largest exponent e (2^10 in float16, 2^80 in float32
    and bfloat16, 2^640 in float64)."""
    e = int(finfo(dt).maxexp)
    return float(2.0 ** (e // 2 + e // 8))


def near_edge(dt: np.dtype[Any]) -> tuple[float, float]:
    """Probabilities ``(e0, e1)``: ``e0`` close to 0 and ``1 - e1`` close to 1, exact in the dtype:
    ``e0 = 2^-min(30, e - 5)`` (e the dtype's largest exponent: ``1/e0`` stays 2^5 below its
    largest value, room for a loss scale and weights however an implementation orders them;
    2^-11 in float16, 2^-30 in bfloat16, float32 and float64) and ``e1 = 2^-min(30, p)`` (p its
    precision: 2^-11 in float16, 2^-8 in bfloat16, 2^-24 in float32, 2^-30 in float64). Where
    the range allows, both lie beyond the 1e-7 (and 1e-8) a clip of the input to ``[ε, 1 - ε]``
    takes away, and short of PyTorch's binary_cross_entropy backward, which divides by
    ``max(p(1 - p), 1e-12)`` (given inputs nearer 0 show that)."""
    info = finfo(dt)
    return float(2.0 ** -min(30, int(info.maxexp) - 5)), float(2.0 ** -min(int(info.nmant) + 1, 30))
