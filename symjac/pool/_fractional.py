"""The windows of fractional max pooling along one axis (:class:`symjac.FractionalMaxPool`):
PyTorch's sampled starts and TensorFlow's pooling sequences, exactly; :mod:`symjac.pool._geometry`
builds a spec's axes from :func:`axis_fractional`."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from symjac._errors import SpecError
from symjac.pool._spec import FractionalMaxPool


def fractional_starts(length: int, k: int, out: int, u: Fraction) -> np.ndarray:
    """PyTorch's ``generate_intervals``, exactly: window i of an axis of length L, kernel k and output
    size o starts at floor((i + u)·α) - floor(u·α), α = (L - k)/(o - 1), for i < o - 1; the last
    window starts at L - k."""
    starts = np.full(out, length - k, dtype=np.int64)
    if out > 1:
        alpha = Fraction(length - k, out - 1)
        base = math.floor(u * alpha)
        starts[:-1] = [math.floor((i + u) * alpha) - base for i in range(out - 1)]
    return starts


def axis_fractional(spec: FractionalMaxPool, axis: int, length: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One axis of fractional max pooling: PyTorch's windows (k cells from each sampled start) or
    TensorFlow's (pooling sequence s: [s_i, s_{i+1}), to s_{i+1} included when overlapping): each
    window's start and size along the axis (``name`` in messages)."""
    if spec.sequences is not None:
        seq = np.asarray(spec.sequences[axis], dtype=np.int64)
        if int(seq[-1]) != length:
            raise SpecError(f"{spec!r}: along axis {axis} ({name}) the pooling sequence ends at {int(seq[-1])} "
                            f"but the input length is {length}; valid: an input length equal to the sequence's last "
                            "entry")
        starts = seq[:-1]
        sizes = np.minimum(seq[1:] + int(spec.overlapping), length) - starts
    else:
        assert spec.kernel is not None and spec.output_size is not None and spec.samples is not None
        k, out = spec.kernel[axis], spec.output_size[axis]
        if out + k - 1 > length:
            raise SpecError(f"{spec!r}: along axis {axis} ({name}) output size {out} with kernel {k} needs an input "
                            f"length of at least o + k - 1 = {out + k - 1} (PyTorch's rule), got {length}")
        starts = fractional_starts(length, k, out, spec.samples[axis])
        sizes = np.full(out, k, dtype=np.int64)
    return starts, sizes
