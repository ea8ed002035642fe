"""Max unpooling's input families: which indices, which values, how the backward is recovered.

Every family's values are exact in every float dtype symjac takes (bfloat16's 8 bits included):
integers of magnitude at most 254, dyadic steps, the dtype's largest finite value over powers of two.

- ``pooled``: indices as a max pooling of the spec's windows returns them (repeated where windows
  overlap), values distinct: the backward's whole Jacobian is recovered (one-hot dy per output cell).
- ``repeats``: a repeated index at every pair of input cells, whatever the kernel and stride (the
  write order decides each pair), values distinct: recovered whole.
- ``equal_values``: the repeats' indices, every value equal: the forward cannot show which write
  won, so a backward that routes by comparing values (``y[index] == x``) sends dy to every write.
- ``extreme``: the repeats' indices, values near the dtype's largest (a forward that sums its
  writes, or multiplies by a mask, overflows or rounds).
- ``nonfinite``: the repeats' indices, NaN, +inf and -inf among the values (they reach the output
  cell they win and nothing else; a dense ``J @ x`` gives NaN from ``0·inf``).

With the spec's own indices (given), every family uses them (the first is then ``given``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.check._rounding import finfo
from symjac.pool._ops.unpool import MaxUnpool, pooled_indices, repeated_indices

#: The families, in the order they run; the first two recover the backward's whole Jacobian.
FAMILIES = ("pooled", "repeats", "equal_values", "extreme", "nonfinite")
#: The families whose values are all finite: golden data's generators (``[input] generator``).
FINITE_FAMILIES = FAMILIES[:4]
#: Families whose backward (and jvp) is recovered whole, one call per output (input) cell.
RECOVERED = ("pooled", "repeats", "given")
#: Above this many output cells the backward is checked by dense random dy alone (each call exact:
#: a wrong linear backward passes two of them only if its error is orthogonal to both) and
#: recovered whole only where they fail.
RECOVER_LIMIT = 4096


def indices_of(spec: MaxUnpool, family: str, shape: tuple[int, ...]) -> np.ndarray:
    """The family's indices at ``shape`` (the spec's own where given)."""
    if spec.indices is not None:
        return spec.given()
    return pooled_indices(spec, shape) if family == "pooled" else repeated_indices(spec, shape)


def values(family: str, shape: tuple[int, ...], dt: np.dtype[Any], seed: int) -> np.ndarray:
    """The family's x in ``dt`` (exact)."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    distinct = (rng.permutation(n) % 250 + 1) * signs
    if family == "equal_values":
        x = np.full(n, 1.5)
    elif family == "extreme":
        x = float(finfo(dt).max) / 2.0 ** (np.arange(n) % 4) * signs
    elif family == "nonfinite":
        x = np.where(np.arange(n) % 4 == 0, np.nan, distinct)
        x[np.arange(n) % 4 == 1] = np.inf
        x[np.arange(n) % 4 == 2] = -np.inf
    else:
        x = distinct
    return x.reshape(shape).astype(dt)


def dense(shape: tuple[int, ...], dt: np.dtype[Any], seed: int, top: int = 127) -> np.ndarray:
    """Distinct-ish dyadic values ±k/4, 1 <= k <= top, exact in ``dt``: a dense dy, tangent or step."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, top + 1, size=shape)
    return (k * np.where(rng.random(shape) < 0.5, -1.0, 1.0) / (4.0 if top > 4 else 1.0)).astype(dt)
