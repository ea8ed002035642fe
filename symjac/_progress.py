"""The one home of progress: a bar on stderr for a long command-line run, the API's ``progress=``.

The bar is drawn by tqdm when it is installed (``pip install 'symjac[progress]'``), by a plain
stdlib line otherwise; either way this module decides when and where (:class:`Progress`). The
Python API's ``progress=`` argument (:func:`symjac.verify`, :func:`symjac.verify_loss`,
:func:`symjac.conform`) listens to the same :func:`note` calls (:func:`with_progress`): a hook,
this bar on a terminal, or, in a Jupyter notebook, tqdm's widget (``tqdm.notebook``, what
``tqdm.auto`` picks in a kernel; it needs ipywidgets) or an updating text display.

The command opens a :class:`Progress` over its steps (the cases); it draws nothing for the
first ``delay`` seconds (a quick run stays silent), nothing at all when the stream is not a
terminal (a pipe, a CI log) or with ``-q``, and then redraws one line from a ticker thread:
the bar over the steps (or, for a run that counts its own units, as ``sweep`` and ``conform`` count
configurations, what :func:`note` told), the step's name, what the step is doing (``shape 3/9 of the coverage
plan``, told by the verifier through :func:`note`) and the elapsed seconds. The line is
erased when the run ends, so the command's own output is unchanged.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TextIO, TypeVar, cast

from symjac._errors import InputError

T = TypeVar("T")

#: Seconds before the first draw, and between redraws.
DELAY, INTERVAL = 2.0, 0.2

#: The open listener of this process, if any (a progress line, the API's hook): :func:`note` tells it
#: the current sub-step.
_active: Listener | None = None


def on_terminal(stream: Any) -> bool:
    """``stream`` is a terminal: the one test of whether a progress line (with its ``\\r``) may be
    drawn on it; never on a pipe or a log file."""
    isatty = getattr(stream, "isatty", None)
    return callable(isatty) and bool(isatty())


def note(text: str, done: int = 0, total: int = 0) -> None:
    """Tell the open progress line (if any) what the current step is doing: ``text``, and
    ``done`` of its ``total`` sub-steps finished (``total`` 0: not counted), which moves the bar
    within the step (one case's coverage plan moves it shape by shape)."""
    if _active is not None:
        _active.tell(text, done, total)


class Listener:
    """What :func:`note` tells, while open (``with``): the listener open before it is restored at
    the end, so a call inside a command's progress line leaves that line listening."""

    def tell(self, text: str, done: int, total: int) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        global _active
        self._outer, _active = _active, self
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> Any:
        global _active
        _active = self._outer
        return None


class Mute(Listener):
    """Hears nothing: a call run inside a step whose notes are not the step's (one configuration of
    a grid, which counts configurations) keeps the open line as it is."""

    def tell(self, text: str, done: int, total: int) -> None:
        return None


class Hook(Listener):
    """The API's ``progress=hook``: ``hook(done, total, detail)`` at each sub-step, and
    ``hook(total, total, "done")`` when the call returns (``total`` 1 when no sub-step was told)."""

    def __init__(self, hook: Callable[[int, int, str], Any]):
        self.hook, self.total = hook, 1

    def tell(self, text: str, done: int, total: int) -> None:
        self.total = max(total, 1)
        self.hook(done, total, text)

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> Any:
        super().__exit__(kind, value, traceback)
        if kind is None:
            self.hook(self.total, self.total, "done")
        return None


class Progress(Listener):
    """``with Progress("verify", n) as p: ... p.step(name) ...``: a progress line over ``n`` steps.

    Args:
      what: the command's name, first on the line.
      total: the number of steps.
      enabled: False for ``-q``; the line is drawn only when ``stream`` is also a terminal.
      stream: default ``sys.stderr``.
      delay: seconds before the first draw (default :data:`DELAY`).
      interval: seconds between redraws (default :data:`INTERVAL`).
    """

    def __init__(self, what: str, total: int, *, enabled: bool = True, stream: TextIO | None = None,
                 delay: float | None = None, interval: float | None = None):
        self.what, self.total = what, max(total, 1)
        self.delay = DELAY if delay is None else delay
        self.interval = INTERVAL if interval is None else interval
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and on_terminal(self.stream)
        self.done, self.name, self.detail = 0, "", ""
        self.part = 0.0  # the fraction of the current step done (its sub-steps, told by note)
        self.drawn = 0  # the width of the line on screen (0: nothing drawn)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._bar: Any = None  # tqdm's bar, made at the first draw (None: not yet, or no tqdm)
        self._start = time.monotonic()

    def step(self, name: str) -> None:
        """Start the next step (call before its work): ``done`` counts the steps finished."""
        if self.name:
            self.done += 1
        self.name, self.detail, self.part = name, "", 0.0

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """``for case in p.each(cases): ...``: each item a step, named by its ``name``."""
        for item in items:
            self.step(str(getattr(item, "name", item)))
            yield item

    def tell(self, text: str, done: int, total: int) -> None:
        self.detail, self.part = text, (min(done, total) / total if total > 0 else 0.0)

    def count(self) -> str:
        """What the line says after the bar: ``1/3 case`` over the steps, or nothing when the run
        opened no step (its :func:`note` tells the count, as ``sweep``'s ``12/40 configurations``)."""
        return f"{self.done}/{self.total} {self.name}" if self.name else ""

    def text(self) -> str:
        """The line after the bar: the count, the detail told by :func:`note`, the seconds."""
        parts = [p for p in (self.count(), self.detail) if p]
        return " · ".join([*parts, f"{time.monotonic() - self._start:.0f} s"])

    def fraction(self) -> float:
        return min(self.done + self.part, self.total) / self.total

    def line(self) -> str:
        """The stdlib line (tqdm absent): ``what [####......] text``, cut to the terminal's width."""
        width = 20
        filled = int(width * self.fraction())
        text = f"{self.what} [{'#' * filled}{'.' * (width - filled)}] {self.text()}"
        return _cut(text, shutil.get_terminal_size((100, 20)).columns - 1)

    def _draw(self) -> None:
        with self._lock:
            columns = shutil.get_terminal_size((100, 20)).columns - 1
            if not self.drawn:  # the first draw: tqdm's bar when it is installed
                self._bar = _terminal_bar(self.stream, self._format(columns))
            if self._bar is not None:  # tqdm draws the bar; the text after it is ours
                self._bar.bar_format = self._format(columns)
                self._bar.n = self.fraction()
                self._bar.refresh()
                self.drawn = 1
                return
            text = self.line()
            self.stream.write("\r" + text + " " * max(self.drawn - len(text), 0))
            self.stream.flush()
            self.drawn = max(self.drawn, len(text))

    def _format(self, columns: int) -> str:
        """tqdm's ``bar_format``: ``what [bar] text``, the text cut so the bar keeps 10 cells or more."""
        text = _cut(self.text(), columns - len(self.what) - 14)
        return f"{_braces(self.what)} [{{bar}}] {_braces(text)}"

    def _tick(self) -> None:
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            self._draw()
            self._stop.wait(self.interval)

    def __enter__(self) -> Progress:
        super().__enter__()
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="symjac-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> Any:
        super().__exit__(kind, value, traceback)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:  # leave=False: tqdm blanks its line and returns to its start
            self._bar.close()
        elif self.drawn:  # erase the line: the command's output starts on a clean line
            self.stream.write("\r" + " " * self.drawn + "\r")
            self.stream.flush()
        return None


def _braces(text: str) -> str:
    """``text`` as literal text of a tqdm ``bar_format`` (a format string)."""
    return text.replace("{", "{{").replace("}", "}}")


def _cut(text: str, columns: int) -> str:
    return text if len(text) <= columns else text[:max(columns - 3, 0)] + "..."


def _tqdm() -> Any:
    """The tqdm module, or None when it is not installed (the stdlib line draws instead)."""
    try:
        return importlib.import_module("tqdm")  # optional: the 'progress' extra
    except ImportError:
        return None


def _terminal_bar(stream: TextIO, bar_format: str) -> Any:
    """A tqdm bar on ``stream`` (None without tqdm), made at the first draw: after the delay, so a
    quick run never writes. ``leave=False``: closing it blanks the line."""
    tqdm = _tqdm()
    if tqdm is None:
        return None
    return tqdm.tqdm(total=1.0, file=stream, leave=False, dynamic_ncols=True, mininterval=0, delay=0,
                     bar_format=bar_format)


class Notebook(Progress):
    """The bar in a Jupyter notebook: tqdm's widget (``tqdm.notebook``) when tqdm and ipywidgets are
    installed, else an updating text display (IPython's ``display_id``); no ``\\r``, no ticker
    thread; redrawn at each sub-step and at the end."""

    def __init__(self, name: str):
        super().__init__("symjac", 1, enabled=False)
        self.step(name)
        self.widget: Any = _notebook_bar(name)
        self.handle: Any = None
        if self.widget is None:
            display: Any = importlib.import_module("IPython.display")  # optional: untyped here
            self._pretty = display.Pretty
            self.handle = display.display(self._pretty(self.line()), display_id=True)

    def _show(self) -> None:
        if self.widget is not None:
            self.widget.n = self.fraction()
            self.widget.set_description_str(f"symjac {self.name}", refresh=False)
            self.widget.set_postfix_str(self.detail, refresh=False)
            self.widget.refresh()
        else:
            self.handle.update(self._pretty(self.line()))

    def tell(self, text: str, done: int, total: int) -> None:
        super().tell(text, done, total)
        self._show()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> Any:
        super().__exit__(kind, value, traceback)
        self.step("done")  # the bar full: 1/1
        self._show()
        if self.widget is not None:
            self.widget.close()
        return None


def _notebook_bar(name: str) -> Any:
    """tqdm's notebook widget (None without tqdm or ipywidgets, which draws it)."""
    if _tqdm() is None or importlib.util.find_spec("ipywidgets") is None:
        return None
    notebook: Any = importlib.import_module("tqdm.notebook")
    return notebook.tqdm(total=1.0, desc=f"symjac {name}", leave=True)


def in_notebook() -> bool:
    """Running in a Jupyter kernel (IPython importable, its shell a kernel's)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        ipython: Any = importlib.import_module("IPython")  # optional: untyped here
    except ImportError:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def listener(progress: Any, name: str) -> Listener | None:
    """The listener of the API's ``progress=`` argument to the function ``name`` (None: silent).

    Raises:
      InputError: ``progress`` is none of None, True/False or a callable.
    """
    if progress is None or progress is False:
        return None
    if progress is True:
        if in_notebook():
            return Notebook(name)
        line = Progress("symjac", 1)  # drawn on a terminal only, after DELAY, as the command line's
        line.step(name)
        return line
    if callable(progress):
        return Hook(progress)
    raise InputError(f"progress={progress!r} is not valid: give None (silent), True (a progress line on stderr "
                     "when it is a terminal, an updating display in Jupyter) or a callable hook(done, total, detail)")


F = TypeVar("F", bound=Callable[..., Any])


def with_progress(name: str) -> Callable[[F], F]:
    """A decorator taking the API's ``progress=`` keyword off a call and listening to its
    :func:`note` calls while it runs (:func:`listener`)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, progress: Any = None, **kwargs: Any) -> Any:
            found = listener(progress, name)
            if found is None:
                return fn(*args, **kwargs)
            with found:
                return fn(*args, **kwargs)
        return cast(F, call)
    return wrap
