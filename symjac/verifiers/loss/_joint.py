"""A row at one kink: its derivative entries in the Clarke set together, not each in its interval.

An element-wise loss's Clarke set is the product of its entries' intervals (each entry has its own
kink). A class-axis row whose hinges share predictions (multi_margin, multilabel_margin: ``[m -
z_y + z_i]₊`` moves ``z_y`` and ``z_i`` together) at one kink has the segment between the row's
two sides as its Clarke set: ``A + θ·(B - A)``, θ in [0, 1], A and B the row's derivatives with
that kink's sign at -1 and +1 (:meth:`symjac.loss._templates.LossTemplate.clarke_corners`). The
per-entry check (:mod:`symjac.verifiers.loss._values`) accepts any point of the box around it; here
a row passes only if one θ puts every entry within its bound: the θ each entry allows is an interval
(exact MPFR arithmetic), and their intersection with [0, 1] must not be empty. A row at several
kinks at once (a zonotope) keeps the per-entry check alone; ``stats["clarke_rows"]`` counts both.
An element-wise kind's element is a row of one entry: the same check, which the per-entry one already
made. ``stats["kink_policy"]`` names the side each answer took at each kink checked (:data:`SIDES`), as
max pooling's tie policies are named.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.check._report import Finding
from symjac.loss import _numbers
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import LossEvaluation
from symjac.loss._templates import LossTemplate


def check_rows(out: np.ndarray, ev: LossEvaluation, bound: Any, stats: dict[str, Any],
               findings: list[Finding]) -> None:
    """Rows at one kink against their Clarke segment (``bound(entries)``: the derivative's bound at
    flat entries); a finding names the first row off it."""
    tpl = ev.template
    if ev.smooth or not isinstance(tpl, LossTemplate):
        return
    n, c = ev.counted.size, tpl.classes
    cols = [np.asarray(col) for col in ev.columns]
    with _numbers.context():
        zeros = np.zeros(n, dtype=np.intp)
        for k in tpl.kink_values(cols):
            zeros += np.asarray(k == 0, dtype=np.intp)
        wide = np.asarray((ev.h_lo.reshape(n, c) != ev.h_hi.reshape(n, c)).any(axis=1), dtype=bool)
        rows = np.flatnonzero(wide & (zeros == 1) & ev.counted.reshape(-1))
        stats["clarke_rows"] = {"segment": int(rows.size), "per_entry": int((wide & (zeros > 1)).sum())}
        if not rows.size:
            return
        a, b = tpl.clarke_corners([col[rows] for col in cols])
        sr = ev.factor_numbers.reshape(n, c)[rows] * _numbers.number(ev.loss.scale)
        start, step = sr * a, sr * (b - a)
        obs = _numbers.from_floats(out.reshape(n, c)[rows])
        entries = (rows[:, None] * c + np.arange(c)[None, :]).reshape(-1)
        bnd = np.asarray(bound(entries), dtype=object).reshape(rows.size, c)
        sides = [_on_segment(obs[k], start[k], step[k], bnd[k]) for k in range(rows.size)]
    off = [int(r) for r, got in zip(rows, sides) if got is None]
    stats["kink_policy"] = _policy(sides)
    if off:
        shape = ev.pred_shape
        r = off[0]
        findings.append(Finding(
            "wrong_values",
            f"the derivative's row {_index(ev.element_shape, r)} is at a kink of {ev.loss.kind} and each entry lies "
            f"in its Clarke interval, but not together: the Clarke set there is the segment between the row's two "
            f"sides (one hinge active or not for every entry at once), and no point of it is within the bound of "
            f"the row {[float(x) for x in out.reshape(n, c)[r]]} ({len(off)} row(s) off): the entries take "
            "different sides of one kink",
            cells=tuple(tuple(_index(shape, r * c + j)) for j in range(c))))


#: How the kink policy names where an answer lies on the segment from the kink's -1 side (θ = 0: sign -1,
#: a hinge [a]₊ inactive) to its +1 side (θ = 1: active).
SIDES = ("the -1 side", "the +1 side", "either side (within the bound)", "between the sides")


def _policy(sides: list[tuple[Any, Any] | None]) -> dict[str, int]:
    """Per side named in :data:`SIDES`, how many kinks the answers took it (the report's ``kink_policy``)."""
    out: dict[str, int] = {}
    for got in sides:
        if got is None:
            continue
        lo, hi = got
        name = SIDES[2] if lo == 0 and hi == 1 else SIDES[0] if lo == 0 else SIDES[1] if hi == 1 else SIDES[3]
        out[name] = out.get(name, 0) + 1
    return out


def _on_segment(o: np.ndarray, start: np.ndarray, step: np.ndarray, bound: np.ndarray) -> tuple[Any, Any] | None:
    """The θ in [0, 1] with |o_j - start_j - θ·step_j| <= bound_j for every j (MPFR), as an interval, or None."""
    lo, hi = _numbers.number(0), _numbers.number(1)
    for oj, sj, dj, bj in zip(o, start, step, bound):
        if dj == 0:
            if abs(oj - sj) > bj:
                return None
            continue
        t1, t2 = (oj - sj - bj) / dj, (oj - sj + bj) / dj
        lo, hi = max(lo, min(t1, t2)), min(hi, max(t1, t2))
        if lo > hi:
            return None
    return lo, hi
