"""verify_loss at size (issue 24 item 5), before and after in one run: time and peak memory per entry.

For mse, sigmoid_ce and softmax_ce (rows x 10 classes) at 10^5 and 10^6 pred entries,
verify_loss of a correct derivative (NumPy's closed forms, float64, mean reduction, no
forward), each case in its own process, on this tree and on ``--base`` (checked out
into a temporary git worktree; the same child code runs against each tree's symjac):

- seconds (wall) and CPU seconds of the call;
- B/entry cold: the peak RSS the call adds to a fresh process (ru_maxrss after minus
  before) over the entries, symjac's modules imported before (importing
  ``symjac.verifiers`` and the SymPy, mpmath and gmpy2 it pulls in adds ~59 MB to a
  process, whatever the size); the call still builds the kind's SymPy template and
  lowers its functions (several MB once per process);
- B/entry warm: the same after a 2-entry call of the same kind (imports and template
  done): what the entries themselves cost.

Measured 2026-12-02 01:00 UTC on the shared 2-core VM (load average ~14: wall time is
3-8x the CPU time), before = main at 824a427 (the exact route alone), after = the fast
route (branch lossrep), one run each::

    case                       before: wall s  CPU s  B/entry cold/warm | after: wall s  CPU s  B/entry cold/warm
    mse 100,000                    6.60   1.62   1943  1407 |   3.10   0.81    577    64
    mse 1,000,000                 53.01  13.37   1459  1405 |   8.69   2.16    108    64
    sigmoid_ce 100,000            11.32   2.95   1953  1427 |   4.85   1.18    588    65
    sigmoid_ce 1,000,000          67.23  17.20   1469  1422 |   6.59   1.93     95    64
    softmax_ce x 10 100,000        9.77   2.41   2536  2097 |   3.59   0.91    513    64
    softmax_ce x 10 1,000,000     74.51  18.39   2137  2100 |   7.15   1.78    100    64
    softmax_ce x 10 10,000,000      refused (over MAX_ELEMENTS) |  95.79  13.14     53    53
    mse 10,000,000                  refused (over MAX_ELEMENTS) | 264.18  13.76     61    57

Every "after" row took the fast route and decided every entry in float64 (the exact
route evaluated the 64 entries of largest estimated error, for ``max_error_ulps``). The
cold figure at 10^5 is mostly the process's one-time costs (the kind's SymPy template
and lowered functions, lazily imported modules: ~50 MB, whatever the size); warm, an
entry costs the float arrays of the three calls (the guarded call's copies of pred and
label before and for each call, the outputs): ~64 B.

Run: python benchmarks/loss_size.py [--base REV] [--sizes 100000,1000000] [--kinds mse,...]
[--timeout 600] (without --base: this tree alone). A size beyond a tree's budget prints
"refused" (an InputError up front).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
KINDS = ("mse", "sigmoid_ce", "softmax_ce")


def _inputs(kind: str, entries: int) -> tuple[Any, Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    classes = 10 if kind == "softmax_ce" else 1
    pred = rng.standard_normal((entries // classes, classes))
    if kind == "softmax_ce":
        label = np.eye(classes)[rng.integers(0, classes, pred.shape[0])]
        e = np.exp(pred - pred.max(axis=-1, keepdims=True))
        values = (e / e.sum(axis=-1, keepdims=True) - label) / pred.shape[0]
    elif kind == "sigmoid_ce":
        label = rng.random(pred.shape).round(3)
        values = (1 / (1 + np.exp(-pred)) - label) / pred.size
    else:
        label = rng.standard_normal(pred.shape)
        values = 2 * (pred - label) / pred.size
    return pred, label, values


def child(kind: str, entries: int, warm: bool) -> dict[str, Any]:
    import symjac
    import symjac.verifiers  # noqa: F401 - the modules (sympy, mpmath, ...: ~59 MB) are not the entries' cost

    pred, label, values = _inputs(kind, entries)
    if warm:
        symjac.verify_loss(symjac.Loss(kind), derivative=lambda z, y: values[:2], pred=pred[:2], label=label[:2])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        report = symjac.verify_loss(symjac.Loss(kind), derivative=lambda z, y: values, pred=pred, label=label)
    except symjac.InputError as exc:  # beyond a budget: refused up front
        return {"refused": str(exc)[:40], "seconds": time.perf_counter() - t0}
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    added = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    return {"seconds": seconds, "cpu": cpu, "ok": report.ok, "bytes_per_entry": added / pred.size,
            "route": "fast" if "fast_filter" in report.stats else "exact"}


def _run(tree: str, kind: str, entries: int, warm: bool, timeout: float) -> dict[str, Any] | str:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, str(entries), "warm" if warm else "cold"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"> {timeout:g} s"
    if done.returncode != 0:
        return "error: " + (done.stderr.strip().splitlines() or ["?"])[-1][:60]
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def _cell(r: dict[str, Any] | str, warm: dict[str, Any] | str) -> str:
    if isinstance(r, str):
        return f"{r:>34}"
    if "refused" in r:
        return f"{'refused in ' + format(r['seconds'], '.3f') + ' s':>34}"
    w = f"{warm['bytes_per_entry']:5.0f}" if isinstance(warm, dict) else "  ?"
    ok = "" if r["ok"] else " NOT OK"
    return f"{r['seconds']:6.2f} {r['cpu']:6.2f} {r['bytes_per_entry']:6.0f} {w} {r['route']:>5}{ok}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="the revision to compare against (e.g. main)")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, entries, mode = args.child
        print(json.dumps(child(kind, int(entries), mode == "warm")))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="symjac-base-") as tmp:
        trees = {"after": TREE}
        if args.base:
            base = os.path.join(tmp, "base")
            subprocess.run(["git", "-C", TREE, "worktree", "add", "--detach", "-q", base, args.base], check=True)
            trees = {"before": base, "after": TREE}
        try:
            head = "wall s  CPU s  B/entry cold/warm route"
            print(f"{'case':28} " + " | ".join(f"{side + ': ' + head:>34}" for side in trees), flush=True)
            for kind in args.kinds.split(","):
                for n in sizes:
                    cells = []
                    for tree in trees.values():
                        cold = _run(tree, kind, n, False, args.timeout)
                        warm = _run(tree, kind, n, True, args.timeout)
                        cells.append(_cell(cold, warm))
                    label = f"{kind}{' x 10' if kind == 'softmax_ce' else ''} {n:,d}"
                    print(f"{label:28} " + " | ".join(cells), flush=True)
        finally:
            if args.base:
                subprocess.run(["git", "-C", TREE, "worktree", "remove", "--force", os.path.join(tmp, "base")],
                               check=False)


if __name__ == "__main__":
    main()
