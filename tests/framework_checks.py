"""Shared checks of the framework adapter tests (not a test module itself).

``check_configurations`` runs ``symjac.verify`` on every generated configuration of an adapter
in float32 and float64, skipping only what the adapter itself declares: a known framework
defect (tested on its own, in the adapter's test file) or a dtype the framework has no kernel
for. Any finding is a false alarm of symjac or a wrong spec mapping, so the test fails on it.

``SYMJAC_FULL_GRID=1`` runs the ``"full"`` grid (hundreds of configurations) for the adapters
whose default is ``"small"`` because their per-configuration cost is high (JAX compiles every
configuration with XLA; TensorFlow/Keras eager calls are slow).
"""

from __future__ import annotations

import collections
import os
from types import ModuleType
from typing import Any

import numpy as np

import symjac

DTYPES = ("float32", "float64")
FULL = os.environ.get("SYMJAC_FULL_GRID") == "1"


def known(module: ModuleType, config: Any, transform: str = "vjp") -> Any:
    """The adapter's known defect of ``config`` under ``transform`` (for an adapter whose
    ``known_defect`` takes one), or None."""
    import inspect

    takes = "transform" in inspect.signature(module.known_defect).parameters
    return module.known_defect(config, transform) if takes else module.known_defect(config)


def explained(report: Any, defect: Any) -> bool:
    """Whether every finding of ``report`` is the known defect's, a defect of some input families
    only (:class:`symjac.frameworks.KnownDefect` ``families``: the framework's NaN handling, an
    overflow): of its categories, at its families."""
    families = getattr(defect, "families", ())
    return bool(families) and all(defect.explains(f.category, f.family) for f in report.findings)


def nan_only(report: Any) -> bool:
    """Whether every finding of ``report`` is at the non-finite inputs: a max pooling's NaN handling,
    a known defect of JAX, TensorFlow and ONNX Runtime (tests/test_nonfinite_frameworks.py)."""
    return all(f.family == "nonfinite" for f in report.findings)


def runnable(module: ModuleType, grid: str, transform: str = "vjp") -> list[tuple[Any, tuple[str, ...]]]:
    """[(config, dtypes to check)] without the adapter's known defects (under ``transform``, for an
    adapter whose ``known_defect`` takes one; a defect of some input families only keeps its
    configuration: the other families are checked) and kernel gaps."""
    out = []
    for config in module.configurations(grid):
        defect = known(module, config, transform)
        if defect and not getattr(defect, "families", ()):
            continue
        dtypes = tuple(dt for dt in DTYPES if not module.limitation(config, dt))
        if dtypes:
            out.append((config, dtypes))
    return out


def check_configurations(module: ModuleType, grid: str, transform: str = "vjp",
                         configs: list[tuple[Any, tuple[str, ...]]] | None = None) -> collections.Counter[str]:
    """Verify every runnable configuration (of ``configs``, default the grid's) under ``transform``
    (``conform --transforms``: vjp, jvp, hvp, vmap) at ``verify``'s default inputs; return how many
    were checked per dtype."""
    from symjac.frameworks.conform._transforms import verify_transform

    checked: collections.Counter[str] = collections.Counter()
    failures = []
    from symjac.frameworks.conform._transforms import missing

    for config, dtypes in runnable(module, grid, transform) if configs is None else configs:
        spec, impl = module.make(config)
        if missing(impl, transform):  # conform's cell is unsupported, with the adapter's reason
            continue
        for dtype in dtypes:
            report = verify_transform(spec, impl, transform, np.dtype(dtype), input_shape=config.input_shape)
            checked[dtype] += 1
            if not report.ok and not explained(report, known(module, config, transform)):
                failures.append(f"{config.label} {config.input_shape} {dtype} {transform}: {report.summary()}")
    assert not failures, f"{len(failures)} false alarms / wrong mappings:\n" + "\n".join(failures[:20])
    return checked


def assert_counts(checked: collections.Counter[str], grid: str, minimum: int = 300) -> None:
    """The issue's bar: at least ``minimum`` configurations per dtype on the full grid."""
    if grid == "full":
        assert min(checked[dt] for dt in DTYPES) >= minimum, checked
    else:
        assert min(checked[dt] for dt in DTYPES) >= 10, checked


def forward_matches(spec: Any, forward: Any, x: np.ndarray) -> str | None:
    """Compare a forward-only implementation with ``symjac.forward`` (exact).

    Max pooling must agree exactly (it selects an input value). Average pooling must agree
    within the rounding bound of a sum of n terms followed by one division, computed in the
    dtype: |fl(sum/d) - sum/d| <= (n * u + u) * max|x| (Higham's gamma_n for the sum, one more
    unit roundoff u for the division; |sum/d| <= max|x| because d >= n for every divisor rule
    except an explicit smaller divisor, which the generated configurations do not use).
    Returns None when it matches, else what differs.
    """
    exact = symjac.forward(spec, x.astype(np.float64))
    try:
        y = np.asarray(forward(x))
    except Exception as exc:  # noqa: BLE001 - the framework's failure is the result
        return f"raised {type(exc).__name__}: {exc}"
    if y.shape != exact.shape:
        return f"output shape {y.shape}, expected {exact.shape}"
    if y.dtype != x.dtype:
        return f"output dtype {y.dtype}, expected {x.dtype}"
    want = exact.astype(np.float64)
    err = np.abs(y.astype(np.float64) - want)
    if spec.mode == "max":
        bound = 0.0
    else:
        u = float(np.finfo(x.dtype).eps) / 2
        n = int(symjac.resolve(spec, x.shape).valid.sum(axis=1).max())
        bound = (n + 1) * u * float(np.abs(x).max())
    if err.size and err.max() > bound:
        return f"max error {err.max()} > bound {bound}"
    return None


def check_losses(adapter: ModuleType, configs: Any, dtypes: tuple[str, ...] = ("float32", "float64")) -> Any:
    """Every loss configuration of ``adapter`` (its ``make_loss``; ``known_loss_defect`` skipped when
    it has one) through ``verify_loss`` with its derivative, forward and hvp, per dtype: the counts
    checked; a failing report fails with the configurations' summaries."""
    checked: collections.Counter[str] = collections.Counter()
    failures = []
    known = getattr(adapter, "known_loss_defect", None)
    for config in configs:
        if config.op == "ctc_loss":  # a sequence loss: tests/test_ctc_frameworks.py verifies its rows
            continue
        loss, impl = adapter.make_loss(config)
        for dtype in dtypes:
            if known is not None and known(config, dtype, "hvp"):
                continue
            report = symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=impl.hvp,
                                        pred=config.pred, label=config.target, upstream=config.upstream, dtype=dtype)
            checked[dtype] += 1
            if not report.ok:
                failures.append(f"{config.label} {dtype}: {report.summary()}")
    assert not failures, f"{len(failures)} false alarms / wrong mappings:\n" + "\n".join(failures[:20])
    return checked
