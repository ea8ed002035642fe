"""Losses: a validated spec, exact SymPy expressions and derivatives, mpmath values.

A :class:`Loss` says *which* loss is meant (kind, reduction, loss scale S, options).
For every element-wise kind SymPy builds the per-element loss ``ℓ`` once over symbols
for the prediction, the label and the options, and differentiates it with
:func:`sympy.diff`; nothing is differentiated by hand. ``softmax_ce`` is evaluated
class-generically (:mod:`symjac.loss._softmax`): per class, short forms in the class's
own numbers and per-row sums, which SymPy proves are ℓ's derivatives for every number
of classes at once, so no SymPy work grows with C. The expressions are lowered
with :func:`sympy.lambdify` to MPFR (:mod:`symjac.loss._numbers`: every element of
the input at once, each operation correctly rounded to 200 bits) and
evaluated at ``DPS`` = 60 significant digits on the exact rational values of the inputs
(:class:`symjac.exact.ExactArray`); elements with an input beyond 2^24 in magnitude
(beyond MPFR's exponent range once exponentiated) go through mpmath, element by
element. The reduction is exact (rational factors).

Values returned by :func:`loss_value`, :func:`loss_derivative` and
:func:`loss_derivative_set` are ``mpmath.mpf`` numbers (a scalar, or an ``object``
ndarray of them) carrying at least ``DPS`` digits; ``float(v)`` or
:func:`to_numpy` rounds them to a dtype.

The loss-scale contract: the derivative a layer emits is ``d(S·L)/dpred = S·dL/dpred``.

Example (seed 003, S = 8, sigmoid cross-entropy, logit 0, label 1)::

    >>> import symjac
    >>> loss = symjac.Loss("sigmoid_ce", scale=8)
    >>> [float(v) for v in symjac.loss_derivative(loss, [0.0], [1.0])]
    [-4.0]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._errors import InputError, SpecError
from symjac._exact import ExactArray

from symjac.loss import _numbers
from symjac.loss._spec import DPS, Loss, check_loss
from symjac.loss._templates import Template, loss_template

# -------------------------------------------------------------------- evaluation


def _index(shape: tuple[int, ...], flat: int) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _exact(data: Any, name: str) -> ExactArray:
    """An input as integer numerators over one common denominator: the domain checks
    below compare numerators with the denominator, so no element becomes a Fraction."""
    if isinstance(data, np.ndarray) and data.dtype.kind == "c" or np.iscomplexobj(data):
        raise InputError(f"{name} is complex; give real numbers")
    try:
        return ExactArray.from_any(data, name)
    except InputError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} could not be read as an array of numbers: {exc}") from None


@dataclasses.dataclass(frozen=True, eq=False)
class LossEvaluation:
    """Everything exact about one loss at one input, at :data:`DPS`-digit precision.

    Values are MPFR numbers (:mod:`symjac.loss._numbers`) in ``object`` arrays; the
    public functions below hand them out as mpmath numbers.

    Shapes: ``pred_shape``; the element shape is ``pred_shape`` (element-wise kinds)
    or ``pred_shape[:-1]`` (``softmax_ce``: one element per row).

    Attributes:
      loss: the spec.
      template: the SymPy template used.
      pred: exact prediction (an :class:`ExactArray`: integer numerators over one denominator).
      columns: the template's arguments (MPFR numbers, exact for binary floats), one
        array per template symbol over the flattened elements (see :func:`element_values`).
      counted: per element, False for rows equal to ``ignore_index``.
      elements: ``ℓ_i`` (0 for ignored rows).
      element_cond: ``Σ_m |∂ℓ_i/∂x_m|·|x_m|`` (None unless ``bounds``).
      element_run: :func:`running_error` of ``ℓ_i`` in units of u (None unless ``bounds``).
      h: per prediction entry, the unreduced unscaled ``dℓ_i/dz_j``.
      h_cond: ``Σ_m |∂h_j/∂x_m|·|x_m|`` (None unless ``bounds``).
      h_run: :func:`running_error` of ``h_j`` in units of u (None unless ``bounds``).
      h_lo / h_hi: the Clarke set of ``dℓ_i/dz_j`` (equal to ``h`` where smooth).
      factor: per element, the exact reduction factor ``r_i`` (1/D, 1/B, 1, or the
        upstream ``u_i`` for ``"none"``; 0 for ignored rows).
      denominator: D (or B, or 1).
      denominator_ops: roundings an implementation needs to form D in floats
        (0 if D is an integer count, else the terms of the weight sum).
      dps: digits used.
    """

    loss: Loss
    template: Template
    pred: ExactArray
    columns: list[np.ndarray]
    counted: np.ndarray
    elements: np.ndarray
    element_cond: np.ndarray | None
    element_run: np.ndarray | None
    h: np.ndarray
    h_cond: np.ndarray | None
    h_run: np.ndarray | None
    h_lo: np.ndarray
    h_hi: np.ndarray
    factor: np.ndarray
    denominator: Fraction
    denominator_ops: int
    dps: int

    @property
    def pred_shape(self) -> tuple[int, ...]:
        return tuple(self.pred.shape)

    @property
    def element_shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)

    def expand(self, per_element: np.ndarray) -> np.ndarray:
        """Broadcast a per-element array to pred's shape (repeat over the class axis)."""
        if self.loss.kind != "softmax_ce":
            return per_element
        return np.repeat(per_element[..., None], self.template.classes, axis=-1)

    def value(self) -> Any:
        """``L``: one number for reduced losses, an object array of ``ℓ_i`` for ``"none"``."""
        if self.loss.reduction == "none":
            return self.elements.copy()
        with _numbers.context():
            return _numbers.total(self.elements.reshape(-1)) / _numbers.number(self.denominator)

    def derivative(self, scale: Fraction | None = None) -> np.ndarray:
        """``S·r_i·dℓ_i/dz_j`` in pred's shape (S = the spec's scale unless given)."""
        s = self.loss.scale if scale is None else scale
        return self._scaled(self.h, s)

    def derivative_set(self, scale: Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The Clarke set of the scaled derivative, elementwise ``[lo, hi]``."""
        s = self.loss.scale if scale is None else scale
        if self.smooth:
            d = self._scaled(self.h, s)
            return d, d
        a, b = self._scaled(self.h_lo, s), self._scaled(self.h_hi, s)
        return np.minimum(a, b), np.maximum(a, b)

    @functools.cached_property
    def smooth(self) -> bool:
        """No entry at a kink: the Clarke set is the derivative everywhere."""
        return bool(np.all(self.h_lo == self.h) and np.all(self.h_hi == self.h))

    @functools.cached_property
    def factor_numbers(self) -> np.ndarray:
        """:attr:`factor` as MPFR numbers, in pred's shape (repeated over softmax_ce's classes)."""
        with _numbers.context():
            return _numbers.from_fractions(self.expand(self.factor))

    def _scaled(self, h: np.ndarray, s: Fraction) -> np.ndarray:
        with _numbers.context():
            return np.asarray(self.factor_numbers * _numbers.number(s) * h, dtype=object)


def _per_class(name: str, values: tuple[Fraction, ...] | None, classes: int, default: Fraction) -> list[Fraction]:
    if values is None:
        return [default] * classes
    if len(values) == 1:
        return list(values) * classes
    if len(values) != classes:
        raise SpecError(
            f"{name} has {len(values)} entries but pred has {classes} classes along its last axis: "
            f"give one number or {classes}"
        )
    return list(values)


def _value_at(values: ExactArray, flat: int) -> Fraction:
    """One element of an exact array as a Fraction (for a message)."""
    return Fraction(int(values.num.reshape(-1)[flat]), values.den)


def _check_range(name: str, values: ExactArray, ok: Callable[[np.ndarray, int], Any], what: str, why: str) -> None:
    """Raise naming the first element (in C order) outside the domain: ``ok(num, den)`` says,
    elementwise, whether ``num/den`` is inside (``den > 0``, so ``0 <= v <= 1`` is
    ``0 <= num <= den``: exact integer comparisons, vectorised)."""
    inside = np.asarray(ok(values.num, values.den), dtype=bool).reshape(-1)
    if not inside.all():
        i = int(np.flatnonzero(~inside)[0])
        where = _index(values.shape, i)
        raise InputError(f"{name}{where} = {float(_value_at(values, i))!r} is outside {what}: {why}")


def evaluate(
    loss: Loss,
    pred: Any,
    label: Any = None,
    upstream: Any = None,
    *,
    values: bool = True,
    derivatives: bool = True,
    bounds: bool = False,
) -> LossEvaluation:
    """Validate the inputs and evaluate the loss exactly (mpmath, >= DPS digits).

    Args:
      loss: the spec.
      pred: predictions (logits, probabilities, ... per kind), at least 1-D.
      label: labels (see :class:`Loss`); ignored (may be None) for ``constant_derivative``.
      upstream: ``"none"``: the per-element upstream gradient (default all ones);
        other reductions: None or one number multiplying the derivative.
      values / derivatives / bounds: what to compute (bounds: the condition sums
        the verifier's error bounds need).

    Raises:
      SpecError: the spec does not fit the input (e.g. weight length vs classes).
      InputError: an input is malformed or outside the loss's domain; the message
        names the argument and the first offending index.
    """
    check_loss(loss)
    z = _read_pred(pred)
    kind = loss.kind
    classes = int(z.shape[-1]) if kind == "softmax_ce" else 1
    tpl = loss_template(loss, classes)
    element_shape = tuple(z.shape[:-1]) if kind == "softmax_ce" else tuple(z.shape)
    t, counted, indices = _read_labels(loss, z, label, element_shape, classes)
    _check_domains(loss, z, t)
    params = _class_params(loss, z, classes)
    factor, den, denominator_ops = _reduction(loss, upstream, element_shape, indices, counted, classes)
    with _numbers.context():
        cols = _columns(tpl, _numbers_of(pred, z), None if t is None else _numbers_of(label, t), params, element_shape)
    fields = _evaluate_elements(tpl, cols, counted, tuple(z.shape), values, derivatives, bounds)
    return LossEvaluation(loss=loss, template=tpl, pred=z, columns=cols, counted=counted, factor=factor,
                          denominator=den, denominator_ops=denominator_ops, dps=DPS, **fields)


def _read_pred(pred: Any) -> ExactArray:
    """The exact predictions, at least 1-D and non-empty."""
    z = _exact(pred, "pred")
    if not z.shape:
        raise InputError("pred is a scalar; give an array with at least one axis (e.g. [0.0])")
    if z.num.size == 0:
        raise InputError(f"pred has shape {z.shape} with no elements; give at least one")
    return z


def _read_labels(loss: Loss, z: ExactArray, label: Any, element_shape: tuple[int, ...],
                 classes: int) -> tuple[ExactArray | None, np.ndarray, np.ndarray | None]:
    """The exact labels in pred's shape (class indices become one-hot rows), per
    element whether it counts (False for rows equal to ``ignore_index``), and for
    ``labels="indices"`` the class index of each row (flat; ignored rows: any)."""
    kind = loss.kind
    counted = np.ones(element_shape, dtype=bool)
    t: ExactArray | None = None
    indices: np.ndarray | None = None
    if kind == "constant_derivative":
        pass
    elif label is None:
        raise InputError(f"label is None; kind={kind!r} needs a label")
    elif kind == "softmax_ce" and loss.labels == "indices":
        raw = np.asarray(label)
        if raw.shape != element_shape:
            raise InputError(
                f"label has shape {raw.shape} but pred has shape {z.shape}: labels='indices' needs one class "
                f"index per row, shape {element_shape}"
            )
        t, counted, indices = _one_hot(loss, _exact(raw, "label"), element_shape, classes)
    else:
        t = _exact(label, "label")
        if t.shape != z.shape:
            raise InputError(f"label has shape {t.shape} but pred has shape {z.shape}: kind={kind!r} needs "
                             f"label of pred's shape")
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
        where = _index(element_shape, i)
        if not integral[i]:
            raise InputError(f"label{where} = {float(_value_at(idx, i))!r} is not an integer class index")
        ign = "" if loss.ignore_index is None else f" or ignore_index={loss.ignore_index}"
        raise InputError(f"label{where} = {int(k[i])} is out of range: class indices must be in [0, {classes}){ign}")
    k = np.where(ignored, 0, k).astype(np.intp)
    one_hot = np.zeros((num.size, classes), dtype=np.int64)
    one_hot[np.flatnonzero(~ignored), k[~ignored]] = 1
    return ExactArray(one_hot.reshape(element_shape + (classes,)), 1), ~ignored.reshape(element_shape), k


def _check_domains(loss: Loss, z: ExactArray, t: ExactArray | None) -> None:
    """Exact comparisons on the rational inputs: each kind's domain for pred and label
    (on the numerators: v = num/den with den > 0)."""
    kind = loss.kind
    unit = "[0, 1]"
    if kind in ("sigmoid_ce", "bce") or (kind == "softmax_ce" and loss.labels == "probabilities") or (
        kind == "kld" and not loss.log_target
    ):
        assert t is not None
        _check_range("label", t, lambda n, d: (n >= 0) & (n <= d), unit, f"kind={kind!r} takes probability labels")
    if kind == "kld" and loss.log_target:
        assert t is not None
        _check_range("label", t, lambda n, d: n <= 0, "(-inf, 0]", "with log_target=True the label is log P, P <= 1")
    if kind == "bce":
        _check_range("pred", z, lambda n, d: (n > 0) & (n < d), "(0, 1)",
                     "bce takes probabilities, and its derivative (p - y)/(p(1 - p)) is infinite at 0 and 1")
    if kind == "kld" and not loss.log_input:
        _check_range("pred", z, lambda n, d: (n > 0) & (n <= d), "(0, 1]",
                     "kld takes the probability Q (log Q and -P/Q need Q > 0); use log_input=True for log Q")


def _class_params(loss: Loss, z: ExactArray, classes: int) -> list[list[Fraction]]:
    """The template's option values (weights, pos_weight, ε, δ), per class along pred's last axis."""
    kind = loss.kind
    params_per_class: list[list[Fraction]]
    if kind == "softmax_ce":
        params_per_class = [_per_class("weight", loss.weight, classes, Fraction(1)) + [loss.label_smoothing or Fraction(0)]]
    elif kind in ("smooth_l1", "huber"):
        assert loss.delta is not None
        params_per_class = [[loss.delta]]
    elif kind in ("sigmoid_ce", "bce"):
        c_last = int(z.shape[-1])
        w = _per_class("weight", loss.weight, c_last, Fraction(1))
        if kind == "bce":
            params_per_class = [[wc] for wc in w]
        else:
            pw = _per_class("pos_weight", loss.pos_weight, c_last, Fraction(1))
            params_per_class = [[wc, pc] for wc, pc in zip(w, pw)]
    else:
        params_per_class = [[]]
    return params_per_class


def _reduction(loss: Loss, upstream: Any, element_shape: tuple[int, ...], indices: np.ndarray | None,
               counted: np.ndarray, classes: int) -> tuple[np.ndarray, Fraction, int]:
    """Per element the exact reduction factor r_i (0 for ignored rows), the denominator
    D and the roundings an implementation needs to form D."""
    kind = loss.kind
    n_el = int(np.prod(element_shape)) if element_shape else 1
    factor = np.empty(element_shape, dtype=object)
    denominator_ops = 0
    if loss.reduction == "none":
        u = np.full(element_shape, Fraction(1), dtype=object) if upstream is None else \
            _exact(upstream, "upstream").to_fractions()  # the factors r_i (Fractions: see factor_numbers)
        if u.shape != element_shape:
            raise InputError(
                f"upstream has shape {u.shape}; reduction='none' needs one upstream gradient per loss element, "
                f"shape {element_shape}"
            )
        factor[...] = u
        den = Fraction(1)
    else:
        scalar = Fraction(1)
        if upstream is not None:
            ua = _exact(upstream, "upstream")
            if ua.num.size != 1:
                raise InputError(
                    f"upstream has shape {ua.shape}; reduction={loss.reduction!r} gives one number, so the upstream "
                    "gradient is one number (or None)"
                )
            scalar = _value_at(ua, 0)
        if loss.reduction == "sum":
            den = Fraction(1)
        elif loss.reduction == "batch_mean":
            den = Fraction(element_shape[0] if element_shape else 1)
        elif kind == "softmax_ce" and loss.labels == "indices":
            w = _per_class("weight", loss.weight, classes, Fraction(1))
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
        factor[...] = scalar / den
    factor[~counted] = Fraction(0)
    return factor, den, denominator_ops


def _numbers_of(raw: Any, exact: ExactArray) -> np.ndarray:
    """An input as MPFR numbers: from the float array it came as (exact, and fast), else
    from its exact value (a rational that is no binary fraction rounds once)."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind == "f" and raw.shape == exact.shape:
        return _numbers.from_floats(raw)
    return _numbers.from_exact(exact.num, exact.den)


def _columns(tpl: Template, z: np.ndarray, t: np.ndarray | None, params_per_class: list[list[Fraction]],
             element_shape: tuple[int, ...]) -> list[np.ndarray]:
    """The template's arguments (pred, label, options) as columns over the flattened
    elements: one object array of MPFR numbers per template symbol."""
    n = int(np.prod(element_shape)) if element_shape else 1
    if tpl.kind == "softmax_ce":
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


_FIELDS = ("elements", "element_cond", "element_run", "h", "h_lo", "h_hi", "h_cond", "h_run")


def element_values(tpl: Template, cols: list[np.ndarray], *, values: bool = True, derivatives: bool = True,
                   bounds: bool = False, bounds_of: tuple[str, ...] = ("loss", "derivative")) -> dict[str, np.ndarray]:
    """The template at a batch of elements (MPFR columns, see :func:`_columns`), as MPFR
    numbers: per element ``elements`` (ℓ; ``values``), ``element_cond``, ``element_run``
    (``bounds``); per element and class (shape (n, classes)) ``h``, ``h_lo``, ``h_hi``
    (``derivatives``), ``h_cond``, ``h_run`` (``bounds``; ``bounds_of`` says whether of
    the loss, the derivative or both). What was not asked is 0. Elements with an input beyond ``_numbers.LIMIT`` (and any the
    MPFR range cannot hold) go through mpmath one by one (:func:`_element`)."""
    n = len(cols[0])
    out = {name: _numbers.zeros((n,) if name.startswith("element") else (n, tpl.classes)) for name in _FIELDS}
    with _numbers.context():
        big = np.zeros(n, dtype=bool)
        limit = _numbers.number(_numbers.LIMIT)  # exact (a power of two); MPFR compares MPFR 3x as fast as a Fraction
        for c in cols:
            big |= np.asarray(np.abs(c) > limit, dtype=bool)
        small = np.flatnonzero(~big)
        if small.size:
            got = _vectorised(tpl, [c[small] for c in cols], values, derivatives,
                              bounds_of if bounds else ())
            for name, arr in got.items():
                out[name][small] = arr
            overflow = ~np.all([_numbers.finite(arr.reshape(small.size, -1)).all(axis=1) for arr in got.values()],
                               axis=0)
            big[small[overflow]] = True
        for i in np.flatnonzero(big):
            with mpmath.workdps(DPS):
                value, entries = _element(tpl, tuple(_numbers.to_mpf(c[i]) for c in cols), values, derivatives,
                                          bounds)
            for name, v in zip(_FIELDS[:3], value):
                out[name][i] = _numbers.from_mpf(v if v is not None else mpmath.mpf(0))
            for k, name in enumerate(_FIELDS[3:]):
                out[name][i] = [_numbers.from_mpf(e[k] if e[k] is not None else mpmath.mpf(0)) for e in entries]
    return out


def _vectorised(tpl: Template, cols: list[np.ndarray], values: bool, derivatives: bool,
                bounds: tuple[str, ...]) -> dict[str, np.ndarray]:
    """:func:`element_values` for elements MPFR can hold, each function once over all of them."""
    got: dict[str, np.ndarray] = {}
    ell, h = tpl.stable_at(cols, values, derivatives) if values or derivatives else (None, None)
    if ell is not None:
        got["elements"] = ell
    if "loss" in bounds:
        got["element_cond"], got["element_run"] = tpl.loss_bounds_at(cols)
    if h is not None:
        got["h"], got["h_lo"], got["h_hi"] = h, h.copy(), h.copy()
        at = tpl.at_kink(cols)
        if at.any():
            got["h_lo"][at], got["h_hi"][at] = tpl.clarke_at([c[at] for c in cols])
    if "derivative" in bounds:
        got["h_cond"], got["h_run"] = tpl.derivative_bounds_at(cols)
    return got


def _element(tpl: Template, a: tuple[mpmath.mpf, ...], values: bool, derivatives: bool,
             bounds: bool) -> tuple[list[Any], list[list[Any]]]:
    """One element in mpmath: [ℓ, cond, run] and per derivative [h, lo, hi, cond, run]
    (zeros and Nones for what was not asked)."""
    zero = mpmath.mpf(0)
    if bounds:
        value = list(tpl.loss_cond_fn(*a))
    else:
        value = [tpl.value_fn(*a)[0] if values else zero, None, None]
    n = tpl.classes
    if not (derivatives or bounds):
        return value, [[zero, zero, zero, None, None] for _ in range(n)]
    hv = list(tpl.derivative_fn(*a))
    lo, hi = hv, hv
    if tpl.kink_fn is not None and any(k == 0 for k in tpl.kink_fn(*a)):
        both = tpl.clarke_fn(*a)  # the Clarke set: the hull of the derivatives with sign = ±1
        lo = [min(p, q) for p, q in zip(both[:n], both[n:])]
        hi = [max(p, q) for p, q in zip(both[:n], both[n:])]
    hc = list(tpl.derivative_cond_fn(*a)) if bounds else [None] * (2 * n)
    return value, [[hv[c], lo[c], hi[c], hc[c], hc[n + c]] for c in range(n)]


def _evaluate_elements(tpl: Template, cols: list[np.ndarray], counted: np.ndarray, pred_shape: tuple[int, ...],
                       values: bool, derivatives: bool, bounds: bool) -> dict[str, Any]:
    """The fields of :class:`LossEvaluation` that hold values (ignored rows are 0)."""
    element_shape = counted.shape
    keep = np.flatnonzero(counted.reshape(-1))
    got = element_values(tpl, [c[keep] for c in cols], values=values, derivatives=derivatives, bounds=bounds)
    fields: dict[str, Any] = {}
    for name, arr in got.items():
        per_element = name.startswith("element")
        full = _numbers.zeros((counted.size,) if per_element else (counted.size, tpl.classes))
        full[keep] = arr
        fields[name] = full.reshape(element_shape if per_element else pred_shape)
    if not bounds:
        for name in ("element_cond", "element_run", "h_cond", "h_run"):
            fields[name] = None
    return fields


def loss_value(loss: Loss, pred: Any, label: Any = None) -> Any:
    """The exact loss ``L`` (unscaled), at >= :data:`DPS` significant digits.

    Returns:
      ``mpmath.mpf`` for ``"mean"``, ``"batch_mean"``, ``"sum"``; for ``"none"`` an
      ``object`` ndarray of ``mpf``, one per loss element.

    Raises:
      SpecError, InputError: as :func:`evaluate`.

    Example::

        >>> import symjac, mpmath
        >>> v = symjac.loss_value(symjac.Loss("softmax_ce"), [[0.0, 0.0]], [[1.0, 0.0]])
        >>> mpmath.nstr(v, 50)   # -log softmax([0, 0])_0 = log 2
        '0.69314718055994530941723212145817656807550013436026'
    """
    return _numbers.to_mpf(evaluate(loss, pred, label, values=True, derivatives=False).value())


def loss_derivative(loss: Loss, pred: Any, label: Any = None, upstream: Any = None) -> np.ndarray:
    """The exact emitted derivative ``S·dL/dpred`` (``S·Σ_i u_i·dℓ_i/dpred`` for ``"none"``).

    At a kink (``mae`` at ``pred == label``) the minimal-norm element of the Clarke
    set (0) is returned; :func:`loss_derivative_set` gives the whole set.

    Returns:
      An ``object`` ndarray of ``mpmath.mpf`` of pred's shape.

    Raises:
      SpecError, InputError: as :func:`evaluate`.
    """
    return _numbers.mpf_array(evaluate(loss, pred, label, upstream, values=False, derivatives=True).derivative())


def loss_derivative_set(
    loss: Loss, pred: Any, label: Any = None, upstream: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """The Clarke set of ``S·dL/dpred`` as elementwise intervals ``(lo, hi)``.

    ``lo == hi`` wherever the loss is differentiable. (Every loss here is separable
    across elements, so the Clarke set is the product of these intervals.)
    """
    lo, hi = evaluate(loss, pred, label, upstream, values=False, derivatives=True).derivative_set()
    return _numbers.mpf_array(lo), _numbers.mpf_array(hi)


def to_numpy(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """Round mpf values (scalar or object array) to ``dtype``, to nearest.

    Rounds through an exact binary fraction of the mpf, so there is no double
    rounding through float64; values beyond the dtype's range become +-inf (IEEE
    round to nearest), not an OverflowError.
    """
    from symjac._exact import round_fraction
    from symjac.check._rounding import finfo

    dt = np.dtype(dtype)
    info = finfo(dt)  # bfloat16 included
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.size, dtype=dt)
    for i, v in enumerate(arr.reshape(-1)):
        v = v if isinstance(v, mpmath.mpf) else _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)
        if not mpmath.isfinite(v):  # inf and nan carry no binary fraction
            out[i] = float(v)
            continue
        sign, man, exp, bc = v._mpf_  # exact binary value; man_exp would drop the sign
        if man and exp + bc < int(info.minexp) - int(info.nmant) - 1:
            # |v| < 2^(exp+bc) <= η/2 (half the smallest subnormal): rounds to a signed
            # zero, and 2**exp of a 1e300-sized logit's e^-|z| would never finish
            out[i] = -dt.type(0) if sign else dt.type(0)
            continue
        if man and exp + bc > int(info.maxexp) + 1:  # |v| >= 2^(maxexp+1): beyond max + ulp/2
            out[i] = dt.type(-np.inf if sign else np.inf)
            continue
        f = (-1 if sign else 1) * Fraction(int(man)) * (Fraction(2) ** int(exp))
        out[i] = round_fraction(f, dtype)
    return out.reshape(arr.shape)


def complete_inputs(loss: Loss, pred: Any, label: Any, upstream: Any) -> tuple[Any, Any, Any]:
    """Fill what the caller left out: :func:`default_inputs` when ``pred`` is None, and
    for ``reduction="none"`` a varied upstream gradient (so an ignored upstream shows).

    Raises:
      InputError: a label without a prediction.
    """
    if pred is None:
        if label is not None:
            raise InputError("label is given without pred; give both (or neither, for the default inputs)")
        pred, label, default_up = default_inputs(loss)
        return pred, label, default_up if upstream is None else upstream
    if loss.reduction == "none" and upstream is None:
        shape = np.shape(pred)[:-1] if loss.kind == "softmax_ce" else np.shape(pred)
        upstream = np.resize(np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75]), shape)
    return pred, label, upstream


def default_inputs(loss: Loss) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Small deterministic inputs in the loss's domain: ``(pred, label, upstream)``.

    Every value is a short dyadic fraction, exact in float16/32/64, so the exact
    analysis and the implementation see the same numbers in every dtype; no element
    sits on a kink; huber/smooth_l1 (δ = 1) get both branches. ``upstream`` is set
    (and varied, so an ignored upstream shows) only for ``reduction="none"``.
    """
    check_loss(loss)
    kind = loss.kind
    pred: np.ndarray
    label: np.ndarray | None
    if kind in ("mse", "mae", "smooth_l1", "huber"):
        pred = np.array([[0.5, -1.25, 2.0], [0.75, 0.0, -0.5]])
        label = np.array([[0.25, -1.0, -0.5], [1.5, -0.125, 1.5]])
    elif kind == "sigmoid_ce":
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        label = np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.75]])
    elif kind == "bce":
        pred = np.array([[0.25, 0.5, 0.75], [0.125, 0.625, 0.875]])
        label = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 0.25]])
    elif kind == "softmax_ce":
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        if loss.labels == "indices":
            label = np.array([2, 0])
        else:
            label = np.array([[0.0, 0.0, 1.0], [0.75, 0.25, 0.0]])
    elif kind == "kld":
        q = np.array([[0.25, 0.5, 0.25], [0.125, 0.375, 0.5]])
        pred = np.array([[-1.5, -0.75, -1.25], [-2.0, -1.0, -0.625]]) if loss.log_input else q
        p = np.array([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]])
        label = np.array([[-0.75, -1.5, -1.25], [-1.5, -1.0, -0.625]]) if loss.log_target else p
    else:  # constant_derivative
        pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]])
        label = None
    upstream = None
    if loss.reduction == "none":
        shape = pred.shape[:-1] if kind == "softmax_ce" else pred.shape
        cycle = np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75])
        upstream = np.resize(cycle, shape)
    return pred, label, upstream
