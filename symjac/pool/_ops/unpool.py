"""Max unpooling: y[index[i]] = x[i], every other output 0; the derivative a gather of dy.

The partial inverse of max pooling (PyTorch ``max_unpool1d/2d/3d``, ONNX ``MaxUnpool``):
input values x and integer indices of x's shape, one output cell per input cell. It is a
scatter, not a window reduction, so it has its own spec (:class:`MaxUnpool`) and resolution
(:class:`Scatter`) beside the window operators, and its own verifier
(:mod:`symjac.verifiers.unpool`).

Conventions, each a spec field:

- **indices** (``flat``): ``"plane"`` (PyTorch): an index counts cells of its own (N, C) plane
  of the output, ``0 <= index < prod(output spatial)``; ``"tensor"`` (ONNX, as ONNX ``MaxPool``'s
  ``Indices`` output): it counts cells of the whole output tensor, ``0 <= index < N·C·prod(spatial)``,
  so an index may write into another plane (ONNX Runtime 1.32 does).
- **output size**: by default ``(L - 1)·stride + kernel - pad_low - pad_high`` per spatial axis
  (PyTorch: ``(L - 1)·s - 2p + k``; ONNX: ``s·(L - 1) + k - pads_begin - pads_end``). A given
  ``output_size`` (PyTorch's argument, ONNX's ``output_shape`` input) must lie strictly within
  ``default ± stride`` for ``"plane"`` (PyTorch's check) and be at least the default for
  ``"tensor"`` (ONNX Runtime's).
- **write order** (``write``): two input cells whose indices are equal (a *repeated index*, as
  overlapping max-pool windows produce when their maximum sits in the overlap) both write one
  output cell; ``"last"`` (default): the write of the input cell last in row-major order of
  (N, C, *spatial) wins; ``"first"``: the first wins. ONNX Runtime's CPU kernel writes in that
  order (measured, 1.32: last wins). PyTorch's CPU kernel is sequential per plane on one
  thread (``torch.set_num_threads(1)``: last wins) but splits a plane's cells between threads
  otherwise, so which write wins varies from call to call (measured, torch 2.13 on 2 threads:
  ``[1, 2, 3, 4]`` all to index 0 gives 2 or 4), as its documentation warns
  (``MaxUnpool2d``: "may behave nondeterministically when the input indices has repeat values").

The derivative exact for that forward: y is linear in x, ``∂y[o]/∂x[i] = 1`` exactly when i is
the winning write of o, else 0. The VJP is a gather, ``dx[i] = dy[index[i]]`` for a winning
cell and 0 for a cell whose value a later (``"first"``: an earlier) write overwrote; the JVP is
the forward applied to the tangent; the second derivative is zero. PyTorch's backward is
``dy.gather(indices)`` for every cell: it sends dy to overwritten cells too (its gradient is
not the derivative of its forward at a repeated index, whichever write won).

Non-finite inputs: the forward copies values, so NaN and ±inf reach the output cell they win,
and nothing else; the derivative does not depend on x.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError, SpecError
from symjac.pool._foreign import accept_only_fields
from symjac.pool._spec import MAX_RANK, _choice, _is_int, _padding, _rank_of, _ints

#: Where an index counts: its (N, C) plane of the output (PyTorch) or the whole output tensor (ONNX).
FLAT = ("plane", "tensor")
#: Which of several writes to one output cell wins: the last or the first in row-major input order.
WRITES = ("last", "first")
#: At most this many input cells in a spec's given indices (they are stored in the spec).
MAX_GIVEN = 2**16


def _given_indices(value: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Given indices as (shape, flat values), exact integers; a :class:`SpecError` otherwise."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - whatever it was, name it
        raise SpecError(f"indices={value!r} is not valid: give an integer array ({exc})") from None
    if arr.dtype.kind not in "iu" and not (arr.dtype == object and all(_is_int(v) for v in arr.reshape(-1))):
        raise SpecError(f"indices of dtype {arr.dtype} are not valid: give integers (PyTorch's int64 indices)")
    if not 3 <= arr.ndim <= MAX_RANK + 2:
        raise SpecError(f"indices of shape {arr.shape} are not valid: give (N, C, *spatial) with 1 to 3 spatial axes")
    if arr.size == 0 or arr.size > MAX_GIVEN:
        raise SpecError(f"indices of shape {arr.shape} are not valid: give 1 to {MAX_GIVEN} cells")
    flat = tuple(int(v) for v in arr.reshape(-1).tolist())
    if min(flat) < 0:
        raise SpecError(f"indices hold {min(flat)}: an index counts output cells from 0")
    return tuple(int(s) for s in arr.shape), flat


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class MaxUnpool:
    """Max unpooling over 1, 2 or 3 spatial dimensions (PyTorch ``max_unpool*d``, ONNX ``MaxUnpool``).

    ``y[index[i]] = x[i]``; every output cell no index names is 0. The module docstring
    (:mod:`symjac.pool._ops.unpool`) states the conventions and measured framework behaviour.

    Args:
      kernel: the max pooling's window size, one int per spatial dimension (the rank comes from
        here: ``(k,)`` is 1-D); a bare int means ``(k, k)``.
      stride: the max pooling's step; ``None`` means ``kernel``.
      padding: the padding the max pooling added: an int (both sides, every axis), one int per
        axis, or per-axis ``(low, high)`` pairs (ONNX ``pads``).
      output_size: the output's spatial size (PyTorch's ``output_size``, ONNX's ``output_shape``
        without N and C); None: ``(L - 1)·stride + kernel - low - high`` per axis.
      indices: the indices (an integer array of the input's full shape); None: generated for
        each input shape the verifier uses, as a max pooling returns them, repeated indices
        included (:func:`pooled_indices`).
      flat: ``"plane"`` (an index counts its (N, C) plane's output cells, PyTorch) or ``"tensor"``
        (it counts the whole output tensor's, ONNX).
      write: ``"last"`` (the last write in row-major input order wins at a repeated index, the
        default) or ``"first"``.

    Raises:
      SpecError: a field is invalid; the message names it and what is valid.
    """

    kernel: tuple[int, ...]
    stride: tuple[int, ...] | None = dataclasses.field(default=None, kw_only=True)
    padding: Any = dataclasses.field(default=0, kw_only=True)
    output_size: tuple[int, ...] | None = dataclasses.field(default=None, kw_only=True)
    indices: Any = dataclasses.field(default=None, kw_only=True)
    flat: str = dataclasses.field(default="plane", kw_only=True)
    write: str = dataclasses.field(default="last", kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        kernel = _rank_of("kernel", self.kernel)
        rank = len(kernel)
        put(self, "kernel", kernel)
        put(self, "stride", kernel if self.stride is None else _ints("stride", self.stride, rank, 1))
        if isinstance(self.padding, str):
            raise SpecError(f"padding={self.padding!r} is not valid for max unpooling: give an int, one int per "
                            "axis or per-axis (low, high) pairs (the padding the max pooling added)")
        put(self, "padding", _padding(self.padding, rank))
        if self.output_size is not None:
            put(self, "output_size", _ints("output_size", self.output_size, rank, 1))
        put(self, "flat", _choice("flat", self.flat, FLAT))
        put(self, "write", _choice("write", self.write, WRITES))
        if self.indices is not None:
            shape, flat = _given_indices(self.indices)
            if len(shape) != rank + 2:
                raise SpecError(f"indices of shape {shape} have {len(shape) - 2} spatial axes; kernel={kernel!r} "
                                f"has {rank}: give (N, C) and {rank} spatial sizes")
            put(self, "indices", (shape, flat))

    def __repr__(self) -> str:
        fields = [f"kernel={self.kernel!r}", f"stride={self.stride!r}", f"padding={self.padding!r}"]
        if self.output_size is not None:
            fields.append(f"output_size={self.output_size!r}")
        if self.indices is not None:
            fields.append(f"indices={self.given().tolist()!r}")
        fields += [f"flat={self.flat!r}", f"write={self.write!r}"]
        return f"MaxUnpool({', '.join(fields)})"

    @property
    def rank(self) -> int:
        """Number of spatial dimensions."""
        return len(self.kernel)

    def given(self) -> np.ndarray:
        """The given indices as an int64 array (:class:`InputError` when none were given)."""
        if self.indices is None:
            raise InputError("this MaxUnpool holds no indices: they are generated per input shape")
        shape, flat = self.indices
        return np.array(flat, dtype=np.int64).reshape(shape)

    def scatter(self, indices: Any = None, input_shape: Sequence[int] | None = None) -> Scatter:
        """The exact operator at ``indices`` (default: the spec's own; or the pooled family's at
        ``input_shape``): its ``forward(x)``, ``vjp(dy)``, ``jvp(t)`` and ``jacobian()``.

        Raises:
          InputError / SpecError: the indices do not fit the spec (shape, range, output size).
        """
        if indices is None:
            if self.indices is None and input_shape is None:
                raise InputError("give indices (or input_shape, for the indices a max pooling gives)")
            shape = check_input_shape(self, self.indices[0] if self.indices is not None else input_shape)
            indices = self.given() if self.indices is not None else pooled_indices(self, shape)
        idx = np.asarray(indices)
        return scatter(self, check_input_shape(self, idx.shape), idx)

    def default_size(self, in_spatial: Sequence[int]) -> tuple[int, ...]:
        """``(L - 1)·stride + kernel - low - high`` per axis (PyTorch's and ONNX's default)."""
        assert self.stride is not None
        return tuple((length - 1) * s + k - lo - hi
                     for length, s, k, (lo, hi) in zip(in_spatial, self.stride, self.kernel, self.padding))


def refuse_scatter(operator: Any, where: str) -> None:
    """A :class:`SpecError` for max unpooling (``kind = "max_unpool"``) where a stage takes window pooling only."""
    if isinstance(operator, MaxUnpool):
        raise SpecError(f"{where}: max unpooling (kind = \"max_unpool\") has no windows: symjac verify checks it "
                        "(--impl, and a native kernel: --exec, probes/check, ctypes) and symjac golden writes its "
                        "data; explain, graph, census take window pooling specs and losses")


def check_unpool_spec(spec: Any) -> MaxUnpool:
    """``spec`` if it is a :class:`MaxUnpool`, else a :class:`SpecError`."""
    if not isinstance(spec, MaxUnpool):
        raise SpecError(f"spec={spec!r} is not a max unpooling spec: give symjac.MaxUnpool")
    return spec


@dataclasses.dataclass(frozen=True, eq=False)
class Scatter:
    """A :class:`MaxUnpool` resolved at an input shape and its indices: who writes where, who wins.

    Attributes:
      spec: the spec.
      input_shape / output_shape: full shapes (N, C, *spatial).
      indices: (input_shape) int64, as the implementation is given them.
      target: (n_in,) the flat output cell each input cell writes (row-major over the whole output).
      winner: (n_out,) the input cell whose write an output cell keeps, -1 where none writes.
    """

    spec: MaxUnpool
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    indices: np.ndarray
    target: np.ndarray
    winner: np.ndarray

    @property
    def n_in(self) -> int:
        return int(self.target.size)

    @property
    def n_out(self) -> int:
        return int(self.winner.size)

    def overwritten(self) -> np.ndarray:
        """(n_in,) input cells whose write a winning write replaced: their gradient is 0."""
        return np.asarray(self.winner[self.target] != np.arange(self.n_in))

    def writers(self, o: int) -> np.ndarray:
        """The input cells (flat, row-major, the write order) that write output cell ``o``."""
        return np.flatnonzero(self.target == o)

    def repeated(self) -> np.ndarray:
        """(n_out,) output cells written by two or more input cells (a repeated index)."""
        return np.asarray(np.bincount(self.target, minlength=self.n_out) >= 2)

    # -- the exact rules: every value a copy, exact in any dtype -------------------------------
    def forward(self, x: np.ndarray) -> np.ndarray:
        """The exact forward in x's dtype (a copy of the winning values, 0 elsewhere)."""
        y = np.zeros(self.n_out, dtype=x.dtype)
        hit = self.winner >= 0
        y[hit] = x.reshape(-1)[self.winner[hit]]
        return y.reshape(self.output_shape)

    def vjp(self, dy: np.ndarray) -> np.ndarray:
        """``J^T dy`` exactly: dy gathered at each winning cell's target, 0 at an overwritten cell."""
        dx = dy.reshape(-1)[self.target].copy()
        dx[self.overwritten()] = 0
        return np.asarray(dx.reshape(self.input_shape))

    def jvp(self, t: np.ndarray) -> np.ndarray:
        """``J t`` exactly: the forward applied to the tangent (y is linear in x)."""
        return self.forward(t)

    def jacobian(self) -> Any:
        """The exact Jacobian as a :class:`symjac.SparseJacobian` (one 1 per written output cell)."""
        from symjac.pool._stamp import SparseJacobian

        rows = np.flatnonzero(self.winner >= 0).astype(np.int64)
        return SparseJacobian(self.output_shape, self.input_shape, rows, self.winner[rows].astype(np.int64),
                              np.zeros(rows.size, dtype=np.int8), (sympy.Integer(1),), self.spec)

    def cell(self, flat: int, which: str) -> tuple[int, ...]:
        """A flat index of the input (``which="input"``) or output as its multi-index."""
        shape = self.input_shape if which == "input" else self.output_shape
        return tuple(int(i) for i in np.unravel_index(flat, shape))


def output_shape(spec: MaxUnpool, input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output's full shape (N, C, *spatial) at ``input_shape`` (what a native kernel answers with).

    Raises:
      SpecError: the output size is not valid at ``input_shape``.
    """
    return (*input_shape[:2], *_output_spatial(spec, input_shape))


def _output_spatial(spec: MaxUnpool, input_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output's spatial size at ``input_shape``: given (checked by the ``flat`` convention's rule) or default."""
    default = spec.default_size(input_shape[2:])
    if min(default) < 1:
        raise SpecError(f"{spec!r} at input shape {input_shape}: the default output size {default} is not "
                        "positive (the padding exceeds (L - 1)·stride + kernel); give output_size or a longer input")
    if spec.output_size is None:
        return default
    assert spec.stride is not None
    for axis, (size, d, s) in enumerate(zip(spec.output_size, default, spec.stride)):
        if spec.flat == "plane" and not d - s < size < d + s:
            raise SpecError(f"output_size={spec.output_size!r} is not valid at input shape {input_shape}: along "
                            f"axis {axis} give a size strictly between {d - s} and {d + s} (default {d} ± stride, "
                            "PyTorch's rule)")
        if spec.flat == "tensor" and size < d:
            raise SpecError(f"output_size={spec.output_size!r} is not valid at input shape {input_shape}: along "
                            f"axis {axis} give a size >= {d}, the default (ONNX Runtime's rule)")
    return spec.output_size


def check_input_shape(spec: MaxUnpool, input_shape: Any) -> tuple[int, ...]:
    """``input_shape`` as a tuple, checked against the spec's rank and given indices."""
    try:
        shape = tuple(input_shape)
    except TypeError:
        raise InputError(f"input_shape={input_shape!r} is not valid: give a tuple of positive ints") from None
    if not all(_is_int(s) and s >= 1 for s in shape):
        raise InputError(f"input_shape={input_shape!r} is not valid: every size must be an integer >= 1")
    shape = tuple(int(s) for s in shape)
    if len(shape) != spec.rank + 2:
        raise InputError(f"input_shape={shape} is not valid for {spec.rank} spatial axes: give (N, C) and "
                         f"{spec.rank} spatial sizes")
    if spec.indices is not None and shape != spec.indices[0]:
        raise InputError(f"input_shape={shape} disagrees with the spec's indices of shape {spec.indices[0]}: "
                         "the values and the indices have one shape")
    return shape


def scatter(spec: MaxUnpool, input_shape: tuple[int, ...], indices: np.ndarray) -> Scatter:
    """Resolve ``spec`` at ``input_shape`` with ``indices`` (checked: shape and range).

    Raises:
      InputError / SpecError: the indices do not fit, or the output size is invalid.
    """
    out_sp = _output_spatial(spec, input_shape)
    plane = math.prod(out_sp)
    n, c = input_shape[:2]
    out_shape = (n, c, *out_sp)
    idx = np.asarray(indices)
    if idx.shape != input_shape or idx.dtype.kind not in "iu":
        raise InputError(f"indices of shape {idx.shape} and dtype {idx.dtype}: give integers of the input's shape "
                         f"{input_shape}")
    idx = idx.astype(np.int64)
    bound = plane if spec.flat == "plane" else n * c * plane
    bad = np.flatnonzero((idx.reshape(-1) < 0) | (idx.reshape(-1) >= bound))
    if bad.size:
        at = tuple(int(i) for i in np.unravel_index(int(bad[0]), input_shape))
        raise InputError(f"index {int(idx.reshape(-1)[bad[0]])} at input cell {at} is outside the output: with "
                         f"flat={spec.flat!r} and output spatial size {out_sp} an index lies in [0, {bound})")
    target = idx.reshape(-1).copy()
    if spec.flat == "plane":  # the plane of input cell i is i // (its plane's size)
        target += np.arange(target.size) // math.prod(input_shape[2:]) * plane
    order = np.arange(target.size, dtype=np.int64)
    winner = np.full(n * c * plane, -1, dtype=np.int64)
    if spec.write == "last":
        np.maximum.at(winner, target, order)
    else:
        first = np.full(winner.size, target.size, dtype=np.int64)
        np.minimum.at(first, target, order)
        winner = np.where(first < target.size, first, -1)
    return Scatter(spec, input_shape, out_shape, idx, target, winner)


# -- default indices: what a max pooling returns ---------------------------------------------------
def _axis_choice(length_out: int, n_win: int, k: int, s: int, lo: int, parity: int) -> np.ndarray:
    """The cell each window of one axis picks, as a max pooling's first maximum of a per-axis profile:
    peaks at the first cell of every other window (``parity``: which ones), so where windows overlap
    (k > stride) the window before a peaked one has its maximum there too: a repeated index."""
    cells = np.arange(length_out)
    starts = np.arange(n_win) * s - lo
    peaked = starts[(np.arange(n_win) % 2) == parity]
    profile = (cells * (1 if parity else -1)).astype(np.float64)  # distinct: the runner-up side varies
    profile[peaked[(peaked >= 0) & (peaked < length_out)]] = 10.0 * length_out
    choice = np.empty(n_win, dtype=np.int64)
    for w, a in enumerate(starts.tolist()):
        inside = cells[max(a, 0):min(a + k, length_out)]
        if inside.size == 0:  # a window wholly in the padding: a max pooling never gives one; pick the nearest cell
            choice[w] = min(max(a, 0), length_out - 1)
        else:
            choice[w] = inside[int(np.argmax(profile[inside]))]
    return choice


def pooled_indices(scatter_spec: MaxUnpool, input_shape: tuple[int, ...]) -> np.ndarray:
    """Indices as a max pooling of the spec's windows returns them (first maximum), of a source that
    is a sum of per-axis profiles (so each window's maximum is the product of per-axis maxima):
    peaks in every other window, alternating by plane; with overlapping windows (kernel > stride)
    pairs of windows share their maximum (a repeated index), as real max pooling gives."""
    spec = scatter_spec
    assert spec.stride is not None
    out_sp = _output_spatial(spec, input_shape)
    n, c = input_shape[:2]
    idx = np.empty(input_shape, dtype=np.int64)
    plane = math.prod(out_sp)
    for p in range(n * c):
        axes = [_axis_choice(out_sp[a], input_shape[2 + a], spec.kernel[a], spec.stride[a], spec.padding[a][0],
                             (p + a) % 2) for a in range(spec.rank)]
        grid = np.ravel_multi_index(np.meshgrid(*axes, indexing="ij"), out_sp)
        idx[p // c, p % c] = grid + (p * plane if spec.flat == "tensor" else 0)
    return idx


def repeated_indices(spec: MaxUnpool, input_shape: tuple[int, ...]) -> np.ndarray:
    """Indices with a repeat at every pair of input cells (row-major within a plane, cells 2j and
    2j+1 name cell 2j's pooled index), whatever the kernel and stride: the write order decides
    every pair, as indices given by hand (or by another pooling) may ask."""
    idx = pooled_indices(spec, input_shape)
    n, c = input_shape[:2]
    flat = idx.reshape(n * c, -1)
    flat[:, 1::2] = flat[:, 0:-1:2][:, :flat[:, 1::2].shape[1]]
    return flat.reshape(input_shape)


def cover(spec: MaxUnpool) -> list[tuple[int, ...]]:
    """The coverage plan's input shapes: the given indices' shape; else per spatial axis 2 and 3 cells
    (a pair of windows, and an odd one out), with two planes (per-plane indices and offsets), and a
    batch of two (the N offset)."""
    if spec.indices is not None:
        return [spec.indices[0]]
    assert spec.stride is not None
    if spec.output_size is not None:  # the input length whose default size is the largest <= the given one
        # (within PyTorch's default ± stride and at most ONNX Runtime's size, so both rules take it)
        lengths = tuple((size - k + lo + hi) // s + 1 for size, k, s, (lo, hi)
                        in zip(spec.output_size, spec.kernel, spec.stride, spec.padding))
        if min(lengths) < 1:
            raise SpecError(f"{spec!r}: no input length has a default output size within output_size="
                            f"{spec.output_size!r} (it is below kernel - pads along an axis)")
        return [(1, 2) + lengths, (2, 1) + lengths]
    shapes = [(1, 2) + (2,) * spec.rank, (2, 1) + (3,) * spec.rank]
    return [s for s in shapes if min(spec.default_size(s[2:])) >= 1] or [(1, 2) + (4,) * spec.rank]
