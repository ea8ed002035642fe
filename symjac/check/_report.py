"""Reports: what a verification found, as one line, as text, and as stable JSON."""

from __future__ import annotations

import dataclasses
import html
import json
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np

#: Finding categories, pooling and losses alike.
CATEGORIES = (
    "forward_values",
    "missing_windows",
    "partial_windows",
    "wrong_cells",
    "wrong_weights",
    "tie_not_subgradient",
    "tie_beta_outside_clarke",
    "tie_policy",
    "wrong_second_derivative",
    "not_fd_consistent",
    "missing_scale",
    "wrong_scale",
    "assumes_log_softmax",
    "wrong_values",
    "mutates_inputs",
    "out_of_bounds_write",
    "unwritten_output",
    "uninitialized_read",
    "result_changed_after_return",
    "nondeterministic",
    "bad_output",
    "timeout",
    "crashed",
    "forked",
)


def carried(exc: Any) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """The findings an exception carries (``symjac_findings``: ``(category, text, detail)`` each, the
    text following the callable's name), or ``()``. A native route raises them for what it saw its
    kernel do (:mod:`symjac.frameworks.native._poison`); the guarded call reports them under their
    categories instead of the raise (``bad_output``)."""
    found = getattr(exc, "symjac_findings", ())
    ok = isinstance(found, tuple) and all(isinstance(f, tuple) and len(f) == 3 and f[0] in CATEGORIES
                                          and isinstance(f[1], str) and isinstance(f[2], dict) for f in found)
    return found if ok else ()


#: At most this many items are named in one message ("... and 12 more").
MAX_LISTED = 8
#: ``str(report)`` fits one terminal screen; :meth:`Report.details` has every line.
SCREEN_LINES = 40


def fmt_index(index: tuple[int, ...]) -> str:
    """``(0,1)``: a cell or window index as messages print it."""
    return "(" + ",".join(map(str, index)) + ")"


def listing(items: list[str]) -> str:
    """The first :data:`MAX_LISTED` items, comma-separated, and how many more."""
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def jsonable(value: Any) -> Any:
    """Exact integers become ints, other exact values strings ("3/4"), arrays and tuples lists."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if np.isfinite(f) else str(f)
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else str(value)
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()] if value.dtype != object else [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if getattr(value, "is_Integer", False):  # SymPy integers, as Fractions
        return int(value)
    if hasattr(value, "_mpf_"):  # an mpmath value: exact when it is a short binary fraction
        return _mpf_json(value)
    return str(value)  # SymPy numbers and anything else: their exact text


def _mpf_json(value: Any) -> Any:
    """An mpmath number as its exact value (``-4``, ``"3/4"``) when that is a short
    binary fraction (at most 32 significant bits, denominator at most 2^64), else its
    first 17 significant digits (a rounded irrational such as log 2)."""
    sign, man, exp, _ = value._mpf_
    if man and -64 <= exp and int(man).bit_length() <= 32:
        f = Fraction((-1) ** sign * int(man)) * Fraction(2) ** int(exp)
        return jsonable(f)
    if not man:
        return 0 if exp == 0 else str(value)  # zero, or inf/nan (special mpf values)
    import mpmath

    return str(mpmath.nstr(value, 17))


def readable(value: Any) -> str:
    """A value as a person reads it: exact values bare (``1/2``, ``1``), floats as
    Python prints them, lists in brackets; no quotes."""
    value = jsonable(value)
    if isinstance(value, list):
        return "[" + ", ".join(readable(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {readable(v)}" for k, v in value.items()) + "}"
    return str(value)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing an implementation got wrong.

    Attributes:
      category: one of :data:`CATEGORIES`.
      message: a human sentence.
      window: the output index concerned (layout order), if any.
      cells: input indices concerned.
      expected / observed: values (exact values as strings in JSON).
      detail: further facts, e.g. an exception's ``traceback`` and the ``arguments``
        (shapes and dtypes) the implementation was called with, or the ``input_shape``
        of a coverage-plan shape.
      family: the input family that exposed it (``"distinct"``, ``"ties"``,
        ``"all_negative"``, ``"near_ties"``, ``"given"`` for a caller's x), if any.
      consequence_of: when this finding follows from an earlier root cause (values
        compared after the implementation returned the wrong dtype), that cause's
        message; such findings are listed but are no category of their own.
    """

    category: str
    message: str
    window: tuple[int, ...] | None = None
    cells: tuple[tuple[int, ...], ...] = ()
    expected: Any = None
    observed: Any = None
    detail: dict[str, Any] | None = None
    family: str | None = None
    consequence_of: str | None = None

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"category={self.category!r} is not one of {CATEGORIES}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "message": self.message,
            "window": jsonable(self.window),
            "cells": jsonable(self.cells),
            "expected": jsonable(self.expected),
            "observed": jsonable(self.observed),
            "detail": jsonable(self.detail),
            "family": self.family,
            "consequence_of": self.consequence_of,
        }


#: Report stats that are measured seconds (``family_cost``: each input family's time, time inside
#: the implementation and calls, benchmarks/family_cost.py), left out of :meth:`Report.to_dict`.
TIMINGS = ("family_cost",)


def _cell_table(f: Finding) -> list[str]:
    """One line per cell (its index, the exact expected and the observed value) when
    a finding lists values cell by cell; its index and the observed value when only the
    observed values are per cell (a tie finding's expected is the Clarke set, one line
    above the table); else nothing."""
    expected, observed = f.expected, f.observed
    if not (f.cells and isinstance(observed, list) and len(f.cells) == len(observed)):
        return []
    rows: list[tuple[str, ...]]
    if isinstance(expected, list) and len(expected) == len(observed):
        rows = [("cell", "expected", "observed")]
        rows += [(fmt_index(tuple(c)), readable(e), readable(o)) for c, e, o in zip(f.cells, expected, observed)]
        return _columns(rows)
    rows = [("cell", "observed")]
    rows += [(fmt_index(tuple(c)), readable(o)) for c, o in zip(f.cells, observed)]
    return ([f"    expected: {readable(expected)}"] if expected is not None else []) + _columns(rows)


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["    " + "  ".join(v.ljust(n) for v, n in zip(r, widths)).rstrip() for r in rows]


@dataclasses.dataclass(frozen=True)
class Report:
    """The outcome of a verification.

    Attributes:
      subject: what was verified (the spec's repr).
      findings: every finding, in the order the checks ran.
      stats: the figures behind the verdict (stable keys; see ``to_dict``).
      headline: the one-line summary.
      notes: facts that are no finding but worth knowing (a backward whose equal calls
        differ bitwise, each within the rounding bound: ``stats["nondeterminism"]``).
      unsupported: why nothing could be verified in this dtype, when the implementation
        rejects it (every call raised, and it runs in another dtype: a limitation, not a
        defect; the report is not ok, and has no finding of its own for it).
      returns_in: with ``unsupported``: the dtypes the rejecting callables were found to return
        in (probed only to explain the refusal; empty when it said ``NotImplementedError``).
    """

    subject: str
    findings: tuple[Finding, ...]
    stats: dict[str, Any]
    headline: str
    notes: tuple[str, ...] = ()
    unsupported: str | None = None
    returns_in: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings and self.unsupported is None

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"FAIL"`` (a finding), or ``"UNSUPPORTED"`` (the dtype rejected, nothing else found)."""
        return "FAIL" if self.findings else "UNSUPPORTED" if self.unsupported else "PASS"

    def summary(self) -> str:
        """One human line."""
        return self.headline

    def categories(self) -> list[str]:
        """The distinct categories of the root-cause findings, in order of first appearance
        (findings marked ``consequence_of`` an earlier one are left out)."""
        return list(dict.fromkeys(f.category for f in self.findings if f.consequence_of is None))

    def details(self) -> str:
        """What follows the one-line summary: the subject, then every finding with
        its window, cells, and exact expected beside observed values."""
        lines = [f"subject: {self.subject}"] + [f"note: {n}" for n in self.notes]
        for f in self.findings:
            because = f" (a consequence of: {f.consequence_of})" if f.consequence_of else ""
            lines.append(f"- [{f.category}]{because} {f.message}")
            table = _cell_table(f)
            if table:
                lines.extend(table)
            elif f.expected is not None or f.observed is not None:
                lines.append(f"    expected: {readable(f.expected)}")
                lines.append(f"    observed: {readable(f.observed)}")
            if f.detail and f.detail.get("traceback"):
                lines.append(f"    called with: {readable(f.detail.get('arguments'))}")
                lines.extend("    | " + line for line in str(f.detail["traceback"]).rstrip().splitlines())
        return "\n".join(lines)

    def __str__(self) -> str:
        """``PASS``/``FAIL`` and the summary on the first line, then :meth:`details`, cut to
        one screen (:data:`SCREEN_LINES`): past it, a count of findings per category comes
        second and the cut says how many lines ``details()`` has beyond it."""
        head = f"{self.verdict}: {self.headline}"
        lines = self.details().splitlines()
        if len(lines) < SCREEN_LINES:
            return "\n".join([head, *lines])
        counts = Counter(f.category for f in self.findings if f.consequence_of is None)
        tally = "findings: " + ", ".join(f"{c} x{n}" for c, n in counts.items())
        shown = lines[: SCREEN_LINES - 3]
        return "\n".join([head, tally, *shown,
                          f"... {len(lines) - len(shown)} more lines: print(report.details()) shows every finding"])

    def __repr__(self) -> str:
        """``<Report FAIL missing_windows: backward visits 1 of 4 ... (float32)>``: one short line."""
        cats = self.categories()
        status = self.verdict if not cats else "FAIL " + ", ".join(cats[:3]) + (", ..." if len(cats) > 3 else "")
        headline = self.headline if len(self.headline) <= 120 else self.headline[:117] + "..."
        dtype = self.stats.get("dtype")
        return f"<Report {status}: {headline}{f' ({dtype})' if dtype else ''}>"

    def _repr_html_(self) -> str:
        """A notebook's rendering: the verdict, the summary and a table of the findings."""
        colour = "#1a7f37" if self.ok else "#cf222e"
        rows = "".join(
            f"<tr><td><code>{html.escape(f.category)}</code></td><td>{html.escape(f.message)}</td>"
            f"<td>{html.escape(fmt_index(f.window)) if f.window is not None else ''}</td></tr>"
            for f in self.findings[:50])
        more = (f"<p>... {len(self.findings) - 50} more findings: <code>report.details()</code></p>"
                if len(self.findings) > 50 else "")
        table = (f"<table><tr><th>category</th><th>finding</th><th>window</th></tr>{rows}</table>{more}"
                 if self.findings else "")
        return (f"<div><p><b style='color:{colour}'>{self.verdict}</b> "
                f"{html.escape(self.headline)}</p><p><small>{html.escape(self.subject)}</small></p>{table}</div>")

    def to_dict(self) -> dict[str, Any]:
        """Stable keys: ``ok``, ``subject``, ``summary`` (then ``unsupported`` and ``returns_in`` when
        the dtype is rejected), the stats, ``notes``, ``findings``. The stats that are timings
        (:data:`TIMINGS`: measured seconds, not verdicts) stay in ``stats`` only, so that two runs
        with the same result give the same dict (and JSON)."""
        out: dict[str, Any] = {"ok": self.ok, "subject": self.subject, "summary": self.headline}
        if self.unsupported is not None:
            out["unsupported"] = self.unsupported
            out["returns_in"] = list(self.returns_in)
        out.update({k: jsonable(v) for k, v in self.stats.items() if k not in TIMINGS})
        out["notes"] = list(self.notes)
        out["findings"] = [f.to_dict() for f in self.findings]
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
