"""A forward-only loss (a runtime without autodiff: ONNX Runtime) checked as far as it goes.

:func:`symjac.verify_loss` given ``forward`` alone (no ``derivative``, no ``hvp``; or a
:class:`symjac.LossImpl` whose ``derivative`` is None) calls the forward twice at the inputs and
checks its value (the reduced ``L``, or one per element for ``"none"``) against the exact loss
within the forward's derived rounding bound (:mod:`symjac.verifiers.loss._fd`'s forward check, the
same findings: ``forward_values``, ``bad_output``, ``mutates_inputs``, ``nondeterministic``). No
derivative is checked: the headline says so and ``stats["derivative"]`` records it, never a pass.
The extra input families (extreme, nonfinite) are not run, and a pred holding NaN or ±inf is
refused: their conventions are stated for derivatives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import Guard, same
from symjac.check._report import Finding, Report
from symjac.check._rounding import finfo
from symjac.check._unsupported import cast_floats, unsupported
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import Loss
from symjac.verifiers.loss._fd import _ForwardCheck
from symjac.verifiers.loss._inputs import _ArgFactory, prepare_inputs

#: What a forward-only report says of the derivatives, in its headline and ``stats["derivative"]``.
NOT_CHECKED = "derivative not checked (forward only: no derivative given)"


def verify_forward_only(loss: Loss, forward: Callable[..., Any], pred: Any, label: Any, upstream: Any,
                        dt: np.dtype[Any], timeout: float | None) -> Report:
    """The forward's values against the exact loss (see the module docstring); ``loss`` a valid spec."""
    if not callable(forward):
        raise InputError(f"forward={forward!r} is not callable")
    p0, l0, u0, rounded = prepare_inputs(loss, pred, label, upstream, dt)
    if p0.dtype.kind == "f" and not np.isfinite(p0.astype(np.float64)).all():
        raise InputError("a forward-only check takes finite predictions (NaN and ±inf have conventions for the "
                         "derivative only): give finite pred, or a derivative too")
    ev = evaluate_checked(loss, p0, l0, u0, values=True, derivatives=False)
    findings: list[Finding] = []
    stats: dict[str, Any] = {"kind": loss.kind, "reduction": loss.reduction, "scale": loss.scale, "dtype": dt.name,
                             "unit_roundoff": f"2^-{int(finfo(dt).nmant) + 1}", "elements": int(p0.size),
                             "inputs_rounded": rounded, "nondeterminism": None,
                             "derivative": {"checked": False, "why": NOT_CHECKED}}
    args_of = _ArgFactory(loss, p0, l0, u0)
    with _numbers.context():
        fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
        check = _ForwardCheck(fwd, ev, Bounds(ev, dt), args_of, dt, stats, findings)
        first = check.value()
        if first is not None:
            check.check_base(first)
            again = check.value()
            if again is not None and not same(first, again):
                findings.append(Finding("nondeterministic", f"two equal forward calls differ: {first.tolist()!r} "
                                        f"then {again.tolist()!r}"))
        fwd.finish()
    if findings:
        cats = ", ".join(dict.fromkeys(f.category for f in findings))
        line = f"{loss.kind} in {dt.name}: {len(findings)} finding(s) [{cats}]: {findings[0].message}; {NOT_CHECKED}"
    else:
        line = f"{loss.kind} in {dt.name}: forward within the derived bound ({fwd.calls} calls); {NOT_CHECKED}"
    report = Report(f"{loss!r} in {dt.name}", tuple(findings), stats, line)
    if findings:  # a dtype the forward rejects on every call: unsupported, not a defect
        report = unsupported(report, dt, [(fwd, lambda other: cast_floats(args_of.forward_args(), other))])
    return report
