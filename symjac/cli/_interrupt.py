"""Ctrl-C (SIGINT) during a command: one line saying what was done and written and what was not,
and exit code 130 (128 + SIGINT, the shell's convention), never a traceback.

:func:`interruptible` runs every subcommand (:func:`symjac.cli._main.main`). A long command
tells :data:`LEDGER` its steps (``verify``'s and ``golden``'s cases), the files it has written
(``golden``'s, as each is replaced) and what an interruption leaves unwritten (``sweep``'s and
``conform``'s result files, written at the end); the line is made from it. The files themselves
are safe whatever the moment: every file symjac writes is written atomically (:mod:`symjac._atomic`),
so an interrupted write leaves the previous file, or none.

A terminal's Ctrl-C reaches the whole foreground process group, the command's worker processes
too (a sweep's or conform's pool, an isolated call's worker). A worker forked from the command
leaves quietly (exit 130, no traceback of its own); the command, which owns the run, reports.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from symjac._progress import on_terminal

#: The exit code of an interrupted command.
EXIT_INTERRUPTED = 128 + signal.SIGINT


@dataclasses.dataclass
class Ledger:
    """What the running command has done, for the line an interruption prints.

    Attributes:
      unit: what a step is (``"case"``).
      verb: what a finished step was (``"verified"``, ``"written"``).
      total: the number of steps (0: the command counts none).
      done: the steps finished, by name, with a verdict word each (``""``: none).
      current: the step under way.
      written: the files written so far, whole.
      pending: what an interruption leaves unwritten, in words (``"--out r.jsonl (unchanged)"``).
      bar: a progress bar may be open on stderr's current line.
    """

    unit: str = "case"
    verb: str = "done"
    total: int = 0
    done: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    current: str | None = None
    written: list[Path] = dataclasses.field(default_factory=list)
    pending: list[str] = dataclasses.field(default_factory=list)
    bar: bool = False

    def begin(self, total: int, unit: str, verb: str) -> None:
        """A run over ``total`` steps, each a ``unit`` that ends ``verb``."""
        self.total, self.unit, self.verb = total, unit, verb

    def step(self, name: str) -> None:
        """The next step starts (the one under way, if any, has finished)."""
        if self.current is not None:
            self.finish()
        self.current = name

    def finish(self, verdict: str = "") -> None:
        """The step under way finished (``verdict``: ``"passed"``, ``"failed"``, or nothing)."""
        if self.current is not None:
            self.done.append((self.current, verdict))
            self.current = None

    def wrote(self, path: Path) -> None:
        self.written.append(Path(path))

    def line(self, command: str) -> str:
        """The one line: where the run stopped, what was done and written, what was not."""
        parts = [f"symjac {command}: interrupted (Ctrl-C)"]
        if self.total:
            at = len(self.done) + 1
            if self.current is not None:
                parts[0] += f" at {self.unit} {at} of {self.total} ({self.current!r})"
            parts.append(f"{len(self.done)} of {self.total} {self.unit}s {self.verb}{self._verdicts()}")
            left = self.total - len(self.done)
            if left:
                first = f"{self.current!r} (under way)" if self.current is not None else f"{left} {self.unit}s"
                after = left - 1 if self.current is not None else 0
                parts.append(f"not {self.verb}: {first}" + (f" and the {after} after it" if after else ""))
        if self.written:
            parts.append(f"{len(self.written)} files written whole (listed above)")
        parts += [f"not written: {p}" for p in self.pending]
        if not self.written and not self.pending:
            parts.append("nothing written")
        return "; ".join(parts)

    def _verdicts(self) -> str:
        counts: dict[str, list[str]] = {}
        for name, verdict in self.done:
            if verdict:
                counts.setdefault(verdict, []).append(name)
        if not counts:
            return ""
        text = ", ".join(f"{len(names)} {verdict}" for verdict, names in counts.items())
        failed = counts.get("failed", [])
        if failed:
            text += ": " + ", ".join(map(repr, failed[:3])) + (", ..." if len(failed) > 3 else "")
        return f" ({text})"


#: The running command's ledger (one command per process: the command line's).
LEDGER = Ledger()


def _quiet_in_workers(main_pid: int) -> Callable[[int, FrameType | None], Any]:
    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main_pid:  # a worker forked from the command: the command reports
            os._exit(EXIT_INTERRUPTED)
        raise KeyboardInterrupt

    return on_sigint


def interruptible(command: str, run: Callable[[], int]) -> int:
    """``run()``'s exit code; on Ctrl-C, the files written (stdout, one path a line, as ``golden``
    lists them) and :data:`LEDGER`'s line (stderr), and :data:`EXIT_INTERRUPTED`."""
    global LEDGER
    LEDGER = Ledger()  # commands read the module's attribute when they record
    installed = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.getsignal(signal.SIGINT) if installed else None
    if installed:
        signal.signal(signal.SIGINT, _quiet_in_workers(os.getpid()))
    try:
        return run()
    except KeyboardInterrupt:
        for path in LEDGER.written:
            print(path)
        sys.stdout.flush()
        fresh = LEDGER.bar or on_terminal(sys.stderr)  # after a bar or the terminal's ^C: a new line
        print(("\n" if fresh else "") + LEDGER.line(command), file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if installed:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
