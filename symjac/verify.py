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

from ._errors import InputError
from .exact import ExactArray
from .geometry import Geometry, resolve
from .graph import input_colouring, window_colouring
from .inputs import distinct_input, random_dyadic, tie_input
from .jacobian import exact_forward, routes
from .lowering import FLOAT_DTYPES
from .report import Finding, Report
from .spec import PoolSpec, check_pool_spec
from .symbolic import TIE_POLICIES, tie_members, window_classes

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

    def __init__(self, fn: Callable[..., Any], role: str, names: tuple[str, ...], out_shape: tuple[int, ...], dtype: np.dtype, findings: list[Finding]):
        self.fn, self.role, self.names, self.out_shape, self.dtype = fn, role, names, out_shape, dtype
        self.findings = findings
        self.calls = 0
        self.mutated: set[str] = set()
        self.flagged: set[str] = set()

    def _flag(self, key: str, category: str, message: str, **kw: Any) -> None:
        if key not in self.flagged:
            self.flagged.add(key)
            self.findings.append(Finding(category, message, **kw))

    def __call__(self, *args: np.ndarray) -> np.ndarray | None:
        self.calls += 1
        before = [a.copy() for a in args]
        try:
            out = self.fn(*args)
        except Exception as exc:  # noqa: BLE001 - the implementation's failure is a finding
            self._flag(f"raise:{type(exc).__name__}", "bad_output",
                       f"{self.role} raised {type(exc).__name__}: {exc}")
            return None
        for name, a, b in zip(self.names, args, before):
            if a.tobytes() != b.tobytes():
                self.mutated.add(name)
                changed = np.argwhere(a != b)[:MAX_LISTED]
                self._flag(f"mutate:{name}", "mutates_inputs",
                           f"{self.role} changed its input {name} in place "
                           f"(first changed cells: {_listing([_fmt(tuple(int(i) for i in c)) for c in changed])})",
                           cells=tuple(tuple(int(i) for i in c) for c in changed),
                           expected=b[tuple(changed.T)] if changed.size else None,
                           observed=a[tuple(changed.T)] if changed.size else None)
                a[...] = b  # restore, so later calls see the intended input
        try:
            arr = np.asarray(out)
        except Exception:  # noqa: BLE001
            self._flag("type", "bad_output", f"{self.role} returned {type(out).__name__}, not an array")
            return None
        if arr.shape != self.out_shape:
            self._flag("shape", "bad_output", f"{self.role} returned shape {arr.shape}; expected {self.out_shape}")
            return None
        if arr.dtype.kind not in "fiu":
            self._flag("kind", "bad_output", f"{self.role} returned dtype {arr.dtype}; expected {self.dtype}")
            return None
        if arr.dtype != self.dtype:
            self._flag("dtype", "bad_output", f"{self.role} returned dtype {arr.dtype}; expected {self.dtype}")
        arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            bad = [tuple(int(i) for i in c) for c in np.argwhere(~np.isfinite(arr))]
            self._flag("finite", "bad_output",
                       f"{self.role} returned NaN/Inf at {_listing([_fmt(c) for c in bad])}",
                       cells=tuple(bad[:MAX_LISTED]))
            return None
        return arr


@dataclasses.dataclass
class _Rows:
    """Per window (batch, window, slot): what the backward sent to each cell of the window."""

    obs: np.ndarray  # (B, W, K) float64
    stray: dict[tuple[int, int], list[tuple[int, int, float]]]  # (b, w) -> [(b', cell, value)] outside the window
    one_hot: set[tuple[int, int]]


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

    # -- helpers ------------------------------------------------------------------
    def out_index(self, b: int, w: int) -> tuple[int, ...]:
        g = self.g
        flat = int(g.flat_index(np.array(b), np.array(w), g.out_spatial))
        return tuple(int(i) for i in np.unravel_index(flat, g.output_shape))

    def in_index(self, b: int, cell: int) -> tuple[int, ...]:
        g = self.g
        flat = int(g.flat_index(np.array(b), np.array(cell), g.in_spatial))
        return tuple(int(i) for i in np.unravel_index(flat, g.input_shape))

    def backward(self, x: np.ndarray, dy_c: np.ndarray) -> np.ndarray | None:
        dy = self.g.from_canonical(dy_c.astype(self.dtype), self.g.out_spatial)
        dx = self.bwd(x, dy)
        return None if dx is None else self.g.to_canonical(dx)

    def expected_rows(self, x: np.ndarray, policy: str) -> np.ndarray:
        """(B, W, K) exact Jacobian rows as float64 (exact values correctly rounded)."""
        g = self.g
        r = routes(g, ExactArray.from_any(x) if g.spec.mode == "max" else None, policy)
        rows = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
        i = 0
        for c in window_classes(g):
            for j in range(len(c.slots)):
                rt = r.routes[i]
                i += 1
                rows[:, c.windows, c.slots[j]] = np.broadcast_to(rt.weight, (g.batch, c.windows.size)) / r.q
        return rows

    # -- probing --------------------------------------------------------------------
    def probe(self, x: np.ndarray) -> tuple[_Rows, list[tuple[int, int, int, float]]] | None:
        """One backward call per window colour with dy = indicator of the colour.

        Returns the rows and the unexplained gradient: (colour, b, cell, value) for
        nonzero dx on cells no window of the probed colour reads.
        """
        g = self.g
        K = g.cells.shape[1]
        obs = np.zeros((g.batch, g.n_out, K))
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
        for b, w in suspects[: self.budget]:
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

    def attribute(self, x: np.ndarray, rows: _Rows, exp: np.ndarray,
                  unexplained: list[tuple[int, int, int, float]]) -> list[tuple[int, int]]:
        """Find the windows behind every discrepancy, one-hot probing the suspects."""
        suspects = self.diagnose(rows, exp)
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
        return self.diagnose(rows, exp)

    # -- diagnosis --------------------------------------------------------------------
    def tolerance(self, exact: np.ndarray, terms: int | np.ndarray = 1) -> np.ndarray:
        return gamma(np.asarray(terms) + 2, self.u) * np.abs(exact) + 2.0**-60 * np.abs(exact)

    def diagnose(self, rows: _Rows, exp: np.ndarray, where: np.ndarray | None = None) -> list[tuple[int, int]]:
        """Compare observed rows with expected ones; return mismatching (b, w)."""
        g = self.g
        valid = g.valid[None]
        tol = self.tolerance(exp)
        err = np.abs(rows.obs - exp) * valid
        bad = (err > tol).any(axis=2)
        if where is not None:
            bad &= where
        for key in rows.stray:
            if where is None or where[key]:
                bad[key] = True
        mask = valid & (exp != 0) if where is None else valid & (exp != 0) & where[..., None]
        self.max_abs = max(self.max_abs, float(err.max(initial=0.0)))
        if mask.any():
            self.max_ulp = max(self.max_ulp, float(ulps(err[mask], exp[mask], self.dtype).max()))
        return [tuple(int(i) for i in k) for k in np.argwhere(bad)]  # type: ignore[misc]

    def classify(self, rows: _Rows, exp: np.ndarray, suspects: list[tuple[int, int]], context: str) -> None:
        g = self.g
        groups: dict[str, list[tuple[int, int]]] = {"missing_windows": [], "partial_windows": [],
                                                    "wrong_cells": [], "wrong_weights": []}
        details: dict[tuple[int, int], dict[str, Any]] = {}
        for b, w in suspects:
            valid = g.valid[w]
            e, o = exp[b, w], rows.obs[b, w]
            tol = self.tolerance(e)
            want = valid & (e != 0)
            got = valid & (np.abs(o) > tol) & ~((e != 0) & (np.abs(o - e) <= tol))
            got |= valid & (e != 0) & (np.abs(o - e) <= tol)
            missing = want & (np.abs(o) <= tol) & (np.abs(o - e) > tol)
            extra_in = valid & (e == 0) & (o != 0)
            stray = rows.stray.get((b, w), [])
            wrong = want & ~missing & (np.abs(o - e) > tol)
            self.counts["edges_missing"] += int(missing.sum())
            self.counts["edges_extra"] += int(extra_in.sum()) + len(stray)
            self.counts["weights_wrong"] += int(wrong.sum())
            if want.any() and missing.all() == want.all() and missing[want].all() and not extra_in.any() and not stray:
                cat = "missing_windows"
            elif missing.any():
                cat = "partial_windows"
            elif extra_in.any() or stray:
                cat = "wrong_cells"
            else:
                cat = "wrong_weights"
            groups[cat].append((b, w))
            self.window_state[b, w] = cat
            cells = [self.in_index(b, int(c)) for c in g.cells[w][valid]]
            details[b, w] = {
                "cells": cells + [self.in_index(bb, c) for bb, c, _ in stray],
                "expected": [Fraction(float(v)).limit_denominator(2**20) if v else 0 for v in e[valid]] + [0] * len(stray),
                "observed": [float(v) for v in o[valid]] + [v for _, _, v in stray],
                "missing": [cells[i] for i in np.flatnonzero(missing[valid])],
                "extra": [cells[i] for i in np.flatnonzero(extra_in[valid])] + [self.in_index(bb, c) for bb, c, _ in stray],
            }
        total = g.batch * g.n_out
        for cat, members in groups.items():
            if not members:
                continue
            names = [_fmt(self.out_index(b, w)) for b, w in members]
            what = {
                "missing_windows": f"{len(members)} of {total} windows send no gradient{context}: {_listing(names)}",
                "partial_windows": f"{len(members)} windows send gradient to only part of their cells{context}: {_listing(names)}",
                "wrong_cells": f"{len(members)} windows send gradient to cells whose exact derivative is 0{context}: {_listing(names)}",
                "wrong_weights": f"{len(members)} windows reach the right cells with wrong values{context}: {_listing(names)}",
            }[cat]
            self.findings.append(Finding(cat, what))
            for b, w in members[:MAX_LISTED]:
                d = details[b, w]
                extra = f"; cells getting nothing: {_listing([_fmt(c) for c in d['missing']])}" if d["missing"] else ""
                extra += f"; cells that should get nothing: {_listing([_fmt(c) for c in d['extra']])}" if d["extra"] else ""
                src = "one-hot probe" if (b, w) in rows.one_hot else "colour probe"
                self.findings.append(Finding(
                    cat, f"window {_fmt(self.out_index(b, w))} ({src}){extra}",
                    window=self.out_index(b, w), cells=tuple(d["cells"]), expected=d["expected"], observed=d["observed"]))

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
            names = [_fmt(self.out_index(b, w)) for b, w in bad.tolist()]
            self.findings.append(Finding(
                "forward_values", f"forward differs from the exact forward at {len(bad)} of {y_c.size} outputs: {_listing(names)}",
                window=self.out_index(*bad[0].tolist()),
                expected=[Fraction(float(e_c[b, w])) for b, w in bad[:MAX_LISTED].tolist()],
                observed=[float(y_c[b, w]) for b, w in bad[:MAX_LISTED].tolist()]))
        return not bad.size

    def confirm(self, x: np.ndarray, rows: _Rows, dy: np.ndarray, exact_rows: np.ndarray | None) -> np.ndarray | None:
        """Dense call: the backward must equal the superposition of its own rows."""
        g = self.g
        dx = self.backward(x, dy)
        if dx is None:
            return None
        again = self.backward(x, dy)
        if again is not None and again.tobytes() != dx.tobytes():
            diff = np.argwhere(again != dx)
            self.findings.append(Finding(
                "nondeterministic", f"backward gave different results for the same x and dy at {len(diff)} cells "
                f"(first {_fmt(self.in_index(*diff[0].tolist()))})"))
        predicted = np.zeros_like(dx)
        bound = np.zeros_like(dx)
        count = np.zeros_like(dx)
        for k in range(g.cells.shape[1]):
            ok = g.valid[:, k]
            cells = g.cells[ok, k]
            predicted[:, cells] += dy[:, ok] * rows.obs[:, ok, k]
            bound[:, cells] += np.abs(dy[:, ok] * rows.obs[:, ok, k])
            count[:, cells] += 1
        tol = gamma(count + 2, self.u) * bound + 2.0**-60 * bound
        off = np.argwhere(np.abs(dx - predicted) > tol)
        if off.size and not any(f.category in ("missing_windows", "partial_windows", "wrong_cells", "wrong_weights",
                                               "tie_not_subgradient") for f in self.findings):
            cells = [self.in_index(b, c) for b, c in off.tolist()]
            self.findings.append(Finding(
                "partial_windows",
                f"each window alone is right, but with a dense dy {len(off)} cells lose gradient from overlapping "
                f"windows (accumulation is not a sum): {_listing([_fmt(c) for c in cells])}",
                cells=tuple(cells[:MAX_LISTED]),
                expected=[float(predicted[b, c]) for b, c in off[:MAX_LISTED].tolist()],
                observed=[float(dx[b, c]) for b, c in off[:MAX_LISTED].tolist()]))
        return dx

    def finite_differences(self, x: np.ndarray, rows: _Rows) -> np.ndarray | None:
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
        for colour in range(n):
            e = (in_colours == colour).astype(np.float64)
            plus = self.fwd(g.from_canonical(xc + h * e, g.in_spatial).astype(self.dtype))
            minus = self.fwd(g.from_canonical(xc - h * e, g.in_spatial).astype(self.dtype))
            if plus is None or minus is None:
                return None
            p, m = g.to_canonical(plus, g.out_spatial), g.to_canonical(minus, g.out_spatial)
            slope = (p - m) / (2 * h)
            hit = (in_colours[np.where(g.valid, g.cells, 0)] == colour) & g.valid  # (W, K): at most one per window
            if g.spec.mode == "avg":
                mass_p = np.abs(np.where(g.valid, (xc + h * e)[:, np.where(g.valid, g.cells, 0)], 0)).sum(axis=2) / g.divisor
                mass_m = np.abs(np.where(g.valid, (xc - h * e)[:, np.where(g.valid, g.cells, 0)], 0)).sum(axis=2) / g.divisor
                err = gamma(n_cells + 1, self.u) * (mass_p + mass_m) / (2 * h)
            else:
                err = np.zeros_like(slope)
            err = err + 2.0**-52 * np.abs(slope)
            w_idx, k_idx = np.nonzero(hit)
            fd[:, w_idx, k_idx] = slope[:, w_idx]
            tol[:, w_idx, k_idx] = err[:, w_idx]
        self.fd_tol = tol
        return fd

    def check_fd(self, rows: _Rows, fd: np.ndarray) -> bool:
        g = self.g
        bwd_tol = self.tolerance(rows.obs)
        bad = ((np.abs(rows.obs - fd) > self.fd_tol + bwd_tol) & g.valid[None]).any(axis=2)
        for key in rows.stray:
            bad[key] = True
        where = np.argwhere(bad)
        if where.size:
            names = [_fmt(self.out_index(b, w)) for b, w in where.tolist()]
            b, w = where[0].tolist()
            valid = g.valid[w]
            self.findings.append(Finding(
                "not_fd_consistent",
                f"backward disagrees with central differences of its own forward at {len(where)} windows: {_listing(names)}",
                window=self.out_index(b, w), cells=tuple(self.in_index(b, int(c)) for c in g.cells[w][valid]),
                expected=[float(v) for v in fd[b, w][valid]], observed=[float(v) for v in rows.obs[b, w][valid]]))
        return not where.size

    def tie_pass(self, x: np.ndarray) -> str | None:
        """Max pooling at tie-rich x: every row must lie in the Clarke set of its window."""
        g = self.g
        probed = self.probe(x)
        if probed is None:
            return None
        rows, unexplained = probed
        for colour, b, cell, value in unexplained:
            w = self.nearest_windows(colour, cell, 1)[0]
            rows.stray.setdefault((b, w), []).append((b, cell, value))
        xc = g.to_canonical(ExactArray.from_any(x).num)
        member = np.zeros((g.batch, g.n_out, g.cells.shape[1]), dtype=bool)
        for c in window_classes(g):
            member[:, c.windows[:, None], np.array(c.slots)[None, :]] = tie_members(c.template, xc[:, c.cells])
        size = member.sum(axis=2)
        obs = rows.obs
        tol = gamma(3, self.u)
        total = obs.sum(axis=2)
        inside = (~member & g.valid[None] & (obs != 0)).any(axis=2) | (member & (obs < -tol)).any(axis=2)
        bad = inside | (np.abs(total - 1) > gamma(size + 2, self.u) * size)
        for key in rows.stray:
            bad[key] = True
        # Non-tied windows were already checked at distinct inputs; here report them too.
        where = np.argwhere(bad)
        if where.size:
            names = [_fmt(self.out_index(b, w)) for b, w in where.tolist()]
            b, w = where[0].tolist()
            valid = g.valid[w]
            tied = [self.in_index(b, int(c)) for c, m in zip(g.cells[w][valid], member[b, w][valid]) if m]
            self.findings.append(Finding(
                "tie_not_subgradient",
                f"at tied inputs, {len(where)} windows route gradient outside the convex hull of their maximal cells "
                f"(rows must be >= 0, sum to 1, and touch only tied cells): {_listing(names)}; "
                f"e.g. window {names[0]} ties at {_listing([_fmt(c) for c in tied])}",
                window=self.out_index(b, w), cells=tuple(self.in_index(b, int(c)) for c in g.cells[w][valid]),
                expected=f"any convex combination over {len(tied)} tied cells",
                observed=[float(v) for v in obs[b, w][valid]]))
        tied = (size >= 2) & ~bad
        if not tied.any():
            return None
        seen = set()
        for policy in TIE_POLICIES:
            exp = self.expected_rows(x, policy)
            match = (np.abs(obs - exp) <= self.tolerance(exp) + tol * (exp == 0)).all(axis=2)
            if match[tied].all():
                seen.add(policy)
        if len(seen) == 1:
            return seen.pop()
        return "other"

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None) -> Report:
        g = self.g
        forward_ok = self.check_forward(x)
        probed = self.probe(x)
        fd_ok: bool | None = None
        tie_policy = None
        backward_ok = False
        if probed is not None:
            rows, unexplained = probed
            exp = self.expected_rows(x, "first")
            suspects = self.attribute(x, rows, exp, unexplained)
            if suspects:
                self.classify(rows, exp, suspects, "")
            dy_c = g.to_canonical(dy, g.out_spatial).astype(np.float64) if dy is not None else \
                g.to_canonical(random_dyadic(g, g.out_spatial, self.dtype, 0), g.out_spatial).astype(np.float64)
            dx = self.confirm(x, rows, dy_c, exp)
            fd = self.finite_differences(x, rows)
            if fd is not None:
                fd_ok = self.check_fd(rows, fd)
                if g.n_in * g.batch <= 4096:
                    grad = np.zeros((g.batch, g.n_in))
                    for k in range(g.cells.shape[1]):
                        ok = g.valid[:, k]
                        grad[:, g.cells[ok, k]] += dy_c[:, ok] * fd[:, ok, k]
                    self.stats["fd_gradient"] = g.from_canonical(grad, g.in_spatial)
            if g.n_in * g.batch <= 4096 and dx is not None:
                self.stats["observed_gradient"] = g.from_canonical(dx, g.in_spatial)
                exact = np.zeros((g.batch, g.n_in))
                for k in range(g.cells.shape[1]):
                    ok = g.valid[:, k]
                    exact[:, g.cells[ok, k]] += dy_c[:, ok] * exp[:, ok, k]
                self.stats["expected_gradient"] = g.from_canonical(exact, g.in_spatial)
            mass_obs = float(rows.obs.sum()) + sum(v for vs in rows.stray.values() for _, _, v in vs)
            mass_exp = float(exp.sum())
            if g.spec.mode == "max" and tie_x is not None:
                tie_policy = self.tie_pass(tie_x)
                if self.tie != "any" and tie_policy is not None and tie_policy != self.tie:
                    self.findings.append(Finding(
                        "tie_policy", f"at ties the backward follows policy {tie_policy!r}; {self.tie!r} was demanded"))
            backward_ok = not any(f.category in ("missing_windows", "partial_windows", "wrong_cells", "wrong_weights",
                                                 "tie_not_subgradient", "tie_policy", "bad_output", "nondeterministic")
                                  for f in self.findings)
        else:
            mass_obs, mass_exp = 0.0, 0.0
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
        elif missing:
            visited = total - len(missing)
            names = [_fmt(self.out_index(b, w)) for b, w in sorted(missing)]
            headline = (f"backward visits {visited} of {total} output windows: {_listing(names)} "
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
      dy: the dense confirmation dy (default: random dyadic values).
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
