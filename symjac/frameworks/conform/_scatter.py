"""A conformance cell of max unpooling (:class:`symjac.MaxUnpool`): one verification at the cell's shape.

A scatter has no window geometry, so the pooling cell's per-family inputs do not apply: its own
verifier (:mod:`symjac.verifiers.unpool`) runs every input family itself (indices as a max pooling
returns them, repeated indices, equal values, extreme values, NaN and ±inf) and names the family of
each finding, which a documented defect's scope reads as a pooling cell's.
"""

from __future__ import annotations

from typing import Any

from symjac._errors import InputError, SpecError
from symjac.frameworks.conform._plan import PackageMissing, numpy_dtype


def scatter_cell(out: dict[str, Any], built: tuple[Any, Any], spec: Any, impl: Any, dtype: str) -> dict[str, Any]:
    """The result of one max unpooling cell (``out``: the cell's fields so far; ``built``: the adapter and
    the configuration), never raising."""
    from symjac.frameworks.conform._transforms import missing, verify_transform

    adapter, config = built
    transform = out["transform"]
    reason = missing(impl, transform)
    if reason or transform == "vmap":
        return {**out, "status": "unsupported", "reason": reason or "symjac does not check max unpooling's "
                "batching rule (vmap)"}
    try:
        dt = numpy_dtype(dtype)
        limitation = getattr(adapter, "limitation", None)
        reason = limitation(config, dt) if callable(limitation) else None
        if reason:  # the framework has no kernel for the dtype
            return {**out, "status": "unsupported", "reason": reason}
        report = verify_transform(spec, impl, transform, dt, int(out["config"].get("seed", 0)),
                                  input_shape=tuple(config.input_shape))
    except PackageMissing as exc:
        return {**out, "status": "not_run", "reason": str(exc), "missing": exc.package}
    except (InputError, SpecError) as exc:
        return {**out, "status": "skipped", "reason": str(exc)}
    if report.unsupported and not report.findings:
        return {**out, "status": "unsupported", "reason": report.unsupported}
    families = sorted(report.stats.get("families", {}))
    if report.ok:
        return {**out, "status": "pass", "families": families}
    root = report.categories()[0]
    first = next(f for f in report.findings if f.category == root)
    return {**out, "status": "finding", "categories": report.categories(), "families": families,
            "found": [[f.category, f.family] for f in report.findings], "category": root,
            "summary": report.summary(), "family": first.family or families[0]}
