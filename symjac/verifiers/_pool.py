"""Verify an implementation's forward/backward against the exact derivative.

``verify(spec, backward=..., forward=...)`` recovers the implementation's Jacobian
with few backward calls (one per colour of the window conflict graph, see
:mod:`symjac.graph`), confirms it with a dense random exact dy, diffs it window by
window against the exact Jacobian, checks max pooling at ties against the Clarke
set, runs a second oracle (compressed central differences of the implementation's
own forward), and watches every call for raised errors, bad outputs, mutated
inputs and nondeterminism. All of it lands in a :class:`~symjac.report.Report`;
nothing the implementation does crashes symjac.

Float comparisons: an entry obtained from m rounded operations is compared with the
exact value e within ``gamma_{m+2}(u) * sum|terms|`` (Higham's bound for a sum of
m terms, plus one rounding for a weight and one for the output), where u is the
unit roundoff of the dtype; errors are reported in ULPs of the exact value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._graph import input_colouring, window_colouring
from symjac.check._inputs import distinct_dy, distinct_input, tie_input
from symjac.pool._jacobian import exact_forward, routes
from symjac.pool._lowering import FLOAT_DTYPES
from symjac.check._report import Finding, Report
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._symbolic import TIE_POLICIES, policy_weights, tie_members, window_classes

UNIT_ROUNDOFF = {np.dtype(np.float16): 2.0**-11, np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}
MAX_LISTED = 8


def gamma(n: np.ndarray | int, u: float) -> np.ndarray:
    """Higham's gamma_n = n u / (1 - n u)."""
    n = np.asarray(n, dtype=np.float64)
    return n * u / (1 - n * u)


def ulps(error: np.ndarray, exact: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Errors in units in the last place of the exact values in ``dtype``."""
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
    tiny = np.finfo(dtype).smallest_subnormal
    return error / np.maximum(spacing, float(tiny))


def _fmt(index: tuple[int, ...]) -> str:
    return "(" + ",".join(map(str, index)) + ")"


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _ratio(num: float, den: float) -> str:
    if den == 0:
        return "no gradient was expected"
    f = Fraction(num / den).limit_denominator(64)
    if abs(float(f) - num / den) <= 1e-6 * max(1.0, abs(num / den)):
        return f"{f} of the gradient mass arrives"
    return f"{100 * num / den:.1f}% of the gradient mass arrives"


class _Caller:
    """Calls the implementation; every misbehaviour becomes a finding, never an exception."""

    def __init__(self, fn: Callable[..., Any], role: str, names: tuple[str, ...], out_shape: tuple[int, ...],
                 dtype: np.dtype, findings: list[Finding]):
        self.fn, self.role, self.names, self.out_shape, self.dtype = fn, role, names, out_shape, dtype
        self.findings = findings
        self.calls = 0
        self.mutated: set[str] = set()
        self.flagged: set[str] = set()
        self.bad = False  # this callable produced a finding of its own

    def flag(self, key: str, category: str, message: str, **kw: Any) -> None:
        self.bad = True
        if key not in self.flagged:
            self.flagged.add(key)
            self.findings.append(Finding(category, message, **kw))

    def __call__(self, *args: np.ndarray) -> np.ndarray | None:
        self.calls += 1
        before = [a.copy() for a in args]
        try:
            out = self.fn(*args)
        except Exception as exc:  # noqa: BLE001 - the implementation's failure is a finding
            self.flag(f"raise:{type(exc).__name__}", "bad_output", f"{self.role} raised {type(exc).__name__}: {exc}")
            return None
        for name, a, b in zip(self.names, args, before):
            if a.tobytes() != b.tobytes():
                self.mutated.add(name)
                changed = np.argwhere(a != b)[:MAX_LISTED]
                self.flag(f"mutate:{name}", "mutates_inputs",
                          f"{self.role} changed its input {name} in place "
                          f"(first changed cells: {_listing([_fmt(tuple(int(i) for i in c)) for c in changed])})",
                          cells=tuple(tuple(int(i) for i in c) for c in changed),
                          expected=b[tuple(changed.T)] if changed.size else None,
                          observed=a[tuple(changed.T)] if changed.size else None)
                a[...] = b  # restore, so later calls see the intended input
        try:
            arr = np.asarray(out)
        except Exception:  # noqa: BLE001
            self.flag("type", "bad_output", f"{self.role} returned {type(out).__name__}, not an array")
            return None
        if arr.shape != self.out_shape:
            self.flag("shape", "bad_output", f"{self.role} returned shape {arr.shape}; expected {self.out_shape}")
            return None
        if arr.dtype.kind not in "fiu":
            self.flag("kind", "bad_output", f"{self.role} returned dtype {arr.dtype}; expected {self.dtype}")
            return None
        if arr.dtype != self.dtype:
            self.flag("dtype", "bad_output", f"{self.role} returned dtype {arr.dtype}; expected {self.dtype}")
        arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            bad = [tuple(int(i) for i in c) for c in np.argwhere(~np.isfinite(arr))]
            self.flag("finite", "bad_output", f"{self.role} returned NaN/Inf at {_listing([_fmt(c) for c in bad])}",
                      cells=tuple(bad[:MAX_LISTED]))
            return None
        return arr


@dataclasses.dataclass
class _Rows:
    """Per window (batch, window, slot): what the backward sent to each cell of the window."""

    obs: np.ndarray  # (B, W, K) float64
    stray: dict[tuple[int, int], list[tuple[int, int, float]]]  # (b, w) -> [(b', cell, value)] outside the window
    one_hot: set[tuple[int, int]]


@dataclasses.dataclass
class _Exact:
    """The exact Jacobian rows at one x: (B, W, K) values for policy "first", and for
    max pooling the tie sets (member) and which windows tie (|I| >= 2)."""

    rows: np.ndarray
    member: np.ndarray
    tied: np.ndarray
    gap: np.ndarray  # (B, W) max minus runner-up (inf for avg): finite differences need gap > 2h
    held: np.ndarray  # (B, W, K) the exact value is representable in the dtype: compared exactly


BACKWARD_CATEGORIES = ("missing_windows", "partial_windows", "wrong_cells", "wrong_weights", "tie_not_subgradient",
                       "tie_policy")


class _Verifier:
    def __init__(self, spec: PoolSpec, g: Geometry, backward: Callable[..., Any], forward: Callable[..., Any] | None,
                 dtype: np.dtype, tie: str, one_hot_budget: int):
        self.spec, self.g, self.dtype, self.tie, self.budget = spec, g, dtype, tie, one_hot_budget
        self.u = UNIT_ROUNDOFF[dtype]
        self.findings: list[Finding] = []
        self.bwd = _Caller(backward, "backward", ("x", "dy"), g.input_shape, dtype, self.findings)
        self.fwd = _Caller(forward, "forward", ("x",), g.output_shape, dtype, self.findings) if forward else None
        self.colours, self.n_colours = window_colouring(g)
        self.stats: dict[str, Any] = {}
        self.max_abs = 0.0
        self.max_ulp = 0.0
        self.window_state: dict[tuple[int, int], str] = {}
        self.counts = {"edges_missing": 0, "edges_extra": 0, "weights_wrong": 0}
        self.one_hot_calls = 0
        self.policies: set[str] = set()
        self.superposition_reported = False
        self.fd_tol: np.ndarray = np.zeros((0, 0, 0))

    # -- helpers ------------------------------------------------------------------
    def backward(self, x: np.ndarray, dy_c: np.ndarray) -> np.ndarray | None:
        dy = self.g.from_canonical(dy_c.astype(self.dtype), self.g.out_spatial)
        dx = self.bwd(x, dy)
        return None if dx is None else self.g.to_canonical(dx)

    def tolerance(self, exact: np.ndarray, terms: int | np.ndarray = 1) -> np.ndarray:
        return gamma(np.asarray(terms) + 2, self.u) * np.abs(exact) + 2.0**-60 * np.abs(exact)

    def row_tolerance(self, exact: _Exact) -> np.ndarray:
        """One window's contribution in a probe: exact where the dtype holds the exact
        value, else one rounding of the weight and one of the product (gamma_3)."""
        return np.where(exact.held, 0.0, self.tolerance(exact.rows))

    def scatter(self, per_window: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """sum_w per_window[b, w] * rows[b, w, k] into cells: J^T v for row arrays."""
        g = self.g
        out = np.zeros((g.batch, g.n_in))
        for k in range(g.cells.shape[1]):
            ok = g.valid[:, k]
            out[:, g.cells[ok, k]] += per_window[:, ok] * rows[:, ok, k]
        return out

    def exact(self, x: np.ndarray, policy: str = "first") -> _Exact:
        g = self.g
        ex = ExactArray.from_any(x) if g.spec.mode == "max" else None
        r = routes(g, ex, policy)
        K = g.cells.shape[1]
        rows = np.zeros((g.batch, g.n_out, K))
        member = np.zeros((g.batch, g.n_out, K), dtype=bool)
        gap = np.full((g.batch, g.n_out), np.inf)
        dyadic = np.ones((g.batch, g.n_out, K), dtype=bool)
        i = 0
        xc = g.to_canonical(x).astype(np.float64)
        for c in window_classes(g):
            slots = np.array(c.slots)
            for j in range(len(c.slots)):
                weight = np.broadcast_to(r.routes[i].weight, (g.batch, c.windows.size))
                rows[:, c.windows, c.slots[j]] = weight / r.q
                reduced = r.q // np.gcd(weight, r.q)  # the value's denominator in lowest terms
                dyadic[:, c.windows, c.slots[j]] = (reduced & (reduced - 1)) == 0
                i += 1
            if ex is not None:
                values = g.to_canonical(ex.num)[:, c.cells]
                member[:, c.windows[:, None], slots[None, :]] = tie_members(c.template, values)
                vals = np.sort(xc[:, c.cells], axis=-1)
                gap[:, c.windows] = vals[..., -1] - vals[..., -2] if vals.shape[-1] > 1 else np.inf
        tied = member.sum(axis=2) >= 2
        with np.errstate(over="ignore", under="ignore"):
            held = dyadic & (rows.astype(self.dtype).astype(np.float64) == rows)
        return _Exact(rows, member, tied, gap, held)

    # -- probing --------------------------------------------------------------------
    def probe(self, x: np.ndarray) -> tuple[_Rows, list[tuple[int, int, int, float]]] | None:
        """One backward call per window colour with dy = indicator of the colour.

        Returns the rows and the unexplained gradient: (colour, b, cell, value) for
        nonzero dx on cells no window of the probed colour reads.
        """
        g = self.g
        obs = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
        unexplained: list[tuple[int, int, int, float]] = []
        for colour in range(self.n_colours):
            wins = np.flatnonzero(self.colours == colour)
            if wins.size == 0:
                continue
            dy = np.zeros((g.batch, g.n_out))
            dy[:, wins] = 1.0
            dx = self.backward(x, dy)
            if dx is None:
                return None
            cells, valid = g.cells[wins], g.valid[wins]
            obs[:, wins, :] = np.where(valid[None], dx[:, np.where(valid, cells, 0)], 0.0)
            covered = np.zeros(g.n_in, dtype=bool)
            covered[cells[valid]] = True
            for b, cell in np.argwhere((dx != 0) & ~covered[None, :]).tolist():
                unexplained.append((colour, b, cell, float(dx[b, cell])))
        return _Rows(obs, {}, set()), unexplained

    def nearest_windows(self, colour: int, cell: int, count: int) -> list[int]:
        """Windows of ``colour`` whose start is nearest (Chebyshev) to ``cell``."""
        wins = np.flatnonzero(self.colours == colour)
        pos = np.array(self.g.cell_position(cell))
        starts = np.stack(np.meshgrid(*[a.starts for a in self.g.axes], indexing="ij"), axis=-1).reshape(-1, len(pos))
        d = np.abs(starts[wins] - pos).max(axis=1)
        return [int(w) for w in wins[np.argsort(d, kind="stable")[:count]]]

    def one_hot(self, x: np.ndarray, rows: _Rows, suspects: list[tuple[int, int]]) -> None:
        """Exact rows for suspect windows: one backward call each, dy = one-hot."""
        g = self.g
        for b, w in suspects:
            if (b, w) in rows.one_hot:
                continue
            if self.one_hot_calls >= self.budget:
                return
            self.one_hot_calls += 1
            dy = np.zeros((g.batch, g.n_out))
            dy[b, w] = 1.0
            dx = self.backward(x, dy)
            if dx is None:
                return
            valid = g.valid[w]
            rows.obs[b, w] = np.where(valid, dx[b, np.where(valid, g.cells[w], 0)], 0.0)
            inside = np.zeros((g.batch, g.n_in), dtype=bool)
            inside[b, g.cells[w][valid]] = True
            found = [(int(bb), int(c), float(dx[bb, c])) for bb, c in np.argwhere((dx != 0) & ~inside).tolist()]
            if found:
                rows.stray[b, w] = found
            else:
                rows.stray.pop((b, w), None)
            rows.one_hot.add((b, w))

    def attribute(self, x: np.ndarray, rows: _Rows, exact: _Exact,
                  unexplained: list[tuple[int, int, int, float]]) -> list[tuple[int, int]]:
        """Find the windows behind every discrepancy, one-hot probing the suspects."""
        suspects = self.mismatches(rows, exact)
        for colour, b, cell, _ in unexplained[: 4 * MAX_LISTED]:
            suspects += [(b, w) for w in self.nearest_windows(colour, cell, 4)]
        suspects = list(dict.fromkeys(suspects))
        if not suspects:
            return []
        self.one_hot(x, rows, suspects)
        explained = {(bb, c) for vs in rows.stray.values() for bb, c, _ in vs}
        for colour, b, cell, value in unexplained:
            if (b, cell) not in explained:  # beyond the one-hot budget: blame the nearest window
                w = self.nearest_windows(colour, cell, 1)[0]
                rows.stray.setdefault((b, w), []).append((b, cell, value))
        return self.mismatches(rows, exact)

    # -- diagnosis --------------------------------------------------------------------
    def clarke_ok(self, rows: _Rows, exact: _Exact) -> np.ndarray:
        """(B, W): the row lies in the convex hull of the tie set's vertices."""
        obs, member = rows.obs, exact.member
        size = member.sum(axis=2)
        tol = gamma(3, self.u)
        outside = (~member & self.g.valid[None] & (obs != 0)).any(axis=2) | (member & (obs < -tol)).any(axis=2)
        return ~outside & (np.abs(obs.sum(axis=2) - 1) <= gamma(size + 2, self.u) * size)

    def mismatches(self, rows: _Rows, exact: _Exact) -> list[tuple[int, int]]:
        """(b, w) whose observed row is not an exact row (untied) or not in the Clarke set (tied)."""
        valid = self.g.valid[None]
        err = np.abs(rows.obs - exact.rows) * valid
        bad = (err > self.row_tolerance(exact)).any(axis=2) & ~exact.tied
        bad |= exact.tied & ~self.clarke_ok(rows, exact)
        for key in rows.stray:
            bad[key] = True
        untied = valid & (exact.rows != 0) & ~exact.tied[..., None]
        self.max_abs = max(self.max_abs, float((err * ~exact.tied[..., None]).max(initial=0.0)))
        if untied.any():
            self.max_ulp = max(self.max_ulp, float(ulps(err[untied], exact.rows[untied], self.dtype).max()))
        return [(int(b), int(w)) for b, w in np.argwhere(bad)]

    def classify(self, rows: _Rows, exact: _Exact, suspects: list[tuple[int, int]], context: str) -> None:
        g = self.g
        groups: dict[str, list[tuple[int, int]]] = {"missing_windows": [], "partial_windows": [],
                                                    "wrong_cells": [], "wrong_weights": [], "tie_not_subgradient": []}
        details: dict[tuple[int, int], dict[str, Any]] = {}
        for b, w in suspects:
            valid = g.valid[w]
            e, o = exact.rows[b, w], rows.obs[b, w]
            stray = rows.stray.get((b, w), [])
            cells = [self.g.input_index(b, int(c)) for c in g.cells[w][valid]]
            if exact.tied[b, w]:
                tied = [cells[i] for i in np.flatnonzero(exact.member[b, w][valid])]
                groups["tie_not_subgradient"].append((b, w))
                self.window_state[b, w] = "tie_not_subgradient"
                details[b, w] = {"cells": cells + [self.g.input_index(bb, c) for bb, c, _ in stray],
                                 "expected": f"a convex combination of the tied cells {_listing([_fmt(c) for c in tied])}",
                                 "observed": [float(v) for v in o[valid]] + [v for _, _, v in stray],
                                 "note": f"; ties at {_listing([_fmt(c) for c in tied])}"}
                continue
            tol = self.row_tolerance(exact)[b, w]
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
            groups[cat].append((b, w))
            self.window_state[b, w] = cat
            note = f"; cells getting nothing: {_listing([_fmt(cells[i]) for i in np.flatnonzero(missing[valid])])}" \
                if missing.any() else ""
            outside = [cells[i] for i in np.flatnonzero(extra_in[valid])] + [self.g.input_index(bb, c) for bb, c, _ in stray]
            note += f"; cells that should get nothing: {_listing([_fmt(c) for c in outside])}" if outside else ""
            details[b, w] = {
                "cells": cells + [self.g.input_index(bb, c) for bb, c, _ in stray],
                "expected": [Fraction(float(v)).limit_denominator(2**20) if v else 0 for v in e[valid]] + [0] * len(stray),
                "observed": [float(v) for v in o[valid]] + [v for _, _, v in stray],
                "note": note,
            }
        total = g.batch * g.n_out
        for cat, members in groups.items():
            if not members:
                continue
            names = [_fmt(self.g.output_index(b, w)) for b, w in members]
            what = {
                "missing_windows": f"{len(members)} of {total} windows send no gradient{context}",
                "partial_windows": f"{len(members)} windows send gradient to only part of their cells{context}",
                "wrong_cells": f"{len(members)} windows send gradient to cells whose exact derivative is 0{context}",
                "wrong_weights": f"{len(members)} windows reach the right cells with wrong values{context}",
                "tie_not_subgradient": f"{len(members)} tied windows route gradient outside the convex hull of their "
                                       f"maximal cells (rows must be >= 0, sum to 1 and touch only tied cells){context}",
            }[cat]
            self.findings.append(Finding(cat, f"{what}: {_listing(names)}"))
            for b, w in members[:MAX_LISTED]:
                d = details[b, w]
                src = "one-hot probe" if (b, w) in rows.one_hot else "colour probe"
                self.findings.append(Finding(
                    cat, f"window {_fmt(self.g.output_index(b, w))} ({src}){d['note']}",
                    window=self.g.output_index(b, w), cells=tuple(d["cells"]), expected=d["expected"], observed=d["observed"]))

    def tie_policy(self, rows: _Rows, exact: _Exact, suspects: list[tuple[int, int]]) -> None:
        """Name the policy the backward follows on tied windows that are in the Clarke set."""
        ok = exact.tied.copy()
        for key in suspects:
            ok[key] = False
        if not ok.any():
            return
        seen = []
        for policy in TIE_POLICIES:
            weights, q = policy_weights(exact.member, policy)
            rows_p = weights / q
            match = (np.abs(rows.obs - rows_p) <= self.tolerance(rows_p) + gamma(3, self.u) * (rows_p == 0)).all(axis=2)
            if match[ok].all():
                seen.append(policy)
        self.policies.add(seen[0] if len(seen) == 1 else "other")

    # -- passes -----------------------------------------------------------------------
    def check_forward(self, x: np.ndarray) -> bool | None:
        if self.fwd is None:
            return None
        g = self.g
        y = self.fwd(x)
        if y is None:
            return False
        exact = exact_forward(g, ExactArray.from_any(x)).to_numpy(np.float64)
        y_c, e_c = g.to_canonical(y, g.out_spatial), g.to_canonical(exact, g.out_spatial)
        if g.spec.mode == "avg":
            xc = np.abs(g.to_canonical(x).astype(np.float64))
            mass = (np.where(g.valid, xc[:, np.where(g.valid, g.cells, 0)], 0.0)).sum(axis=2) / g.divisor
            n = g.valid.sum(axis=1)
            tol = gamma(n + 1, self.u) * mass + 2.0**-60 * np.abs(e_c)
        else:
            tol = np.zeros_like(e_c)
        bad = np.argwhere(np.abs(y_c - e_c) > tol)
        if bad.size:
            names = [_fmt(self.g.output_index(b, w)) for b, w in bad.tolist()]
            self.findings.append(Finding(
                "forward_values", f"forward differs from the exact forward at {len(bad)} of {y_c.size} outputs: {_listing(names)}",
                window=self.g.output_index(*bad[0].tolist()),
                expected=[Fraction(float(e_c[b, w])) for b, w in bad[:MAX_LISTED].tolist()],
                observed=[float(y_c[b, w]) for b, w in bad[:MAX_LISTED].tolist()]))
        return not bad.size

    def confirm(self, x: np.ndarray, rows: _Rows, dy: np.ndarray, repeat: bool) -> tuple[np.ndarray | None, np.ndarray]:
        """Dense call (``repeat``: twice, for determinism): returns dx and the (b, cell)
        pairs where dx differs from the superposition of the rows observed so far."""
        dx = self.backward(x, dy)
        if dx is None:
            return None, np.zeros((0, 2), dtype=int)
        again = self.backward(x, dy) if repeat else None
        if again is not None and again.tobytes() != dx.tobytes():
            diff = np.argwhere(again != dx)
            self.bwd.flag("nondeterministic", "nondeterministic",
                          f"backward gave different results for the same x and dy at {len(diff)} cells "
                          f"(first {_fmt(self.g.input_index(*diff[0].tolist()))})")
        predicted = self.scatter(dy, rows.obs)
        bound = self.scatter(np.abs(dy), np.abs(rows.obs))
        count = self.scatter(np.ones_like(dy), np.ones_like(rows.obs))
        for (b, w), vs in rows.stray.items():
            for bb, c, v in vs:
                predicted[bb, c] += dy[b, w] * v
                bound[bb, c] += abs(dy[b, w] * v)
                count[bb, c] += 1
        tol = gamma(count + 2, self.u) * bound + 2.0**-60 * bound
        return dx, np.argwhere(np.abs(dx - predicted) > tol)

    def windows_reading(self, b: int, cell: int) -> list[tuple[int, int]]:
        return [(b, int(w)) for w in np.flatnonzero((self.g.cells == cell).any(axis=1))]

    def finite_differences(self, x: np.ndarray) -> np.ndarray | None:
        """Compressed central differences of the implementation's own forward.

        Returns the FD Jacobian rows (B, W, K), or None when the forward failed.
        Error bound: each forward output carries at most B_w = gamma_{n+1} sum|x|/d
        (avg; max is exact), so (y+ - y-)/(2h) is within (B_w(x+) + B_w(x-))/(2h).
        """
        if self.fwd is None:
            return None
        g = self.g
        h = 0.25
        xc = g.to_canonical(x).astype(np.float64)
        if not (np.array_equal((xc + h).astype(self.dtype), xc + h) and np.array_equal((xc - h).astype(self.dtype), xc - h)):
            return None
        in_colours, n = input_colouring(g)
        fd = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
        tol = np.zeros_like(fd)
        n_cells = g.valid.sum(axis=1)
        safe = np.where(g.valid, g.cells, 0)
        for colour in range(n):
            e = (in_colours == colour).astype(np.float64)
            plus = self.fwd(g.from_canonical(xc + h * e, g.in_spatial).astype(self.dtype))
            minus = self.fwd(g.from_canonical(xc - h * e, g.in_spatial).astype(self.dtype))
            if plus is None or minus is None:
                return None
            p, m = g.to_canonical(plus, g.out_spatial), g.to_canonical(minus, g.out_spatial)
            slope = (p - m) / (2 * h)
            hit = (in_colours[safe] == colour) & g.valid  # (W, K): at most one per window
            if g.spec.mode == "avg":
                mass_p = np.abs(np.where(g.valid, (xc + h * e)[:, safe], 0)).sum(axis=2) / g.divisor
                mass_m = np.abs(np.where(g.valid, (xc - h * e)[:, safe], 0)).sum(axis=2) / g.divisor
                err = gamma(n_cells + 1, self.u) * (mass_p + mass_m) / (2 * h)
            else:
                err = np.zeros_like(slope)
            err = err + 2.0**-52 * np.abs(slope)
            w_idx, k_idx = np.nonzero(hit)
            fd[:, w_idx, k_idx] = slope[:, w_idx]
            tol[:, w_idx, k_idx] = err[:, w_idx]
        self.fd_tol = tol
        return fd

    def check_fd(self, rows: _Rows, fd: np.ndarray, usable: np.ndarray) -> bool:
        """Backward rows vs central differences, on windows where FD is exact enough."""
        g = self.g
        bwd_tol = self.tolerance(rows.obs)
        bad = ((np.abs(rows.obs - fd) > self.fd_tol + bwd_tol) & g.valid[None]).any(axis=2)
        for key in rows.stray:
            bad[key] = True
        where = np.argwhere(bad & usable)
        if where.size:
            names = [_fmt(self.g.output_index(b, w)) for b, w in where.tolist()]
            b, w = where[0].tolist()
            valid = g.valid[w]
            self.findings.append(Finding(
                "not_fd_consistent",
                f"backward disagrees with central differences of its own forward at {len(where)} windows: {_listing(names)}",
                window=self.g.output_index(b, w), cells=tuple(self.g.input_index(b, int(c)) for c in g.cells[w][valid]),
                expected=[float(v) for v in fd[b, w][valid]], observed=[float(v) for v in rows.obs[b, w][valid]]))
        return not where.size

    def backward_pass(self, x: np.ndarray, context: str,
                      dense: list[np.ndarray]) -> tuple[_Rows, _Exact, list[np.ndarray | None]] | None:
        """Probe, attribute, confirm with each dense dy (the first one twice), classify."""
        probed = self.probe(x)
        if probed is None:
            return None
        rows, unexplained = probed
        exact = self.exact(x)
        suspects = self.attribute(x, rows, exact, unexplained)
        results: list[np.ndarray | None] = []
        for i, dy in enumerate(dense):
            dx, off = self.confirm(x, rows, dy, repeat=i == 0)
            results.append(dx)
            if not off.size:
                continue
            # Rows that look right alone but not together: find the windows behind the
            # cells, one-hot, and re-diagnose (a swap between same-colour windows, or
            # overlapping windows that do not accumulate).
            implicated = [k for b, c in off[: 4 * MAX_LISTED].tolist() for k in self.windows_reading(b, c)]
            self.one_hot(x, rows, list(dict.fromkeys(implicated)))
            suspects = list(dict.fromkeys(suspects + self.mismatches(rows, exact)))
            if not suspects and dx is not None and not self.superposition_reported:
                cells = [self.g.input_index(b, c) for b, c in off.tolist()]
                predicted = self.scatter(dy, rows.obs)
                self.findings.append(Finding(
                    "partial_windows",
                    f"each window alone is right, but with a dense dy {len(off)} cells lose gradient from "
                    f"overlapping windows (accumulation is not a sum): {_listing([_fmt(c) for c in cells])}",
                    cells=tuple(cells[:MAX_LISTED]),
                    expected=[float(predicted[b, c]) for b, c in off[:MAX_LISTED].tolist()],
                    observed=[float(dx[b, c]) for b, c in off[:MAX_LISTED].tolist()]))
                self.superposition_reported = True
        if suspects:
            self.classify(rows, exact, suspects, context)
        if self.g.spec.mode == "max":
            self.tie_policy(rows, exact, suspects)
        return rows, exact, results

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None) -> Report:
        g = self.g
        forward_ok = self.check_forward(x)
        # The dense confirmation uses distinct dy values, so gradient swapped between
        # windows shows; a caller's dy is one more dense call, reported in the stats.
        dense = [g.to_canonical(distinct_dy(g, self.dtype, 0), g.out_spatial).astype(np.float64)]
        if dy is not None:
            dense.append(g.to_canonical(dy, g.out_spatial).astype(np.float64))
        dy_c = dense[-1]
        fd_ok: bool | None = None
        mass_obs = mass_exp = 0.0
        main = self.backward_pass(x, "", dense)
        if main is not None:
            rows, exact, results = main
            dx = results[-1]
            fd = self.finite_differences(x)
            if fd is not None:
                usable = ~exact.tied & (exact.gap > 0.5)  # FD with h = 1/4 stays on one side of every kink
                fd_ok = self.check_fd(rows, fd, usable)
                if g.n_in * g.batch <= 4096 and usable.all():
                    self.stats["fd_gradient"] = g.from_canonical(self.scatter(dy_c, fd), g.in_spatial)
            if g.n_in * g.batch <= 4096 and dx is not None:
                self.stats["observed_gradient"] = g.from_canonical(dx, g.in_spatial)
                self.stats["expected_gradient"] = g.from_canonical(self.scatter(dy_c, exact.rows), g.in_spatial)
            mass_obs = float(rows.obs.sum()) + sum(v for vs in rows.stray.values() for _, _, v in vs)
            mass_exp = float(exact.rows.sum())
            if g.spec.mode == "max" and tie_x is not None:
                self.backward_pass(tie_x, " at tied inputs", [])
        tie_policy = None
        if self.policies:
            tie_policy = self.policies.pop() if len(self.policies) == 1 else "other"
            if self.tie != "any" and tie_policy != self.tie:
                self.findings.append(Finding(
                    "tie_policy", f"at ties the backward follows policy {tie_policy!r}; {self.tie!r} was demanded"))
        categories = {f.category for f in self.findings}
        backward_ok = main is not None and not self.bwd.bad and not categories & set(BACKWARD_CATEGORIES)
        missing = [k for k, v in self.window_state.items() if v == "missing_windows"]
        partial = [k for k, v in self.window_state.items() if v == "partial_windows"]
        total = g.batch * g.n_out
        self.stats.update({
            "forward_ok": forward_ok,
            "backward_ok": backward_ok,
            "fd_consistent": fd_ok,
            "windows_total": total,
            "windows_missing": len(missing),
            "windows_partial": len(partial),
            **self.counts,
            "max_abs_error": self.max_abs,
            "max_ulp_error": self.max_ulp,
            "tie_policy": tie_policy,
            "mutated_inputs": sorted(self.bwd.mutated | (self.fwd.mutated if self.fwd else set())),
            "backward_calls": self.bwd.calls,
            "forward_calls": self.fwd.calls if self.fwd else 0,
            "window_colours": self.n_colours,
            "dtype": str(self.dtype),
        })
        if not self.findings:
            headline = (f"backward matches the exact Jacobian on all {total} windows in {self.dtype} "
                        f"(max error {self.max_ulp:.2g} ULP, {self.bwd.calls} backward calls)")
            headline += "" if fd_ok is None else "; forward and central differences agree"
            headline += f"; tie policy {tie_policy}" if tie_policy else ""
        elif missing and categories <= {"missing_windows", "not_fd_consistent"}:
            names = [_fmt(self.g.output_index(b, w)) for b, w in sorted(missing)]
            headline = (f"backward visits {total - len(missing)} of {total} output windows: {_listing(names)} "
                        f"get{'s' if len(missing) == 1 else ''} nothing; {_ratio(mass_obs, mass_exp)}")
        else:
            cats = list(dict.fromkeys(f.category for f in self.findings))
            headline = f"{len(cats)} kind{'s' if len(cats) > 1 else ''} of finding ({', '.join(cats)}): {self.findings[0].message}"
        return Report(repr(self.spec), tuple(self.findings), self.stats, headline)


def verify(spec: PoolSpec, *, backward: Callable[..., Any], forward: Callable[..., Any] | None = None,
           input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = "float64",
           tie: str = "any", seed: int = 0, one_hot_budget: int = 64) -> Report:
    """Verify an implementation's backward (and forward) against the exact Jacobian.

    Args:
      spec: a pooling spec.
      backward: ``backward(x, dy) -> dx`` on NumPy arrays in the spec's layout/dtype.
      forward: optional ``forward(x) -> y``; enables the forward check and the
        finite-difference oracle.
      input_shape: the full input shape; or give ``x``.
      x: input values (default: small integers distinct within every window).
      dy: an upstream gradient for one more dense call, whose expected, observed
        and finite-difference gradients go in ``stats`` (the confirmation call always
        uses distinct dyadic values, so gradient swapped between windows shows).
      dtype: ``"float16"``, ``"float32"`` or ``"float64"``.
      tie: ``"any"`` accepts any routing in the Clarke set at max-pooling ties;
        ``"first"``, ``"last"`` or ``"split"`` demand that policy.
      seed: seeds the default inputs.
      one_hot_budget: at most this many one-hot backward calls for diagnosis.

    Returns:
      A :class:`Report`; ``report.ok`` is True when nothing was found.

    Raises:
      SpecError / InputError: the spec, shape, dtype or inputs are invalid (the
        implementation's own misbehaviour is never raised: it is in the report).
    """
    spec = check_pool_spec(spec)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in [np.dtype(d) for d in FLOAT_DTYPES]:
        raise InputError(f"dtype={dtype!r} is not valid: give 'float16', 'float32' or 'float64'")
    if tie not in ("any",) + TIE_POLICIES:
        raise InputError(f"tie={tie!r} is not valid: give 'any', 'first', 'last' or 'split'")
    if not callable(backward) or (forward is not None and not callable(forward)):
        raise InputError("backward (and forward, if given) must be callables on NumPy arrays")
    if x is None and input_shape is None:
        raise InputError("give input_shape or x")
    if x is not None:
        raw = np.asarray(x)
        ExactArray.from_any(raw, "x")  # finite, numeric
        x_arr = raw.astype(dt)
        if not np.array_equal(x_arr.astype(np.float64), raw.astype(np.float64)):
            raise InputError(f"x is not exactly representable in {dt}; give values that are (e.g. small dyadic numbers)")
        g = resolve(spec, x_arr.shape)
    else:
        g = resolve(spec, tuple(input_shape))  # type: ignore[arg-type]
        x_arr = distinct_input(g, dt, seed)
    dy_arr = None
    if dy is not None:
        raw = np.asarray(dy)
        ExactArray.from_any(raw, "dy")
        if raw.shape != g.output_shape:
            raise InputError(f"dy has shape {raw.shape}; the output shape is {g.output_shape}")
        dy_arr = raw.astype(dt)
    tie_x = tie_input(g, dt, seed) if spec.mode == "max" else None
    return _Verifier(spec, g, backward, forward, dt, tie, one_hot_budget).run(x_arr, dy_arr, tie_x)
