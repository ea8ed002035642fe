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
from symjac._progress import Mute, note, with_progress
from symjac.pool._ops import operator_of
from symjac.frameworks.conform._plan import PackageMissing, adapter_target, builtin, check_budget, load_adapter
from symjac.frameworks.conform._plan import numpy_dtype
from symjac.frameworks.conform._plan import plan, sample_order
from symjac.frameworks.conform._loss import LOSS_TRANSFORMS, run_loss_cell
from symjac.frameworks.conform._scatter import scatter_cell
from symjac.pool._ops.unpool import MaxUnpool
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
    """Call the callables the transform's check calls, once each (``vjp``: forward and backward;
    ``jvp``: forward and jvp; ``hvp``: double_backward; ``vmap``: the batched ones): a
    NotImplementedError raised here (a dtype, VJP, forward-AD formula or batching rule the framework
    lacks, in its own word) makes the cell unsupported; anything else is left to verify, which calls a
    dtype rejected whatever the exception (every call raises it, and the op runs in another dtype)
    unsupported too. A callable the transform does not check is not called: its defect (a backward
    that kills the process) is its own cells' finding, not this one's."""
    from symjac.frameworks.conform._transforms import preflight

    try:
        if transform in ("vjp", "jvp"):
            impl.forward(x.copy())
        if transform == "vjp" and impl.backward is not None:
            impl.backward(x.copy(), dy.copy())
        preflight(impl, transform, x, dy)
    except NotImplementedError as exc:  # Unsupported, or the framework's own (torch: "not implemented for 'Half'")
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - verify reports the implementation's failures as findings
        return None
    return None


def _moded(adapter: Any, impl: Any, job: dict[str, Any]) -> tuple[Any, str]:
    """The job's mode of ``impl`` (None: the adapter gives none) and its name: the mode the transform's
    callables run in, or the mode asked for when there are none."""
    from symjac.frameworks.conform._modes import EAGER, compiled_name, in_mode, ran_in

    compiled = bool(job.get("compiled"))
    chosen = in_mode(impl, compiled)
    asked = compiled_name(adapter) if compiled else EAGER
    return chosen, asked if chosen is None else ran_in(chosen, job.get("transform", "vjp"))


def describe(job: dict[str, Any], target: str) -> dict[str, Any]:
    """The spec (as a spec-file table) and reproducer snippet of a configuration, without
    calling the op: what a reproducer of a crash needs (for a loss: its snippet and known defect)."""
    from symjac.frameworks._adapter import known_fields
    from symjac.frameworks.conform._loss import loss_config
    from symjac.frameworks.conform._modes import known_defect
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
    _, mode = _moded(adapter, impl, job)
    out = {"operator": operator_table(spec), "reproducer": getattr(impl, "reproducer", ""),
           "forward_only": impl.backward is None, "mode": mode}
    out.update(known_fields(known_defect(adapter, config, transform, mode)))
    return out


def _built(job: dict[str, Any], target: str, out: dict[str, Any]) -> tuple[Any, Any, Any, dict[str, Any] | None]:
    """(adapter, spec, the job's mode of the op's Impl) of a pool cell, and None; or a finished result."""
    from symjac.frameworks._adapter import FrameworkMissing, Unsupported, known_fields
    from symjac.frameworks.conform._modes import EAGER, known_defect
    from symjac.io._specwrite import operator_table

    try:
        adapter = load_adapter(target)
        spec, base = adapter.make(_config(job))
    except Unsupported as exc:
        return None, None, None, {**out, **_unsupported(str(exc))}
    except FrameworkMissing as exc:
        return None, None, None, {**out, "status": "error", "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the adapter's failure is a result
        return None, None, None, {**out, "status": "error", "reason": f"building the op raised {type(exc).__name__}: {exc}"}
    impl, out["mode"] = _moded(adapter, base, job)
    out.update(operator=operator_table(spec), reproducer=getattr(base, "reproducer", ""),
               forward_only=base.backward is None)
    transform = out["transform"]
    out.update(known_fields(known_defect(adapter, _config(job), transform, out["mode"])))
    if impl is None:
        return None, None, None, {**out, **_unsupported(f"the adapter gives no {out['mode']} mode for "
                                                         f"{getattr(base, 'op', 'this op')}")}
    if not job.get("compiled") and out["mode"] != EAGER and "compiled" in job.get("modes", ()):
        return None, None, None, {**out, "status": "skipped", "reason": (
            f"{getattr(base, 'op', 'the op')}'s {transform} runs in {out['mode']} whatever the mode: the "
            f"{transform}@{out['mode']} column checks it")}
    return adapter, spec, impl, None


def run_cell(job: dict[str, Any], target: str, dtype: str) -> dict[str, Any]:
    """Verify one configuration in one dtype on every input family (in this process), under the
    job's transform in its mode (``compiled``: the adapter's compiled mode).

    Returns a result dict (never raises): ``status`` one of :data:`STATUSES`, ``transform`` and
    ``mode`` (the mode its callables ran in), and for findings the root ``category``, all
    ``categories``, the ``summary`` and the ``family`` of the first failing input; ``operator``
    (the spec as a spec-file table) and ``reproducer`` for reproducer files.
    """
    from symjac.verifiers.pool._inputs import distinct_dy, generate_input
    from symjac.frameworks.conform._transforms import missing, verify_transform
    from symjac.pool._geometry import resolve

    if job.get("loss"):
        return run_loss_cell(job, target, dtype)
    transform = job.get("transform", "vjp")
    out: dict[str, Any] = {"config": job, "dtype": dtype, "transform": transform,
                           "mode": "compiled" if job.get("compiled") else "eager"}  # (the mode's name, once built)
    adapter, spec, impl, done = _built(job, target, out)
    if done is not None:
        return done
    if isinstance(spec, MaxUnpool):  # a scatter, no window geometry: its verifier runs its own families
        return scatter_cell(out, (adapter, _config(job)), spec, impl, dtype)
    config = _config(job)
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
    found: list[list[Any]] = []  # [category, family] of each finding (a family-scoped known defect reads them)
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
            found += [[f.category, f.family or family] for f in report.findings]
            if first is None:
                root = report.categories()[0]
                # the tie pass verify runs on its own (lp's all-zero windows) is the reproducer's input there
                tied = any(f.category == root and f.family == "ties" for f in report.findings)
                first = {"category": root, "summary": report.summary(), "family": "ties" if tied else family}
    if first is None:
        return {**out, "status": "pass", "families": families}
    return {**out, "status": "finding", "categories": categories, "families": families, "found": found, **first}


_WORKERS: dict[tuple[str, float | None], Any] = {}


def _stopped(job: dict[str, Any], dtype: str, category: str, summary: str, signal: str | None = None) -> dict[str, Any]:
    """The result of a cell that did not return: a ``timeout`` or ``crashed`` finding."""
    from symjac.frameworks.conform._modes import EAGER

    return {"config": job, "dtype": dtype, "transform": job.get("transform", "vjp"),
            "mode": "compiled" if job.get("compiled") else EAGER, "status": "finding", "category": category,
            "categories": [category], "signal": signal, "family": "distinct", "summary": summary}


def _where(job: dict[str, Any], dtype: str) -> str:
    transform = job.get("transform", "vjp")
    mode = "@compiled" if job.get("compiled") else ""
    return f"{job['label']} in {dtype}" + ("" if transform == "vjp" and not mode else f" ({transform}{mode})")


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
        crash = _stopped(job, dtype, "timeout", f"{_where(job, dtype)} did not return within {timeout:g} s; the "
                                                "process running it was killed")
    except Crashed as exc:
        crash = _stopped(job, dtype, "crashed", f"the process running {_where(job, dtype)} was {exc.description}",
                         exc.signal)
    except Raised as exc:
        return {"config": job, "dtype": dtype, "transform": job.get("transform", "vjp"),
                "mode": "compiled" if job.get("compiled") else "eager", "status": "error", "reason": str(exc)}
    try:  # for the reproducer, in a fresh worker: building the op does not call it
        crash.update(worker.call("describe", job, target))
    except (Crashed, Raised):
        pass
    return crash


def run_here(job: dict[str, Any], target: str, dtype: str) -> dict[str, Any]:
    """:func:`run_cell` in this process (``--no-isolate``), in a thread bounded by the job's ``timeout``: a
    cell that does not return in time is a ``timeout`` finding and the run goes on (Python cannot stop a
    thread: the hung call keeps its thread, a daemon, until it returns or the process ends)."""
    from symjac.check._invoke import invoke

    timeout = job.get("timeout")
    status, value = invoke(run_cell, (job, target, dtype), timeout)
    if status == "ok":
        result: dict[str, Any] = value
        return result
    if status == "timeout":
        return _stopped(job, dtype, "timeout", f"{_where(job, dtype)} did not return within {timeout:g} s "
                                               "(--no-isolate: its thread was left running)")
    return {"config": job, "dtype": dtype, "transform": job.get("transform", "vjp"),
            "mode": "compiled" if job.get("compiled") else "eager", "status": "error",
            "reason": f"{type(value).__name__}: {value}"}


def _unexplained(result: dict[str, Any]) -> list[str]:
    """The categories of a finding cell's findings that its documented defect does not explain: of
    another category, or found at an input family the defect is not scoped to (``known_scopes``,
    :class:`symjac.frameworks._adapter.KnownDefect`); none for the adapter's string form (any category)."""
    from symjac.frameworks._adapter import explained

    scopes = result.get("known_scopes")
    if scopes is None:
        documented = result.get("known_categories")
        if documented is None:
            return []
        scopes = [[documented, []]]
    found = result.get("found") or [[c, None] for c in result.get("categories") or [result["category"]]]
    out: list[str] = []
    for category, family in found:
        if not explained(scopes, category, family) and category not in out:
            out.append(category)
    return out


def run_job(config: dict[str, Any], impl_target: str, dtype: str) -> dict[str, Any]:
    """The sweep executor's runner (its signature; ``config`` is the job, ``dtype`` unused:
    each job carries its own). The conformance status goes in ``conform_status``, while
    ``status`` speaks the executor's vocabulary (``"fail"`` for a finding)."""
    job = config
    started = time.monotonic()
    result = run_isolated(job, impl_target, job["dtype"]) if job.get("isolate", True) else \
        run_here(job, impl_target, job["dtype"])
    result["seconds"] = round(time.monotonic() - started, 4)
    if result.get("known_defect"):  # a documented defect: reproduced (not a new finding), or not seen
        if result["status"] == "finding":
            unexplained = _unexplained(result)
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


@with_progress("conform")
def conform(framework: str, *, grid: str = "small", budget: float | None = None,
            dtypes: Sequence[str] = DTYPES, families: Sequence[str] = FAMILIES, isolate: bool = True,
            jobs: int = 1, scheduler: str | None = None, timeout: float | None = 120.0,
            progress: Any = None, known_defects: bool = True, ops: Sequence[str] | None = None,
            transforms: Sequence[str] = ("vjp",), modes: Sequence[str] | None = None) -> Conformance:
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
      timeout: seconds one configuration may take before it is a ``timeout`` finding (None: no
        limit; isolated, its process is killed; with ``isolate=False`` its thread is left running and
        the run goes on); a user adapter's ``configurations()`` runs isolated too, within
        the smaller of ``timeout`` and ``budget`` (plus :data:`WORKER_START` for its worker's start).
      progress: as :func:`symjac.verify`'s, a step each cell (``"12/40 cells, 1 failed"``).
      ops: only the configurations of these ops: the adapter's op names (``"max_pool3d"``,
        ``"cross_entropy"``) or the groups ``"pools"`` and ``"losses"`` (default: all; the loss
        rows come from the adapter's ``loss_configurations(grid)``, see
        :mod:`symjac.frameworks.conform._loss`).
      transforms: the derivatives to check, one column each (per dtype): ``"vjp"`` (reverse mode,
        the default), ``"jvp"`` (forward mode), ``"hvp"`` (double backward), ``"vmap"`` (the batched
        forward, VJP and JVP); see :mod:`symjac.frameworks.conform._transforms`. A loss has ``vjp`` (its
        derivative) and ``hvp`` (its Hessian-vector product) cells only.
      modes: ``"eager"`` and/or ``"compiled"``, the adapter's compiled mode (``tf.function``,
        ``jax.jit``, ``torch.compile``): each transform is checked in each, a column each
        (``jvp@tf.function``); see :mod:`symjac.frameworks.conform._modes`. Default: both where the
        built-in adapter checks its compiled mode by default (tensorflow, jax), else eager. Loss
        cells run eagerly only.
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
    from symjac.frameworks.conform._modes import check_modes, compiled_name, default_modes
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
    adapter = load_adapter(target) if builtin(target) else None  # a user adapter loads in its worker only
    chosen_modes = check_modes(modes) if modes is not None else default_modes(adapter) if adapter else ("eager",)
    name = compiled_name(adapter)
    started = time.monotonic()
    # the listing may take the time a configuration may, and no more than the budget (plus the
    # worker's start); its time counts against the budget
    limit = min((t for t in (timeout, None if budget is None else budget + WORKER_START) if t is not None),
                default=None)
    configs = plan(target, grid, known_defects=known_defects, isolate=isolate, timeout=limit,
                   losses=any(t in LOSS_TRANSFORMS for t in chosen))
    if ops is not None:
        configs = _select(configs, ops, f"the {grid} grid of {framework}")
    common = {"families": list(families), "isolate": isolate, "timeout": timeout, "modes": list(chosen_modes)}
    jobs_list = _cells(configs, dtypes, chosen, chosen_modes, common)
    order = sample_order(len(jobs_list), budget)
    raw_in_order = execute([jobs_list[i] for i in order], target, jobs=jobs, scheduler=scheduler, runner=run_job,
                           unit="cells", deadline=budget and started + budget, note=note, mute=Mute)
    raw: list[dict[str, Any]] = [{}] * len(jobs_list)
    for i, r in zip(order, raw_in_order):
        raw[i] = r
    results = [{"config": job, "dtype": job["dtype"], "transform": job.get("transform", "vjp"),
                "mode": name if job.get("compiled") else "eager", "status": "not_run"}
               if "conform_status" not in r  # not started (the budget was spent)
               else {**{k: v for k, v in r.items() if k != "conform_status"}, "status": r["conform_status"]}
               for job, r in zip(jobs_list, raw)]
    return Conformance(framework, grid, tuple(dtypes), results, time.monotonic() - started, chosen, chosen_modes,
                       _compiled_name(name, results))


def _cells(configs: list[dict[str, Any]], dtypes: Sequence[str], transforms: Sequence[str], modes: Sequence[str],
           common: dict[str, Any]) -> list[dict[str, Any]]:
    """One job per configuration, dtype, transform and mode (a loss: its transforms, eagerly)."""
    return [{**c, "dtype": d, **common, **({} if t == "vjp" else {"transform": t}),
             **({"compiled": True} if m == "compiled" else {})}
            for c in configs for d in dtypes for t in transforms for m in modes
            if t in LOSS_TRANSFORMS and m == "eager" or not c.get("loss")]


def _compiled_name(name: str, results: list[dict[str, Any]]) -> str:
    """The compiled mode's name: the adapter's, or (a user adapter's, read in its worker) the cells'."""
    ran = [r.get("mode") for r in results if r["config"].get("compiled") and r.get("mode") not in (None, "compiled")]
    return name if name != "compiled" or not ran else str(ran[0])
