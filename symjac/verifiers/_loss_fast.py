"""verify_loss's fast route: a float64 filter with proven bounds, the exact route for what it leaves.

The exact route (:mod:`symjac.verifiers._loss`) holds every value of every entry as a
200-bit MPFR object (1.4-2.1 KB an entry) and spends 10-18 CPU s at 10^6 entries. Most
entries of a correct derivative are far inside their bound, and deciding that needs no
60-digit value: this route decides them in float64, block by block, and sends the rest
to the exact route.

For each entry j, with the derivative's bound ``B_j`` of :mod:`symjac.loss._bounds`:

- the kind's fast form (:meth:`symjac.loss._kind.LossKind.fast_derivative`) encloses
  the unscaled ``h_j`` in a :class:`symjac.loss._fast.Ball` (proven radius), times
  ``c = fl(S·r)`` (``|c - S·r| <= u|c|/(1 - u)``) gives ``ĝ`` within ``E`` of the exact
  ``g_j = S·r·h_j``;
- a lower bound ``B_lo <= B_j``: ``B_j`` is ``|S·r|·[u(1+γ)·R(h_j) + γ_k·(|h_j| + cond_j)]
  + k·η·max(1, |S·r|·A)`` with ``R, cond >= 0``, ``γ_k >= k·u``, ``A >= 1``; the kind
  gives lower bounds on ``R`` and ``cond`` (some of their non-negative terms), ``|h_j| >=
  |ĥ| - e``, and the float64 evaluation is deflated by ``1 - 2^-40``;
- the entry is *decided* (within its bound) when ``(|o_j - ĝ| + E)·(1 + 2^-44) <= B_lo``
  (then ``|o_j - g_j| <= |o_j - ĝ| + E <= B_lo <= B_j``: the exact route's verdict) and
  ``|ĝ| + E`` is within the dtype's range.

Every entry not decided, and the :data:`WORST` whose estimated error in ULPs is largest,
go through the exact route, in blocks, with the whole input's reduction factor,
denominator and rounding count. ``max_error_ulps`` (and the bound there) is then the
worst of the entries evaluated exactly; ``fast_filter["max_error_ulps_at_most"]`` bounds
every entry's error from the enclosures (an enclosure's radius is a few ULPs of float64,
so where the errors are that small the estimate cannot rank them exactly). Inputs with
fewer than :data:`FAST_MIN` entries take the exact route alone. When every entry is
within its bound and the three calls of the implementation were clean, the report is
that of the exact route (its stats say how many entries each route decided); anything
else (a finding, an input the fast forms do not cover, an entry beyond its bound) is
left to the exact route from the start, which gives the findings their usual form.
Memory stays the float arrays of the inputs and outputs plus one block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError
from symjac.check._call import Guard, same
from symjac.check._report import Finding
from symjac.check._rounding import finfo, ulps
from symjac.loss import _fast, _numbers
from symjac.loss._bounds import Bounds, derivative_roundings
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._inputs import read_labels, read_pred, reduction_factors
from symjac.loss._spec import Loss, kind_of
from symjac.verifiers._loss_inputs import _ArgFactory
from symjac.verifiers._loss_values import _Expected, _Misfit

#: pred entries per block of the filter and of the exact route (whole rows of a class axis)
BLOCK = 2**13
#: entries with the largest estimated error that the exact route evaluates too (for max_error_ulps)
WORST = 64
#: pred entries below which verify_loss takes the exact route alone (small inputs cost it little)
FAST_MIN = 2**14


@dataclasses.dataclass(frozen=True)
class _Setting:
    """What every block shares: the flat views, the factor ``c = fl(S·r)``, the bound's k."""

    loss: Loss
    z: np.ndarray  # (elements,) or (rows, C), float64
    y: np.ndarray
    classes: int
    r: Fraction
    denominator: Fraction
    denominator_ops: int
    c: float
    k: int
    dt: np.dtype[Any]


@dataclasses.dataclass(frozen=True)
class Beyond:
    """An entry beyond its bound, from the exact route: flat pred index, error and bound in ULPs, the exact value."""

    entry: int
    error_ulps: float
    bound_ulps: float
    expected: Any


@dataclasses.dataclass(frozen=True)
class Fast:
    """The fast route's outcome after clean calls: the output, the stats, and every entry
    beyond its bound (exact; empty when the derivative is right)."""

    observed: np.ndarray
    stats: dict[str, Any]
    beyond: list[Beyond]


def fast_check(loss: Loss, derivative: Callable[..., Any], p0: np.ndarray, l0: np.ndarray | None,
               u0: np.ndarray | None, dt: np.dtype[Any], timeout: float | None) -> Fast | None:
    """The fast route: its outcome when the calls were clean and every entry was decided
    (by the filter, or exactly), else None (the caller takes the exact route; nothing is
    reported)."""
    if p0.size < FAST_MIN:
        return None
    try:
        setting = setting_of(loss, p0, l0, u0, dt)
    except (InputError, SpecError):
        return None
    if setting is None:
        return None
    out = _clean_calls(loss, derivative, p0, l0, u0, dt, timeout)
    if out is None:
        return None
    try:
        return _decide(setting, out)
    except _InputFault as fault:  # the input's own fault: the exact route would raise it too
        raise fault.error from None
    except (InputError, SpecError):
        return None


class _InputFault(Exception):
    """An input outside the loss's domain, named with its index in the whole input."""

    def __init__(self, error: InputError):
        super().__init__(str(error))
        self.error = error


def setting_of(loss: Loss, p0: np.ndarray, l0: np.ndarray | None, u0: np.ndarray | None,
             dt: np.dtype[Any]) -> _Setting | None:
    kind = kind_of(loss)
    if loss.reduction == "none" or l0 is None or not kind.takes_label or l0.shape != p0.shape:
        return None
    if u0 is not None and np.size(u0) != 1:
        return None
    shape = tuple(p0.shape)
    classes = kind.classes(shape)
    element_shape = kind.element_shape(shape)
    wide = p0.astype(np.float64, copy=False)
    z = wide.reshape(-1, classes) if kind.class_axis else wide.reshape(-1)
    y = l0.astype(np.float64, copy=False).reshape(z.shape)
    if kind.fast_derivative(loss, z[:1], y[:1]) is None:
        return None
    factor, den, ops = reduction_factors(loss, u0, element_shape, None, np.ones(element_shape, dtype=bool), classes)
    r = Fraction(factor.reshape(-1)[0])
    del factor
    sr = loss.scale * r
    c = float(sr)
    if not 2.0**-1000 < abs(c) < 2.0**1000:
        return None
    tpl = kind.template(loss, classes)
    return _Setting(loss, z, y, classes, r, den, ops, c, derivative_roundings(tpl, den, ops, dt), dt)


def _clean_calls(loss: Loss, derivative: Callable[..., Any], p0: np.ndarray, l0: np.ndarray | None,
                 u0: np.ndarray | None, dt: np.dtype[Any], timeout: float | None) -> np.ndarray | None:
    """The exact route's three calls (kept buffers, again on them, fresh inputs); the
    first output if all three are clean and equal, else None."""
    findings: list[Finding] = []
    args_of = _ArgFactory(loss, p0, l0, u0)
    deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
    shape = p0.shape
    bufs = args_of.fresh()
    out1 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred")
    if out1 is None or findings or deriv.mutated:
        return None
    out2 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred", again=True)
    if out2 is None or findings or deriv.mutated or not same(out1, out2):
        return None
    del out2, bufs
    out3 = deriv.array(*args_of.fresh(), shape=shape, dtype=dt, index_name="pred")
    if out3 is None or findings or deriv.mutated or not same(out1, out3):
        return None
    return out1


def filter_block(s: _Setting, zb: np.ndarray, yb: np.ndarray,
                 ob: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The filter at one block (float64 pred, label, observed, in :attr:`_Setting.z`'s
    layout): ``(decided, dist, size, point)`` per entry (flat): ``dist`` an upper bound
    on ``|o - g|`` (inf where unknown), ``size`` ~ ``max(|o|, |g|)``, ``point`` = ``|o - ĝ|``;
    None without a fast form."""
    info = finfo(s.dt)
    u_dt, eta_dt, fmax = 2.0 ** -(int(info.nmant) + 1), float(info.smallest_subnormal), float(info.max)
    form = kind_of(s.loss).fast_derivative(s.loss, zb, yb)
    if form is None:
        return None
    g = _fast.mul(_fast.Ball(np.array(s.c), np.array(_fast.U * abs(s.c) * (1 + 2.0**-44))), form.h)
    sr_lo = abs(s.c) * (1 - 2.0**-50)
    with np.errstate(all="ignore"):
        b_lo = _fast.lower(sr_lo * (u_dt * form.run_lo + s.k * u_dt * (form.h.lower_abs() + form.cond_lo))
                           + s.k * eta_dt * max(1.0, sr_lo))
        dist = (np.abs(ob - g.v) + g.e) * (1 + 2.0**-44)
        decided = (dist <= b_lo) & (np.abs(g.v) + g.e <= fmax)
        size = np.minimum(np.maximum(np.abs(ob), np.where(np.isfinite(g.v), np.abs(g.v), 0.0)), fmax)
        dist = np.where(np.isfinite(dist), dist, np.inf)  # NaN (an enclosure out of range): unknown
    return decided.reshape(-1), dist.reshape(-1), size.reshape(-1), np.abs(ob - g.v).reshape(-1)


def _decide(s: _Setting, out: np.ndarray) -> Fast | None:
    obs = out.astype(np.float64, copy=False).reshape(s.z.shape)
    eta_dt = float(finfo(s.dt).smallest_subnormal)
    per = s.classes if s.z.ndim == 2 else 1
    undecided: list[np.ndarray] = []
    ranked: list[list[tuple[float, int]]] = [[], []]
    most, decided_count = 0.0, 0
    step = max(1, BLOCK // s.classes)
    for start in range(0, s.z.shape[0], step):
        zb, yb, ob = s.z[start:start + step], s.y[start:start + step], obs[start:start + step]
        _check_domain(s, zb, yb, tuple(out.shape))
        got = filter_block(s, zb, yb, ob)
        if got is None:
            return None
        decided, dist, size, point = got
        decided_count += int(decided.sum())
        with np.errstate(all="ignore"):
            most = max(most, float(np.max(ulps(dist, size, s.dt))))
            by_point, by_size = ulps(point, size, s.dt), dist / np.maximum(size, eta_dt)
        bad = np.flatnonzero(~decided)
        if bad.size:
            undecided.append(start + bad // per)
        for rank, by in enumerate((by_point, by_size)):  # the largest by the point estimate, and relative to the size
            top = np.argsort(by)[-WORST:]
            ranked[rank].extend((float(by[j]), int(start + j // per)) for j in top)
    leftover = np.unique(np.concatenate(undecided)) if undecided else np.zeros(0, dtype=np.intp)
    chosen = [j for got_ranked in ranked for _, j in sorted(got_ranked, reverse=True)[:WORST // 2]]
    picked = np.unique(np.concatenate([leftover, np.array(chosen, dtype=np.intp)]))
    worst, beyond = _exact(s, obs, picked)
    n = int(np.prod(out.shape))
    stats = {"max_error_ulps": worst[0], "bound_ulps_at_worst": worst[1], "values_within_bound": not beyond,
             "fast_filter": {"entries": n, "decided_in_float64": decided_count, "elements_exact": int(picked.size),
                             "max_error_ulps_at_most": most}}
    return Fast(out, stats, beyond)


def _check_domain(s: _Setting, zb: np.ndarray, yb: np.ndarray, shape: tuple[int, ...] | None = None) -> None:
    """The exact route's input checks on one block; where one fails, on the whole input
    (in pred's ``shape``), so that the error names the entry as the exact route does."""
    kind = kind_of(s.loss)
    try:
        z = read_pred(zb)
        t, _counted, _indices = read_labels(s.loss, z, yb, kind.element_shape(tuple(zb.shape)), s.classes)
        kind.check_domain(s.loss, z, t)
    except InputError as exc:
        if shape is None:
            raise _InputFault(exc) from None
        _check_domain(s, s.z.reshape(shape), s.y.reshape(shape))  # raises _InputFault with the whole input's index
        raise _InputFault(exc) from None


def _exact(s: _Setting, obs: np.ndarray, elements: np.ndarray) -> tuple[tuple[float, float], list[Beyond]]:
    """The exact route at the given elements (rows), in blocks, with the whole input's
    factor, denominator and rounding count: (worst error, bound there) in ULPs, and the
    entries beyond their bound (flat pred indices), worst first."""
    summed = dataclasses.replace(s.loss, reduction="sum")
    worst = (-1.0, 0.0)
    beyond: list[Beyond] = []
    per = s.classes if s.z.ndim == 2 else 1
    step = max(1, BLOCK // s.classes)
    for start in range(0, elements.size, step):
        at = elements[start:start + step]
        zb, yb = s.z[at], s.y[at]
        ev = evaluate_checked(summed, zb, yb, None, values=False, derivatives=True)
        factor = np.empty(ev.counted.shape, dtype=object)
        factor[...] = s.r
        ev = dataclasses.replace(ev, loss=s.loss, factor=factor, denominator=s.denominator,
                                 denominator_ops=s.denominator_ops)
        with _numbers.context():
            ex = _Expected.of(ev, Bounds(ev, s.dt), s.dt, tuple(zb.shape))
            fit = _Misfit.of(obs[at].astype(s.dt), ex, s.dt)
        for j, err, bound in fit.bad:
            entry = int(at[j // per]) * per + j % per
            beyond.append(Beyond(entry, err, bound, _numbers.to_mpf(ex.value.reshape(-1)[j])))
        if fit.worst_error > worst[0]:
            worst = (fit.worst_error, fit.worst_bound)
    return worst, sorted(beyond, key=lambda b: -b.error_ulps)
