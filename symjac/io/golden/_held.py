"""The input each dtype holds: golden data at a dtype is exact for the input as that dtype
holds it, never for one it cannot hold.

An implementation computing in float32 sees its inputs in float32: an explicit ``x = 0.1`` as
the float32 nearest 1/10, a generated family as the family's float32 values (``near_ties``
distinct in float32, not float64 values that tie once rounded). So every golden value at a
dtype (forward, gradient, Jacobian, tie arrays, bounds) is computed from those inputs: a tie
that only appears after rounding is a tie there, with the tie arrays every tied case has.

A golden file holds one input, exact in each of its dtypes. When the requested dtypes all hold
the same input the case is written once, as before; when they do not, once per dtype, named
``<case>__<dtype>`` (:func:`split`); :func:`file_stems` names the files and refuses names
that would overwrite each other.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from symjac._errors import SpecError
from symjac.io._specfile import held, pool_input


def held_inputs(case: Any, dtype: str) -> dict[str, np.ndarray]:
    """The case's inputs as ``dtype`` holds them (object arrays of Fractions): pooling's ``x``
    and ``dy`` (generated in the dtype, or rounded to it), a loss's ``pred``, ``label`` (class
    indices as they are) and ``upstream``, defaults filled in and rounded to it.

    Raises:
      SpecError: an explicit value is beyond the dtype's range.
    """
    if case.is_scatter:
        from symjac.io.golden._unpool import unpool_input

        _, x, dy = unpool_input(case, dtype=dtype)
        return {"x": x, "dy": dy}
    if not case.is_loss:
        _, x, dy = pool_input(case, dtype=dtype)
        return {"x": x, "dy": dy}
    from symjac._exact import ExactArray
    from symjac.loss._inputs import complete_inputs
    from symjac.loss._spec import kind_of

    pred, label, upstream = complete_inputs(case.operator, case.inputs.get("pred"), case.inputs.get("label"),
                                            case.inputs.get("upstream"))
    out = {"pred": pred, "label": label, "upstream": upstream}
    indices = kind_of(case.operator).labels_are_indices(case.operator)
    exact = {name: ExactArray.from_any(values, name).to_fractions() for name, values in out.items() if values is not None}
    return {name: values if name == "label" and indices else held(values, dtype, f"{case.source}: case {case.name!r} [input].{name}")
            for name, values in exact.items()}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k]) for k in a)


def split(case: Any, dtypes: list[str]) -> list[tuple[Any, list[str], str]]:
    """``(case at the inputs its dtypes hold, those dtypes, file-name suffix)``: one entry with
    every dtype and no suffix when they all hold the same input, else one per dtype, suffixed
    ``__<dtype>``. Each case's inputs are explicit (``x``, ``dy`` / ``pred``, ...), exact in its
    dtypes; its ``[input]`` keeps ``generator`` and ``seed`` for the provenance."""
    inputs = [held_inputs(case, dt) for dt in dtypes]
    if all(_same(inputs[0], other) for other in inputs[1:]):
        return [(_at(case, inputs[0]), list(dtypes), "")]
    return [(_at(case, held_at), [dt], f"__{dt}") for dt, held_at in zip(dtypes, inputs)]


def _at(case: Any, inputs: dict[str, np.ndarray]) -> Any:
    return dataclasses.replace(case, inputs={**case.inputs, **inputs})


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "case"


def file_stems(cases: list[Any], dtypes: list[str]) -> list[str]:
    """Each case's file stem (its name, characters other than ``A-Za-z0-9_.-`` as ``_``).

    Raises:
      SpecError: two cases whose names slug alike (``"a b"``, ``"a/b"``, ``"a_b"``; names with
        no ASCII letter or digit, which all become ``case``) would overwrite each other's files,
        or a case written once per dtype would take another case's name (``<case>__<dtype>``);
        refused before anything is written.
    """
    seen: dict[str, Any] = {}
    for case in cases:
        stem = _slug(case.name)
        if stem in seen:
            first = seen[stem]
            raise SpecError(
                f"cases {first.name!r} ({getattr(first, 'source', '?')}) and {case.name!r} "
                f"({getattr(case, 'source', '?')}) would both be written as {stem!r}: give them names that differ "
                "in ASCII letters, digits, '.', '-' or '_' (or select one with --case)")
        seen[stem] = case
    for stem, case in seen.items():
        clashes = [f"{stem}__{dt}" for dt in dtypes if f"{stem}__{dt}" in seen]
        if clashes and len(split(case, dtypes)) > 1:
            raise SpecError(f"{case.source}: case {case.name!r} is written once per dtype (the dtypes hold its "
                            f"inputs differently), as {clashes[0]!r}, another case's name: rename one of them")
    return list(seen)


def per_object(values: Any, fn: Any, otype: Any = object) -> np.ndarray:
    """``fn`` of each element, computed once per distinct object: a quantity made of few
    values shares their objects (a Jacobian's entries index its table of distinct
    values; ``ExactArray.to_fractions`` makes one Fraction per distinct value), so its
    conversions cost O(distinct) Python work and an O(n) NumPy gather."""
    arr = np.asarray(values, dtype=object)
    flat = arr.reshape(-1)
    ids = np.fromiter(map(id, flat), dtype=np.uint64, count=flat.size)  # the objects live in ``arr`` meanwhile
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    distinct = np.empty(first.size, dtype=object)
    distinct[:] = [fn(v) for v in flat[first]]
    return np.asarray(distinct.astype(otype)[inverse.reshape(-1)]).reshape(arr.shape)
