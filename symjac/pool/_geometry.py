"""Geometry: the one place where window bounds are computed.

``resolve(spec, input_shape)`` turns a spec and an input shape into per-dimension
pads, the output shape and, for every output window, the input cells it reads and
its divisor. Forward, Jacobian, lowering and the window graph all read this; none
recomputes a bound (seed 000's bug is exactly a second, diverging copy of it).

Windows are separable: a window's cells are the product of one index set per axis.
Each axis is resolved on its own (:class:`AxisWindows`), then combined.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from symjac._errors import SpecError
from symjac.pool._ops import Operator, operator_of
from symjac.pool._fractional import axis_fractional
from symjac.pool._ops._tables import TableLayout
from symjac.pool._spec import TABLE_SPECS, AdaptivePool, FractionalMaxPool, GlobalPool, Pool, PoolSpec, check_pool_spec

AXIS_NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}


@dataclasses.dataclass(frozen=True, eq=False)
class AxisWindows:
    """The windows of one spatial axis.

    Attributes:
      length: input length L along the axis.
      pad: (low, high) padding.
      starts: (o,) first cell of each window, in unpadded coordinates (may be < 0).
      offsets: (k,) cell offsets within a window (``dilation * j``).
      sizes: (o,) number of slots each window really has (adaptive windows vary).
      counted: (o,) cells counted by ``divisor="include_pad"``.
    """

    length: int
    pad: tuple[int, int]
    starts: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    counted: np.ndarray

    @functools.cached_property
    def cells(self) -> np.ndarray:
        """(o, k) input coordinate of every slot (may lie in the padding)."""
        return _read_only(self.starts[:, None] + self.offsets[None, :])

    @functools.cached_property
    def valid(self) -> np.ndarray:
        """(o, k) whether a slot is a real input cell of the window."""
        cells = self.cells
        in_window = np.arange(self.offsets.size)[None, :] < self.sizes[:, None]
        return _read_only(in_window & (cells >= 0) & (cells < self.length))

    @functools.cached_property
    def padded(self) -> np.ndarray:
        """(o, k) whether a slot lies in the padded input (a real cell or a pad cell;
        not the ceil-mode overhang beyond the padding)."""
        cells = self.cells
        in_window = np.arange(self.offsets.size)[None, :] < self.sizes[:, None]
        return _read_only(in_window & (cells >= -self.pad[0]) & (cells < self.length + self.pad[1]))


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a``, no longer writeable (kept on the axis and shared by every reader)."""
    a.setflags(write=False)
    return a


@dataclasses.dataclass(frozen=True)
class _AxisPlan:
    """One axis of a :class:`Pool`, in O(1): pads, output length and the slot range.

    ``slots`` is the range [first, last] of kernel slots that are a real input cell
    in at least one window; slots outside it read padding in every window and are
    not stored (a kernel of 10^9 over 7 cells stores 7 slots, not 10^9). With
    ``Pool(pad_value=0)`` pad cells take part in the max, so the range is that of the
    slots in the padded input of at least one window.
    """

    pad: tuple[int, int]
    out: int
    slots: tuple[int, int]


def _valid_slots(t: Any, k: int, d: int, length: int) -> tuple[Any, Any]:
    """First and last kernel slot j in [0, k) with 0 <= t + j*d < length, for window
    starts t (a Python int, or an int64 array: one pair per window)."""
    first, last = -(t // d), (length - 1 - t) // d  # ceil(-t/d), floor((L-1-t)/d)
    if isinstance(t, np.ndarray):
        return np.maximum(first, 0), np.minimum(last, k - 1)
    return max(first, 0), min(last, k - 1)


def _pool_plan(spec: Pool, axis: int, length: int) -> _AxisPlan:
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    extent = d * (k - 1) + 1
    name = AXIS_NAMES[spec.rank][axis]
    if isinstance(spec.padding, str):
        if spec.padding == "valid":
            lo = hi = 0
        else:
            out = -(-length // s)
            total = max((out - 1) * s + extent - length, 0)
            small, large = total // 2, total - total // 2
            lo, hi = (small, large) if spec.padding == "same" else (large, small)
    else:
        lo, hi = spec.padding[axis]
    span = length + lo + hi - extent
    if spec.ceil_mode:
        # PyTorch/ONNX: out = ceil(span / s) + 1 with floor division (so a kernel
        # longer than the padded input still gives a window when the ceil reaches it),
        # and a last window that starts in the high padding is dropped.
        out = -(-span // s) + 1
        if (out - 1) * s >= length + lo:
            out -= 1
    else:
        out = span // s + 1 if span >= 0 else 0
    if out < 1:
        raise SpecError(
            f"kernel={spec.kernel!r}: along axis {axis} ({name}) the window extent {extent} "
            f"(kernel {k}, dilation {d}) exceeds the padded input length {length + lo + hi} "
            f"(L={length}, padding ({lo}, {hi})); valid: extent <= padded length"
        )
    # The first and last windows are the ones most likely to read only padding;
    # checking them here refuses a huge pad before any array is built.
    for i in (0, out - 1):
        first, last = _valid_slots(i * s - lo, k, d, length)
        if first > last:
            raise _only_padding(spec, axis, length, (lo, hi), i, i * s - lo, extent)
    first = int(_valid_slots((out - 1) * s - lo, k, d, length)[0])
    last = int(_valid_slots(-lo, k, d, length)[1])
    if spec.pad_value is not None:  # pad cells hold 0 and compete for the max: a slot in the padded
        # input of some window is stored even where it is a pad cell in every window (L=1, k=3, pad 1)
        first = min(first, int(_valid_slots((out - 1) * s, k, d, length + lo + hi)[0]))
        last = max(last, int(_valid_slots(0, k, d, length + lo + hi)[1]))
    return _AxisPlan((lo, hi), out, (first, last))


def _only_padding(spec: Pool, axis: int, length: int, pad: tuple[int, int], i: int, start: int,
                  extent: int) -> SpecError:
    name = AXIS_NAMES[spec.rank][axis]
    k, d = spec.kernel[axis], spec.dilation[axis]
    cells = str([start + j * d for j in range(k)]) if k <= 8 else f"[{start}, {start + d}, ..., {start + extent - 1}]"
    return SpecError(
        f"padding={spec.padding!r}: along axis {axis} ({name}) window {i} reads only padding "
        f"(cells {cells} all lie outside [0, {length})) with pads {pad}; "
        f"valid: each pad smaller than the window extent {extent}"
    )


def _axis_pool(spec: Pool, axis: int, length: int) -> AxisWindows:
    plan = _pool_plan(spec, axis, length)
    k, s, d = spec.kernel[axis], spec.stride[axis], spec.dilation[axis]  # type: ignore[index]
    lo, hi = plan.pad
    starts = np.arange(plan.out, dtype=np.int64) * s - lo
    offsets = np.arange(plan.slots[0], plan.slots[1] + 1, dtype=np.int64) * d
    # include_pad counts the kernel slots inside [-lo, L + hi), stored or not.
    first, last = _valid_slots(starts + lo, k, d, length + lo + hi)
    counted = np.maximum(last - first + 1, 0)
    windows = AxisWindows(length, (lo, hi), starts, offsets, np.full(plan.out, offsets.size), counted)
    empty = np.flatnonzero(~windows.valid.any(axis=1))
    if empty.size:  # a window between the first and last one that falls in a dilation gap
        i = int(empty[0])
        raise _only_padding(spec, axis, length, (lo, hi), i, int(starts[i]), d * (k - 1) + 1)
    return windows


def _axis_adaptive(out: int, length: int) -> AxisWindows:
    i = np.arange(out)
    starts = (i * length) // out
    ends = -((-(i + 1) * length) // out)
    sizes = ends - starts
    offsets = np.arange(int(sizes.max()))
    return AxisWindows(length, (0, 0), starts, offsets, sizes, sizes)


@dataclasses.dataclass(frozen=True, eq=False)
class Geometry:
    """Every window of a pooling spec at one input shape.

    Attributes:
      spec: the spec.
      input_shape: the full input shape in the spec's layout.
      batch_shape: the non-spatial dimensions, as (lead, trail): lead dims precede
        the spatial ones, trail dims (channels_last's C) follow them.
      in_spatial / out_spatial: spatial shapes.
      axes: one :class:`AxisWindows` per spatial axis.
      cells: (windows, K) flat spatial input index of each slot, -1 where invalid
        (built from the axes on first use: max pooling's first/last routes never need it).
      valid: (windows, K) whether a slot is a real input cell (likewise).
      divisor: (windows,) averaging divisor (count of valid cells for max).
    """

    spec: PoolSpec
    input_shape: tuple[int, ...]
    lead: tuple[int, ...]
    trail: tuple[int, ...]
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    axes: tuple[AxisWindows, ...]
    divisor: np.ndarray

    @functools.cached_property
    def operator(self) -> Operator:
        """The spec's pooling operator (:mod:`symjac.pool._ops`): the rules every stage reads."""
        return operator_of(self.spec)

    @functools.cached_property
    def cells(self) -> np.ndarray:
        return self._tables[0]

    @functools.cached_property
    def valid(self) -> np.ndarray:
        return self._tables[1]

    @functools.cached_property
    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        return _combine(self.axes, self.n_in)

    @functools.cached_property
    def padded(self) -> np.ndarray:
        """(windows, K) whether a slot lies in the padded input; ``padded & ~valid``
        are the pad cells (constants for ``Pool(pad_value=0)``)."""
        out = np.ones((1, 1), dtype=bool)
        for ax in self.axes:
            out = (out[:, None, :, None] & ax.padded[None, :, None, :]).reshape(-1, out.shape[1] * ax.padded.shape[1])
        out.setflags(write=False)
        return out

    @property
    def pads(self) -> tuple[tuple[int, int], ...]:
        """Per spatial dimension, (low, high) padding."""
        return tuple(a.pad for a in self.axes)

    @property
    def batch(self) -> int:
        """Number of independent (N, C) slices."""
        return math.prod(self.lead) * math.prod(self.trail)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """The full output shape in the spec's layout."""
        return self.lead + self.out_spatial + self.trail

    @property
    def n_in(self) -> int:
        return math.prod(self.in_spatial)

    @property
    def n_out(self) -> int:
        return math.prod(self.out_spatial)

    # -- layout: canonical form is (batch, flat spatial) --------------------------
    def to_canonical(self, array: np.ndarray, spatial: tuple[int, ...] | None = None) -> np.ndarray:
        """View an array in the spec's layout as (batch, flat spatial)."""
        spatial = self.in_spatial if spatial is None else spatial
        a = np.asarray(array)
        if self.trail:
            a = np.moveaxis(a, -1, 0)
        return a.reshape(self.batch, math.prod(spatial))

    def from_canonical(self, array: np.ndarray, spatial: tuple[int, ...] | None = None) -> np.ndarray:
        """Inverse of :meth:`to_canonical`."""
        spatial = self.out_spatial if spatial is None else spatial
        a = np.asarray(array).reshape(self.trail + self.lead + spatial)
        if self.trail:
            a = np.moveaxis(a, 0, -1)
        return a

    def flat_index(self, batch: np.ndarray, position: np.ndarray, spatial: tuple[int, ...]) -> np.ndarray:
        """Flat index in the layout's order of canonical (batch, spatial position)."""
        n_sp = math.prod(spatial)
        if not self.trail:
            return np.asarray(batch * n_sp + position)
        c = self.trail[0]
        return np.asarray((batch % max(math.prod(self.lead), 1)) * (n_sp * c) + position * c
                          + batch // max(math.prod(self.lead), 1))

    def gather(self, values: np.ndarray, fill: Any = 0.0) -> np.ndarray:
        """(B, W, K) ``values[b, cells[w, k]]`` of canonical (B, n_in) values, ``fill`` on invalid slots.

        Invalid slots hold cell -1, so one sentinel column appended after the cells
        serves them: a single gather, no index or result masking.
        """
        v = np.asarray(values)
        ext = np.concatenate([v, np.full(v.shape[:-1] + (1,), fill, dtype=v.dtype)], axis=-1)
        return np.asarray(ext[..., self.cells])

    def output_index(self, batch: int, window: int) -> tuple[int, ...]:
        """Layout multi-index of output window ``window`` of canonical slice ``batch``."""
        flat = int(self.flat_index(np.array(batch), np.array(window), self.out_spatial))
        return tuple(int(i) for i in np.unravel_index(flat, self.output_shape))

    def input_index(self, batch: int, cell: int) -> tuple[int, ...]:
        """Layout multi-index of spatial input cell ``cell`` of canonical slice ``batch``."""
        flat = int(self.flat_index(np.array(batch), np.array(cell), self.in_spatial))
        return tuple(int(i) for i in np.unravel_index(flat, self.input_shape))

    def window_position(self, window: int) -> tuple[int, ...]:
        """Spatial output coordinates of window number ``window``."""
        return tuple(int(i) for i in np.unravel_index(window, self.out_spatial))

    def cell_position(self, cell: int) -> tuple[int, ...]:
        """Spatial input coordinates of flat spatial cell ``cell``."""
        return tuple(int(i) for i in np.unravel_index(cell, self.in_spatial))

    def window_starts(self) -> np.ndarray:
        """(windows, rank) each window's first cell (where it is: the probes' nearest windows and cells)."""
        return self._starts

    @functools.cached_property
    def _starts(self) -> np.ndarray:
        return np.stack(np.meshgrid(*[a.starts for a in self.axes], indexing="ij"), axis=-1).reshape(self.n_out, -1)

    @property
    def slots_repeat(self) -> bool:
        """Two windows may read one cell at one slot (adaptive upsampling, tables): lines split."""
        return any(bool(np.any(np.diff(ax.starts) <= 0)) for ax in self.axes)


@dataclasses.dataclass(frozen=True, eq=False)
class TableGeometry(TableLayout, Geometry):
    """The windows of an operator giving them as a table (:meth:`Operator.tables`: RoI pooling); its
    layout, canonical form and tables are :class:`~symjac.pool._ops._tables.TableLayout`'s."""

    table: Any = None
    starts: Any = None


def _split_shape(spec: PoolSpec, input_shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    rank = spec.rank
    n = len(input_shape)
    if spec.layout == "channels_first":
        if not rank <= n <= rank + 2:
            raise SpecError(
                f"input_shape={input_shape!r} has {n} dimensions; a {rank}-D channels_first pool takes "
                f"{rank} (spatial), {rank + 1} (C, spatial) or {rank + 2} (N, C, spatial)"
            )
        return input_shape[: n - rank], input_shape[n - rank :], ()
    if not rank <= n <= rank + 2:
        raise SpecError(
            f"input_shape={input_shape!r} has {n} dimensions; a {rank}-D channels_last pool takes "
            f"{rank} (spatial), {rank + 1} (spatial, C) or {rank + 2} (N, spatial, C)"
        )
    if n == rank:
        return (), input_shape, ()
    return input_shape[: n - rank - 1], input_shape[n - rank - 1 : n - 1], input_shape[-1:]


def check_shape(input_shape: object) -> tuple[int, ...]:
    try:
        shape: tuple[Any, ...] = tuple(input_shape)  # type: ignore[arg-type]
    except TypeError:
        raise SpecError(f"input_shape={input_shape!r} is not valid: give a tuple of positive ints") from None
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise SpecError(f"input_shape={input_shape!r} is not valid: every size must be an integer >= 1")
    return tuple(int(s) for s in shape)


def resolve(spec: PoolSpec, input_shape: tuple[int, ...], *, max_nnz: int | None = None) -> Geometry:
    """Resolve ``spec`` at ``input_shape`` into its exact windows.

    The size of the result is checked first, in O(rank) arithmetic: the window
    table holds (batch x windows x stored slots) entries, an upper bound of the
    Jacobian's nonzeros, and with the input it must fit ``max_nnz`` (default
    ``symjac.pool.MAX_NNZ``, 2^26). Geometry work is then O(output + nnz): kernel
    slots that read padding in every window are not stored.

    Raises:
      SpecError: the shape does not fit the spec (wrong rank, kernel larger than the
        padded input, a window reading only padding, adaptive output too large), or
        the Jacobian would exceed the budget.
    """
    return resolved(check_pool_spec(spec), check_shape(input_shape), max_nnz=max_nnz)


def resolved(spec: PoolSpec, input_shape: tuple[int, ...], *, max_nnz: int | None = None) -> Geometry:
    """:func:`resolve` for the stages below a public entry, which checked the spec (and any shape a
    user gave, :func:`check_shape`): only the size budget is checked here, since it depends on the
    shape (a coverage plan resolves one spec at many shapes)."""
    _check_budget(spec, input_shape, max_nnz)
    return _resolve(spec, input_shape)


def _check_budget(spec: PoolSpec, shape: tuple[int, ...], max_nnz: int | None) -> None:
    import symjac.pool

    budget = symjac.pool.MAX_NNZ if max_nnz is None else max_nnz
    if isinstance(spec, TABLE_SPECS):  # a table operator sizes its own table
        size = operator_of(spec).table_size(spec, shape)
        if size > budget:
            raise SpecError(f"{spec!r} at input_shape={shape!r} is too large: its windows read {size} (window, "
                            f"cell) pairs over all channels, beyond the budget of {budget}; use a smaller shape or "
                            f"fewer boxes, or raise the budget with {symjac.pool.BUDGET_HINT}")
        return
    lead, spatial, trail = _split_shape(spec, shape)
    windows = slots = 1
    for axis, length in enumerate(spatial):
        if isinstance(spec, Pool):
            plan = _pool_plan(spec, axis, length)
            out, width = plan.out, plan.slots[1] - plan.slots[0] + 1
        elif isinstance(spec, FractionalMaxPool):
            if spec.sequences is not None:
                out = len(spec.sequences[axis]) - 1
                width = max(b - a for a, b in zip(spec.sequences[axis], spec.sequences[axis][1:])) + 1
            else:
                assert spec.kernel is not None and spec.output_size is not None
                out, width = spec.output_size[axis], spec.kernel[axis]
        else:
            out = spec.output_size[axis] if isinstance(spec, AdaptivePool) else 1
            width = -(-length // out) + 1  # an adaptive window spans at most ceil(L/o) + 1 cells
        windows, slots = windows * out, slots * width
    batch = math.prod(lead) * math.prod(trail)
    size = batch * max(windows * slots, math.prod(spatial))
    if size > budget:
        raise SpecError(
            f"{spec!r} at input_shape={shape!r} is too large: {batch} slices x {windows} windows x {slots} "
            f"kernel slots (or {batch} x {math.prod(spatial)} inputs) = {size} Jacobian entries exceed the "
            f"budget of {budget}; use a smaller shape or kernel, or raise the budget with "
            f"{symjac.pool.BUDGET_HINT}"
        )


@functools.lru_cache(maxsize=64)
def _resolve(spec: PoolSpec, input_shape: tuple[int, ...]) -> Geometry:
    if isinstance(spec, TABLE_SPECS):  # an operator giving its windows as a table
        return _resolve_table(spec, input_shape)
    lead, spatial, trail = _split_shape(spec, input_shape)
    axes: list[AxisWindows] = []
    for axis, length in enumerate(spatial):
        if isinstance(spec, Pool):
            axes.append(_axis_pool(spec, axis, length))
        elif isinstance(spec, AdaptivePool):
            axes.append(_axis_adaptive(spec.output_size[axis], length))
        elif isinstance(spec, FractionalMaxPool):
            starts, sizes = axis_fractional(spec, axis, length, AXIS_NAMES[spec.rank][axis])
            offsets = np.arange(int(sizes.max()), dtype=np.int64)
            axes.append(AxisWindows(length, (0, 0), starts, offsets, sizes, sizes))
        else:
            assert isinstance(spec, GlobalPool)
            axes.append(_axis_adaptive(1, length))

    # Window order is row-major over output positions; counts multiply per axis.
    rank = len(axes)
    counted = np.ones(1, dtype=np.int64)
    n_valid = np.ones(1, dtype=np.int64)
    for ax in axes:
        counted = (counted[:, None] * ax.counted[None, :]).reshape(-1)
        n_valid = (n_valid[:, None] * np.count_nonzero(ax.valid, axis=1)[None, :]).reshape(-1)
    if isinstance(spec, Pool) and operator_of(spec).counts_padding(spec):
        divisor = counted
    elif isinstance(spec, Pool) and isinstance(spec.divisor, int):
        divisor = np.full(n_valid.shape, spec.divisor, dtype=np.int64)
    else:
        divisor = n_valid.astype(np.int64)
    out_spatial = tuple(a.starts.size for a in axes)
    assert len(out_spatial) == rank
    divisor.setflags(write=False)
    return Geometry(spec, input_shape, lead, trail, spatial, out_spatial, tuple(axes), divisor)


def _combine(axes: tuple[AxisWindows, ...], n_in: int) -> tuple[np.ndarray, np.ndarray]:
    """The (windows, K) ``cells`` and ``valid`` tables of :class:`Geometry`, from its axes.

    Slot order is row-major over (axis 0 slot, axis 1 slot, ...), window order row-major
    over output positions. Each table is written once, by one broadcast operation whose
    inner loop runs over all K slots (both operands are first widened to K columns:
    tiny), and never copied: an invalid axis slot holds -n_in, so any combined cell that
    has one is negative (a valid part is below n_in) and one clamp in place makes it -1.
    """
    cells = np.zeros((1, 1), dtype=np.int64)
    valid = np.ones((1, 1), dtype=bool)
    for ax in axes:
        k, slots = ax.cells.shape[1], cells.shape[1]
        ax_cells = np.tile(np.where(ax.valid, ax.cells, -n_in), (1, slots))  # (o, slots*k): column s*k + j is slot j
        cells = np.add(np.repeat(cells * ax.length, k, axis=1)[:, None, :], ax_cells[None]).reshape(-1, slots * k)
        np.maximum(cells, -1, out=cells)
        ax_valid = np.tile(ax.valid, (1, slots))
        valid = np.logical_and(np.repeat(valid, k, axis=1)[:, None, :], ax_valid[None]).reshape(-1, slots * k)
    for a in (cells, valid):
        a.setflags(write=False)
    return cells, valid


def _resolve_table(spec: PoolSpec, input_shape: tuple[int, ...]) -> TableGeometry:
    """The geometry of an operator whose windows are a table (:meth:`Operator.tables`): RoI pooling."""
    table = operator_of(spec).tables(spec, input_shape)
    divisor = np.ones(table.cells.shape[0], dtype=np.int64)
    divisor.setflags(write=False)
    return TableGeometry(spec, input_shape, (), (), (input_shape[0],) + input_shape[2:], table.out_spatial, (),
                         divisor, table=table, starts=table.starts)
