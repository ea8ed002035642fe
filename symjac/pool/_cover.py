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
1 channel) probe index width: 16-bit indices wrap there.

Guarantee: an implementation that treats windows of one class alike (the same code
path for every interior window, say) and passes at every shape of the plan, passes
at every shape.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from symjac._errors import SpecError
from symjac.pool._geometry import _pool_plan, _valid_slots
from symjac.pool._ops import operator_of
from symjac.pool._spec import AdaptivePool, GlobalPool, Pool, PoolSpec, check_pool_spec

#: Lengths enumerated per axis are at most this (kernels whose bound exceeds it are refused).
MAX_LENGTH = 4096
#: Above this many shapes the axes are combined in step (each axis's classes all
#: appear, not every combination of them).
MAX_SHAPES = 64
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


def _greedy(candidates: dict[Any, set[Item]]) -> list[Any]:
    """Greedy set cover; ties go to the first (smallest) candidate."""
    todo = set().union(*candidates.values()) if candidates else set()
    chosen: list[Any] = []
    while todo:
        best = max(candidates, key=lambda c: len(candidates[c] & todo))
        chosen.append(best)
        todo -= candidates[best]
    return sorted(chosen)


def axis_lengths(spec: PoolSpec, axis: int) -> list[int]:
    """The plan's lengths along one axis."""
    if isinstance(spec, (AdaptivePool, GlobalPool)):
        o = spec.output_size[axis] if isinstance(spec, AdaptivePool) else 1
        # Adaptive windows have no padding; what varies is size-1 windows (L = o),
        # disjoint equal windows (L = 2o) and overlapping windows of two sizes (2o + 1).
        return [o, 2 * o, 2 * o + 1]
    bound = length_bound(spec, axis)
    if bound > MAX_LENGTH:
        raise SpecError(
            f"cover: along axis {axis} lengths up to {bound} would have to be enumerated (kernel "
            f"{spec.kernel[axis]}, dilation {spec.dilation[axis]}); cover supports at most {MAX_LENGTH}: "
            "give input_shape explicitly"
        )
    candidates = {}
    for length in range(1, bound + 1):
        items = axis_items(spec, axis, length)
        if items is not None:
            candidates[length] = items
    if not candidates:
        raise SpecError(f"cover: {spec!r} fits no input length along axis {axis}")
    return _greedy(candidates)


def _wide_spatial(spec: PoolSpec) -> tuple[int, ...]:
    """The wide shape's spatial lengths: per axis the smallest length of at least 2 with
    windows (a spatial stride that is not the whole plane, at little cost)."""
    return tuple(_long_length(spec, axis, 2) for axis in range(spec.rank))


def _long_length(spec: PoolSpec, axis: int, least: int) -> int:
    """The smallest length >= ``least`` at which the axis has windows."""
    if isinstance(spec, AdaptivePool):
        return max(least, spec.output_size[axis])  # adaptive windows fit every length from o on
    if not isinstance(spec, Pool):
        return least  # a global window fits every length
    length = least
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
    by the same code).

    Args:
      spec: a pooling spec.
      large: also the index-width shapes (:func:`large_shapes`): past 2^16 cells along
        each axis and per plane, batch 1 and 1 channel.

    Returns:
      Full input shapes in the spec's layout, smallest first (the large ones last).

    Raises:
      SpecError: the spec fits no input length, or its kernel is too long to enumerate.
    """
    return plan(check_pool_spec(spec), large)


def plan(spec: PoolSpec, large: bool = False) -> tuple[tuple[int, ...], ...]:
    """:func:`cover` for the stages below a public entry, which checked the spec."""
    per_axis = [axis_lengths(spec, axis) for axis in range(spec.rank)]
    if math.prod(len(p) for p in per_axis) <= MAX_SHAPES:
        spatial = list(itertools.product(*per_axis))
    else:
        n = max(len(p) for p in per_axis)
        spatial = [tuple(p[i % len(p)] for p in per_axis) for i in range(n)]
    shapes = [_full(spec, BATCH, CHANNELS, sp) for sp in spatial]
    shapes.append(_full(spec, WIDE_BATCH, WIDE_CHANNELS, _wide_spatial(spec)))
    ordered = sorted(shapes, key=lambda sh: (math.prod(sh), sh))
    return tuple(ordered + (large_shapes(spec) if large else []))
