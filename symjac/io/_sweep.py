"""Sweeps: verify one implementation over a grid of configurations.

A sweep file is a spec file whose ``[operator]`` and ``[input]`` values are *lists
of candidates*; the grid is their product::

    [operator]
    kind = "pool"
    mode = ["avg", "max"]
    kernel = [2, 3, [2, 3]]
    stride = [1, 2]
    padding = ["valid", "same", 1]
    [input]
    shape = [[1, 1, 5, 5], [2, 3, 6, 7]]

Combinations that are not a valid operator at a shape (a ``SpecError``) are skipped
and counted. The implementation is a *factory*: ``--impl mod:make`` where
``make(spec)`` returns an object with ``forward``/``backward`` for that spec (or
raises ``NotImplementedError`` for a configuration it does not cover: skipped).

Work runs in local worker processes or on a Dask distributed cluster
(:func:`symjac.run._executor.execute`); results are the same either way, in grid order.
``symjac sweep`` (:mod:`symjac.cli._sweep`) prints them and writes one JSON line each.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from symjac._errors import InputError, SpecError, SymjacError, UsageError
from symjac._progress import Mute, note
from symjac.io._specfile import OPERATOR_TABLES, _check_keys, _operator, read_toml
from symjac.pool._geometry import resolve
from symjac.run._executor import execute
from symjac.run._load import load_impl
from symjac.verifiers._impl import implementation
from symjac.verifiers.pool._verify import verify


def load_grid(path: str | Path) -> list[dict[str, Any]]:
    """Expand a sweep file into configurations ``{"operator": {...}, "input": {...}}``.

    Raises:
      SpecError: the file is missing or not TOML, a key is unknown, a value is no
        non-empty list, or a kind is no pooling operator.
    """
    p, data = read_toml(path, "sweep file")
    _check_keys(str(p), data, ("name", "description", "operator", "input"))
    kinds = data.get("operator", {}).get("kind", ["pool"])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    pooling = tuple(k for k, table in OPERATOR_TABLES.items() if table.pooling)
    tables = []
    for kind in kinds:
        table = OPERATOR_TABLES.get(kind) if isinstance(kind, str) else None
        if table is None or not table.pooling:
            raise SpecError(f"{p} [operator].kind: {kind!r} is not valid in a sweep; sweeps run pooling specs "
                            f"({', '.join(map(repr, pooling))})")
        tables.append(table)
    valid_keys = tuple(dict.fromkeys(k for table in tables for k in table.keys))
    input_keys = tuple(dict.fromkeys(k for table in tables for k in table.inputs))
    axes: list[tuple[str, str, list[Any]]] = []
    for section, keys in (("operator", valid_keys), ("input", input_keys)):
        for key, values in _check_keys(f"{p} [{section}]", data.get(section, {}), keys).items():
            if not isinstance(values, list) or not values:
                raise SpecError(f"{p} [{section}].{key}: give a non-empty list of candidate values, e.g. [{values!r}]")
            axes.append((section, key, values))
    if not any(k == "shape" for s, k, _ in axes if s == "input"):
        raise SpecError(f"{p} [input]: give shape = [[...], ...], the input shapes to sweep")
    grid = []
    for combo in itertools.product(*(values for _, _, values in axes)):
        config: dict[str, Any] = {"operator": {}, "input": {}}
        for (section, key, _), value in zip(axes, combo):
            config[section][key] = value
        grid.append(config)
    return grid


_IMPL_CACHE: dict[str, Any] = {}


def run_one(config: dict[str, Any], impl_target: Any, dtype: str = "float64") -> dict[str, Any]:
    """Verify one configuration; never raises (errors become the result). ``impl_target``: an
    ``--impl`` target (``MODULE_OR_PATH:FACTORY``), or an ``--exec`` / ``--lib`` kernel (a
    :class:`symjac.frameworks.native._targets.NativeTarget`, opened once per process).

    The runner of :func:`verify_grid` (module level: worker processes and Dask import it);
    ``status`` is ``"pass"``, ``"fail"``, ``"unsupported"`` (the implementation rejects the
    dtype: :attr:`symjac.Report.verdict`; ``returns_in`` the dtypes it was found to return in),
    ``"error"`` (the factory failed) or ``"skipped"`` (no valid operator at the shape, or the
    factory raised ``NotImplementedError``).
    """
    result: dict[str, Any] = {"config": config}
    try:
        spec = _operator(dict(config["operator"]), "sweep")
        shape = tuple(config["input"]["shape"])
        resolve(spec, shape)
    except SymjacError as exc:
        return {**result, "status": "skipped", "reason": str(exc)}
    try:
        if impl_target not in _IMPL_CACHE:  # a module's target, or a native kernel's that opens itself
            opens = getattr(impl_target, "factory", None)
            _IMPL_CACHE[impl_target] = opens() if opens is not None else load_impl(impl_target)
        factory = _IMPL_CACHE[impl_target]
        impl = factory(spec) if callable(factory) and not hasattr(factory, "backward") else factory
    except NotImplementedError as exc:  # the implementation does not cover this configuration
        return {**result, "status": "skipped", "reason": f"not supported by the implementation: {exc}"}
    except (UsageError, Exception) as exc:  # noqa: BLE001 - the factory's failure is a result
        return {**result, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    try:  # an object or a dict with backward (and forward), an Impl, a torch.autograd.Function
        fns = implementation(impl, loss=False, what=f"returned by the factory for {spec!r}")
    except InputError as exc:
        return {**result, "status": "error", "reason": str(exc)}
    report = verify(spec, **fns, input_shape=shape, dtype=dtype, seed=int(config["input"].get("seed", 0)))
    status = {"PASS": "pass", "FAIL": "fail", "UNSUPPORTED": "unsupported"}[report.verdict]
    return {**result, "status": status, "summary": report.summary(), "categories": report.categories(),
            "backward_calls": report.stats["backward_calls"],
            **({"returns_in": list(report.returns_in)} if status == "unsupported" else {})}


def verify_grid(grid: list[dict[str, Any]], impl_target: Any, *, jobs: int = 1, scheduler: str | None = None,
                dtype: str = "float64") -> list[dict[str, Any]]:
    """:func:`run_one` for every configuration of ``grid`` (:func:`load_grid`), in this
    process (``jobs=1``), ``jobs`` worker processes or on the Dask ``scheduler``; results in
    grid order; each configuration finished is told to the open progress listener (the command's bar)."""
    try:
        return execute(grid, impl_target, runner=run_one, jobs=jobs, scheduler=scheduler, dtype=dtype, note=note, mute=Mute)
    finally:  # a native kernel opened in this process (jobs=1) ends here, with whatever it started
        opened = _IMPL_CACHE.pop(impl_target, None) if not isinstance(impl_target, str) else None
        if opened is not None:
            opened.close()
