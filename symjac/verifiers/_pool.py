"""Verify an implementation's forward/backward against the exact derivative.

``verify(spec, backward=..., forward=...)`` recovers the implementation's Jacobian
with few backward calls (one per colour of the window conflict graph:
:mod:`symjac.verifiers._pool_probe`), confirms it with a dense random exact dy,
diffs it window by window against the exact Jacobian and checks max pooling at
ties against the Clarke set (:mod:`symjac.verifiers._pool_diagnose`), runs a
second oracle (:mod:`symjac.verifiers._pool_fd`: compressed central differences of
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

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import ExactArray
from symjac.check._call import DEFAULT_TIMEOUT, Guard
from symjac.check._inputs import distinct_dy, distinct_input, tie_input
from symjac.check._report import MAX_LISTED, Finding, Report, fmt_index, listing
from symjac.check._rounding import float_dtype, gamma, unit_roundoff
from symjac.pool._geometry import Geometry, resolve
from symjac.pool._jacobian import exact_forward
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.pool._symbolic import TIE_POLICIES
from symjac.pool._beta import Beta, parse_tie
from symjac.verifiers._pool_beta import beta_name, outside_clarke
from symjac.verifiers._pool_diagnose import Diagnosis
from symjac.pool._lp import exact_forward as lp_forward
from symjac.verifiers._pool_lp import forward_tolerance as lp_forward_tolerance, zero_window_policy
from symjac.pool._graph import input_colouring
from symjac.verifiers._pool_fd import MAX_COLOURS, check_fd, check_fd_directions, directional_fd, finite_differences
from symjac.verifiers._pool_probe import Prober
from symjac.verifiers._pool_rows import ExactRows, Rows, exact_rows, scatter

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


class _Verifier:
    """One verification: the passes over the implementation, in the order :meth:`run` reads."""

    def __init__(self, spec: PoolSpec, g: Geometry, backward: Callable[..., Any], forward: Callable[..., Any] | None,
                 dtype: np.dtype[Any], tie: str, one_hot_budget: int, timeout: float | None):
        # tie: "any", "first", "last", "split" or "beta:<b>" (β = 0 and 1 named first and split)
        self.spec, self.g, self.dtype, self.tie = spec, g, dtype, tie
        self.u = unit_roundoff(dtype)
        self.findings: list[Finding] = []
        self.bwd = Guard(backward, "backward", ("x", "dy"), self.findings, timeout=timeout)
        self.fwd = Guard(forward, "forward", ("x",), self.findings, timeout=timeout) if forward else None
        self.prober = Prober(g, self.backward, one_hot_budget)
        self.diagnosis = Diagnosis(g, dtype, self.u, self.findings)
        self.stats: dict[str, Any] = {}
        self.superposition_reported = False
        self.zero_policies: set[str] = set()  # lp: rows seen at all-zero windows ("zero", "one", "other")

    def backward(self, x: np.ndarray, dy_c: np.ndarray) -> np.ndarray | None:
        """The implementation's backward on canonical (B, n_out) dy; canonical float64 dx or None."""
        dy = self.g.from_canonical(dy_c.astype(self.dtype), self.g.out_spatial)
        dx = self.bwd.array(x, dy, shape=self.g.input_shape, dtype=self.dtype, index_name="dx")
        return None if dx is None else self.g.to_canonical(dx.astype(np.float64))

    def forward(self, x: np.ndarray) -> np.ndarray | None:
        assert self.fwd is not None
        y = self.fwd.array(x, shape=self.g.output_shape, dtype=self.dtype, index_name="y")
        return None if y is None else y.astype(np.float64)

    # -- the passes, in the order run() takes them ---------------------------------------
    def check_forward(self, x: np.ndarray) -> bool | None:
        """The forward at x against the exact forward: exact for max, within γ_{n+1}·Σ|x|/d for avg,
        within the derived bound for lp."""
        if self.fwd is None:
            return None
        g = self.g
        y = self.forward(x)
        if y is None:
            return False
        y_c = g.to_canonical(y, g.out_spatial)
        if g.spec.mode == "lp":  # algebraic values: the bound of symjac.pool._lp
            e_c, tol = lp_forward_tolerance(g, x, self.dtype)
            exact_lp = g.to_canonical(lp_forward(g, ExactArray.from_any(x)), g.out_spatial)
            return self.forward_findings(y_c, e_c, tol, exact_lp)
        exact_y = exact_forward(g, ExactArray.from_any(x))
        e_c = g.to_canonical(exact_y.to_numpy(np.float64), g.out_spatial)
        if g.spec.mode == "avg":
            xc = np.abs(g.to_canonical(x).astype(np.float64))
            mass = (np.where(g.valid, xc[:, np.where(g.valid, g.cells, 0)], 0.0)).sum(axis=2) / g.divisor
            n = g.valid.sum(axis=1)
            tol = gamma(n + 1, self.u) * mass + 2.0**-60 * np.abs(e_c)
        else:
            tol = np.zeros_like(e_c)
        return self.forward_findings(y_c, e_c, tol, g.to_canonical(exact_y.to_fractions(), g.out_spatial))

    def forward_findings(self, y_c: np.ndarray, e_c: np.ndarray, tol: np.ndarray, exact: np.ndarray) -> bool:
        """A ``forward_values`` finding for outputs off the exact ones (``e_c`` in float64,
        ``exact`` as exact numbers) by more than ``tol``."""
        g = self.g
        bad = np.argwhere(np.abs(y_c - e_c) > tol)
        if bad.size:
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
        probed = self.prober.probe(x)
        if probed is None:
            return None
        rows, unexplained = probed
        exact = exact_rows(self.g, x, self.dtype)
        suspects = self.prober.attribute(x, rows, unexplained, lambda r: self.diagnosis.mismatches(r, exact))
        results: list[np.ndarray | None] = []
        for i, dy in enumerate(dense):
            dx, off = self.confirm(x, rows, dy, repeat=i == 0)
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

    def confirm(self, x: np.ndarray, rows: Rows, dy: np.ndarray, repeat: bool) -> tuple[np.ndarray | None, np.ndarray]:
        """Dense call (``repeat``: twice, for determinism): returns dx and the (b, cell)
        pairs where dx differs from the superposition of the rows observed so far."""
        g = self.g
        dx = self.backward(x, dy)
        if dx is None:
            return None, np.zeros((0, 2), dtype=int)
        again = self.backward(x, dy) if repeat else None
        if again is not None:
            self.bwd.compare(g.from_canonical(dx, g.in_spatial), g.from_canonical(again, g.in_spatial), "dx")
        predicted = scatter(g, dy, rows.obs)
        bound = scatter(g, np.abs(dy), np.abs(rows.obs))
        count = scatter(g, np.ones_like(dy), np.ones_like(rows.obs))
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
        """The second oracle, on windows where FD with h = 1/4 stays on one side of every kink."""
        if self.fwd is None or self.g.spec.mode == "lp":
            return None  # lp: the FD error model (exact or γ-summed forward) does not cover the root
        g = self.g
        usable = ~exact.tied & (exact.gap > 0.5)
        if input_colouring(g)[1] > MAX_COLOURS:
            directions = directional_fd(g, self.forward, x, self.dtype, self.u)
            if directions is None:
                return None
            return check_fd_directions(g, rows, directions, usable, self.u, self.findings)
        found = finite_differences(g, self.forward, x, self.dtype, self.u)
        if found is None:
            return None
        fd, fd_tol = found
        if g.n_in * g.batch <= 4096 and usable.all():
            self.stats["fd_gradient"] = g.from_canonical(scatter(g, dy_c, fd), g.in_spatial)
        return check_fd(g, rows, fd, fd_tol, usable, self.u, self.findings)

    def run(self, x: np.ndarray, dy: np.ndarray | None, tie_x: np.ndarray | None) -> Report:
        g = self.g
        forward_ok = self.check_forward(x)
        # The dense confirmation uses distinct dy values, so gradient swapped between
        # windows shows; a caller's dy is one more dense call, reported in the stats.
        dense = [g.to_canonical(distinct_dy(g, self.dtype, 0), g.out_spatial).astype(np.float64)]
        if dy is not None:
            dense.append(g.to_canonical(dy, g.out_spatial).astype(np.float64))
        dy_c = dense[-1]
        fd_ok: bool | None = None
        mass = (0.0, 0.0)
        main = self.backward_pass(x, "", dense)
        if main is not None:
            rows, exact, results = main
            fd_ok = self.fd_pass(x, rows, exact, dy_c)
            if g.n_in * g.batch <= 4096 and results[-1] is not None:
                self.stats["observed_gradient"] = g.from_canonical(results[-1], g.in_spatial)
                self.stats["expected_gradient"] = g.from_canonical(scatter(g, dy_c, exact.rows), g.in_spatial)
            mass = (float(rows.obs.sum()) + sum(v for vs in rows.stray.values() for _, _, v in vs),
                    float(exact.rows.sum()))
            if g.spec.mode in ("max", "lp") and tie_x is not None:
                self.backward_pass(tie_x, " at tied inputs", [])
        tie_policy = self.tie_policy_verdict()
        self.stats.update(self.figures(forward_ok, main is not None, fd_ok, tie_policy))
        return Report(repr(self.spec), tuple(self.findings), self.stats, self.headline(fd_ok, tie_policy, mass))

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
        return {
            "forward_ok": forward_ok,
            "backward_ok": probed and not self.bwd.bad and not categories & set(BACKWARD_CATEGORIES),
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
            "mutated_inputs": sorted(self.bwd.mutated | (self.fwd.mutated if self.fwd else set())),
            "backward_calls": self.bwd.calls,
            "forward_calls": self.fwd.calls if self.fwd else 0,
            "window_colours": self.prober.n_colours,
            "dtype": str(self.dtype),
        }

    def headline(self, fd_ok: bool | None, tie_policy: str | None, mass: tuple[float, float]) -> str:
        """The one-line summary: a pass, the missing windows (seed 000's shape of bug), or the findings."""
        total = self.g.batch * self.g.n_out
        categories = {f.category for f in self.findings}
        missing = sorted(k for k, v in self.diagnosis.window_state.items() if v == "missing_windows")
        if not self.findings:
            line = (f"backward matches the exact Jacobian on all {total} windows in {self.dtype} "
                    f"(max error {self.diagnosis.max_ulp:.2g} ULP, {self.bwd.calls} backward calls)")
            line += "" if fd_ok is None else "; forward and central differences agree"
            shown = f"β = {tie_policy[5:]}" if tie_policy and tie_policy.startswith("beta:") else tie_policy
            line += f"; tie policy {shown}" if tie_policy else ""
            return line + (f"; zero-window policy {self.stats['zero_window']}" if self.stats.get("zero_window") else "")
        if missing and categories <= {"missing_windows", "not_fd_consistent"}:
            names = [fmt_index(self.g.output_index(b, w)) for b, w in missing]
            return (f"backward visits {total - len(missing)} of {total} output windows: {listing(names)} "
                    f"get{'s' if len(missing) == 1 else ''} nothing; {_ratio(*mass)} (in {self.dtype})")
        cats = list(dict.fromkeys(f.category for f in self.findings))
        return (f"{len(cats)} kind{'s' if len(cats) > 1 else ''} of finding ({', '.join(cats)}) in {self.dtype}: "
                f"{self.findings[0].message}")


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


def verify(spec: PoolSpec, *, backward: Callable[..., Any], forward: Callable[..., Any] | None = None,
           input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = "float64",
           tie: str | Beta = "any", seed: int = 0, one_hot_budget: int = 64,
           timeout: float | None = DEFAULT_TIMEOUT) -> Report:
    """Verify an implementation's backward (and forward) against the exact Jacobian.

    Args:
      spec: a pooling spec.
      backward: ``backward(x, dy) -> dx`` on NumPy arrays in the spec's layout/dtype.
      forward: optional ``forward(x) -> y``; enables the forward check and the
        finite-difference oracle.
      input_shape: the full input shape; or give ``x`` (both only if they agree).
      x: input values (default: small integers distinct within every window).
      dy: an upstream gradient for one more dense call, whose expected, observed
        and finite-difference gradients go in ``stats`` (the confirmation call always
        uses distinct dyadic values, so gradient swapped between windows shows).
      dtype: ``"float16"``, ``"float32"`` or ``"float64"``.
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
        finding.

    Returns:
      A :class:`Report`; ``report.ok`` is True when nothing was found.

    Raises:
      SpecError / InputError: the spec, shape, dtype or inputs are invalid (the
        implementation's own misbehaviour is never raised: it is in the report).
    """
    spec = check_pool_spec(spec)
    dt = float_dtype(dtype)
    parsed = parse_tie(tie, ("any",) + TIE_POLICIES)
    tie_name = beta_name(parsed) if isinstance(parsed, Beta) else parsed
    if not callable(backward) or (forward is not None and not callable(forward)):
        raise InputError("backward (and forward, if given) must be callables on NumPy arrays")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise InputError(f"timeout={timeout!r} is not valid: give seconds > 0, or None for no limit")
    g, x_arr, dy_arr = _inputs(spec, dt, input_shape, x, dy, seed)
    tie_x = tie_input(g, dt, seed) if spec.mode in ("max", "lp") else None
    return _Verifier(spec, g, backward, forward, dt, tie_name, one_hot_budget, timeout).run(x_arr, dy_arr, tie_x)
