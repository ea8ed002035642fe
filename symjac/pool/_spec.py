"""Specs: frozen, hashable, validated descriptions of a pooling operator.

A spec says *what* operator is meant; :mod:`symjac.geometry` turns a spec and an
input shape into the exact windows. Every check that needs no input shape happens
here, on construction, and raises :class:`symjac.SpecError` naming the field, the
value given and what would be valid.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import SpecError, did_you_mean
from symjac.pool._foreign import accept_only_fields
from symjac.pool._ops import OPERATORS
from symjac.pool._ops.roi_align import RoiAlign as RoiAlign
from symjac.pool._ops.roi_pool import RoiPool as RoiPool

#: The registered operators every geometry takes (adaptive and global pooling too).
MODES = tuple(name for name, op in OPERATORS.items() if op.any_geometry and op.kernel_windows)
#: Pool (not adaptive or global) takes every registered kernel operator whose spec it is (``"lp"`` too:
#: power-average pooling); fractional max pooling's windows come from its own spec,
#: :class:`FractionalMaxPool`, and RoI pooling and RoI Align have spec classes of their own.
POOL_MODES = tuple(name for name, op in OPERATORS.items() if op.spec_type == "Pool" and op.kernel_windows)
ZERO_WINDOW_POLICIES = ("zero", "one")
PADDING_MODES = ("valid", "same", "same_lower")
DIVISOR_RULES = ("exclude_pad", "include_pad")
LAYOUTS = ("channels_first", "channels_last")
MAX_RANK = 3
#: Sizes (kernel, stride, dilation, padding, divisor, output size) are at most this:
#: window arithmetic stays in int64.
MAX_SIZE = 2**31 - 1

#: Other libraries' spellings, accepted as ours (TF/Keras "SAME"/"VALID", ONNX auto_pad).
PADDING_ALIASES = {"SAME": "same", "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}
#: Words users write for a value, for "did you mean" (not accepted silently).
SYNONYMS = {"average": "avg", "mean": "avg", "maximum": "max", "include": "include_pad", "exclude": "exclude_pad",
            "nhwc": "channels_last", "nchw": "channels_first", "ndhwc": "channels_last", "ncdhw": "channels_first"}

#: An explicit padding: per spatial dimension, (low, high).
Pads = tuple[tuple[int, int], ...]
Padding = str | Pads


def _is_int(value: Any) -> bool:
    """A Python or NumPy integer (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _check_size(field: str, value: Any, item: int) -> None:
    if item > MAX_SIZE:
        raise SpecError(f"{field}={value!r} is not valid: {item} > {MAX_SIZE}; give sizes <= 2^31 - 1")


def _ints(field: str, value: Any, rank: int | None, minimum: int) -> tuple[int, ...]:
    """Normalise an int or a sequence of ints to a tuple, broadcasting to ``rank``."""
    what = f"an integer >= {minimum}"
    if _is_int(value):
        items: tuple[Any, ...] = (value,) * (rank or 1)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        items = tuple(value)
        if rank is not None and len(items) != rank:
            raise SpecError(
                f"{field}={value!r} has {len(items)} entries but the pool has {rank} "
                f"spatial dimensions: give one int or {rank} ints"
            )
    else:
        raise SpecError(f"{field}={value!r} is not valid: give {what} or a tuple of them")
    for item in items:
        if not _is_int(item):
            raise SpecError(f"{field}={value!r} is not valid: {item!r} is not an integer; give {what}")
        if item < minimum:
            raise SpecError(f"{field}={value!r} is not valid: {item} < {minimum}; give {what}")
        _check_size(field, value, int(item))
    return tuple(int(i) for i in items)


def _rank_of(field: str, value: Any) -> tuple[int, ...]:
    # A bare int means 2-D (as PyTorch's *Pool2d); (k,) is 1-D, (k, k, k) 3-D.
    sizes = _ints(field, value, 2 if _is_int(value) else None, 1)
    if not 1 <= len(sizes) <= MAX_RANK:
        raise SpecError(
            f"{field}={value!r} has {len(sizes)} spatial dimensions; symjac supports 1, 2 or 3"
        )
    return sizes


def _padding(value: Any, rank: int) -> Padding:
    if isinstance(value, str):
        value = PADDING_ALIASES.get(value.upper(), value)  # any case: users write "Same" too
        if value not in PADDING_MODES:
            raise SpecError(
                f"padding={value!r} is not valid{did_you_mean(value, PADDING_MODES)}: give one of "
                f"{', '.join(map(repr, PADDING_MODES))}, an int, or per-dimension (low, high) pairs"
            )
        return str(value)
    if _is_int(value):
        if value < 0:
            raise SpecError(f"padding={value!r} is not valid: padding must be >= 0")
        _check_size("padding", value, int(value))
        return ((int(value), int(value)),) * rank
    if isinstance(value, Sequence) and len(value) == rank:
        pads = []
        for item in value:
            pair = (item, item) if _is_int(item) else item
            if (
                not isinstance(pair, Sequence)
                or len(pair) != 2
                or not all(_is_int(p) and p >= 0 for p in pair)
            ):
                raise SpecError(
                    f"padding={value!r} is not valid: each of the {rank} entries must be an int >= 0 "
                    "or a (low, high) pair of ints >= 0"
                )
            for p in pair:
                _check_size("padding", value, int(p))
            pads.append((int(pair[0]), int(pair[1])))
        return tuple(pads)
    raise SpecError(
        f"padding={value!r} is not valid: give 'valid', 'same', 'same_lower', an int >= 0, "
        f"or {rank} per-dimension (low, high) pairs"
    )


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    # Strings only: an array's ``in`` is elementwise, so np.array(["avg"]) would pass
    # ``value in choices`` and store str(value) == "['avg']" (seen computing max pooling).
    if not isinstance(value, str) or value not in choices:
        kind = "" if isinstance(value, str) else f" ({type(value).__name__}, not str)"
        hint = did_you_mean(value, choices, SYNONYMS)
        raise SpecError(f"{field}={value!r} is not valid{kind}{hint}: give one of {', '.join(map(repr, choices))}")
    return str(value)


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class Pool:
    """Max, average or power-average (lp) pooling over 1, 2 or 3 spatial dimensions.

    Args:
      mode: ``"max"``, ``"avg"`` or ``"lp"`` (PyTorch ``lp_pool``:
        y = (sum of x^p over the window)^(1/p); ``p=2`` is norm pooling).
      kernel: window size: one int per spatial dimension (the rank is taken from
        here: ``(k,)`` is 1-D, ``(k, k, k)`` 3-D); a bare int means ``(k, k)``.
      stride: step between windows; ``None`` means ``kernel``.
      padding: ``"valid"`` (none), ``"same"`` (SAME_UPPER: TF/Keras/nntrainer, the
        extra cell on the high side), ``"same_lower"`` (ONNX SAME_LOWER), an int
        (both sides of every dimension), or per-dimension ``(low, high)`` pairs.
        TF/ONNX spellings (``"SAME"``, ``"VALID"``, ``"SAME_UPPER"``,
        ``"SAME_LOWER"``, any case) are accepted as these.
      dilation: spacing between the cells of one window.
      ceil_mode: PyTorch/ONNX ``ceil_mode``; with ``"valid"`` or explicit padding
        (SAME fixes the output size itself).
      divisor: for ``"avg"``: ``"exclude_pad"`` (number of valid cells),
        ``"include_pad"`` (PyTorch ``count_include_pad=True``: pad cells count, the
        ceil-mode overhang does not) or a positive int (``divisor_override``).
      layout: ``"channels_first"`` (N, C, *spatial) or ``"channels_last"``
        (N, *spatial, C).
      p: for ``"lp"``: the power, an integer >= 1 (PyTorch's ``norm_type``).
      zero_window: for ``"lp"`` with p >= 2: the Jacobian row where the window's
        power sum is 0 (the nonsmooth point): ``"zero"`` (PyTorch) or ``"one"``.
      pad_value: max pooling only: ``None`` (the default: padding takes no part
        in the max, as in PyTorch, TF, ONNX) or ``0`` (pad cells hold the constant
        0 and take part in the max, as in implementations that ``np.pad`` with
        zeros, e.g. numpy-ml). A pad cell is a constant, so a window whose maximum
        is a pad cell has a zero Jacobian row: its gradient goes to no input; at a
        tie between input cells and the pad the Clarke set is the hull of the tied
        cells' unit vectors and 0.

    Raises:
      SpecError: a field is invalid; the message names it and what is valid.
    """

    mode: str
    kernel: tuple[int, ...]
    stride: tuple[int, ...] | None = dataclasses.field(default=None, kw_only=True)
    padding: Padding = dataclasses.field(default="valid", kw_only=True)
    dilation: tuple[int, ...] = dataclasses.field(default=1, kw_only=True)  # type: ignore[arg-type]
    ceil_mode: bool = dataclasses.field(default=False, kw_only=True)
    divisor: str | int = dataclasses.field(default="exclude_pad", kw_only=True)
    layout: str = dataclasses.field(default="channels_first", kw_only=True)
    p: int | None = dataclasses.field(default=None, kw_only=True)
    zero_window: str = dataclasses.field(default="zero", kw_only=True)
    pad_value: int | None = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        if isinstance(self.mode, str) and self.mode in OPERATORS and self.mode not in POOL_MODES:
            raise SpecError(f"mode={self.mode!r} takes boxes, not a kernel: give its own spec, "
                            f"{OPERATORS[self.mode].spec_name}(output_size, boxes=...)")
        put(self, "mode", _choice("mode", self.mode, POOL_MODES))
        kernel = _rank_of("kernel", self.kernel)
        rank = len(kernel)
        put(self, "kernel", kernel)
        put(self, "stride", kernel if self.stride is None else _ints("stride", self.stride, rank, 1))
        put(self, "dilation", _ints("dilation", self.dilation, rank, 1))
        put(self, "padding", _padding(self.padding, rank))
        if not isinstance(self.ceil_mode, (bool, np.bool_)):
            raise SpecError(f"ceil_mode={self.ceil_mode!r} is not valid: give True or False")
        put(self, "ceil_mode", bool(self.ceil_mode))
        if self.ceil_mode and isinstance(self.padding, str) and self.padding != "valid":
            raise SpecError(
                f"ceil_mode=True has no meaning with padding={self.padding!r} (SAME fixes the output "
                "size at ceil(L/stride)); use ceil_mode=False, or explicit padding"
            )
        divisor: Any = self.divisor
        if _is_int(divisor):
            if divisor < 1:
                raise SpecError(f"divisor={divisor!r} is not valid: an integer divisor must be >= 1")
            _check_size("divisor", divisor, int(divisor))
            divisor = int(divisor)
        else:
            divisor = _choice("divisor", divisor, DIVISOR_RULES)
        op = OPERATORS[self.mode]
        op.check_divisor(self, divisor)
        put(self, "divisor", divisor)
        put(self, "layout", _choice("layout", self.layout, LAYOUTS))
        # p and zero_window: lp pooling's fields (its check_power rule), unset for the others
        op.check_power(self, _choice("zero_window", self.zero_window, ZERO_WINDOW_POLICIES))
        if self.pad_value is not None:
            if isinstance(self.pad_value, bool) or not isinstance(self.pad_value, numbers.Real) or self.pad_value != 0:
                raise SpecError(f"pad_value={self.pad_value!r} is not valid: give None (padding takes no part in "
                                "the max) or 0 (pad cells hold 0 and take part in the max)")
            op.check_pad_value(self)
            put(self, "pad_value", 0)

    def __repr__(self) -> str:
        # p and zero_window appear only for lp pooling, so other specs keep their text
        # (reports and golden-data hashes quote it).
        fields = [f"mode={self.mode!r}", f"kernel={self.kernel!r}", f"stride={self.stride!r}",
                  f"padding={self.padding!r}", f"dilation={self.dilation!r}", f"ceil_mode={self.ceil_mode!r}",
                  f"divisor={self.divisor!r}", f"layout={self.layout!r}"]
        fields += OPERATORS[self.mode].repr_fields(self)
        if self.pad_value is not None:  # likewise pad_value only when set
            fields.append(f"pad_value={self.pad_value!r}")
        return f"Pool({', '.join(fields)})"

    @property
    def rank(self) -> int:
        """Number of spatial dimensions."""
        return len(self.kernel)


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class AdaptivePool:
    """PyTorch adaptive pooling: window i spans [floor(i·L/o), ceil((i+1)·L/o)).

    Args:
      mode: ``"max"`` or ``"avg"`` (the divisor is the window's cell count).
      output_size: an int or one int per spatial dimension (the rank comes from
        here; an int means rank 2, PyTorch's ``adaptive_*_pool2d``). It may exceed the
        input length, as in PyTorch: windows of 1 or 2 cells then overlap (L = 3, o = 5:
        [0, 1), [0, 2), [1, 2), [1, 3), [2, 3)).
      layout: as for :class:`Pool`.
    """

    mode: str
    output_size: tuple[int, ...]
    layout: str = dataclasses.field(default="channels_first", kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "mode", _choice("mode", self.mode, MODES))
        put(self, "output_size", _rank_of("output_size", self.output_size))
        put(self, "layout", _choice("layout", self.layout, LAYOUTS))

    @property
    def rank(self) -> int:
        return len(self.output_size)


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class GlobalPool:
    """Global pooling: one window over all spatial cells of each (N, C) slice.

    Args:
      mode: ``"max"`` or ``"avg"``.
      rank: number of spatial dimensions (1, 2 or 3).
      layout: as for :class:`Pool`.
    """

    mode: str
    rank: int = dataclasses.field(default=2, kw_only=True)
    layout: str = dataclasses.field(default="channels_first", kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _choice("mode", self.mode, MODES))
        if not _is_int(self.rank) or not 1 <= self.rank <= MAX_RANK:
            raise SpecError(f"rank={self.rank!r} is not valid: give 1, 2 or 3")
        object.__setattr__(self, "rank", int(self.rank))
        object.__setattr__(self, "layout", _choice("layout", self.layout, LAYOUTS))


#: Default ``samples`` of :class:`FractionalMaxPool`, per spatial axis: a different u per axis (an
#: implementation that reads the samples in the wrong axis order moves its windows), each exact in
#: float16 (PyTorch computes the window starts in the input's dtype) and, at the coverage plan's
#: lengths, giving both gaps floor(α) and ceil(α) between window starts.
DEFAULT_SAMPLES = (Fraction(1, 4), Fraction(5, 8), Fraction(3, 8))


def _sample(value: Any, where: str) -> Fraction:
    """One sample u in [0, 1), exactly (a float is its exact binary value; text ``"p/q"`` too)."""
    try:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, str)):
            raise ValueError
        if isinstance(value, (str, numbers.Rational)):
            u = Fraction(value)
        else:  # a float of any width (NumPy's too) is its exact binary value
            u = Fraction(*float(value).as_integer_ratio())
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        raise SpecError(f"{where}={value!r} is not valid: give a number u in [0, 1) (a float, a Fraction "
                        "or text 'p/q')") from None
    if not 0 <= u < 1:
        raise SpecError(f"{where}={value!r} is not valid: {u} is outside [0, 1); PyTorch's samples are in [0, 1)")
    return u


def _sequence(value: Any, axis: int) -> tuple[int, ...]:
    where = f"sequences[{axis}]"
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) < 2:
        raise SpecError(f"{where}={value!r} is not valid: give the cumulative pooling sequence, at least two "
                        "integers (TensorFlow's row/col_pooling_sequence: 0, ..., L)")
    for item in value:
        if not _is_int(item):
            raise SpecError(f"{where}={value!r} is not valid: {item!r} is not an integer")
        _check_size(where, value, int(item))
    seq = tuple(int(v) for v in value)
    if seq[0] != 0 or any(b <= a for a, b in zip(seq, seq[1:])):
        raise SpecError(f"{where}={value!r} is not valid: a pooling sequence starts at 0 and strictly increases "
                        "(window i is [seq[i], seq[i+1]), one cell more when overlapping)")
    return seq


@accept_only_fields
@dataclasses.dataclass(frozen=True, slots=True)
class FractionalMaxPool:
    """Fractional max pooling (Graham 2014) with its pseudo-random windows given.

    Two forms, one per framework's way of fixing the windows:

    - PyTorch (``fractional_max_pool2d/3d`` with ``_random_samples``): ``kernel``, ``output_size``
      and ``samples`` (one u in [0, 1) per spatial axis, in axis order D, H, W; PyTorch's
      ``_random_samples[n, c]`` lists them W, H in 2-D and T, H, W in 3-D, and the adapter maps
      them). Along an axis of length L with output size o (o + k - 1 <= L), window i reads the k
      cells from start_i = floor((i + u)·α) - floor(u·α), α = (L - k)/(o - 1), for i < o - 1,
      and the last window starts at L - k (PyTorch's ``generate_intervals``, computed here exactly).
      Windows overlap where α < k and leave cells out where α > k.
    - TensorFlow (``tf.nn.fractional_max_pool``'s row/col pooling sequences): ``sequences``, per
      spatial axis the cumulative sequence 0 = s_0 < s_1 < ... < s_o = L; window i reads
      [s_i, s_{i+1}), or [s_i, s_{i+1}] (clamped to L - 1) when ``overlapping``. The input
      length along the axis must be s_o.

    Windows are the same for every (N, C) plane (TensorFlow's sequences are; PyTorch's samples
    may differ per plane, and the adapter gives every plane the spec's samples). Within a window
    the maximum is the first maximal cell in row-major order; ties and NaN follow max pooling's
    conventions (:class:`symjac.Pool` with ``mode="max"``).

    Args:
      kernel: the window size per spatial axis (PyTorch form; a bare int means 2-D).
      output_size: the output size per spatial axis (PyTorch form).
      samples: per spatial axis u in [0, 1) (PyTorch form); None: :data:`DEFAULT_SAMPLES`.
      sequences: per spatial axis the pooling sequence (TensorFlow form).
      overlapping: TensorFlow's ``overlapping`` (TensorFlow form only).
      layout: as for :class:`Pool`.

    Raises:
      SpecError: a field is invalid, or the two forms are mixed.
    """

    kernel: tuple[int, ...] | None = None
    output_size: tuple[int, ...] | None = None
    samples: tuple[Fraction, ...] | None = dataclasses.field(default=None, kw_only=True)
    sequences: tuple[tuple[int, ...], ...] | None = dataclasses.field(default=None, kw_only=True)
    overlapping: bool = dataclasses.field(default=False, kw_only=True)
    layout: str = dataclasses.field(default="channels_first", kw_only=True)

    def __post_init__(self) -> None:
        put = object.__setattr__
        if not isinstance(self.overlapping, (bool, np.bool_)):
            raise SpecError(f"overlapping={self.overlapping!r} is not valid: give True or False")
        put(self, "overlapping", bool(self.overlapping))
        put(self, "layout", _choice("layout", self.layout, LAYOUTS))
        if self.sequences is not None:
            self._tensorflow_form()
        else:
            self._torch_form()

    def _tensorflow_form(self) -> None:
        if self.kernel is not None or self.output_size is not None or self.samples is not None:
            raise SpecError(f"{self!r}: give either sequences (TensorFlow's form) or kernel, output_size and "
                            "samples (PyTorch's form), not both")
        seqs = self.sequences
        if not isinstance(seqs, Sequence) or isinstance(seqs, str) or not 1 <= len(seqs) <= MAX_RANK:
            raise SpecError(f"sequences={seqs!r} is not valid: give one pooling sequence per spatial axis (1 to "
                            f"{MAX_RANK} of them)")
        object.__setattr__(self, "sequences", tuple(_sequence(s, axis) for axis, s in enumerate(seqs)))

    def _torch_form(self) -> None:
        put = object.__setattr__
        if self.overlapping:
            raise SpecError("overlapping=True is TensorFlow's (with sequences); PyTorch's windows (kernel, "
                            "output_size, samples) overlap wherever α = (L - k)/(o - 1) < k")
        if self.kernel is None or self.output_size is None:
            raise SpecError(f"FractionalMaxPool(kernel={self.kernel!r}, output_size={self.output_size!r}): give "
                            "kernel and output_size (PyTorch's form) or sequences (TensorFlow's form)")
        kernel = _rank_of("kernel", self.kernel)
        put(self, "kernel", kernel)
        put(self, "output_size", _ints("output_size", self.output_size, len(kernel), 1))
        samples: Any = DEFAULT_SAMPLES[: len(kernel)] if self.samples is None else self.samples
        if not isinstance(samples, Sequence) or isinstance(samples, str) or len(samples) != len(kernel):
            raise SpecError(f"samples={self.samples!r} is not valid: give one u in [0, 1) per spatial axis "
                            f"({len(kernel)} of them, in axis order)")
        put(self, "samples", tuple(_sample(u, f"samples[{i}]") for i, u in enumerate(samples)))

    def __repr__(self) -> str:
        if self.sequences is not None:
            fields = [f"sequences={self.sequences!r}", f"overlapping={self.overlapping!r}"]
        else:
            samples = "(" + ", ".join(f"'{u}'" for u in self.samples or ()) + ("," if self.rank == 1 else "") + ")"
            fields = [f"kernel={self.kernel!r}", f"output_size={self.output_size!r}", f"samples={samples}"]
        return f"FractionalMaxPool({', '.join(fields)}, layout={self.layout!r})"

    @property
    def mode(self) -> str:
        """The operator (:mod:`symjac.pool._ops.fractional_max`)."""
        return "fractional_max"

    @property
    def rank(self) -> int:
        return len(self.sequences) if self.sequences is not None else len(self.kernel or ())


PoolSpec = Pool | AdaptivePool | GlobalPool | FractionalMaxPool | RoiAlign | RoiPool
#: The spec classes of operators that give their windows as a table (RoI pooling), beside the kernel ones.
TABLE_SPECS = (RoiAlign, RoiPool)


def check_pool_spec(spec: Any) -> PoolSpec:
    """Return ``spec`` if it is a pooling spec, else raise :class:`SpecError`."""
    if not isinstance(spec, (Pool, AdaptivePool, GlobalPool, FractionalMaxPool, *TABLE_SPECS)):
        raise SpecError(
            f"spec={spec!r} is not a pooling spec: give symjac.Pool, symjac.AdaptivePool, symjac.GlobalPool, "
            "symjac.FractionalMaxPool, symjac.RoiAlign or symjac.RoiPool"
        )
    return spec
