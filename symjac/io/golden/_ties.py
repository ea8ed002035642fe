"""Tied windows in golden data: where a window's Jacobian row depends on the tie policy
(max pooling at equal maxima), the cells it is tied between, and the ``dx`` each valid
policy gives, so a kernel with another valid policy than symjac's default is told which
one it follows rather than "wrong" (docs/golden-data.md, "Tied windows").

Only an operator with ties (its protocol's ``ties`` rule) gets here; a window is tied when the ``first``, ``last`` and
``split`` policies give it different Jacobian rows, which only an operator with ties
does; every other case gets no tie arrays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.pool._ops import operator_of

#: The tie policies whose dx the data holds (seed 001's: PyTorch/TF/ORT's first maximum,
#: the last one, and the Clarke set's centre that splits the gradient evenly).
POLICIES = ("first", "last", "split")

NOTE = ("tied[w] is 1 where output window w's Jacobian row differs between the tie policies first, last and split "
        "(a maximum attained by several cells), else 0; tie_rows/tie_cols (COO over flattened output rows and input "
        "columns, sorted) list the cells of tied rows any policy routes to, tie_weight_<policy> the Jacobian entry "
        "each policy gives them (0: none), and dx_<policy> = J_policy^T dy, with bounds as dx's")


def _entries(qs: dict[str, np.ndarray]) -> dict[tuple[int, int], Fraction]:
    return {(int(r), int(c)): Fraction(v) for r, c, v in zip(qs["jac_rows"], qs["jac_cols"], qs["jac_values"])}


def tie_quantities(case: Any, qs: dict[str, np.ndarray],
                   quantities: Callable[[Any], tuple[dict[str, np.ndarray], dict[str, Any]]]) -> dict[str, np.ndarray]:
    """The tie arrays of a pooling case (empty for a loss or a case with no tied window).

    ``qs`` are the case's quantities under its own policy; ``quantities(case)`` gives
    them under another (``symjac.io.golden._write.case_quantities``)."""
    if case.is_loss or not operator_of(case.operator).ties:
        return {}  # only an operator with ties has rows that depend on a policy
    main = str(case.tie or "first")

    def under(policy: str) -> dict[str, np.ndarray]:
        return qs if policy == main else quantities(dataclasses.replace(case, tie=policy))[0]

    per = {p: under(p) for p in ("first", "last")}
    if all(np.array_equal(per["first"][k], per["last"][k]) for k in ("jac_rows", "jac_cols", "jac_values")):
        # a tie among two or more candidates sends first and last to different ones, so
        # where they agree no window is tied (and split agrees too): no tie arrays
        return {}
    entries = {p: _entries(q) for p, q in per.items()}
    per["split"] = under("split")
    entries["split"] = _entries(per["split"])
    keys = set().union(*entries.values())
    tied_rows = {key[0] for key in keys if len({e.get(key) for e in entries.values()}) > 1}
    cells = sorted({rc for e in entries.values() for rc in e if rc[0] in tied_rows})
    tied = np.zeros(qs["y"].size, dtype=np.int64)
    tied[sorted(tied_rows)] = 1
    out: dict[str, np.ndarray] = {"tied": tied.reshape(qs["y"].shape),
                                  "tie_rows": np.array([r for r, _ in cells], dtype=np.int64),
                                  "tie_cols": np.array([c for _, c in cells], dtype=np.int64)}
    for p in POLICIES:
        weights = np.empty(len(cells), dtype=object)
        weights[:] = [entries[p].get(rc, Fraction(0)) for rc in cells]
        out[f"tie_weight_{p}"] = weights
        out[f"dx_{p}"] = per[p]["dx"]
    return out


def tie_magnitudes(qs: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(M, k) of each tie quantity for the rounding bound (as ``_pool_magnitudes`` of the
    golden module gives dx's): ``dx_<policy>`` sums the policy's Jacobian entries, the
    untied rows' (the case's own) and the tied rows' ``tie_weight_<policy>``."""
    if "tied" not in qs:
        return {}
    rows, cols = qs["jac_rows"], qs["jac_cols"]
    untied = qs["tied"].reshape(-1)[rows] == 0
    dy = np.abs(qs["dy"].astype(np.float64)).reshape(-1)
    base_w = np.abs(np.array([float(v) for v in qs["jac_values"]], dtype=np.float64))[untied]
    n_in = qs["dx"].size
    out = {}
    for p in POLICIES:
        w = np.abs(np.array([float(v) for v in qs[f"tie_weight_{p}"]], dtype=np.float64))
        at = np.concatenate([cols[untied], qs["tie_cols"][w > 0]])
        terms = np.concatenate([base_w * dy[rows[untied]], w[w > 0] * dy[qs["tie_rows"][w > 0]]])
        out[f"dx_{p}"] = (np.bincount(at, weights=terms, minlength=n_in), np.bincount(at, minlength=n_in) + 3.0)
        out[f"tie_weight_{p}"] = (w, np.full(w.size, 3.0))
    return out
