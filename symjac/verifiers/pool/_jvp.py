"""Forward mode: recover an implementation's ``J(x)·t`` by colouring the inputs, and diagnose it.

The VJP probes colour the *windows* (rows); the JVP probes colour the *inputs*
(columns): two cells share a colour when no window reads both
(:func:`symjac.pool._graph.input_colouring`, the Curtis–Powell–Reid groups). With
``t`` the indicator of one colour, every window reads at most one cell of it, so
``(J t)[b, w]`` is the single entry ``J[b, w, slot]`` of the slot whose cell has that
colour: one call per input colour recovers every entry of every row exactly, in the
same (B, W, K) layout the VJP's probes fill (:class:`~symjac.pool._rows.Rows`).
Output a window gives for a colour none of its cells has is gradient from a cell
outside it; one-hot tangents at the nearest cells of that colour pin the cell down.

The rows then go through the VJP's diagnosis (:mod:`symjac.verifiers.pool._diagnose`),
so a finding reads in the same words (which windows, which cells, how much); one
dense call with distinct dyadic ``t`` confirms that the rows superpose (within
``γ_{K+2}·Σ|terms|``, a sum of K rounded products), and a repeat of it checks
determinism; windows it contradicts get one-hot columns (a swap between slices shows there).
At ties (max pooling) the rows must lie in the Clarke set; whether
they are the backward's own element is :func:`same_element`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from symjac.check._report import MAX_LISTED, Finding, fmt_index, listing
from symjac.check._rounding import gamma, precision
from symjac.pool._geometry import Geometry
from symjac.pool._graph import input_colouring
from symjac.verifiers.pool._diagnose import Diagnosis
from symjac.pool._rows import ExactRows, Rows, exact_rows, row_tolerance, superposition_tolerance

#: tangent_each(x, ts) with each t canonical (B, n_in) -> each J·t canonical (B, n_out) float64, or None (unusable).
TangentEach = Callable[[np.ndarray, Iterable[np.ndarray]], Generator["np.ndarray | None", None, None]]


def distinct_tangent(g: Geometry, dtype: np.dtype[Any], seed: int = 0) -> np.ndarray:
    """Canonical (B, n_in) tangents with distinct magnitudes (as far as the dtype holds
    integers) and random signs, in quarters: a JVP that swaps two cells changes the result."""
    rng = np.random.default_rng(seed + 5)
    n = g.batch * g.n_in
    limit = 2 ** precision(dtype)
    values = (rng.permutation(n) % limit + 1) * rng.choice([-1, 1], size=n) / 4
    return np.asarray(values.reshape(g.batch, g.n_in), dtype=np.float64)


class ColumnProber:
    """Colour probes on the input side, then one-hot tangents for stray output (within ``budget`` calls)."""

    def __init__(self, g: Geometry, tangent_each: TangentEach, budget: int):
        self.g, self.tangent_each, self.budget = g, tangent_each, budget
        self.colours, self.n_colours = input_colouring(g)
        self.one_hot_calls = 0
        safe = np.where(g.valid, g.cells, 0)
        self.slot_colour = np.where(g.valid, self.colours[safe], -1)  # (W, K)

    def probe(self, x: np.ndarray, dense: list[np.ndarray]) -> tuple[Rows, list[np.ndarray]] | None:
        """One call per input colour (t = its indicator on every slice), then the ``dense`` tangents.

        Returns the rows (stray output attributed by one-hot calls) and the dense calls'
        results; None when the implementation gave no usable result.
        """
        g = self.g
        obs = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
        stray: list[tuple[int, int, int, float]] = []  # (colour, b, window, value)

        def indicator(k: int) -> np.ndarray:
            return np.broadcast_to((self.colours == k).astype(np.float64), (g.batch, g.n_in))

        calls = self.tangent_each(x, [*(indicator(k) for k in range(self.n_colours)), *dense])
        results: list[np.ndarray] = []
        for i, y in enumerate(calls):
            if y is None:
                calls.close()
                return None if i < self.n_colours else (Rows(obs, {}, set()), results)
            if i >= self.n_colours:
                results.append(y)
                continue
            mask = self.slot_colour == i  # (W, K): at most one slot a window
            w_idx, k_idx = np.nonzero(mask)
            obs[:, w_idx, k_idx] = y[:, w_idx]
            outside = ~mask.any(axis=1)
            if np.count_nonzero(y[:, outside]):
                wins = np.flatnonzero(outside)
                for b, j in np.argwhere(y[:, outside] != 0).tolist():
                    stray.append((i, b, int(wins[j]), float(y[b, wins[j]])))
        rows = Rows(obs, {}, set())
        if stray:
            self.attribute(x, rows, stray)
        return rows, results

    def nearest_cells(self, colour: int, w: int, count: int) -> list[int]:
        """Cells of ``colour`` nearest (Chebyshev) to window ``w``'s start."""
        g = self.g
        cells = np.flatnonzero(self.colours == colour)
        start = g.window_starts()[w]
        pos = np.stack(np.unravel_index(cells, g.in_spatial), axis=-1)
        d = np.abs(pos - start).max(axis=1)
        return [int(c) for c in cells[np.argsort(d, kind="stable")[:count]]]

    def refine(self, x: np.ndarray, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]], u: float) -> None:
        """Untied suspect windows, slot by slot: a wrong entry is either the cell's own
        (a one-hot tangent at it says) or a cell of the same colour elsewhere leaking into
        the window (then the one-hot tangents at that colour's nearest cells find it)."""
        g = self.g
        tol = row_tolerance(exact, u)
        slots: list[tuple[int, int, int]] = []
        for b, w in suspects[: 4 * MAX_LISTED]:
            if exact.tied[b, w]:
                continue  # the Clarke set, not one row, is the reference there
            bad = g.valid[w] & (np.abs(rows.obs[b, w] - exact.rows[b, w]) > tol[b, w])
            slots += [(b, w, int(k)) for k in np.flatnonzero(bad)]
        todo = list(dict.fromkeys((b, int(g.cells[w, k])) for b, w, k in slots))
        leaks: list[tuple[int, int, int, float]] = []
        for (b, c), y in zip(todo, self.columns(x, todo)):
            if y is None:
                return
            for bb, w, k in slots:
                if bb == b and g.cells[w, k] == c:
                    residual = rows.obs[b, w, k] - y[b, w]
                    rows.obs[b, w, k] = y[b, w]
                    if residual != 0:  # the rest came from another cell of the colour
                        leaks.append((int(self.colours[c]), b, w, float(residual)))
        if leaks:
            self.attribute(x, rows, leaks, exclude=set(todo))

    def one_hot_windows(self, x: np.ndarray, rows: Rows, windows: list[tuple[int, int]]) -> None:
        """Exact rows for windows the dense call contradicts: one-hot tangents at each of their
        cells (a column each: read into every window of the slice that reads the cell, and
        anything elsewhere, another slice included, is stray)."""
        g = self.g
        todo = list(dict.fromkeys((b, int(c)) for b, w in windows[: 4 * MAX_LISTED] for c in g.cells[w][g.valid[w]]))
        for (b, c), y in zip(todo, self.columns(x, todo)):
            if y is None:
                return
            reads = (g.cells == c) & g.valid  # (W, K)
            w_idx, k_idx = np.nonzero(reads)
            rows.obs[b, w_idx, k_idx] = y[b, w_idx]
            for bb, w in np.argwhere(y != 0).tolist():
                if bb == b and reads[w].any():
                    continue
                have = rows.stray.setdefault((bb, w), [])
                if not any(cb == b and cc == c for cb, cc, _ in have):
                    have.append((b, c, float(y[bb, w])))

    def columns(self, x: np.ndarray, cells: list[tuple[int, int]]) -> Generator[np.ndarray | None, None, None]:
        """One-hot tangents at (b, cell), within the budget: each result is that cell's column."""
        g = self.g
        cells = cells[: max(0, self.budget - self.one_hot_calls)]

        def one_hot(b: int, c: int) -> np.ndarray:
            t = np.zeros((g.batch, g.n_in))
            t[b, c] = 1.0
            return t

        calls = self.tangent_each(x, (one_hot(b, c) for b, c in cells))
        for y in calls:
            self.one_hot_calls += 1
            if y is None:
                calls.close()
                yield None
                return
            yield y

    def attribute(self, x: np.ndarray, rows: Rows, stray: list[tuple[int, int, int, float]],
                  exclude: set[tuple[int, int]] | None = None) -> None:
        """One-hot tangents at the cells nearest the windows with stray output: each call
        is a column of the implementation's Jacobian, read into the rows and the strays."""
        g = self.g
        skip = exclude or set()
        todo: list[tuple[int, int]] = []
        for colour, b, w, _ in stray[: 4 * MAX_LISTED]:
            todo += [(b, c) for c in self.nearest_cells(colour, w, 5) if (b, c) not in skip][:4]
        todo = list(dict.fromkeys(todo))
        found: set[tuple[int, int]] = set()  # (b, w) whose stray output a column explained
        for y, (b, c) in zip(self.columns(x, todo), todo):
            if y is None:
                break
            reads = (g.cells == c) & g.valid  # (W, K)
            for bb, w in np.argwhere(y != 0).tolist():
                if bb == b and reads[w].any():
                    continue
                rows.stray.setdefault((bb, w), []).append((b, c, float(y[bb, w])))
                found.add((bb, w))
        for colour, b, w, value in stray:
            if (b, w) not in found:  # beyond the budget: blame the nearest cell of the colour
                near = [c for c in self.nearest_cells(colour, w, 2) if (b, c) not in skip]
                if near:
                    rows.stray.setdefault((b, w), []).append((b, near[0], value))


def superpose(g: Geometry, rows: Rows, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Σ_k rows[b, w, k]·t[b, cells[w, k]]`` (+ stray columns) and its Σ|terms|, canonical (B, n_out)."""
    terms = rows.obs * g.gather(t)
    predicted, bound = terms.sum(axis=-1), np.abs(terms).sum(axis=-1)
    for (b, w), vs in rows.stray.items():
        for bb, c, v in vs:
            predicted[b, w] += v * t[bb, c]
            bound[b, w] += abs(v * t[bb, c])
    return predicted, bound


def exact_at(g: Geometry, x: np.ndarray, dtype: np.dtype[Any]) -> ExactRows:
    """The exact rows at x (the operator's ``rows`` rule, with its bounds)."""
    return exact_rows(g, x, dtype)


def suspects_of(g: Geometry, x: np.ndarray, prober: ColumnProber, rows: Rows, exact: ExactRows,
                diagnosis: Diagnosis, u: float) -> list[tuple[int, int]]:
    """The windows whose rows are wrong, after one-hot columns refined them."""
    suspects = diagnosis.mismatches(rows, exact)
    if suspects:
        prober.refine(x, rows, exact, suspects, u)
        suspects = diagnosis.mismatches(rows, exact)
    return suspects


def classify(g: Geometry, rows: Rows, exact: ExactRows, diagnosis: Diagnosis, suspects: list[tuple[int, int]],
             u: float, context: str) -> None:
    """The VJP's diagnosis on JVP rows: Clarke policy findings, classification, tie policy."""
    op = g.operator
    if suspects:
        finding, policy, suspects = op.outside_clarke(g, rows, exact, suspects, u, context)
        if finding is not None and policy is not None:
            diagnosis.findings.append(finding)
            diagnosis.policies.add(policy)
    if suspects:
        diagnosis.classify(rows, exact, suspects, context)
    op.tie_policy(diagnosis, rows, exact, suspects)


def contradicted(g: Geometry, rows: Rows, t: np.ndarray, y: np.ndarray, u: float,
                 suspects: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Windows (not suspects already) where the dense call differs from the superposition of
    the probed rows, within ``γ_{K+2}·Σ|terms|`` (a JVP is linear in t)."""
    predicted, bound = superpose(g, rows, t)
    tol = superposition_tolerance(bound, g.cells.shape[1], u)
    known = set(suspects)
    return [(b, w) for b, w in np.argwhere(np.abs(y - predicted) > tol).tolist() if (b, w) not in known]


def not_linear(g: Geometry, rows: Rows, t: np.ndarray, y: np.ndarray, off: list[tuple[int, int]],
               findings: list[Finding], context: str) -> None:
    """Every row right alone (one-hot columns confirmed them) yet the dense call differs."""
    predicted, _ = superpose(g, rows, t)
    names = [fmt_index(g.output_index(b, w)) for b, w in off]
    findings.append(Finding(
        "partial_windows",
        f"each column is right, but with a dense t {len(off)} windows{context} differ from the sum of "
        f"their columns (the JVP is not linear in t): {listing(names)}",
        window=g.output_index(*off[0]),
        expected=[float(predicted[b, w]) for b, w in off[:MAX_LISTED]],
        observed=[float(y[b, w]) for b, w in off[:MAX_LISTED]]))


def same_element(g: Geometry, jvp_rows: Rows, vjp_rows: Rows, exact: ExactRows, u: float) -> tuple[bool, list[str]]:
    """Whether the JVP's rows equal the backward's at every tied window (within γ_3 of
    each entry: one rounding of the weight and one of the product, as a probe's row);
    the tied windows where they differ."""
    tied = exact.tied
    if not tied.any():
        return True, []
    scale = np.maximum(np.abs(jvp_rows.obs), np.abs(vjp_rows.obs))
    tol = np.maximum(row_tolerance(exact, u), gamma(3, u) * scale)
    differ = ((np.abs(jvp_rows.obs - vjp_rows.obs) > tol) & g.valid[None]).any(axis=-1) & tied
    return not differ.any(), [fmt_index(g.output_index(b, w)) for b, w in np.argwhere(differ).tolist()]
