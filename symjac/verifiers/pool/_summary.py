"""The report of one pooling verification: its figures, headline and root causes.

Read by :class:`symjac.verifiers.pool._verifier._Verifier` when its passes are done:
the policy seen at ties, the stats (stable keys), the one-line headline (a pass, the
missing windows of seed 000's shape of bug, or the findings) and which findings are
consequences of a wrong output dtype.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from symjac.check._report import Finding, fmt_index, listing

if TYPE_CHECKING:
    import numpy as np

    from symjac.check._call import Guard
    from symjac.pool._geometry import Geometry
    from symjac.verifiers.pool._diagnose import Diagnosis
    from symjac.verifiers.pool._probe import Prober

BACKWARD_CATEGORIES = ("missing_windows", "partial_windows", "wrong_cells", "wrong_weights", "tie_not_subgradient",
                       "tie_beta_outside_clarke", "tie_policy")


def _beta_of(tie_policy: str | None) -> Fraction | None:
    """The β of seed 001's family a named tie policy is: first 0, split 1, beta:<b> b."""
    if tie_policy is None:
        return None
    if tie_policy.startswith("beta:"):
        return Fraction(tie_policy[5:])
    return {"first": Fraction(0), "split": Fraction(1)}.get(tie_policy)


def _ratio(num: float, den: float) -> str:
    if den == 0:
        return "no gradient was expected"
    f = Fraction(num / den).limit_denominator(64)
    if abs(float(f) - num / den) <= 1e-6 * max(1.0, abs(num / den)):
        return f"{f} of the gradient mass arrives"
    return f"{100 * num / den:.1f}% of the gradient mass arrives"




class Summary:
    """The report-writing half of a verifier: reads what the passes left in its attributes."""

    g: Geometry
    dtype: np.dtype[Any]
    tie: str
    findings: list[Finding]
    diagnosis: Diagnosis
    prober: Prober
    bwd: Guard | None
    fwd: Guard | None
    stats: dict[str, Any]
    zero_policies: set[str]
    families_run: list[str]
    nondeterminism: dict[str, dict[str, Any]]

    def tie_policy_verdict(self) -> str | None:
        """The one policy seen at ties, ``"varying"`` if calls chose differently (several
        policies, or a dense call's own Clarke choice); a finding if another was demanded."""
        policies = self.diagnosis.policies
        if not policies:
            return None
        tie_policy = next(iter(policies)) if len(policies) == 1 else "varying"
        if self.tie != "any" and tie_policy != self.tie:
            self.findings.append(Finding(
                "tie_policy", f"at ties the backward follows policy {tie_policy!r}; {self.tie!r} was demanded"))
        return tie_policy

    def figures(self, forward_ok: bool | None, probed: bool, fd_ok: bool | None,
                tie_policy: str | None) -> dict[str, Any]:
        """The stats of the report (stable keys)."""
        d = self.diagnosis
        categories = {f.category for f in self.findings}
        guards = [g for g in (self.bwd, self.fwd) if g is not None]
        return {
            "checked": "forward and backward" if self.bwd and self.fwd else "backward" if self.bwd else "forward",
            "forward_ok": forward_ok,
            "backward_ok": None if self.bwd is None else
            probed and not self.bwd.bad and not categories & set(BACKWARD_CATEGORIES),
            "fd_consistent": fd_ok,
            "windows_total": self.g.batch * self.g.n_out,
            "windows_missing": sum(v == "missing_windows" for v in d.window_state.values()),
            "windows_partial": sum(v == "partial_windows" for v in d.window_state.values()),
            **d.counts,
            "max_abs_error": d.max_abs,
            "max_ulp_error": d.max_ulp,
            "tie_policy": tie_policy,
            "tie_beta": _beta_of(tie_policy),
            "zero_window": (next(iter(self.zero_policies)) if len(self.zero_policies) == 1 else "other")
                           if self.zero_policies else None,
            "nondeterminism": dict(self.nondeterminism) or None,
            "mutated_inputs": sorted(set().union(*(g.mutated for g in guards))),
            "backward_calls": self.bwd.calls if self.bwd else 0,
            "forward_calls": self.fwd.calls if self.fwd else 0,
            "window_colours": self.prober.n_colours,
            "dtype": str(self.dtype),
            "families": self.family_counts(),
        }

    def family_counts(self) -> dict[str, int]:
        """Findings per input family that ran (0: it exposed nothing)."""
        counts = dict.fromkeys(self.families_run, 0)
        for f in self.findings:
            if f.family is not None:
                counts[f.family] = counts.get(f.family, 0) + 1
        return counts

    def headline(self, fd_ok: bool | None, tie_policy: str | None, mass: tuple[float, float]) -> str:
        """The one-line summary: a pass, the missing windows (seed 000's shape of bug), or the findings."""
        assert self.bwd is not None
        total = self.g.batch * self.g.n_out
        categories = {f.category for f in self.findings if f.consequence_of is None}
        missing = sorted(k for k, v in self.diagnosis.window_state.items() if v == "missing_windows")
        if not self.findings:
            line = (f"backward matches the exact Jacobian on all {total} windows in {self.dtype} "
                    f"(max error {self.diagnosis.max_ulp:.2g} ULP, {self.bwd.calls} backward calls)")
            line += self.nondeterminism_note()
            line += "" if fd_ok is None else "; forward and finite differences agree"
            shown = f"β = {tie_policy[5:]}" if tie_policy and tie_policy.startswith("beta:") else tie_policy
            line += f"; tie policy {shown}" if tie_policy else ""
            return line + (f"; zero-window policy {self.stats['zero_window']}" if self.stats.get("zero_window") else "")
        if missing and categories <= {"missing_windows", "not_fd_consistent"}:
            names = [fmt_index(self.g.output_index(b, w)) for b, w in missing]
            return (f"backward visits {total - len(missing)} of {total} output windows: {listing(names)} "
                    f"get{'s' if len(missing) == 1 else ''} nothing; {_ratio(*mass)} (in {self.dtype})")
        return self.findings_line()

    def nondeterminism_note(self) -> str:
        """The headline's word on equal calls that differed bitwise within the bound (the notes say more)."""
        roles = " and ".join(self.nondeterminism)
        return f"; {roles} not bitwise reproducible, within the rounding bound (a note)" if roles else ""

    def findings_line(self) -> str:
        """"k kinds of finding (root categories) in dtype: the first root finding", consequences counted apart."""
        roots = [f for f in self.findings if f.consequence_of is None]
        cats = list(dict.fromkeys(f.category for f in roots))
        line = (f"{len(cats)} kind{'s' if len(cats) > 1 else ''} of finding ({', '.join(cats)}) in {self.dtype}: "
                f"{roots[0].message}")
        follow = len(self.findings) - len(roots)
        return line + (f" ({follow} further finding{'s' if follow > 1 else ''} follow from it)" if follow else "")

    def mark_consequences(self) -> None:
        """Root cause first: after a callable returned the wrong dtype, the value checks on
        what it returned are consequences of that, not categories of their own."""
        dependent = {"forward": ("forward_values", "not_fd_consistent", "nondeterministic"),
                     "backward": BACKWARD_CATEGORIES + ("not_fd_consistent", "nondeterministic")}
        causes = {}
        for f in self.findings:
            for role in dependent:
                if f.category == "bad_output" and f.message.startswith(f"{role} returned dtype"):
                    causes[role] = f.message
        if not causes:
            return
        marked = []
        for f in self.findings:
            cause = next((c for role, c in causes.items() if f.category in dependent[role]), None)
            marked.append(dataclasses.replace(f, consequence_of=cause) if cause and f.consequence_of is None else f)
        self.findings[:] = marked
