"""Verify a max unpooling implementation (:class:`symjac.MaxUnpool`) against its exact derivatives.

:func:`symjac.verify` hands a :class:`~symjac.pool._ops.unpool.MaxUnpool` spec here. At every
shape of the coverage plan (:func:`symjac.pool._ops.unpool.cover`) and every input family
(:mod:`symjac.verifiers.unpool._inputs`), the forward is compared bitwise with the exact one, the
backward's and the jvp's Jacobians are recovered whole (one call per output or input cell) and
compared entry by entry, the double backward at dense arguments; each difference is named in the
operator's terms (:mod:`symjac.verifiers.unpool._diagnose`). The batching rule (vmap) is not
checked for max unpooling: the report says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import DEFAULT_TIMEOUT, Guard
from symjac.check._report import Finding, Report
from symjac.check._rounding import float_dtype
from symjac.pool._ops.unpool import MaxUnpool, check_input_shape, check_unpool_spec, cover, scatter
from symjac.verifiers._impl import BEYOND_VJP, derivatives
from symjac.verifiers.unpool._inputs import FAMILIES, indices_of, values
from symjac.verifiers.unpool._passes import Guards, Pass, check_double_backward, check_forward, check_linear

#: The derivatives, in report order, with their words (as :func:`symjac.verify`'s).
DERIVATIVES = {"vjp": "vjp", "jvp": "jvp", "double_backward": "double backward", "vmap": "batched rule (vmap)"}
#: Why the batching rule goes unchecked.
NO_VMAP = "max unpooling's batching rule is not checked by symjac (its per-sample check reads window geometry)"


def _callables(impl: Any, given: dict[str, Any], transforms: Sequence[str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The callables to check (the keyword ones, else the object's own) and why each other derivative is not."""
    lacking = {name: "not given" for name in BEYOND_VJP}
    fns = dict(given)
    if impl is not None:
        own, lacking, _ = derivatives(impl)
        fns = {k: v if v is not None else own.get(k) for k, v in given.items()}
    if transforms is not None and (isinstance(transforms, str) or not all(t in DERIVATIVES for t in transforms)):
        raise InputError(f"transforms={transforms!r} is not valid: give a sequence of {', '.join(map(repr, DERIVATIVES))}")
    why: dict[str, str] = {}
    for name in DERIVATIVES:
        defined = (fns["backward"] is not None or fns["forward"] is not None) if name == "vjp" else fns[name] is not None
        if transforms is not None and name not in transforms:
            why[name] = f"excluded by transforms={tuple(transforms)!r}"
        elif not defined:
            why[name] = lacking.get(name, "the implementation has no backward or forward")
        elif name == "vmap":
            why[name] = NO_VMAP
    for name in ("forward", "backward", "jvp", "double_backward"):
        if fns[name] is not None and not callable(fns[name]):
            raise InputError(f"{name}={fns[name]!r} is not callable: give a function on NumPy arrays")
    if all(name in why for name in ("vjp", "jvp", "double_backward")):
        raise InputError("give forward(x, indices), backward(x, indices, dy), jvp(x, indices, t) and/or "
                         "double_backward(x, indices, dy, v): there is nothing to verify")
    selected = {"forward": "vjp", "backward": "vjp", "jvp": "jvp", "double_backward": "double_backward"}
    return {role: None if name in why else fns[role] for role, name in selected.items()}, why


def _families(spec: MaxUnpool, families: Sequence[str] | None) -> tuple[str, ...]:
    if families is None:
        chosen: tuple[str, ...] = FAMILIES
    elif isinstance(families, str) or not all(f in FAMILIES for f in families) or not families:
        raise InputError(f"families={families!r} is not valid for max unpooling: give a non-empty sequence of "
                         f"{', '.join(map(repr, FAMILIES))}")
    else:
        chosen = tuple(f for f in FAMILIES if f in families)
    if spec.indices is not None:  # one set of indices: the spec's own; the first two families are one
        chosen = tuple(dict.fromkeys("given" if f in ("pooled", "repeats") else f for f in chosen))
    return chosen


def _guards(fns: dict[str, Any], timeout: float | None, worker: Any) -> Guards:
    findings: list[Finding] = []
    names = {"forward": ("x", "indices"), "backward": ("x", "indices", "dy"), "jvp": ("x", "indices", "t"),
             "double_backward": ("x", "indices", "dy", "v")}

    def guard(role: str) -> Guard | None:
        fn = fns[role]
        return None if fn is None else Guard(fn, role, names[role], findings, timeout=timeout,
                                             isolate=None if worker is None else (worker, role))
    return Guards(guard("forward"), guard("backward"), guard("jvp"), guard("double_backward"), findings)


def _run_shape(spec: MaxUnpool, shape: tuple[int, ...], x: np.ndarray | None, dy: np.ndarray | None,
               families: tuple[str, ...], dt: np.dtype[Any], seed: int, guards: Guards, stats: dict[str, Any]) -> None:
    """Every family's passes at one shape; findings go to ``guards.findings``."""
    for k, family in enumerate(families):
        s = scatter(spec, shape, indices_of(spec, family, shape))
        given = x is not None and family in ("pooled", "repeats", "given")
        p = Pass(s, x.astype(dt) if given and x is not None else values(family, shape, dt, seed + k), family,
                 seed + 100 * k, dt)
        before = len(guards.findings)
        note = f" (output spatial size {s.output_shape[2:]}: " + (
            "the given output_size)" if spec.output_size is not None else "(L - 1)·stride + kernel - pads per axis)")
        ok = {"forward": check_forward(p, guards.forward, guards.findings, note) if guards.forward else None,
              "backward": check_linear(p, guards.backward, guards.findings, "backward", dy if k == 0 else None)
              if guards.backward else None,
              "jvp": check_linear(p, guards.jvp, guards.findings, "jvp") if guards.jvp else None,
              "double_backward": check_double_backward(p, guards.double_backward, guards.findings)
              if guards.double_backward else None}
        guards.findings[before:] = [f if f.family else dataclasses.replace(f, family=family)
                                    for f in guards.findings[before:]]
        stats["outputs"] += s.n_out
        stats["repeated_outputs"] += int(s.repeated().sum())
        stats["families"][family] = stats["families"].get(family, 0) + 1
        for role, value in ok.items():
            if value is False:
                stats[f"{role}_ok"] = False


def verify_unpool(spec: Any, impl: Any = None, /, *, backward: Callable[..., Any] | None = None,
                  forward: Callable[..., Any] | None = None, jvp: Callable[..., Any] | None = None,
                  double_backward: Callable[..., Any] | None = None, vmap: Any = None,
                  transforms: Sequence[str] | None = None, input_shape: tuple[int, ...] | None = None, x: Any = None,
                  dy: Any = None, dtype: Any = None, tie: Any = "any", seed: int = 0, one_hot_budget: int = 64,
                  timeout: float | None = DEFAULT_TIMEOUT, families: Sequence[str] | None = None,
                  isolate: bool = False, deterministic: bool = False, hints: bool = True,
                  large: bool = False) -> Report:
    """:func:`symjac.verify` for a :class:`symjac.MaxUnpool` spec (its arguments; ``tie``, ``large``,
    ``one_hot_budget`` and ``hints`` have no meaning here: a repeated index's winner is the spec's
    ``write``; every expected value is exact, so two equal calls that differ bitwise are a
    ``nondeterministic`` finding whatever ``deterministic`` says). The implementation's callables take the indices after x: ``forward(x, indices)``,
    ``backward(x, indices, dy)``, ``jvp(x, indices, t)``, ``double_backward(x, indices, dy, v)``."""
    spec = check_unpool_spec(spec)
    if tie != "any" or large:
        raise InputError("max unpooling has no ties and no index-width shapes: its write order at a repeated index "
                         "is the spec's write= ('last' or 'first'); leave tie and large unset")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise InputError(f"timeout={timeout!r} is not valid: give seconds > 0, or None for no limit")
    fns, why = _callables(impl, {"backward": backward, "forward": forward, "jvp": jvp,
                                 "double_backward": double_backward, "vmap": vmap}, transforms)
    chosen = _families(spec, families)
    raw = None if x is None else np.asarray(x)
    dt = float_dtype(dtype if dtype is not None else raw.dtype if raw is not None and raw.dtype.kind == "f"
                     else "float64")
    if raw is not None and input_shape is not None and tuple(input_shape) != raw.shape:
        raise InputError(f"input_shape={tuple(input_shape)!r} disagrees with x's shape {raw.shape}: give one of them")
    shapes = [check_input_shape(spec, raw.shape if raw is not None else input_shape)] \
        if raw is not None or input_shape is not None else cover(spec)
    if raw is not None and not np.array_equal(raw.astype(dt).astype(np.float64), raw.astype(np.float64),
                                              equal_nan=True):
        raise InputError(f"x is not exactly representable in {dt}; give values that are")
    dy_arr = _checked_dy(spec, dy, shapes, dt)
    worker = None
    if isolate:
        from symjac.run._isolate import Worker

        worker = Worker({k: v for k, v in fns.items() if v is not None}, timeout=timeout)
    guards = _guards(fns, timeout, worker)
    stats: dict[str, Any] = {"forward_ok": True if fns["forward"] else None,
                             "backward_ok": True if fns["backward"] else None,
                             "jvp_ok": True if fns["jvp"] else None,
                             "double_backward_ok": True if fns["double_backward"] else None,
                             "outputs": 0, "repeated_outputs": 0, "families": {}, "write": spec.write,
                             "flat": spec.flat, "dtype": str(dt), "coverage_plan": [list(s) for s in shapes]}
    try:
        for shape in shapes:
            before = len(guards.findings)
            _run_shape(spec, shape, raw, dy_arr, chosen, dt, seed, guards, stats)
            if len(shapes) > 1:
                guards.findings[before:] = [dataclasses.replace(f, message=f"at input shape {shape}: {f.message}",
                                                                detail=dict(f.detail or {}, input_shape=shape))
                                            for f in guards.findings[before:]]
        guards.finish()
    finally:
        if worker is not None:
            worker.close()
    return _report(spec, guards, stats, why)


def _checked_dy(spec: MaxUnpool, dy: Any, shapes: list[tuple[int, ...]], dt: np.dtype[Any]) -> np.ndarray | None:
    if dy is None:
        return None
    if len(shapes) != 1:
        raise InputError("dy is an upstream gradient at one shape: give x or input_shape with it")
    s = scatter(spec, shapes[0], indices_of(spec, "pooled", shapes[0]))
    arr = np.asarray(dy)
    if arr.shape != s.output_shape:
        raise InputError(f"dy has shape {arr.shape}; the output shape is {s.output_shape}")
    return arr.astype(dt)


def _report(spec: MaxUnpool, guards: Guards, stats: dict[str, Any], why: dict[str, str]) -> Report:
    findings = guards.findings
    stats["transforms"] = {name: {"checked": False, "why": why[name]} if name in why else {"checked": True}
                           for name in DERIVATIVES}
    checked = [DERIVATIVES[n] for n in DERIVATIVES if n not in why]
    roles = [r for r in ("forward", "backward") if stats[f"{r}_ok"] is not None] if "vjp" in checked else []
    what = ", ".join(roles + [c for c in checked if c != "vjp"])
    plan = stats["coverage_plan"]
    if findings:
        causes = sorted({str((f.detail or {}).get("cause", f.category)) for f in findings})
        headline = f"{len(findings)} finding(s) ({', '.join(causes)}); first: {findings[0].message}"
    else:
        headline = (f"max unpooling: {what} match the exact ones at {len(plan)} shape(s), families "
                    f"{', '.join(stats['families'])} ({stats['outputs']} output cells, {stats['repeated_outputs']} "
                    f"written by a repeated index; write={spec.write!r}, flat={spec.flat!r}; every comparison exact)")
    if why:
        headline += "; not checked: " + "; ".join(f"{DERIVATIVES[n]} ({t})" for n, t in why.items())
    return Report(repr(spec), tuple(findings), stats, headline)
