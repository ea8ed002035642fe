"""How the verifier reads an input x: exactly, or by the operator's convention where x holds NaN or ±inf.

Read by :class:`symjac.verifiers.pool._verifier._Verifier` (a mixin): the exact forward and
its bound at x (:meth:`Reading.expected`), where the guard lets a non-finite output through
(:meth:`Reading.forward_mask`: windows reading a NaN or an infinity, and windows whose sum a
correct float forward may overflow), the verdict on a forward's outputs (:meth:`Reading.agree`),
the NaN policy a forward follows (:meth:`Reading.choose_nan_policy`, among the operator's
``nan_policies``), and the exact rows with the convention's zero and free entries
(:meth:`Reading.rows_at`). At a finite x each is the plain exact reading.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._exact import ExactArray, nonfinite_codes
from symjac.pool._ops._edges import Nonfinite, counts
from symjac.pool._rows import ExactRows, exact_rows, row_tolerance

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry
    from symjac.pool._ops._protocol import Operator


class Reading:
    """The verifier's reading of inputs (a mixin of :class:`~symjac.verifiers.pool._verifier._Verifier`)."""

    g: Geometry
    op: Operator
    dtype: np.dtype[Any]
    u: float
    nan_policy: str | None  # the NaN policy the forward follows, once read (else the operator's first)
    reading_at: tuple[np.ndarray, str, Nonfinite | None] | None
    exact_at: tuple[np.ndarray, ExactArray] | None
    nan_mixed: dict[str, int]  # NaN windows each other policy would explain, when the chosen one does not

    def reading(self, x: np.ndarray) -> Nonfinite | None:
        """The operator's reading of x when it holds NaN or ±inf (under the NaN policy read from the
        forward, else the operator's first), None when x is finite; kept for the last x."""
        policy = self.nan_policy or self.op.nan_policies[0]
        if self.reading_at is not None and self.reading_at[0] is x and self.reading_at[1] == policy:
            return self.reading_at[2]
        view = None if nonfinite_codes(x) is None else self.op.nonfinite(self.g, x, policy)
        self.reading_at = (x, policy, view)
        return view

    def exact(self, x: np.ndarray) -> ExactArray:
        """``x`` as an exact array (at a non-finite x: the convention's proxy), converted once for
        the passes in turn at one x (max pooling's forward check, exact rows and dense check;
        other modes read x once, and hold no copy); x is never written (the guard restores an
        argument a call changed), so the same object has the same values."""
        view = self.reading(x)
        if view is not None:
            return view.exact
        if not self.op.reuses_exact_input:
            return ExactArray.from_any(x)
        if self.exact_at is None or self.exact_at[0] is not x:
            self.exact_at = (x, ExactArray.from_any(x))
        return self.exact_at[1]

    def rule_input(self, x: np.ndarray) -> np.ndarray:
        """What the operator's rules that read x's floats read: x, or the convention's finite proxy."""
        view = self.reading(x)
        return x if view is None else view.proxy

    def forward_mask(self, x: np.ndarray) -> np.ndarray | None:
        """Where the forward at x may be non-finite (the guard lets it through there, the verdict
        compares it), in the output's layout: windows reading a NaN or an infinity, and windows
        whose float evaluation may overflow (the operator's ``overflows`` rule); None: nowhere."""
        g = self.g
        loose = self.op.overflows(g, self.rule_input(x), self.dtype)
        if nonfinite_codes(x) is not None:
            reads = counts(g, x).any
            loose = reads if loose is None else loose | reads
        return None if loose is None else g.from_canonical(loose, g.out_spatial)

    def expected(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, Callable[[], np.ndarray], np.ndarray | None]:
        """The exact forward at x rounded to float64 (canonical), its tolerance, the exact values
        (built for a finding only) and the windows where a non-finite output is the rounding
        model's (None: none): the operator's ``forward_bound`` at x, or at the convention's proxy
        with the non-finite values at its special windows."""
        g, view = self.g, self.reading(x)
        e_c, tol, exact_of = self.op.forward_bound(g, self.rule_input(x), lambda: self.exact(x), self.dtype, self.u)
        loose = self.op.overflows(g, self.rule_input(x), self.dtype)
        if view is None:
            return e_c, tol, exact_of, loose
        inner = exact_of

        def values() -> np.ndarray:
            exact = np.asarray(inner(), dtype=object).copy()
            exact[view.special] = view.value[view.special]
            return exact

        return (np.where(view.special, view.value, e_c), np.where(view.special, 0.0, tol), values, loose)

    def agree(self, y_c: np.ndarray, e_c: np.ndarray, tol: np.ndarray, loose: np.ndarray | None) -> np.ndarray:
        """(B, W) outputs within ``tol`` of the exact ones, NaN where it is NaN, the same infinity
        where it is one (or where the exact value overflows the dtype: its correct rounding), and
        any non-finite value where ``loose`` (an intermediate a correct evaluation may overflow)."""
        with np.errstate(invalid="ignore", over="ignore"):
            ok = (np.abs(y_c - e_c) <= tol) | (y_c == e_c) | (np.isnan(y_c) & np.isnan(e_c))
            if loose is not None:
                ok |= loose & ~np.isfinite(y_c)
            beyond = np.isinf(y_c) & np.isfinite(e_c)
            if beyond.any():
                ok |= beyond & (y_c == e_c.astype(self.dtype).astype(np.float64))
        return np.asarray(ok)

    def choose_nan_policy(self, x: np.ndarray, y_c: np.ndarray) -> None:
        """Read the NaN policy the forward follows at x's windows holding NaN: the operator's
        policy with the fewest outputs off there (its first at a draw), kept for the verification;
        the others' counts where the chosen one leaves some off (``nan_mixed``: the forward
        follows no one policy). Where every policy fits (windows of NaN only: the same value and
        the same rows under each) none is read."""
        if self.nan_policy is not None or len(self.op.nan_policies) < 2 or nonfinite_codes(x) is None:
            return
        at_nan = counts(self.g, x).nan > 0
        if not at_nan.any():
            return
        off: dict[str, np.ndarray] = {}
        for policy in self.op.nan_policies:
            self.nan_policy = policy
            e_c, tol, _, loose = self.expected(x)
            off[policy] = ~self.agree(y_c, e_c, tol, loose) & at_nan
        chosen = min(self.op.nan_policies, key=lambda p: int(off[p].sum()))
        self.nan_policy = chosen if any(o.any() for o in off.values()) else None
        if off[chosen].any():
            self.nan_mixed = {p: int((off[chosen] & ~off[p]).sum()) for p in self.op.nan_policies
                              if p != chosen and (off[chosen] & ~off[p]).any()}

    def rows_at(self, x: np.ndarray) -> ExactRows:
        """The exact rows at x: at a non-finite x, the proxy's with the convention's exact zeros
        (a limit at an infinity) and free entries (any value: tolerance inf, the observed cell's
        dx is not read) in place."""
        g, view = self.g, self.reading(x)
        exact = exact_rows(g, self.rule_input(x), self.dtype, lambda: self.exact(x))
        if view is None or (view.zero is None and view.free is None):
            return exact
        tol = np.array(np.broadcast_to(row_tolerance(exact, self.u), exact.rows.shape), dtype=np.float64)
        rows = exact.rows.copy()
        if view.zero is not None:
            rows[view.zero] = 0.0
            tol[view.zero] = 0.0
        if view.free is not None:
            free = g.gather(view.free, False) & g.valid[None]
            rows[free] = 0.0
            tol[free] = np.inf
        return dataclasses.replace(exact, rows=rows, tol=tol)

    def convention(self, x: np.ndarray) -> str:
        """The operator's convention at x in words (a finding at a non-finite x quotes it), or ''."""
        view = self.reading(x)
        return "" if view is None else self.op.nonfinite_note(view.policy)
