"""An operator's settings as data: what the native wire's settings lines and the golden
metadata's ``operator`` object both say (one serializer, so the two never disagree).

The spec's fields are written generically (every field that is set, under its own name;
a loss option only where it differs from its kind's default, :meth:`symjac.Loss.at_default`),
after the ``operator`` type (``pool``, ``adaptive_pool``, ``global_pool``, ``loss``) and
followed, for a pool at one input shape, by its ``rank`` (where the spec has no such
field) and resolved ``pads`` (``[low, high]`` per spatial axis; none for windows given as a
table, RoI pooling's). Nothing here depends on
which operator it is: a new mode or loss kind, or a new field, needs no change.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.io._specwrite import operator_table
from symjac.loss._spec import Loss
from symjac.pool._spec import PoolSpec


def operator_kind(spec: Any) -> str:
    """The ``operator`` value of a spec: its spec file's ``[operator] kind`` (``pool``,
    ``adaptive_pool``, ``roi_align``, ``max_unpool``, ..., ``loss``)."""
    return "loss" if isinstance(spec, Loss) else str(operator_table(spec)["kind"])


def operator_fields(spec: PoolSpec | Loss, pads: tuple[tuple[int, int], ...] | None = None) -> dict[str, Any]:
    """``{"operator": type, field: value, ..., "rank": n, "pads": ((lo, hi), ...)}``, in that
    order: the spec's fields that are set (values as the spec holds them: ints, bools,
    words, Fractions, tuples; a loss option at its kind's default is left out, as if unset),
    and for a pool the resolved ``pads`` at one input shape (none for a table geometry, whose
    ``rank`` is its map's)."""
    out: dict[str, Any] = {"operator": operator_kind(spec)}
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        at_default = getattr(spec, "at_default", None)  # a loss's options, RoI Align's reduction
        if value is not None and not (at_default is not None and at_default(field.name)):
            out[field.name] = value
    if pads is not None and not isinstance(spec, Loss):
        out.setdefault("rank", int(spec.rank))  # GlobalPool has it as a field
        if pads:  # windows given as a table (RoI pooling, RoI Align) have no padding to state
            out["pads"] = tuple(tuple(int(v) for v in p) for p in pads)
    return out


def json_value(value: Any) -> Any:
    """A setting as JSON: ints and bools as they are, an exact number that is no integer
    as its text ``"p/q"`` (never a rounded float), tuples as lists."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else str(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    return value if isinstance(value, (str, float)) or value is None else str(value)


def operator_json(spec: PoolSpec | Loss, pads: tuple[tuple[int, int], ...] | None = None) -> dict[str, Any]:
    """:func:`operator_fields` as a JSON object."""
    return {k: json_value(v) for k, v in operator_fields(spec, pads).items()}


def golden_operator(case: Any, geometry: Any = None, divisors: bool = False) -> dict[str, Any]:
    """The golden metadata's ``operator`` object of a spec-file case (docs/golden-data.md):
    :func:`operator_json` of its spec at the case's input shape, with, for a pool whose windows
    can tie (:meth:`Operator.tie_rule`: max pooling, RoI max pooling), the ``tie`` policy its
    Jacobian and ``dx`` follow (symjac's default ``first`` unless the case names one) and, when ``divisors`` is asked, every
    output window's divisor (flat, C order over the output's spatial positions)."""
    if geometry is None:
        return operator_json(case.operator)
    out = operator_json(case.operator, geometry.pads)
    if (tie := geometry.operator.tie_rule(case.tie)) is not None:
        out["tie"] = tie
    if divisors:
        out["divisors"] = [int(d) for d in np.asarray(geometry.divisor).reshape(-1)]
    return out
