"""The error hierarchy: one root, each error also a built-in so callers may catch either."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
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
        # The one-line summary first (what a test runner shows on one line), then the
        # details, without repeating it.
        super().__init__(f"{report.summary()}\n{report.details()}")
        self.report = report


def did_you_mean(value: Any, choices: Iterable[str], synonyms: Mapping[str, str] | None = None) -> str:
    """``" (did you mean 'avg'?)"`` for the choice nearest ``value``, or ``""``.

    ``synonyms`` maps other libraries' words to ours (``"average"`` -> ``"avg"``,
    ``"cross_entropy"`` -> ``"softmax_ce"``), which spelling distance would not find.
    """
    if not isinstance(value, str):
        return ""
    choices = list(choices)
    key = value.lower().replace("-", "_")
    near = (synonyms or {}).get(key)
    if near not in choices:
        matches = difflib.get_close_matches(key, choices, n=1)
        near = matches[0] if matches else None
    return f" (did you mean {near!r}?)" if near else ""


for _cls in (SymjacError, SpecError, InputError, VerificationError):
    _cls.__module__ = "symjac"
