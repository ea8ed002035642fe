"""Verify a loss layer's derivative against the exact one, and a family of them at once.

:func:`verify_loss` runs an implementation's derivative (and, if given, its forward)
on NumPy arrays and returns a :class:`symjac.report.Report`. It never crashes on a
misbehaving implementation: raising, wrong shape or dtype, NaN/Inf, changing its
inputs in place and nondeterminism are findings. Bad *inputs* (a label of the
wrong shape, a probability outside [0, 1], ...) are the caller's mistake and raise
:class:`symjac.InputError` / :class:`symjac.SpecError`.

Implementations are called only through the guarded-call core
(:mod:`symjac.check._call`); :mod:`symjac.verifiers._family` checks sibling losses
that share one loss scale S as a table.

Error bounds
------------
No tolerance here is guessed: the derivative bound ``B_j`` and the forward bounds
``E`` are derived in :mod:`symjac.loss._bounds` (rounding depth, running error and
condition of the SymPy expressions, computed in MPFR at the input).

*Finite differences* of the implementation's own forward ``F``, at the
representable points ``z± = fl(z_j ± h)`` with ``h`` a power of two near
``u^(1/3)·max(1, |z_j|)`` (the optimum order for central differences), narrowed
to stay inside (0, 1) for bce and kld::

    |g_j - S·(F(z+) - F(z-))/(z+ - z-)| <= B_j + S·(|T_j| + (E+ + E-)/(z+ - z-))

``T_j = (Φ(z+) - Φ(z-))/(z+ - z-) - dΦ/dz_j`` is the truncation error, computed
exactly (MPFR) from the spec's loss ``Φ`` (``L``, or ``Σ u_i ℓ_i`` for
``"none"``); ``E±`` are the forward bounds above at ``z±`` (the forward is checked
against them there too); ``B_j`` is the derivative bound. The exact ``T_j`` is
valid when the forward computes the spec's loss, which the forward check
confirms; where it does not, the FD verdict still compares the backward with
the forward's own difference quotients at the same tolerance (and says so).
Stencils that straddle a kink are skipped, and so is pred = 1 for kld (no
centred stencil fits); both are counted in the stats.

Errors are reported in ULPs of the dtype at ``max(|expected|, |observed|)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import gmpy2
import mpmath
import numpy as np

from symjac._errors import InputError
from symjac._exact import round_fractions, to_fraction
from symjac.check._report import Finding, Report
from symjac.check._call import DEFAULT_TIMEOUT, Guard, same, sha256
from symjac.check._rounding import finfo, float_dtype, is_float, ulp_mp, ulps
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds, ForwardSums
from symjac.loss._evaluate import LossEvaluation, _index, complete_inputs, element_values, evaluate, to_numpy
from symjac.loss._spec import Loss, check_loss

MAX_FD_PROBES = 32  # FD costs 2 forward calls per probed element; larger preds are sampled evenly

def _frac(x: Any) -> Fraction:
    return Fraction(float(x))


# ------------------------------------------------------------------------ bounds


def _show(value: Any, digits: int = 10) -> str:
    """An exact value for a message (MPFR to mpmath's shortest form)."""
    return str(mpmath.nstr(_numbers.to_mpf(value), digits))


def _nice_scale(c: Any) -> Fraction:
    return Fraction(float(c)).limit_denominator(4096)


def _scale_hint(c: Fraction, s: Fraction, den: Fraction, n: int, reduction: str, shape: tuple[int, ...] = ()) -> str:
    """Name a known slip behind a wrong loss scale c, including another reduction's divisor
    (the reduction the derivative does match)."""
    hints = {
        s * s: "S², the scale applied twice",
        1 / s: "1/S, divided by S instead of multiplied",
        -s: "-S, the sign flipped",
        -1: "-1: unscaled and the sign flipped",
    }
    if den != 1:
        hints.setdefault(s * den, "S·D: the reduction's division by D is missing")
        hints.setdefault(s / den, "S/D: divided by D twice")
        hints.setdefault(den, "D: the reduction's division by D is missing and the scale too")
    if reduction == "sum" and n > 1:
        hints.setdefault(s / n, f"S/n: averaged over the n = {n} elements where the spec sums")
    elements = math.prod(shape) if shape else 0
    if elements > 1 and Fraction(elements) != den:
        hints.setdefault(s * den / elements, f"matches reduction='mean' over elements: divided by all {elements} "
                                             f"elements of pred, not by D = {den}")
    if len(shape) > 1 and Fraction(shape[0]) != den:
        hints.setdefault(s * den / shape[0], f"matches reduction='batch_mean': divided by the batch size "
                                             f"B = {shape[0]}, not by D = {den}")
    hint = hints.get(c)
    return f" ({hint})" if hint else ""


@dataclasses.dataclass(frozen=True, eq=False)
class _Outcome:
    report: Report
    observed: np.ndarray | None
    expected: np.ndarray
    base: np.ndarray


def verify_loss(
    loss: Loss,
    *,
    derivative: Callable[..., Any],
    forward: Callable[..., Any] | None = None,
    pred: Any = None,
    label: Any = None,
    upstream: Any = None,
    dtype: Any = "float64",
    timeout: float | None = DEFAULT_TIMEOUT,
) -> Report:
    """Check a loss derivative against the exact ``S·dL/dpred``; every fault a finding.

    The implementation is called on NumPy arrays of ``dtype``:
    ``derivative(pred, label)`` -> ``S·dL/dpred`` (pred's shape and dtype); for
    ``reduction="none"``, ``derivative(pred, label, upstream)`` -> the VJP
    ``S·Σ_i u_i·dℓ_i/dpred``. ``forward(pred, label)`` -> ``L`` (one number; one per
    element for ``"none"``), unscaled.

    Checks, each a :class:`symjac.report.Finding` category:

    - ``bad_output``: raises, wrong shape, wrong dtype, NaN/Inf (derivative or forward).
    - ``mutates_inputs``: pred, label or upstream changed by a call (compared with
      copies taken before, sha256 checksums in the message); a second call on the
      same buffers that then returns wrong values adds ``wrong_values``.
    - ``nondeterministic``: two calls on equal fresh inputs differ bitwise.
    - ``missing_scale``: the derivative equals the unscaled ``dL/dpred`` ("missing
      loss scale"); ``wrong_scale``: it equals ``c·dL/dpred`` for another ``c``
      (named); ``wrong_values``: neither, outside the derived bound.
    - ``forward_values``: the forward disagrees with the exact ``L``.
    - ``not_fd_consistent``: the derivative is not S times the central differences
      of the implementation's own forward (not reported again when a scale
      finding already explains it).

    Bounds are derived in the module docstring, reported in ULPs of ``dtype``.

    Args:
      loss: the spec (its ``scale`` is S).
      derivative: the implementation's derivative callable.
      forward: the implementation's forward callable, optional (enables the
        forward and FD checks).
      pred, label, upstream: inputs; default :func:`symjac.losses.default_inputs`.
        They are rounded to ``dtype`` first and the exact analysis uses the rounded
        values. ``upstream`` only for ``reduction="none"``.
      dtype: ``"float16"``, ``"float32"`` or ``"float64"`` (default float64, as
        :func:`symjac.verify` and the command line; ask for float32 to check a
        float32 layer's rounding).
      timeout: seconds each call of the implementation may take (None: no limit);
        a call that takes longer is a ``timeout`` finding.

    Returns:
      The :class:`symjac.report.Report`; ``report.ok`` when there is no finding.

    Raises:
      SpecError: ``loss`` is not a valid spec for these inputs.
      InputError: bad inputs (shape, domain, class index, dtype, ...), named.

    Example::

        >>> import numpy as np, symjac
        >>> unscaled = lambda z, y: (1 / (1 + np.exp(-z)) - y).astype(z.dtype)
        >>> r = symjac.verify_loss(symjac.Loss("sigmoid_ce", scale=8), derivative=unscaled,
        ...                        pred=[0.0], label=[1.0])
        >>> r.categories()
        ['missing_scale']
    """
    return _verify(loss, derivative, forward, pred, label, upstream, dtype, timeout).report


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
            out = src.astype(dt)
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
    elif loss.kind == "softmax_ce" and loss.labels == "indices":
        raw = np.asarray(label)
        if raw.dtype.kind == "f":
            if not np.all(np.isfinite(raw)) or not np.all(raw == np.round(raw)):
                bad = int(np.flatnonzero(~(np.isfinite(raw) & (raw == np.round(raw))).reshape(-1))[0])
                raise InputError(
                    f"label{_index(raw.shape, bad)} = {raw.reshape(-1)[bad]!r} is not an integer class index"
                )
        elif raw.dtype.kind not in "iu":
            raise InputError(f"label has dtype {raw.dtype}; labels='indices' takes integer class indices")
        lab = raw.astype(np.int64)
    else:
        lab = cast("label", label)
    up = None if upstream is None else cast("upstream", upstream)
    return p, lab, up, rounded


@dataclasses.dataclass(frozen=True, eq=False)
class _Expected:
    """The exact derivative at the inputs: S·dL/dpred, the unscaled base, their Clarke
    intervals [lo, hi] (equal off kinks), and the derived bound B per entry (its floor
    everywhere, the full bound where asked: see :class:`Bounds`)."""

    value: np.ndarray
    base: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    base_lo: np.ndarray
    base_hi: np.ndarray
    floor: np.ndarray
    bounds: Bounds

    def bound(self, entries: np.ndarray | None = None) -> np.ndarray:
        """The full B at flat pred entries (all if None)."""
        return self.bounds.derivative(self.bounds.ev.loss.scale, entries)

    @classmethod
    def of(cls, ev: LossEvaluation, bounds: Bounds, dt: np.dtype[Any], shape: tuple[int, ...]) -> _Expected:
        lo, hi = ev.derivative_set()
        value = lo if ev.smooth else ev.derivative()  # off the kinks the Clarke set is the derivative
        fmax = _numbers.number(float(finfo(dt).max))
        big = np.flatnonzero(np.asarray(np.abs(value) > fmax, dtype=bool).reshape(-1))
        if big.size:
            j = int(big[0])
            raise InputError(
                f"the exact derivative at pred{_index(shape, j)} is {_show(value.reshape(-1)[j], 8)}, "
                f"beyond the range of {dt.name}: no {dt.name} implementation can return it; lower the scale or "
                "use a wider dtype"
            )
        blo, bhi = ev.derivative_set(Fraction(1))
        return cls(value, blo if ev.smooth else ev.derivative(Fraction(1)), lo, hi, blo, bhi, bounds.derivative(ev.loss.scale, floor=True),
                   bounds)


def _verify(
    loss: Loss,
    derivative: Callable[..., Any],
    forward: Callable[..., Any] | None,
    pred: Any,
    label: Any,
    upstream: Any,
    dtype: Any,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> _Outcome:
    check_loss(loss)
    if not callable(derivative):
        raise InputError(f"derivative={derivative!r} is not callable")
    if forward is not None and not callable(forward):
        raise InputError(f"forward={forward!r} is not callable")
    dt = float_dtype(dtype)
    p0, l0, u0, rounded = prepare_inputs(loss, pred, label, upstream, dt)
    # the loss values only for the forward check, the bounds where a verdict needs them (Bounds.fill)
    ev = evaluate(loss, p0, l0, u0, values=forward is not None, derivatives=True)
    findings: list[Finding] = []
    stats: dict[str, Any] = {
        "kind": loss.kind,
        "reduction": loss.reduction,
        "scale": loss.scale,
        "dtype": dt.name,
        "unit_roundoff": f"2^-{int(finfo(dt).nmant) + 1}",
        "elements": int(p0.size),
        "inputs_rounded": rounded,
        "dps": ev.dps,
    }
    bounds = Bounds(ev, dt)
    args_of = _ArgFactory(loss, p0, l0, u0)
    with _numbers.context():
        ex = _Expected.of(ev, bounds, dt, p0.shape)
        deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
        out1 = _purity_calls(deriv, args_of, ex, dt, findings)
        scale_found = _check_values(out1, ex, ev, dt, stats, findings)
        if forward is not None:
            fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
            _ForwardCheck(fwd, ev, bounds, args_of, dt, stats, findings).run(out1, ex, scale_found)
    stats["checksums"] = {
        name: sha256(a) for name, a in zip(("pred", "label", "upstream"), args_of.originals()) if a is not None
    }
    return _Outcome(Report(f"{loss!r} in {dt.name}", tuple(findings), stats,
                           _headline(loss, p0.size, forward is not None, stats, findings)), out1, ex.value, ex.base)


def _purity_calls(deriv: Guard, args_of: _ArgFactory, ex: _Expected, dt: np.dtype[Any],
                  findings: list[Finding]) -> np.ndarray | None:
    """Three derivative calls: on buffers kept to check for mutation, again on the same
    buffers (what a mutation does to the next call), and on equal fresh inputs
    (determinism). Returns the first call's output (None if unusable)."""
    shape = args_of.pred.shape
    bufs = args_of.fresh()
    out1 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred")
    mutated = sorted(deriv.mutated)
    out2 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred", again=True)
    if out1 is not None and out2 is not None and not same(out1, out2):
        if not mutated:
            deriv.compare(out1, out2, "pred")
        elif (fit2 := _Misfit.of(out2, ex, dt)).bad:
            bad2 = fit2.bad
            j, err_ulp, bound_ulp = bad2[0]
            findings.append(Finding(
                "wrong_values",
                f"called again on the same buffers, {len(bad2)} of {out2.size} derivative values are wrong "
                f"(it read back the {' and '.join(mutated)} the first call overwrote); worst at "
                f"pred{_index(shape, j)}: error {err_ulp:.3g} ulp > bound {bound_ulp:.3g} ulp",
                cells=(tuple(_index(shape, j)),),
                expected=_numbers.to_mpf(ex.value.reshape(-1)[j]),
                observed=float(out2.reshape(-1)[j]),
            ))
    out3 = deriv.array(*args_of.fresh(), shape=shape, dtype=dt, index_name="pred")
    if out1 is not None and out3 is not None:
        deriv.compare(out3, out1, "pred")
    return out1


def _check_values(out: np.ndarray | None, ex: _Expected, ev: LossEvaluation, dt: np.dtype[Any],
                  stats: dict[str, Any], findings: list[Finding]) -> Fraction | None:
    """The derivative against the exact one; a scale finding names c. Returns the c found."""
    if out is None:
        return None
    fit = _Misfit.of(out, ex, dt)
    bad = fit.bad
    stats["max_error_ulps"] = fit.worst_error
    stats["bound_ulps_at_worst"] = fit.worst_bound
    stats["values_within_bound"] = not bad
    if not bad:
        return None
    return _classify(out, ex.value, ex.base, ex.base_lo, ex.base_hi, ex.bound(), ev.loss.scale, ev, dt,
                     out.shape, bad, findings)


def _headline(loss: Loss, n: int, with_forward: bool, stats: dict[str, Any], findings: list[Finding]) -> str:
    if findings:
        cats = list(dict.fromkeys(f.category for f in findings))
        return f"{loss.kind} in {stats['dtype']}: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    headline = (
        f"{loss.kind} in {stats['dtype']}: {n} derivative values within the derived bound "
        f"(worst {float(stats.get('max_error_ulps', 0)):.3g} ulp, bound there "
        f"{float(stats.get('bound_ulps_at_worst', 0)):.3g} ulp)"
    )
    if with_forward and "fd_checked" not in stats and str(stats.get("fd", "")).startswith("skipped: the exact loss"):
        headline += "; forward right (the exact loss overflows: inf); no finite differences"
    elif with_forward:
        headline += f"; forward within bound; FD-consistent at {stats.get('fd_checked', 0)} points"
    return headline


class _ArgFactory:
    """Fresh copies of the call arguments, in the order the callables take them."""

    def __init__(self, loss: Loss, pred: np.ndarray, label: np.ndarray | None, upstream: np.ndarray | None):
        self.pred, self.label, self.upstream = pred, label, upstream
        self.with_upstream = loss.reduction == "none"
        self.names = ("pred", "label", "upstream") if self.with_upstream else ("pred", "label")

    def originals(self) -> tuple[np.ndarray | None, ...]:
        return (self.pred, self.label, self.upstream) if self.with_upstream else (self.pred, self.label)

    def fresh(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        p = (self.pred if pred is None else pred).copy()
        lab = None if self.label is None else self.label.copy()
        if self.with_upstream:
            assert self.upstream is not None
            return (p, lab, self.upstream.copy())
        return (p, lab)

    def forward_args(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        return self.fresh(pred)[:2]


def _dist(o: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Elementwise distance of o from [lo, hi] (MPFR arrays)."""
    with _numbers.context():
        return np.asarray(np.where(o < lo, lo - o, np.where(o > hi, o - hi, 0)), dtype=object)


@dataclasses.dataclass(frozen=True)
class _Misfit:
    """Observed values against [lo - B, hi + B]: the largest error and the bound there
    in ULPs, and ``bad``: (flat index, error ulp, bound ulp) outside, worst first. The
    full bound is formed only where a value is beyond its floor, and at the worst."""

    worst_error: float
    worst_bound: float
    bad: list[tuple[int, float, float]]

    @classmethod
    def of(cls, out: np.ndarray, ex: _Expected, dt: np.dtype[Any]) -> _Misfit:
        obs = _numbers.from_floats(out).reshape(-1)
        lo, hi = ex.lo.reshape(-1), ex.hi.reshape(-1)
        dist = _dist(obs, lo, hi)
        beyond_floor = np.flatnonzero(np.asarray(dist > ex.floor, dtype=bool))
        worst = int(np.argmax(ulps(dist.astype(np.float64), cls._size(obs, lo, hi, np.arange(dist.size), dt), dt)))
        look = np.unique(np.append(beyond_floor, worst))
        bound, size = ex.bound(look), cls._size(obs, lo, hi, look, dt)
        err, bnd = ulps(dist[look].astype(np.float64), size, dt), ulps(bound.astype(np.float64), size, dt)
        outside = np.asarray(dist[look] > bound, dtype=bool)
        bad = sorted(((int(look[k]), float(err[k]), float(bnd[k])) for k in np.flatnonzero(outside)),
                     key=lambda t: -t[1])
        at = int(np.searchsorted(look, worst))
        return cls(float(err[at]), float(bnd[at]), bad)

    @staticmethod
    def _size(obs: np.ndarray, lo: np.ndarray, hi: np.ndarray, j: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
        """max(|o|, |lo|, |hi|) at entries j, as float64 (at most the dtype's largest finite value)."""
        size = np.maximum(np.maximum(np.abs(obs[j]), np.abs(lo[j])), np.abs(hi[j])).astype(np.float64)
        return np.asarray(np.minimum(size, float(finfo(dt).max)))


def _fits(out: np.ndarray, blo: np.ndarray, bhi: np.ndarray, bnd: np.ndarray, c: Any, s: Fraction) -> bool:
    """Are the observed values c·dL/dpred, within the bound (scaled up by |c|/S when |c| > S)?"""
    with _numbers.context():
        ratio = max(1, abs(c) / _numbers.number(s))
        a, b = c * blo.reshape(-1), c * bhi.reshape(-1)
        dist = _dist(_numbers.from_floats(out).reshape(-1), np.minimum(a, b), np.maximum(a, b))
        return not np.any(np.asarray(dist > bnd.reshape(-1) * ratio, dtype=bool))


def _classify(
    out: np.ndarray,
    expected: np.ndarray,
    base: np.ndarray,
    blo: np.ndarray,
    bhi: np.ndarray,
    bnd: np.ndarray,
    s: Fraction,
    ev: LossEvaluation,
    dt: np.dtype[Any],
    shape: tuple[int, ...],
    bad: list[tuple[int, float, float]],
    findings: list[Finding],
) -> Fraction | None:
    """missing_scale, wrong_scale (c named) or wrong_values; returns the c found."""
    j, err_ulp, bound_ulp = bad[0]
    where = _index(shape, j)
    worst = (
        f"worst at pred{where}: expected {_show(expected.reshape(-1)[j])}, observed "
        f"{float(out.reshape(-1)[j])!r}, error {err_ulp:.3g} ulp > bound {bound_ulp:.3g} ulp"
    )
    cells = tuple(tuple(_index(shape, b[0])) for b in bad)

    def report(category: str, message: str) -> None:
        findings.append(Finding(category, message, cells=cells, expected=_numbers.mpf_array(expected), observed=out))

    if s != 1 and _fits(out, blo, bhi, bnd, 1, s):
        report("missing_scale", f"missing loss scale: the derivative equals the unscaled dL/dpred; expected "
                                f"S·dL/dpred with S = {s} ({len(bad)} of {out.size} values off; {worst})")
        return Fraction(1)
    c = _least_squares_scale(out, base, blo, bhi)
    if c is not None and c != 0:
        nice = _nice_scale(c)
        for cand, shown in ((_numbers.number(nice), nice), (c, None)):
            if cand != _numbers.number(s) and _fits(out, blo, bhi, bnd, cand, s):
                name = str(shown) if shown is not None else _show(c)
                hint = (_scale_hint(shown, s, ev.denominator, int(ev.counted.sum()), ev.loss.reduction, shape)
                        if shown is not None else "")
                report("wrong_scale", f"wrong loss scale: the derivative equals c·dL/dpred with c = {name}{hint}; "
                                      f"expected S·dL/dpred with S = {s} ({worst})")
                return shown if shown is not None else Fraction(float(c))
    zeros = " (all zeros)" if not np.any(out) else ""
    report("wrong_values", f"{len(bad)} of {out.size} derivative values are outside the derived bound{zeros}; "
                           f"no single factor c makes them c·dL/dpred; {worst}")
    return None


def _least_squares_scale(out: np.ndarray, base: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> Any:
    """The c minimising Σ (o - c·b)² over the smooth nonzero entries b of dL/dpred (None if there are none)."""
    with _numbers.context():
        b = base.reshape(-1)
        smooth = np.asarray((blo.reshape(-1) == bhi.reshape(-1)) & (b != 0), dtype=bool)
        if not smooth.any():
            return None
        obs = _numbers.from_floats(out.reshape(-1)[smooth])
        return _numbers.total(obs * b[smooth]) / _numbers.total(b[smooth] * b[smooth])


def _fd_step(loss: Loss, z: float, dt: np.dtype[Any], u: Any) -> float | None:
    h = 2.0 ** round(math.log2(float(u) ** (1 / 3) * max(1.0, abs(z))))
    if loss.kind == "bce":
        room = min(z, 1 - z) / 2
        h = min(h, 2.0 ** np.floor(np.log2(room)))
    elif loss.kind == "kld" and not loss.log_input:
        if z >= 1:
            return None
        room = min(z / 2, 1 - z)
        h = min(h, 2.0 ** np.floor(np.log2(room)))
    return h


@dataclasses.dataclass
class _Probe:
    """One finite-difference probe at pred element j: S·(F(z+) - F(z-))/(z+ - z-), the
    derivative there, and the tolerance (derivative bound + truncation + forward noise)."""

    j: int
    fd: Any
    observed: Any
    tol: Any
    bad: bool


class _ForwardCheck:
    """The forward against the exact loss, then the derivative against central
    differences of that forward (bounds in the module docstring)."""

    def __init__(self, fwd: Guard, ev: LossEvaluation, bounds: Bounds, args_of: _ArgFactory, dt: np.dtype[Any],
                 stats: dict[str, Any], findings: list[Finding]):
        self.fwd, self.ev, self.bounds, self.args_of, self.dt = fwd, ev, bounds, args_of, dt
        self.stats, self.findings = stats, findings
        self.sums = ForwardSums(bounds, full=False)  # made full where the floor fails (see Bounds)
        self.forward_ok = True
        self.stencil_value: str | None = None  # the forward at a stencil point beyond its bound

    def value(self, pred: np.ndarray | None = None) -> np.ndarray | None:
        """The implementation's forward at pred (default: the base point), float64, or None.

        At the base point, +-inf is right where the exact loss rounds to it in the dtype.
        """
        none = self.ev.loss.reduction == "none"
        out = self.fwd.array(*self.args_of.forward_args(pred), shape=self.ev.element_shape if none else (),
                             dtype=None, index_name="loss",
                             shape_note=" (reduction='none': one loss per element)" if none else "",
                             infinite=self.rounded() if pred is None else None)
        return None if out is None else out.astype(np.float64)

    def rounded(self) -> np.ndarray:
        """The exact loss (per element for "none") correctly rounded to the dtype: inf where it overflows."""
        exact = self.ev.elements.reshape(-1) if self.ev.loss.reduction == "none" else [self.ev.value()]
        return to_numpy(exact, self.dt).astype(np.float64).reshape(self.ev.element_shape
                                                                   if self.ev.loss.reduction == "none" else ())

    def run(self, out1: np.ndarray | None, ex: _Expected, scale_found: Fraction | None) -> None:
        f0 = self.value()
        if f0 is None:
            self.stats["fd"] = "skipped: the forward gave no usable value"
            return
        self.forward_ok = self.check_base(f0)
        if not np.isfinite(f0).all():
            self.stats["fd"] = f"skipped: the exact loss overflows {self.dt.name} (the forward rightly returns inf)"
            return
        if out1 is None:
            self.stats["fd"] = "skipped: the derivative gave no usable value"
            return
        self.finite_differences(out1, ex, scale_found)

    def check_base(self, f0: np.ndarray) -> bool:
        """Forward values at the given inputs: per element ("none"), or the reduced L."""
        ev, dt = self.ev, self.dt
        rounded = self.rounded().reshape(-1)
        got = f0.reshape(-1)
        right_inf = np.isinf(got) & (got == rounded)  # the exact value overflows the dtype: inf is right
        while True:
            with _numbers.context():
                if ev.loss.reduction == "none":
                    exact, bound = self.sums.ells, self.sums.errs
                else:
                    phi, b = self.sums.at()
                    exact, bound = np.array([phi], dtype=object), np.array([b], dtype=object)
                error = np.abs(_numbers.from_floats(np.where(right_inf, 0, got)) - exact)
                wrong = np.flatnonzero(np.asarray(error > bound, dtype=bool) & ~right_inf)
            if not wrong.size:
                return True
            if self.sums.full:
                break
            self.sums = ForwardSums(self.bounds, full=True)
        with _numbers.context():
            i = int(wrong[0])
            e, b, v = exact[i], bound[i], float(got[i])
            ulp = ulp_mp(dt, abs(e))
            detail = f"{_show(e)}, error {float(error[i] / ulp):.3g} ulp > bound {float(b / ulp):.3g} ulp"
        if ev.loss.reduction == "none":
            where = tuple(_index(ev.element_shape, i))
            message = f"forward element {list(where)} = {v!r}; exact {detail}"
        else:
            where, message = None, f"forward returned {v!r}; exact L = {detail}"
        self.findings.append(Finding("forward_values", message, window=where, expected=_numbers.to_mpf(e), observed=v))
        return False

    def finite_differences(self, out1: np.ndarray, ex: _Expected, scale_found: Fraction | None) -> None:
        """Probe up to :data:`MAX_FD_PROBES` elements, evenly spread; report the worst misfit."""
        pred = self.args_of.pred
        n = pred.size
        probes = sorted(set(np.linspace(0, n - 1, min(n, MAX_FD_PROBES)).round().astype(int).tolist()))
        stencils = [st for st in self.stencils(probes) if self.observe(st)]
        bound = ex.bound(np.array([st.j for st in stencils], dtype=np.intp))
        checked = self.judge(stencils, out1, bound)
        if (any(p.bad for p in checked) or self.stencil_value is not None) and not self.sums.full:
            self.sums, self.stencil_value = ForwardSums(self.bounds, full=True), None
            checked = self.judge(stencils, out1, bound)
        fd_bad = [p for p in checked if p.bad]
        with _numbers.context():
            worst = max((abs(p.observed - p.fd) / p.tol if p.tol > 0 else
                         (gmpy2.inf() if p.observed != p.fd else 0) for p in checked), default=0)
        if self.stencil_value is not None:
            self.findings.append(Finding("forward_values", self.stencil_value))
        self.stats["fd_checked"] = len(checked)
        self.stats["fd_skipped"] = len(probes) - len(checked)
        self.stats["fd_worst_error_over_tolerance"] = float(worst)
        self.stats["fd_consistent"] = not fd_bad
        if not fd_bad or scale_found is not None:
            return
        with _numbers.context():
            p = max(fd_bad, key=lambda t: abs(t.observed - t.fd) / t.tol)
        why = "" if self.forward_ok else " (the forward itself disagrees with the exact loss: see forward_values)"
        self.findings.append(Finding(
            "not_fd_consistent",
            f"the derivative is not S times the derivative of the implementation's own forward at {len(fd_bad)} of "
            f"{len(checked)} probed elements{why}; worst at pred{_index(pred.shape, p.j)}: S·(F(z+h) - F(z-h))/2h = "
            f"{_show(p.fd)}, derivative {float(p.observed)!r}, tolerance {_show(p.tol, 3)} "
            "(truncation + forward rounding + derivative bound)",
            cells=tuple(tuple(_index(pred.shape, b.j)) for b in fd_bad), expected=_numbers.to_mpf(p.fd),
            observed=float(p.observed)))

    def _point(self, j: int) -> tuple[int, int, float] | None:
        """(element, slot in the template's arguments, z) of pred entry j, or None if it does not count."""
        ev, pred = self.ev, self.args_of.pred
        where = _index(pred.shape, j)
        softmax = ev.loss.kind == "softmax_ce"
        i_flat = int(np.ravel_multi_index(tuple(where[:-1]) if softmax else tuple(where), ev.element_shape)) \
            if ev.element_shape else 0
        if not ev.counted.reshape(-1)[i_flat] or ev.expand(ev.factor).reshape(-1)[j] == 0:
            return None
        return i_flat, where[-1] if softmax else 0, float(pred.reshape(-1)[j])

    def stencils(self, probes: list[int]) -> list[_Stencil]:
        """The stencils z± around the probed entries, with the exact loss at both points
        (one batch), where a centred stencil fits: not across a kink, inside the domain,
        on an element that counts."""
        ev, dt = self.ev, self.dt
        kept: list[_Stencil] = []
        for j in probes:
            point = self._point(j)
            h = None if point is None else _fd_step(ev.loss, point[2], dt, self.bounds.u)
            if point is None or h is None:
                continue
            i_flat, slot, z = point
            zp, zm = dt.type(z + h), dt.type(z - h)
            step = _frac(zp) - _frac(zm)
            if step <= 0 or (ev.loss.kind == "bce" and not (0 < zm and zp < 1)) or (
                    ev.loss.kind == "kld" and not ev.loss.log_input and not (0 < zm and zp <= 1)):
                continue
            kept.append(_Stencil(j, i_flat, slot, zp, zm, step))
        if not kept:
            return []
        cols = [np.array([c[st.i_flat] for st in kept for _ in range(3)], dtype=object) for c in ev.columns]
        for k, st in enumerate(kept):
            cols[st.slot][3 * k], cols[st.slot][3 * k + 2] = _numbers.from_floats(np.array([st.zp, st.zm]))
        if ev.template.kink_args:  # the signs of every kink argument at z+, z, z- must agree and not vanish
            with _numbers.context():
                signs = np.stack([np.asarray(k > 0, dtype=int) - np.asarray(k < 0, dtype=int) for k in
                                  ev.template.kink_values(cols)], axis=1)
            signs = signs.reshape(len(kept), 3, -1)
            smooth = np.all((signs != 0) & (signs == signs[:, :1]), axis=(1, 2))
            kept = [st for st, ok in zip(kept, smooth) if ok]
            cols = [c.reshape(-1, 3)[smooth].reshape(-1) for c in cols]
        got = element_values(ev.template, [c.reshape(-1, 3)[:, ::2].reshape(-1) for c in cols], values=True,
                             derivatives=False, bounds=True, bounds_of=("loss",))  # the forward bounds at z±
        for k, st in enumerate(kept):
            st.exact = [(got["elements"][2 * k + m], got["element_cond"][2 * k + m], got["element_run"][2 * k + m])
                        for m in (0, 1)]
        return kept

    def observe(self, st: _Stencil) -> bool:
        """The implementation's Φ at z+ and z- (False if a call gave no usable value)."""
        for zz in (st.zp, st.zm):
            pz = self.args_of.pred.copy()
            pz.reshape(-1)[st.j] = zz
            val = self.value(pz)
            if val is None:
                return False
            st.observed.append(self.sums.observed(val))
        return True

    def judge(self, stencils: list[_Stencil], out1: np.ndarray, bound: np.ndarray) -> list[_Probe]:
        """Each observed stencil's central difference against the derivative, with its
        tolerance (derivative bound + truncation + forward bounds at z±, over the step)."""
        ev = self.ev
        probes = []
        with _numbers.context():
            s = _numbers.number(ev.loss.scale)
            for st, b in zip(stencils, bound):
                (phi_p, err_p), (phi_m, err_m) = (self.sums.at(st.i_flat, *e) for e in st.exact)
                r = _numbers.number(ev.factor.reshape(-1)[st.i_flat])
                dstep = _numbers.number(st.step)
                # Φ(z+) - Φ(z-) = r_i·(ℓ(z+) - ℓ(z-)): formed from the two elements, not the two sums
                trunc = r * (st.exact[0][0] - st.exact[1][0]) / dstep - r * ev.h.reshape(-1)[st.j]
                for o, p_, e_, zz in zip(st.observed, (phi_p, phi_m), (err_p, err_m), (st.zp, st.zm)):
                    if self.forward_ok and abs(o - p_) > e_ and self.stencil_value is None:
                        self.stencil_value = (
                            f"forward at pred{_index(self.args_of.pred.shape, st.j)} = {float(zz)!r} (a "
                            f"finite-difference point) gives {_show(o)}; exact {_show(p_)}, beyond the bound "
                            f"{_show(e_, 3)}")
                tol = b + s * (abs(trunc) + (err_p + err_m) / dstep)
                fd = s * (st.observed[0] - st.observed[1]) / dstep
                observed = _numbers.number(float(out1.reshape(-1)[st.j]))
                probes.append(_Probe(st.j, fd, observed, tol, abs(observed - fd) > tol))
        return probes


@dataclasses.dataclass
class _Stencil:
    """The representable points z± = fl(z ± h) around pred entry j (element i_flat,
    template argument ``slot``), and the exact (ℓ, cond, run) at each."""

    j: int
    i_flat: int
    slot: int
    zp: Any
    zm: Any
    step: Fraction
    exact: list[tuple[Any, Any, Any]] = dataclasses.field(default_factory=list)
    observed: list[Any] = dataclasses.field(default_factory=list)  # the implementation's Φ at z+, z-
