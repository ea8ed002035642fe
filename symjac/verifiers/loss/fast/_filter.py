"""verify_loss's fast route: a float64 filter with proven bounds, the exact route for what it leaves.

The exact route (:mod:`symjac.verifiers.loss._verify`) holds every value of every entry as a
200-bit MPFR object (1.4-2.1 KB an entry) and spends 10-18 CPU s at 10^6 entries. Most
entries are either far inside their bound (a correct derivative) or far outside it (a
wrong one), and deciding either needs no 60-digit value: this route decides them in
float64, block by block, and sends the rest to the exact route.

For each entry j, with the derivative's bound ``B_j`` of :mod:`symjac.loss._bounds`:

- the kind's fast form (:meth:`symjac.loss._kind.LossKind.fast_derivative`) encloses
  the unscaled ``h_j`` in a :class:`symjac.loss._fast.Ball` (proven radius); times the
  factor ``m·r_i`` enclosed (``m`` = S, or a candidate scale c; ``r_i`` the exact
  reduction factor: 1/D, 0 for a row at ``ignore_index``, the upstream ``u_i`` for
  ``"none"``) it gives ``ĝ`` within ``E`` of the exact ``g_j = m·r_i·h_j``;
- bounds ``B_lo <= B_j <= B_hi``: ``B_j`` is ``|S·r_i|·[u(1+γ_k)·R(h_j) + γ_k·(|h_j| +
  cond_j)] + k·η·max(1, |S·r_i|·A)`` with ``R, cond >= 0``, ``γ_k >= k·u``, ``A >= 1``;
  the kind gives lower bounds on ``R`` and ``cond`` (some of their non-negative terms)
  and upper ones (all of them, each factor rounded up), ``A <= max(1, |options|)``;
- the entry is *within* its bound when ``(|o_j - ĝ| + E)·(1 + 2^-44) <= B_lo·ρ`` and
  ``|ĝ| + E`` is within the dtype's range, and *beyond* it when ``(|o_j - ĝ| -
  E)·(1 - 2^-44) > B_hi·ρ`` (``ρ = max(1, |m|/S)``, the exact route's allowance for a
  candidate scale): then the exact route's verdict at that entry is the same.

Every entry neither within nor beyond goes through the exact route, with the whole
input's reduction factor, denominator and rounding count, and so do the few whose error
in ULPs may be the largest (:data:`WORST` per block, ranked by the upper estimate, of
all entries and of the entries beyond: those the exact route names as the worst). A
failing derivative is then classified as the exact route does
(:mod:`symjac.verifiers.loss._values`): ``missing_scale`` when ``m = 1`` explains every
entry (within ``B_j·ρ``), else the least-squares ratio ``c = Σ o·b / Σ b²`` (b = r·h,
from the enclosures: a float64 sum) rounded to a nice fraction, then c itself, each
checked over every entry by the same filter with ``m = c`` (its undecided entries
exactly): ``wrong_scale`` naming it, else ``wrong_values``. The finding lists the cells
beyond (at most :data:`CELLS`: those evaluated exactly worst first, then in index order;
their count in the message), and holds the exact value at the worst one.

``max_error_ulps`` (and the bound there) is the worst of the entries evaluated exactly;
``fast_filter["max_error_ulps_at_most"]`` bounds every entry's error from the
enclosures. Inputs with fewer than :data:`FAST_MIN` entries take the exact route alone,
and so does anything the calls get wrong (a finding of the calls: the exact route words
it), a kind without a fast form (:meth:`~symjac.loss._kind.LossKind.fast_derivative`
None), a per-class option of an element-wise kind along a last axis longer than
:data:`BLOCK` (the exact evaluations keep whole rows), and a ``forward`` that
:mod:`symjac.verifiers.loss.fast._forward` does not prove within (the caller's exact
route, within its budget). Memory
stays the float arrays of the inputs and outputs plus one block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import Guard, same
from symjac.check._report import Finding
from symjac.check._rounding import finfo
from symjac.loss import _fast
from symjac.loss._bounds import derivative_roundings
from symjac.loss._inputs import read_labels, read_pred, reduced_factor
from symjac.loss._spec import Loss, kind_of
from symjac.verifiers.loss._inputs import _ArgFactory

#: pred entries per block of the filter and of the exact route (whole rows of a class axis)
BLOCK = 2**13
#: entries per block with the largest estimated error that the exact route evaluates too (for the worst)
WORST = 64
#: cells a fast-route finding lists (worst first; the message counts them all)
CELLS = 1000
#: pred entries below which verify_loss takes the exact route alone (small inputs cost it little)
FAST_MIN = 2**14


@dataclasses.dataclass(frozen=True)
class _Setting:
    """What every block shares: the flat views, the reduction factors, the bound's k."""

    loss: Loss
    z: np.ndarray  # (elements,) or (rows, C), float64
    y: np.ndarray  # z's shape, or (rows,) class indices
    shape: tuple[int, ...]  # pred's
    classes: int
    r: Fraction  # the reduction factor of every counted element (reduced losses), or 1
    upstream: np.ndarray | None  # "none": r_i = u_i per element (float64, flat)
    counted: np.ndarray | None  # per element, False at ignore_index (None: all count)
    denominator: Fraction
    denominator_ops: int
    k: int
    amp: float  # >= A of the bound
    dt: np.dtype[Any]
    row: int | None  # element-wise with an option per column: the exact route evaluates whole rows this long

    @property
    def per(self) -> int:
        """pred entries per element (row)."""
        return self.classes if self.z.ndim == 2 else 1

    @property
    def step(self) -> int:
        """elements (rows) per block."""
        return max(1, BLOCK // self.per)

    def factor(self, m: Fraction, start: int, stop: int) -> _fast.Ball:
        """``m·r_i`` enclosed at elements ``start:stop`` (shaped to broadcast over a block)."""
        n = stop - start
        if self.upstream is None:
            ball = _fast.Ball.of(m * self.r, (n,))
        else:
            ball = _fast.mul(_fast.Ball.of(m), _fast.Ball.exact(self.upstream[start:stop]))
        if self.counted is not None:
            keep = self.counted[start:stop]
            ball = _fast.Ball(np.where(keep, ball.v, 0.0), np.where(keep, ball.e, 0.0))
        if self.z.ndim == 2:
            ball = _fast.Ball(ball.v[:, None], ball.e[:, None])
        return ball

    def column(self, start: int, stop: int) -> np.ndarray | None:
        """Each entry's index along pred's last axis (element-wise kinds)."""
        if self.z.ndim == 2:
            return None
        return np.arange(start, stop) % self.shape[-1]


class _InputFault(Exception):
    """An input outside the loss's domain, named with its index in the whole input."""

    def __init__(self, error: InputError):
        super().__init__(str(error))
        self.error = error


def _options_fit(loss: Loss, shape: tuple[int, ...]) -> float | None:
    """``A``'s upper bound from the spec's numeric options (every per-class option one
    number or one per entry of pred's last axis), or None (the exact route names the fault)."""
    amp = 1.0
    for name in kind_of(loss).options:
        value = getattr(loss, name, None)
        values = value if isinstance(value, tuple) else (value,)
        if isinstance(value, tuple) and len(value) not in (1, shape[-1]):
            return None
        for v in values:
            if isinstance(v, (int, Fraction)) and not isinstance(v, bool):
                amp = max(amp, abs(float(v)) * (1 + 2.0**-50))
    return amp


def _per_column(loss: Loss) -> bool:
    """Does an option vary along pred's last axis (a tuple of more than one value)?"""
    return any(isinstance(v := getattr(loss, name, None), tuple) and len(v) > 1 for name in kind_of(loss).options)


def setting_of(loss: Loss, p0: np.ndarray, l0: np.ndarray | None, u0: np.ndarray | None,
               dt: np.dtype[Any]) -> _Setting | None:
    """The shared setting, after the exact route's input checks block by block (an input
    fault raises :class:`_InputFault`); None where the kind or an option has no fast form."""
    kind = kind_of(loss)
    shape = tuple(p0.shape)
    if l0 is None or not kind.takes_label or not shape or kind.amplitude(loss) is not None:
        return None
    classes = kind.classes(shape)
    element_shape = kind.element_shape(shape)
    indices = kind.labels_are_indices(loss)
    if l0.shape != (element_shape if indices else shape):
        return None
    amp = _options_fit(loss, shape)
    row = shape[-1] if not kind.class_axis and _per_column(loss) else None
    if amp is None or (row is not None and row > BLOCK):
        return None
    wide = p0.astype(np.float64, copy=False)
    z = wide.reshape(-1, classes) if kind.class_axis else wide.reshape(-1)
    y = l0.astype(np.float64, copy=False).reshape(-1 if indices else z.shape)
    if kind.fast_derivative(loss, z[:1], y[:1], np.zeros(1, dtype=np.intp)) is None:
        return None
    counted, index = _read_labels(loss, z, y, shape, classes)
    upstream = None
    if loss.reduction == "none":
        if u0 is not None and tuple(np.shape(u0)) != element_shape:
            return None
        upstream = np.ones(z.shape[0]) if u0 is None else np.asarray(u0, dtype=np.float64).reshape(-1)
        r, den, ops = Fraction(1), Fraction(1), 0
    else:
        if u0 is not None and np.size(u0) != 1:
            return None
        try:
            r, den, ops = reduced_factor(loss, u0, element_shape, index, counted, classes)
        except InputError as exc:  # every row ignored, a total weight of 0: the input's fault
            raise _InputFault(exc) from None
    tpl = kind.template(loss, classes)
    return _Setting(loss, z, y, shape, classes, r, upstream, None if counted.all() else counted, den, ops,
                    derivative_roundings(tpl, den, ops, dt), amp, dt, row)


def _read_labels(loss: Loss, z: np.ndarray, y: np.ndarray, shape: tuple[int, ...],
                 classes: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The exact route's input checks, block by block (where one fails, on the whole
    input, so that the error names the entry as the exact route does): per element
    whether it counts, and the class indices (flat; None for probability labels)."""
    kind = kind_of(loss)
    counted = np.ones(z.shape[0], dtype=bool)
    index = np.zeros(z.shape[0], dtype=np.intp) if kind.labels_are_indices(loss) else None
    step = max(1, BLOCK // classes)
    for start in range(0, z.shape[0], step):
        zb, yb = z[start:start + step], y[start:start + step]
        try:
            _check_block(loss, zb, yb, counted[start:start + step], None if index is None else index[start:start + step])
        except InputError as exc:
            full = z.reshape(shape)
            try:
                _check_block(loss, full, y.reshape(shape if index is None else shape[:-1]), None, None)
            except InputError as whole:
                raise _InputFault(whole) from None
            raise _InputFault(exc) from None
    return counted, index


def _check_block(loss: Loss, zb: np.ndarray, yb: np.ndarray, counted: np.ndarray | None,
                 index: np.ndarray | None) -> None:
    kind = kind_of(loss)
    z = read_pred(zb)
    shape = tuple(zb.shape)
    t, got, idx = read_labels(loss, z, yb, kind.element_shape(shape), kind.classes(shape))
    kind.check_domain(loss, z, t)
    if counted is not None:
        counted[...] = got.reshape(-1)
    if index is not None and idx is not None:
        index[...] = np.where(got.reshape(-1), idx, 0)


def _clean_calls(loss: Loss, derivative: Callable[..., Any], p0: np.ndarray, l0: np.ndarray | None,
                 u0: np.ndarray | None, dt: np.dtype[Any], timeout: float | None) -> np.ndarray | None:
    """The exact route's three calls (kept buffers, again on them, fresh inputs); the
    first output if all three are clean and equal, else None."""
    findings: list[Finding] = []
    args_of = _ArgFactory(loss, p0, l0, u0)
    deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
    shape = p0.shape
    bufs = args_of.fresh()
    ref = args_of.names_originals()  # the buffers are copies of these: compared with them, not copied again
    out1 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred", reference=ref)
    if out1 is None or findings or deriv.mutated:
        return None
    out2 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred", again=True, reference=ref)
    if out2 is None or findings or deriv.mutated or not same(out1, out2):
        return None
    del out2, bufs
    out3 = deriv.array(*args_of.fresh(), shape=shape, dtype=dt, index_name="pred", reference=ref)
    if out3 is None or findings or deriv.mutated or not same(out1, out3):
        return None
    return out1


@dataclasses.dataclass(frozen=True)
class Block:
    """The filter at one block, per entry (flat): ``within`` / ``beyond`` its bound
    (proven), ``dist_hi`` >= ``|o - g|`` >= ``dist_lo`` (inf / 0 where unknown),
    ``size_lo``, ``size_hi`` around ``max(|o|, |g|)``, ``point`` = ``|o - ĝ|``, and
    ``base`` = ``ĝ/m`` (the unscaled, reduced derivative's float estimate)."""

    within: np.ndarray
    beyond: np.ndarray
    dist_hi: np.ndarray
    dist_lo: np.ndarray
    size_lo: np.ndarray
    size_hi: np.ndarray
    point: np.ndarray
    base: np.ndarray


def filter_block(s: _Setting, start: int, stop: int, ob: np.ndarray, m: Fraction | None = None) -> Block | None:
    """The filter at elements ``start:stop`` (``ob``: the observed values there, float64,
    in :attr:`_Setting.z`'s layout), for the derivative ``m·dL/dpred`` (``m`` = S by
    default); None without a fast form."""
    scale = s.loss.scale
    m = scale if m is None else m
    info = finfo(s.dt)
    u_dt, eta_dt, fmax = 2.0 ** -(int(info.nmant) + 1), float(info.smallest_subnormal), float(info.max)
    zb, yb = s.z[start:stop], s.y[start:stop]
    form = kind_of(s.loss).fast_derivative(s.loss, zb, yb, s.column(start, stop))
    if form is None:
        return None
    g = _fast.mul(s.factor(m, start, stop), form.h)
    sr = s.factor(scale, start, stop)
    sr_lo, sr_hi = sr.lower_abs(), sr.upper_abs()
    rho = max(Fraction(1), abs(m) / scale)
    rho_lo, rho_hi = float(rho) * (1 - 2.0**-50), float(rho) * (1 + 2.0**-50)
    ku = s.k * u_dt
    with np.errstate(all="ignore"):
        b_lo = _fast.lower(sr_lo * (u_dt * form.run_lo + ku * (form.h.lower_abs() + form.cond_lo))
                           + s.k * eta_dt * np.maximum(1.0, sr_lo))
        if form.cond_hi is None or form.run_hi is None or ku >= 0.5:
            b_hi = np.full(np.shape(b_lo), np.inf)
        else:
            gamma = ku / (1 - ku) * (1 + 2.0**-50)
            terms = np.where(sr_hi > 0, sr_hi * (u_dt * (1 + gamma) * form.run_hi
                                                 + gamma * (form.h.upper_abs() + form.cond_hi)), 0.0)
            b_hi = _fast.upper(terms + s.k * eta_dt * np.maximum(1.0, sr_hi * s.amp))
        b_hi = np.broadcast_to(b_hi, g.v.shape)
        point = np.abs(ob - g.v)
        dist_hi = (point + g.e) * (1 + 2.0**-44)
        dist_lo = np.maximum((point - g.e) * (1 - 2.0**-44), 0.0)
        within = (dist_hi <= b_lo * rho_lo) & (np.abs(g.v) + g.e <= fmax)
        beyond = np.isfinite(g.e) & (dist_lo > b_hi * rho_hi)
        size_hi = np.minimum(np.maximum(np.abs(ob), np.abs(g.v) + g.e), fmax)
        size_lo = np.minimum(np.maximum(np.abs(ob), np.maximum(np.abs(g.v) - g.e, 0.0)), fmax)
        size_hi = np.where(np.isfinite(size_hi), size_hi, fmax)  # NaN (an enclosure out of range): unknown
        size_lo = np.where(np.isfinite(size_lo), size_lo, 0.0)
        dist_hi = np.where(np.isfinite(dist_hi), dist_hi, np.inf)  # NaN (an enclosure out of range): unknown
        dist_lo = np.where(np.isfinite(dist_lo), dist_lo, 0.0)
        mv = float(m) if m != 0 else 1.0
        base = np.where(np.isfinite(g.v), g.v / mv, 0.0)
    return Block(*(np.asarray(a).reshape(-1) for a in (within, beyond, dist_hi, dist_lo, size_lo, size_hi,
                                                       np.where(np.isfinite(point), point, np.inf), base)))
