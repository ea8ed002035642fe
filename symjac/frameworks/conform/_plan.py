"""The grid of a ``conform`` run: which adapter, its configurations, in which order.

:func:`load_adapter` finds a built-in adapter module or a user's ``MODULE_OR_PATH:ATTR``;
:func:`plan` lists the adapter's ``configurations(grid)`` as jobs. A user adapter's
``configurations()`` is code under test like its ``make()``: with isolation on it runs in a
worker process (:class:`symjac.run._isolate.Worker`) bounded by the run's timeout and budget,
so raising, returning None, an abort, a hang, an endless generator or ``SystemExit`` is one
:class:`symjac.InputError` line. An adapter's ``loss_configurations(grid)`` (with ``make_loss``) is
listed after its pools (:func:`loss_jobs`; run by :mod:`symjac.frameworks.conform._loss`). Configurations without an input shape get the coverage
plan's (:func:`symjac.cover`); an equal configuration given twice runs once, and two that
share a label get their differing arguments added to it. :func:`sample_order` is the
seeded order a ``budget`` runs the grid in, so a budget's cut falls across the whole grid.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from symjac._errors import InputError, SymjacError, UsageError
from symjac.run._isolate import Crashed, Raised, TimedOut, Worker
from symjac.run._load import load_impl

#: More configurations than this from one ``configurations()`` call is an error (an endless generator).
MAX_CONFIGURATIONS = 100_000
#: The seed of a budget's sampling order.
SAMPLE_SEED = 0


def adapter_target(framework: str) -> str:
    """``"torch"`` -> ``"symjac.frameworks.torch"``; ``path:attr`` stays as it is."""
    from symjac.frameworks import FRAMEWORKS

    if framework in FRAMEWORKS:
        return f"symjac.frameworks.{framework}"
    if ":" in framework or framework.endswith(".py"):
        return framework
    raise InputError(f"framework={framework!r} is not valid: give one of {', '.join(FRAMEWORKS)}, "
                     "or a user adapter MODULE_OR_PATH:ATTR with configurations(grid) and make(config)")


def builtin(target: str) -> bool:
    """One of symjac's own adapter modules (their configurations are symjac's code, not under test)."""
    return target.startswith("symjac.frameworks.") and ":" not in target


_ADAPTERS: dict[str, Any] = {}


def load_adapter(target: str) -> Any:
    """The adapter (module or object) with ``configurations(grid)`` and ``make(config)``."""
    if target not in _ADAPTERS:
        if builtin(target):
            adapter = importlib.import_module(target)
        else:
            try:
                adapter = load_impl(target)
            except UsageError as exc:
                raise InputError(str(exc)) from None
        for name in ("configurations", "make"):
            if not callable(getattr(adapter, name, None)):
                raise InputError(f"adapter {target!r} has no callable {name!r}: an adapter provides "
                                 "configurations(grid) -> iterable of Config and make(config) -> (spec, impl)")
        _ADAPTERS[target] = adapter
    return _ADAPTERS[target]


def _call(adapter: Any, grid: str, known_defects: bool) -> Any:
    """The adapter's configurations; with ``known_defects``, those it leaves out by default
    because they run into a known defect of the framework too (``include_known_defects``)."""
    try:
        takes = "include_known_defects" in inspect.signature(adapter.configurations).parameters
    except (TypeError, ValueError):
        takes = False
    return adapter.configurations(grid, include_known_defects=known_defects) if takes else adapter.configurations(grid)


def _job(config: Any, where: str, i: int) -> dict[str, Any]:
    """A configuration (a :class:`symjac.frameworks.Config` or alike) as a job dict."""
    try:
        op, kwargs = config.op, config.kwargs
        shape, label = getattr(config, "input_shape", None) or None, getattr(config, "label", "")
    except AttributeError as exc:
        raise InputError(f"{where}: item {i} is a {type(config).__name__}, not a Config(op, kwargs, input_shape, "
                         f"label) ({exc})") from None
    if not isinstance(op, str) or not isinstance(kwargs, Mapping):
        raise InputError(f"{where}: item {i}: give op as a str and kwargs as a dict, got {op!r}, {kwargs!r}")
    if shape is not None and (isinstance(shape, (str, bytes)) or
                              not all(isinstance(n, (int, np.integer)) and n > 0 for n in shape)):
        raise InputError(f"{where}: item {i}: input_shape={shape!r} is not valid; give positive ints, "
                         "or None for the coverage plan's shapes")
    text = label if isinstance(label, str) and label else f"{op} " + " ".join(f"{k}={v}" for k, v in kwargs.items())
    return {"op": op, "kwargs": dict(kwargs), "input_shape": None if shape is None else [int(n) for n in shape],
            "label": text.strip()}


def has_losses(adapter: Any) -> bool:
    return callable(getattr(adapter, "loss_configurations", None)) and callable(getattr(adapter, "make_loss", None))


def loss_jobs(adapter: Any, grid: str, where: str) -> list[dict[str, Any]]:
    """The adapter's loss configurations as jobs (``loss: True``, ``op``, ``kwargs``, ``label``,
    ``input_shape`` the prediction's, ``grid`` and ``index``); none without ``loss_configurations``.

    Raises:
      InputError: a configuration without ``op``, ``kwargs`` or ``pred``.
    """
    if not has_losses(adapter):
        return []
    jobs = []
    for i, config in enumerate(adapter.loss_configurations(grid)):
        if i == MAX_CONFIGURATIONS:
            raise InputError(f"{where}: loss_configurations gave more than {MAX_CONFIGURATIONS} (an endless generator?)")
        try:
            op, kwargs, pred = config.op, dict(config.kwargs), np.asarray(config.pred)
        except (AttributeError, TypeError) as exc:
            raise InputError(f"{where}: loss_configurations item {i} is a {type(config).__name__}, not a "
                             f"LossConfig(op, kwargs, pred, target, upstream, label) ({exc})") from None
        label = getattr(config, "label", "") or f"{op} " + " ".join(f"{k}={v}" for k, v in kwargs.items())
        jobs.append({"loss": True, "op": str(op), "kwargs": kwargs, "label": label.strip(),
                     "input_shape": [int(n) for n in pred.shape], "grid": grid, "index": i})
    return jobs


def _plan_shapes(adapter: Any, job: dict[str, Any], where: str) -> list[list[int]]:
    """The coverage plan's input shapes for a configuration given without one."""
    from symjac.frameworks._adapter import Config, Unsupported
    from symjac.pool._cover import cover

    try:
        spec, _ = adapter.make(Config(job["op"], job["kwargs"], (), job["label"]))
        return [list(s) for s in cover(spec)]
    except (Unsupported, SymjacError) as exc:
        raise InputError(f"{where}: {job['label']} has no input_shape and its spec gives no plan: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the adapter's make() is code under test
        raise InputError(f"{where}: {job['label']} has no input_shape; make() raised {type(exc).__name__}: "
                         f"{exc}") from None


def list_jobs(target: str, grid: str, known_defects: bool = True, losses: bool = True) -> list[dict[str, Any]]:
    """The adapter's configurations as jobs (``op``, ``kwargs``, ``input_shape``, ``label``), in
    this process: shapes from the coverage plan where omitted, duplicates dropped, shared labels
    told apart; then, with ``losses``, its loss configurations (``loss: True``;
    :func:`loss_jobs`).

    Raises:
      InputError: one line: the adapter did not load, ``configurations()`` raised (or called
        ``sys.exit``), returned something other than an iterable of configurations, or gave more
        than :data:`MAX_CONFIGURATIONS`.
    """
    adapter = load_adapter(target)
    where = f"adapter {target!r}: configurations({grid!r})"
    jobs = []
    losses_listed: list[dict[str, Any]] = []
    try:
        configs = _call(adapter, grid, known_defects)
        if configs is None or isinstance(configs, (str, bytes, Mapping)) or not hasattr(configs, "__iter__"):
            raise InputError(f"{where} returned {type(configs).__name__}; give an iterable of "
                             "symjac.frameworks.Config(op, kwargs, input_shape, label)")
        for i, config in enumerate(configs):
            if i == MAX_CONFIGURATIONS:
                raise InputError(f"{where} gave more than {MAX_CONFIGURATIONS} configurations (an endless generator?)")
            jobs.append(_job(config, where, i))
        if losses:
            losses_listed = loss_jobs(adapter, grid, where)
    except InputError:
        raise
    except SymjacError as exc:  # a built-in adapter's unknown grid
        raise InputError(str(exc)) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a user adapter's configurations() is code under test
        code = f" ({exc.code!r})" if isinstance(exc, SystemExit) else f": {exc}"
        raise InputError(f"{where} raised {type(exc).__name__}{code}") from None
    shaped = []
    for job in jobs:
        shapes = [job["input_shape"]] if job["input_shape"] is not None else _plan_shapes(adapter, job, where)
        shaped += [{**job, "input_shape": shape} for shape in shapes]
    return _distinct(shaped) + losses_listed


def _key(job: dict[str, Any]) -> str:
    return json.dumps([job["op"], job["kwargs"], job["input_shape"]], sort_keys=True, default=repr)


def _distinct(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Equal configurations once; those sharing a label (and shape) but not their op and
    arguments get the arguments that differ added to the label (one table row each)."""
    unique = list({_key(j): j for j in reversed(jobs)}.values())[::-1]  # the first of equals, in order
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for job in unique:
        groups.setdefault((job["label"], repr(job["input_shape"])), []).append(job)
    for group in groups.values():
        if len(group) < 2:
            continue
        keys = sorted({k for j in group for k in j["kwargs"]})
        differ = [k for k in keys if len({repr(j["kwargs"].get(k, "<absent>")) for j in group}) > 1]
        ops = len({j["op"] for j in group}) > 1
        for job in group:
            parts = ([job["op"]] if ops else []) + [f"{k}={job['kwargs'].get(k)!r}" for k in differ]
            job["label"] = f"{job['label']} [{', '.join(parts)}]"
    return unique


def plan(target: str, grid: str, *, known_defects: bool = True, isolate: bool = True,
         timeout: float | None = None, losses: bool = True) -> list[dict[str, Any]]:
    """:func:`list_jobs`, for a user adapter with ``isolate`` in a worker process that may take
    ``timeout`` seconds (None: no limit); its crash or hang is an :class:`InputError` too."""
    if builtin(target) or not isolate:
        return list_jobs(target, grid, known_defects, losses)
    where = f"adapter {target!r}: configurations({grid!r})"
    with Worker({"plan": list_jobs}, timeout=timeout, method="exec") as worker:
        try:
            jobs: list[dict[str, Any]] = worker.call("plan", target, grid, known_defects, losses)
        except TimedOut:
            raise InputError(f"{where} did not return within {timeout:g} s (--timeout / --budget); its "
                             "process was killed") from None
        except Crashed as exc:
            raise InputError(f"{where}: the process running it was {exc.description}") from None
        except Raised as exc:
            message = exc.message if exc.type_name == "InputError" else str(exc)
            raise InputError(message if exc.type_name == "InputError" else f"{where}: {message}") from None
    return jobs


class PackageMissing(InputError):
    """A dtype needs a package symjac does not have here (``package``: its name): the cells
    in that dtype are ``not_run``, the table says so, not ``unsupported`` (the framework is
    not at fault)."""

    def __init__(self, package: str, message: str):
        super().__init__(message)
        self.package = package


def numpy_dtype(name: str) -> np.dtype:
    """A dtype by name; bfloat16 through ml_dtypes (:class:`PackageMissing` when it is missing)."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise PackageMissing("ml_dtypes", "bfloat16 needs ml_dtypes: pip install ml_dtypes") from None
        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(name)


def sample_order(n: int, budget: float | None) -> list[int]:
    """The order the grid's ``n`` jobs start in: as listed without a budget; with one, a seeded
    permutation, so the configurations a budget leaves out are spread over the whole grid."""
    if budget is None:
        return list(range(n))
    return [int(i) for i in np.random.default_rng(SAMPLE_SEED).permutation(n)]


def check_budget(budget: float | None) -> None:
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise InputError(f"budget={budget!r} is not valid: give a positive, finite number of seconds")
