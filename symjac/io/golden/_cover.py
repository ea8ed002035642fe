"""``symjac golden --cover``: a pooling case expanded into one case per coverage-plan shape
(:func:`symjac.cover`) and input family, the families ``symjac verify`` runs at that shape:
``distinct``, ``ties`` where the tie input has tied windows, and the geometry's extra
families (:func:`symjac.verifiers.pool._inputs.families`: ``all_negative``, ``near_ties``, ``orders``,
``extreme``; not ``nonfinite``, whose NaN and infinities have no exact golden values).

Each is named ``<case>__<shape>__<family>`` (``avg__2x3x5x5__near_ties``), its inputs
generated from the family at the case's seed in each dtype written (``near_ties`` are distinct
in the dtype, as ``symjac verify``'s are; :mod:`symjac.io.golden._held`), so its golden data is
the input ``symjac verify`` checks there. A loss case is kept as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from symjac.verifiers.pool._inputs import NONFINITE, families
from symjac.io.golden._write import case_quantities
from symjac.io.golden._ties import tie_quantities
from symjac.io.golden._unpool import unpool_cover
from symjac.pool._cover import plan
from symjac.pool._ops import operator_of
from symjac.pool._geometry import resolved


def _at(case: Any, shape: tuple[int, ...], family: str) -> Any:
    name = f"{case.name}__{'x'.join(map(str, shape))}__{family}"
    inputs = {"shape": list(shape), "generator": family, "seed": int(case.inputs.get("seed", 0))}
    return dataclasses.replace(case, name=name, inputs=inputs, expect={})


def cover_cases(cases: Iterable[Any]) -> list[Any]:
    """Every case of ``cases`` at every coverage-plan shape and input family, in plan order."""
    out = []
    for case in cases:
        if case.is_loss:
            out.append(case)
            continue
        if case.is_scatter:  # max unpooling: its own plan's shapes, its generators (repeated indices among them)
            out += unpool_cover(case)
            continue
        spec = case.operator  # valid: read from a spec file (write_golden checks the cases it writes)
        for shape in plan(spec):
            ties = _at(case, shape, "ties")
            # only an operator with ties has tied windows (lp's values are algebraic: no quantities here)
            tied = operator_of(spec).ties and bool(tie_quantities(ties, case_quantities(ties)[0], case_quantities))
            extra = tuple(f for f in families(resolved(spec, shape)) if f not in NONFINITE)  # golden data is exact
            named = ("distinct",) + (("ties",) if tied else ()) + extra
            out += [ties if family == "ties" else _at(case, shape, family) for family in named]
    return out
