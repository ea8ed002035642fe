"""One switch for every cache of the pooling engine (benchmarks time cold runs)."""

from __future__ import annotations

from symjac.pool import _geometry, _symbolic, _ties
from symjac.pool._ops import OPERATORS


def clear_caches(templates: bool = True) -> None:
    """Forget every resolved geometry, its window classes and (``templates``) every
    template (the other caches key on geometries, so they start afresh too)."""
    _geometry._resolve.cache_clear()
    _symbolic._classes.cache_clear()
    _symbolic.slabs.cache_clear()
    _ties.clear_caches(templates=False)  # keyed on geometries: let the arrays go with them
    if templates:
        for op in OPERATORS.values():
            op.clear_caches()
