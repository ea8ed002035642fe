"""Assertion helpers for test suites: fail with the verification report as the message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from symjac._errors import VerificationError
from symjac.check._report import Report
from symjac.pool._spec import PoolSpec


def assert_backward_matches(spec: PoolSpec, backward: Callable[..., Any], forward: Callable[..., Any] | None = None,
                            **kw: Any) -> Report:
    """Assert that ``backward`` (and ``forward``) implement ``spec`` exactly.

    Keyword arguments go to :func:`symjac.verify` (``input_shape``, ``x``, ``dtype``,
    ``tie``, ...).

    Returns:
      The passing report.

    Raises:
      VerificationError: an ``AssertionError`` whose message is the report and
        whose ``.report`` holds it.
    """
    from symjac.verifiers._pool import verify

    report = verify(spec, backward=backward, forward=forward, **kw)
    if not report.ok:
        raise VerificationError(report)
    return report
