"""Input generators: exact values for verification and golden data.

Every value is exact in the working dtype, so the implementation sees exactly what
the exact analysis does. Each *family* targets a bug class:

- ``distinct``: small integers, distinct within every window (routing);
- ``ties``: zeros and ones (max pooling's Clarke policy at ties);
- ``all_negative``: distinct negative integers (a max pooling that treats padding as
  the value 0 routes gradient into the padding of windows that touch it);
- ``near_ties``: 1, 1 + eps, 1 + 2 eps, ...: distinct in the working dtype, but equal
  after rounding to the next lower precision (float64 -> float32, float32 ->
  float16, float16 and bfloat16 -> one bit fewer), so an argmax or an accumulation
  done in lower precision shows;
- ``orders``: every cell of a plane distinct, in deterministic orders (:func:`order_input`)
  that decide max pooling's routing whatever the seed: a backward that takes each
  window's maximum over a wrong product of cell progressions (a wrong pad, stride,
  dilation, kernel or ceil rule) routes some window elsewhere in one of them;
- ``extreme``: magnitudes near the dtype's overflow threshold where a correct evaluation
  stays finite (:func:`extreme_input`; each operator's ``extreme_magnitude`` rule): an lp
  pooling that raises to the power before it scales, an average summed in a narrower
  accumulator, a max started from a finite sentinel;
- ``nonfinite``: NaN, +inf and -inf among distinct values, alone, tied and mixed in a window
  (:func:`nonfinite_input`), read by each operator's convention (its ``nonfinite`` rule).

Each extra family is one dense call against the exact ``J(x)^T dy``, but for operators without
one (lp: :data:`PROBED` families only) and at ``nonfinite`` inputs of an operator with ties (max:
NaN and infinities tie, :data:`TIED`): there a probed pass, every window's row against its own
(tie sets included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._rounding import precision
from symjac.pool._geometry import Geometry
from symjac.pool._graph import _axis_window_colours, input_colouring, window_colouring

GENERATORS = ("distinct", "ties", "random", "all_negative", "near_ties", "orders", "extreme", "nonfinite")
#: How messages name each family ("at near-tie inputs: ...").
FAMILY_NAMES = {"distinct": "distinct", "given": "the given", "ties": "tied", "all_negative": "all-negative",
                "near_ties": "near-tie", "orders": "ordered", "extreme": "extreme-magnitude",
                "nonfinite": "non-finite"}
#: The extra families the ``families=`` argument of verify names.
EXTRA = ("all_negative", "near_ties", "orders", "extreme", "nonfinite")
#: Extra families an operator without an exact rational dense ``J(x)^T dy`` (no ``extra_families``:
#: lp) runs too, by a probed pass (every window's row against its own).
PROBED = ("extreme", "nonfinite")
#: Extra families whose inputs tie for an operator with ties (NaN and infinities: max pooling): a probed pass.
TIED = ("nonfinite",)
#: Extra families at the edges of the float range: what they find is no convention of the spec (``infer``
#: screens neighbouring specs without them).
EDGES = ("extreme", "nonfinite")
#: Extra families whose inputs hold NaN or ±inf: no exact golden data (``golden --cover`` leaves them out).
NONFINITE = ("nonfinite",)
#: The slab inputs of the ``orders`` family are skipped when they would take more calls than this.
MAX_SLABS = 64
#: Precision p (bits) of "the next lower precision" below each working dtype.
LOWER_PRECISION = {"float64": 24, "float32": 11, "float16": 10, "bfloat16": 7}


def _ordered(ranks: np.ndarray, dtype: np.dtype | type) -> np.ndarray:
    """Integer ranks as exact values of ``dtype`` in the same order.

    Small integers are themselves; beyond the dtype's exact-integer range 2^p
    (256 in bfloat16) the ranks map, by sign, to consecutive representable values
    from 1 upward, which keeps them distinct, ordered and exact.
    """
    dt = np.dtype(dtype)
    r = np.asarray(ranks, dtype=np.int64)
    if r.size == 0 or int(np.abs(r).max()) <= 2 ** precision(dt):
        return r.astype(dt)
    out: np.ndarray = np.sign(r).astype(dt) * _consecutive(np.maximum(np.abs(r) - 1, 0), dt) * (r != 0).astype(dt)
    return out


def _consecutive(steps: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The floats ``steps`` places above 1.0 in ``dt`` (bit pattern of 1.0 plus steps)."""
    uint = np.dtype(f"u{dt.itemsize}")
    one = np.ones(1, dtype=dt).view(uint)[0]
    top = np.array([np.inf], dtype=np.float64).astype(dt).view(uint)[0] - 1  # the largest finite value
    bits = np.minimum(one.astype(np.int64) + np.asarray(steps, dtype=np.int64), int(top))
    out: np.ndarray = bits.astype(uint).view(dt)
    return out


def _window_ranks(g: Geometry, seed: int) -> np.ndarray:
    """(batch, n_in) ranks 0..n-1, distinct within every window, permuted per slice."""
    colours, n = input_colouring(g)
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n)[colours] for _ in range(g.batch)]) if g.batch else np.zeros((0, g.n_in), int)


def distinct_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Small integers, distinct within every window (so max pooling has no ties).

    No window reads two cells of one input colour, so an injective map from colour to
    value makes every window's values distinct; a permutation per (N, C) slice moves
    the maxima around. Integers below 2^11 are exact in every float dtype.
    """
    n = input_colouring(g)[1]
    return g.from_canonical(_ordered(_window_ranks(g, seed) - n // 2, dtype), g.in_spatial)


def all_negative_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Distinct negative integers -n .. -1 (n input colours), distinct within every window.

    Every window's maximum is negative, so a max pooling that pads with 0 instead of
    -inf (or excludes padding) outputs 0 and routes the gradient nowhere at the
    windows that touch padding.
    """
    return g.from_canonical(_ordered(-1 - _window_ranks(g, seed + 4), dtype), g.in_spatial)


def _near_tie_values(ranks: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    """1 + q*eps for ranks q in [0, n): exact in ``dt``, all within half an ulp of 1 in
    the next lower precision (so they round to 1 there), and spread as far apart as
    that allows, so that arithmetic done in the lower precision is far off.

    eps = 2^-(p_low + 1 + ceil(log2 n)), but at least one ulp of ``dt``: then (float16,
    bfloat16, whose lower precision is one bit fewer) neighbours differ in the last bit.
    """
    n = int(ranks.max()) + 1 if ranks.size else 1
    spread = (precision(dt) - 1) - (LOWER_PRECISION[dt.name] + 1) - max(n - 1, 1).bit_length()
    return _consecutive(ranks * 2 ** max(spread, 0), dt)


def near_tie_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Near ties: distinct within every window in the working dtype, equal one precision lower.

    Value of rank q: 1 + q eps (:func:`_near_tie_values`): float64 inputs all round to 1
    in float32 and float32 inputs in float16 (up to 2^11 ranks), so an argmax or a sum
    taken there is off; in float16 and bfloat16 neighbouring ranks differ in the last bit.
    """
    dt = np.dtype(dtype)
    return g.from_canonical(_near_tie_values(_window_ranks(g, seed + 5), dt), g.in_spatial)


def near_tie_dy(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Output gradients +-(1 + q eps) with distinct q per window (as :func:`near_tie_input`):
    a backward that accumulates in lower precision loses their low bits."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed + 6)
    n = g.batch * g.n_out
    values = _near_tie_values(rng.permutation(n), dt) * rng.choice(np.array([-1, 1], dtype=dt), size=n)
    return g.from_canonical(values.reshape(g.batch, g.n_out), g.out_spatial)


def near_tie_tangent(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Canonical (B, n_in) tangents +-(1 + q eps) with distinct q (as :func:`near_tie_dy` on the
    input side): a forward mode that accumulates ``J·t`` in lower precision loses their low bits."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed + 7)
    n = g.batch * g.n_in
    values = _near_tie_values(rng.permutation(n), dt) * rng.choice(np.array([-1, 1], dtype=dt), size=n)
    return np.asarray(values.reshape(g.batch, g.n_in), dtype=np.float64)


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
    exactly: 2^11 in float16, 2^8 in bfloat16) and random signs, in quarters: a backward that swaps the
    gradient of two windows changes the result."""
    rng = np.random.default_rng(seed + 3)
    n = g.batch * g.n_out
    limit = 2 ** precision(np.dtype(dtype))
    values = (rng.permutation(n) % limit + 1) * rng.choice([-1, 1], size=n) / 4
    return g.from_canonical(values.reshape(g.batch, g.n_out), g.out_spatial).astype(dtype)


def touches_padding(g: Geometry) -> bool:
    """Whether some window of a :class:`~symjac.Pool` has a kernel slot outside the input."""
    kernel = getattr(g.spec, "kernel", None)  # stored slots are the kernel's, less those outside every window
    if kernel is None:
        return False
    if g.axes:  # a product of its axes' windows: read per axis, never the (windows, K) table
        return any(ax.offsets.size < k or not ax.valid.all() for ax, k in zip(g.axes, kernel))
    return bool(g.cells.shape[1] < np.prod(kernel) or not g.valid.all())


def window_spans(g: Geometry) -> tuple[int, ...]:
    """Per spatial axis, the largest span (last - first + 1) of the real cells of one window.

    A geometry whose windows are products of its axes' windows is read per axis (a window has
    real cells iff each of its axis windows has: O(sum of o_a * k_a)); a table's (RoI pooling's)
    from its (windows, K) table."""
    if g.axes:
        if not all(ax.valid.any() for ax in g.axes):
            return tuple(1 for _ in g.in_spatial)
        return tuple(_span(ax.cells, ax.valid) for ax in g.axes)
    cells, valid = g.cells, g.valid
    if not valid.any():
        return tuple(1 for _ in g.in_spatial)
    coords = np.unravel_index(np.where(valid, cells, 0), g.in_spatial)
    return tuple(_span(c, valid) for c in coords)


def _span(coords: np.ndarray, valid: np.ndarray) -> int:
    """The largest last - first + 1 of the valid coordinates of a row, over the rows with any."""
    hi = np.where(valid, coords, -1).max(axis=1)
    lo = np.where(valid, coords, np.iinfo(np.int64).max).min(axis=1)
    return int((hi - lo)[valid.any(axis=1)].max()) + 1


def order_count(g: Geometry) -> int:
    """How many inputs the ``orders`` family has: 2 ramps per axis, and one slab input per
    residue r < max_a E_a, on every axis at once (:func:`order_input`), unless that exceeds
    :data:`MAX_SLABS`."""
    slabs = max(window_spans(g))
    return 2 * len(g.in_spatial) + (slabs if slabs <= MAX_SLABS else 0)


def family_size(g: Geometry, family: str) -> int:
    """How many inputs (each one dense pass) an extra family has at this geometry."""
    return order_count(g) if family == "orders" else 1


def order_input(g: Geometry, dtype: np.dtype | type = np.float64, index: int = 0) -> np.ndarray:
    """Input ``index`` of the ``orders`` family: distinct negative values, every cell of
    every (N, C) plane apart, in a deterministic order.

    Ramps (indices 0 .. 2*rank - 1): lexicographic order with axis ``index // 2`` most
    significant, ascending or descending, the other axes ascending. A window's maximum
    is then its cell extreme along that axis, so a backward reading a window whose
    bounding box differs from the true one (along axis a) routes elsewhere at the
    ramp of axis a in the direction where the boxes' ends differ.

    Slabs (the next max_a E_a, the largest span of a window's real cells along each axis,
    :func:`window_spans`): input r puts a slab on every axis at once, H_a = {i_a = r mod
    E_a}, and ranks a cell by the set of slabs it lies on (the bitmask sum of 2^a: a
    superset ranks higher), ramp order within. A box of span <= E_a meets H_a in one
    hyperplane i_a = v_a. A window T that is a product of per-axis cell sets has a cell on
    every slab it meets at once, so its maximum lies on each H_a that T meets. For windows
    S != T with one bounding box, both products, some axis a has a coordinate v in one set
    only; at the input with r = v mod E_a one window meets H_a, its maximum lies there,
    and the other's does not (it never meets H_a). One slab a residue per axis (sum E_a
    inputs) shows the same, at max E_a inputs: rank-many fewer.

    Values -1 - rank, ranks over the whole batch (planes apart too): all negative, so a
    zero-padded max wins at padding here as at ``all_negative``.
    """
    rank = len(g.in_spatial)
    coords = np.indices(g.in_spatial).reshape(rank, -1)
    if index < 2 * rank:
        axis, sign = index // 2, (1 if index % 2 == 0 else -1)
        keys = [coords[a] for a in reversed(range(rank)) if a != axis] + [sign * coords[axis]]
        high = np.zeros(coords.shape[1], dtype=np.int64)
    else:
        spans, r = window_spans(g), index - 2 * rank
        keys = [coords[a] for a in reversed(range(rank))]
        high = sum((coords[a] % spans[a] == r % spans[a]).astype(np.int64) << a for a in range(rank))
    order = np.lexsort([*keys, high])  # last key most significant: slab cells last (highest)
    ranks = np.empty(coords.shape[1], dtype=np.int64)
    ranks[order] = np.arange(coords.shape[1])
    n = coords.shape[1]
    planes = np.arange(g.batch, dtype=np.int64)[:, None] * n
    return g.from_canonical(_ordered(-(g.batch * n) + ranks[None, :] + planes, dtype), g.in_spatial)


def families(g: Geometry) -> tuple[str, ...]:
    """The extra input families worth a pass for this geometry, beyond ``distinct`` (and
    ``ties``, which max and lp pooling get their own probed pass for): the operator's
    ``families`` rule (``all_negative`` for max pooling whose windows touch padding,
    ``near_ties`` for max and avg pooling: routing for max, accumulation for avg; ``extreme``
    and ``nonfinite`` for every operator). A family needing a dense exact ``J(x)^T dy`` is left
    out for an operator without one (lp's algebraic rows)."""
    names = g.operator.families(g, touches_padding(g))
    return tuple(n for n in names if n in PROBED or g.operator.extra_families)


def _ranked_magnitudes(ranks: np.ndarray, top: float, dt: np.dtype[Any]) -> np.ndarray:
    """Distinct magnitudes in (top/2, top], one per rank: the floats of ``dt`` counted down from the
    largest one <= ``top`` (the dtype's largest finite value itself when top is it), as far apart as
    the ranks allow (exact in ``dt``; ranks beyond the 2^(p-1) floats of a binade wrap around)."""
    uint = np.dtype(f"u{dt.itemsize}")
    with np.errstate(over="ignore"):
        start = np.array([top], dtype=np.float64).astype(dt)
    while not np.isfinite(start[0]) or float(start[0]) > top:  # rounded up (to inf): one float down
        start = (start.view(uint) - 1).view(dt)
    p = precision(dt)
    n = int(ranks.max()) + 1 if ranks.size else 1
    half = 2 ** (p - 2)  # floats counted down from start stay above start/2 for fewer than 2^(p-1) steps
    step = max(half // max(n, 1), 1)
    k = (ranks.astype(np.int64) % half) * step
    out: np.ndarray = (start.view(uint).astype(np.int64)[0] - k).astype(uint).view(dt)
    return out


def extreme_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Values near the dtype's overflow threshold, distinct within every window: magnitudes in
    (top/2, top] and signs from the operator's ``extreme_magnitude`` rule (where a correct float
    evaluation stays finite, and the exact value is finite)."""
    dt = np.dtype(dtype)
    top, signs = g.operator.extreme_magnitude(g, dt)
    mags = _ranked_magnitudes(_window_ranks(g, seed + 8), top, dt)
    rng = np.random.default_rng(seed + 9)
    if signs == "-":
        sign = -np.ones(mags.shape)
    elif signs == "±":
        sign = rng.choice(np.array([-1.0, 1.0]), size=mags.shape)
    elif signs == "slices":
        sign = np.where(np.arange(g.batch)[:, None] % 2 == 0, 1.0, -1.0) * np.ones(mags.shape)
    else:
        sign = np.ones(mags.shape)
    return g.from_canonical((mags * sign.astype(dt)).astype(dt), g.in_spatial)


#: The non-finite patterns of :func:`nonfinite_input`, one per window of a disjoint set: which
#: values its first, last and second slots take ("all -inf": every slot).
NONFINITE_PATTERNS: tuple[tuple[float, ...] | str, ...] = (
    (np.nan,), (np.nan, np.nan), (np.inf,), (np.inf, np.inf), (-np.inf,), "all -inf", (np.inf, -np.inf),
    (np.nan, np.inf), (-np.inf, np.nan), (np.nan, np.nan, -np.inf), ())


def apart_windows(g: Geometry) -> np.ndarray:
    """Windows no window reads cells of two of: per axis, axis windows two reads apart (no axis
    window's bounding interval meets two of theirs), whole windows (no slot in the padding) first,
    each taken in index order where it is apart from those taken; their products. A table's
    windows (RoI pooling: no axes) are one colour of the probe plan's (they read disjoint cells)."""
    if not g.axes:
        return np.flatnonzero(window_colouring(g)[0] == 0)
    per_axis = [_apart_axis(ax) for ax in g.axes]
    grid = np.meshgrid(*per_axis, indexing="ij")
    return np.sort(np.ravel_multi_index(tuple(a.reshape(-1) for a in grid), g.out_spatial))


def _apart_axis(ax: Any) -> np.ndarray:
    """The axis windows of :func:`apart_windows` along one axis (sorted indices). Windows' first and
    last cells rise with their index (every pooling axis), so the windows meeting window i's
    interval are an index range and a scan in index order compares with the last one taken only."""
    valid = ax.valid
    idx = np.flatnonzero(valid.any(axis=1))
    if not idx.size:
        return np.zeros(1, dtype=np.int64)
    k = valid.shape[1]  # slots' cells rise with the slot: a window's first and last valid slots bound it
    lo = ax.cells[idx, valid[idx].argmax(axis=1)]
    hi = ax.cells[idx, k - 1 - valid[idx, ::-1].argmax(axis=1)]
    if (np.diff(lo) < 0).any() or (np.diff(hi) < 0).any():  # not ordered: windows of one colour
        return np.flatnonzero(_axis_window_colours(ax) == 0)
    # the interval the windows meeting window i's interval cover: [reach_lo[i], reach_hi[i]]
    reach_lo = lo[np.searchsorted(hi, lo, side="left")]
    reach_hi = hi[np.searchsorted(lo, hi, side="right") - 1]
    whole = valid[idx].sum(axis=1) == ax.offsets.size
    taken: list[int] = []
    last = None
    for i in np.flatnonzero(whole).tolist():  # whole windows, in index order
        if last is None or lo[i] > last:
            taken.append(i)
            last = int(reach_hi[i])
    cut = np.flatnonzero(~whole)
    if cut.size <= 4096:  # then windows cut by the padding, where apart from those taken
        r_lo, r_hi = reach_lo[taken], reach_hi[taken]
        for i in cut.tolist():
            if not ((lo[i] <= r_hi) & (hi[i] >= r_lo)).any():
                taken.append(i)
                r_lo, r_hi = np.append(r_lo, reach_lo[i]), np.append(r_hi, reach_hi[i])
    return np.sort(idx[np.array(taken, dtype=np.int64)])


def nonfinite_input(g: Geometry, dtype: np.dtype | type = np.float64, seed: int = 0) -> np.ndarray:
    """Distinct values (as the default input) with NaN, +inf and -inf placed in windows apart
    (:func:`apart_windows`): one NaN, two NaN (which one gets the gradient: the tie
    policy), +inf, two +inf, -inf, all -inf, both infinities, NaN with an infinity, and none,
    rotating over the windows and the (N, C) slices; the windows around them read some of those
    cells too. The operator's ``nonfinite_input`` rule makes it valid for it (lp's odd p: no -inf).

    A window reads the cells of one pattern at most, so the windows that tie are the patterns'
    own (and, at a window cut by padding, those holding all of its cells): few and apart, their
    rows take a probe call or two (:meth:`~symjac.verifiers.pool._verifier._Verifier.backward_pass`)."""
    dt = np.dtype(dtype)
    x = g.operator.default_input(g, distinct_input(g, dt, seed + 7))
    xc = g.to_canonical(x).copy()
    wins = apart_windows(g)
    if wins.size * g.batch < len(NONFINITE_PATTERNS):  # too few to hold every pattern: windows of one colour
        wins = np.flatnonzero(window_colouring(g)[0] == 0)
    order = (0, -1, 1)  # slots a pattern fills: the first valid, the last, the second
    for b in range(g.batch):
        for i, w in enumerate(wins.tolist()):
            pattern = NONFINITE_PATTERNS[(i + b + seed) % len(NONFINITE_PATTERNS)]
            cells = g.cells[w][g.valid[w]]
            if not cells.size:
                continue
            if pattern == "all -inf":
                xc[b, cells] = -np.inf
                continue
            for j, value in enumerate(pattern):
                xc[b, cells[order[j] if order[j] < cells.size else 0]] = value
    return g.operator.nonfinite_input(g, g.from_canonical(xc, g.in_spatial))


def extra_inputs(g: Geometry, names: Sequence[str] | None = None, *, edges: bool = True) -> list[tuple[str, int]]:
    """The extra inputs of a verification at this geometry, ``(family, index)`` each: every input
    of each family ``names`` gives (default: those the operator declares, :func:`families`). The
    VJP's check and the batched rule's (a VJP per sample) run at this one list; forward mode and
    second order (``edges=False``) without the :data:`EDGES` families, which have no exact tangent
    or second derivative model (a NaN has no exact value; near overflow the rounding model is the
    VJP's): the report says so (``stats["transforms"][name]["families"]``)."""
    chosen = families(g) if names is None else names
    return [(name, i) for name in dict.fromkeys(chosen) if edges or name not in EDGES
            for i in range(family_size(g, name))]


def family_input(g: Geometry, family: str, dtype: np.dtype | type = np.float64, seed: int = 0,
                 index: int = 0) -> np.ndarray:
    """The x ``symjac.verify`` checks for ``family`` at ``g``'s shape: :func:`generate_input`'s, but
    the tie pass's ``ties`` made to reach the operator's nonsmooth points (its ``tie_input``)."""
    x = generate_input(g, family, dtype, seed, index)
    return g.operator.tie_input(g, x) if family == "ties" and g.operator.tie_family else x


def generate_input(g: Geometry, generator: str, dtype: np.dtype | type = np.float64, seed: int = 0,
                   index: int = 0) -> np.ndarray:
    """x by name: one of :data:`GENERATORS` (``index``: which input of ``orders``)."""
    if generator == "distinct":
        return distinct_input(g, dtype, seed)
    if generator == "ties":
        return tie_input(g, dtype, seed)
    if generator == "random":
        return random_dyadic(g, g.in_spatial, dtype, seed)
    if generator == "all_negative":
        return all_negative_input(g, dtype, seed)
    if generator == "near_ties":
        return near_tie_input(g, dtype, seed)
    if generator == "orders":
        return order_input(g, dtype, index)
    if generator == "extreme":
        return extreme_input(g, dtype, seed)
    if generator == "nonfinite":
        return nonfinite_input(g, dtype, seed)
    raise InputError(f"generator={generator!r} is not valid: give one of {', '.join(map(repr, GENERATORS))}")
