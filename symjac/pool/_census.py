"""Tie census: which pooling windows sit where AD is wrong over the reals, or only in floats.

Seed 001 splits the points where max pooling's derivative is not unique into a
*bifurcation zone* (ties over the reals: AD's choice matters mathematically) and a
*compensation zone* (values distinct over the reals that rounding made equal: AD
is wrong only in floating point). With the exact values of the same computation
as a reference, every window of ``x`` (the values in their dtype) falls in one of

- ``untied``: no tie in x nor in the reference;
- ``exact``: tied in x and in the reference (bifurcation);
- ``rounding``: tied in x, distinct in the reference (compensation);
- ``broken``: tied in the reference, distinct in x (rounding split a real tie).

For lp pooling the nonsmooth point is the all-zero window (S = 0), and "tied"
reads "all zero". Where x ties, backprop depends on the tie policy: the census
applies the exact difference ``(J_β1 − J_β0)^T dy`` at x (for lp, zero_window
"one" minus "zero") and lists, per zone, the batch items where it is not zero.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._ops import operator_of
from symjac.pool._spec import check_pool_spec

ZONES = ("untied", "exact", "rounding", "broken")
#: The two zones where backprop may differ between policies, by the zone's tie kind.
DIFFERENCE_ZONES = {"bifurcation": "exact", "compensation": "rounding"}


@dataclasses.dataclass(frozen=True, eq=False)
class Census:
    """The outcome of :func:`symjac.tie_census`.

    Attributes:
      spec: the pooling spec.
      dtype: x's dtype.
      kinds: (output shape) int array, an index into :data:`ZONES` per window.
      per_item: (items, 4) window counts per batch item (N), columns as ZONES.
      policies: the two policies compared (``(Beta(b0), Beta(b1))``, or
        ``("zero", "one")`` for lp).
      differs: zone ("bifurcation", "compensation") -> the batch items where that
        zone's windows change the gradient between the two policies.
      difference: the exact ``(J_1 − J_0)^T dy`` at x, in x's shape.
    """

    spec: Any
    dtype: np.dtype
    kinds: np.ndarray
    per_item: np.ndarray
    policies: tuple[Any, Any]
    differs: dict[str, tuple[int, ...]]
    difference: ExactArray

    @property
    def totals(self) -> dict[str, int]:
        """Window counts over the whole batch, by zone."""
        return {z: int(n) for z, n in zip(ZONES, self.per_item.sum(axis=0))}

    def items_with(self, zone: str) -> tuple[int, ...]:
        """Batch items with at least one window of ``zone``."""
        return tuple(int(i) for i in np.flatnonzero(self.per_item[:, ZONES.index(zone)]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: totals, per-item counts, differing items, exact difference as strings."""
        diff = self.difference.to_fractions()
        return {
            "spec": repr(self.spec),
            "dtype": str(self.dtype),
            "zones": list(ZONES),
            "totals": self.totals,
            "per_item": [dict(zip(ZONES, map(int, row))) for row in self.per_item],
            "policies": [str(p) for p in self.policies],
            "differs": {k: list(v) for k, v in self.differs.items()},
            "difference_max_abs": str(max((abs(v) for v in diff.reshape(-1)), default=Fraction(0))),
            "difference": np.vectorize(str, otypes=[object])(diff).tolist() if diff.size <= 4096 else None,
        }


def _items(g: Geometry) -> np.ndarray:
    """Batch item (N index) of each canonical slice; one item when x has no N axis."""
    b = np.arange(g.batch)
    if len(g.input_shape) < g.spec.rank + 2:
        return np.zeros(g.batch, dtype=np.int64)
    if g.trail:  # channels_last: canonical b = c * N + n
        return b % g.lead[0]
    return b // g.lead[1]


def _tied(g: Geometry, num: np.ndarray) -> np.ndarray:
    """(batch, W): max pooling: the maximum is attained twice; lp: the window is all zero."""
    xc = g.to_canonical(num)
    safe = np.where(g.valid, g.cells, 0)
    vals = xc[:, safe]
    tied: np.ndarray = g.operator.census_tied(g, vals)
    return tied


def _exact(name: str, value: Any) -> ExactArray:
    if isinstance(value, ExactArray):
        return value
    return ExactArray.from_any(value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object), name)


def tie_census(spec: Any, x: Any, reference: Any = None, *, dy: Any = None,
               betas: tuple[Any, Any] = (0, 1)) -> Census:
    """Classify every max-pooling window (or all-zero lp window) of ``x``.

    Args:
      spec: a max or lp pooling spec.
      x: the layer's input as the implementation sees it (a float array in its
        dtype; exact values are used as they are).
      reference: the same input computed exactly (rationals, or a higher
        precision; an array-like or an ``ExactArray``), same shape; ``None`` takes
        x itself (every tie then counts as exact).
      dy: upstream gradient for the policy difference (default: ones).
      betas: max pooling: the two β compared (default 0 = first, 1 = split).

    Returns:
      A :class:`Census`.

    Raises:
      InputError: shapes differ, values are not finite, or the mode has no ties.
    """
    spec = check_pool_spec(spec)
    x_arr = np.asarray(x) if not isinstance(x, np.ndarray) else x
    ex = _exact("x", x_arr)
    g = resolve(spec, ex.shape)
    ref = ex if reference is None else _exact("reference", reference)
    if ref.shape != ex.shape:
        raise InputError(f"reference has shape {ref.shape}; x has shape {ex.shape}")
    tied_x, tied_r = _tied(g, ex.num), _tied(g, ref.num)
    kinds = np.select([tied_x & tied_r, tied_x, tied_r], [1, 2, 3], 0)
    items = _items(g)
    n_items = int(items.max()) + 1 if items.size else 1
    per_item = np.zeros((n_items, len(ZONES)), dtype=np.int64)
    np.add.at(per_item, (np.repeat(items, g.n_out), kinds.reshape(-1)), 1)

    dy_ex = _exact("dy", np.ones(g.output_shape, dtype=np.int64) if dy is None else dy)
    if dy_ex.shape != g.output_shape:
        raise InputError(f"dy has shape {dy_ex.shape}; the output shape is {g.output_shape}")
    policies = _policies(spec, betas)
    difference = _difference(g, ex, dy_ex, policies, np.ones_like(kinds, dtype=bool))
    differs = {}
    for zone, kind in DIFFERENCE_ZONES.items():
        part = _difference(g, ex, dy_ex, policies, kinds == ZONES.index(kind))
        nonzero = (g.to_canonical(part.num) != 0).any(axis=1)
        differs[zone] = tuple(int(i) for i in np.unique(items[nonzero]))
    return Census(spec, x_arr.dtype, g.from_canonical(kinds), per_item, policies, differs, difference)


def _policies(spec: Any, betas: tuple[Any, Any]) -> tuple[Any, Any]:
    pair: tuple[Any, Any] = operator_of(spec).census_policies(betas)
    return pair


def _difference(g: Geometry, x: ExactArray, dy: ExactArray, policies: tuple[Any, Any],
                mask: np.ndarray) -> ExactArray:
    """Exact ``(J_1 − J_0)^T (dy on the masked windows)``."""
    masked = ExactArray(np.where(g.from_canonical(mask), dy.num, 0), dy.den)
    diff: ExactArray = g.operator.census_difference(g, x, masked, policies)
    return diff
