"""Reading ctc's inputs (:mod:`symjac.loss._kinds.ctc`): the log-probabilities or logits ``(T, N, C)`` and
the label ``(targets, input_lengths, target_lengths)`` in PyTorch's two target forms, each named where
it is wrong."""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import read_exact

#: |log-probability| beyond which the exact recursion would leave MPFR's exponent range over a long input.
LIMIT = 2**20


def read_label(label: Any, batch: int, frames: int, classes: int,
               blank: int) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...], tuple[int, ...]]:
    """``(targets, input_lengths, target_lengths)``: targets ``(N, S)`` padded or 1-D concatenated
    (PyTorch's two forms), lengths one per item; each named where it is wrong."""
    if not isinstance(label, (tuple, list)) or len(label) != 3:
        raise InputError(f"label={_short(label)} is not valid for kind='ctc': give (targets, input_lengths, "
                         "target_lengths), targets (N, S) padded or 1-D concatenated, the lengths one per item")
    targets, inputs, lengths = (_integers(name, v) for name, v in
                                zip(("targets", "input_lengths", "target_lengths"), label))
    for name, v in (("input_lengths", inputs), ("target_lengths", lengths)):
        if v.shape != (batch,):
            raise InputError(f"{name} has shape {v.shape}; give one length per batch item, shape ({batch},)")
        if (v < 0).any():
            raise InputError(f"{name}[{int(np.flatnonzero(v < 0)[0])}] = {int(v[v < 0][0])} < 0: lengths are >= 0")
    if (inputs > frames).any():
        i = int(np.flatnonzero(inputs > frames)[0])
        raise InputError(f"input_lengths[{i}] = {int(inputs[i])} > T = {frames} (log_probs has shape (T, N, C))")
    rows = _rows(targets, lengths, batch)
    for b, row in enumerate(rows):
        for j, c in enumerate(row):
            if c == blank or not 0 <= c < classes:
                raise InputError(f"the target of item {b} holds {c} at position {j}: a target label is a class "
                                 f"in [0, {classes}) other than blank={blank}")
    return rows, tuple(int(v) for v in inputs), tuple(int(v) for v in lengths)


def _integers(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} has dtype {arr.dtype}; give integers")
    return arr.astype(np.int64)


def _rows(targets: np.ndarray, lengths: np.ndarray, batch: int) -> tuple[tuple[int, ...], ...]:
    if targets.ndim == 2:
        if targets.shape[0] != batch:
            raise InputError(f"targets has shape {targets.shape}; padded targets are (N, S) with N = {batch}")
        if (lengths > targets.shape[1]).any():
            b = int(np.flatnonzero(lengths > targets.shape[1])[0])
            raise InputError(f"target_lengths[{b}] = {int(lengths[b])} > S = {targets.shape[1]}, the padded "
                             "targets' width")
        return tuple(tuple(int(c) for c in targets[b, :int(lengths[b])]) for b in range(batch))
    if targets.ndim == 1:
        if int(lengths.sum()) != targets.size:
            raise InputError(f"targets is 1-D with {targets.size} labels but target_lengths sum to "
                             f"{int(lengths.sum())}: concatenated targets hold exactly the targets")
        ends = np.cumsum(lengths)
        return tuple(tuple(int(c) for c in targets[e - n:e]) for n, e in zip(lengths, ends))
    raise InputError(f"targets has shape {targets.shape}; give (N, S) padded or 1-D concatenated targets")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def read_log_probs(pred: Any) -> np.ndarray:
    """log_probs ``(T, N, C)`` as float64 values that are exactly the input's, finite, within :data:`LIMIT`."""
    z = read_exact(pred, "pred")
    if len(z.shape) != 3 or 0 in z.shape:
        raise InputError(f"pred has shape {z.shape}; kind='ctc' takes log_probs of shape (T, N, C), each >= 1")
    values = np.asarray(pred, dtype=np.float64) if not isinstance(pred, np.ndarray) or pred.dtype.kind != "f" \
        else pred.astype(np.float64)
    if not np.array_equal(read_exact(values, "pred").to_fractions(), z.to_fractions()):
        raise InputError("pred holds a number that is no float64 (a rational such as 1/3): give binary floats")
    if np.abs(values).max() > LIMIT:
        j = int(np.argmax(np.abs(values)))
        raise InputError(f"pred{list(np.unravel_index(j, values.shape))} = {values.reshape(-1)[j]!r}: kind='ctc' "
                         f"takes log-probabilities of magnitude at most 2^20")
    return values
