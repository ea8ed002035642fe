"""The loss verifier's call arguments: the inputs completed and rounded to the dtype, and fresh copies per call."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import round_fractions, to_fraction
from symjac.check._rounding import is_float
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import complete_inputs
from symjac.loss._spec import Loss, kind_of


def prepare_inputs(
    loss: Loss, pred: Any, label: Any, upstream: Any, dt: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, bool]:
    pred, label, upstream = complete_inputs(loss, pred, label, upstream)
    if upstream is not None and loss.reduction != "none":
        raise InputError(
            f"upstream is given but reduction={loss.reduction!r}: the derivative of a reduced loss takes no "
            "upstream gradient (use reduction='none' for a VJP)"
        )
    rounded = False

    def cast(name: str, a: Any) -> np.ndarray:
        nonlocal rounded
        src = np.asarray(a)
        real_float = src.dtype.kind == "f" or is_float(src.dtype)  # bfloat16 (ml_dtypes) has kind "V"
        if src.dtype.kind not in "iub" and src.dtype != object and not real_float:
            raise InputError(f"{name} has dtype {src.dtype}; give real numbers")
        if src.dtype == object:  # exact numbers (Fractions from spec files): rounded once, each checked
            exact = np.array([to_fraction(v, name) for v in src.reshape(-1)], dtype=object)
            out = round_fractions(exact, dt).reshape(src.shape)
            rounded = rounded or any(Fraction(float(o)) != e for o, e in zip(out.reshape(-1), exact))
            return out
        try:
            out = src.astype(dt, copy=False)  # read only: every call gets its own copy (_ArgFactory)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name} could not be converted to {dt.name}: {exc}") from None
        with np.errstate(invalid="ignore"):
            if real_float and not np.array_equal(out.astype(np.float64), src.astype(np.float64), equal_nan=True):
                rounded = True
        return out

    p = cast("pred", pred)
    lab: np.ndarray | None
    if label is None:
        lab = None
    elif kind_of(loss).labels_are_indices(loss) or kind_of(loss).integer_labels:
        raw = np.asarray(label)
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
                bad = int(np.flatnonzero(~(np.isfinite(raw) & (raw == np.round(raw))).reshape(-1))[0])
                raise InputError(
                    f"label{_index(raw.shape, bad)} = {raw.reshape(-1)[bad]!r} is not an integer class index"
                )
        elif raw.dtype.kind not in "iu":
            raise InputError(f"label has dtype {raw.dtype}; kind={loss.kind!r} takes integer class indices")
        lab = raw.astype(np.int64)
    else:
        lab = cast("label", label)
    up = None if upstream is None else cast("upstream", upstream)
    return p, lab, up, rounded




class _ArgFactory:
    """Fresh copies of the call arguments, in the order the callables take them."""

    def __init__(self, loss: Loss, pred: np.ndarray, label: np.ndarray | None, upstream: np.ndarray | None):
        self.pred, self.label, self.upstream = pred, label, upstream
        self.with_upstream = loss.reduction == "none"
        self.names = ("pred", "label", "upstream") if self.with_upstream else ("pred", "label")

    def originals(self) -> tuple[np.ndarray | None, ...]:
        return (self.pred, self.label, self.upstream) if self.with_upstream else (self.pred, self.label)

    def names_originals(self) -> tuple[Any, ...]:
        """What :meth:`fresh` copies, in the order of :attr:`names` (a guard's ``reference=``)."""
        return (self.pred, self.label, self.upstream)[:len(self.names)]

    def fresh(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        p = (self.pred if pred is None else pred).copy()
        lab = None if self.label is None else self.label.copy()
        if self.with_upstream:
            assert self.upstream is not None
            return (p, lab, self.upstream.copy())
        return (p, lab)

    def forward_args(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        return self.fresh(pred)[:2]

