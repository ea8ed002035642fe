"""``symjac sweep SWEEP --impl MODULE_OR_PATH:FACTORY``: the results of a sweep as a table
(and JSON lines).

The grid, the runner and the scheduling are the library's
(:mod:`symjac.io._sweep`, :mod:`symjac.run._executor`); this prints them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from symjac._atomic import write_text
from symjac._progress import Progress
from symjac.io._sweep import load_grid, verify_grid


def table(results: list[dict[str, Any]]) -> str:
    """A final table: one row per verified configuration, then the totals."""
    rows = [r for r in results if r["status"] != "skipped"]
    lines = [f"{'status':7} {'operator':60} {'shape':16} summary"]
    for r in rows:
        op = ", ".join(f"{k}={v}" for k, v in r["config"]["operator"].items() if k != "kind")
        shape = "x".join(map(str, r["config"]["input"]["shape"]))
        lines.append(f"{r['status']:7} {op[:60]:60} {shape:16} {r.get('summary', r.get('reason', ''))[:100]}")
    counts = {s: sum(r["status"] == s for r in results)
              for s in ("pass", "fail", "unsupported", "error", "skipped", "not_run")
              if s not in ("unsupported", "not_run") or any(r["status"] == s for r in results)}
    lines.append(" ".join(f"{v} {k}" for k, v in counts.items()) + f" of {len(results)} configurations")
    return "\n".join(lines)


def run_sweep(path: str | Path, impl_target: Any, *, jobs: int = 1, scheduler: str | None = None,
              out: Path | None = None, dtype: str = "float64", progress: bool = True) -> list[dict[str, Any]]:
    """The ``symjac sweep`` command: prints the table and returns the results (:func:`verify_grid`)."""
    grid = load_grid(path)
    with Progress("symjac sweep", 1, enabled=progress):  # after 2 s, on a terminal: the configurations done
        results = verify_grid(grid, impl_target, jobs=jobs, scheduler=scheduler, dtype=dtype)
    lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in results)
    if out is not None:
        write_text(out, lines)  # atomically: an interrupted run leaves the previous file
    print(table(results))
    return results
