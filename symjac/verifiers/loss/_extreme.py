"""verify_loss's ``extreme`` family: one derivative call (and one forward call) at magnitudes
where a naive float evaluation overflows or cancels and a correct one stays finite.

The inputs are the kind's (:meth:`symjac.loss._kind.LossKind.extreme_inputs`), exact in the
dtype; the exact values there come from the stable forms (log-sum-exp shifted by its max,
log1p of e^-|z|: :mod:`symjac.loss._kinds`), at :data:`symjac.loss._spec.DPS` digits, with
the rounding bounds of :mod:`symjac.loss._bounds`, as at the default inputs. Every exact
derivative there is finite in the dtype (else the family is skipped, and the stats say why:
a loss scale that pushes it beyond the range), so a NaN or an inf in the derivative is a
``bad_output`` finding naming the entry, its prediction and its exact value; a finite value
beyond its bound is the exact route's ``missing_scale``/``wrong_scale``/``wrong_values``;
the forward is checked as at the default inputs (an inf where the exact loss overflows the
dtype is right), finite differences included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import Loss
from symjac.verifiers.loss._fd import _ForwardCheck
from symjac.verifiers.loss._inputs import _ArgFactory, prepare_inputs
from symjac.verifiers.loss._nonfinite import _float_array
from symjac.verifiers.loss._values import _check_values, _Expected, _show


def magnitudes(pred: np.ndarray, label: np.ndarray | None) -> str:
    """The family's reach, as its findings are tagged: ``|pred| up to 2048``, the label's too where it is large."""
    p = pred.astype(np.float64)
    if np.all((p > 0) & (p <= 1)):  # probabilities: how near the ends of (0, 1)
        said = f"pred as near 0 and 1 as {float(min(np.min(p), np.min(np.where(p < 1, 1 - p, 1)))):.4g}"
    else:
        said = f"|pred| up to {float(np.max(np.abs(p))):.4g}"
    if label is not None and label.dtype.kind == "f" and float(np.max(np.abs(label))) > 1:
        said += f", |label| up to {float(np.max(np.abs(label))):.4g}"
    return said


def check_extreme(loss: Loss, derivative: Any, forward: Any, inputs: tuple[Any, Any, Any], dt: np.dtype[Any],
                  timeout: float | None) -> tuple[list[Finding], dict[str, Any]]:
    """The family's calls and checks: ``(findings, stats)``; ``stats["skipped"]`` where an exact
    derivative there lies beyond the dtype's range (nothing is called then)."""
    p0, l0, u0, _ = prepare_inputs(loss, *inputs, dt)
    stats: dict[str, Any] = {"inputs": magnitudes(p0, l0)}
    ev = evaluate_checked(loss, p0, l0, u0, values=forward is not None, derivatives=True)
    bounds = Bounds(ev, dt)
    findings: list[Finding] = []
    with _numbers.context():
        try:
            ex = _Expected.of(ev, bounds, dt, tuple(p0.shape))
        except InputError as exc:
            stats["skipped"] = str(exc)
            return findings, stats
        args_of = _ArgFactory(loss, p0, l0, u0)
        deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
        ok, value = deriv.call(*args_of.fresh())
        out = None
        if ok:
            arr = _float_array(value, tuple(p0.shape))
            if arr is not None and not np.isfinite(arr).all():
                findings.append(_overflowed(arr, ex, p0, dt))
            else:
                out = deriv.check_output(value, tuple(p0.shape), dt, "pred")
        scale_found = None if out is None else _check_values(out, ex, ev, dt, stats, findings)
        if forward is not None:
            fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
            check = _ForwardCheck(fwd, ev, bounds, args_of, dt, stats, findings)
            if _forward_finite(check, fwd, args_of, findings):
                check.run(out, ex, scale_found)
    return findings, stats


def _forward_finite(check: _ForwardCheck, fwd: Guard, args_of: _ArgFactory, findings: list[Finding]) -> bool:
    """A first forward call: False (a ``bad_output`` naming the element and its exact loss)
    where it is NaN or inf and the exact loss, rounded to the dtype, is not that inf."""
    none = check.ev.loss.reduction == "none"
    ok, value = fwd.call(*args_of.forward_args())
    arr = _float_array(value, check.ev.element_shape if none else ()) if ok else None
    if arr is None:
        return ok
    rounded = check.rounded()
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero((~np.isfinite(arr) & (arr != rounded)).reshape(-1))
    if not bad.size:
        return True
    i = int(bad[0])
    exact = check.ev.elements.reshape(-1)[i] if none else check.ev.value()
    where = f"loss element {_index(arr.shape, i)}" if none else "the loss"
    right = float(rounded.reshape(-1)[i])
    exact_text = (f"exact {_show(exact)}, finite in {check.dt.name}" if np.isfinite(right) else
                  f"exact {_show(exact)}, which rounds to {right} in {check.dt.name}")
    findings.append(Finding(
        "bad_output", f"forward returned {arr.reshape(-1)[i]} for {where} ({exact_text})"
        f"{f' and {bad.size - 1} more NaN/inf' if bad.size > 1 else ''}: a float evaluation that overflows or "
        "cancels (an exponential of an unshifted logit, the log of an underflowed probability, inf - inf)",
        window=tuple(_index(arr.shape, i)) if none else None, expected=_numbers.to_mpf(exact),
        observed=float(arr.reshape(-1)[i])))
    return False


def _overflowed(arr: np.ndarray, ex: _Expected, p0: np.ndarray, dt: np.dtype[Any]) -> Finding:
    """bad_output: NaN or inf in the derivative where every exact value is finite in the dtype."""
    bad = np.flatnonzero(~np.isfinite(arr.reshape(-1)))
    j, shape = int(bad[0]), arr.shape
    return Finding(
        "bad_output",
        f"derivative returned {arr.reshape(-1)[j]} at pred{_index(shape, j)} = {float(p0.reshape(-1)[j])!r} (exact "
        f"{_show(ex.value.reshape(-1)[j])}) and {bad.size - 1} more NaN/inf, where every exact value is finite in "
        f"{dt.name}: a float evaluation that overflows (an exponential of an unshifted logit, the log of an "
        "underflowed probability, a square of a large difference)",
        cells=tuple(tuple(_index(shape, int(k))) for k in bad[:8]),
        expected=_numbers.to_mpf(ex.value.reshape(-1)[j]), observed=float(arr.reshape(-1)[j]))
