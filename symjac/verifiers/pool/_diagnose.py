"""Diagnosis: compare observed Jacobian rows with the exact ones and name what is wrong.

Untied windows must match their exact row (exactly where the dtype holds the value,
else within γ_3); tied max-pooling windows must lie in the Clarke set (rows >= 0,
summing to 1, touching only tied cells). A window that fails is classified as
``missing_windows`` (no gradient at all), ``partial_windows`` (some cells get none),
``wrong_cells`` (gradient where the exact derivative is 0) or ``wrong_weights``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._lastaxis import any_last
from symjac.check._report import MAX_LISTED, Finding, fmt_index, listing
from symjac.check._rounding import gamma, ulps
from symjac.pool._symbolic import TIE_POLICIES
from symjac.pool._beta import policy_weights
from symjac.pool._beta_fit import name_policy
from symjac.pool._rows import ExactRows, Rows, row_tolerance, tolerance, window_blocks

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

_WHAT = {
    "missing_windows": "{n} of {total} windows send no gradient",
    "partial_windows": "{n} windows send gradient to only part of their cells",
    "wrong_cells": "{n} windows send gradient to cells whose exact derivative is 0",
    "wrong_weights": "{n} windows reach the right cells with wrong values",
    "tie_not_subgradient": "{n} tied windows route gradient outside the convex hull of their maximal cells "
                           "(rows must be >= 0, sum to 1 and touch only tied cells)",
}


class Diagnosis:
    """Running verdict over the windows of one verification: findings, error figures, tie policies."""

    def __init__(self, g: Geometry, dtype: np.dtype[Any], u: float, findings: list[Finding]):
        self.g, self.dtype, self.u, self.findings = g, dtype, u, findings
        self.max_abs = 0.0
        self.max_ulp = 0.0
        self.window_state: dict[tuple[int, int], str] = {}
        self.counts = {"edges_missing": 0, "edges_extra": 0, "weights_wrong": 0}
        self.policies: set[str] = set()

    def clarke_ok(self, rows: Rows, exact: ExactRows) -> np.ndarray:
        """(B, W) at tied windows: the row is in the Clarke set (the operator's ``clarke_ok`` rule)."""
        ok: np.ndarray = self.g.operator.clarke_ok(self.g, rows, exact, self.u)
        return ok

    def mismatches(self, rows: Rows, exact: ExactRows) -> list[tuple[int, int]]:
        """(b, w) whose observed row is not an exact row (untied) or not in the Clarke set (tied).

        In blocks of windows (:func:`window_blocks`: whole (B, W, K) temporaries took ~1 s at k15 256^2)."""
        g = self.g
        bad = np.zeros(rows.obs.shape[:2], dtype=bool)
        tied = exact.tied if exact.tied.any() else None  # the Clarke test only where some window ties
        for block in window_blocks(rows.obs.shape):
            e = exact.rows[:, block]
            err = np.abs(rows.obs[:, block] - e)
            err *= g.valid[None, block]
            bad[:, block] = any_last(err > row_tolerance(exact, self.u, block))
            if tied is not None:
                err *= ~tied[:, block, None]
            self.max_abs = max(self.max_abs, float(err.max(initial=0.0)))
            # ULPs over the untied entries the backward delivered: a missing entry (observed 0,
            # exact nonzero) is counted as missing (edges_missing), not as an error of 4.5e15
            # ULP. An entry with no error is 0 ULP, so only entries with err > 0 are read.
            at = np.nonzero(err > 0)
            if at[0].size:
                e_at, o_at = np.broadcast_to(e, err.shape)[at], rows.obs[:, block][at]
                arrived = (e_at != 0) & (o_at != 0)
                if arrived.any():
                    self.max_ulp = max(self.max_ulp, float(ulps(err[at][arrived], e_at[arrived], self.dtype).max()))
        if tied is not None:
            bad &= ~tied
            bad |= tied & ~self.clarke_ok(rows, exact)
        for key in rows.stray:
            bad[key] = True
        return [(int(b), int(w)) for b, w in np.argwhere(bad)]

    def classify(self, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]], context: str) -> None:
        """One finding per category, then one per window (up to :data:`MAX_LISTED`) with its cells."""
        groups: dict[str, list[tuple[int, int]]] = {cat: [] for cat in _WHAT}
        details: dict[tuple[int, int], dict[str, Any]] = {}
        for b, w in suspects:
            cat, details[b, w] = self._window(rows, exact, b, w)
            groups[cat].append((b, w))
            self.window_state[b, w] = cat
        total = self.g.batch * self.g.n_out
        for cat, members in groups.items():
            if not members:
                continue
            names = [fmt_index(self.g.output_index(b, w)) for b, w in members]
            what = _WHAT[cat].format(n=len(members), total=total)
            self.findings.append(Finding(cat, f"{what}{context}: {listing(names)}"))
            for b, w in members[:MAX_LISTED]:
                d = details[b, w]
                src = "one-hot probe" if (b, w) in rows.one_hot else "colour probe"
                words = self.g.operator.window_words(self.g, w)  # RoI: the box, the bin, its sample points
                self.findings.append(Finding(
                    cat, f"window {fmt_index(self.g.output_index(b, w))} ({src}{', ' + words if words else ''})"
                         f"{d['note']}",
                    window=self.g.output_index(b, w), cells=tuple(d["cells"]), expected=d["expected"],
                    observed=d["observed"]))

    def _window(self, rows: Rows, exact: ExactRows, b: int, w: int) -> tuple[str, dict[str, Any]]:
        """The category of one failing window and the cells and values its finding shows."""
        g = self.g
        valid = g.valid[w]
        e, o = exact.rows[b, w], rows.obs[b, w]
        stray = rows.stray.get((b, w), [])
        cells = [g.input_index(b, int(c)) for c in g.cells[w][valid]]
        stray_cells = [g.input_index(bb, c) for bb, c, _ in stray]
        observed = [float(v) for v in o[valid]] + [v for _, _, v in stray]
        if exact.tied[b, w]:
            note, hull = g.operator.tied_detail(g, exact, b, w, cells)
            return "tie_not_subgradient", {
                "cells": cells + stray_cells, "observed": observed, "note": note, "expected": hull}
        tol = row_tolerance(exact, self.u)[b, w]
        want = valid & (e != 0)
        missing = want & (np.abs(o) <= tol) & (np.abs(o - e) > tol)
        extra_in = valid & (e == 0) & (o != 0)
        wrong = want & ~missing & (np.abs(o - e) > tol)
        self.counts["edges_missing"] += int(missing.sum())
        self.counts["edges_extra"] += int(extra_in.sum()) + len(stray)
        self.counts["weights_wrong"] += int(wrong.sum())
        if extra_in.any() or stray:
            cat = "wrong_cells"  # gradient landed where the exact derivative is 0
        elif want.any() and missing[want].all():
            cat = "missing_windows"
        elif missing.any():
            cat = "partial_windows"
        else:
            cat = "wrong_weights"
        note = f"; cells getting nothing: {listing([fmt_index(cells[i]) for i in np.flatnonzero(missing[valid])])}" \
            if missing.any() else ""
        outside = [cells[i] for i in np.flatnonzero(extra_in[valid])] + stray_cells
        note += f"; cells that should get nothing: {listing([fmt_index(c) for c in outside])}" if outside else ""
        expected = [self._exact_entry(w, int(k), e[k]) for k in np.flatnonzero(valid)] + [Fraction(0)] * len(stray)
        return cat, {"cells": cells + stray_cells, "expected": expected, "observed": observed, "note": note}

    def _exact_entry(self, w: int, k: int, value: float) -> Fraction:
        """An untied exact Jacobian entry (window w, slot k) as the rational it is: 1/divisor (average),
        1 or 0, a RoI Align weight."""
        if value == 0:
            return Fraction(0)
        return self.g.operator.slot_entry(self.g, w, k)

    def tie_policy(self, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]]) -> None:
        """Name the policy the backward follows on tied windows that are in the Clarke set."""
        ok = exact.tied.copy()
        for key in suspects:
            ok[key] = False
        if not ok.any():
            if exact.tied.any():  # ties seen, every tied row wrong: no named policy (None means no ties)
                self.policies.add("other")
            return
        # Policies run over every slot of the padded window: pad cells (pad_value=0) take part
        # in the order and the split, and the weight they draw goes to no input.
        pads = self.g.padded & ~self.g.valid if getattr(self.g.spec, "pad_value", None) is not None else None
        full = exact.member if pads is None else exact.member | (pads[None] & exact.pad_tied[..., None])
        at = np.argwhere(ok)  # the tied windows in the Clarke set: the only ones compared
        for policy in TIE_POLICIES:
            # A tied window (two or more maxima) has a different row under each policy, so
            # at most one policy matches them all: the first that does is the one.
            if self._follows(rows, full, at, policy):
                self.policies.add(policy)
                return
        # seed 001's family: β·split + (1 − β)·first for some exact β
        self.policies.add(name_policy(rows, exact, ok, self.u) or "other")

    def _follows(self, rows: Rows, full: np.ndarray, at: np.ndarray, policy: str) -> bool:
        """Whether the observed row of every window at ``at`` ((n, 2): b, w) is the policy's, in
        blocks of about 2^20 entries (each block's handful of temporaries, not the (B, W, K) grid's)."""
        step = max(1, 2**20 // self.g.cells.shape[1])
        for start in range(0, len(at), step):
            b, w = at[start : start + step].T
            weights, q = policy_weights(full[b, w], policy)
            rows_p = np.where(self.g.valid[w], weights / q, 0.0)
            if not (np.abs(rows.obs[b, w] - rows_p) <= tolerance(rows_p, self.u) + gamma(3, self.u) * (rows_p == 0)).all():
                return False
        return True
