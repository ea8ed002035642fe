"""Assertion helpers for test suites: fail with the verification report as the message.

A failed check raises :class:`symjac.VerificationError`, an ``AssertionError`` whose
first line is the report's one-line summary, followed by the details, and whose
``.report`` holds the :class:`symjac.Report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from symjac._errors import VerificationError
from symjac.check._report import Report
from symjac.pool._spec import PoolSpec

__all__ = ["SpecCase", "assert_backward_matches", "assert_loss_matches"]


def _passing(report: Report) -> Report:
    if not report.ok:
        raise VerificationError(report)
    return report


def assert_backward_matches(spec: PoolSpec, backward: Callable[..., Any], forward: Callable[..., Any] | None = None,
                            **kw: Any) -> Report:
    """Assert that ``backward`` (and ``forward``) implement ``spec`` exactly; ``backward`` may be an
    implementation object instead (as :func:`symjac.verify`'s ``impl``).

    Keyword arguments go to :func:`symjac.verify` (``input_shape``, ``x``, ``dtype``,
    ``tie``, ...).

    Returns:
      The passing report.

    Raises:
      VerificationError: an ``AssertionError`` whose message is the report and
        whose ``.report`` holds it.
    """
    from symjac.verifiers.pool._verify import verify

    if not callable(backward) or isinstance(backward, type):  # an Impl, a dict, a torch.autograd.Function
        return _passing(verify(spec, backward, forward=forward, **kw))
    return _passing(verify(spec, backward=backward, forward=forward, **kw))


def assert_loss_matches(loss: Any, derivative: Callable[..., Any], forward: Callable[..., Any] | None = None,
                        **kw: Any) -> Report:
    """Assert that ``derivative`` (and ``forward``) implement ``loss`` exactly,
    loss scale included; ``derivative`` may be an implementation object (a :class:`symjac.LossImpl`).

    Keyword arguments go to :func:`symjac.verify_loss` (``pred``, ``label``,
    ``upstream``, ``dtype``).

    Returns:
      The passing report.

    Raises:
      VerificationError: an ``AssertionError`` whose message is the report and
        whose ``.report`` holds it.
    """
    from symjac.verifiers.loss._verify import verify_loss

    if not callable(derivative):  # a LossImpl, a dict
        return _passing(verify_loss(loss, derivative, forward=forward, **kw))
    return _passing(verify_loss(loss, derivative=derivative, forward=forward, **kw))


@dataclasses.dataclass(frozen=True)
class SpecCase:
    """One case of a spec file, ready to verify: what the ``symjac_case`` fixture gives.

    Attributes:
      case: the spec-file case (``name``, ``operator``, ``inputs``, ``expect``).
      dtype: the default dtype of :meth:`verify` (``--symjac-dtype``).
    """

    case: Any
    dtype: str = "float64"

    @property
    def name(self) -> str:
        return str(self.case.name)

    @property
    def operator(self) -> Any:
        return self.case.operator

    def verify(self, impl: Any, dtype: str | None = None) -> Report:
        """Verify ``impl`` on this case (pooling or loss alike) and assert it passed.

        Args:
          impl: an object or dict with ``backward(x, dy)`` (pooling) or
            ``derivative(pred, label)`` (loss), and optionally ``forward``; or one
            holding an attribute named after the case.
          dtype: overrides ``--symjac-dtype``.

        Returns:
          The passing report.

        Raises:
          VerificationError: a finding; the message starts with the one-line summary.
          InputError: ``impl`` lacks the callable this case needs.
        """
        from symjac.io._case import verify_case

        return _passing(verify_case(self.case, impl, dtype or self.dtype))
