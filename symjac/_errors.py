"""The error hierarchy: one root, each error also a built-in so callers may catch either."""

from __future__ import annotations

from typing import Any


class SymjacError(Exception):
    """Root of every error symjac raises on purpose."""


class SpecError(SymjacError, ValueError):
    """A spec, or a spec with an input shape, that describes no valid operator.

    The message names the field, the value given and what would be valid.
    """


class InputError(SymjacError, ValueError):
    """An input array (x, dy, labels, ...) that symjac cannot analyse exactly."""


class VerificationError(SymjacError, AssertionError):
    """An implementation disagrees with the exact derivative; ``.report`` says how."""

    def __init__(self, report: Any) -> None:
        # The one-line summary first: it is what a test runner shows on one line.
        super().__init__(f"{report.summary()}\n{report}")
        self.report = report


for _cls in (SymjacError, SpecError, InputError, VerificationError):
    _cls.__module__ = "symjac"
