"""Tests for ``symjac.pool._rows``: scattering Jacobian rows into cells.

Expected values come from the definition, a Python loop over every (slice, window,
slot) here; the values are small dyadic numbers, so every sum is exact in any order.
"""

from __future__ import annotations

import numpy as np
import pytest

from symjac import Pool
from symjac.pool._geometry import resolve
from symjac.pool import _rows as _pool_rows


def _by_definition(g, per_window, rows):
    out, mag = np.zeros((g.batch, g.n_in)), np.zeros((g.batch, g.n_in))
    for b in range(g.batch):
        for w in range(g.n_out):
            for k in range(g.cells.shape[1]):
                if g.valid[w, k]:
                    term = per_window[b, w] * rows[b, w, k]
                    out[b, g.cells[w, k]] += term
                    mag[b, g.cells[w, k]] += abs(term)
    return out, mag


@pytest.mark.parametrize("path", ["per slice", "every slice at once"])
@pytest.mark.parametrize("spec, shape", [(Pool("avg", 3, stride=1, padding=1), (3, 2, 5, 4)),
                                         (Pool("max", 2, stride=2, padding=1, ceil_mode=True), (6, 1, 3, 3)),
                                         (Pool("avg", 3, stride=1, padding=1, layout="channels_last"), (2, 4, 4, 3))])
def test_scatter_pair_is_the_sum_of_every_window_term(monkeypatch, path, spec, shape):
    monkeypatch.setattr(_pool_rows, "PER_SLICE", 0 if path == "per slice" else 2**62)
    g = resolve(spec, shape)
    rng = np.random.default_rng(3)
    per_window = rng.integers(-8, 9, (g.batch, g.n_out)) / 4
    rows = rng.integers(-4, 5, (g.batch, g.n_out, g.cells.shape[1])) / 8 * g.valid
    out, mag = _pool_rows.scatter_pair(g, per_window, rows)
    want_out, want_mag = _by_definition(g, per_window, rows)
    assert np.array_equal(out, want_out) and np.array_equal(mag, want_mag)
    assert np.array_equal(_pool_rows.scatter(g, per_window, rows), want_out)
