"""Tests for ``symjac.verifiers.pool._probe``: the colour plan the probes follow.

Expected values come from the definition, checked window by window here: a colour's
windows are those the window colouring gives that colour, and the cells none of
them reads are every input cell outside their stored valid slots.
"""

from __future__ import annotations


from symjac import Pool
from symjac.pool._geometry import resolve
from symjac.pool._graph import window_colouring
from symjac.verifiers.pool._probe import colour_plan


def _by_definition(g):
    colours, n = window_colouring(g)
    plan = []
    for c in range(n):
        wins = [w for w in range(g.n_out) if colours[w] == c]
        read = {int(cell) for w in wins for cell, ok in zip(g.cells[w], g.valid[w]) if ok}
        plan.append((wins, [cell for cell in range(g.n_in) if cell not in read]))
    return plan


def test_colour_plan_is_each_geometrys_own_and_reused():
    spec = Pool("max", 3, stride=1, padding=1)
    small, large = resolve(spec, (1, 1, 5, 5)), resolve(Pool("max", 2, stride=2), (2, 1, 6, 4))
    for g in (small, large, small):  # a cached plan must not answer for another geometry
        plan = colour_plan(g)
        assert [(w.tolist(), u.tolist()) for w, u in plan] == _by_definition(g)
        assert all(not a.flags.writeable for pair in plan for a in pair)  # shared: read-only
    assert colour_plan(small) is colour_plan(small)
