"""The error hierarchy: one root, each error also a built-in so callers may catch either."""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


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
        # The one-line summary first (what a test runner shows on one line), then the details
        # cut to one screen as str(report) cuts them (a report of 500 findings is 500+ lines);
        # ``.report.details()`` has them all, and the pytest plugin shows them under -vv.
        rest = str(report).splitlines()[1:]
        if rest and rest[-1].startswith("... "):
            rest[-1] = rest[-1].replace("print(report.details())", "the error's .report.details() (pytest -vv)")
        super().__init__("\n".join([report.summary(), *rest]))
        self.report = report


class UsageError(Exception):
    """A mistake in what the user named: a command-line option, or an ``--impl`` target that
    does not load (:func:`symjac.run._load.load_impl`).

    The command line prints it as one line and exits 2; a library entry point that loads a
    user's object (``conform`` with an adapter ``PATH:ATTR``) raises it as an
    :class:`InputError`. Deliberately no :class:`SymjacError`: it says what to type, not
    what is wrong with a spec or an input.
    """


def did_you_mean(value: Any, choices: Iterable[str], synonyms: Mapping[str, str] | None = None) -> str:
    """``" (did you mean 'avg'?)"`` for the choice nearest ``value``, or ``""``.

    ``synonyms`` maps other libraries' words to ours (``"average"`` -> ``"avg"``,
    ``"cross_entropy"`` -> ``"softmax_ce"``), which spelling distance would not find.
    """
    near = _nearest(value, choices, synonyms)
    return f" (did you mean {near!r}?)" if near else ""


def _nearest(value: Any, choices: Iterable[str], synonyms: Mapping[str, str] | None = None) -> str | None:
    if not isinstance(value, str):
        return None
    choices = list(choices)
    key = value.lower().replace("-", "_")
    near = (synonyms or {}).get(key)
    if near not in choices:
        matches = difflib.get_close_matches(key, choices, n=1)
        near = matches[0] if matches else None
    return near


def nearest_file(path: Any, pattern: str) -> str:
    """:func:`did_you_mean` for a missing file: ``" (did you mean 'specs/shape.toml'?)"`` for the
    file matching ``pattern`` (``"*.toml"``) in ``path``'s folder whose name is nearest, or ``""``."""
    from pathlib import Path

    p = Path(path)
    try:
        names = sorted(q.name for q in p.parent.glob(pattern) if q.is_file())
    except OSError:  # the folder is missing or unreadable: nothing to suggest
        return ""
    near = _nearest(p.name, names)
    return f" (did you mean {str(p.parent / near)!r}?)" if near else ""


def known_keywords(synonyms: Mapping[str, str] | None = None) -> Callable[[_F], _F]:
    """A decorator: the function, raising an :class:`InputError` for a keyword argument it does not
    take, naming it, the nearest valid one (``synonyms`` as for :func:`did_you_mean`) and every
    valid one (Python's own TypeError names the unknown keyword alone)."""
    def decorate(fn: _F) -> _F:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for key in kwargs:
                if key not in names:
                    raise InputError(f"{fn.__name__}() takes no keyword argument {key!r}"
                                     f"{did_you_mean(key, names, synonyms)}; its keywords: {', '.join(names)}")
            return fn(*args, **kwargs)
        return checked  # type: ignore[return-value]
    return decorate


for _cls in (SymjacError, SpecError, InputError, VerificationError):
    _cls.__module__ = "symjac"


@contextlib.contextmanager
def named_by(source: str) -> Iterator[None]:
    """A :class:`SymjacError` raised inside, as a :class:`SpecError` whose message names ``source`` (once):
    a spec file's case whose input does not fit its operator."""
    try:
        yield
    except SymjacError as exc:
        message = str(exc)
        raise SpecError(message if message.startswith(source) else f"{source}: {message}") from None
