"""Verify an implementation's forward/backward against the exact derivative.

``verify(spec, backward=..., forward=...)`` recovers the implementation's Jacobian
with few backward calls (one per colour of the window conflict graph:
:mod:`symjac.verifiers._pool_probe`), confirms it with a dense random exact dy,
diffs it window by window against the exact Jacobian and checks max pooling at
ties against the Clarke set (:mod:`symjac.verifiers._pool_diagnose`), runs a
second oracle (:mod:`symjac.verifiers._pool_fd`: compressed one-sided differences of
the implementation's own forward), and calls the implementation only through the
guarded-call core (:mod:`symjac.check._call`), so raised errors, bad outputs,
mutated inputs, hangs and nondeterminism are findings. All of it lands in a
:class:`~symjac.Report`; nothing the implementation does crashes symjac.

Float comparisons: an entry obtained from m rounded operations is compared with the
exact value e within ``gamma_{m+2}(u) * sum|terms|`` (Higham's bound for a sum of
m terms, plus one rounding for a weight and one for the output), where u is the
unit roundoff of the dtype; errors are reported in ULPs of the exact value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.check._call import DEFAULT_TIMEOUT, Guard, call_each
from symjac.check._inputs import FAMILY_NAMES, distinct_dy, distinct_input, generate_input, near_tie_dy, tie_input
from symjac.check._inputs import families as default_families
from symjac.check._report import MAX_LISTED, Finding, Report, fmt_index, listing
from symjac.check._rounding import float_dtype, gamma, unit_roundoff
from symjac.pool._cover import cover
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._jacobian import exact_forward, vjp_terms
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._symbolic import TIE_POLICIES
from symjac.pool._beta import Beta, parse_tie
from symjac.verifiers._pool_beta import beta_name, outside_clarke
from symjac.verifiers._pool_diagnose import Diagnosis
from symjac.pool._lp import exact_forward as lp_forward
from symjac.verifiers._pool_lp import forward_tolerance as lp_forward_tolerance, zero_window_policy
from symjac.pool._graph import input_colouring
from symjac.verifiers._pool_fd import MAX_COLOURS, STEP, check_fd, check_fd_directions, directional_fd, finite_differences
from symjac.verifiers._pool_probe import Prober
from symjac.verifiers._pool_rows import ExactRows, Rows, cell_counts, exact_rows, gaps, scatter, scatter_pair

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


#: Categories a neighbouring convention can explain (a hint is sought only when every root finding is one):
#: wrong values, and bad outputs (a wrong output shape, or a backward that raises on a dy of the wrong shape).
HINTABLE = ("forward_values", "missing_windows", "partial_windows", "wrong_cells", "wrong_weights",
            "tie_not_subgradient", "not_fd_consistent", "bad_output")


class _Verifier:
    """One verification: the passes over the implementation, in the order :meth:`run` reads."""

    def __init__(self, spec: PoolSpec, g: Geometry, backward: Callable[..., Any] | None,
                 forward: Callable[..., Any] | None, dtype: np.dtype[Any], tie: str, one_hot_budget: int,
                 timeout: float | None, worker: Any = None):
        # tie: "any", "first", "last", "split" or "beta:<b>" (β = 0 and 1 named first and split)
        self.spec, self.g, self.dtype, self.tie = spec, g, dtype, tie
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
        if self.g.spec.mode != "max":
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
        if family != "near_ties" and g.spec.mode == "max":  # only max pooling has the all-negative family
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
        if g.spec.mode == "lp":  # algebraic values: the bound of symjac.pool._lp
            e_c, tol = lp_forward_tolerance(g, x, self.dtype)
            exact_lp = g.to_canonical(lp_forward(g, self.exact(x)), g.out_spatial)
            return self.forward_findings(y_c, e_c, tol, lambda: exact_lp)
        exact_y = exact_forward(g, self.exact(x))
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        if g.spec.mode == "avg":
            xc = np.abs(g.to_canonical(x).astype(np.float64))
            mass = g.gather(xc).sum(axis=2) / g.divisor
            n = g.valid.sum(axis=1)
            tol = gamma(n + 1, self.u) * mass + 2.0**-60 * np.abs(e_c)
        else:
            tol = np.zeros_like(e_c)
        # Fractions only if a finding lists them (building one per output costs ~2 us each)
        return self.forward_findings(y_c, e_c, tol, lambda: g.to_canonical(exact_y.to_fractions(), g.out_spatial))

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

    def backward_pass(self, x: np.ndarray, context: str,
                      dense: list[np.ndarray]) -> tuple[Rows, ExactRows, list[np.ndarray | None]] | None:
        """Probe, attribute, confirm with each dense dy (the first one twice), classify."""
        calls = dense[:1] + dense  # ride on the probes' sequence, the first dense dy twice (determinism)
        probed = self.prober.probe(x, calls)
        if probed is None:
            return None
        rows, unexplained, found = probed
        got: list[np.ndarray | None] = [*found, *[None] * (len(calls) - len(found))]  # None: unusable, or uncalled
        again = got.pop(1) if dense else None
        exact = exact_rows(self.g, x, self.dtype, self.exact(x) if self.g.spec.mode == "max" else None)
        self.exact_at = None  # x's last exact use: hold no copy through the passes' (B, W, K) arrays
        suspects = self.prober.attribute(x, rows, unexplained, lambda r: self.diagnosis.mismatches(r, exact))
        results: list[np.ndarray | None] = []
        for i, (dy, dx) in enumerate(zip(dense, got)):
            dx, off = self.confirm(rows, dy, dx, again if i == 0 else None)
            results.append(dx)
            if off.size:
                suspects = self.rediagnose(x, rows, exact, suspects, dy, dx, off)
        if suspects and self.g.spec.mode == "max":
            finding, beta, suspects = outside_clarke(self.g, rows, exact, suspects, self.u, context)
            if finding is not None and beta is not None:
                self.findings.append(finding)
                self.diagnosis.policies.add(beta_name(beta))
        if suspects:
            self.diagnosis.classify(rows, exact, suspects, context)
        if self.g.spec.mode == "max":
            self.diagnosis.tie_policy(rows, exact, suspects)
        if self.g.spec.mode == "lp":
            ok = exact.tied.copy()
            for key in suspects:
                ok[key] = False
            name = zero_window_policy(self.g, rows.obs, exact.tied, ok, self.u)
            if name is not None:
                self.zero_policies.add(name)
        return rows, exact, results

    def confirm(self, rows: Rows, dy: np.ndarray, dx: np.ndarray | None,
                again: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """A dense call's dx (None: unusable) against the superposition of the rows observed
        so far (and ``again``, the same call repeated, against dx: determinism): returns dx
        and the (b, cell) pairs where they differ."""
        g = self.g
        if dx is None:
            return None, np.zeros((0, 2), dtype=int)
        if again is not None and self.bwd is not None:
            self.bwd.compare(g.from_canonical(dx, g.in_spatial), g.from_canonical(again, g.in_spatial), "dx")
        predicted, bound = scatter_pair(g, dy, rows.obs)
        count = np.broadcast_to(cell_counts(g).astype(np.float64), predicted.shape).copy()
        for (b, w), vs in rows.stray.items():
            for bb, c, v in vs:
                predicted[bb, c] += dy[b, w] * v
                bound[bb, c] += abs(dy[b, w] * v)
                count[bb, c] += 1
        tol = gamma(count + 2, self.u) * bound + 2.0**-60 * bound
        return dx, np.argwhere(np.abs(dx - predicted) > tol)

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
            predicted = scatter(g, dy, rows.obs)
            self.findings.append(Finding(
                "partial_windows",
                f"each window alone is right, but with a dense dy {len(off)} cells lose gradient from "
                f"overlapping windows (accumulation is not a sum): {listing([fmt_index(c) for c in cells])}",
                cells=tuple(cells[:MAX_LISTED]),
                expected=[float(predicted[b, c]) for b, c in off[:MAX_LISTED].tolist()],
                observed=[float(dx[b, c]) for b, c in off[:MAX_LISTED].tolist()]))
            self.superposition_reported = True
        return suspects

    def fd_pass(self, x: np.ndarray, rows: Rows, exact: ExactRows, dy_c: np.ndarray) -> bool | None:
        """The second oracle, on windows where FD with step h stays on one side of every kink."""
        if self.fwd is None or self.g.spec.mode == "lp":
            return None  # lp: the FD error model (exact or γ-summed forward) does not cover the root
        g = self.g
        usable = ~exact.tied & (gaps(g, x) > STEP)
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

    def family_pass(self, family: str, seed: int) -> bool | None:
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
        x = generate_input(g, family, self.dtype, seed)
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
        ex = self.exact(x) if g.spec.mode == "max" else None
        self.exact_at = None  # x's last exact use
        exact, bound, count = vjp_terms(g, ex, ExactArray.from_any(dy))
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
                         extra: Sequence[str], seed: int) -> Report:
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
        for family in extra:
            forward_ok = bool(self.family_pass(family, seed)) and bool(forward_ok)
        first, again = self.forward(x), self.forward(x)
        if first is not None and again is not None:
            self.fwd.compare(first, again, "y")
        self.tag(0, main_family)
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, False, None, None))
        total = self.g.batch * self.g.n_out
        note = "only the forward was checked (no backward given)"
        if not self.findings:
            line = f"forward matches the exact forward at all {total} outputs in {self.dtype} " \
                   f"({self.fwd.calls} forward calls); {note}"
        else:
            line = f"{self.findings_line()}; {note}"
        return Report(repr(self.spec), tuple(self.findings), self.stats, line)

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None, *, main_family: str = "distinct",
            extra: Sequence[str] = (), seed: int = 0) -> Report:
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
            if g.spec.mode in ("max", "lp") and tie_x is not None:
                start = len(self.findings)
                self.backward_pass(tie_x, " at tied inputs", [])
                self.tag(start, "ties")
            for family in extra:
                forward_ok = self.family_pass(family, seed) is not False and forward_ok
        self.tag(0, main_family)
        tie_policy = self.tie_policy_verdict()
        self.mark_consequences()
        self.stats.update(self.figures(forward_ok, probed, fd_ok, tie_policy))
        return Report(repr(self.spec), tuple(self.findings), self.stats, self.headline(fd_ok, tie_policy, mass))

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

    def tie_policy_verdict(self) -> str | None:
        """The one policy seen at ties ("other" if several); a finding if another was demanded."""
        policies = self.diagnosis.policies
        if not policies:
            return None
        tie_policy = next(iter(policies)) if len(policies) == 1 else "other"
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
            line += "" if fd_ok is None else "; forward and finite differences agree"
            shown = f"β = {tie_policy[5:]}" if tie_policy and tie_policy.startswith("beta:") else tie_policy
            line += f"; tie policy {shown}" if tie_policy else ""
            return line + (f"; zero-window policy {self.stats['zero_window']}" if self.stats.get("zero_window") else "")
        if missing and categories <= {"missing_windows", "not_fd_consistent"}:
            names = [fmt_index(self.g.output_index(b, w)) for b, w in missing]
            return (f"backward visits {total - len(missing)} of {total} output windows: {listing(names)} "
                    f"get{'s' if len(missing) == 1 else ''} nothing; {_ratio(*mass)} (in {self.dtype})")
        return self.findings_line()

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


def _inputs(spec: PoolSpec, dt: np.dtype[Any], input_shape: Any, x: Any, dy: Any,
            seed: int) -> tuple[Geometry, np.ndarray, np.ndarray | None]:
    """The geometry, x (given, or distinct within every window) and the caller's dy, checked."""
    if x is None and input_shape is None:
        raise InputError("give input_shape or x")
    if x is not None:
        raw = np.asarray(x)
        if input_shape is not None and tuple(input_shape) != raw.shape:
            raise InputError(f"input_shape={tuple(input_shape)!r} disagrees with x's shape {raw.shape}: give x alone "
                             "(its shape is the input shape), or input_shape alone (generated inputs)")
        ExactArray.from_any(raw, "x")  # finite, numeric
        x_arr = raw.astype(dt)
        if not np.array_equal(x_arr.astype(np.float64), raw.astype(np.float64)):
            raise InputError(f"x is not exactly representable in {dt}; give values that are (e.g. small dyadic numbers)")
        g = resolve(spec, x_arr.shape)
    else:
        g = resolve(spec, tuple(input_shape))
        x_arr = distinct_input(g, dt, seed)
        if spec.mode == "lp":
            x_arr = np.abs(x_arr)  # odd p needs Σ x^p >= 0 in every window
    dy_arr = None
    if dy is not None:
        raw = np.asarray(dy)
        ExactArray.from_any(raw, "dy")
        if raw.shape != g.output_shape:
            raise InputError(f"dy has shape {raw.shape}; the output shape is {g.output_shape}")
        dy_arr = raw.astype(dt)
    return g, x_arr, dy_arr


def _dtype(dtype: Any, x: Any) -> np.dtype[Any]:
    """The dtype of the calls: ``dtype`` when given, else a float x's own dtype, else float64."""
    if dtype is not None:
        return float_dtype(dtype)
    kind = getattr(np.asarray(x), "dtype", None) if x is not None else None
    if kind is not None and (kind.kind == "f" or kind.name == "bfloat16"):
        return float_dtype(kind)
    return float_dtype("float64")


def _hint(spec: PoolSpec, report: Report, forward: Callable[..., Any] | None, backward: Callable[..., Any] | None,
          g: Geometry, dt: np.dtype[Any], seed: int, isolate: bool) -> Report:
    """A failing report whose root findings a neighbouring convention might explain gets a
    hint naming the conventions the implementation matches exactly."""
    roots = [f for f in report.findings if f.consequence_of is None]
    # a wrong dtype or a NaN/Inf is no convention's doing
    if not roots or not all(f.category in HINTABLE and "returned dtype" not in f.message
                            and "non-finite" not in f.message for f in roots):
        return report
    from symjac.verifiers._infer import hint

    text = hint(spec, forward, backward, g.input_shape, dt, seed, isolate=isolate)
    if text is None:
        return report
    return dataclasses.replace(report, stats={**report.stats, "hint": text}, headline=f"{report.headline}; hint: {text}")


def verify(spec: PoolSpec, *, backward: Callable[..., Any] | None = None, forward: Callable[..., Any] | None = None,
           input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = None,
           tie: str | Beta = "any", seed: int = 0, one_hot_budget: int = 64,
           timeout: float | None = DEFAULT_TIMEOUT, families: Sequence[str] | None = None, isolate: bool = False,
           hints: bool = True) -> Report:
    """Verify an implementation's backward (and forward) against the exact Jacobian.

    Args:
      spec: a pooling spec.
      backward: ``backward(x, dy) -> dx`` on NumPy arrays in the spec's layout/dtype;
        None for a forward-only runtime (ONNX Runtime): then the forward is checked
        exactly (values, shape, dtype, determinism, at tied inputs too) and the report
        says that only the forward was checked.
      forward: optional ``forward(x) -> y``; enables the forward check and the
        finite-difference oracle. At least one of the two is needed.
      input_shape: the full input shape; or give ``x`` (both only if they agree). With neither, every shape of
        the coverage plan :func:`symjac.cover` is verified and the report combines
        them (each finding names its shape).
      x: input values (default: small integers distinct within every window).
      dy: an upstream gradient for one more dense call, whose expected, observed
        and finite-difference gradients go in ``stats`` (the confirmation call always
        uses distinct dyadic values, so gradient swapped between windows shows).
      dtype: ``"float16"``, ``"bfloat16"`` (needs ``symjac[bfloat16]``), ``"float32"``
        or ``"float64"``; default: the dtype of a float ``x``, else float64.
      tie: ``"any"`` accepts any routing in the Clarke set at max-pooling ties and
        names the policy seen (``stats["tie_policy"]``: ``first``, ``last``,
        ``split``, ``beta:<b>`` for rows β·J_split + (1−β)·J_first, or ``other``;
        a β outside the Clarke set is a ``tie_beta_outside_clarke`` finding);
        ``"first"``, ``"last"``, ``"split"`` or :class:`symjac.Beta` (``"beta:<b>"``)
        demand that policy.
      seed: seeds the default inputs.
      one_hot_budget: at most this many one-hot backward calls for diagnosis.
      timeout: seconds each call of the implementation may take (None: no limit, and
        calls run in the caller's thread); a call that takes longer is a ``timeout``
        finding. Calls run in a kept thread; the calls of one probe plan (or of the
        finite differences) are handed to it together and run back to back, each with
        its own copies of ``x`` and ``dy``.
      families: extra input families, each one dense backward call (and one forward
        call) at its input: ``"all_negative"`` and/or ``"near_ties"``. Default: those
        that can matter (all-negative for max pooling whose windows touch padding,
        near-ties always); ``()`` for none. Ties run for max pooling regardless.
      isolate: call the implementation in a worker process (forked on Linux, so the
        callables need not pickle; see :mod:`symjac.check._isolate`): an abort,
        segfault or SIGFPE becomes a ``crashed`` finding naming the signal, and a hung
        call is killed at ``timeout``.
      hints: when the report fails on values a neighbouring convention could explain
        (divisor, SAME upper/lower, ceil rule, layout), check those and name the ones
        the implementation matches exactly (``stats["hint"]`` and the headline).

    Returns:
      A :class:`Report`; ``report.ok`` is True when nothing was found. Each finding's
      ``family`` names the input family that exposed it; ``stats["families"]`` counts
      the findings per family run.

    Raises:
      SpecError / InputError: the spec, shape, dtype or inputs are invalid (the
        implementation's own misbehaviour is never raised: it is in the report).
    """
    spec = check_pool_spec(spec)
    dt = _dtype(dtype, x)
    parsed = parse_tie(tie, ("any",) + TIE_POLICIES)
    tie_name = beta_name(parsed) if isinstance(parsed, Beta) else parsed
    if backward is None and forward is None:
        raise InputError("give backward(x, dy) and/or forward(x): there is nothing to verify")
    if (backward is not None and not callable(backward)) or (forward is not None and not callable(forward)):
        raise InputError("backward and forward must be callables on NumPy arrays")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise InputError(f"timeout={timeout!r} is not valid: give seconds > 0, or None for no limit")
    if families is not None:
        if isinstance(families, str) or not all(f in ("all_negative", "near_ties") for f in families):
            raise InputError(f"families={families!r} is not valid: give a sequence of 'all_negative', 'near_ties'")
        if families and spec.mode not in ("max", "avg"):
            raise InputError(f"families={families!r}: the extra input families check max and avg pooling "
                             f"(mode={spec.mode!r} has algebraic derivatives); give families=()")
    kwargs = dict(backward=backward, forward=forward, dtype=dt, tie=tie, seed=seed, one_hot_budget=one_hot_budget,
                  timeout=timeout, families=families, isolate=isolate, hints=hints)
    if x is None and input_shape is None and dy is None:
        return _verify_plan(spec, kwargs)
    g, x_arr, dy_arr = _inputs(spec, dt, input_shape, x, dy, seed)
    tie_x = tie_input(g, dt, seed) if spec.mode in ("max", "lp") else None
    extra = tuple(dict.fromkeys(default_families(g) if families is None else families))
    worker = None
    if isolate:
        from symjac.run._isolate import Worker

        worker = Worker({k: v for k, v in (("backward", backward), ("forward", forward)) if v is not None},
                        timeout=timeout)
    try:
        report = _Verifier(spec, g, backward, forward, dt, tie_name, one_hot_budget, timeout, worker).run(
            x_arr, dy_arr, tie_x, main_family="given" if x is not None else "distinct", extra=extra, seed=seed)
    finally:
        if worker is not None:
            worker.close()
    if hints and not report.ok:
        report = _hint(spec, report, forward, backward, g, dt, seed, isolate)
    return report


#: Stats combined over the shapes of a coverage plan: how each figure aggregates.
_ALL, _SUM, _MAX = ("forward_ok", "backward_ok", "fd_consistent"), (
    "windows_total", "windows_missing", "windows_partial", "edges_missing", "edges_extra", "weights_wrong",
    "backward_calls", "forward_calls"), ("max_abs_error", "max_ulp_error", "window_colours")


def _verify_plan(spec: PoolSpec, kwargs: dict[str, Any]) -> Report:
    """Verify at every shape of :func:`symjac.cover` and combine the reports."""
    shapes = cover(spec)
    reports: list[Report] = []
    for shape in shapes:
        reports.append(verify(spec, input_shape=shape, **kwargs))
        if "timeout" in reports[-1].categories():
            break  # each further shape would wait out the timeout again
    plan = shapes[:len(reports)]
    findings = []
    for shape, r in zip(plan, reports):
        for f in r.findings:
            detail = dict(f.detail or {}, input_shape=shape)
            findings.append(dataclasses.replace(f, message=f"at input shape {shape}: {f.message}", detail=detail))
    stats: dict[str, Any] = {}
    for key in _ALL:
        values = [r.stats.get(key) for r in reports if r.stats.get(key) is not None]
        stats[key] = all(values) if values else None
    stats.update({key: sum(r.stats.get(key, 0) for r in reports) for key in _SUM})
    stats.update({key: max(r.stats.get(key, 0) for r in reports) for key in _MAX})
    policies = {r.stats["tie_policy"] for r in reports if r.stats.get("tie_policy")}
    stats["tie_policy"] = (next(iter(policies)) if len(policies) == 1 else "other") if policies else None
    stats["mutated_inputs"] = sorted({m for r in reports for m in r.stats.get("mutated_inputs", [])})
    stats["dtype"] = str(kwargs["dtype"])
    families_seen: dict[str, int] = {}
    for r in reports:
        for name, n in r.stats.get("families", {}).items():
            families_seen[name] = families_seen.get(name, 0) + n
    stats["families"] = families_seen
    stats["coverage_plan"] = [list(shape) for shape in shapes]
    stats["shapes"] = [{"input_shape": list(shape), "ok": r.ok, "summary": r.summary()} for shape, r in zip(plan, reports)]
    failing = [(shape, r) for shape, r in zip(plan, reports) if not r.ok]
    if not failing:
        shapes_text = f"all {len(plan)} shapes" if len(plan) > 1 else "the one shape"
        if kwargs["backward"] is None:
            headline = (f"forward matches the exact forward at {shapes_text} of the coverage plan "
                        f"({stats['windows_total']} outputs in {kwargs['dtype']}, {stats['forward_calls']} forward "
                        "calls); only the forward was checked (no backward given)")
        else:
            headline = (f"backward matches the exact Jacobian at {shapes_text} of the coverage plan "
                        f"({stats['windows_total']} windows in {kwargs['dtype']}, "
                        f"max error {stats['max_ulp_error']:.2g} ULP, {stats['backward_calls']} backward calls)")
        headline += "; forward and finite differences agree" if stats["fd_consistent"] else ""
        headline += f"; tie policy {stats['tie_policy']}" if stats["tie_policy"] else ""
    else:
        shape, first = failing[0]
        headline = (f"fails at {len(failing)} of {len(plan)} shapes of the coverage plan; "
                    f"at input shape {shape}: {first.summary()}")
        if len(plan) < len(shapes):
            headline += f" ({len(shapes) - len(plan)} more shapes not run after the timeout)"
    return Report(repr(spec), tuple(findings), stats, headline)
