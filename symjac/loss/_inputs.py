"""A loss's inputs read exactly: predictions, labels (one-hot rows from class indices),
the reduction's factors, the template's argument columns, and the default inputs.

What differs per kind (label structure, domain, option values, the mean's weights,
default inputs) is the kind's rule (:mod:`symjac.loss._kinds`), looked up once per call.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray, read_exact
from symjac.loss import _numbers
from symjac.loss._domain import index, value_at
from symjac.loss._kind import Template
from symjac.loss._spec import Loss, check_loss, kind_of


def read_pred(pred: Any) -> ExactArray:
    """The exact predictions, at least 1-D and non-empty."""
    z = read_exact(pred, "pred")
    if not z.shape:
        raise InputError("pred is a scalar; give an array with at least one axis (e.g. [0.0])")
    if z.num.size == 0:
        raise InputError(f"pred has shape {z.shape} with no elements; give at least one")
    return z


def read_labels(loss: Loss, z: ExactArray, label: Any, element_shape: tuple[int, ...],
                 classes: int) -> tuple[ExactArray | None, np.ndarray, np.ndarray | None]:
    """The exact labels in pred's shape (class indices become one-hot rows), per
    element whether it counts (False for rows equal to ``ignore_index``), and for
    ``labels="indices"`` the class index of each row (flat; ignored rows: any)."""
    kind, rules = loss.kind, kind_of(loss)
    counted = np.ones(element_shape, dtype=bool)
    t: ExactArray | None = None
    indices: np.ndarray | None = None
    if not rules.takes_label:
        pass
    elif label is None:
        raise InputError(f"label is None; kind={kind!r} needs a label")
    elif rules.labels_are_indices(loss):
        raw = np.asarray(label)
        if raw.shape != element_shape:
            what = "labels='indices'" if "labels" in rules.options else f"kind={kind!r}"
            raise InputError(
                f"label has shape {raw.shape} but pred has shape {z.shape}: {what} needs one class "
                f"index per row, shape {element_shape}"
            )
        t, counted, indices = _one_hot(loss, read_exact(raw, "label"), element_shape, classes)
    else:
        t = read_exact(label, "label")
        if t.shape == z.shape:
            t = rules.label_rows(loss, t)
        else:
            hint = ""
            if "labels" in rules.options and t.shape == element_shape and t.den == 1:
                hint = (f"; label looks like class indices (integers, one per row): give "
                        f"Loss({kind!r}, labels=\"indices\", ...) for those")
            raise InputError(f"label has shape {t.shape} but pred has shape {z.shape}: kind={kind!r} needs "
                             f"label of pred's shape{hint}")
    return t, counted, indices


def _one_hot(loss: Loss, idx: ExactArray, element_shape: tuple[int, ...],
             classes: int) -> tuple[ExactArray, np.ndarray, np.ndarray]:
    """Class indices (one per row) as one-hot rows, whether each row counts, and the
    indices (flat). The first row (in C order) that is not an integer, or neither
    ``ignore_index`` nor in [0, classes), is named."""
    num = idx.num.reshape(-1)
    if idx.den == 1:
        integral, k = np.ones(num.size, dtype=bool), num
    else:  # some entry is not an integer; which: exact remainders of the numerators
        integral = np.asarray(num.astype(object) % idx.den == 0, dtype=bool)
        k = np.where(integral, num.astype(object) // idx.den, 0)
    ignored = np.zeros(num.size, dtype=bool) if loss.ignore_index is None else \
        np.asarray(integral & (k == loss.ignore_index), dtype=bool)
    outside = np.asarray(integral & ~ignored & ((k < 0) | (k >= classes)), dtype=bool)
    bad = np.flatnonzero(~integral | outside)
    if bad.size:
        i = int(bad[0])
        where = index(element_shape, i)
        if not integral[i]:
            raise InputError(f"label{where} = {float(value_at(idx, i))!r} is not an integer class index")
        ign = "" if loss.ignore_index is None else f" or ignore_index={loss.ignore_index}"
        raise InputError(f"label{where} = {int(k[i])} is out of range: class indices must be in [0, {classes}){ign}")
    k = np.where(ignored, 0, k).astype(np.intp)
    one_hot = np.zeros((num.size, classes), dtype=np.int64)
    one_hot[np.flatnonzero(~ignored), k[~ignored]] = 1
    return ExactArray(one_hot.reshape(element_shape + (classes,)), 1), ~ignored.reshape(element_shape), k


def reduction_factors(loss: Loss, upstream: Any, element_shape: tuple[int, ...], indices: np.ndarray | None,
               counted: np.ndarray, classes: int) -> tuple[np.ndarray, Fraction, int]:
    """Per element the exact reduction factor r_i (0 for ignored rows), the denominator
    D and the roundings an implementation needs to form D."""
    factor = np.empty(element_shape, dtype=object)
    if loss.reduction == "none":
        u = np.full(element_shape, Fraction(1), dtype=object) if upstream is None else \
            read_exact(upstream, "upstream").to_fractions()  # the factors r_i (Fractions: see factor_numbers)
        if u.shape != element_shape:
            raise InputError(
                f"upstream has shape {u.shape}; reduction='none' needs one upstream gradient per loss element, "
                f"shape {element_shape}"
            )
        factor[...] = u
        den, denominator_ops = Fraction(1), 0
    else:
        r, den, denominator_ops = reduced_factor(loss, upstream, element_shape, indices, counted, classes)
        factor[...] = r
    factor[~counted] = Fraction(0)
    return factor, den, denominator_ops


def reduced_factor(loss: Loss, upstream: Any, element_shape: tuple[int, ...], indices: np.ndarray | None,
                   counted: np.ndarray, classes: int) -> tuple[Fraction, Fraction, int]:
    """A reduced loss's factor ``r`` of every counted element (the scalar upstream over
    D), D, and the roundings an implementation needs to form D (:func:`reduction_factors`
    without the per-element array)."""
    n_el = int(np.prod(element_shape)) if element_shape else 1
    denominator_ops = 0
    scalar = Fraction(1)
    if upstream is not None:
        ua = read_exact(upstream, "upstream")
        if ua.num.size != 1:
            raise InputError(
                f"upstream has shape {ua.shape}; reduction={loss.reduction!r} gives one number, so the upstream "
                "gradient is one number (or None)"
            )
        scalar = value_at(ua, 0)
    if loss.reduction == "sum":
        den = Fraction(1)
    elif loss.reduction == "batch_mean":
        den = Fraction(element_shape[0] if element_shape else 1)
    elif (w := kind_of(loss).mean_weights(loss, classes)) is not None:
        assert indices is not None
        per_class = np.bincount(indices[counted.reshape(-1)], minlength=classes)  # labelled rows per class
        den = sum((w[c] * int(per_class[c]) for c in range(classes)), Fraction(0))  # Σ over rows of w[label]
        n_counted = int(counted.sum())
        if n_counted == 0:
            raise InputError(
                f"ignore_index={loss.ignore_index} matches every row of label: reduction='mean' would divide by "
                "zero (PyTorch returns NaN); use reduction='sum' or keep at least one row"
            )
        if den == 0:
            raise InputError(
                f"weight={tuple(map(float, w))} gives the labelled rows a total weight of 0: reduction='mean' "
                "would divide by zero"
            )
        if loss.weight is not None:
            denominator_ops = n_counted  # n - 1 additions + the weights' own rounding
    else:
        den = Fraction(n_el)
    return scalar / den, den, denominator_ops


def numbers_of(raw: Any, exact: ExactArray) -> np.ndarray:
    """An input as MPFR numbers: from the float array it came as (exact, and fast), else
    from its exact value (a rational that is no binary fraction rounds once)."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "f" and raw.shape == exact.shape:
        return _numbers.from_floats(raw)
    return _numbers.from_exact(exact.num, exact.den)


def columns(tpl: Template, class_axis: bool, z: np.ndarray, t: np.ndarray | None,
            params_per_class: list[list[Fraction]], element_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The template's arguments (pred, label, options) as columns over the flattened
    elements: one object array of MPFR numbers per template symbol (``class_axis``: one
    column per class of each row, else one per element)."""
    n = int(np.prod(element_shape)) if element_shape else 1
    if class_axis:
        rows_z = z.reshape(n, tpl.classes)
        cols = [rows_z[:, c] for c in range(tpl.classes)]
        if t is not None:
            rows_t = t.reshape(n, tpl.classes)
            cols += [rows_t[:, c] for c in range(tpl.classes)]
        per_element = np.zeros(n, dtype=np.intp)
    else:
        cols = [z.reshape(-1)] + ([] if t is None else [t.reshape(-1)])
        last = z.shape[-1] if z.ndim else 1
        per_element = np.arange(n) % last if len(params_per_class) > 1 else np.zeros(n, dtype=np.intp)
    table = np.empty((len(params_per_class), len(params_per_class[0])), dtype=object)
    for i, row in enumerate(params_per_class):
        table[i, :] = [_numbers.number(v) for v in row]
    return cols + [table[per_element, p] for p in range(table.shape[1])]


def complete_inputs(loss: Loss, pred: Any, label: Any, upstream: Any) -> tuple[Any, Any, Any]:
    """Fill what the caller left out: :func:`default_inputs` when ``pred`` is None, and
    for ``reduction="none"`` a varied upstream gradient (so an ignored upstream shows).

    Raises:
      InputError: a label without a prediction.
    """
    if pred is None:
        if label is not None:
            raise InputError("label is given without pred; give both (or neither, for the default inputs)")
        pred, label, default_up = _default_inputs(loss)
        return pred, label, default_up if upstream is None else upstream
    if loss.reduction == "none" and upstream is None:
        shape = kind_of(loss).element_shape(np.shape(pred))
        upstream = np.resize(np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75]), shape)
    return pred, label, upstream


def default_inputs(loss: Loss) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Small deterministic inputs in the loss's domain: ``(pred, label, upstream)``.

    Every value is a short dyadic fraction, exact in float16/32/64, so the exact
    analysis and the implementation see the same numbers in every dtype; no element
    sits on a kink, wherever the spec's options put one; huber/smooth_l1 get both branches (their inputs
    scale with δ: :meth:`symjac.loss._kinds.regression._Delta.default_inputs`). ``upstream`` is set
    (and varied, so an ignored upstream shows) only for ``reduction="none"``.
    """
    check_loss(loss)
    return _default_inputs(loss)


def _default_inputs(loss: Loss) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    return completed(loss, *kind_of(loss).default_inputs(loss))


def completed(loss: Loss, pred: np.ndarray, label: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None,
                                                                               np.ndarray | None]:
    """A kind's own inputs (its default or a family's, 3 wide) as :func:`default_inputs` gives
    them: an element-wise kind's rows repeated to :meth:`~symjac.loss._kind.LossKind.default_classes`
    (a per-class option's width), and for ``reduction="none"`` a varied upstream gradient."""
    kind = kind_of(loss)
    classes = kind.default_classes(loss)
    if not kind.class_axis and pred.shape[-1] != classes:  # a per-class option's width: repeat the rows
        pred = np.array([np.resize(row, classes) for row in pred])
        label = None if label is None else np.array([np.resize(row, classes) for row in label])
    upstream = None
    if loss.reduction == "none":
        shape = kind.element_shape(pred.shape)
        cycle = np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75])
        upstream = np.resize(cycle, shape)
    return pred, label, upstream
