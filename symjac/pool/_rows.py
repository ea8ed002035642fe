"""Jacobian rows of pooling, per window: the exact ones at x, and what a backward was seen to send.

A row is (B, W, K): for batch item b and window w, the derivative of the window's
output with respect to each of its K cell slots (``g.cells[w]``; invalid slots are
padding and stay 0). Windows are separable, so rows are all the verifier needs:
``J^T v`` is a scatter of ``v[b, w] · row[b, w, k]`` into cells.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._lastaxis import count_last
from symjac._exact import ExactArray
from symjac.check._rounding import gamma

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry
    from symjac.pool._stamp import Stamp


@dataclasses.dataclass
class Rows:
    """What the backward sent to each cell of each window (B, W, K), as probed so far."""

    obs: np.ndarray  # (B, W, K) float64
    stray: dict[tuple[int, int], list[tuple[int, int, float]]]  # (b, w) -> [(b', cell, value)] outside the window
    one_hot: set[tuple[int, int]]  # windows whose row came from a one-hot probe (exact, not superposed)


@dataclasses.dataclass
class ExactRows:
    """The exact Jacobian rows at one x: policy "first" values, and for max pooling the
    tie sets (member) and which windows tie (|I| >= 2)."""

    rows: np.ndarray
    member: np.ndarray
    tied: np.ndarray
    held: np.ndarray  # (B | 1, W) the window's exact value is representable in the dtype: its entries compared exactly
    pad_tied: np.ndarray  # (B, W) Pool(pad_value=0): a pad cell attains the max (then 0 is in the Clarke set)
    tol: np.ndarray | None = None  # (B, W, K) lp: the derived absolute bound per entry (replaces γ_3)


def exact_rows(g: Geometry, x: np.ndarray, dtype: np.dtype[Any],
               exact_of: Callable[[], ExactArray] | None = None) -> ExactRows:
    """The exact rows at ``x`` (policy "first" at ties): the operator's ``rows`` rule.

    Every array is (B, W, K) or smaller: c·nnz elements, never more. ``exact_of``
    gives x as an exact array when the caller has it already (max pooling reads it).
    """
    rows: ExactRows = g.operator.rows(g, x, dtype, exact_of or (lambda: ExactArray.from_any(x)))
    return rows


def stamp_rows(g: Geometry, st: Stamp, dtype: np.dtype[Any], member: np.ndarray | None = None,
               pad_tied: np.ndarray | None = None) -> ExactRows:
    """Exact rows from a stamp (policy "first" at ties), with the tie sets ``member`` (B, W, K)
    and the windows a pad cell ties ``pad_tied`` (B, W) where the operator has ties."""
    shape = (g.batch, g.n_out, g.cells.shape[1])
    # Every entry of a window is support * weight / q: the value, whether its lowest-terms
    # denominator is a power of two and whether the dtype holds it are per-window facts,
    # spread over the slots at the end (no nnz-sized integer temporaries, no nnz gcd).
    value = (st.weight / st.q).astype(np.float64)  # (1 | B, W); int / int rounds once, Python ints too
    reduced = st.q // np.gcd(st.weight, st.q)  # each window's denominator in lowest terms
    with np.errstate(over="ignore", under="ignore"):
        held_w = ((reduced & (reduced - 1)) == 0) & (value.astype(dtype).astype(np.float64) == value)
    rows = np.empty(shape)
    np.multiply(st.support, value[..., None], out=rows)
    del reduced
    if member is None:
        member = np.zeros(shape, dtype=bool)
    if pad_tied is None:
        pad_tied = np.zeros(shape[:2], dtype=bool)
    tied = count_last(member) + pad_tied >= 2
    return ExactRows(rows, member, tied, held_w, pad_tied)


def open_windows(exact: ExactRows) -> np.ndarray:
    """(B, W) windows whose exact row is not one row: tied (a Clarke set), or with free entries
    (any value is right there: lp's NaN windows)."""
    found = exact.tied.copy()
    if exact.tol is not None:
        found |= np.isinf(exact.tol).any(axis=-1)
    return np.asarray(found)


def window_blocks(shape: tuple[int, ...], entries: int = 2**16) -> Iterator[slice]:
    """Slices of the windows axis of a (B, W, K) array, about ``entries`` entries a block: a
    block's temporaries stay in cache, where whole (B, W, K) ones cost a pass through memory each."""
    batch, n_out, k = shape
    step = max(1, entries // max(1, batch * k))
    return (slice(start, start + step) for start in range(0, n_out, step))


def deviates(rows: Rows, exact: ExactRows) -> bool:
    """Whether an observed row differs from its exact row at some untied window (tied windows
    are the Clarke test's), read in blocks (:func:`window_blocks`: no (B, W, K) temporary)."""
    for block in window_blocks(rows.obs.shape):
        differ = rows.obs[:, block] != exact.rows[:, block]
        if (differ & ~exact.tied[:, block, None]).any():
            return True
    return False


def scatter(g: Geometry, per_window: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sum_w per_window[b, w] * rows[b, w, k]`` into cells: J^T v for row arrays."""
    return scatter_pair(g, per_window, rows, magnitude=False)[0]


def scatter_pair(g: Geometry, per_window: np.ndarray, rows: np.ndarray,
                 magnitude: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """:func:`scatter` and its magnitude ``sum_w |per_window[b, w] * rows[b, w, k]|`` (zeros
    unless ``magnitude``), in float64 sums of any order (a bound γ_m·Σ|terms| covers every order).

    Blocks of windows of about 2^20 (window, slot) pairs: each block's terms go to their
    cells by one ``np.bincount`` per slice (memory O(block) beyond the result); or, for
    many slices of few pairs each (below :data:`PER_SLICE` pairs a slice), by one
    ``np.bincount`` over every slice of the block, where a Python step per slice would
    cost more than its work (512 x 64 slices of 4x4: 137 -> 12 ms).
    """
    out, mag = np.zeros((g.batch, g.n_in)), np.zeros((g.batch, g.n_in))
    per_slice = int(np.count_nonzero(g.valid))
    if g.batch > 1 and per_slice < PER_SLICE:
        return _scatter_slices(g, per_window, rows, magnitude, out, mag)
    step = max(1, 2**20 // max(1, g.cells.shape[1]))
    for start in range(0, g.n_out, step):
        block = slice(start, start + step)
        bins = (g.cells[block] + 1).ravel()  # invalid slots (cell -1) land in bin 0, which is dropped
        products = per_window[:, block, None] * rows[:, block]
        for b in range(g.batch):
            terms = products[b].ravel()  # no mask: selecting the valid pairs costs more than their sums
            out[b] += np.bincount(bins, weights=terms, minlength=g.n_in + 1)[1:]
            if magnitude:
                mag[b] += np.bincount(bins, weights=np.abs(terms), minlength=g.n_in + 1)[1:]
    return out, mag


#: Below this many (window, slot) pairs a slice, :func:`scatter_pair` scatters every slice
#: with one ``np.bincount`` (per slice it is ~1.5x faster, but pays a Python step each).
PER_SLICE = 4096


def _scatter_slices(g: Geometry, per_window: np.ndarray, rows: np.ndarray, magnitude: bool,
                    out: np.ndarray, mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`scatter_pair` over every slice of a block of slices at once (about 2^20 pairs a block)."""
    bins = (g.cells + 1).ravel()  # invalid slots in each slice's bin 0, dropped
    width = g.n_in + 1
    step = max(1, 2**20 // max(1, bins.size))
    for start in range(0, g.batch, step):
        sl = slice(start, start + step)
        terms = (per_window[sl, :, None] * rows[sl]).reshape(-1)
        slices = len(range(*sl.indices(g.batch)))
        target = (np.arange(slices)[:, None] * width + bins).reshape(-1)
        size = slices * width
        out[sl] += np.bincount(target, weights=terms, minlength=size).reshape(-1, width)[:, 1:]
        if magnitude:
            mag[sl] += np.bincount(target, weights=np.abs(terms), minlength=size).reshape(-1, width)[:, 1:]
    return out, mag


@functools.lru_cache(maxsize=8)
def cell_counts(g: Geometry) -> np.ndarray:
    """(n_in,) how many (window, slot) pairs read each cell: the terms of a cell's sum in J^T v.
    A function of the geometry alone, kept for the last few (read-only)."""
    counts = np.bincount((g.cells + 1).ravel(), minlength=g.n_in + 1)[1:]  # invalid slots: bin 0, dropped
    counts.setflags(write=False)
    return counts


def dense_tolerance(bound: np.ndarray, shift: np.ndarray, count: np.ndarray, u: float) -> np.ndarray:
    """How far a dense call's ``dx`` may be from the superposition ``Σ_w dy_w·obs_w`` of the observed
    rows at a cell read by ``count`` (window, slot) pairs: ``(γ_{m+2} + 2^-60)·B + (1 + γ_{m+2})·S``,
    ``B = Σ|dy_w·obs_w|`` and ``S`` what the float64 superposition and the rows' own deviations from
    the exact rows shift it by. The verifier's dense check and golden's bound of ``dx`` for an
    operator whose rows carry their own bounds (:mod:`symjac.io.golden._verified`) read it here."""
    g = gamma(count + 2, u)
    return np.asarray((g + 2.0**-60) * bound + (1 + g) * shift)


def superposition_tolerance(bound: np.ndarray, slots: int, u: float) -> np.ndarray:
    """How far a dense JVP may be from the superposition ``Σ_k obs_k·t_k`` of a window's observed
    row (``slots`` slots a window, ``bound = Σ|obs_k·t_k|``): ``(γ_{K+2} + 2^-60)·bound``. The
    verifier's JVP check and golden's bound of ``jvp`` (:mod:`symjac.io.golden._verified`) read it."""
    return np.asarray((gamma(slots + 2, u) + 2.0**-60) * bound)


def tolerance(exact: np.ndarray, u: float, terms: int | np.ndarray = 1) -> np.ndarray:
    """An entry from ``terms`` rounded products, one rounded weight and one rounded output:
    ``γ_{terms+2}·|e|`` (plus a 2^-60 relative guard for float64 noise in the bound itself)."""
    return np.asarray(np.abs(exact) * (gamma(np.asarray(terms) + 2, u) + 2.0**-60))


def row_tolerance(exact: ExactRows, u: float, windows: slice = slice(None)) -> np.ndarray:
    """One window's contribution in a probe: exact where the dtype holds the exact value,
    else one rounding of the weight and one of the product (γ_3); lp: its derived bound.
    ``windows``: those windows' tolerances only ((B, block, K), for a blocked comparison)."""
    if exact.tol is not None:
        return exact.tol[:, windows]
    rows = exact.rows[:, windows]
    if exact.held.all():  # max pooling's 0/1 rows, or dyadic averages: exact everywhere
        return np.broadcast_to(0.0, rows.shape)
    return np.where(exact.held[:, windows, None], 0.0, tolerance(rows, u))  # a 0 entry's tolerance is 0 anyway
