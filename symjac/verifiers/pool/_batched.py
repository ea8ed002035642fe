"""The batched rule of a pooling implementation: ``verify(spec, vmap=...)``.

The rule's batched forward, VJP and JVP run one sample at a time
(:class:`symjac.verifiers._vmap.PerSample`: each per-sample call one batched call, at batch
sizes 1, 2 and 3 with the batch at axis 0 and elsewhere) through the checks the per-sample op
gets: the forward and backward through :func:`symjac.verifiers.pool._run.run`, the JVP through
:func:`symjac.verifiers.pool._transforms.verify_transforms`, at the same shapes and input
families. Every finding is the batched rule's: ``detail["transform"] == "vmap"`` and the message
starts ``vmap: ``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from symjac.check._call import DEFAULT_TIMEOUT
from symjac.check._report import Finding, Report
from symjac.check._unsupported import returns_in
from symjac.pool._spec import PoolSpec
from symjac.verifiers._vmap import ROLES, PerSample

#: What the report calls each per-sample callable of the rule.
_WORDS = {"forward": "forward", "backward": "backward (VJP)", "jvp": "jvp"}


def _tag(findings: tuple[Finding, ...]) -> list[Finding]:
    out = []
    for f in findings:
        detail = dict(f.detail or {})
        inner = detail.get("transform")
        detail["transform"] = "vmap"
        if inner is not None:
            detail["batched"] = inner
        out.append(dataclasses.replace(f, message=f"vmap: {f.message}", detail=detail))
    return out


def _broken(spec: PoolSpec, exc: Exception) -> Report:
    """The rule raised when asked for its callables: a finding, as a call that raises."""
    message = (f"vmap: the batching rule raised {type(exc).__name__} when asked for its batched callables "
               f"at in_axis=0, out_axis=0: {exc}")
    finding = Finding("bad_output", message, detail={"transform": "vmap"})
    return Report(repr(spec), (finding,), {"vmap": {"checked": True, "ok": False}}, message)


def verify_batched(spec: PoolSpec, rule: Any, *, reference: Mapping[str, Callable[..., Any] | None],
                   **common: Any) -> Report:
    """The batched rule's forward, backward and jvp (those it gives) per sample, against the exact
    derivatives; ``reference`` the per-sample op's own callables (see :class:`PerSample`);
    ``common``: :func:`symjac.verify`'s input, dtype, seed, budget, timeout, tie, families and
    isolation arguments. The report's ``stats["vmap"]`` has the layouts run, with their calls."""
    from symjac.verifiers.pool._run import run
    from symjac.verifiers.pool._transforms import verify_transforms

    common = {"one_hot_budget": 64, "timeout": DEFAULT_TIMEOUT, "seed": 0, **common}
    sample = PerSample(rule, reference)
    try:
        fns = {role: sample.per_sample(role) for role in ROLES}
    except Exception as exc:  # noqa: BLE001 - the user's rule failing is a finding, not a crash
        return _broken(spec, exc)
    sample.rank = spec.rank + 2  # (N, C, spatial...): the layouts' "last" positions
    given = [role for role in ROLES if fns[role] is not None]
    if not given:
        return _broken(spec, TypeError("it gives no batched forward, backward or jvp"))
    reports: list[Report] = []
    keys: tuple[str, ...]
    if fns["forward"] is not None or fns["backward"] is not None:
        keys = ("input_shape", "x", "dy", "dtype", "tie", "seed", "one_hot_budget", "timeout", "families",
                "isolate", "deterministic", "large")
        reports.append(run(spec, backward=fns["backward"], forward=fns["forward"],
                           **{k: v for k, v in common.items() if k in keys}))
    if fns["jvp"] is not None:
        keys = ("input_shape", "x", "dtype", "seed", "one_hot_budget", "timeout", "tie", "families", "isolate")
        reports.append(verify_transforms(spec, jvp=fns["jvp"], double_backward=None, backward=None,
                                         **{k: v for k, v in common.items() if k in keys}))
    return _summary(spec, sample, given, reports)


def _figures(r: Report) -> dict[str, Any]:
    """A part's figures for the report (the VJP's without its gradient arrays)."""
    if "transforms" in r.stats:
        return dict(r.stats["transforms"])
    keep = ("backward_calls", "forward_calls", "windows_total", "max_ulp_error", "tie_policy", "families", "dtype")
    return {"vjp": {"ok": r.ok, **{k: r.stats[k] for k in keep if k in r.stats}}}


def _summary(spec: PoolSpec, sample: PerSample, given: list[str], reports: list[Report]) -> Report:
    findings = [f for r in reports for f in _tag(r.findings)]
    layouts = sample.layouts_run()
    sizes = sorted({lay["batch"] for lay in layouts})
    axes = sorted({lay["in_axis"] for lay in layouts})
    absent = {role: "the batched rule gives none" for role in ROLES if role not in given}
    stats: dict[str, Any] = {
        "checked": True, "ok": not findings and not any(r.unsupported for r in reports),
        "callables": given, "not_checked": absent, "layouts": layouts, "batch_sizes": sizes, "batch_axes": axes,
        "axis0_only": sample.fixed, "parts": [_figures(r) for r in reports]}
    words = [_WORDS[role] for role in given]
    what = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    where = f"batch sizes {', '.join(map(str, sizes))}, batch axes {', '.join(map(str, axes))}"
    if sample.fixed:
        where += " (the rule batches axis 0 only: other batch positions not checked)"
    unsupported = "; ".join(r.unsupported for r in reports if r.unsupported) or None
    if findings:
        first = next(r for r in reports if r.findings)
        headline = f"vmap: {first.headline}"
    elif unsupported:
        headline = f"vmap: {unsupported}"
    else:
        headline = f"vmap: the batched {what} match the exact derivatives one sample at a time at {where}"
    return Report(repr(spec), tuple(findings), {"vmap": stats}, headline,
                  tuple(f"vmap: {n}" for r in reports for n in r.notes), unsupported, returns_in(reports))
