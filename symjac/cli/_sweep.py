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

Work runs in local worker processes (``-j N``) or on a Dask distributed cluster
(``--scheduler ADDRESS``, optional extra ``symjac[dask]``); results are the same
either way, in grid order. Each result is one JSON line.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from symjac._errors import SpecError, SymjacError

DASK_HINT = "Dask is not installed: pip install 'symjac[dask]' to run sweeps on a cluster"


def load_grid(path: str | Path) -> list[dict[str, Any]]:
    """Expand a sweep file into configurations ``{"operator": {...}, "input": {...}}``."""
    from symjac.io._specfile import _check_keys, read_toml

    p, data = read_toml(path, "sweep file")
    _check_keys(str(p), data, ("name", "description", "operator", "input"))
    from symjac.io._specfile import OPERATOR_KEYS, POOL_INPUT_KEYS

    kinds = data.get("operator", {}).get("kind", ["pool"])
    kinds = kinds if isinstance(kinds, list) else [kinds]
    for kind in kinds:
        if kind not in ("pool", "adaptive_pool", "global_pool"):
            raise SpecError(f"{p} [operator].kind: {kind!r} is not valid in a sweep; sweeps run pooling specs "
                            "('pool', 'adaptive_pool', 'global_pool')")
    valid_keys = tuple(dict.fromkeys(k for kind in kinds for k in OPERATOR_KEYS[kind]))
    axes: list[tuple[str, str, list[Any]]] = []
    for section, keys in (("operator", valid_keys), ("input", POOL_INPUT_KEYS)):
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


def run_one(config: dict[str, Any], impl_target: str, dtype: str = "float64") -> dict[str, Any]:
    """Verify one configuration; never raises (errors become the result)."""
    from symjac.cli._impl import UsageError, load_impl
    from symjac.io._specfile import _operator
    from symjac.verifiers._pool import verify

    result: dict[str, Any] = {"config": config}
    try:
        spec = _operator(dict(config["operator"]), "sweep")
        shape = tuple(config["input"]["shape"])
        from symjac.pool._geometry import resolve

        resolve(spec, shape)
    except SymjacError as exc:
        return {**result, "status": "skipped", "reason": str(exc)}
    try:
        if impl_target not in _IMPL_CACHE:
            _IMPL_CACHE[impl_target] = load_impl(impl_target)
        factory = _IMPL_CACHE[impl_target]
        impl = factory(spec) if callable(factory) and not hasattr(factory, "backward") else factory
    except NotImplementedError as exc:  # the implementation does not cover this configuration
        return {**result, "status": "skipped", "reason": f"not supported by the implementation: {exc}"}
    except (UsageError, Exception) as exc:  # noqa: BLE001 - the factory's failure is a result
        return {**result, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    report = verify(spec, backward=impl.backward, forward=getattr(impl, "forward", None), input_shape=shape,
                    dtype=dtype, seed=int(config["input"].get("seed", 0)))
    return {**result, "status": "pass" if report.ok else "fail", "summary": report.summary(),
            "categories": report.categories(), "backward_calls": report.stats["backward_calls"]}


def _progress(done: int, total: int, failed: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  failures: {failed}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


Runner = Callable[[dict[str, Any], str, str], dict[str, Any]]


def execute(grid: list[dict[str, Any]], impl_target: str, *, jobs: int = 1, scheduler: str | None = None,
            dtype: str = "float64", progress: bool = False, runner: Runner = run_one,
            deadline: float | None = None) -> list[dict[str, Any]]:
    """Run every configuration; results in grid order.

    Args:
      runner: ``runner(config, impl_target, dtype) -> result`` (a module-level function, so
        worker processes and Dask can import it); its result's ``status`` counts as a failure
        when it is ``"fail"`` or ``"error"``. ``symjac conform`` passes its own.
      deadline: a ``time.monotonic()`` instant after which no configuration is started; those
        not run get ``{"config": ..., "status": "not_run"}``.
    """
    results: list[dict[str, Any] | None] = [None] * len(grid)
    failed = 0

    def record(i: int, r: dict[str, Any]) -> None:
        nonlocal failed
        results[i] = r
        failed += r["status"] in ("fail", "error")
        if progress:
            _progress(sum(x is not None for x in results), len(grid), failed)

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    if scheduler:
        try:
            from distributed import Client, as_completed
        except ImportError:
            raise SpecError(DASK_HINT) from None
        with Client(scheduler) as client:  # type: ignore[no-untyped-call]
            futures = client.map(runner, grid, impl_target=impl_target, dtype=dtype, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for future in as_completed(futures):  # type: ignore[no-untyped-call]
                record(index[future.key], future.result())
                if late():
                    client.cancel([f for f in futures if not f.done()])
                    break
    elif jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(runner, c, impl_target, dtype): i for i, c in enumerate(grid)}
            from concurrent.futures import as_completed as done

            for future in done(futures):
                if future.cancelled():
                    continue
                record(futures[future], future.result())
                if late():
                    for f in futures:
                        f.cancel()
    else:
        for i, c in enumerate(grid):
            if late():
                break
            record(i, runner(c, impl_target, dtype))
    return [r if r is not None else {"config": grid[i], "status": "not_run"} for i, r in enumerate(results)]


def table(results: list[dict[str, Any]]) -> str:
    """A final table: one row per verified configuration, then the totals."""
    rows = [r for r in results if r["status"] != "skipped"]
    lines = [f"{'status':7} {'operator':60} {'shape':16} summary"]
    for r in rows:
        op = ", ".join(f"{k}={v}" for k, v in r["config"]["operator"].items() if k != "kind")
        shape = "x".join(map(str, r["config"]["input"]["shape"]))
        lines.append(f"{r['status']:7} {op[:60]:60} {shape:16} {r.get('summary', r.get('reason', ''))[:100]}")
    counts = {s: sum(r["status"] == s for r in results) for s in ("pass", "fail", "error", "skipped", "not_run")
              if s != "not_run" or any(r["status"] == s for r in results)}
    lines.append(" ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(results)} configurations")
    return "\n".join(lines)


def run_sweep(path: str | Path, impl_target: str, *, jobs: int = 1, scheduler: str | None = None,
              out: Path | None = None, dtype: str = "float64", progress: bool = True) -> int:
    """The ``symjac sweep`` command: returns the number of failing configurations."""
    grid = load_grid(path)
    results = execute(grid, impl_target, jobs=jobs, scheduler=scheduler, dtype=dtype, progress=progress)
    lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in results)
    if out is not None:
        out.write_text(lines)
    print(table(results))
    return sum(r["status"] in ("fail", "error") for r in results)
