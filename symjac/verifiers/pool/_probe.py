"""Probing: recover a backward's Jacobian rows with few calls.

Windows of one colour of the conflict graph (:mod:`symjac.pool._graph`) read disjoint
cells, so one backward call with ``dy`` = the colour's indicator yields every row of
that colour at once. Gradient that lands outside the probed windows, and rows that
look wrong, are pinned down with one-hot calls (``dy`` = one window), within a budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dataclasses
import functools
import itertools
from collections.abc import Callable, Generator, Iterable, Sequence

import numpy as np

from symjac.check._report import MAX_LISTED
from symjac.pool._graph import subset_colouring, window_colouring
from symjac.pool._rows import Rows

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

#: backward_each(x, dys) with each dy in canonical (B, n_out) -> each dx in canonical (B, n_in), or None when
#: unusable (read no further then); the dys are read as the calls go, in the thread that makes them.
BackwardEach = Callable[[np.ndarray, Iterable[np.ndarray]], Generator["np.ndarray | None", None, None]]
#: (b, cell, value) of gradient a colour probe found outside the windows it probed, with the colour.
Unexplained = list[tuple[int, int, int, float]]


@dataclasses.dataclass
class Recanted:
    """Windows whose colour-probe row was wrong while their one-hot row is right: ``rows``
    holds the colour probes' rows (as first observed) for the windows ``keys``."""

    rows: Rows
    keys: list[tuple[int, int]]


@functools.lru_cache(maxsize=8)
def colour_plan(g: Geometry) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Per window colour: its windows and the input cells none of them reads (where a
    probe's dx must be 0). A function of the geometry alone, so each verification at
    the same geometry reuses it (read-only arrays; ~0.2 ms at 32x32, as much as a
    small implementation's call). Kept for the last few geometries (O(colours x n_in) each)."""
    colours, n = window_colouring(g)
    order = np.argsort(colours, kind="stable")
    wins = np.split(order, np.cumsum(np.bincount(colours, minlength=n))[:-1])
    width = g.n_in + 1  # read[c, 1 + cell]: some window of colour c reads it; column 0: invalid slots (cell -1)
    read = np.zeros(n * width, dtype=bool)
    step = max(1, 2**20 // max(1, g.cells.shape[1]))
    for start in range(0, g.n_out, step):  # blocks of about 2^20 (window, slot) pairs
        block = slice(start, start + step)
        read[(colours[block, None] * width + g.cells[block] + 1).ravel()] = True
    unread = ~read.reshape(n, width)[:, 1:]
    plan = tuple((wins[c], np.flatnonzero(unread[c])) for c in range(n))
    for pair in plan:
        for a in pair:
            a.setflags(write=False)  # shared by every verification at this geometry
    return plan


class Prober:
    """Colour probes, then one-hot probes of suspect windows (at most ``budget`` calls)."""

    def __init__(self, g: Geometry, backward_each: BackwardEach, budget: int):
        self.g, self.backward_each, self.budget = g, backward_each, budget
        self.colours, self.n_colours = window_colouring(g)
        self.colour_of = self.colours  # the last probe's colour of each window (-1: not probed)
        self.one_hot_calls = 0

    def plan(self) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """Per window colour: its windows and the input cells none of them reads (where a
        probe's dx must be 0); built once per geometry (:func:`colour_plan`)."""
        return colour_plan(self.g)

    def subset_plan(self, among: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per colour of the windows some batch item of ``among`` (B, W) holds (:func:`subset_colouring`):
        its windows and the input cells none of them reads."""
        g = self.g
        wins = np.flatnonzero(among.any(axis=0))
        colours, n = subset_colouring(g, wins)
        self.colour_of = np.full(g.n_out, -1, dtype=np.int64)
        self.colour_of[wins] = colours
        plan = []
        for c in range(n):
            mine = wins[colours == c]
            read = np.zeros(g.n_in + 1, dtype=bool)
            read[g.cells[mine] + 1] = True
            plan.append((mine, np.flatnonzero(~read[1:])))
        return plan

    def probe(self, x: np.ndarray, dense: Sequence[np.ndarray] = (),
              among: np.ndarray | None = None) -> tuple[Rows, Unexplained, list[np.ndarray]] | None:
        """One backward call per window colour with dy = indicator of the colour.

        Args:
          x: the input.
          dense: further (B, n_out) dys called right after the probes, in the same
            sequence (one hand-over for all; the confirmation reads their dx later).
          among: (B, W) the windows to probe (the rest are not asked: dy 0, their rows 0
            here), coloured apart (:meth:`subset_plan`); None: every window, by the probe plan.

        Returns the rows, the unexplained gradient: (colour, b, cell, value) for
        nonzero dx on cells no window of the probed colour reads, and the dense calls'
        dx; None when the backward gave no usable result.
        """
        g = self.g
        obs = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
        unexplained: Unexplained = []
        padded = np.zeros((g.batch, g.n_in + 1))  # column -1 stays 0: what an invalid slot (cell -1) reads
        if among is None:
            self.colour_of = self.colours
            pairs = list(self.plan())
        else:
            pairs = self.subset_plan(among)
        plan = [(colour, wins, uncovered) for colour, (wins, uncovered) in enumerate(pairs) if wins.size]

        def indicator(wins: np.ndarray) -> np.ndarray:
            dy = np.zeros((g.batch, g.n_out))
            dy[:, wins] = 1.0 if among is None else among[:, wins]
            return dy

        calls = self.backward_each(x, itertools.chain((indicator(wins) for _, wins, _ in plan), dense))
        for (colour, wins, uncovered), dx in zip(plan, calls):  # plan first: no dense result read here
            if dx is None:
                calls.close()
                return None
            padded[:, :-1] = dx
            obs[:, wins, :] = padded[:, g.cells[wins]]
            outside = dx[:, uncovered]
            if np.count_nonzero(outside):  # rarely: then where (argwhere costs ~4 us even on nothing)
                for b, i in np.argwhere(outside != 0).tolist():
                    unexplained.append((colour, b, int(uncovered[i]), float(dx[b, uncovered[i]])))
        results = []
        for dx in calls:  # the dense calls, up to the first unusable one
            if dx is None:
                break
            results.append(dx)
        calls.close()
        return Rows(obs, {}, set()), unexplained, results

    def nearest_windows(self, colour: int, cell: int, count: int) -> list[int]:
        """Windows of ``colour`` whose start is nearest (Chebyshev) to ``cell``."""
        wins = np.flatnonzero(self.colour_of == colour)
        pos = np.array(self.g.cell_position(cell))
        starts = self.g.window_starts()
        d = np.abs(starts[wins] - pos).max(axis=1)
        return [int(w) for w in wins[np.argsort(d, kind="stable")[:count]]]

    def one_hot(self, x: np.ndarray, rows: Rows, suspects: list[tuple[int, int]]) -> None:
        """Exact rows for suspect windows: one backward call each, dy = one-hot."""
        g = self.g
        todo = [key for key in dict.fromkeys(suspects) if key not in rows.one_hot]
        todo = todo[:max(0, self.budget - self.one_hot_calls)]

        def one_hot_dy(b: int, w: int) -> np.ndarray:
            dy = np.zeros((g.batch, g.n_out))
            dy[b, w] = 1.0
            return dy

        calls = self.backward_each(x, (one_hot_dy(b, w) for b, w in todo))
        for dx, (b, w) in zip(calls, todo):  # calls first: read to its end
            self.one_hot_calls += 1
            if dx is None:
                calls.close()
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

    def attribute(self, x: np.ndarray, rows: Rows, unexplained: Unexplained,
                  mismatches: Callable[[Rows], list[tuple[int, int]]]) -> tuple[list[tuple[int, int]], Recanted]:
        """Find the windows behind every discrepancy, one-hot probing the suspects.

        ``mismatches(rows)`` names the windows whose rows are wrong. Returns it after
        probing, and the colour probes' rows that a one-hot probe contradicts: windows
        wrong in their colour probe whose one-hot row is right. The colour probe's call
        still answered wrongly for what it asked (a backward wrong on some calls only),
        so those rows stay a finding (:class:`Recanted`), never overwritten into a pass.
        """
        suspects = mismatches(rows)
        wrong_in_colour = list(suspects)
        for colour, b, cell, _ in unexplained[: 4 * MAX_LISTED]:
            suspects += [(b, w) for w in self.nearest_windows(colour, cell, 4)]
        suspects = list(dict.fromkeys(suspects))
        if not suspects:
            return [], Recanted(rows, [])
        before = Rows(rows.obs.copy(), dict(rows.stray), set()) if wrong_in_colour else rows
        self.one_hot(x, rows, suspects)
        explained = {(bb, c) for vs in rows.stray.values() for bb, c, _ in vs}
        for colour, b, cell, value in unexplained:
            if (b, cell) not in explained:  # beyond the one-hot budget: blame the nearest window
                w = self.nearest_windows(colour, cell, 1)[0]
                rows.stray.setdefault((b, w), []).append((b, cell, value))
        found = mismatches(rows)
        still = set(found)
        recanted = [k for k in wrong_in_colour if k not in still and k in rows.one_hot]
        if recanted:  # the difference may be another window's: gradient it sent outside its own window
            recanted = self._senders(x, rows, before, recanted)
            found = mismatches(rows)
        return found, Recanted(before, recanted)

    def _senders(self, x: np.ndarray, rows: Rows, before: Rows, recanted: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Windows of ``recanted`` whose colour-probe row stays unexplained once the windows of
        its colour nearest to each differing cell are one-hot probed: a window that sent gradient
        outside itself onto cells another window of its colour reads (a stray row, a finding of its
        own) made that window's colour row look wrong though its own is right."""
        g, differing = self.g, {}
        for b, w in recanted:
            slots = np.flatnonzero(g.valid[w] & (before.obs[b, w] != rows.obs[b, w]))
            differing[b, w] = [int(c) for c in g.cells[w][slots]]
        near = [(b, v) for (b, w), cells in differing.items() for cell in cells
                for v in self.nearest_windows(int(self.colour_of[w]), cell, 4) if v != w]
        self.one_hot(x, rows, near)
        sent = {(bb, c) for (b, v), hits in rows.stray.items() for bb, c, _ in hits}
        return [k for k in recanted if not all((k[0], c) in sent for c in differing[k])]
