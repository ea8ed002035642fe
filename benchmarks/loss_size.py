"""verify_loss at size (issue 24 item 5), before and after in one run: time and peak memory per entry.

Each case of :data:`CASES` at 10^5 and 10^6 pred entries (rows x 10 classes for
softmax_ce and for a per-class weight), float64, no forward unless the case says so:
correct derivatives (NumPy's closed forms) of mse, sigmoid_ce and softmax_ce; failing
ones (the loss scale S = 1024 forgotten; three entries wrong); the options (a class
weight, pos_weight, class indices with ignore_index, label_smoothing, reduction="none"
with an upstream); and a forward= to check. Each case runs in its own process, on this
tree and on ``--base`` (checked out into a temporary git worktree; the same child code
runs against each tree's symjac):

- seconds (wall) and CPU seconds of the call;
- B/entry cold: the peak RSS the call adds to a fresh process (ru_maxrss after minus
  before) over the entries, symjac's modules imported before (importing
  ``symjac.verifiers`` and the SymPy, mpmath and gmpy2 it pulls in adds ~59 MB to a
  process, whatever the size); the call still builds the kind's SymPy template and
  lowers its functions (several MB once per process);
- B/entry warm: the same after a 2-entry call of the same case (imports and template
  done): what the entries themselves cost;
- the route the report took and its verdict.

Measured 2026-12-02 03:48-04:18 UTC on the shared 2-core VM (loaded by other runs: wall
time up to 2-4x the CPU time), before = main at d9970d5 (its loss code that of 711f567,
where this branch started), after = branch lossfast, one run each, 10^6 entries::

    case                               before: wall s  CPU s  B/entry cold/warm route       verdict | after: wall s  CPU s  B/entry cold/warm route       verdict
    mse 1,000,000                        2.34   1.11     86    89  fast            ok |   1.60   1.08     86    90  fast            ok
    sigmoid_ce 1,000,000                 2.41   1.20     79    81  fast            ok |   4.64   1.50     79    82  fast            ok
    softmax_ce 1,000,000                 2.96   1.05     61    62  fast            ok |   4.65   2.02     61    62  fast            ok
    mse forgets S 1,000,000            112.13  50.80   2924  2917 exact missing_scale |   1.84   1.19     86    90  fast missing_scale
    sigmoid_ce forgets S 1,000,000     148.97  92.15   4635  4630 exact missing_scale |   4.95   1.61     79    82  fast missing_scale
    softmax_ce forgets S 1,000,000     225.63  95.14   4237  4236 exact missing_scale |   1.53   1.48     53    54  fast missing_scale
    mse 3 wrong 1,000,000               31.18  18.57   1896  1897 exact  wrong_values |   1.43   1.01     86    90  fast  wrong_values
    sigmoid_ce 3 wrong 1,000,000        60.85  38.73   3788  3783 exact  wrong_values |   1.57   1.18     79    82  fast  wrong_values
    softmax_ce 3 wrong 1,000,000        52.59  37.96   3475  3473 exact  wrong_values |   1.24   1.02     53    55  fast  wrong_values
    sigmoid_ce weight 1,000,000         13.65  13.15   1431  1428 exact            ok |   1.45   1.40     79    81  fast            ok
    sigmoid_ce pos_weight 1,000,000     13.52  13.34   1431  1420 exact            ok |   1.21   1.20     79    82  fast            ok
    softmax_ce weight 1,000,000         14.29  13.87   2049  2051 exact            ok |   1.89   1.84     61    62  fast            ok
    softmax_ce ignore_index 1,000,000   12.86  12.80   1875  1877 exact            ok |   1.85   1.76     43    43  fast            ok
    softmax_ce smoothing 1,000,000      26.76  15.24   2049  2051 exact            ok |   3.46   2.29     61    62  fast            ok
    mse none+upstream 1,000,000         18.25  12.93   1661  1647 exact            ok |   1.71   1.09    102   106  fast            ok
    mse forward= 1,000,000              17.93  11.89   1533  1534 exact            ok |  18.52  12.05   1533  1527 exact            ok

The "before" failing and option rows took the exact route (1.4-4.6 KB an entry, 12-95 CPU
s); after, every row but the forward takes the fast route, under 2.5 CPU s and, but for
the none+upstream row, under 100 B an entry (that row's third input array, the upstream,
is copied by the guarded calls as pred and label are: ~24 B an entry more). The warm
figure is mostly the float arrays of the three calls (the guarded call's copies of the
inputs before and for each call, the outputs); the fast route itself adds one block. A
forward is checked on the exact route alone (no enclosure of the loss value in the fast
route): ~12 CPU s and ~1.5 KB an entry at 10^6, and refused up front beyond
symjac.loss.MAX_ELEMENTS.

Branch lossfwd (forward= through the fast route, :mod:`symjac.verifiers.loss.fast._forward`;
the guarded calls compare their arguments with the inputs instead of copying them), measured
2026-12-02 04:40-05:04 UTC on the same loaded VM, these rows alone, this tree alone::

    case                               after: wall s  CPU s  B/entry cold/warm route       verdict
    mse none+upstream 1,000,000          1.84   1.22     94    92  fast            ok
    mse forward= 1,000,000               3.08   1.92     98    79  fast            ok
    sigmoid_ce forward= 1,000,000        3.72   3.71     81    69  fast            ok
    softmax_ce forward= 1,000,000        3.50   3.49     66    60  fast            ok
    mse forward S·L 1,000,000           25.67  16.88   2225  2217 exact forward_values,not_fd_consistent
    mse forward off 1,000,000           31.65  17.68   2225  2217 exact forward_values

A right forward now takes the fast route (was 18 s, ~1.5 KB an entry); a failing one
(S·L, or 1e-9 relative off) still takes the exact route whole (its message needs the exact
bound over every element), within symjac.loss.MAX_ELEMENTS.

Branch fwdfail (a forward proven *beyond* its bound through the fast route too,
:mod:`symjac.verifiers.loss.fast._forward_fail`: the exact route's findings, every printed
number proven from the float64 enclosures), measured 2026-12-02 06:33-06:43 UTC on the same
loaded VM, before = main at b1843d4, the forward rows, one run each, 10^6 entries::

    case                               before: wall s  CPU s  B/entry cold/warm route       verdict | after: wall s  CPU s  B/entry cold/warm route       verdict
    mse forward= 1,000,000               1.98   1.98     98    79  fast            ok |   1.95   1.94     98    79  fast            ok
    sigmoid_ce forward= 1,000,000        4.36   4.35     82    69  fast            ok |   4.71   4.70     82    69  fast            ok
    softmax_ce forward= 1,000,000        3.69   3.68     66    60  fast            ok |   3.83   3.82     66    60  fast            ok
    mse forward S·L 1,000,000           17.36  17.29   2225  2218 exact forward_values,not_fd_consistent |   1.90   1.87     98    79  fast forward_values,not_fd_consistent
    sigmoid_ce forward S·L 1,000,000    49.02  48.74   3990  3984 exact forward_values,not_fd_consistent |   4.66   4.55     82    69  fast forward_values,not_fd_consistent
    softmax_ce forward S·L 1,000,000    29.40  29.10   2925  2924 exact forward_values,not_fd_consistent |   3.38   3.33     66    60  fast forward_values,not_fd_consistent
    mse forward off 1,000,000           17.51  17.36   2225  2218 exact forward_values |   1.72   1.70     98    79  fast forward_values
    sigmoid_ce forward off 1,000,000    48.97  48.00   3990  3985 exact forward_values |   4.11   3.95     82    69  fast forward_values
    softmax_ce forward off 1,000,000    28.27  27.26   2925  2924 exact forward_values |   3.71   3.55     66    60  fast forward_values

A wrong forward (S·L, or 1e-9 relative off) now takes the fast route as a right one does:
1.7-4.7 s and 66-98 B an entry cold at 10^6 (was 17-49 s and 2.2-4.0 KB an entry on the
exact route, which refuses it beyond symjac.loss.MAX_ELEMENTS); the right forwards' rows
are unchanged. At 10^5 the wrong forwards take 0.4-0.9 s (were 1.8-4.7 s).

Every row, rerun 2026-12-02 07:58-08:05 UTC on an otherwise idle machine (``--base 4d6d101
--sizes 100000,1000000 --cold-only``, one run each; main at 92b3c36): every row takes the
fast route after, 0.84-4.1 s and 38-98 B an entry cold at 10^6 (at 10^5 the process's fixed
~10-25 MB makes it 110-265 B an entry), verdicts unchanged; the wrong forwards at 10^6:

    case                               before: wall s  B/entry cold route | after: wall s  B/entry cold route
    mse forward S·L 1,000,000           18.67   2225  exact |   1.75     98  fast
    sigmoid_ce forward S·L 1,000,000    49.35   3989  exact |   3.91     69  fast
    softmax_ce forward S·L 1,000,000    28.10   2925  exact |   3.35     66  fast
    mse forward off 1,000,000           16.41   2225  exact |   1.67     98  fast
    sigmoid_ce forward off 1,000,000    47.36   3989  exact |   3.97     69  fast
    softmax_ce forward off 1,000,000    26.46   2925  exact |   3.26     66  fast

Run: python benchmarks/loss_size.py [--base REV] [--sizes 100000,1000000] [--cases "mse,mse forgets S",...]
[--cold-only] [--timeout 600] (without --base: this tree alone). A size beyond a tree's
budget prints "refused" (an InputError up front).
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
    ("sigmoid_ce forward=", "sigmoid_ce", {}, "forward"), ("softmax_ce forward=", "softmax_ce", {}, "forward"),
    ("mse forward S·L", "mse", {"scale": 1024}, "forward S·L"),
    ("sigmoid_ce forward S·L", "sigmoid_ce", {"scale": 1024}, "forward S·L"),
    ("softmax_ce forward S·L", "softmax_ce", {"scale": 1024}, "forward S·L"),
    ("mse forward off", "mse", {}, "forward off"),
    ("sigmoid_ce forward off", "sigmoid_ce", {}, "forward off"),
    ("softmax_ce forward off", "softmax_ce", {}, "forward off"),
)


def _forward(kind: str, fault: str) -> Any:
    """The forward of a case (NumPy's closed forms of the mean loss): right, S·L, or off by 1e-9 relative."""
    import numpy as np

    factor = {"forward": 1.0, "forward S·L": 1024.0, "forward off": 1 + 1e-9}[fault]

    def forward(z: Any, y: Any) -> Any:
        if kind == "mse":  # ℓ = (z - y)²
            ell = (z - y) ** 2
        elif kind == "sigmoid_ce":  # ℓ = y·sp(-z) + (1 - y)·sp(z) = sp(z) - y·z, sp(z) = log(1 + e^z)
            ell = np.logaddexp(0, z) - y * z
        else:  # ℓ = log Σ_k e^z_k - Σ_c t_c z_c (Σ t = 1), one per row
            top = z.max(axis=-1, keepdims=True)
            ell = (top + np.log(np.exp(z - top).sum(axis=-1, keepdims=True))) - (y * z).sum(axis=-1, keepdims=True)
        return np.mean(ell) * factor

    return forward


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

    import symjac
    import symjac.verifiers  # noqa: F401 - the modules (sympy, mpmath, ...: ~59 MB) are not the entries' cost

    loss, pred, label, upstream, values = _inputs(case, entries)
    forward = None
    _, kind, _, fault = next(c for c in CASES if c[0] == case)
    if fault is not None and fault.startswith("forward"):
        forward = _forward(kind, fault)
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
