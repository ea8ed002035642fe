"""Findings of max unpooling in its own terms: the output cell, its writes, the repeated index.

An observed Jacobian (rows: output cells, from one-hot dy or one-hot tangents) or an observed
forward is compared with the exact one of the :class:`~symjac.pool._ops.unpool.Scatter`, and each
difference is named by its cause: the write order at a repeated index, a gradient sent to a value
a later write overwrote, a write to the wrong output cell (an index off by one), a gradient that
reaches no input, or one that ignores the upstream gradient. One finding per cause, naming the
first output cell and how many more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.check._report import Finding, fmt_index, listing
from symjac.pool._ops.unpool import Scatter

#: A cause's category and its words: (category, what the implementation did).
CAUSES = {
    "write_order": ("wrong_cells", "a repeated index's other write wins"),
    "overwritten": ("wrong_cells", "an overwritten value gets a gradient"),
    "wrong_index": ("wrong_cells", "a write to (or gradient from) another output cell than the index names"),
    "missing": ("missing_windows", "a written output cell's value (or gradient) reaches nothing"),
    "unwritten": ("wrong_cells", "an output cell no index names carries a value (or gradient)"),
    "weights": ("wrong_weights", "a gradient scaled by other than 1"),
    "accumulates": ("forward_values", "the writes to one output cell are summed, not written"),
    "other": ("forward_values", "other values"),
}


def _cells(s: Scatter, flat: Any, which: str) -> str:
    return listing([fmt_index(s.cell(int(i), which)) for i in np.asarray(flat).reshape(-1)])


def _writes(s: Scatter, o: int) -> str:
    """``inputs (0,0,0) and (0,0,1) (index 1 both: a repeated index)`` or ``input (0,0,2) (index 5)``."""
    writers = s.writers(o)
    index = int(s.indices.reshape(-1)[writers[0]]) if writers.size else None
    if writers.size > 1:
        return (f"inputs {_cells(s, writers, 'input')} (index {index} each: a repeated index; with "
                f"write={s.spec.write!r} input {fmt_index(s.cell(int(s.winner[o]), 'input'))}'s write wins)")
    if writers.size == 1:
        return f"input {fmt_index(s.cell(int(writers[0]), 'input'))} (index {index})"
    return "no input (no index names it)"


def _row_cause(s: Scatter, o: int, row: np.ndarray) -> str | None:
    """The cause of row ``o`` of an observed Jacobian differing from the exact one, or None."""
    w = int(s.winner[o])
    nz = set(np.flatnonzero(row != 0).tolist())
    if w < 0:
        return "unwritten" if nz else None
    writers = set(s.writers(o).tolist())
    if nz == {w}:
        return None if row[w] == 1 else "weights"
    if not nz:
        return "missing"
    if not nz <= writers:
        return "wrong_index"
    return "overwritten" if w in nz else "write_order"


def _row_words(s: Scatter, o: int, row: np.ndarray, role: str) -> str:
    nz = np.flatnonzero(row != 0)
    got = ", ".join(f"{row[i]:g} to input {fmt_index(s.cell(int(i), 'input'))}" for i in nz[:4]) or "nothing"
    w = int(s.winner[o])
    want = "to no input" if w < 0 else f"1 to input {fmt_index(s.cell(w, 'input'))} alone"
    return (f"output cell {fmt_index(s.cell(o, 'output'))} is written by {_writes(s, o)}: its {role} must send "
            f"{want}; it sends {got}")


def jacobian_findings(s: Scatter, obs: np.ndarray, role: str, family: str) -> list[Finding]:
    """One finding per cause among the rows of ``obs`` ((n_out, n_in), row o the observed
    ∂y[o]/∂x) that differ from the exact Jacobian (rows of 0 and 1, a 1 at each winning write)."""
    exact = np.zeros_like(obs)
    hit = np.flatnonzero(s.winner >= 0)
    exact[hit, s.winner[hit]] = 1
    wrong = np.flatnonzero((obs != exact).any(axis=1))
    if wrong.size == 0:
        return []
    if s.n_out > 1 and (obs == obs[0]).all() and (obs != 0).any():
        return [Finding("wrong_weights", f"{role} returns the same dx whatever dy it is given (every one-hot dy "
                        "gives one dx): it ignores the upstream gradient", family=family,
                        detail={"cause": "ignores_upstream", "role": role})]
    by_cause: dict[str, list[int]] = {}
    for o in wrong.tolist():
        by_cause.setdefault(_row_cause(s, o, obs[o]) or "other", []).append(o)
    out = []
    for cause, outputs in by_cause.items():
        o = outputs[0]
        more = f" ({len(outputs)} output cells so, of {s.n_out})" if len(outputs) > 1 else ""
        out.append(Finding(CAUSES[cause][0], f"{role}: {CAUSES[cause][1]}: {_row_words(s, o, obs[o], role)}{more}",
                           window=s.cell(o, "output"), cells=tuple(s.cell(int(i), "input") for i in s.writers(o)),
                           family=family, detail={"cause": cause, "role": role, "output_cells": len(outputs)}))
    return out


def _value_cause(s: Scatter, x: np.ndarray, o: int, value: float) -> tuple[str, int | None]:
    """Why output ``o`` holds ``value``: (cause, the input cell whose value it is, if one)."""
    flat = x.reshape(-1)
    writers = s.writers(o)
    source = np.flatnonzero((flat == value) | (np.isnan(flat) & np.isnan(value)))
    if s.winner[o] < 0:
        return "unwritten", int(source[0]) if source.size else None
    if value == 0 and not (flat[writers] == 0).any():
        return "missing", None
    among = np.intersect1d(source, writers)
    if among.size:
        return "write_order", int(among[0])
    if writers.size > 1 and value == flat[writers].sum():
        return "accumulates", None
    return ("wrong_index", int(source[0])) if source.size else ("other", None)


def forward_findings(s: Scatter, x: np.ndarray, y_obs: np.ndarray, y_exact: np.ndarray, family: str) -> list[Finding]:
    """One ``forward_values`` finding per cause among the output cells where the forward differs."""
    obs, exact = y_obs.reshape(-1).astype(np.float64), y_exact.reshape(-1).astype(np.float64)
    with np.errstate(invalid="ignore"):
        wrong = np.flatnonzero(~((obs == exact) | (np.isnan(obs) & np.isnan(exact))))
    if wrong.size == 0:
        return []
    by_cause: dict[str, list[tuple[int, int | None]]] = {}
    xf = x.astype(np.float64)
    for o in wrong.tolist():
        cause, source = _value_cause(s, xf, o, obs[o])
        by_cause.setdefault(cause, []).append((o, source))
    out = []
    for cause, items in by_cause.items():
        o, source = items[0]
        whose = f" (x at input {fmt_index(s.cell(source, 'input'))}, whose index is "\
                f"{int(s.indices.reshape(-1)[source])})" if source is not None else ""
        more = f" ({len(items)} output cells so, of {s.n_out})" if len(items) > 1 else ""
        out.append(Finding("forward_values", f"forward: {CAUSES[cause][1]}: output cell {fmt_index(s.cell(o, 'output'))}"
                           f" is written by {_writes(s, o)}: it must hold {exact[o]:g}; the forward gave {obs[o]:g}"
                           f"{whose}{more}", window=s.cell(o, "output"),
                           cells=tuple(s.cell(int(i), "input") for i in s.writers(o)), expected=float(exact[o]),
                           observed=float(obs[o]), family=family,
                           detail={"cause": cause, "role": "forward", "output_cells": len(items)}))
    return out
