"""Running the ``symjac`` command line from a test: in this process by default, or as a real process.

``symjac(*args)`` calls :func:`symjac.cli._main.main` with ``args`` as a pipe-connected user's run
would see it: the working directory changed to ``cwd`` (the repository's root unless told), ``env``'s
variables set in ``os.environ`` (so that a worker or kernel the command starts inherits them; None unsets
one), stdin empty, stdout and stderr captured as text (streams that are no terminal, as a pipe), warnings
shown on stderr under Python's own default filters (not recorded by pytest), and everything put back
after the call. It answers what :func:`subprocess.run` would: ``returncode``, ``stdout``, ``stderr`` and ``args``.
A process's start (importing SymPy and NumPy) costs about a second; a call here does not pay it.

``process=True`` runs ``python -m symjac ARGS`` instead, for the tests about the process itself: the
real entry point, signals, a resource limit on the process, what a child program writes to the
process's file descriptors, a warning printed once per process (extra keywords go to
:func:`subprocess.run`, e.g. ``preexec_fn``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: what a Python process without -W options starts with (the non-debug build's)
_PROCESS_WARNING_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning),
                            ("ignore", PendingDeprecationWarning), ("ignore", ImportWarning),
                            ("ignore", ResourceWarning))


@dataclasses.dataclass
class Run:
    """A finished command: the attributes tests read of :class:`subprocess.CompletedProcess`."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def symjac(*args: str, cwd: str | os.PathLike[str] | None = ROOT, env: dict[str, str | None] | None = None,
           timeout: float | None = None, process: bool = False, merged: bool = False,
           **popen: object) -> Run | subprocess.CompletedProcess:
    """``symjac ARGS`` run in ``cwd`` with ``env``'s variables added to the environment; ``timeout``
    applies to a process only (``process=True``). ``merged``: stderr goes to stdout's stream, in the
    order they are written (a shell's ``2>&1``; ``stderr`` is then empty)."""
    argv = [str(a) for a in args]
    if process:
        environ = None if env is None else {k: v for k, v in {**os.environ, **env}.items() if v is not None}
        return subprocess.run([sys.executable, "-m", "symjac", *argv], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                              timeout=timeout, env=environ, **popen)
    if popen:
        raise TypeError(f"{sorted(popen)} apply to a process: give process=True")
    return _in_process(argv, cwd, env or {}, merged)


def _in_process(argv: list[str], cwd: str | os.PathLike[str] | None, env: dict[str, str | None],
                merged: bool = False) -> Run:
    from symjac.cli._main import main

    out = _Captured()
    err = out if merged else _Captured()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(_streams(out, err))
        stack.enter_context(_process_warnings())
        try:
            code = main(list(argv))
        except SystemExit as exc:  # what the interpreter would make of it
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
    return Run(["symjac", *argv], code, _text(out), "" if merged else _text(err))


def _text(stream: _Captured) -> str:
    return stream.held if stream.closed else stream.getvalue()


class _Captured(io.StringIO):
    """A captured stream whose text survives :meth:`close` (``main`` closes stderr after a broken pipe)."""

    held = ""

    def close(self) -> None:
        if not self.closed:
            self.held = self.getvalue()
        super().close()


@contextlib.contextmanager
def _environment(env: dict[str, str | None]):
    saved = {name: os.environ.get(name) for name in env}
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _streams(out: io.StringIO, err: io.StringIO):
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), out, err
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def _process_warnings():
    """Warnings as a fresh process shows them: on (the current) stderr, Python's default filters."""

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category, *module in _PROCESS_WARNING_FILTERS:
            warnings.filterwarnings(action, category=category, module=module[0] if module else "", append=True)
        warnings.showwarning = show
        yield
