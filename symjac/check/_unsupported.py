"""A dtype the implementation rejects: the report made ``unsupported`` instead of failing.

:meth:`symjac.check._call.Guard.rejects` decides, for each guarded callable, whether its
raises say "not in this dtype" (every call raised, one exception type, and it returns in
another float dtype) or "not written" (``NotImplementedError`` in every float dtype). Those
raises are then no findings; every other finding stays, and a report with any left still fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Report

#: The arguments of a guarded callable cast to another dtype.
ArgumentsIn = Callable[[np.dtype[Any]], tuple[Any, ...]]


def unsupported(report: Report, dtype: np.dtype[Any], guards: Iterable[tuple[Guard | None, ArgumentsIn]]) -> Report:
    """``report`` with the raises of each callable that rejects ``dtype`` dropped and
    ``unsupported`` set to their reasons; ``report`` itself when none rejects it."""
    reasons, dropped, found, dtypes = [], [], [], False
    for guard, arguments_in in guards:
        if guard is None:
            continue
        reason = guard.rejects(dtype, arguments_in)
        if reason:
            reasons.append(reason)
            dtypes |= not guard.unimplemented
            dropped += guard.raise_findings()
            if guard.returns_in is not None and str(guard.returns_in) not in found:
                found.append(str(guard.returns_in))
    if not reasons:
        return report
    kept = tuple(f for f in report.findings if not any(f is d for d in dropped))
    reason = "; ".join(reasons)
    # a callable not written (NotImplementedError in every dtype) is no dtype problem: its reason says so alone
    headline = (f"unsupported in {dtype}: {reason}" if dtypes else reason) if not kept else report.headline
    return dataclasses.replace(report, findings=kept, headline=headline, unsupported=reason,
                               returns_in=tuple(found))


def returns_in(reports: Iterable[Report]) -> tuple[str, ...]:
    """The dtypes the rejecting callables of ``reports`` were found to return in, in order, once
    each: what a report combined from them holds (:attr:`Report.returns_in`)."""
    return tuple(dict.fromkeys(d for r in reports for d in r.returns_in))


def cast_floats(args: tuple[Any, ...], dtype: np.dtype[Any]) -> tuple[Any, ...]:
    """The float arrays of ``args`` cast to ``dtype`` (integer labels and None as they are)."""
    return tuple(a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind not in "iub" else a for a in args)
