"""A family of sibling losses that share one loss scale S, checked as a table (seed 003).

Seed 003: four of five nntrainer loss derivatives forgot S. The loss scale is a
contract across a family of code paths, so :func:`check_loss_family` compares
siblings, each checked with :func:`symjac.verify_loss` under the family's S.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np

from symjac._errors import InputError, SpecError
from symjac._progress import note, with_progress
from symjac.check._report import Report, jsonable
from symjac.check._rounding import float_dtype
from symjac.loss._spec import Loss
from symjac.loss import _numbers
from symjac.verifiers._impl import LossImpl as LossImpl
from symjac.verifiers.loss._verify import _verify

#: Verdict precedence in a family table: the most specific finding names the row.
VERDICT_ORDER = (
    "bad_output",
    "mutates_inputs",
    "missing_scale",
    "wrong_scale",
    "wrong_values",
    "nondeterministic",
    "forward_values",
    "not_fd_consistent",
)


def _show(values: Any, limit: int = 4) -> str:
    """Compact text: -4.0, [-4.0, 4.0]; floats and mpf alike."""
    if values is None:
        return "—"
    arr = np.asarray(values, dtype=object).reshape(-1)
    items = []
    for v in arr[:limit]:
        s = f"{float(v):.6g}"
        if s.lstrip("-").isdigit():
            s += ".0"
        items.append(s)
    more = ", …" if arr.size > limit else ""
    body = ", ".join(items) + more
    return body if arr.size == 1 and np.asarray(values, dtype=object).ndim == 0 else f"[{body}]"



@dataclasses.dataclass(frozen=True)
class FamilyRow:
    """One row of a :class:`FamilyTable`.

    Attributes:
      name: the implementation's name.
      loss: the spec checked (with the family's scale).
      base: the exact unscaled derivative dL/dpred (mpf object array).
      expected: the exact S·dL/dpred.
      observed: what the implementation returned (None if it returned nothing usable).
      verdict: ``"pass"`` or the leading finding category (:data:`VERDICT_ORDER`).
      report: the full :class:`symjac.report.Report`.
    """

    name: str
    loss: Loss
    base: np.ndarray
    expected: np.ndarray
    observed: np.ndarray | None
    verdict: str
    report: Report

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "loss": repr(self.loss),
            "base": [mpmath.nstr(v, 20) for v in self.base.reshape(-1)],
            "expected": [mpmath.nstr(v, 20) for v in self.expected.reshape(-1)],
            "observed": None if self.observed is None else jsonable(self.observed.reshape(-1)),
            "verdict": self.verdict,
            "categories": self.report.categories(),
        }


@dataclasses.dataclass(frozen=True)
class FamilyTable:
    """Sibling losses under one loss scale: loss, base derivative, expected, observed, verdict."""

    scale: Fraction
    dtype: str
    rows: tuple[FamilyRow, ...]

    @property
    def ok(self) -> bool:
        return all(r.verdict == "pass" for r in self.rows)

    def counts(self) -> dict[str, int]:
        """Rows per verdict, in order of first appearance."""
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.verdict] = out.get(r.verdict, 0) + 1
        return out

    def __str__(self) -> str:
        head = ("loss", "base derivative", f"expected (S = {self.scale})", "observed", "verdict")
        body = [(r.name, _show(r.base), _show(r.expected), _show(r.observed), r.verdict) for r in self.rows]
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(5)]
        lines = [f"loss-scale family check: S = {self.scale}, {self.dtype}"]
        for row in [head, *body]:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items())
        lines.append(f"{len(self.rows)} losses: {counts}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Stable keys: ``ok``, ``scale``, ``dtype``, ``counts``, ``rows``."""
        return {
            "ok": self.ok,
            "scale": str(self.scale),
            "dtype": self.dtype,
            "counts": self.counts(),
            "rows": [r.to_dict() for r in self.rows],
        }


_IMPL_KEYS = {f.name for f in dataclasses.fields(LossImpl)}


def _impl(name: str, value: Any) -> LossImpl:
    if isinstance(value, LossImpl):
        if value.derivative is None:
            raise SpecError(f"impls[{name!r}] has derivative=None (forward only): a family compares derivatives; "
                            "check a forward-only loss with symjac.verify_loss")
        return value
    if isinstance(value, Mapping):
        extra = set(value) - _IMPL_KEYS
        if extra:
            raise SpecError(f"impls[{name!r}] has unknown key(s) {sorted(extra)}; valid keys: {sorted(_IMPL_KEYS)}")
        if "loss" not in value or "derivative" not in value:
            raise SpecError(f"impls[{name!r}] needs 'loss' and 'derivative'")
        return LossImpl(**value)
    raise SpecError(f"impls[{name!r}]={value!r} is not valid: give a symjac.LossImpl or a dict with 'loss' and "
                    "'derivative'")


@with_progress("check_loss_family")
def check_loss_family(
    impls: Mapping[str, Any], scale: Any = 8, *, dtype: Any = "float64", progress: Any = None
) -> FamilyTable:
    """Verify sibling loss implementations that share one loss scale S, as a table.

    Seed 003's point: the loss scale is a contract across a family of code paths,
    so compare siblings, not one function. Each implementation is checked with
    :func:`verify_loss` under the family's S; the table lists, per loss, the exact
    base derivative ``dL/dpred``, the expected ``S·dL/dpred``, what it returned and
    a verdict (``"pass"`` or the leading finding category).

    Args:
      impls: name -> :class:`LossImpl` (or a dict with its fields).
      scale: the shared loss scale S > 0; it replaces each spec's scale.
      dtype: as for :func:`verify_loss`.
      progress: as :func:`symjac.verify`'s, a step each loss (``"kld (3/5)"``).

    Returns:
      A :class:`FamilyTable` (``str`` renders it; ``to_dict`` for JSON).

    Raises:
      SpecError: an entry is malformed, or ``scale`` is not > 0.
      InputError: an entry's inputs are invalid (the message names the entry).
    """
    if not isinstance(impls, Mapping) or not impls:
        raise SpecError(f"impls={impls!r} is not valid: give a non-empty mapping name -> LossImpl")
    s = Loss("mse", scale=scale).scale  # validates S once, with Loss's message
    rows = []
    for i, (name, value) in enumerate(impls.items()):
        note(f"{name} ({i + 1}/{len(impls)})", i, len(impls))
        impl = _impl(str(name), value)
        try:
            spec = impl.loss if isinstance(impl.loss, Loss) else Loss(impl.loss)
            spec = dataclasses.replace(spec, scale=s)
            assert impl.derivative is not None  # _impl refuses a forward-only one
            outcome = _verify(spec, impl.derivative, impl.forward, impl.pred, impl.label, impl.upstream, dtype)
        except (SpecError, InputError) as exc:
            raise type(exc)(f"impls[{name!r}]: {exc}") from None
        cats = outcome.report.categories()
        verdict = "pass" if not cats else min(cats, key=lambda c: VERDICT_ORDER.index(c)
                                              if c in VERDICT_ORDER else len(VERDICT_ORDER))
        rows.append(FamilyRow(str(name), spec, _numbers.mpf_array(outcome.base), _numbers.mpf_array(outcome.expected),
                              outcome.observed, verdict,
                              outcome.report))
    return FamilyTable(s, float_dtype(dtype).name, tuple(rows))
