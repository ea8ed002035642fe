"""The loss cells of a conformance run: an adapter's ``loss_configurations(grid)``, each verified.

An adapter that has ``loss_configurations(grid)`` (an iterable of
:class:`symjac.frameworks._loss_grid.LossConfig`) and ``make_loss(config) -> (Loss, LossImpl)``
(the built-in torch, jax and tensorflow adapters; a user adapter may add them) gets one loss
row per configuration in ``conform``'s table. A loss cell checks one derivative of the
framework's loss through :func:`symjac.verify_loss`:

========  =====================================================================================
``vjp``   ``derivative`` and ``forward`` (the gradient ``S·dL/dpred``; the VJP with an upstream
          for ``reduction="none"``)
``hvp``   ``hvp``: the Hessian-vector product of the framework's second-order autodiff against
          the exact Hessian (:func:`symjac.loss_hessian`)
========  =====================================================================================

A forward-only runtime's loss (a :class:`symjac.LossImpl` with ``derivative`` and ``hvp`` None: ONNX
Runtime) has its ``vjp`` cell check the forward alone, as its pools' cells do (``forward_only`` in
the result; :mod:`symjac.verifiers.loss._forward_only`), and no ``hvp`` cell (unsupported).

``jvp`` and ``vmap`` have no loss cells: a loss is a reduction to one number (or one per
element), so its forward mode is the same gradient read the other way and the batching rules
checked are the pools'; the table shows ``n/a`` there.

A loss configuration carries its arrays (pred, label, upstream): a job names it by its index
in the adapter's (seeded, deterministic) grid, and the worker draws the grid again.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

#: The transforms a loss cell checks, and the word an adapter's ``known_loss_defect`` takes for each.
LOSS_TRANSFORMS = {"vjp": "derivative", "hvp": "hvp"}
#: The table's text of a transform a loss has no cell for.
NOT_APPLICABLE = "n/a"


@functools.lru_cache(maxsize=8)
def _grid(target: str, grid: str) -> tuple[Any, ...]:
    from symjac.frameworks.conform._plan import load_adapter

    return tuple(load_adapter(target).loss_configurations(grid))


def loss_config(target: str, job: dict[str, Any]) -> Any:
    """The job's configuration, drawn again (the same op and label, or an error: a grid that is not deterministic)."""
    configs = _grid(target, job["grid"])
    config = configs[job["index"]] if job["index"] < len(configs) else None
    if config is None or config.op != job["op"]:
        raise RuntimeError(f"loss_configurations({job['grid']!r}) gave another configuration at {job['index']} "
                           "the second time (it must be deterministic)")
    return config


def _unsupported(out: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**out, "status": "unsupported", "reason": reason}


def run_loss_cell(job: dict[str, Any], target: str, dtype: str) -> dict[str, Any]:
    """Verify one loss configuration in one dtype under the job's transform (in this process); a
    result dict as :func:`symjac.frameworks.conform._run.run_cell`'s (never raises)."""
    from symjac._errors import InputError, SymjacError
    from symjac.frameworks._adapter import FrameworkMissing, Unsupported, known_fields
    from symjac.frameworks.conform._plan import PackageMissing, load_adapter, numpy_dtype
    from symjac.loss._spec import kind_of
    from symjac.verifiers.loss._verify import verify_loss

    transform = job.get("transform", "vjp")
    out: dict[str, Any] = {"config": job, "dtype": dtype, "transform": transform, "mode": "eager"}
    try:
        adapter = load_adapter(target)
        config = loss_config(target, job)
        loss, impl = adapter.make_loss(config)
    except Unsupported as exc:
        return _unsupported(out, str(exc))
    except FrameworkMissing as exc:
        return {**out, "status": "error", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the adapter's failure is a result
        return {**out, "status": "error", "reason": f"building the loss raised {type(exc).__name__}: {exc}"}
    out.update(loss=repr(loss), reproducer=getattr(impl, "reproducer", ""))
    try:
        dt = numpy_dtype(dtype)
    except PackageMissing as exc:
        return {**out, "status": "not_run", "reason": str(exc), "missing": exc.package}
    known = getattr(adapter, "known_loss_defect", None)
    out.update(known_fields(known(config, dt, LOSS_TRANSFORMS[transform]) if callable(known) else None))
    forward_only = impl.derivative is None and impl.hvp is None  # a runtime without autodiff (ONNX Runtime)
    out["forward_only"] = forward_only
    fn = impl.hvp if transform == "hvp" else impl.forward if forward_only else impl.derivative
    if fn is None:
        return _unsupported(out, f"the adapter gives no {transform} for {job['op']}"
                            + (" (a forward-only runtime)" if forward_only else f" ({transform} transform)"))
    pred = np.asarray(config.pred).astype(dt)
    whole = kind_of(loss).whole  # a sequence loss (ctc): the label is its parts, passed one by one
    try:  # the framework's own word that it lacks the dtype (or the transform)
        labels = tuple(config.target) if whole else (config.target,)
        args = (pred, *labels) + ((pred.copy(),) if transform == "hvp" else ())
        fn(*args, *(() if config.upstream is None or forward_only else (np.asarray(config.upstream).astype(dt),)))
    except NotImplementedError as exc:
        return _unsupported(out, f"{type(exc).__name__}: {exc}")
    except Exception:  # noqa: BLE001 - verify_loss reports it as a finding
        pass
    calls = {"hvp": impl.hvp} if transform == "hvp" else {"derivative": impl.derivative, "forward": impl.forward}
    # forward only: verify_loss checks the forward's values and reports the derivative not checked
    try:
        report = verify_loss(loss, pred=config.pred, label=config.target, upstream=config.upstream, dtype=dt, **calls)
    except InputError as exc:  # verify_loss does not take this dtype, or these inputs
        return _unsupported(out, f"symjac verify_loss: {exc}")
    except SymjacError as exc:  # symjac has no exact answer here (a second derivative at a kink)
        return {**out, "status": "skipped", "reason": str(exc)}
    if report.ok:
        return {**out, "status": "pass", "families": ["given"]}
    if report.unsupported and not report.findings:  # the op rejects the dtype: a limitation, not a finding
        return _unsupported(out, report.unsupported)
    categories = report.categories()
    return {**out, "status": "finding", "category": categories[0], "categories": categories,
            "summary": report.summary(), "family": "given", "families": ["given"],
            "found": [[f.category, f.family or "given"] for f in report.findings],
            "inputs": _inputs(loss, config, dt)}


def _inputs(loss: Any, config: Any, dt: np.dtype[Any]) -> dict[str, Any]:
    """What a failing cell's reproducer needs: the inputs in ``dt`` (the label as given), v (verify_loss's
    default direction), the loss scale and the exact derivative, H·v (float64; None where symjac has none) and
    loss (unscaled; per element for ``"none"``)."""
    from symjac.loss._evaluate import loss_derivative, loss_value
    from symjac.loss._hessian import loss_hvp
    from symjac.verifiers.loss._hvp import default_direction

    def exact(f: Any) -> Any:
        try:
            return np.array([float(e) for e in np.asarray(f()).reshape(-1)]).reshape(pred.shape).tolist()
        except Exception:  # noqa: BLE001 - no exact value here (a kink): the script says so
            return None

    pred = np.asarray(config.pred).astype(dt)
    if isinstance(config.target, tuple):  # a sequence loss's parts (ctc: targets, input_lengths, target_lengths)
        label: Any = tuple(np.asarray(part) for part in config.target)
        listed: Any = [part.tolist() for part in label]
    else:
        label = None if config.target is None else np.asarray(config.target)
        if label is not None and label.dtype.kind == "f":
            label = label.astype(dt)
        listed = None if label is None else label.tolist()
    upstream = None if config.upstream is None else np.asarray(config.upstream).astype(dt)
    v = default_direction(pred.shape, dt)
    return {"pred": pred.astype(np.float64).tolist(), "label": listed, "label_parts": isinstance(label, tuple),
            "label_dtype": None if label is None else "int64" if isinstance(label, tuple) else str(label.dtype),
            "upstream": None if upstream is None else upstream.astype(np.float64).tolist(),
            "v": v.astype(np.float64).tolist(), "scale": float(loss.scale),
            "derivative": exact(lambda: loss_derivative(loss, pred, label, upstream)),
            "hvp": exact(lambda: loss_hvp(loss, pred, label, v, upstream)),
            "loss": np.asarray(loss_value(loss, pred, label), dtype=np.float64).tolist()}
