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
#: the rows after the passing ones: (case, kind, Loss options, what the derivative gets wrong)
CASES = (
    ("mse", "mse", {}, None), ("sigmoid_ce", "sigmoid_ce", {}, None), ("softmax_ce", "softmax_ce", {}, None),
    ("mse forgets S", "mse", {"scale": 1024}, "forgets S"),
    ("sigmoid_ce forgets S", "sigmoid_ce", {"scale": 1024}, "forgets S"),
    ("softmax_ce forgets S", "softmax_ce", {"scale": 1024}, "forgets S"),
    ("mse 3 wrong", "mse", {}, "3 wrong"), ("sigmoid_ce 3 wrong", "sigmoid_ce", {}, "3 wrong"),
    ("softmax_ce 3 wrong", "softmax_ce", {}, "3 wrong"),
    ("sigmoid_ce weight", "sigmoid_ce", {"weight": tuple(0.25 * (1 + c) for c in range(10))}, None),
    ("sigmoid_ce pos_weight", "sigmoid_ce", {"pos_weight": 3}, None),
    ("softmax_ce weight", "softmax_ce", {"weight": tuple(0.25 * (1 + c) for c in range(10))}, None),
    ("softmax_ce ignore_index", "softmax_ce", {"labels": "indices", "ignore_index": 3}, None),
    ("softmax_ce smoothing", "softmax_ce", {"label_smoothing": 0.1}, None),
    ("mse none+upstream", "mse", {"reduction": "none"}, None),
    ("mse forward=", "mse", {}, "forward"),
)


def _inputs(case: str, entries: int) -> tuple[Any, Any, Any, Any, Any]:
    """(Loss, pred, label, upstream, derivative values) of a case; the derivatives are
    NumPy's closed forms (correct up to rounding), or wrong as the case says."""
    import numpy as np

    import symjac

    name, kind, options, fault = next(c for c in CASES if c[0] == case)
    loss = symjac.Loss(kind, **options)
    rng = np.random.default_rng(0)
    classes = 10 if kind == "softmax_ce" or "weight" in options else 1
    pred = rng.standard_normal((entries // classes, classes))
    upstream = None
    if kind == "softmax_ce":
        # h = W·p - a, a = ((1 - ε)t + ε/C)·w, W = Σ a (the mean divides by the rows, or by
        # the weight of the labelled rows for class indices)
        index = rng.integers(0, classes, pred.shape[0])
        label = index if options.get("labels") == "indices" else np.eye(classes)[index]
        t = np.eye(classes)[index]
        counted = (index != options["ignore_index"]) if "ignore_index" in options else np.ones(pred.shape[0], bool)
        eps = options.get("label_smoothing", 0.0)
        w = np.array(options.get("weight", (1.0,) * classes))
        a = ((1 - eps) * t + eps / classes) * w * counted[:, None]
        e = np.exp(pred - pred.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        values = (a.sum(axis=1, keepdims=True) * p - a) / counted.sum()
    elif kind == "sigmoid_ce":
        # h = w·((1 - y)σ - p·y·(1 - σ)), mean over the entries
        label = rng.random(pred.shape).round(3)
        w, pw = np.array(options.get("weight", (1.0,))), float(options.get("pos_weight", 1.0))
        sig = 1 / (1 + np.exp(-pred))
        values = w * ((1 - label) * sig - pw * label * (1 - sig)) / pred.size
    else:
        label = rng.standard_normal(pred.shape)
        if options.get("reduction") == "none":  # the VJP Σ_i u_i·dℓ_i/dz = 2(z - y)·u
            upstream = rng.standard_normal(pred.shape)
            values = 2 * (pred - label) * upstream
        else:
            values = 2 * (pred - label) / pred.size
    values = values * loss.scale.numerator / loss.scale.denominator
    if fault == "forgets S":
        values = values / 1024
    elif fault == "3 wrong":
        values = values.copy()
        for j in (5, 50_000, entries // classes - 1):
            values[j % pred.shape[0], 0] = -values[j % pred.shape[0], 0] * 1.5 + 1e-3
    return loss, pred, label, upstream, values


def child(case: str, entries: int, warm: bool) -> dict[str, Any]:
    import numpy as np

    import symjac
    import symjac.verifiers  # noqa: F401 - the modules (sympy, mpmath, ...: ~59 MB) are not the entries' cost

    loss, pred, label, upstream, values = _inputs(case, entries)
    forward = None
    if next(c for c in CASES if c[0] == case)[3] == "forward":
        def forward(z: Any, y: Any) -> Any:
            return np.mean((z - y) ** 2)
    if warm:
        symjac.verify_loss(loss, derivative=lambda z, y, *u: values[:2], forward=forward, pred=pred[:2],
                           label=label[:2], upstream=None if upstream is None else upstream[:2])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        report = symjac.verify_loss(loss, derivative=lambda z, y, *u: values, forward=forward, pred=pred,
                                    label=label, upstream=upstream)
    except symjac.InputError as exc:  # beyond a budget: refused up front
        return {"refused": str(exc)[:40], "seconds": time.perf_counter() - t0}
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    added = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    return {"seconds": seconds, "cpu": cpu, "ok": report.ok, "bytes_per_entry": added / pred.size,
            "route": "fast" if "fast_filter" in report.stats else "exact",
            "verdict": "ok" if report.ok else ",".join(report.categories())}


def _run(tree: str, case: str, entries: int, warm: bool, timeout: float) -> dict[str, Any] | str:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, str(entries), "warm" if warm else "cold"]
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
        return f"{r:>48}"
    if "refused" in r:
        return f"{'refused in ' + format(r['seconds'], '.3f') + ' s':>48}"
    w = f"{warm['bytes_per_entry']:5.0f}" if isinstance(warm, dict) else "  ?"
    return f"{r['seconds']:6.2f} {r['cpu']:6.2f} {r['bytes_per_entry']:6.0f} {w} {r['route']:>5} {r['verdict']:>13}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="the revision to compare against (e.g. main)")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES),
                        help="the rows, comma-separated (default: every case of CASES)")
    parser.add_argument("--cold-only", action="store_true", help="skip the warm runs (half the time)")
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
            head = "wall s  CPU s  B/entry cold/warm route       verdict"
            print(f"{'case':34} " + " | ".join(f"{side + ': ' + head:>48}" for side in trees), flush=True)
            for case in args.cases.split(","):
                for n in sizes:
                    cells = []
                    for tree in trees.values():
                        cold = _run(tree, case, n, False, args.timeout)
                        warm = "-" if args.cold_only else _run(tree, case, n, True, args.timeout)
                        cells.append(_cell(cold, warm))
                    print(f"{case + ' ' + format(n, ',d'):34} " + " | ".join(cells), flush=True)
        finally:
            if args.base:
                subprocess.run(["git", "-C", TREE, "worktree", "remove", "--force", os.path.join(tmp, "base")],
                               check=False)


if __name__ == "__main__":
    main()
