"""Input generators: exact-in-every-dtype values for verification and golden data.

All values are small integers or quarter-integers, so they are exact in float16,
float32 and float64 and the implementation sees exactly what the exact analysis does.
"""

from __future__ import annotations

import numpy as np

from symjac._errors import InputError
from symjac.pool._geometry import Geometry
from symjac.pool._graph import input_colouring

GENERATORS = ("distinct", "ties", "random")


def distinct_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Small integers, distinct within every window (so max pooling has no ties).

    No window reads two cells of one input colour, so an injective map from colour to
    value makes every window's values distinct; a permutation per (N, C) slice moves
    the maxima around. Integers below 2^11 are exact in every float dtype.
    """
    colours, n = input_colouring(g)
    rng = np.random.default_rng(seed)
    xc = np.stack([rng.permutation(n)[colours] for _ in range(g.batch)]) - n // 2
    return g.from_canonical(xc, g.in_spatial).astype(dtype)


def tie_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Zeros and ones: most max-pooling windows tie."""
    rng = np.random.default_rng(seed + 1)
    return g.from_canonical(rng.integers(0, 2, size=(g.batch, g.n_in)), g.in_spatial).astype(dtype)


def random_dyadic(g: Geometry, spatial: tuple[int, ...], dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Nonzero quarter-integers in [-2, 2] for arrays of the given spatial shape."""
    rng = np.random.default_rng(seed + 2)
    n = int(np.prod(spatial))
    values = rng.integers(1, 9, size=(g.batch, n)) * rng.choice([-1, 1], size=(g.batch, n)) / 4
    return g.from_canonical(values, spatial).astype(dtype)


def distinct_dy(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Output gradients with distinct magnitudes (as far as the dtype holds integers
    exactly: 2^11 in float16) and random signs, in quarters: a backward that swaps the
    gradient of two windows changes the result."""
    rng = np.random.default_rng(seed + 3)
    n = g.batch * g.n_out
    limit = 2**11 if np.dtype(dtype) == np.float16 else 2**24
    values = (rng.permutation(n) % limit + 1) * rng.choice([-1, 1], size=n) / 4
    return g.from_canonical(values.reshape(g.batch, g.n_out), g.out_spatial).astype(dtype)


def generate_input(g: Geometry, generator: str, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """x by name: ``"distinct"``, ``"ties"`` or ``"random"``."""
    if generator == "distinct":
        return distinct_input(g, dtype, seed)
    if generator == "ties":
        return tie_input(g, dtype, seed)
    if generator == "random":
        return random_dyadic(g, g.in_spatial, dtype, seed)
    raise InputError(f"generator={generator!r} is not valid: give one of {', '.join(map(repr, GENERATORS))}")
