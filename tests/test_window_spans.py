"""The orders family's window spans and the padding test, read per axis, against their definition
on the (windows, K) table: the span of a window's real cells along each axis (every window with a
real cell), and whether some window has a kernel slot outside the input."""

from __future__ import annotations

import random

import numpy as np
import pytest

import symjac
from symjac import SpecError
from symjac.pool._geometry import resolve
from symjac.verifiers.pool._inputs import touches_padding, window_spans


def _by_table(g):
    cells, valid = g.cells, g.valid
    if not valid.any():
        return tuple(1 for _ in g.in_spatial), not valid.all()
    spans = []
    for coords in np.unravel_index(np.where(valid, cells, 0), g.in_spatial):
        rows = [coords[w][valid[w]] for w in range(len(coords)) if valid[w].any()]
        spans.append(max(int(r.max() - r.min()) + 1 for r in rows))
    kernel = getattr(g.spec, "kernel", None)
    touches = kernel is not None and (cells.shape[1] < np.prod(kernel) or not valid.all())
    return tuple(spans), touches


def _specs(seed: int):
    rng = random.Random(seed)
    for _ in range(150):
        rank = rng.choice([1, 2])
        shape = (1, 1) + tuple(rng.randint(1, 12) for _ in range(rank))
        if rng.random() < 0.2:
            yield symjac.AdaptivePool(rng.choice(["max", "avg"]), tuple(rng.randint(1, 6) for _ in range(rank))), shape
            continue
        padding = rng.choice(["valid", "same", tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in range(rank))])
        try:
            spec = symjac.Pool(rng.choice(["max", "avg"]), tuple(rng.randint(1, 5) for _ in range(rank)),
                               stride=tuple(rng.randint(1, 3) for _ in range(rank)),
                               dilation=tuple(rng.randint(1, 2) for _ in range(rank)),
                               padding=padding, ceil_mode=padding != "same" and rng.random() < 0.3)
        except SpecError:  # a combination the spec refuses
            continue
        yield spec, shape


@pytest.mark.parametrize("seed", range(3))
def test_per_axis_spans_and_padding_match_the_table(seed):
    checked = 0
    for spec, shape in _specs(seed):
        try:
            g = resolve(spec, shape)
        except SpecError:
            continue
        spans, touches = _by_table(g)
        assert window_spans(g) == spans, (spec, shape)
        if isinstance(spec, symjac.Pool):
            assert touches_padding(g) == touches, (spec, shape)
        checked += 1
    assert checked >= 60
