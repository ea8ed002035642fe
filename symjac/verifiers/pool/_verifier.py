"""The passes of one pooling verification, in the order :meth:`_Verifier.run` takes them.

At one input shape: the forward check, the probed backward pass (recover the rows by
colouring, confirm with dense calls, diagnose), the pass at tied inputs, the
finite-difference oracle and the extra input families. Every operator-specific step
reads the spec's operator (``g.operator``, :mod:`symjac.pool._ops`); the report is
written by :class:`~symjac.verifiers.pool._summary.Summary`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import numpy as np

from symjac._exact import ExactArray
from symjac.check._call import Guard, call_each, same
from symjac.verifiers.pool._inputs import FAMILY_NAMES, distinct_dy, generate_input, near_tie_dy
from symjac.check._report import MAX_LISTED, Finding, Report, fmt_index, listing
from symjac.check._rounding import gamma, unit_roundoff
from symjac.pool._geometry import Geometry
from symjac.pool._graph import input_colouring
from symjac.pool._spec import PoolSpec
from symjac.verifiers.pool._clarke_sum import clarke_sum_slices
from symjac.verifiers.pool._diagnose import Diagnosis
from symjac.verifiers.pool._fd import MAX_COLOURS, STEP, check_fd, check_fd_directions, directional_fd, finite_differences
from symjac.verifiers.pool._probe import Prober
from symjac.pool._rows import ExactRows, Rows, cell_counts, exact_rows, scatter, scatter_pair
from symjac.verifiers.pool._summary import BACKWARD_CATEGORIES, Summary


class _Verifier(Summary):
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

    def backward_each(self, x: np.ndarray, dys_c: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        """The implementation's backward at x for each canonical (B, n_out) dy, the calls run
        back to back (:meth:`Guard.arrays`: ``dys_c`` is read in the call thread); canonical
        float64 dx, or None when unusable (read no further then)."""
        assert self.bwd is not None
        g = self.g
        calls = ((x, g.from_canonical(dy_c.astype(self.dtype), g.out_spatial)) for dy_c in dys_c)
        for dx in self.bwd.arrays(calls, shape=g.input_shape, dtype=self.dtype, index_name="dx"):
            yield None if dx is None else g.to_canonical(dx.astype(np.float64, copy=False))  # dx is a copy

    def forward_each(self, xs: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        """The implementation's forward at each x, the calls run back to back; float64 y or None."""
        assert self.fwd is not None
        for y in self.fwd.arrays(((x,) for x in xs), shape=self.g.output_shape, dtype=self.dtype, index_name="y"):
            yield None if y is None else y.astype(np.float64, copy=False)  # y is a copy

    def forward(self, x: np.ndarray) -> np.ndarray | None:
        """One forward call (:meth:`Guard.array`)."""
        assert self.fwd is not None
        y = self.fwd.array(x, shape=self.g.output_shape, dtype=self.dtype, index_name="y")
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
            calls.append((self.fwd, (x,), g.output_shape, self.dtype, "y"))
        if dy_c is not None and self.bwd is not None:
            dy = g.from_canonical(dy_c.astype(self.dtype), g.out_spatial)
            calls.append((self.bwd, (x, dy), g.input_shape, self.dtype, "dx"))
        got = list(call_each([c[0] for c in calls], calls, 8 * g.batch * max(g.n_in, g.n_out)))
        for guard, args, shape, dtype, name in calls[len(got):]:  # a raise ends a sequence: the rest alone
            got.append(guard.array(*args, shape=shape, dtype=dtype, index_name=name))
        y = dx = None
        for (guard, *_), r in zip(calls, got):
            if r is not None and guard is self.fwd:
                y = r.astype(np.float64, copy=False)
            elif r is not None:
                dx = g.to_canonical(r.astype(np.float64, copy=False))
        return y, dx

    def exact(self, x: np.ndarray) -> ExactArray:
        """``x`` as an exact array, converted once for the passes in turn at one x (max
        pooling's forward check, exact rows and dense check; other modes read x once, and
        hold no copy); x is never written (the guard restores an argument a call changed),
        so the same object has the same values."""
        if not self.op.reuses_exact_input:
            return ExactArray.from_any(x)
        if self.exact_at is None or self.exact_at[0] is not x:
            self.exact_at = (x, ExactArray.from_any(x))
        return self.exact_at[1]

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

    # -- the passes, in the order run() takes them ---------------------------------------
    def check_forward(self, x: np.ndarray) -> bool | None:
        """The forward at x (one call) against the exact forward (:meth:`forward_verdict`)."""
        return None if self.fwd is None else self.forward_verdict(x, self.forward(x))

    def forward_verdict(self, x: np.ndarray, y: np.ndarray | None) -> bool:
        """The forward's result ``y`` at x (None: unusable) against the exact forward: exact for
        max, within γ_{n+1}·Σ|x|/d for avg, within the derived bound for lp."""
        g = self.g
        if y is None:
            return False
        y_c = g.to_canonical(y, g.out_spatial)
        self.forward_at = (x, y_c)  # the finite differences start from it
        e_c, tol, exact_of = self.op.forward_bound(g, x, lambda: self.exact(x), self.dtype, self.u)
        return self.forward_findings(y_c, e_c, tol, exact_of)

    def forward_findings(self, y_c: np.ndarray, e_c: np.ndarray, tol: np.ndarray,
                         exact_of: Callable[[], np.ndarray]) -> bool:
        """A ``forward_values`` finding for outputs off the exact ones (``e_c`` in float64,
        ``exact_of()`` as exact numbers, built only for a finding) by more than ``tol``."""
        g = self.g
        bad = np.argwhere(np.abs(y_c - e_c) > tol)
        if bad.size:
            exact = exact_of()
            names = [fmt_index(g.output_index(b, w)) for b, w in bad.tolist()]
            self.findings.append(Finding(
                "forward_values", f"forward differs from the exact forward at {len(bad)} of {y_c.size} outputs: "
                                  f"{listing(names)}",
                window=g.output_index(*bad[0].tolist()),
                # the exact values (2/3), not the binary fractions of their float64 roundings
                expected=[exact[b, w] for b, w in bad[:MAX_LISTED].tolist()],
                observed=[float(y_c[b, w]) for b, w in bad[:MAX_LISTED].tolist()]))
        return not bad.size

    def backward_pass(self, x: np.ndarray, context: str, dense: list[np.ndarray],
                      repeat: bool = True) -> tuple[Rows, ExactRows, list[np.ndarray | None]] | None:
        """Probe, attribute, confirm with each dense dy (the first one twice if ``repeat``:
        determinism), classify."""
        calls = (dense[:1] if repeat else []) + dense  # ride on the probes' sequence
        probed = self.prober.probe(x, calls)
        if probed is None:
            return None
        rows, unexplained, found = probed
        got: list[np.ndarray | None] = [*found, *[None] * (len(calls) - len(found))]  # None: unusable, or uncalled
        again = got.pop(1) if dense and repeat else None
        exact = exact_rows(self.g, x, self.dtype, lambda: self.exact(x))
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
        # rows within their own tolerance (atomics' last bits) shift the superposition by what they are
        # off the exact rows (at untied windows; plus u·|row|, a bound of the exact rows' own rounding)
        # off the exact rows (u·|J| ≤ u·(|obs| + |obs − J|) covers the exact rows' own rounding)
        dev = rows.obs - exact.rows  # one (B, W, K) temporary, in place from here
        np.abs(dev, out=dev)
        dev *= ~np.broadcast_to(exact.tied[..., None], dev.shape)
        shift = 2.0**-52 * bound
        if dev.any():
            shift = shift + (1 + 2.0**-52) * scatter_pair(g, dy, dev)[1]
        del dev
        tol = (gamma(count + 2, self.u) + 2.0**-60) * bound + (1 + gamma(count + 2, self.u)) * shift
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

    def tag(self, start: int, family: str, said: str = "") -> None:
        """Name the input family on the findings from ``start`` on (and in their message)."""
        for i in range(start, len(self.findings)):
            f = self.findings[i]
            if f.family is None:
                message = f"{said}: {f.message}" if said else f.message
                self.findings[i] = dataclasses.replace(f, family=family, message=message)

    def family_pass(self, family: str, seed: int, index: int = 0) -> bool | None:
        """One dense backward call (and one forward call) at an input of ``family``,
        against the exact ``J(x)^T dy``: the budget of an extra family.

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

    def run_forward_only(self, x: np.ndarray, tie_x: np.ndarray | None, main_family: str,
                         extra: Sequence[tuple[str, int]], seed: int) -> Report:
        """No backward (a forward-only runtime): the forward at x, at tied inputs (max), at
        each extra family's input, and once more at x for determinism; the report says that
        only the forward was checked."""
        assert self.fwd is not None
        forward_ok = self.check_forward(x)
        self.tag(0, main_family)
        if tie_x is not None:
            start = len(self.findings)
            forward_ok = bool(self.check_forward(tie_x)) and bool(forward_ok)
            self.tag(start, "ties", f"at {FAMILY_NAMES['ties']} inputs")
        for family, index in extra:
            forward_ok = bool(self.family_pass(family, seed, index)) and bool(forward_ok)
        first, again = self.forward(x), self.forward(x)
        if first is not None and again is not None:
            g = self.g
            e_c, tol, _ = self.op.forward_bound(g, x, lambda: self.exact(x), self.dtype, self.u)
            f_c, a_c = g.to_canonical(first, g.out_spatial), g.to_canonical(again, g.out_spatial)
            within = bool((np.abs(f_c - e_c) <= tol).all() and (np.abs(a_c - e_c) <= tol).all())
            self.repeat(self.fwd, "y", g.out_spatial, f_c, a_c, within)
        self.tag(0, main_family)
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, False, None, None))
        total = self.g.batch * self.g.n_out
        note = "only the forward was checked (no backward given)"
        if not self.findings:
            line = f"forward matches the exact forward at all {total} outputs in {self.dtype} " \
                   f"({self.fwd.calls} forward calls){self.nondeterminism_note()}; {note}"
        else:
            line = f"{self.findings_line()}; {note}"
        return Report(repr(self.spec), tuple(self.findings), self.stats, line, tuple(self.notes))

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None, *, main_family: str = "distinct",
            extra: Sequence[tuple[str, int]] = (), seed: int = 0) -> Report:
        g = self.g
        self.families_run = [main_family] + (["ties"] if tie_x is not None else [])
        if self.bwd is None:
            return self.run_forward_only(x, tie_x, main_family, extra, seed)
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
                self.backward_pass(tie_x, " at tied inputs", [self.dense_dy("distinct", 0)[1]], repeat=False)
                self.tag(start, "ties")
            for family, index in extra:
                forward_ok = self.family_pass(family, seed, index) is not False and forward_ok
        self.tag(0, main_family)
        tie_policy = self.tie_policy_verdict()
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, probed, fd_ok, tie_policy))
        return Report(repr(self.spec), tuple(self.findings), self.stats, self.headline(fd_ok, tie_policy, mass),
                      tuple(self.notes))

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
