"""Conformance runs: a framework's pooling ops over a convention matrix, each cell verified.

``conform("torch")`` takes every configuration of the adapter's
``configurations(grid)`` (1/2/3-D; max/avg/adaptive/global; kernel, stride, padding,
ceil, divisor, dilation, layout) times the float dtypes, verifies each against the
spec the framework documents, on symjac's input families, and returns a
:class:`Conformance`: the table op × convention × dtype of ``pass``, the root finding
category, or ``unsupported`` (the framework has no such op/convention/dtype, or no
VJP: not a finding). An adapter with ``loss_configurations(grid)`` and ``make_loss`` (torch,
jax, tensorflow) adds its losses' rows (:mod:`symjac.frameworks.conform._loss`); a cell of a
defect the adapter documents is ``known_defect`` (reproduced, not a finding) or a pass that
says it did not reproduce (:mod:`symjac.frameworks.conform._result`).

Isolation (default on): each configuration runs in a worker process
(:mod:`symjac.run._isolate`, a fresh interpreter, whatever this process ran before),
which also builds the framework op; an abort, segfault or SIGFPE becomes a
``crashed`` finding naming the signal and the run goes on with a fresh worker.

Scheduling is ``symjac sweep``'s executor (:mod:`symjac.run._executor`): in process (sequential), local worker
processes (``jobs``) or a Dask cluster (``scheduler``); a ``budget`` in seconds stops
starting new configurations once spent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError, SpecError
from symjac.pool._ops import operator_of
from symjac.frameworks.conform._plan import PackageMissing, adapter_target, check_budget, load_adapter, numpy_dtype
from symjac.frameworks.conform._plan import plan, sample_order
from symjac.frameworks.conform._loss import LOSS_TRANSFORMS, run_loss_cell
from symjac.frameworks.conform.reproducers._write import TIE_CATEGORIES as TIE_CATEGORIES
from symjac.frameworks.conform._result import MISSING_TEXT as MISSING_TEXT, STATUSES as STATUSES, Conformance
from symjac.run._executor import execute
from symjac.run._isolate import Crashed, Raised, TimedOut, Worker

DTYPES = ("float16", "bfloat16", "float32", "float64")
FAMILIES = ("distinct", "ties", "random")
#: The most worker processes a run starts (``jobs``).
MAX_JOBS = 64
#: Seconds a budget grants a user adapter's configurations() beyond itself: its worker's start.
WORKER_START = 10.0
#: The op groups ``ops`` takes besides op names.
GROUPS = ("pools", "losses")


# ----------------------------------------------------------------------------- one cell


def _config(job: dict[str, Any]) -> Any:
    from symjac.frameworks._adapter import Config

    return Config(job["op"], job["kwargs"], tuple(job["input_shape"]), job["label"])


def _unsupported(reason: str) -> dict[str, Any]:
    return {"status": "unsupported", "reason": reason}


def _preflight(impl: Any, x: np.ndarray, dy: np.ndarray, transform: str = "vjp") -> str | None:
    """Call forward and backward once (and the transform's callables): a NotImplementedError raised
    here (a dtype, VJP, forward-AD formula or batching rule the framework lacks, in its own word)
    makes the cell unsupported; anything else is left to verify, which calls a dtype rejected
    whatever the exception (every call raises it, and the op runs in another dtype) unsupported too."""
    from symjac.frameworks.conform._transforms import preflight

    try:
        impl.forward(x.copy())
        if impl.backward is not None:
            impl.backward(x.copy(), dy.copy())
        preflight(impl, transform, x, dy)
    except NotImplementedError as exc:  # Unsupported, or the framework's own (torch: "not implemented for 'Half'")
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - verify reports the implementation's failures as findings
        return None
    return None


def describe(job: dict[str, Any], target: str) -> dict[str, Any]:
    """The spec (as a spec-file table) and reproducer snippet of a configuration, without
    calling the op: what a reproducer of a crash needs (for a loss: its snippet and known defect)."""
    from symjac.frameworks._adapter import known_fields
    from symjac.frameworks.conform._loss import loss_config
    from symjac.frameworks.conform._transforms import known_defect
    from symjac.io._specwrite import operator_table

    adapter = load_adapter(target)
    transform = job.get("transform", "vjp")
    if job.get("loss"):
        config = loss_config(target, job)
        loss, impl = adapter.make_loss(config)
        known = getattr(adapter, "known_loss_defect", None)
        defect = known(config, numpy_dtype(job["dtype"]), LOSS_TRANSFORMS[transform]) if callable(known) else None
        return {"loss": repr(loss), "reproducer": getattr(impl, "reproducer", ""), **known_fields(defect)}
    config = _config(job)
    spec, impl = adapter.make(config)
    out = {"operator": operator_table(spec), "reproducer": getattr(impl, "reproducer", ""),
           "forward_only": impl.backward is None}
    out.update(known_fields(known_defect(adapter, config, transform)))
    return out


def run_cell(job: dict[str, Any], target: str, dtype: str) -> dict[str, Any]:
    """Verify one configuration in one dtype on every input family (in this process).

    Returns a result dict (never raises): ``status`` one of :data:`STATUSES`, and for
    findings the root ``category``, all ``categories``, the ``summary`` and the
    ``family`` of the first failing input; ``operator`` (the spec as a spec-file table)
    and ``reproducer`` for reproducer files.
    """
    from symjac.verifiers.pool._inputs import distinct_dy, generate_input
    from symjac.frameworks._adapter import FrameworkMissing, Unsupported, known_fields
    from symjac.io._specwrite import operator_table
    from symjac.frameworks.conform._transforms import known_defect, missing, verify_transform
    from symjac.pool._geometry import resolve

    if job.get("loss"):
        return run_loss_cell(job, target, dtype)
    transform = job.get("transform", "vjp")
    out: dict[str, Any] = {"config": job, "dtype": dtype, "transform": transform}
    config = _config(job)
    try:
        adapter = load_adapter(target)
        spec, impl = adapter.make(config)
    except Unsupported as exc:
        return {**out, **_unsupported(str(exc))}
    except FrameworkMissing as exc:
        return {**out, "status": "error", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the adapter's failure is a result
        return {**out, "status": "error", "reason": f"building the op raised {type(exc).__name__}: {exc}"}
    out.update(operator=operator_table(spec), reproducer=getattr(impl, "reproducer", ""),
               forward_only=impl.backward is None)
    out.update(known_fields(known_defect(adapter, config, transform)))
    try:
        dt = numpy_dtype(dtype)
        g = resolve(spec, tuple(job["input_shape"]))
    except PackageMissing as exc:  # symjac's environment, not the framework: not run, and the table says why
        return {**out, "status": "not_run", "reason": str(exc), "missing": exc.package}
    except InputError as exc:
        return {**out, **_unsupported(str(exc))}
    except SpecError as exc:
        return {**out, "status": "skipped", "reason": str(exc)}
    limitation = getattr(adapter, "limitation", None)
    reason = limitation(config, dt) if callable(limitation) else None
    if reason:  # the adapter knows the framework cannot run this (no kernel for the dtype, a rejected case)
        return {**out, **_unsupported(reason)}
    reason = missing(impl, transform)
    if reason:
        return {**out, **_unsupported(reason)}
    seed = int(job.get("seed", 0))
    families = [f for f in job.get("families", FAMILIES) if f != "ties" or operator_of(spec).ties]
    def family_input(family: str) -> np.ndarray:
        # the operator's domain, as verify's own default x (lp with odd p: every power sum > 0)
        x = generate_input(g, family, dt, seed)
        return x if family == "ties" else g.operator.default_input(g, x)

    try:
        x0 = family_input(families[0])
        reason = _preflight(impl, x0, distinct_dy(g, dt, seed), transform)
    except InputError as exc:
        return {**out, **_unsupported(str(exc))}
    if reason is not None:
        return {**out, **_unsupported(reason)}
    categories: list[str] = []
    first: dict[str, Any] | None = None
    for family in families:
        x = family_input(family)
        try:
            report = verify_transform(spec, impl, transform, dt, seed, x=x)
        except InputError as exc:  # verify does not take this dtype
            return {**out, **_unsupported(f"symjac verify: {exc}")}
        if report.unsupported and not report.findings:  # the op rejects the dtype: a limitation, not a finding
            return {**out, **_unsupported(report.unsupported)}
        if not report.ok:
            categories += [c for c in report.categories() if c not in categories]
            if first is None:
                root = report.categories()[0]
                # the tie pass verify runs on its own (lp's all-zero windows) is the reproducer's input there
                tied = any(f.category == root and f.family == "ties" for f in report.findings)
                first = {"category": root, "summary": report.summary(), "family": "ties" if tied else family}
    if first is None:
        return {**out, "status": "pass", "families": families}
    return {**out, "status": "finding", "categories": categories, "families": families, **first}


_WORKERS: dict[tuple[str, float | None], Any] = {}


def run_isolated(job: dict[str, Any], target: str, dtype: str) -> dict[str, Any]:
    """:func:`run_cell` in a worker process; a crash of the worker is a ``crashed`` finding."""
    timeout = job.get("timeout")
    key = (target, timeout)
    if key not in _WORKERS:
        # a fresh interpreter, not a fork: the parent may have run the framework already (a
        # fork of a process whose TensorFlow/JAX threads have started can hang)
        _WORKERS[key] = Worker({"cell": run_cell, "describe": describe}, timeout=timeout, method="exec")
    worker = _WORKERS[key]
    try:
        result: dict[str, Any] = worker.call("cell", job, target, dtype)
        return result
    except TimedOut:  # a hang is a timeout finding, as for verify --timeout
        crash = {"config": job, "dtype": dtype, "status": "finding", "category": "timeout", "categories": ["timeout"],
                 "signal": None, "family": "distinct",
                 "summary": f"{job['label']} in {dtype} did not return within {timeout:g} s; the process running "
                            "it was killed"}
    except Crashed as exc:
        crash = {"config": job, "dtype": dtype, "status": "finding", "category": "crashed", "categories": ["crashed"],
                 "signal": exc.signal, "family": "distinct",
                 "summary": f"the process running {job['label']} in {dtype} was {exc.description}"}
    except Raised as exc:
        return {"config": job, "dtype": dtype, "status": "error", "reason": str(exc)}
    try:  # for the reproducer, in a fresh worker: building the op does not call it
        crash.update(worker.call("describe", job, target))
    except (Crashed, Raised):
        pass
    return crash


def run_job(config: dict[str, Any], impl_target: str, dtype: str) -> dict[str, Any]:
    """The sweep executor's runner (its signature; ``config`` is the job, ``dtype`` unused:
    each job carries its own). The conformance status goes in ``conform_status``, while
    ``status`` speaks the executor's vocabulary (``"fail"`` for a finding)."""
    job = config
    started = time.monotonic()
    result = run_isolated(job, impl_target, job["dtype"]) if job.get("isolate", True) else \
        run_cell(job, impl_target, job["dtype"])
    result["seconds"] = round(time.monotonic() - started, 4)
    if result.get("known_defect"):  # a documented defect: reproduced (not a new finding), or not seen
        if result["status"] == "finding":
            documented = result.get("known_categories")  # absent: the adapter's string form, any category
            unexplained = [c for c in result.get("categories") or [result["category"]]
                           if documented is not None and c not in documented]
            if unexplained:  # a finding of another kind in the same configuration: a failure
                result["known_unexplained"] = unexplained
            else:
                result["status"] = "known_defect"
        elif result["status"] == "pass":
            result["known_defect_fixed"] = True
    return {**result, "conform_status": result["status"],
            "status": "fail" if result["status"] == "finding" else result["status"]}


# ----------------------------------------------------------------------------- the run


def _select(configs: list[dict[str, Any]], ops: Sequence[str], where: str) -> list[dict[str, Any]]:
    """The configurations of ``ops``: op names, or the groups ``"pools"`` and ``"losses"``."""
    names = {c["op"] for c in configs}
    unknown = set(ops) - names - set(GROUPS)
    if unknown:
        raise InputError(f"ops {sorted(unknown)} are not in {where}; give its ops ({', '.join(sorted(names))}) "
                         f"or the groups {', '.join(GROUPS)}")
    group = {"pools": False, "losses": True}
    return [c for c in configs if c["op"] in ops or any(bool(c.get("loss")) == group[g] for g in ops if g in group)]


def conform(framework: str, *, grid: str = "small", budget: float | None = None,
            dtypes: Sequence[str] = DTYPES, families: Sequence[str] = FAMILIES, isolate: bool = True,
            jobs: int = 1, scheduler: str | None = None, timeout: float | None = 120.0,
            progress: bool = False, known_defects: bool = True, ops: Sequence[str] | None = None,
            transforms: Sequence[str] = ("vjp",)) -> Conformance:
    """Run a framework's convention matrix and verify every cell.

    Args:
      framework: ``"torch"``, ``"jax"``, ``"tensorflow"``, ``"onnxruntime"``, or a user
        adapter ``MODULE_OR_PATH:ATTR`` (an object with ``configurations(grid)`` and
        ``make(config) -> (spec, impl)``, see ``docs/frameworks.md``; its configurations may leave
        ``input_shape`` None for the coverage plan's shapes).
      grid: ``"small"`` (a few dozen configurations) or ``"full"`` (hundreds).
      budget: seconds; stop starting configurations once spent (the rest are ``not_run``); with a
        budget the cells start in a seeded random order, so those run are spread over the grid.
      dtypes: columns of the table, from float16, bfloat16, float32, float64.
      families: input families (``"distinct"``, ``"ties"``: max pooling only, ``"random"``).
      isolate: run each configuration in a worker process (a crash is a ``crashed`` finding).
      jobs: local worker processes (1 to :data:`MAX_JOBS`); ``scheduler``: a Dask scheduler address.
      timeout: seconds one configuration may take in isolation before it is a ``timeout``
        finding (None: no limit); a user adapter's ``configurations()`` runs isolated too, within
        the smaller of ``timeout`` and ``budget`` (plus :data:`WORKER_START` for its worker's start).
      progress: a progress bar on stderr.
      ops: only the configurations of these ops: the adapter's op names (``"max_pool3d"``,
        ``"cross_entropy"``) or the groups ``"pools"`` and ``"losses"`` (default: all; the loss
        rows come from the adapter's ``loss_configurations(grid)``, see
        :mod:`symjac.frameworks.conform._loss`).
      transforms: the derivatives to check, one column each (per dtype): ``"vjp"`` (reverse mode,
        the default), ``"jvp"`` (forward mode), ``"hvp"`` (double backward), ``"vmap"`` (the batched
        forward, VJP and JVP); see :mod:`symjac.frameworks.conform._transforms`. A loss has ``vjp`` (its
        derivative) and ``hvp`` (its Hessian-vector product) cells only.
      known_defects: also run the configurations an adapter leaves out of its default grid
        because they hit a defect it documents (ONNX Runtime SAME with dilations). A cell whose
        configuration has a documented defect (the adapter's ``known_defect(config, transform)``,
        ``known_loss_defect(config, dtype, transform)``) carries it as ``known_defect``; its status
        is ``"known_defect"`` where it fails with findings of the categories the defect documents
        (a :class:`~symjac.frameworks.KnownDefect`; a plain string: any category), not a finding:
        ``.ok`` holds, ``.known`` lists it; a finding of another category stays a ``"finding"``
        (with ``known_unexplained``); ``"pass"`` with ``known_defect_fixed`` where it does not fail.

    Returns:
      A :class:`Conformance` (``.ok``, ``.table()``, ``.to_json()``, ``.write_reproducers(dir)``).

    Raises:
      InputError: an unknown framework, grid, dtype or family; a bad budget, jobs or timeout; a
        user adapter whose ``configurations()`` raised, crashed, hung or gave no configurations;
        :class:`symjac.frameworks.FrameworkMissing` when the framework is not installed.
    """
    from symjac.verifiers.pool._inputs import GENERATORS
    from symjac.frameworks.conform._transforms import check_transforms

    for d in dtypes:
        if d not in DTYPES:
            raise InputError(f"dtype {d!r} is not valid: give a subset of {', '.join(DTYPES)}")
    for f in families:
        if f not in GENERATORS:
            raise InputError(f"input family {f!r} is not valid: give a subset of {', '.join(GENERATORS)}")
    if not dtypes or not families:
        raise InputError("give at least one dtype and one input family")
    check_budget(budget)
    chosen = check_transforms(transforms)
    if not 1 <= jobs <= MAX_JOBS:
        raise InputError(f"jobs={jobs!r} is not valid: give 1 to {MAX_JOBS} worker processes")
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise InputError(f"timeout={timeout!r} is not valid: give seconds > 0, or None for no limit")
    target = adapter_target(framework)
    started = time.monotonic()
    # the listing may take the time a configuration may, and no more than the budget (plus the
    # worker's start); its time counts against the budget
    limit = min((t for t in (timeout, None if budget is None else budget + WORKER_START) if t is not None),
                default=None)
    configs = plan(target, grid, known_defects=known_defects, isolate=isolate, timeout=limit,
                   losses=any(t in LOSS_TRANSFORMS for t in chosen))
    if ops is not None:
        configs = _select(configs, ops, f"the {grid} grid of {framework}")
    jobs_list = [{**c, "dtype": d, "families": list(families), "isolate": isolate, "timeout": timeout,
                  **({} if t == "vjp" else {"transform": t})} for c in configs for d in dtypes for t in chosen
                 if t in LOSS_TRANSFORMS or not c.get("loss")]
    order = sample_order(len(jobs_list), budget)
    raw_in_order = execute([jobs_list[i] for i in order], target, jobs=jobs, scheduler=scheduler, progress=progress,
                           runner=run_job, deadline=None if budget is None else started + budget)
    raw: list[dict[str, Any]] = [{}] * len(jobs_list)
    for i, r in zip(order, raw_in_order):
        raw[i] = r
    results = []
    for job, r in zip(jobs_list, raw):
        if "conform_status" not in r:  # not started (the budget was spent)
            results.append({"config": job, "dtype": job["dtype"], "status": "not_run"})
        else:
            results.append({**{k: v for k, v in r.items() if k != "conform_status"}, "status": r["conform_status"]})
    return Conformance(framework, grid, tuple(dtypes), results, time.monotonic() - started, chosen)
