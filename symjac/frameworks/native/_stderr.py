"""The line of a kernel's stderr that says what went wrong, kept wherever the tail has moved since.

A sanitizer's report (AddressSanitizer's or LeakSanitizer's ``ERROR:`` line, UBSan's
``runtime error:``, ThreadSanitizer's ``WARNING:``/``ERROR:``) or a C++ exception that ended the
program (``terminate called ...``, then ``  what():  ...``) is followed by a legend and a stack:
a message quoting the tail of stderr would show only those.
"""

from __future__ import annotations

import re

#: A stderr line that says what went wrong.
NOTABLE = re.compile(rb"(?:ERROR|WARNING): [A-Za-z]*Sanitizer|runtime error:|terminate called|what\(\):")
#: Bytes of one stderr line examined and quoted (a longer line is cut).
LINE_MAX = 1024


class NotableLines:
    """The first :data:`NOTABLE` line a process writes to stderr, and the line right after it if it
    matches too (a C++ exception's ``what():``), fed the stderr bytes as they come (:meth:`feed`)."""

    def __init__(self) -> None:
        self.found: list[bytes] = []
        self.done = False
        self.partial = b""  # the start of the unfinished line

    def feed(self, data: bytes) -> None:
        """Look in the lines ``data`` completes; the unfinished last line waits for the next data
        (its first :data:`LINE_MAX` bytes)."""
        if self.done:
            return
        text = self.partial + data
        end = text.rfind(b"\n")
        if end < 0:
            self.partial = text[:LINE_MAX]
            return
        complete, self.partial = text[:end], text[end + 1:end + 1 + LINE_MAX]
        if not self.found and NOTABLE.search(complete) is None:
            return  # the common case: nothing to keep, no line split
        for line in complete.split(b"\n"):
            if not self.found:
                if NOTABLE.search(line):
                    self.found.append(line[:LINE_MAX])
                continue
            if NOTABLE.search(line):  # right after the first: a C++ exception's what()
                self.found.append(line[:LINE_MAX])
            self.done = True
            return

    def lines(self) -> list[str]:
        """The lines found (a last one with no newline too), as text; empty when there is none."""
        lines = list(self.found)
        if not self.done and NOTABLE.search(self.partial):
            lines.append(self.partial)
        return [line.decode("utf-8", "replace").strip() for line in lines[:2]]
