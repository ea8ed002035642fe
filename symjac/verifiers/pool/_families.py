"""The extra input families of one pooling verification, and the figures of its non-finite inputs.

A mixin of :class:`symjac.verifiers.pool._verifier._Verifier`: each extra family's pass
(:meth:`Families.family_pass`: one dense call against the exact ``J(x)^T dy``, or a probed pass
where the operator has no such product or the family's inputs tie), its dense check, the dy it
uses, the family tag on findings, and the stats and headline words of non-finite inputs (the NaN
policy read, the tie policies at their windows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._exact import ExactArray, nonfinite_codes
from symjac.check._report import MAX_LISTED, Finding, fmt_index, listing
from symjac.check._rounding import gamma
from symjac.verifiers.pool._inputs import FAMILY_NAMES, TIED, distinct_dy, generate_input, near_tie_dy
from symjac.verifiers.pool._summary import BACKWARD_CATEGORIES

if TYPE_CHECKING:
    from symjac.check._call import Guard
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._protocol import Operator
    from symjac.pool._rows import ExactRows, Rows


class Families:
    """The extra families' passes (a mixin: the verifier gives the calls and the checks they use)."""

    g: Geometry
    op: Operator
    dtype: np.dtype[Any]
    u: float
    findings: list[Finding]
    fwd: Guard | None
    bwd: Guard | None
    families_run: list[str]
    dys: dict[int, np.ndarray]
    stats: dict[str, Any]
    nan_policy: str | None
    nonfinite_policies: dict[str, set[str]]
    check_forward: Callable[[np.ndarray], bool | None]
    forward_verdict: Callable[[np.ndarray, np.ndarray | None], bool]
    forward_backward: Callable[[np.ndarray, np.ndarray | None, bool], tuple[np.ndarray | None, np.ndarray | None]]
    backward_pass: Callable[..., tuple[Rows, ExactRows, list[np.ndarray | None]] | None]
    exact: Callable[[np.ndarray], ExactArray]
    exact_at: tuple[np.ndarray, ExactArray] | None

    def dense_dy(self, family: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """A family's dense dy (near-tie values for ``near_ties``, else distinct) in the
        layout and as canonical float64. Max pooling's distinct dy is generated once per
        seed: the main pass's (seed 0) is the all-negative family's at seed 0. Its canonical
        form is kept (read-only; the main pass holds it anyway) and the layout array made
        from it again (the values are the dtype's, so the round trip is exact)."""
        g = self.g
        if family != "near_ties" and seed in self.dys:
            dy_c = self.dys[seed]
            return g.from_canonical(dy_c.astype(self.dtype), g.out_spatial), dy_c
        dy = (near_tie_dy if family == "near_ties" else distinct_dy)(g, self.dtype, seed)
        dy_c = g.to_canonical(dy, g.out_spatial).astype(np.float64)
        if family != "near_ties" and self.op.reuses_exact_input:  # max: the all-negative family's dy at seed 0
            dy_c.setflags(write=False)  # shared by the passes that ask for it
            self.dys[seed] = dy_c
        return dy, dy_c

    def tag(self, start: int, family: str, said: str = "") -> None:
        """Name the input family on the findings from ``start`` on (and in their message)."""
        for i in range(start, len(self.findings)):
            f = self.findings[i]
            if f.family is None:
                message = f"{said}: {f.message}" if said else f.message
                self.findings[i] = dataclasses.replace(f, family=family, message=message)

    def family_pass(self, family: str, seed: int, index: int = 0) -> bool | None:
        """One dense backward call (and one forward call) at an input of ``family``,
        against the exact ``J(x)^T dy``: the budget of an extra family; a probed pass (every
        window's row, as at the tie input) for an operator without that exact dense product (lp)
        and at inputs that tie (:data:`~symjac.verifiers.pool._inputs.TIED`) for one with ties.

        A side already found wrong at the earlier inputs is not called again: its
        report stands, and a second finding about the same bug would only blur it.
        Returns the forward check's verdict (None: not checked).
        """
        g = self.g
        categories = {f.category for f in self.findings}
        check_fwd = self.fwd is not None and not self.fwd.bad and "forward_values" not in categories
        check_bwd = self.bwd is not None and not self.bwd.bad and not categories & set(BACKWARD_CATEGORIES)
        if not (check_fwd or check_bwd):
            return None
        self.families_run.append(family)
        start = len(self.findings)
        x = generate_input(g, family, self.dtype, seed, index)  # index: which input of a family of several
        if not self.op.extra_families or (self.op.ties and family in TIED):  # every window's row, tie sets included
            forward_ok = self.check_forward(x) if check_fwd else None
            if check_bwd:  # with a rational dense J^T dy only the tied rows need a probe
                self.backward_pass(x, "", [self.dense_dy(family, seed)[1]], repeat=False,
                                   open_only=self.op.extra_families)
        else:
            dy, dy_c = self.dense_dy(family, seed) if check_bwd else (None, None)
            y, dx = self.forward_backward(x, dy_c if check_bwd else None, check_fwd)
            forward_ok = self.forward_verdict(x, y) if check_fwd else None
            if dx is not None and dy is not None:
                self.dense_check(x, dy, dx)
        self.tag(start, family, f"at {FAMILY_NAMES[family]} inputs")
        return forward_ok

    def dense_check(self, x: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> None:
        """dx against the exact ``J(x)^T dy`` (rounded once to float64), within
        γ_{m+2}·Σ|terms| for a cell that sums m window contributions."""
        g = self.g
        ex = self.exact(x) if self.op.reuses_exact_input else None
        self.exact_at = None  # x's last exact use
        exact, bound, count = self.op.dense_terms(g, ex, ExactArray.from_any(dy))
        want = g.to_canonical(exact.to_numpy(np.float64))
        tol = gamma(count + 2, self.u) * bound + 2.0**-60 * bound
        bad = np.argwhere(np.abs(dx - want) > tol)
        if not bad.size:
            return
        b_idx, c_idx = bad[:, 0], bad[:, 1]
        if ((want[b_idx, c_idx] == 0) & (dx[b_idx, c_idx] != 0)).any():
            category, what = "wrong_cells", "gradient arrives at cells the exact Jacobian gives none"
        elif (np.abs(dx[b_idx, c_idx]) < np.abs(want[b_idx, c_idx])).all():
            category, what = "partial_windows", "gradient is lost"
        else:
            category, what = "wrong_weights", "gradient arrives with wrong weights"
        cells = [g.input_index(b, c) for b, c in bad.tolist()]
        self.findings.append(Finding(
            category, f"with a dense dy the backward differs from the exact J(x)^T dy at {len(bad)} of {dx.size} "
                      f"cells ({what}): {listing([fmt_index(c) for c in cells])}",
            cells=tuple(cells[:MAX_LISTED]),
            expected=[float(want[b, c]) for b, c in bad[:MAX_LISTED].tolist()],
            observed=[float(dx[b, c]) for b, c in bad[:MAX_LISTED].tolist()]))

    def nonfinite_figures(self, x: np.ndarray) -> dict[str, Any]:
        """The stats of non-finite inputs: the NaN policy the forward follows (operators with several;
        without a forward the first is assumed) and the tie policy seen at their windows."""
        ran = "nonfinite" in self.families_run or nonfinite_codes(x) is not None
        policy = None
        if ran and len(self.op.nan_policies) > 1:  # read from the forward where it tells them apart
            policy = self.nan_policy or (f"{self.op.nan_policies[0]} (assumed: no forward)" if self.fwd is None
                                         else None)
        ties = ", ".join(f"{next(iter(seen)) if len(seen) == 1 else 'varying'} at {where} windows"
                         for where, seen in self.nonfinite_policies.items() if seen)
        return {"nan_policy": policy, "nonfinite_tie_policy": ties or None}

    def nonfinite_note(self) -> str:
        """The headline's word on the policies at non-finite inputs."""
        return nan_policy_words(self.stats.get("nan_policy"), self.stats.get("nonfinite_tie_policy"))


def nan_policy_words(policy: str | None, ties: str | None) -> str:
    """``; NaN policy propagate (ties: last at NaN windows, ...)`` for a headline, or ''."""
    if not policy:
        return ""
    if not ties:
        return f"; NaN policy {policy}"
    if policy.endswith(")"):  # "propagate (assumed: no forward)"
        return f"; NaN policy {policy[:-1]}; ties: {ties})"
    return f"; NaN policy {policy} (ties: {ties})"
