"""The passes of one pooling verification, in the order :meth:`_Verifier.run` takes them.

At one input shape: the forward check, the probed backward pass (recover the rows by
colouring, confirm with dense calls, diagnose), the pass at tied inputs, the
finite-difference oracle and the extra input families. Every operator-specific step
reads the spec's operator (``g.operator``, :mod:`symjac.pool._ops`); the report is
written by :class:`~symjac.verifiers.pool._summary.Summary`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from symjac._exact import ExactArray
from symjac.check._call import Guard, call_each, same
from symjac.verifiers.pool._inputs import FAMILY_NAMES
from symjac.check._report import MAX_LISTED, Finding, Report, fmt_index, listing
from symjac.check._rounding import gamma, unit_roundoff
from symjac.pool._geometry import Geometry
from symjac.pool._graph import input_colouring
from symjac.pool._spec import PoolSpec
from symjac.verifiers.pool._clarke_sum import clarke_sum_slices
from symjac.verifiers.pool._diagnose import Diagnosis
from symjac.verifiers.pool._fd import MAX_COLOURS, STEP, check_fd, check_fd_directions, directional_fd, finite_differences
from symjac.verifiers.pool._probe import Prober
from symjac.pool._rows import (ExactRows, Rows, cell_counts, dense_tolerance, deviates, open_windows, scatter,
                               scatter_pair)
from symjac.verifiers.pool._families import Families
from symjac.verifiers.pool._reading import Reading
from symjac.verifiers.pool._summary import Summary


#: What ``stats["family_cost"]`` holds for each input family of a verification.
COST_KEYS = ("seconds", "implementation_seconds", "backward_calls", "forward_calls")


class _Verifier(Summary, Reading, Families):
    """One verification: the passes over the implementation, in the order :meth:`run` reads."""

    def __init__(self, spec: PoolSpec, g: Geometry, backward: Callable[..., Any] | None,
                 forward: Callable[..., Any] | None, dtype: np.dtype[Any], tie: str, one_hot_budget: int,
                 timeout: float | None, worker: Any = None, deterministic: bool = False):
        # tie: "any", "first", "last", "split" or "beta:<b>" (β = 0 and 1 named first and split)
        self.spec, self.g, self.dtype, self.tie = spec, g, dtype, tie
        self.deterministic = deterministic  # a bitwise difference between equal calls is a finding, not a note
        self.nondeterminism: dict[str, dict[str, Any]] = {}  # role -> the differences within the bound (notes)
        self.notes: list[str] = []
        self.op = g.operator
        self.u = unit_roundoff(dtype)
        self.findings: list[Finding] = []

        def guard(fn: Callable[..., Any] | None, role: str, names: tuple[str, ...]) -> Guard | None:
            if fn is None:
                return None
            return Guard(fn, role, names, self.findings, timeout=timeout,
                         isolate=None if worker is None else (worker, role))

        self.bwd = guard(backward, "backward", ("x", "dy"))
        self.fwd = guard(forward, "forward", ("x",))
        self.prober = Prober(g, self.backward_each, one_hot_budget)
        self.diagnosis = Diagnosis(g, dtype, self.u, self.findings)
        self.stats: dict[str, Any] = {}
        self.superposition_reported = False
        self.zero_policies: set[str] = set()  # lp: rows seen at all-zero windows ("zero", "one", "other")
        self.families_run: list[str] = []
        self.forward_at: tuple[np.ndarray, np.ndarray] | None = None  # the last checked x and its canonical y
        self.exact_at: tuple[np.ndarray, ExactArray] | None = None  # the last x converted, and its exact array
        self.dys: dict[int, np.ndarray] = {}  # see dense_dy
        # non-finite inputs (symjac.verifiers.pool._reading): the NaN policy read from the forward, the
        # last x's reading, the cells whose dx a pass at a non-finite x leaves open, the tie policies seen there
        self.nan_policy: str | None = None
        self.nan_mixed: dict[str, int] = {}
        self.reading_at = None
        self.free_c: np.ndarray | None = None
        self.nonfinite_policies: dict[str, set[str]] = {}  # "NaN" / "±inf" windows -> tie policies seen there

    def backward_each(self, x: np.ndarray, dys_c: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        """The implementation's backward at x for each canonical (B, n_out) dy, the calls run
        back to back (:meth:`Guard.arrays`: ``dys_c`` is read in the call thread); canonical
        float64 dx, or None when unusable (read no further then)."""
        assert self.bwd is not None
        g, free = self.g, self.free_c  # cells a convention leaves open: any value there, NaN too, read as 0
        mask = None if free is None else g.from_canonical(free, g.in_spatial)
        calls = ((x, g.from_canonical(dy_c.astype(self.dtype), g.out_spatial)) for dy_c in dys_c)
        for dx in self.bwd.arrays(calls, shape=g.input_shape, dtype=self.dtype, index_name="dx", nonfinite=mask):
            if dx is None:
                yield None
                continue
            dx_c = g.to_canonical(dx.astype(np.float64, copy=False))  # dx is a copy
            yield dx_c if free is None else np.where(free, 0.0, dx_c)

    def forward_each(self, xs: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        """The implementation's forward at each x, the calls run back to back; float64 y or None."""
        assert self.fwd is not None
        for y in self.fwd.arrays(((x,) for x in xs), shape=self.g.output_shape, dtype=self.dtype, index_name="y"):
            yield None if y is None else y.astype(np.float64, copy=False)  # y is a copy

    def forward(self, x: np.ndarray) -> np.ndarray | None:
        """One forward call (:meth:`Guard.array`)."""
        assert self.fwd is not None
        y = self.fwd.array(x, shape=self.g.output_shape, dtype=self.dtype, index_name="y",
                           nonfinite=self.forward_mask(x))
        return None if y is None else y.astype(np.float64, copy=False)  # y is a copy

    def forward_backward(self, x: np.ndarray, dy_c: np.ndarray | None,
                         forward: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The forward at x (if ``forward``) and the backward at x for ``dy_c`` (unless None),
        both calls in one sequence (:func:`call_each`: one hand-over): float64 y (layout)
        and canonical float64 dx, None where not called or unusable. Each call is made
        whatever the other returned, as two separate calls would be."""
        g = self.g
        calls: list[tuple[Any, ...]] = []
        if forward and self.fwd is not None:
            calls.append((self.fwd, (x,), g.output_shape, self.dtype, "y", self.forward_mask(x)))
        if dy_c is not None and self.bwd is not None:
            dy = g.from_canonical(dy_c.astype(self.dtype), g.out_spatial)
            calls.append((self.bwd, (x, dy), g.input_shape, self.dtype, "dx", None))
        got = list(call_each([c[0] for c in calls], calls, 8 * g.batch * max(g.n_in, g.n_out)))
        for guard, args, shape, dtype, name, mask in calls[len(got):]:  # a raise ends a sequence: the rest alone
            got.append(guard.array(*args, shape=shape, dtype=dtype, index_name=name, nonfinite=mask))
        y = dx = None
        for (guard, *_), r in zip(calls, got):
            if r is not None and guard is self.fwd:
                y = r.astype(np.float64, copy=False)
            elif r is not None:
                dx = g.to_canonical(r.astype(np.float64, copy=False))
        return y, dx

    def finish(self) -> None:
        """Every call is made: the last look at what they returned (:meth:`Guard.finish`)."""
        for guard in (self.bwd, self.fwd):
            if guard is not None:
                guard.finish()

    # -- the passes, in the order run() takes them ---------------------------------------
    def check_forward(self, x: np.ndarray) -> bool | None:
        """The forward at x (one call) against the exact forward (:meth:`forward_verdict`)."""
        return None if self.fwd is None else self.forward_verdict(x, self.forward(x))

    def forward_verdict(self, x: np.ndarray, y: np.ndarray | None) -> bool:
        """The forward's result ``y`` at x (None: unusable) against the exact forward: exact for
        max, within γ_{n+1}·Σ|x|/d for avg, within the derived bound for lp; at a non-finite x by
        the operator's convention (the NaN policy read from y first, :meth:`choose_nan_policy`)."""
        g = self.g
        if y is None:
            return False
        y_c = g.to_canonical(y, g.out_spatial)
        self.forward_at = (x, y_c)  # the finite differences start from it
        self.choose_nan_policy(x, y_c)
        e_c, tol, exact_of, loose = self.expected(x)
        return self.forward_findings(y_c, e_c, tol, exact_of, loose, self.convention(x))

    def forward_findings(self, y_c: np.ndarray, e_c: np.ndarray, tol: np.ndarray, exact_of: Callable[[], np.ndarray],
                         loose: np.ndarray | None = None, convention: str = "") -> bool:
        """A ``forward_values`` finding for outputs off the exact ones (``e_c`` in float64,
        ``exact_of()`` as exact numbers, built only for a finding) by more than ``tol``
        (:meth:`agree`: NaN and the infinities where they are exact, and any non-finite value
        at ``loose`` windows); ``convention``: the operator's at a non-finite x, quoted."""
        g = self.g
        bad = np.argwhere(~self.agree(y_c, e_c, tol, loose))
        if bad.size:
            exact = exact_of()
            names = [fmt_index(g.output_index(b, w)) for b, w in bad.tolist()]
            words = g.operator.window_words(g, int(bad[0][1]))  # RoI: the first one's box, bin and sample points
            if words:
                names[0] += f" ({words})"
            said = f" (by {convention}" if convention else ""
            if said and self.nan_mixed:
                others = ", ".join(f"{p!r} at {n}" for p, n in self.nan_mixed.items())
                said += f"; another NaN policy fits some of these windows ({others}): the forward follows no one " \
                        "policy, a window's value depends on where its NaN sits"
            self.findings.append(Finding(
                "forward_values", f"forward differs from the exact forward at {len(bad)} of {y_c.size} outputs: "
                                  f"{listing(names)}{said + ')' if said else ''}",
                window=g.output_index(*bad[0].tolist()),
                # the exact values (2/3), not the binary fractions of their float64 roundings
                expected=[exact[b, w] for b, w in bad[:MAX_LISTED].tolist()],
                observed=[float(y_c[b, w]) for b, w in bad[:MAX_LISTED].tolist()]))
        return not bad.size

    def backward_pass(self, x: np.ndarray, context: str, dense: list[np.ndarray], repeat: bool = True,
                      open_only: bool = False) -> tuple[Rows, ExactRows, list[np.ndarray | None]] | None:
        """Probe, attribute, confirm with each dense dy (the first one twice if ``repeat``:
        determinism), classify. At an x holding NaN or ±inf the exact rows are the operator's
        convention (:meth:`rows_at`), the cells it leaves open are not read, and the tie
        policies seen are named apart (``nonfinite_policies``): a NaN window's choice of NaN
        cell is no tie policy of the finite windows.

        ``open_only``: probe only the windows whose exact row is open (:func:`open_windows`); the
        dense calls check every other row against the exact one (a wrong one is then one-hot probed,
        :meth:`rediagnose`). For an operator with a rational dense ``J(x)^T dy`` at an input whose
        ties are few and apart (the ``nonfinite`` family's): a probe call or two, not a probe plan."""
        view = self.reading(x)
        if view is None:
            return self._backward_pass(x, context, dense, repeat, open_only)
        self.free_c, policies, self.diagnosis.policies = view.free, self.diagnosis.policies, set()
        start = len(self.findings)
        try:
            found = self._backward_pass(x, f"{context} (by {self.convention(x)})", dense, repeat, open_only)
            if found is not None and len(self.findings) == start:  # every row right: name the choices at ties
                rows, exact, _ = found
                at_nan = view.special & np.isnan(view.value)
                for where, windows in (("NaN", at_nan), ("±inf", ~at_nan)):
                    self.diagnosis.policies = set()
                    self.op.tie_policy(self.diagnosis, rows, dataclasses.replace(exact, tied=exact.tied & windows), [])
                    self.nonfinite_policies.setdefault(where, set()).update(self.diagnosis.policies)
            return found
        finally:
            self.free_c, self.diagnosis.policies = None, policies

    def _backward_pass(self, x: np.ndarray, context: str, dense: list[np.ndarray], repeat: bool,
                       open_only: bool = False) -> tuple[Rows, ExactRows, list[np.ndarray | None]] | None:
        calls = (dense[:1] if repeat else []) + dense  # ride on the probes' sequence
        exact = self.rows_at(x) if open_only else None
        among = open_windows(exact) if exact is not None and dense else None
        probed = self.prober.probe(x, calls, among)
        if probed is None:
            return None
        rows, unexplained, found = probed
        got: list[np.ndarray | None] = [*found, *[None] * (len(calls) - len(found))]  # None: unusable, or uncalled
        again = got.pop(1) if dense and repeat else None
        if exact is None:
            exact = self.rows_at(x)
        if among is not None:  # the rows not asked for: the exact ones, for the dense calls to confirm
            rows.obs[~among] = np.broadcast_to(exact.rows, rows.obs.shape)[~among]
        self.exact_at = None  # x's last exact use: hold no copy through the passes' (B, W, K) arrays
        suspects, recanted = self.prober.attribute(x, rows, unexplained, lambda r: self.diagnosis.mismatches(r, exact))
        if recanted.keys:  # every call is checked for what it asked: a colour probe's wrong rows stay wrong
            self.diagnosis.classify(recanted.rows, exact, recanted.keys,
                                    f"{context} in their colour probe, though a one-hot probe of each alone is right "
                                    "(the result depends on the call)")
        results: list[np.ndarray | None] = []
        for i, (dy, dx) in enumerate(zip(dense, got)):
            dx, off = self.confirm(x, rows, exact, dy, dx, again if i == 0 else None)
            results.append(dx)
            if off.size:
                suspects = self.rediagnose(x, rows, exact, suspects, dy, dx, off)
        if suspects:
            finding, policy, suspects = self.op.outside_clarke(self.g, rows, exact, suspects, self.u, context)
            if finding is not None and policy is not None:
                self.findings.append(finding)
                self.diagnosis.policies.add(policy)
        if suspects:
            self.diagnosis.classify(rows, exact, suspects, context)
        self.op.tie_policy(self.diagnosis, rows, exact, suspects)
        name = self.op.zero_window_policy(self.g, rows, exact, suspects, self.u)  # lp's all-zero windows
        if name is not None:
            self.zero_policies.add(name)
        return rows, exact, results

    def confirm(self, x: np.ndarray, rows: Rows, exact: ExactRows, dy: np.ndarray, dx: np.ndarray | None,
                again: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """A dense call's dx (None: unusable) against what it asked: the superposition of
        the rows observed so far and, at cells no tied window reads, the exact ``J(x)^T dy``;
        ``again`` (the same call repeated) is checked the same way and compared with dx
        (:meth:`repeat`). Returns dx and the (b, cell) pairs where it is off."""
        if dx is None:
            return None, np.zeros((0, 2), dtype=int)
        off_of = self.dense_bounds(x, rows, exact, dy)
        off = off_of(dx)
        if again is not None:
            self.repeat(self.bwd, "dx", self.g.in_spatial, dx, again, off.size == 0 and off_of(again).size == 0)
        return dx, off

    def dense_bounds(self, x: np.ndarray, rows: Rows, exact: ExactRows,
                     dy: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """``off(dx)``: the (b, cell) pairs where a dense call's dx for ``dy`` (canonical) is
        off the superposition of the observed rows (within γ_{m+2}·Σ|terms| for m terms, plus
        what the rows are off the exact rows at untied windows, ``(1 + γ_{m+2})·Σ|dy·(obs − J)|``) or,
        where the exact ``J(x)^T dy`` is unique (no tied window reads the cell) and rational,
        off that exact value within γ_{m+2}·Σ|terms| of the exact terms (rows within their own
        tolerance do not widen this one)."""
        g = self.g
        predicted, bound = scatter_pair(g, dy, rows.obs)
        count = np.broadcast_to(cell_counts(g).astype(np.float64), predicted.shape).copy()
        for (b, w), vs in rows.stray.items():
            for bb, c, v in vs:
                predicted[bb, c] += dy[b, w] * v
                bound[bb, c] += abs(dy[b, w] * v)
                count[bb, c] += 1
        # rows within their own tolerance (atomics' last bits) shift the superposition by what they are off
        # the exact rows at untied windows (u·|J| ≤ u·(|obs| + |obs − J|) covers the exact rows' own rounding)
        shift = 2.0**-52 * bound
        if deviates(rows, exact):  # (B, W, K) temporaries, rarely (read blockwise first), freed at once
            untied = ~np.broadcast_to(exact.tied[..., None], rows.obs.shape)
            shift = shift + (1 + 2.0**-52) * scatter_pair(g, dy, np.abs(rows.obs - exact.rows) * untied)[1]
        tol = dense_tolerance(bound, shift, count, self.u)
        want = want_tol = None
        if self.op.extra_families:  # a rational dense J^T dy (avg, max); lp has its rows' derived bounds only
            ex = self.exact(x) if self.op.reuses_exact_input else None
            self.exact_at = None  # hold no copy through the later passes
            terms, e_bound, e_count = self.op.dense_terms(g, ex, ExactArray.from_any(g.from_canonical(dy, g.out_spatial)))
            want = g.to_canonical(terms.to_numpy(np.float64))
            want_tol = gamma(e_count + 2, self.u) * e_bound + 2.0**-60 * e_bound
            if exact.tied.any():  # at ties J^T dy is a set: the cells tied windows read are the rows' to check
                reads = scatter(g, exact.tied.astype(np.float64), np.broadcast_to(g.valid, exact.rows.shape)
                                .astype(np.float64))
                want_tol = np.where(reads > 0, np.inf, want_tol)

        def off(dx: np.ndarray) -> np.ndarray:
            bad = np.abs(dx - predicted) > tol
            if want is not None and want_tol is not None:
                bad |= np.abs(dx - want) > want_tol
            found = np.argwhere(bad)
            if found.size and exact.tied.any():  # off the rows seen, but maybe another Clarke choice (this call's)
                fine = clarke_sum_slices(g, exact, dy, dx, tol, self.u, np.unique(found[:, 0]))
                if fine:
                    self.diagnosis.policies.add("varying")
                    found = found[~np.isin(found[:, 0], list(fine))]
            return found
        return off

    def repeat(self, guard: Guard | None, name: str, spatial: tuple[int, ...], first: np.ndarray,
               second: np.ndarray, within: bool) -> None:
        """Two results of equal calls (canonical): equal bitwise, or a difference that is a
        note when both are ``within`` the rounding bound of the exact value (atomics that
        accumulate in another order) and ``deterministic`` was not asked for; else the
        ``nondeterministic`` finding."""
        g = self.g
        if guard is None or same(first, second):
            return
        if self.deterministic or not within:
            guard.compare(g.from_canonical(first, spatial), g.from_canonical(second, spatial), name)
            return
        differ = int(np.count_nonzero(first != second))
        gap = float(np.abs(first - second).max())
        self.nondeterminism[guard.role] = {"elements": differ, "of": int(first.size), "max_difference": gap}
        self.notes.append(f"{guard.role} gave bitwise different results for equal inputs at {differ} of "
                          f"{first.size} elements (at most {gap:.3g} apart), each within the rounding bound of "
                          "the exact value (at ties: of some element of the Clarke set): a note, not a finding "
                          "(deterministic=True makes it one)")

    def rediagnose(self, x: np.ndarray, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]],
                   dy: np.ndarray, dx: np.ndarray | None, off: np.ndarray) -> list[tuple[int, int]]:
        """Rows that look right alone but not together: find the windows behind the cells,
        one-hot, and re-diagnose (a swap between same-colour windows, or overlapping
        windows that do not accumulate)."""
        g = self.g
        implicated = [(b, int(w)) for b, c in off[: 4 * MAX_LISTED].tolist()
                      for w in np.flatnonzero((g.cells == c).any(axis=1))]
        self.prober.one_hot(x, rows, list(dict.fromkeys(implicated)))
        suspects = list(dict.fromkeys(suspects + self.diagnosis.mismatches(rows, exact)))
        if not suspects and dx is not None and not self.superposition_reported:
            cells = [g.input_index(b, c) for b, c in off.tolist()]
            predicted, bound = scatter_pair(g, dy, rows.obs)
            b_idx, c_idx = off[:, 0], off[:, 1]
            # a sum that drops terms stays within the terms' total magnitude; more is no lost gradient
            if (np.abs(dx[b_idx, c_idx]) <= bound[b_idx, c_idx] * (1 + 2.0**-20)).all():
                category, what = "partial_windows", "lose gradient from overlapping windows (accumulation is not a sum)"
            else:
                category, what = "wrong_weights", "get more than all their windows' rows send together"
            self.findings.append(Finding(
                category, f"each window alone is right, but with a dense dy {len(off)} cells {what}: "
                          f"{listing([fmt_index(c) for c in cells])}",
                cells=tuple(cells[:MAX_LISTED]),
                expected=[float(predicted[b, c]) for b, c in off[:MAX_LISTED].tolist()],
                observed=[float(dx[b, c]) for b, c in off[:MAX_LISTED].tolist()]))
            self.superposition_reported = True
        return suspects

    def fd_pass(self, x: np.ndarray, rows: Rows, exact: ExactRows, dy_c: np.ndarray) -> bool | None:
        """The second oracle, on windows where FD with step h stays on one side of every kink."""
        if self.fwd is None or not self.op.finite_differences:
            return None  # lp: the FD error model (exact or γ-summed forward) does not cover the root
        if self.reading(x) is not None:
            self.notes.append("finite differences not taken: x holds NaN or ±inf (the steps would move them nowhere "
                              "and every window reading one)")
            return None
        g = self.g
        usable = ~exact.tied & (self.op.fd_gaps(g, x) > STEP)
        if self.forward_at is not None and self.forward_at[0] is x:
            y = self.forward_at[1]
        else:
            y_layout = self.forward(x)
            if y_layout is None:
                return None
            y = g.to_canonical(y_layout, g.out_spatial)
        if input_colouring(g)[1] > MAX_COLOURS:
            directions = directional_fd(g, self.forward_each, x, y, self.dtype, self.u)
            if directions is None:
                return None
            return check_fd_directions(g, rows, directions, usable, self.u, self.findings)
        found = finite_differences(g, self.forward_each, x, y, self.dtype, self.u)
        if found is None:
            return None
        fd, fd_tol = found
        if g.n_in * g.batch <= 4096 and usable.all():
            self.stats["fd_gradient"] = g.from_canonical(scatter(g, dy_c, fd), g.in_spatial)
        return check_fd(g, rows, fd, fd_tol, usable, self.u, self.findings)

    def run_forward_only(self, x: np.ndarray, tie_x: np.ndarray | None, main_family: str,
                         extra: Sequence[tuple[str, int]], seed: int) -> Report:
        """No backward (a forward-only runtime): the forward at x, at tied inputs (max), at
        each extra family's input, and once more at x for determinism; the report says that
        only the forward was checked."""
        assert self.fwd is not None
        with self.charged(main_family):
            forward_ok = self.check_forward(x)
        self.tag(0, main_family)
        if tie_x is not None:
            start = len(self.findings)
            with self.charged("ties"):
                forward_ok = bool(self.check_forward(tie_x)) and bool(forward_ok)
            self.tag(start, "ties", f"at {FAMILY_NAMES['ties']} inputs")
        for family, index in extra:
            with self.charged(family):
                forward_ok = bool(self.family_pass(family, seed, index)) and bool(forward_ok)
        first, again = self.forward(x), self.forward(x)
        if first is not None and again is not None:
            g = self.g
            e_c, tol, _, loose = self.expected(x)
            f_c, a_c = g.to_canonical(first, g.out_spatial), g.to_canonical(again, g.out_spatial)
            within = bool(self.agree(f_c, e_c, tol, loose).all() and self.agree(a_c, e_c, tol, loose).all())
            self.repeat(self.fwd, "y", g.out_spatial, f_c, a_c, within)
        self.tag(0, main_family)
        self.finish()
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, False, None, None))
        self.stats.update(self.nonfinite_figures(x))
        total = self.g.batch * self.g.n_out
        note = "only the forward was checked (no backward given)"
        if not self.findings:
            line = f"forward matches the exact forward at all {total} outputs in {self.dtype} " \
                   f"({self.fwd.calls} forward calls){self.nondeterminism_note()}{self.nonfinite_note()}; {note}"
        else:
            line = f"{self.findings_line()}; {note}"
        return Report(repr(self.spec), tuple(self.findings), self.stats, line, tuple(self.notes))

    @contextlib.contextmanager
    def charged(self, family: str) -> Iterator[None]:
        """Add what the block costs to ``stats["family_cost"][family]``: seconds in all, seconds inside
        the implementation's calls, and its backward and forward calls (``benchmarks/family_cost.py``)."""
        guards = [gd for gd in (self.bwd, self.fwd) if gd is not None]
        before = time.perf_counter(), sum(gd.seconds for gd in guards), [0 if gd is None else gd.calls for gd in (self.bwd, self.fwd)]
        try:
            yield
        finally:
            cost = self.stats.setdefault("family_cost", {}).setdefault(family, dict.fromkeys(COST_KEYS, 0))
            cost["seconds"] += time.perf_counter() - before[0]
            cost["implementation_seconds"] += sum(gd.seconds for gd in guards) - before[1]
            for key, gd, calls in zip(("backward_calls", "forward_calls"), (self.bwd, self.fwd), before[2]):
                cost[key] += 0 if gd is None else gd.calls - calls

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None, *, main_family: str = "distinct",
            extra: Sequence[tuple[str, int]] = (), seed: int = 0) -> Report:
        g = self.g
        self.families_run = [main_family] + (["ties"] if tie_x is not None else [])
        if self.bwd is None:
            return self.run_forward_only(x, tie_x, main_family, extra, seed)
        with self.charged(main_family):
            forward_ok = self.check_forward(x)
            # The dense confirmation uses distinct dy values, so gradient swapped between
            # windows shows; a caller's dy is one more dense call, reported in the stats.
            dense = [self.dense_dy("distinct", 0)[1]]
            if dy is not None:
                dense.append(g.to_canonical(dy, g.out_spatial).astype(np.float64))
            probed, fd_ok, mass = self.main_pass(x, dense)
        if probed:
            self.tag(0, main_family)
            if tie_x is not None:
                start = len(self.findings)
                # one dense call at ties too: its own Clarke choice may differ from the probes' (varying)
                with self.charged("ties"):
                    self.backward_pass(tie_x, " at tied inputs", [self.dense_dy("distinct", 0)[1]], repeat=False)
                self.tag(start, "ties")
            for family, index in extra:
                with self.charged(family):
                    forward_ok = self.family_pass(family, seed, index) is not False and forward_ok
        self.tag(0, main_family)
        self.finish()
        tie_policy = self.tie_policy_verdict()
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, probed, fd_ok, tie_policy))
        self.stats.update(self.nonfinite_figures(x))
        line = self.headline(fd_ok, tie_policy, mass) + ("" if self.findings else self.nonfinite_note())
        return Report(repr(self.spec), tuple(self.findings), self.stats, line, tuple(self.notes))

    def main_pass(self, x: np.ndarray, dense: list[np.ndarray]) -> tuple[bool, bool | None, tuple[float, float]]:
        """The probed pass at x, the FD oracle and the gradient figures of the report:
        (probed, FD verdict, (observed, exact) gradient mass). Its (B, W, K) arrays are
        released on return, before the next pass makes its own."""
        g = self.g
        found = self.backward_pass(x, "", dense)
        if found is None:
            return False, None, (0.0, 0.0)
        rows, exact, results = found
        dy_c = dense[-1]
        fd_ok = self.fd_pass(x, rows, exact, dy_c)
        if g.n_in * g.batch <= 4096 and results[-1] is not None:
            self.stats["observed_gradient"] = g.from_canonical(results[-1], g.in_spatial)
            self.stats["expected_gradient"] = g.from_canonical(scatter(g, dy_c, exact.rows), g.in_spatial)
        mass = (float(rows.obs.sum()) + sum(v for vs in rows.stray.values() for _, _, v in vs),
                float(exact.rows.sum()))
        return True, fd_ok, mass
