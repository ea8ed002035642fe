"""Forward mode and second order of a pooling implementation: ``verify(spec, jvp=..., double_backward=...)``.

- **jvp** ``jvp(x, t) -> J(x)·t``: recovered by colouring the inputs
  (:mod:`symjac.verifiers.pool._jvp`), diagnosed as the VJP is, confirmed with a dense
  distinct dyadic ``t`` (twice: determinism), at the tie input too (max pooling: the rows
  must be a Clarke element; with ``backward`` given, the report says whether it is the
  backward's own element).
- **double_backward** ``double_backward(x, dy, v) -> (ddx, ddy)``, the gradient of
  ``⟨v, g(x, dy)⟩`` for the implementation's VJP ``g(x, dy) = J(x)ᵀdy``: ``ddy`` must be
  ``J(x)·v`` (checked exactly as a JVP, the colour probes being the v's) and ``ddx`` the
  exact ``∇²_x(dyᵀf)·v`` (:mod:`symjac.verifiers.pool._second`): zero for average and
  max pooling, lp's algebraic HVP within its derived bound.

Both run at the inputs the VJP's check runs at, read from the same rules: the main input,
the operator's tie input (``operator.tie_input``: max pooling's ties, lp's all-zero windows)
and one input of each extra family the operator declares (:func:`extra_inputs`: near ties,
all-negative windows, orders, ...). At an extra family's input, as the VJP's one dense
``J(x)ᵀdy`` call, one dense call is compared with the exact ``J(x)·t`` (a near-tie ``t`` for
the near-tie family, as the VJP's near-tie ``dy``); a call off it gets the probed pass there,
which names the windows. With ``isolate`` the calls run in a worker process
(:mod:`symjac.run._isolate`): a crash is a ``crashed`` finding naming the signal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac._exact import nonfinite_codes
from symjac.check._call import Guard
from symjac.verifiers.pool._inputs import (FAMILY_NAMES, distinct_dy, extra_inputs, generate_input,
                                           near_tie_tangent, tie_input)
from symjac.check._report import MAX_LISTED, Finding, Report, fmt_index, listing
from symjac.check._rounding import gamma, unit_roundoff
from symjac.check._unsupported import returns_in, unsupported
from symjac.pool._cover import plan as coverage_plan
from symjac.pool._geometry import Geometry
from symjac.pool._rows import ExactRows, Rows, row_tolerance
from symjac.pool._spec import PoolSpec
from symjac.verifiers.pool._diagnose import Diagnosis
from symjac.verifiers.pool._jvp import (ColumnProber, classify, contradicted, distinct_tangent, exact_at, not_linear,
                                       same_element, superpose, suspects_of)
from symjac.verifiers.pool._second import SecondOrder, packed

#: Report names of the transforms.
TRANSFORMS = ("jvp", "double_backward")


class _Pass:
    """One transform at one shape: the guard, the column prober and the diagnosis, sharing ``findings``."""

    def __init__(self, g: Geometry, dt: np.dtype[Any], tangent_each: Callable[..., Any], budget: int,
                 findings: list[Finding]):
        self.g, self.dt, self.u = g, dt, unit_roundoff(dt)
        self.findings = findings
        self.prober = ColumnProber(g, tangent_each, budget)
        self.diagnosis = Diagnosis(g, dt, self.u, findings)

    def at(self, x: np.ndarray, dense: list[np.ndarray], context: str) -> tuple[Any, list[np.ndarray]] | None:
        """Probe at x, diagnose, confirm with the first dense tangent; (rows, exact), dense results."""
        found = self.prober.probe(x, dense)
        if found is None:
            return None
        rows, results = found
        g, u = self.g, self.u
        exact = exact_at(g, x, self.dt)
        suspects = suspects_of(g, x, self.prober, rows, exact, self.diagnosis, u)
        off = contradicted(g, rows, dense[0], results[0], u, suspects) if results else []
        if off:  # rows right alone, not together: their exact columns, then diagnose again
            self.prober.one_hot_windows(x, rows, off)
            suspects = list(dict.fromkeys(suspects + self.diagnosis.mismatches(rows, exact)))
            off = contradicted(g, rows, dense[0], results[0], u, suspects)
            if off and not suspects:
                not_linear(g, rows, dense[0], results[0], off, self.findings, context)
        classify(g, rows, exact, self.diagnosis, suspects, u, context)
        return (rows, exact), results

    def dense(self, x: np.ndarray, t: np.ndarray, context: str) -> bool:
        """One call at x (an extra family's input) against the exact ``J(x)·t``, as the VJP's
        family pass checks one dense ``J(x)ᵀdy``: within ``γ_{K+2}·Σ|J·t|`` plus what a correct
        row may be off (lp: its derived bound). Off it (or at tied windows, where ``J`` is a
        set), the probed pass at x names the windows. False when the call gave nothing usable."""
        g = self.g
        calls = self.prober.tangent_each(x, [t])
        y = next(calls, None)
        calls.close()
        if y is None:
            return False
        exact = exact_at(g, x, self.dt)
        off = [] if exact.tied.any() else _off_exact(g, exact, t, y, self.u)
        if exact.tied.any() or off:
            start = len(self.findings)
            self.at(x, [t], context)
            if off and len(self.findings) == start:  # the probes saw nothing: the dense call is the finding
                self.findings.append(_dense_finding(g, exact, t, y, off, context))
        return True


def _off_exact(g: Geometry, exact: ExactRows, t: np.ndarray, y: np.ndarray, u: float) -> list[tuple[int, int]]:
    """(b, w) where ``y`` is off the exact ``J(x)·t`` (see :meth:`_Pass.dense`)."""
    predicted, bound = superpose(g, Rows(exact.rows, {}, set()), t)
    rows_off = (row_tolerance(exact, u) * np.abs(g.gather(t))).sum(axis=-1)
    tol = (gamma(g.cells.shape[1] + 2, u) + 2.0**-52) * bound + rows_off
    with np.errstate(invalid="ignore"):  # an unclaimed row's bound is inf: never off
        bad = ~(np.abs(y - predicted) <= tol) & ~np.isinf(tol)
    return [(int(b), int(w)) for b, w in np.argwhere(bad)]


def _dense_finding(g: Geometry, exact: ExactRows, t: np.ndarray, y: np.ndarray, off: list[tuple[int, int]],
                   context: str) -> Finding:
    predicted, _ = superpose(g, Rows(exact.rows, {}, set()), t)
    want = np.array([predicted[b, w] for b, w in off])
    got = np.array([y[b, w] for b, w in off])
    lost = bool((np.abs(got) < np.abs(want)).all())
    names = [fmt_index(g.output_index(b, w)) for b, w in off]
    return Finding(
        "partial_windows" if lost else "wrong_weights",
        f"with a dense t {len(off)} of {y.size} windows{context} differ from the exact J(x)·t "
        f"({'tangent is lost' if lost else 'wrong values'}), though each probe alone was right: {listing(names)}",
        window=g.output_index(*off[0]), expected=[float(v) for v in want[:MAX_LISTED]],
        observed=[float(v) for v in got[:MAX_LISTED]])


def _layout_each(g: Geometry, guard: Guard, dt: np.dtype[Any]) -> Callable[..., Any]:
    """``jvp(x, t)`` through the guard: canonical tangents in, canonical float64 J·t out."""

    def each(x: np.ndarray, ts: Iterable[np.ndarray]) -> Generator[np.ndarray | None, None, None]:
        calls = ((x, g.from_canonical(t.astype(dt), g.in_spatial)) for t in ts)
        for y in guard.arrays(calls, shape=g.output_shape, dtype=dt, index_name="J·t"):
            yield None if y is None else g.to_canonical(y.astype(np.float64), g.out_spatial)

    return each


def _tag(findings: list[Finding], start: int, transform: str, family: str | None = None,
         main: bool = False) -> None:
    """Name the transform on findings from ``start`` on (message prefix and ``detail``) and the
    family (in the message too, unless it is the main input's)."""
    for i in range(start, len(findings)):
        f = findings[i]
        if f.detail is not None and "transform" in f.detail:
            continue
        at = f" at {FAMILY_NAMES.get(family, family)} inputs" if family is not None and not main else ""
        findings[i] = dataclasses.replace(
            f, message=f"{transform}{at}: {f.message}", detail={**(f.detail or {}), "transform": transform},
            family=f.family or family)


def _tangent(g: Geometry, family: str, dt: np.dtype[Any], seed: int) -> np.ndarray:
    """A family's dense tangent, as the VJP's family pass picks its dy: near-tie values for the
    near-tie family (accumulation in a lower precision loses their low bits), else distinct."""
    return near_tie_tangent(g, dt, seed) if family == "near_ties" else distinct_tangent(g, dt, seed)


def _families(p: _Pass, extra: Sequence[tuple[str, int]], seed: int, transform: str, context: str,
              after: Callable[[np.ndarray, np.ndarray], None] | None = None) -> list[str]:
    """One dense call at each extra family's input (:meth:`_Pass.dense`; ``after(x, t)`` checks
    what else the call returned). A transform found wrong already is not called again: its
    report stands, as the VJP's family passes leave a wrong backward."""
    run: list[str] = []
    for family, index in extra:
        if p.findings:
            break
        start = len(p.findings)
        xf = generate_input(p.g, family, p.dt, seed, index)  # index: which input of a family of several
        tf = _tangent(p.g, family, p.dt, seed)
        if not p.dense(xf, tf, context):
            break
        if after is not None:
            after(xf, tf)
        _tag(p.findings, start, transform, family)
        run.append(family)
    return run


def _counts(names: list[str]) -> dict[str, int]:
    return {name: names.count(name) for name in dict.fromkeys(names)}


def check_jvp(g: Geometry, x: np.ndarray, dt: np.dtype[Any], jvp: Callable[..., Any], *,
              backward: Callable[..., Any] | None, seed: int, budget: int, timeout: float | None,
              main_family: str = "distinct", tie: str = "any", extra: Sequence[tuple[str, int]] = (),
              worker: Any = None) -> Report:
    """The JVP at one shape, at the main input, the tie input and each ``extra`` family input;
    ``tie`` a demanded policy (``"any"``: every Clarke element passes); ``worker`` an isolated
    worker holding ``jvp`` (and ``backward``)."""
    findings: list[Finding] = []
    guard = Guard(jvp, "jvp", ("x", "t"), findings, timeout=timeout, isolate=None if worker is None else (worker, "jvp"))
    p = _Pass(g, dt, _layout_each(g, guard, dt), budget, findings)
    t = distinct_tangent(g, dt, seed)
    stats: dict[str, Any] = {"input_colours": p.prober.n_colours, "dtype": str(dt)}
    got = p.at(x, [t, t], " (JVP)")
    if got is not None and len(got[1]) == 2:
        guard.compare(got[1][0], got[1][1], "J·t")
    _tag(findings, 0, "jvp", main_family, main=True)
    run = [main_family]
    if got is not None and g.operator.tie_family:
        start = len(findings)
        tx = g.operator.tie_input(g, tie_input(g, dt, seed))  # the VJP's tie input: lp's all-zero windows too
        tied = p.at(tx, [], " (JVP)")
        _tag(findings, start, "jvp", "ties")
        run.append("ties")
        if tied is not None and backward is not None and not findings[start:]:
            stats["same_element_as_backward"], stats["elements_differ_at"] = _vjp_element(
                g, tx, dt, backward, tied[0], budget, timeout, worker)
    if got is not None:
        run += _families(p, extra, seed, "jvp", " (JVP)")
    policies = sorted(p.diagnosis.policies)
    policy = (policies[0] if len(policies) == 1 else "other") if policies else None
    if policy is not None and tie != "any" and policy != tie:
        findings.append(Finding("tie_policy", f"jvp: at ties the JVP follows policy {policy!r}; {tie!r} was demanded",
                                detail={"transform": "jvp"}, family="ties"))
    stats.update(jvp_calls=guard.calls, one_hot_calls=p.prober.one_hot_calls, max_ulp_error=p.diagnosis.max_ulp,
                 tie_policy=policy, families=_counts(run))
    report = _report(g, "jvp", findings, stats)
    # a dtype the JVP rejects on every call: unsupported, not a defect (as verify decides it for the backward)
    def arguments_in(other: np.dtype[Any]) -> tuple[Any, ...]:
        return x.astype(other), g.from_canonical(distinct_tangent(g, other, seed).astype(other), g.in_spatial)

    return unsupported(report, dt, [(guard, arguments_in)]) if findings else report


def _vjp_element(g: Geometry, tx: np.ndarray, dt: np.dtype[Any], backward: Callable[..., Any], tied: Any,
                 budget: int, timeout: float | None, worker: Any = None) -> tuple[bool | None, list[str]]:
    """Whether the JVP's element at the tie input is the backward's (its rows by the VJP's own probes)."""
    from symjac.verifiers.pool._verifier import _Verifier  # the VJP's passes, for its probes only

    rows, exact = tied
    v = _Verifier(g.spec, g, backward, None, dt, "any", budget, timeout, worker)
    probed = v.prober.probe(tx)
    if probed is None or v.findings:
        return None, []  # the backward's own report says what went wrong
    return same_element(g, rows, probed[0], exact, unit_roundoff(dt))


def check_double_backward(g: Geometry, x: np.ndarray, dt: np.dtype[Any], double_backward: Callable[..., Any], *,
                          seed: int, budget: int, timeout: float | None, main_family: str = "distinct",
                          extra: Sequence[tuple[str, int]] = (), worker: Any = None) -> Report:
    """The double backward at one shape (the inputs as :func:`check_jvp`'s): ddy as a JVP, ddx
    against the exact HVP; ``worker`` an isolated worker holding the :func:`packed` double backward."""
    findings: list[Finding] = []
    guard = Guard(packed(double_backward, g), "double_backward", ("x", "dy", "v"), findings, timeout=timeout,
                  isolate=None if worker is None else (worker, "double_backward"))
    dy = distinct_dy(g, dt, seed)
    second = SecondOrder(g, guard, dt, dy)
    p = _Pass(g, dt, second.each, budget, findings)
    t = distinct_tangent(g, dt, seed)
    context = " (double backward's ddy = J·v)"
    got = p.at(x, [t], context)
    if got is not None:
        second.check_ddx(x, findings, dense=t)
    _tag(findings, 0, "double_backward", main_family, main=True)
    run = [main_family]
    if got is not None and g.operator.tie_family:
        start = len(findings)
        tx = g.operator.tie_input(g, tie_input(g, dt, seed))  # the VJP's tie input
        second.clear()
        if p.at(tx, [], context) is not None:
            second.check_ddx(tx, findings, dense=None)
        _tag(findings, start, "double_backward", "ties")
        run.append("ties")
    if got is not None:
        def ddx(xf: np.ndarray, tf: np.ndarray) -> None:
            second.check_ddx(xf, findings, dense=tf)
            second.clear()

        second.clear()
        run += _families(p, extra, seed, "double_backward", context, after=ddx)
    stats = {"dtype": str(dt), "double_backward_calls": guard.calls, "max_ulp_error": p.diagnosis.max_ulp,
             "ddx_max_abs": second.ddx_max_abs, "families": _counts(run)}
    report = _report(g, "double_backward", findings, stats)

    def arguments_in(other: np.dtype[Any]) -> tuple[Any, ...]:
        return (x.astype(other), distinct_dy(g, other, seed),
                g.from_canonical(distinct_tangent(g, other, seed).astype(other), g.in_spatial))

    return unsupported(report, dt, [(guard, arguments_in)]) if findings else report


def _report(g: Geometry, transform: str, findings: list[Finding], stats: dict[str, Any]) -> Report:
    what = {"jvp": "the JVP matches the exact J(x)·t", "double_backward":
            "the double backward matches the exact (∇²_x(dyᵀf)·v, J(x)·v)"}[transform]
    total = g.batch * g.n_out
    if findings:
        cats = list(dict.fromkeys(f.category for f in findings))
        headline = f"{transform}: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    else:
        headline = f"{what} at all {total} windows"
        if stats.get("same_element_as_backward") is True:
            headline += "; at ties the same Clarke element as the backward"
        elif stats.get("same_element_as_backward") is False:
            headline += (f"; at ties a valid Clarke element, not the backward's (at "
                         f"{len(stats['elements_differ_at'])} tied windows)")
    return Report(repr(g.spec), tuple(findings), {transform: {**stats, "ok": not findings}}, headline)


def _worker(g: Geometry, jvp: Callable[..., Any] | None, double_backward: Callable[..., Any] | None,
            backward: Callable[..., Any] | None, timeout: float | None) -> Any:
    """A worker process holding the transforms' callables at this shape (``isolate=True``)."""
    from symjac.run._isolate import Worker

    functions: dict[str, Callable[..., Any]] = {}
    if jvp is not None:
        functions["jvp"] = jvp
        if backward is not None:  # the tie element's comparison probes the backward too
            functions["backward"] = backward
    if double_backward is not None:
        functions["double_backward"] = packed(double_backward, g)
    return Worker(functions, timeout=timeout)


def verify_transforms(spec: PoolSpec, *, jvp: Callable[..., Any] | None, double_backward: Callable[..., Any] | None,
                      backward: Callable[..., Any] | None, input_shape: Any, x: Any, dtype: Any, seed: int,
                      one_hot_budget: int, timeout: float | None, tie: Any = "any",
                      families: Sequence[str] | None = None, isolate: bool = False) -> Report:
    """Every given transform at the shape (x's, ``input_shape``) or at every shape of the coverage plan,
    at the inputs the VJP's check runs at (``families``: its extra families, default the operator's),
    in a worker process with ``isolate``, for a ``spec`` its entry checked."""
    from symjac.verifiers.pool._run import _dtype, _inputs, check_families

    from symjac.pool._beta import Beta, parse_tie
    from symjac.pool._symbolic import TIE_POLICIES
    from symjac.pool._beta_fit import beta_name

    parsed = parse_tie(tie, ("any",) + TIE_POLICIES)
    tie_name = beta_name(parsed) if isinstance(parsed, Beta) else str(parsed)
    for name, fn in (("jvp", jvp), ("double_backward", double_backward)):
        if fn is not None and not callable(fn):
            raise InputError(f"{name}={fn!r} is not callable: give a function on NumPy arrays")
    check_families(spec, families)
    if x is not None and nonfinite_codes(np.asarray(x)) is not None:
        raise InputError("x holds NaN or ±inf: forward mode and second order have no exact model there (the "
                         "VJP's nonfinite family checks NaN and ±inf by the operator's convention); give a finite "
                         "x, or transforms=('vjp',)")
    dt = _dtype(dtype, x)
    shapes: list[Any] = [None] if (x is not None or input_shape is not None) else list(coverage_plan(spec))
    reports: list[Report] = []
    for shape in shapes:
        g, x_arr, _ = _inputs(spec, dt, input_shape if shape is None else shape, x, None, seed)
        extra = extra_inputs(g, families, edges=False)
        worker = _worker(g, jvp, double_backward, backward, timeout) if isolate else None
        at: list[Report] = []
        main = "given" if x is not None else "distinct"
        try:
            if jvp is not None:
                at.append(check_jvp(g, x_arr, dt, jvp, backward=backward, seed=seed, budget=one_hot_budget,
                                    timeout=timeout, main_family=main, tie=tie_name, extra=extra, worker=worker))
            if double_backward is not None:
                at.append(check_double_backward(g, x_arr, dt, double_backward, seed=seed, budget=one_hot_budget,
                                                timeout=timeout, main_family=main, extra=extra, worker=worker))
        finally:
            if worker is not None:
                worker.close()
        reports += [_at_shape(r, g.input_shape, len(shapes) > 1) for r in at]
    return combine(repr(spec), reports)


def _at_shape(r: Report, shape: tuple[int, ...], many: bool) -> Report:
    if not many:
        return r
    findings = tuple(dataclasses.replace(f, message=f"at input shape {shape}: {f.message}",
                                         detail={**(f.detail or {}), "input_shape": shape}) for f in r.findings)
    return dataclasses.replace(r, findings=findings, stats={k: {**v, "input_shape": list(shape)}
                                                            for k, v in r.stats.items()})


def combine(subject: str, reports: list[Report]) -> Report:
    """One report of the transforms' reports (per transform and shape): findings in order, the
    figures under ``stats["transforms"]`` (per transform: ``ok`` and one entry per shape). A
    transform that rejects the dtype at every shape makes the report ``unsupported``; at some
    shapes only, a ``bad_output`` finding at each of them (as :func:`symjac.verify`'s plan)."""
    per: dict[str, list[Report]] = {}
    for r in reports:
        for name in r.stats:
            per.setdefault(name, []).append(r)
    everywhere = {name for name, rs in per.items() if all(q.unsupported for q in rs)}
    findings: list[Finding] = []
    partly: dict[str, list[Finding]] = {}  # per transform: the shapes where it rejects a dtype it runs at others
    for r in reports:
        for name, s in r.stats.items():
            if r.unsupported and name not in everywhere:
                shape = s.get("input_shape")
                partly.setdefault(name, []).append(Finding(
                    "bad_output", f"{name}: at input shape {tuple(shape or ())}: {r.unsupported}, though it returns "
                    "in this dtype at other shapes of the coverage plan", detail={"transform": name, "input_shape": shape}))
                findings.append(partly[name][-1])
        findings += r.findings
    summary = {name: {"ok": all(q.stats[name]["ok"] for q in rs), "shapes": [q.stats[name] for q in rs]}
               for name, rs in per.items()}
    parts = []
    for name, rs in per.items():
        failing = [r for r in rs if not r.ok]
        if name in partly:  # that is the finding to lead with
            parts.append(f"{name}: {len(partly[name])} finding(s) [bad_output]: {partly[name][0].message}")
        elif failing:
            parts.append(failing[0].headline)
        else:
            last = rs[-1].headline
            parts.append(last if len(rs) == 1 else f"{last} (at all {len(rs)} shapes)")
    reasons = [str(per[name][0].unsupported) for name in per if name in everywhere]
    return Report(subject, tuple(findings), {"transforms": summary}, "; ".join(parts),
                  unsupported="; ".join(reasons) or None,
                  returns_in=returns_in(per[name][0] for name in per if name in everywhere))
