"""verify_loss's route for a kind evaluated whole (:attr:`symjac.loss._kind.LossKind.whole`: ctc).

The implementation is called as PyTorch's functional losses take a sequence loss:
``derivative(log_probs, targets, input_lengths, target_lengths)`` -> ``S·dL/dlog_probs``
(``..., upstream)`` for ``reduction="none"``: the VJP with one upstream gradient per item),
``forward(log_probs, targets, input_lengths, target_lengths)`` -> ``L`` (one number; one per
item for ``"none"``). The label given to :func:`symjac.verify_loss` is the tuple
``(targets, input_lengths, target_lengths)``.

Every call goes through the guarded call (:class:`symjac.check._call.Guard`): raising, a
wrong shape or dtype, NaN/inf where the exact value is finite, changing the inputs in place,
a timeout are findings. The derivative is compared entry by entry with the kind's exact
derivative within its derived bound (:meth:`~symjac.loss._kinds.ctc.CtcEvaluation.derivative_bound`);
at an impossible alignment without ``zero_infinity`` (no derivative: the loss is +inf around
it) NaN or 0 is accepted. A misfit is named by what explains every entry: ``missing_scale``
(the unscaled derivative), ``assumes_log_softmax`` (the derivative through a log_softmax the
input did not pass through: ``S·r_b·(e^x - γ)``, PyTorch's convention, which
``assume_log_softmax=True`` declares), ``wrong_scale`` (``"mean"`` without the division by
each target length), else ``wrong_values`` (with the upstream gradient ignored named). The
forward is compared with the exact ``L`` within its bound (``forward_values``; +inf where the
exact loss is), and the derivative with the central differences of the implementation's own
forward at a few entries per item, the truncation error computed exactly
(``not_fd_consistent``), as :mod:`symjac.verifiers.loss._verify`'s exact route does.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import DEFAULT_TIMEOUT, Guard, same, sha256
from symjac.check._report import Finding, Report
from symjac.check._rounding import finfo, ulp_mp
from symjac.check._unsupported import cast_floats, unsupported
from symjac.loss import _numbers
from symjac.loss._spec import Loss, kind_of

#: at most this many finite-difference probes (two per item).
MAX_PROBES = 8
_UPSTREAM = np.array([0.5, -1.0, 1.5, 2.0, -0.25, 0.75])


def verify_whole(loss: Loss, derivative: Any, forward: Any, pred: Any, label: Any, upstream: Any, dtype: Any,
                 timeout: float | None, hvp: Any, families: Any, dtype_of: Any) -> Report:
    """:func:`symjac.verify_loss` of a kind evaluated whole: its derivative and forward (no hvp, no
    extra families: refused, named); ``dtype_of(dtype, pred, label)`` is verify_loss's dtype rule."""
    if hvp is not None:
        raise InputError(f"hvp= is not checked for kind={loss.kind!r} (a loss evaluated whole has no second-"
                         "derivative rule here); verify the derivative and forward")
    if families:
        raise InputError(f"families={tuple(families)!r}: kind={loss.kind!r} has no extra input families")
    if derivative is None:
        raise InputError("verify_loss needs the implementation: give derivative=(log_probs, targets, "
                         "input_lengths, target_lengths) -> S·dL/dlog_probs")
    return verify_sequence(loss, derivative, forward, pred, label, upstream, dtype_of(dtype, pred, label), timeout)


def verify_sequence(loss: Loss, derivative: Any, forward: Any, pred: Any, label: Any, upstream: Any,
                    dt: np.dtype[Any], timeout: float | None = DEFAULT_TIMEOUT) -> Report:
    """The sequence route of :func:`symjac.verify_loss` (see the module docstring)."""
    if not callable(derivative):
        raise InputError(f"derivative={derivative!r} is not callable")
    if forward is not None and not callable(forward):
        raise InputError(f"forward={forward!r} is not callable")
    kind = kind_of(loss)
    if pred is None:
        if label is not None:
            raise InputError("label is given without pred; give both (or neither, for the default inputs)")
        pred, label = kind.default_inputs(loss)
    elif label is None:
        raise InputError("label is None; kind='ctc' needs (targets, input_lengths, target_lengths)")
    p0, rounded = _cast(pred, dt)
    ev = kind.evaluate_whole(loss, p0.astype(np.float64), label, None)
    u0 = None
    if loss.reduction == "none":
        u0, _ = _cast(np.resize(_UPSTREAM, (ev.batch,)) if upstream is None else upstream, dt)
        ev = kind.evaluate_whole(loss, p0.astype(np.float64), label, u0.astype(np.float64))
    elif upstream is not None:
        raise InputError(f"upstream is given but reduction={loss.reduction!r}: the derivative of a reduced loss "
                         "takes no upstream gradient (use reduction='none' for a VJP)")
    args = _Args(p0, label, u0)
    findings: list[Finding] = []
    notes: list[str] = []
    stats: dict[str, Any] = {"kind": loss.kind, "reduction": loss.reduction, "scale": loss.scale, "dtype": dt.name,
                             "unit_roundoff": f"2^-{int(finfo(dt).nmant) + 1}", "elements": int(p0.size),
                             "inputs_rounded": rounded, "batch": ev.batch,
                             "impossible_alignments": int((~ev.feasible).sum())}
    deriv = Guard(derivative, "derivative", args.names, findings, timeout=timeout)
    out = _derivative_calls(deriv, args, ev, dt, stats, notes)
    if out is not None:
        _check_derivative(out, ev, dt, args, stats, findings)
    fwd = None
    if forward is not None:
        fwd = Guard(forward, "forward", args.names[:4], findings, timeout=timeout)
        if _check_forward(fwd, args, ev, dt, stats, findings) and out is not None:
            _check_fd(fwd, out, args, ev, dt, stats, findings)
    for guard in (deriv, fwd):
        if guard is not None:
            guard.finish()
    stats["checksums"] = {"pred": sha256(p0)}
    report = Report(f"{loss!r} in {dt.name}", tuple(findings), stats, _headline(loss, stats, findings),
                    tuple(notes))
    if findings:  # a dtype the implementation rejects on every call: unsupported, not a defect
        report = unsupported(report, dt, [(deriv, lambda other: cast_floats(args.fresh(), other)),
                                          (fwd, lambda other: cast_floats(args.fresh()[:4], other))])
    return report


def _cast(values: Any, dt: np.dtype[Any]) -> tuple[np.ndarray, bool]:
    src = np.asarray(values)
    if src.dtype.kind not in "iuf" and src.dtype != dt:
        raise InputError(f"an input has dtype {src.dtype}; give real numbers")
    out = src.astype(dt)
    with np.errstate(invalid="ignore"):
        return out, not np.array_equal(out.astype(np.float64), src.astype(np.float64), equal_nan=True)


class _Args:
    """Fresh copies of the call arguments: log_probs, targets, input_lengths, target_lengths[, upstream]."""

    def __init__(self, pred: np.ndarray, label: Any, upstream: np.ndarray | None):
        self.pred, self.upstream = pred, upstream
        self.label = tuple(np.asarray(v).astype(np.int64) for v in label)
        self.names = ("log_probs", "targets", "input_lengths", "target_lengths") + \
            (("upstream",) if upstream is not None else ())

    def fresh(self, pred: np.ndarray | None = None) -> tuple[Any, ...]:
        p = (self.pred if pred is None else pred).copy()
        rest = tuple(v.copy() for v in self.label)
        return (p, *rest) + ((self.upstream.copy(),) if self.upstream is not None else ())


def _derivative_calls(deriv: Guard, args: _Args, ev: Any, dt: np.dtype[Any], stats: dict[str, Any],
                      notes: list[str]) -> np.ndarray | None:
    """Two derivative calls on equal fresh inputs: bitwise equal, or both within the bound (a note)."""
    mask = _impossible(ev, args.pred.shape)
    out1 = deriv.array(*args.fresh(), shape=args.pred.shape, dtype=dt, index_name="log_probs", nonfinite=mask)
    out2 = deriv.array(*args.fresh(), shape=args.pred.shape, dtype=dt, index_name="log_probs", nonfinite=mask)
    if out1 is not None and out2 is not None and not same(out1, out2):
        expected, bound = ev.derivative(), ev.derivative_bound(dt)
        zi = bool(ev.loss.zero_infinity)
        if _misfits(out1, expected, bound, mask, zi).size or _misfits(out2, expected, bound, mask, zi).size:
            deriv.compare(out1, out2, "log_probs")
        else:
            differ = int(np.count_nonzero(out1 != out2))
            stats["nondeterminism"] = {"derivative": {"elements": differ, "of": int(out1.size)}}
            notes.append(f"derivative gave bitwise different results for equal inputs at {differ} of {out1.size} "
                         "elements, each within the derived bound of the exact value: a note, not a finding")
    return out1


def _impossible(ev: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The entries of the items without an alignment (their derivative NaN or 0 by convention)."""
    return np.broadcast_to(~ev.feasible[None, :, None], shape)


def _misfits(out: np.ndarray, expected: np.ndarray, bound: np.ndarray, mask: np.ndarray,
             zero_infinity: bool = False) -> np.ndarray:
    """Flat entries outside ``expected ± bound``; at ``mask`` (an impossible alignment) 0 passes, and
    NaN too without ``zero_infinity`` (no derivative: the loss is +inf around it)."""
    with _numbers.context():
        obs = _numbers.from_floats(out.astype(np.float64)).reshape(-1)
        exp, bnd, m = expected.reshape(-1), bound.reshape(-1), np.asarray(mask).reshape(-1)
        flat = out.reshape(-1).astype(np.float64)
        bad = np.zeros(flat.size, dtype=bool)
        free = ~m
        bad[free] = np.asarray(~(abs(obs[free] - exp[free]) <= bnd[free]), dtype=bool)
        bad[m] = ~((np.isnan(flat[m]) & (not zero_infinity)) | (flat[m] == 0))
    return np.flatnonzero(bad)


def _check_derivative(out: np.ndarray, ev: Any, dt: np.dtype[Any], args: _Args, stats: dict[str, Any],
                      findings: list[Finding]) -> None:
    """The derivative against the exact one; a misfit named by what explains it (module docstring)."""
    mask = _impossible(ev, out.shape)
    expected, bound = ev.derivative(), ev.derivative_bound(dt)
    bad = _misfits(out, expected, bound, mask, bool(ev.loss.zero_infinity))
    worst_err, worst_bound = _worst(out, expected, bound, mask, dt)
    stats.update(max_error_ulps=worst_err, bound_ulps_at_worst=worst_bound, values_within_bound=not bad.size)
    if not bad.size:
        return
    category, why = _explain(out, ev, dt, mask)
    j = int(bad[0])
    where = [int(i) for i in np.unravel_index(j, out.shape)]
    with _numbers.context():
        no_derivative = mask.reshape(-1)[j] and not ev.loss.zero_infinity
        shown = "NaN or 0" if no_derivative else str(float(expected.reshape(-1)[j]))
    findings.append(Finding(category, f"{len(bad)} of {out.size} derivative values outside the derived bound"
                            f"{why}; first at log_probs{where}: expected {shown}, got {float(out.reshape(-1)[j])!r}",
                            cells=(tuple(int(i) for i in where),), expected=shown,
                            observed=float(out.reshape(-1)[j])))


def _worst(out: np.ndarray, expected: np.ndarray, bound: np.ndarray, mask: np.ndarray,
           dt: np.dtype[Any]) -> tuple[float, float]:
    """The largest error in ulps (at the entries with a derivative) and the bound there, in ulps."""
    worst = (0.0, 0.0)
    with _numbers.context():
        for j in np.flatnonzero(~np.asarray(mask).reshape(-1)):
            e, o = expected.reshape(-1)[j], float(out.reshape(-1)[j])
            if not math.isfinite(o):
                return math.inf, float(bound.reshape(-1)[j] / ulp_mp(dt, e))
            ulp = ulp_mp(dt, max(abs(e), abs(_numbers.number(o))))
            err = float(abs(_numbers.number(o) - e) / ulp)
            if err > worst[0]:
                worst = (err, float(bound.reshape(-1)[j] / ulp))
    return worst


def _explain(out: np.ndarray, ev: Any, dt: np.dtype[Any], mask: np.ndarray) -> tuple[str, str]:
    """The finding's category and why, from the explanations that fit every entry."""
    loss = ev.loss
    through = bool(loss.assume_log_softmax)
    candidates: list[tuple[str, str, np.ndarray, np.ndarray]] = []
    if loss.scale != 1:
        candidates.append(("missing_scale", f": they equal the unscaled dL/dlog_probs, the loss scale S = "
                           f"{loss.scale} is missing", ev.derivative(Fraction(1)), ev.derivative_bound(dt, Fraction(1))))
    if not through:
        candidates.append(("assumes_log_softmax", ": they equal S·r_b·(e^x - γ_b), the derivative through a "
                           "log_softmax the log-probabilities did not pass through (PyTorch ctc_loss's convention; "
                           "declare it with Loss('ctc', assume_log_softmax=True) if the input's own convention is "
                           "that)", ev.derivative(log_softmax=True), ev.derivative_bound(dt, log_softmax=True)))
    else:
        candidates.append(("wrong_values", ": they equal -S·r_b·γ_b, the derivative with respect to the "
                           "log-probabilities as given, where the spec declares assume_log_softmax=True",
                           ev.derivative(log_softmax=False), ev.derivative_bound(dt, log_softmax=False)))
    if loss.reduction == "mean":
        per = np.array([max(n, 1) for n in ev.target_lengths], dtype=object)[None, :, None]
        with _numbers.context():
            candidates.append(("wrong_scale", ": they equal the derivative of reduction='mean' without the "
                               "division by each item's target length (per item c = max(L_b, 1))",
                               ev.derivative() * per, ev.derivative_bound(dt) * per))
    if loss.reduction == "none":
        ones = ev.with_upstream(None)
        candidates.append(("wrong_values", ": they equal the derivative at an upstream gradient of ones: the "
                           "incoming gradient is ignored", ones.derivative(), ones.derivative_bound(dt)))
    zi = bool(loss.zero_infinity)
    for category, why, expected, bound in candidates:
        if not _misfits(out, expected, bound, mask, zi).size:
            return category, why
    if zi and not _misfits(out, ev.derivative(), ev.derivative_bound(dt), mask, False).size:
        return "wrong_values", (": at an impossible alignment the derivative is not zeroed though "
                                "zero_infinity=True (zero_infinity ignored)")
    return "wrong_values", ""


def _check_forward(fwd: Guard, args: _Args, ev: Any, dt: np.dtype[Any], stats: dict[str, Any],
                   findings: list[Finding]) -> bool:
    """The forward against the exact loss within its bound; True when it is right."""
    none = ev.loss.reduction == "none"
    value = np.asarray(ev.value(), dtype=object).reshape(-1)
    # +inf passes the guard at an impossible item (and a reduced loss holding one): compared below
    infinite = np.where(~ev.feasible, np.inf, 0.0) if none else np.inf if not ev.feasible.all() else 0.0
    shape = (ev.batch,) if none else ()
    got = fwd.array(*args.fresh()[:4], shape=shape, dtype=dt, index_name="loss", infinite=infinite)
    if got is None:
        return False
    bound = np.asarray(ev.value_bound(dt), dtype=object).reshape(-1)
    flat = got.reshape(-1).astype(np.float64)
    with _numbers.context():
        bad = [i for i in range(value.size)
               if (not _finite(value[i]) and flat[i] != math.inf)
               or (_finite(value[i]) and not (math.isfinite(flat[i])
                                              and abs(_numbers.number(flat[i]) - value[i]) <= bound[i]))]
    stats["forward_within_bound"] = not bad
    if bad:
        i = bad[0]
        where = f" at item {i}" if none else ""
        findings.append(Finding("forward_values", f"forward returned {float(flat[i])!r}{where}, the exact loss is "
                                f"{float(value[i])!r} (bound {float(bound[i]):.3g}){_forward_hint(ev, i, flat[i])}",
                                expected=str(float(value[i])), observed=float(flat[i])))
    return not bad


def _forward_hint(ev: Any, i: int, got: float) -> str:
    if ev.loss.zero_infinity and not ev.feasible.all() and got == math.inf:
        return ": an impossible alignment's infinite loss is not zeroed though zero_infinity=True"
    return ""


def _finite(v: Any) -> bool:
    import gmpy2

    return bool(gmpy2.is_finite(v))


def _check_fd(fwd: Guard, out: np.ndarray, args: _Args, ev: Any, dt: np.dtype[Any], stats: dict[str, Any],
              findings: list[Finding]) -> None:
    """The derivative against S times the central differences of the implementation's own forward."""
    if ev.loss.assume_log_softmax:
        stats["fd"] = "skipped: assume_log_softmax declares a derivative through a log_softmax the forward does not apply"
        return
    if ev.loss.reduction != "none" and ev.infinite().any():
        stats["fd"] = "skipped: the exact loss is +inf (an impossible alignment without zero_infinity)"
        return
    probes = _probes(ev)
    bound = ev.derivative_bound(dt)
    checked, failed = 0, []
    for j in probes:
        got = _fd_probe(fwd, out, args, ev, dt, j, bound.reshape(-1)[j])
        if got is None:
            return
        checked += 1
        if not got:
            failed.append(j)
    stats["fd_checked"], stats["fd_consistent"] = checked, not failed
    if failed and not findings:
        where = [int(i) for i in np.unravel_index(failed[0], out.shape)]
        findings.append(Finding("not_fd_consistent", f"the derivative is not S times the central differences of "
                                f"the implementation's own forward at {len(failed)} of {checked} probes; first at "
                                f"log_probs{where}", cells=(tuple(int(i) for i in where),)))


def _probes(ev: Any) -> list[int]:
    """Two entries per item with a derivative: its largest occupancy and a class outside its target."""
    frames, batch, classes = ev.pred.shape
    picks: list[int] = []
    for b in range(batch):
        if not ev.feasible[b] or ev.input_lengths[b] == 0:
            continue
        occ = np.array([[float(v) for v in row] for row in ev.occupancy[:, b, :]])
        t, c = np.unravel_index(int(np.argmax(occ)), occ.shape)
        picks.append(int(np.ravel_multi_index((t, b, c), ev.pred.shape)))
        outside = [k for k in range(classes) if k not in ev.targets[b] and k != ev.loss.blank]
        if outside:
            picks.append(int(np.ravel_multi_index((ev.input_lengths[b] - 1, b, outside[0]), ev.pred.shape)))
    return picks[:MAX_PROBES]


def _fd_probe(fwd: Guard, out: np.ndarray, args: _Args, ev: Any, dt: np.dtype[Any], j: int,
              b_j: Any) -> bool | None:
    """One probe: True consistent, False not, None when the forward failed (flagged)."""
    z = args.pred.reshape(-1)[j]
    u = float(finfo(dt).eps) / 2
    h = 2.0 ** math.floor(math.log2(u ** (1 / 3) * max(1.0, abs(float(z)))))
    points = []
    for sign in (1, -1):
        p = args.pred.copy()
        p.reshape(-1)[j] = dt.type(float(z) + sign * h)
        near = ev.at(p.astype(np.float64))
        none = ev.loss.reduction == "none"
        got = fwd.array(*args.fresh(p)[:4], shape=(ev.batch,) if none else (), dtype=dt, index_name="loss",
                        infinite=np.where(~near.feasible, np.inf, 0.0) if none else None)
        if got is None:
            return None
        points.append((p.reshape(-1)[j], near, got.reshape(-1).astype(np.float64)))
    (zp, evp, fp), (zm, evm, fm) = points
    with _numbers.context():
        width = _numbers.number(float(zp)) - _numbers.number(float(zm))
        phi_p, err_p, obs_p = _phi(evp, fp, dt)
        phi_m, err_m, obs_m = _phi(evm, fm, dt)
        s = _numbers.number(ev.loss.scale)
        exact = ev.derivative().reshape(-1)[j]
        trunc = abs(s * (phi_p - phi_m) / width - exact)
        fd = s * (obs_p - obs_m) / width
        return bool(abs(_numbers.number(float(out.reshape(-1)[j])) - fd) <= b_j + trunc + s * (err_p + err_m) / width)


def _phi(ev: Any, observed: np.ndarray, dt: np.dtype[Any]) -> tuple[Any, Any, Any]:
    """Φ (L, or Σ u_b·ℓ_b over the finite items for "none"), its bound, and the implementation's Φ."""
    if ev.loss.reduction != "none":
        return ev.value(), ev.value_bound(dt), _numbers.number(float(observed[0]))
    bounds = ev.value_bound(dt)
    keep = [b for b in range(ev.batch) if ev.feasible[b] or ev.loss.zero_infinity]
    w = [_numbers.number(ev.factor[b]) for b in keep]
    return (_numbers.total(wb * ev.elements[b] for wb, b in zip(w, keep)),
            _numbers.total(abs(wb) * bounds[b] for wb, b in zip(w, keep)),
            _numbers.total(wb * _numbers.number(float(observed[b])) for wb, b in zip(w, keep)))


def _headline(loss: Loss, stats: dict[str, Any], findings: list[Finding]) -> str:
    if findings:
        cats = list(dict.fromkeys(f.category for f in findings))
        return f"{loss.kind} in {stats['dtype']}: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    text = (f"{loss.kind} in {stats['dtype']}: {stats['elements']} derivative values within the derived bound "
            f"(worst {float(stats.get('max_error_ulps', 0)):.3g} ulp, bound there "
            f"{float(stats.get('bound_ulps_at_worst', 0)):.3g} ulp)")
    if stats.get("impossible_alignments"):
        text += f"; {stats['impossible_alignments']} impossible alignment(s), at the convention there (zero_infinity={bool(loss.zero_infinity)})"
    if "forward_within_bound" in stats:
        text += f"; forward within bound; FD-consistent at {stats.get('fd_checked', 0)} points"
        if "fd" in stats:
            text += f" ({stats['fd']})"
    return text
