"""A loss template at a batch of elements: values, derivatives, Clarke sets and bounds.

Every function of the template runs once over every element MPFR can hold
(:mod:`symjac.loss._numbers`); elements with an input beyond ``_numbers.LIMIT`` (or a
result the MPFR range cannot hold) go through mpmath one by one.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np

from symjac.loss import _numbers
from symjac.loss._fields import DPS
from symjac.loss._kind import Template
from symjac.loss._spec import Loss, check_loss, kind_of


def loss_template(loss: Loss, classes: int = 1) -> Template:
    """The SymPy template of one element of ``loss`` (``classes`` = C for softmax_ce).

    Example::

        >>> import symjac
        >>> from symjac.loss._elements import loss_template
        >>> t = loss_template(symjac.Loss("mse"))
        >>> t.loss, t.derivatives
        ((-y + z)**2, (-2*y + 2*z,))
    """
    check_loss(loss)
    return kind_of(loss).template(loss, classes)


_FIELDS = ("elements", "element_cond", "element_run", "h", "h_lo", "h_hi", "h_cond", "h_run")


def element_values(tpl: Template, cols: list[np.ndarray], *, values: bool = True, derivatives: bool = True,
                   bounds: bool = False, bounds_of: tuple[str, ...] = ("loss", "derivative")) -> dict[str, np.ndarray]:
    """The template at a batch of elements (MPFR columns, see
    :func:`symjac.loss._inputs.columns`), as MPFR numbers: per element ``elements`` (ℓ; ``values``), ``element_cond``, ``element_run``
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


def evaluate_elements(tpl: Template, cols: list[np.ndarray], counted: np.ndarray, pred_shape: tuple[int, ...],
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


