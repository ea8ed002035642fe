"""Running configurations: in this process, in local worker processes or on a Dask cluster.

:func:`execute` is the one scheduler ``symjac sweep`` (:mod:`symjac.io._sweep`'s
runner) and ``conform`` (:mod:`symjac.frameworks.conform._run`'s) share. A runner is a
module-level function ``runner(config, impl_target, dtype) -> result dict``, so worker
processes and Dask workers can import it; results come back in grid order whichever way
they ran. Each result finished is told to the ``note`` the caller passes (``sweep`` and ``conform``
pass :func:`symjac._progress.note`: the command's bar, or the API's ``progress=``; run/ imports no
stage above it); with none, the run is silent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from symjac._errors import SpecError

DASK_HINT = "Dask is not installed: pip install 'symjac[dask]' to run sweeps on a cluster"

Runner = Callable[[dict[str, Any], str, str], dict[str, Any]]


Note = Callable[[str, int, int], None]


def _silent(text: str, done: int, total: int) -> None:
    return None


def execute(grid: list[dict[str, Any]], impl_target: Any, *, runner: Runner, jobs: int = 1,
            scheduler: str | None = None, dtype: str = "float64", unit: str = "configurations", deadline: float | None = None,
            note: Note = _silent, mute: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
            ) -> list[dict[str, Any]]:
    """Run every configuration; results in grid order.

    Args:
      runner: ``runner(config, impl_target, dtype) -> result`` (a module-level function, so
        worker processes and Dask can import it); its result's ``status`` counts as a failure
        when it is ``"fail"`` or ``"error"``. ``symjac sweep`` passes
        :func:`symjac.io._sweep.run_one`, ``conform`` its own.
      jobs: local worker processes (1: in this process); ``scheduler``: a Dask scheduler address.
      unit: what a configuration is, in the progress notes (``"12/40 configurations, 1 failed"``).
      note: told ``(text, done, total)`` as configurations finish (``"12/40 configurations, 1 failed"``);
        ``mute``: a context that keeps a configuration run in this process from telling its own
        notes (a verify's coverage plan) as the grid's (``symjac._progress``'s ``note`` and ``Mute``).
      deadline: a ``time.monotonic()`` instant after which no configuration is started; those
        not run get ``{"config": ..., "status": "not_run"}``.

    Raises:
      SpecError: a ``scheduler`` without Dask installed (:data:`DASK_HINT`).
    """
    results: list[dict[str, Any] | None] = [None] * len(grid)
    failed = 0

    def _note(done: int, total: int, failed: int, unit: str) -> None:
        note(f"{done}/{total} {unit}" + (f", {failed} failed" if failed else ""), done, total)

    def record(i: int, r: dict[str, Any]) -> None:
        nonlocal failed
        results[i] = r
        failed += r["status"] in ("fail", "error")
        _note(sum(x is not None for x in results), len(grid), failed, unit)

    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    _note(0, len(grid), 0, unit)
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
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(runner, c, impl_target, dtype): i for i, c in enumerate(grid)}
            for future in concurrent.futures.as_completed(futures):
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
            with mute():  # the configuration's own notes (a verify's coverage plan) are not the grid's
                result = runner(c, impl_target, dtype)
            record(i, result)
    return [r if r is not None else {"config": grid[i], "status": "not_run"} for i, r in enumerate(results)]
