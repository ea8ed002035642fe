"""Shape-coverage plan: a few input shapes that produce every window class.

Along one axis of a :class:`~symjac.Pool`, a window is described by the kernel slots
that land on real input cells (an interval ``[first, last]`` of slot numbers, since
the cells of a window are ``t + j*d``) and, for ``divisor="include_pad"``, the count
of slots inside the padded input. That pair is the window's *axis class*: windows of
one class read the same pattern of cells and divide by the same number. The classes
an input length L produces depend on L only through boundary effects: the pads
(SAME pads change with L mod stride), the windows near each end, a ceil-mode window
dropped at the end, and L shorter than the window extent. Once L exceeds
``2*extent + lo + hi + 3*stride`` every new length repeats, class for class, the
length one stride shorter: the set of classes is periodic in L with period stride.

So enumerating L up to that bound finds every class the axis can ever produce, and
a greedy set cover picks a few lengths that together produce all of them, together
with every (low, high) pad pair, a ceil-mode drop where one can happen, and every
residue of L mod stride at a length long enough that the two ends do not touch. The plan is the product of the per-axis lengths (every
combination of axis classes, so corners show too), with batch 2 and 3 channels so
that bugs mixing planes show, and one *wide* shape: batch 3 and 37 channels (37 mod
4, 8, 16, 32 = 1, 5, 5, 5: a remainder for every common vector width, and more
channels than the widest) at small spatial lengths, so a vectorised kernel's
channel tail and its batch loop show in both layouts' strides.
With ``large=True``, shapes past 2^16 cells along each axis and per plane (batch 1,
1 channel) probe index width: 16-bit indices wrap there. A plan whose shape exceeds
the Jacobian budget (``symjac.pool.MAX_NNZ``) is refused up front.

Guarantee: an implementation that treats windows of one class alike (the same code
path for every interior window, say) and passes at every shape of the plan, passes
at every shape.

**Long kernels.** Where the bound passes :data:`MAX_LENGTH` (1024), or the exact cover
keeps more than :data:`MAX_EXACT_LENGTHS` lengths (a kernel of 100 at stride 100
needs one length per residue mod 100), the classes are too many to show each: a
kernel of 1024 at stride 1 with pads of 512 has a class for every cut 1..512 at
each end and one for every pair of cuts when L is below the kernel. The long-kernel
plan shows every *kind* of window instead (:func:`long_items`): which of its low
cut (slots before the input), its high cut (slots past it) and its ceil overhang
(slots past the high pad) are nonzero, and for a window cut at one end only the
least and the greatest cut there; the cells past the last window, where there can
be some (an output size rounded the wrong way shows only there); three windows or
more (a wrong stride shows only beside a window's neighbours); the pads' sides
and their least and greatest total (SAME); a ceil-mode drop. Its lengths are derived,
not enumerated (:func:`_long_candidates`), with ``t_i = i*s - lo`` window i's start
and E = d(k-1)+1 the extent:

- low cuts ``ceil((lo - t)/d)`` do not depend on L: the greatest is window 0's, the
  least that of the last window starting before cell 0, ``t* = (ceil(lo/s) - 1)*s - lo``;
  a window is cut at both ends while L <= t + E - 1, so the lengths around
  ``E - lo`` and ``E + t*`` part each from its high cut;
- the high end of a long length follows ``(L + lo + hi - E) mod s`` (floor mode: the
  last window reads ``rho + E - 1 - hi`` cells past its start; ceil mode: its negative
  is the overhang, beyond ``E - 1 - hi`` the window is dropped); the residues that
  turn it (0, 1, 2, -1, -2, hi - 1, hi, hi + 1, hi + 2 - E, hi + 1 - E, hi - E,
  hi - E - 1) give the greatest and least high cut and overhang, none, and the first
  dropped window, at one steady length (:func:`steady_length` or one stride more) each;
- SAME's pads follow ``(L - 1) mod s``: total = max(E - 1 - (L - 1) mod s, 0), its
  greatest at residue 0, least at s - 1, each parity at the next residue;
- the shortest lengths with a window (L below the kernel: windows cut at both ends,
  or reading every cell), and E - 1, E, E + 1.

A greedy set cover then keeps a few of these. ``tests/test_cover.py`` checks on
random specs against every length up to three times the exact bound that the
long-kernel plan shows every kind and cut extreme any length shows. *Assumption*
(weaker than the exact plan's): the implementation treats windows of one kind alike
whatever their cut between its extremes. *Cost*: lengths of about 2E + lo + hi + 3s at
most; k = 1024 at stride 1024 is 2 shapes of 1024 and 4097 cells and the wide shape,
verified in about a second (``benchmarks/plan_cost.py --long``, docs/coverage.md).

**Adaptive pooling.** Window i of an axis of output size o spans
``[floor(i*L/o), ceil((i+1)*L/o))`` (PyTorch). Windows of one size are not one rule:
what a plan must show is where this rule parts from the rules an implementation may
use instead. Write L = q*o + r (0 <= r < o) and a_i = i*r mod o. Then window i is
``[i*q + floor(i*r/o), (i+1)*q + ceil((i+1)*r/o))``, of size q for r = 0 and else
``q + ceil((a_i + r)/o)``: q + 1 where a_i + r <= o, q + 2 where a_i + r > o. The a_i
run over the multiples of g = gcd(r, o) below o, the largest o - g, so

- (F1) r = 0: disjoint windows of q cells; every quotient i*L/o is exact;
- (F2) r > 0: two sizes occur iff o - g + r > o, i.e. iff r does not divide o; at
  r = o - 1 (o >= 3) windows 0 and o - 1 have q + 1 cells and the others q + 2;
- (F3) windows i and i + 1 share ``ceil((i+1)r/o) - floor((i+1)r/o)`` cells: at r = 1
  every pair shares one, all windows have q + 1 cells and every inner boundary
  i*L/o = i*q + i/o has a fraction;
- (F4) q = 0 (upsampling, L < o): windows of 1 and 2 cells (F2), and starts repeat
  (o + 1 values floor(i*L/o) take L + 1 values): the only regime where two windows
  are one.

The plausible wrong rules and where they part from it (``tests/test_cover.py`` checks
each "iff" against every L up to 5o + 3, o = 1..64):

- fixed width ceil(L/o) from the true start: iff r does not divide o (F2); never for
  o <= 2, where it is the same rule;
- fixed width floor(L/o): iff r != 0 (every window then has more than q cells);
- stride floor(L/o) (starts i*q) with width ceil(L/o), or the downsampling formula
  (stride q, kernel L - (o - 1)*q) applied at any L: starts i*q equal the true ones
  iff floor((o - 1)*r/o) = 0 iff r <= 1, and at r <= 1 the widths agree: iff r >= 2;
- rounding the boundaries to nearest (either tie rule), floor for the end, ceil for
  the start, or both: iff r != 0; at L = 2o + 1 window 0 ends at 3, not 2 (F3);
- ceil computed as floor + 1: iff o divides (i+1)*L for some i + 1 < o, iff
  gcd(L, o) > 1;
- one cell a window when L < o (nearest-neighbour upsampling), or any rule that
  treats L < o apart: only below o, where (F4) parts it iff r = L does not divide o.

So the plan's lengths are o - 1 (q = 0, r = o - 1: upsampling with two sizes), o
(q = 1, r = 0: one cell a window, gcd(L, o) = o), 2o - 1 (q = 1, r = o - 1: two
sizes at L > o) and 2o + 1 (q = 2, r = 1: one size, every boundary fractional): each
wrong rule above parts from PyTorch's at one of them whenever it parts at all
(o - 1 and 2o - 1 for the width and stride rules, 2o + 1 for the rounding ones, o for
floor + 1, o - 1 for the upsampling ones), and each of them applied from L = o on
only (exact below o) still parts at o, 2o - 1 or 2o + 1. The plan of
``AdaptivePool("avg", (5,))`` is L = 4, 5, 9, 11 (before: 5, 10 and 11, where
fixed-width windows agree).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import SpecError
from symjac.pool._fractional import fractional_starts
from symjac.pool._geometry import _check_budget, _pool_plan, _valid_slots
from symjac.pool._ops import operator_of
from symjac.pool._spec import AdaptivePool, FractionalMaxPool, GlobalPool, Pool, PoolSpec, check_pool_spec

#: Lengths enumerated per axis are at most this (an axis whose bound exceeds it gets the long-kernel plan).
MAX_LENGTH = 1024
#: Above this many shapes the axes are combined in step (each axis's classes all
#: appear, not every combination of them).
MAX_SHAPES = 64
#: An axis whose exact plan keeps more lengths than this, or whose enumeration would pass
#: :data:`MAX_LENGTH`, gets the long-kernel plan (:func:`long_lengths`).
MAX_EXACT_LENGTHS = 64
#: The long-kernel plan looks this far past its first candidate for the shortest length with windows.
SCAN_LIMIT = 4096
BATCH, CHANNELS = 2, 3
#: The wide shape: a channel count with a remainder mod 4, 8, 16 and 32 lanes, above 32;
#: and a batch other than BATCH (a batch loop's remainder).
WIDE_BATCH, WIDE_CHANNELS = 3, 37
#: The large shapes (``cover(spec, large=True)``) pass this many cells along an axis and per plane.
LARGE_CELLS = 2**16

Item = tuple[Any, ...]


def axis_items(spec: Pool, axis: int, length: int) -> set[Item] | None:
    """What one axis at length L exercises: its window classes, L mod stride, its pads,
    and whether ceil mode dropped a window. None when no window fits."""
    try:
        plan = _pool_plan(spec, axis, length)
    except SpecError:
        return None
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    lo, hi = plan.pad
    starts = np.arange(plan.out, dtype=np.int64) * s - lo
    first, last = _valid_slots(starts, k, d, length)
    if (first > last).any():
        return None  # a window in a dilation gap reads only padding: resolve refuses this length
    items: set[Item] = {("pads", lo, hi)}
    if length >= steady_length(spec, axis):
        # Where the ends no longer touch, L mod stride decides the high end (and the
        # SAME pads): one long length per residue (a low/high pad swap passes at
        # L = 2 for kernel 3 stride 2, where the pads do not move a cell, but not at 6).
        items.add(("residue", length % s))
    if operator_of(spec).counts_padding(spec):
        c_first, c_last = _valid_slots(starts + lo, k, d, length + lo + hi)
        counted = (c_last - c_first + 1).tolist()
    else:
        counted = [None] * plan.out
    items |= {("class", int(f), int(t), c) for f, t, c in zip(first.tolist(), last.tolist(), counted)}
    if spec.ceil_mode and -(-(length + lo + hi - d * (k - 1) - 1) // s) + 1 > plan.out:
        items.add(("dropped",))
    return items


def steady_length(spec: Pool, axis: int) -> int:
    """From this length on, the windows touching the low end and those touching the
    high end are distinct, with at least one window between them."""
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    extent = d * (k - 1) + 1
    pads = sum(spec.padding[axis]) if not isinstance(spec.padding, str) else extent
    return extent + pads + 2 * s


def length_bound(spec: Pool, axis: int) -> int:
    """Beyond this length the axis classes repeat with period stride (see module doc);
    it is at least one stride past :func:`steady_length`, so every residue is seen."""
    k, d = spec.kernel[axis], spec.dilation[axis]
    return steady_length(spec, axis) + d * (k - 1) + 1 + spec.stride[axis] + 1  # type: ignore[index]


def _greedy(candidates: dict[Any, set[Item]], most: int | None = None) -> list[Any] | None:
    """Greedy set cover; ties go to the first (smallest) candidate. None once it would take more than
    ``most`` candidates."""
    todo = set().union(*candidates.values()) if candidates else set()
    chosen: list[Any] = []
    while todo:
        if most is not None and len(chosen) == most:
            return None
        best = max(candidates, key=lambda c: len(candidates[c] & todo))
        chosen.append(best)
        todo -= candidates[best]
    return sorted(chosen)


def adaptive_lengths(o: int) -> list[int]:
    """The plan's lengths along an adaptive axis of output size ``o`` (global pooling: o = 1):
    L = o - 1, o, 2o - 1 and 2o + 1 (those >= 1), the lengths where PyTorch's window rule
    parts from every plausible other rule (module doc, "Adaptive pooling")."""
    return sorted({length for length in (o - 1, o, 2 * o - 1, 2 * o + 1) if length >= 1})


def fractional_items(spec: FractionalMaxPool, axis: int, length: int) -> set[Item]:
    """What one axis of PyTorch's fractional windows exercises at length L: each gap between
    window starts against the kernel (overlapping windows, abutting ones, skipped cells), whether
    the gaps take both values floor(α) and ceil(α), and the last gap (the last window is pinned
    at L - k, not placed by the formula), and whether a product (i + u)·α or the base u·α is an integer
    (where floor, ceil and a float product rounded below it part)."""
    assert spec.kernel is not None and spec.output_size is not None and spec.samples is not None
    k, out = spec.kernel[axis], spec.output_size[axis]
    starts = fractional_starts(length, k, out, spec.samples[axis])
    gaps = np.diff(starts).tolist()
    items: set[Item] = {("gap", (g > k) - (g < k)) for g in gaps} | {("last start past 0", int(starts[-1]) > 0)}
    if out > 1:  # where (i + u)·α is an integer, floor, ceil and a rounded float product part (another rounding shows)
        u, alpha = spec.samples[axis], Fraction(length - k, out - 1)
        items.add(("integral product, base", any(((i + u) * alpha).denominator == 1 for i in range(1, out - 1)),
                   (u * alpha).denominator == 1))
    items |= {("both gaps", len(set(gaps[:-1])) > 1), ("last gap", (gaps[-1] > k) - (gaps[-1] < k))} if gaps else set()
    return items


def fractional_lengths(spec: FractionalMaxPool, axis: int) -> list[int]:
    """The plan's lengths along a fractional axis: TensorFlow's sequence fixes its one length;
    for PyTorch's form a greedy cover of :func:`fractional_items` over L from o + k - 1 (α = 1)
    to past α = 2k + 1 (windows overlap, abut and skip cells; both gaps wherever α is no integer)."""
    if spec.sequences is not None:
        return [spec.sequences[axis][-1]]
    assert spec.kernel is not None and spec.output_size is not None
    k, out = spec.kernel[axis], spec.output_size[axis]
    least = out + k - 1
    candidates = {length: fractional_items(spec, axis, length)
                  for length in range(least, least + (2 * k + 1) * max(out - 1, 1) + 3)}
    lengths = _greedy(candidates)
    assert lengths is not None
    return lengths


def axis_lengths(spec: PoolSpec, axis: int) -> list[int]:
    """The plan's lengths along one axis: every window class (:func:`exact_lengths`), or for a long
    kernel every kind of window with its extreme cuts (:func:`long_lengths`)."""
    if isinstance(spec, FractionalMaxPool):
        return fractional_lengths(spec, axis)
    if isinstance(spec, (AdaptivePool, GlobalPool)):
        return adaptive_lengths(spec.output_size[axis] if isinstance(spec, AdaptivePool) else 1)
    assert isinstance(spec, Pool)  # a table operator's plan is its own (plan_shapes)
    exact = exact_lengths(spec, axis) if length_bound(spec, axis) <= MAX_LENGTH else None
    return long_lengths(spec, axis) if exact is None else exact


def exact_lengths(spec: Pool, axis: int) -> list[int] | None:
    """Lengths that together produce every window class the axis produces at any length: every
    length up to :func:`length_bound` enumerated, a greedy set cover of their items; None when that
    takes more than :data:`MAX_EXACT_LENGTHS` lengths."""
    candidates = {}
    for length in range(1, length_bound(spec, axis) + 1):
        items = axis_items(spec, axis, length)
        if items is not None:
            candidates[length] = items
    if not candidates:
        raise SpecError(f"cover: {spec!r} fits no input length along axis {axis}")
    return _greedy(candidates, MAX_EXACT_LENGTHS)


def long_lengths(spec: Pool, axis: int) -> list[int]:
    """A few lengths that together produce every *kind* of window the axis has at any length, each
    kind at its least and its greatest cut (module doc, "Long kernels"): a greedy set cover over
    candidate lengths derived from the kernel, stride, dilation and pads, not an enumeration."""
    ordered = sorted(_long_candidates(spec, axis))
    _within_budget(spec, axis, ordered[-1])
    candidates = {}
    for length in ordered:
        items = long_items(spec, axis, length)
        if items is not None:
            candidates[length] = items
    if not candidates:
        raise SpecError(f"cover: {spec!r} fits no input length along axis {axis} (none of the long-kernel "
                        f"plan's candidates, nor the {SCAN_LIMIT} lengths from the shortest one that could)")
    lengths = _greedy(_extremes(candidates))
    assert lengths is not None
    return lengths


def _within_budget(spec: Pool, axis: int, length: int) -> None:
    """Refuse, before any window is listed, a long-kernel plan whose candidates reach a length no
    shape of the plan could have: ``BATCH * CHANNELS * length`` cells exceed the Jacobian budget
    (a window extent of 2*10^9 would list 10^9 windows per candidate, minutes and tens of GB)."""
    import symjac.pool

    budget = symjac.pool.MAX_NNZ
    if BATCH * CHANNELS * length > budget:
        k, d = spec.kernel[axis], spec.dilation[axis]
        raise SpecError(f"cover: {spec!r} is too large to plan: along axis {axis} its window spans "
                        f"{d * (k - 1) + 1} cells (kernel {k}, dilation {d}), so the long-kernel plan needs "
                        f"lengths up to {length}, and a shape of {BATCH} x {CHANNELS} planes that long has "
                        f"{BATCH * CHANNELS * length} cells, beyond the budget of {budget} (symjac.pool.MAX_NNZ); "
                        "give input_shape explicitly")


def long_items(spec: Pool, axis: int, length: int) -> set[Item] | None:
    """What one axis at length L exercises, as the long-kernel plan counts it: each window's kind
    (which of its low cut, high cut and ceil overhang are nonzero) with, for a window cut at one end
    only, the size of its cut; the cells past the last window (an output size rounded the wrong way
    shows only where there are some); whether there are three windows or more; the pads' sides and
    total; a drop. None when no window fits."""
    items = axis_items(spec, axis, length)
    if items is None:
        return None
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    plan = _pool_plan(spec, axis, length)
    start = (plan.out - 1) * s - plan.pad[0]
    tail = length - 1 - (start + int(_valid_slots(start, k, d, length)[1]) * d)
    # three windows or more: a wrong stride shows only where a window has a neighbour on each side
    return _kinds(k, items) | {("tail", tail > 0), ("three windows", plan.out >= 3)}


def _kinds(k: int, items: set[Item]) -> set[Item]:
    out: set[Item] = set()
    for item in items:
        if item[0] == "class":
            first, last, counted = item[1:]
            cuts = (first, k - 1 - last, 0 if counted is None else k - counted)
            kind = tuple(c > 0 for c in cuts)
            out.add(("kind", kind))
            if not (kind[0] and kind[1]):  # cut at one end only: how far (at both ends: the kind alone)
                out |= {("cut", kind, side, c) for side, c in enumerate(cuts) if c > 0}
        elif item[0] == "pads":
            lo, hi = item[1:]
            out |= {("pad sides", (hi > lo) - (hi < lo)), ("pad total", lo + hi)}
        elif item[0] == "dropped":
            out.add(item)
    return out


def _extremes(candidates: dict[int, set[Item]]) -> dict[int, set[Item]]:
    """``candidates`` with each cut and the pad total kept at their least and greatest value only."""
    values: dict[Item, set[int]] = {}
    for items in candidates.values():
        for item in items:
            if item[0] in ("cut", "pad total"):
                values.setdefault(item[:-1], set()).add(item[-1])
    keep = {key + (v,) for key, vs in values.items() for v in (min(vs), max(vs))}
    return {length: {i for i in items if i[0] not in ("cut", "pad total") or i in keep}
            for length, items in candidates.items()}


def _long_candidates(spec: Pool, axis: int) -> set[int]:
    """The long-kernel plan's candidate lengths (module doc, "Long kernels"): the shortest lengths
    with windows, the lengths around the extent and where the low edge's windows first reach the
    high end, and one steady length (ends apart) per residue of L mod stride that moves the high
    end's cut, the ceil overhang, a drop or SAME's pads."""
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    extent = d * (k - 1) + 1
    same = isinstance(spec.padding, str) and spec.padding != "valid"
    lo, hi = (0, 0) if isinstance(spec.padding, str) else spec.padding[axis]
    if same:  # the pads follow (L - 1) mod s: total = max(extent - 1 - (L - 1) mod s, 0)
        targets = {1 + r for r in (0, 1, 2, -1, -2, extent - 3, extent - 2, extent - 1, extent)}
    else:  # the last window's high end follows (L + lo + hi - extent) mod s (ceil mode: its negative)
        turns = (0, 1, 2, -1, -2, hi - 1, hi, hi + 1, hi + 1 - extent, hi - extent, hi - extent - 1, hi + 2 - extent)
        targets = {extent - lo - hi + r for r in turns}
    base = steady_length(spec, axis)
    out = {base + (t - base) % s for t in targets}
    shortest = _shortest(spec, axis)
    for length in range(shortest, shortest + SCAN_LIMIT):
        if axis_items(spec, axis, length) is not None:
            out |= {length, length + 1, length + 2}
            break
    last_low = max(-(-lo // s) - 1, 0) * s - lo  # the start of the last window with a low cut
    for reach in (extent - lo, extent + last_low):  # the first and last low-cut window end at L - 1
        out |= {reach + j for j in (-2, -1, 0, 1)}
    out |= {extent - 1, extent, extent + 1}
    return {length for length in out if length >= 1}


def _shortest(spec: Pool, axis: int) -> int:
    """No length below this has a window along ``axis`` (SAME pads fit every length; other pads need
    ``L + lo + hi`` past the extent, less up to a stride in ceil mode)."""
    if isinstance(spec.padding, str) and spec.padding != "valid":
        return 1
    lo, hi = (0, 0) if isinstance(spec.padding, str) else spec.padding[axis]
    extent = spec.dilation[axis] * (spec.kernel[axis] - 1) + 1
    return max(1, extent - lo - hi - spec.stride[axis] + 1)  # type: ignore[index]


def _wide_spatial(spec: PoolSpec) -> tuple[int, ...]:
    """The wide shape's spatial lengths: per axis the smallest length of at least 2 with
    windows (a spatial stride that is not the whole plane, at little cost)."""
    return tuple(_long_length(spec, axis, 2) for axis in range(spec.rank))


def _long_length(spec: PoolSpec, axis: int, least: int) -> int:
    """The smallest length >= ``least`` at which the axis has windows."""
    if isinstance(spec, AdaptivePool):
        return max(least, spec.output_size[axis])  # adaptive windows fit every length from o on
    if isinstance(spec, FractionalMaxPool):  # TensorFlow's sequence fixes the length; PyTorch's needs o + k - 1
        return fractional_lengths(spec, axis)[-1] if spec.sequences is not None else max(
            least, spec.output_size[axis] + spec.kernel[axis] - 1)  # type: ignore[index]
    if not isinstance(spec, Pool):
        return least  # a global window fits every length
    length = max(least, _shortest(spec, axis))
    while axis_items(spec, axis, length) is None:
        length += 1
    return length


def large_shapes(spec: PoolSpec) -> list[tuple[int, ...]]:
    """Index-width shapes, batch 1 and 1 channel: per axis, that axis past
    :data:`LARGE_CELLS` cells and the others at their smallest length with windows; for rank >= 2
    also a plane past :data:`LARGE_CELLS` cells with every axis well below 2^15 (``spec`` checked)."""
    small = [_long_length(spec, axis, 1) for axis in range(spec.rank)]
    spatial = []
    for axis in range(spec.rank):
        sp = list(small)
        sp[axis] = _long_length(spec, axis, LARGE_CELLS + 1)
        spatial.append(tuple(sp))
    if spec.rank >= 2:
        side = math.ceil((LARGE_CELLS + 1) ** (1 / spec.rank))
        while side ** spec.rank <= LARGE_CELLS:
            side += 1
        spatial.append(tuple(_long_length(spec, axis, side) for axis in range(spec.rank)))
    return [_full(spec, 1, 1, sp) for sp in spatial]


def _full(spec: PoolSpec, batch: int, channels: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
    if spec.layout == "channels_first":
        return (batch, channels, *spatial)
    return (batch, *spatial, channels)


def cover(spec: PoolSpec, large: bool = False) -> tuple[tuple[int, ...], ...]:
    """A small set of input shapes that together produce every window class of ``spec``.

    Per axis, the lengths produce every window class (valid-cell pattern and divisor,
    edges, asymmetric pads, ceil-dropped windows, dilation gaps) that the axis can
    produce at any input length, and every residue of L mod stride; the shapes
    combine the axes' lengths (every combination while there are at most 64), with
    batch 2 and 3 channels; one more, wide shape has batch 3 and 37 channels (a
    remainder for 4, 8, 16 and 32 vector lanes) at small spatial lengths.

    Verifying an implementation at these shapes covers every input shape, assuming
    the implementation treats windows of one class alike (e.g. all interior windows
    by the same code). A long kernel (module doc, "Long kernels") gets every kind of
    window with its extreme cuts instead of every class; an adaptive axis the lengths
    o - 1, o, 2o - 1, 2o + 1, where PyTorch's window rule parts from every plausible
    other (module doc, "Adaptive pooling").

    Args:
      spec: a pooling spec.
      large: also the index-width shapes (:func:`large_shapes`): past 2^16 cells along
        each axis and per plane, batch 1 and 1 channel.

    Returns:
      Full input shapes in the spec's layout, smallest first (the large ones last).

    Raises:
      SpecError: the spec fits no input length, or a shape of the plan exceeds the Jacobian budget
        (``symjac.pool.MAX_NNZ``: a kernel of 10^6 along two axes, say).
    """
    return plan(check_pool_spec(spec), large)


def plan(spec: PoolSpec, large: bool = False) -> tuple[tuple[int, ...], ...]:
    """:func:`cover` for the stages below a public entry, which checked the spec."""
    if not operator_of(spec).kernel_windows:  # RoI pooling: its boxes fix the plan (the operator's rule)
        return tuple(operator_of(spec).plan_shapes(spec, large))
    per_axis = [axis_lengths(spec, axis) for axis in range(spec.rank)]
    if math.prod(len(p) for p in per_axis) <= MAX_SHAPES:
        spatial = list(itertools.product(*per_axis))
    else:
        n = max(len(p) for p in per_axis)
        spatial = [tuple(p[i % len(p)] for p in per_axis) for i in range(n)]
    shapes = [_full(spec, BATCH, CHANNELS, sp) for sp in spatial]
    shapes.append(_full(spec, WIDE_BATCH, WIDE_CHANNELS, _wide_spatial(spec)))
    ordered = sorted(shapes, key=lambda sh: (math.prod(sh), sh)) + (large_shapes(spec) if large else [])
    for shape in ordered:  # refused up front, before a verification spends minutes on the shapes below it
        try:
            _check_budget(spec, shape, None)
        except SpecError as e:
            raise SpecError(f"cover: the coverage plan's shape {shape} is too large: {str(e).split(' is too large: ')[-1]}"
                            "; or give input_shape explicitly") from None
    return tuple(ordered)
