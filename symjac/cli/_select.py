"""Which cases a command runs: spec paths (files, directories, globs) and case selection.

``symjac verify specs/ 'specs/seeds/*.toml' --case NAME -k 'avg and not ties'``:
every path is a file, a directory (its ``*.toml`` files, recursively, sorted) or a
glob (expanded by symjac, so a quoted pattern works as well as the shell's); the
cases of all files are then narrowed by ``--case`` (exact names) and ``-k`` (a
pytest-style keyword expression over case names).
"""

from __future__ import annotations

import argparse
import difflib
import glob
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from symjac._errors import SpecError

GLOB_CHARS = re.compile(r"[*?\[]")
Predicate = Callable[[str], bool]


class SelectionError(SpecError):
    """A spec path that matches no file, or a selection that matches no case."""


def expand_paths(paths: Sequence[str]) -> list[Path]:
    """Spec files named by ``paths``, in order, each once.

    Raises:
      SelectionError: a glob matches nothing, or a directory holds no ``*.toml``. A path that
        is no readable file (a broken or looping symbolic link among them) is kept: the reader
        names it (:func:`symjac.io._specfile.read_toml`).
    """
    files: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.toml") if _spec_entry(q))
            if not found:
                raise SelectionError(f"{raw}: the directory holds no *.toml spec file")
        elif not p.exists() and GLOB_CHARS.search(raw):
            found = _glob(raw)
            if not found:
                raise SelectionError(f"{raw!r}: no spec file matches this pattern (relative to {Path.cwd()})")
        else:
            found = [p]  # a missing file is reported by the reader, naming it
        for q in found:  # each file once, by its real path (a symlink and its target are one file)
            try:
                real = q.resolve()
            except (OSError, RuntimeError):  # a symlink loop: the reader names it
                real = q.absolute()
            if real not in seen:
                seen.add(real)
                files.append(q)
    return files


def _spec_entry(q: Path) -> bool:
    """A directory listing's or a pattern's match that is a spec file, or a symbolic link that
    should be one (broken or looping: kept, so that the reader names it rather than the run
    leaving a spec out in silence)."""
    return q.is_file() or q.is_symlink() and not q.is_dir()


def _glob(pattern: str) -> list[Path]:
    """The files a pattern matches, sorted. ``**`` walks the directories below without
    entering symlinked ones (pathlib's rule; :func:`glob.glob` follows them, and a symlink
    to a parent makes that walk endless)."""
    parts = Path(pattern).parts
    if "**" not in parts:
        return sorted(Path(q) for q in glob.glob(pattern) if _spec_entry(Path(q)))
    first = next(i for i, part in enumerate(parts) if GLOB_CHARS.search(part))
    root = Path(*parts[:first]) if first else Path()
    return sorted(q for q in root.glob(str(Path(*parts[first:]))) if _spec_entry(q))


_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def keyword_matcher(expr: str) -> Callable[[str], bool]:
    """A pytest-style ``-k`` expression as a predicate on a case name.

    Words match as case-insensitive substrings of the name; ``and``, ``or``,
    ``not`` and parentheses combine them (``not`` binds tightest, then ``and``).

    Raises:
      SelectionError: the expression does not parse.
    """
    tokens = _TOKEN.findall(expr)
    if not tokens:
        raise SelectionError(f"-k {expr!r}: give a word, or words joined by and / or / not")
    pos = 0

    def fail(why: str) -> SelectionError:
        return SelectionError(f"-k {expr!r}: {why} (write e.g. -k 'avg and not ties')")

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise fail("the expression ends too early")
        pos += 1
        return str(tokens[pos - 1])

    def either(a: Predicate, b: Predicate) -> Predicate:
        return lambda s: a(s) or b(s)

    def both(a: Predicate, b: Predicate) -> Predicate:
        return lambda s: a(s) and b(s)

    def parse_or() -> Predicate:
        left = parse_and()
        while peek() == "or":
            take()
            left = either(left, parse_and())
        return left

    def parse_and() -> Predicate:
        left = parse_not()
        while peek() == "and":
            take()
            left = both(left, parse_not())
        return left

    def parse_not() -> Predicate:
        token = take()
        if token == "not":
            inner = parse_not()
            return lambda s: not inner(s)
        if token == "(":
            inner = parse_or()
            if take() != ")":
                raise fail("a '(' is not closed")
            return inner
        if token in ("and", "or", ")"):
            raise fail(f"{token!r} where a word was expected")
        word = token.lower()
        return lambda s: word in s.lower()

    matcher = parse_or()
    if pos != len(tokens):
        raise fail(f"unexpected {tokens[pos]!r}")
    return matcher


def select_cases(paths: Sequence[str], names: Sequence[str] = (), keyword: str | None = None) -> list[Any]:
    """The cases of the spec files ``paths`` selected by ``--case`` names and ``-k``.

    Raises:
      SpecError: a file is missing or invalid.
      SelectionError: a name is no case of the files, or nothing is selected; the
        message lists the case names there are.
    """
    from symjac.io._specfile import load

    cases = [case for path in expand_paths(paths) for case in load(path).cases]
    available = list(dict.fromkeys(c.name for c in cases))
    listing = ", ".join(available)
    for name in names:
        if name not in available:
            near = difflib.get_close_matches(name, available, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise SelectionError(f"--case {name!r}: no such case; {hint}cases: {listing}")
    if names:
        cases = [c for c in cases if c.name in names]
    if keyword is not None:
        match = keyword_matcher(keyword)
        cases = [c for c in cases if match(c.name)]
        if not cases:
            raise SelectionError(f"-k {keyword!r} selects no case; cases: {listing}")
    return cases


QUIET_HELP = "no progress line (it shows on a terminal once a run passes 2 s, on stderr)"


def add_quiet_argument(p: argparse.ArgumentParser) -> None:
    """-q/--quiet: no progress line (every command that may run past 2 s has one)."""
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC... plus --case/-k: the selection every spec-reading command shares."""
    p.add_argument("spec", nargs="+", metavar="SPEC",
                   help="spec files, directories (their *.toml, recursively) or globs (quote them: 'specs/*.toml')")
    p.add_argument("--case", action="append", metavar="NAME",
                   help="run only the case with this name (repeat for several)")
    p.add_argument("-k", dest="keyword", metavar="EXPR",
                   help="run only cases whose name matches EXPR: words (substrings), and / or / not, parentheses")
