"""One pooling verification without hints: arguments checked, inputs made, passes run, shapes combined.

:func:`run` is :func:`symjac.verify` but for the convention hint, which sits one level
up (:mod:`symjac.verifiers.pool._verify`) because it screens neighbouring specs with
:mod:`symjac.verifiers.pool._infer`, which runs verifications through here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symjac._progress import note
from symjac._errors import InputError
from symjac._exact import ExactArray, as_array, finite_part, nonfinite_codes
from symjac.check._call import DEFAULT_TIMEOUT
from symjac.verifiers.pool._inputs import EXTRA, PROBED, distinct_dy, distinct_input, extra_inputs, family_input
from symjac.check._report import CATEGORIES, Finding, Report
from symjac.check._rounding import float_dtype
from symjac.check._unsupported import returns_in, unsupported
from symjac.pool._beta import Beta, parse_tie
from symjac.pool._cover import plan as coverage_plan
from symjac.pool._geometry import Geometry, check_shape, resolved
from symjac.pool._ops import operator_of
from symjac.pool._spec import PoolSpec
from symjac.pool._symbolic import TIE_POLICIES
from symjac.pool._beta_fit import beta_name
from symjac.verifiers.pool._families import nan_policy_words
from symjac.verifiers.pool._verifier import _Verifier

#: A hint for a failing report: (spec, report, forward, backward, geometry, dtype, seed, isolate) -> report.
Hint = Callable[[PoolSpec, Report, Any, Any, Geometry, np.dtype[Any], int, bool], Report]


def _inputs(spec: PoolSpec, dt: np.dtype[Any], input_shape: Any, x: Any, dy: Any,
            seed: int) -> tuple[Geometry, np.ndarray, np.ndarray | None]:
    """The geometry, x (given, or distinct within every window) and the caller's dy, checked."""
    if x is None and input_shape is None:
        raise InputError("give input_shape or x")
    if x is not None:
        raw = as_array(x, "x")
        if input_shape is not None and tuple(input_shape) != raw.shape:
            raise InputError(f"input_shape={tuple(input_shape)!r} disagrees with x's shape {raw.shape}: give x alone "
                             "(its shape is the input shape), or input_shape alone (generated inputs)")
        codes = nonfinite_codes(raw)  # NaN and ±inf are read by the operator's convention; else exact numbers
        ExactArray.from_any(raw if codes is None else finite_part(raw), "x")
        x_arr = raw.astype(dt)
        if not np.array_equal(x_arr.astype(np.float64), raw.astype(np.float64), equal_nan=codes is not None):
            raise InputError(f"x is not exactly representable in {dt}; give values that are (e.g. small dyadic numbers)")
        g = resolved(spec, check_shape(x_arr.shape))
        if codes is not None:
            g.operator.nonfinite(g, x_arr, g.operator.nan_policies[0])  # x outside its domain: the InputError now
    else:
        g = resolved(spec, check_shape(input_shape))
        x_arr = distinct_input(g, dt, seed)
        x_arr = g.operator.default_input(g, x_arr)  # lp: odd p needs Σ x^p > 0 in every window
    dy_arr = None
    if dy is not None:
        raw = as_array(dy, "dy")
        ExactArray.from_any(raw, "dy")
        if raw.shape != g.output_shape:
            raise InputError(f"dy has shape {raw.shape}; the output shape is {g.output_shape}")
        dy_arr = raw.astype(dt)
    return g, x_arr, dy_arr


def check_families(spec: PoolSpec, families: Sequence[str] | None) -> None:
    """An :class:`InputError` for a ``families=`` that names no extra family, or names one where
    the operator has none (every derivative's check runs at the same families)."""
    if families is None:
        return
    if isinstance(families, str) or not all(f in EXTRA for f in families):
        raise InputError(f"families={families!r} is not valid: give a sequence of {', '.join(map(repr, EXTRA))}")
    dense = [f for f in families if f not in PROBED]
    if dense and not operator_of(spec).extra_families:
        raise InputError(f"families={families!r}: {', '.join(map(repr, dense))} check a dense exact J(x)^T dy, "
                         f"which max and avg pooling have (mode={spec.mode!r} has algebraic derivatives); give "
                         f"a sequence of {', '.join(map(repr, PROBED))}, or ()")


def _dtype(dtype: Any, x: Any) -> np.dtype[Any]:
    """The dtype of the calls: ``dtype`` when given, else a float x's own dtype, else float64."""
    if dtype is not None:
        return float_dtype(dtype)
    dt = getattr(np.asarray(x), "dtype", None) if x is not None else None
    if dt is not None and (dt.kind == "f" or dt.name == "bfloat16"):
        return float_dtype(dt)
    return float_dtype("float64")


def run(spec: PoolSpec, *, backward: Callable[..., Any] | None = None, forward: Callable[..., Any] | None = None,
        input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = None,
        tie: str | Beta = "any", seed: int = 0, one_hot_budget: int = 64,
        timeout: float | None = DEFAULT_TIMEOUT, families: Sequence[str] | None = None, isolate: bool = False,
        deterministic: bool = False, hint: Hint | None = None, large: bool = False) -> Report:
    """:func:`symjac.verify` (its arguments, but ``hint``: called on a failing report of one shape),
    for a ``spec`` its entry checked."""
    dt = _dtype(dtype, x)
    parsed = parse_tie(tie, ("any",) + TIE_POLICIES)
    tie_name = beta_name(parsed) if isinstance(parsed, Beta) else parsed
    if backward is None and forward is None:
        raise InputError("give backward(x, dy) and/or forward(x): there is nothing to verify")
    if (backward is not None and not callable(backward)) or (forward is not None and not callable(forward)):
        raise InputError("backward and forward must be callables on NumPy arrays")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise InputError(f"timeout={timeout!r} is not valid: give seconds > 0, or None for no limit")
    if not isinstance(deterministic, (bool, np.bool_)):
        raise InputError(f"deterministic={deterministic!r} is not valid: give True or False")
    check_families(spec, families)
    kwargs = dict(backward=backward, forward=forward, dtype=dt, tie=tie, seed=seed, one_hot_budget=one_hot_budget,
                  timeout=timeout, families=families, isolate=isolate, deterministic=deterministic, hint=hint)
    if x is None and input_shape is None and dy is None:
        return _verify_plan(spec, kwargs, large)
    if large:
        raise InputError("large=True adds the index-width shapes to the coverage plan: give no input_shape, x or "
                         "dy (or drop large)")
    g, x_arr, dy_arr = _inputs(spec, dt, input_shape, x, dy, seed)
    tie_x = family_input(g, "ties", dt, seed) if g.operator.tie_family else None
    extra = extra_inputs(g, families)
    worker = None
    if isolate:
        from symjac.run._isolate import Worker

        worker = Worker({k: v for k, v in (("backward", backward), ("forward", forward)) if v is not None},
                        timeout=timeout)
    try:
        verifier = _Verifier(spec, g, backward, forward, dt, tie_name, one_hot_budget, timeout, worker,
                             deterministic=bool(deterministic))
        report = verifier.run(x_arr, dy_arr, tie_x, main_family="given" if x is not None else "distinct",
                              extra=extra, seed=seed)
        if not report.ok:
            report = _rejected(report, verifier, g, x_arr, seed)
    finally:
        if worker is not None:
            worker.close()
    if hint is not None and not report.ok and not report.unsupported:
        report = hint(spec, report, forward, backward, g, dt, seed, isolate)
    return report


def _rejected(report: Report, verifier: _Verifier, g: Geometry, x: np.ndarray, seed: int) -> Report:
    """The report as ``unsupported`` when a callable rejects the dtype (:func:`unsupported`)."""
    def arguments(n: int) -> Callable[[np.dtype[Any]], tuple[Any, ...]]:
        return lambda dt: (x.astype(dt), distinct_dy(g, dt, seed))[:n]  # (x,) or (x, dy) in dtype dt

    return unsupported(report, verifier.dtype, [(guard, arguments(len(guard.names)))
                                                for guard in (verifier.bwd, verifier.fwd) if guard is not None])



#: Stats combined over the shapes of a coverage plan: how each figure aggregates.
_ALL, _SUM, _MAX = ("forward_ok", "backward_ok", "fd_consistent"), (
    "windows_total", "windows_missing", "windows_partial", "edges_missing", "edges_extra", "weights_wrong",
    "backward_calls", "forward_calls"), ("max_abs_error", "max_ulp_error", "window_colours")


def _cause_rank(report: Report) -> int:
    """How close a failing shape's findings come to the root cause: the most specific
    category among its findings, in :data:`CATEGORIES` order (wrong values and windows
    first; an implementation that raises, returns a bad shape, hangs or crashes last, as
    it says nothing about the derivative there)."""
    return min((CATEGORIES.index(c) for c in report.categories()), default=len(CATEGORIES))


def _verify_plan(spec: PoolSpec, kwargs: dict[str, Any], large: bool = False) -> Report:
    """Verify at every shape of :func:`symjac.cover` (``large``: its index-width shapes too)
    and combine the reports."""
    shapes = coverage_plan(spec, large=large)
    reports: list[Report] = []
    for i, shape in enumerate(shapes):
        note(f"shape {i + 1}/{len(shapes)} of the coverage plan, {shape}", i, len(shapes))
        reports.append(run(spec, input_shape=shape, **kwargs))
        if "timeout" in reports[-1].categories():
            break  # each further shape would wait out the timeout again
    plan = shapes[:len(reports)]
    rejected = [r.unsupported for r in reports if r.unsupported]
    findings = []
    for shape, r in zip(plan, reports):
        if r.unsupported and len(rejected) < len(reports):  # the dtype runs at other shapes: a defect here
            findings.append(Finding("bad_output", f"at input shape {shape}: {r.unsupported}, though it returns "
                                    "in this dtype at other shapes of the coverage plan",
                                    detail={"input_shape": shape}))
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
    stats["tie_policy"] = (next(iter(policies)) if len(policies) == 1 else "varying") if policies else None
    for key in ("nan_policy", "nonfinite_tie_policy"):  # non-finite inputs' policies, as the tie policy's
        seen_policies = {r.stats[key] for r in reports if r.stats.get(key)}
        stats[key] = (next(iter(seen_policies)) if len(seen_policies) == 1 else "varying") if seen_policies else None
    stats["mutated_inputs"] = sorted({m for r in reports for m in r.stats.get("mutated_inputs", [])})
    seen = {role: n for r in reports for role, n in (r.stats.get("nondeterminism") or {}).items()}
    stats["nondeterminism"] = seen or None
    stats["dtype"] = str(kwargs["dtype"])
    families_seen: dict[str, int] = {}
    for r in reports:
        for name, n in r.stats.get("families", {}).items():
            families_seen[name] = families_seen.get(name, 0) + n
    stats["families"] = families_seen
    cost: dict[str, dict[str, float]] = {}
    for r in reports:
        for name, figures in r.stats.get("family_cost", {}).items():
            into = cost.setdefault(name, dict.fromkeys(figures, 0))
            for key, value in figures.items():
                into[key] += value
    stats["family_cost"] = cost
    stats["coverage_plan"] = [list(shape) for shape in shapes]
    stats["shapes"] = [{"input_shape": list(shape), "ok": r.ok, "summary": r.summary()} for shape, r in zip(plan, reports)]
    failing = [(shape, r) for shape, r in zip(plan, reports) if not r.ok]
    if rejected and len(rejected) == len(reports) and not findings:
        headline = (f"unsupported in {kwargs['dtype']} at every shape of the coverage plan: {rejected[0]}")
        return Report(repr(spec), (), stats, headline, unsupported=rejected[0], returns_in=returns_in(reports))
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
        headline += f"; {' and '.join(seen)} not bitwise reproducible, within the rounding bound (a note)" \
            if seen else ""
        headline += "; forward and finite differences agree" if stats["fd_consistent"] else ""
        headline += f"; tie policy {stats['tie_policy']}" if stats["tie_policy"] else ""
        headline += nan_policy_words(stats["nan_policy"], stats["nonfinite_tie_policy"])
    else:
        ranked = sorted(failing, key=lambda sr: _cause_rank(sr[1]))  # stable: ties keep the plan's order
        shape, first = ranked[0]
        stats["root_cause_shape"] = list(shape)
        headline = (f"fails at {len(failing)} of {len(plan)} shapes of the coverage plan; "
                    f"{'root cause ' if len(failing) > 1 else ''}at input shape {shape}: {first.summary()}")
        named = set(first.categories())
        others = []
        for other_shape, r in ranked[1:]:
            new = [c for c in r.categories() if c not in named]
            named.update(new)
            if new:
                others.append(f"{', '.join(new)} at input shape {other_shape}")
        if others:
            headline += f" (also {'; '.join(others)})"
        order = {sh: i for i, (sh, _) in enumerate(ranked)}
        findings.sort(key=lambda f: order.get(tuple((f.detail or {})["input_shape"]), len(order)))
        if len(plan) < len(shapes):
            headline += f" ({len(shapes) - len(plan)} more shapes not run after the timeout)"
    notes = tuple(f"at input shape {shape}: {n}" for shape, r in zip(plan, reports) for n in r.notes)
    return Report(repr(spec), tuple(findings), stats, headline, notes)
