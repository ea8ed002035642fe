"""Conformance run speed: `symjac conform torch --grid small`, end to end.

Prints the wall time of the whole run (the command line as a user types it: adapter import,
one isolated worker that imports torch once, every configuration x dtype x input family
verified, the table) and configurations (cells) per second; then the same run in process
(--no-isolate) to show what isolation costs.

Run: python benchmarks/conform.py        (needs torch)
"""

from __future__ import annotations

import subprocess
import sys
import time

import symjac


def cli_wall_time(*extra: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "symjac", "conform", "torch", "--grid", "small", "-q", *extra],
                         capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(out.stderr)
    return time.perf_counter() - started, out.stdout.strip().splitlines()[-1]


def main() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("benchmarks/conform.py needs torch: pip install 'symjac[torch]'") from None
    for label, extra in (("isolated (default)", ()), ("in process (--no-isolate)", ("--no-isolate",))):
        seconds, last = cli_wall_time(*extra)
        print(f"symjac conform torch --grid small, {label}: {seconds:.1f} s wall")
        print(f"  {last}")
    result = symjac.conform("torch", grid="small")  # the same run from Python, for the cell counts
    cells = len(result.results)
    configs = len({repr(r["config"]) for r in result.results}) // len(result.dtypes)
    ran = cells - result.counts()["unsupported"]
    print(f"symjac.conform('torch', grid='small'): {configs} configurations x {len(result.dtypes)} dtypes = "
          f"{cells} cells ({ran} verified, {result.counts()['unsupported']} unsupported) in {result.seconds:.1f} s: "
          f"{configs / result.seconds:.2f} configurations/s, {cells / result.seconds:.2f} cells/s")


if __name__ == "__main__":
    main()
