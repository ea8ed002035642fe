"""The coverage plan's cost before and after, in one run: seconds per ``verify`` with no shape.

For avg and max 3x3 (kernel 3 along every axis, stride 1, padding 1) in 1-D, 2-D and 3-D,
``symjac.verify(spec, forward=L.forward, backward=L.vjp)`` (the spec's own lowering
as the implementation, so the figure is symjac's cost) runs on two trees: the base
revision (checked out into a temporary git worktree) and this tree, alternating case
by case, each case in its own process, ``--repeat`` times (median), so a burst of load
on this shared machine hits both columns alike. Also printed: plan shapes, input cells
over the plan, backward calls.

``--adaptive`` compares adaptive pools the same way (output 5, 7x7 and 3x3x3: the plan's lengths
o - 1, o, 2o - 1, 2o + 1 against the base's o, 2o, 2o + 1). ``--long`` runs long kernels on this tree
only (the base refused them: "cover supports at most 4096"), with PyTorch's own pool as the
implementation where PyTorch is installed (the lowering's Python loop over 1024 kernel slots would be
the figure otherwise), one run each: the plan, the seconds ``cover`` takes and those ``verify`` takes.

Run: python benchmarks/plan_cost.py --base REV [--repeat 3] [--adaptive] [--long] [--large], or --long alone
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Runs in the child process with the tree's own symjac (the base has no plan_cost.py): argv[1] is the
#: spec as a Python expression over ``symjac``, argv[2] "1" for ``large=True``, argv[3] "torch" for
#: PyTorch's own op (``symjac.frameworks.torch``, argv[4] its call) as the implementation.
CHILD = """
import json, math, sys, time
import symjac
spec, large = eval(sys.argv[1], {"symjac": symjac}), sys.argv[2] == "1"
kw = {"large": True} if large else {}
t = time.perf_counter()
shapes = symjac.cover(spec, **kw)
cover_s = time.perf_counter() - t
if sys.argv[3] == "torch":
    from symjac.frameworks import torch as adapters
    spec, impl = eval(sys.argv[4], {"t": adapters})
    run = lambda: symjac.verify(spec, impl, **kw)
else:
    lowered = {}

    def impl(x):
        if x.shape not in lowered:
            lowered[x.shape] = symjac.lower(spec, x.shape)
        return lowered[x.shape]

    run = lambda: symjac.verify(spec, forward=lambda x: impl(x).forward(x), backward=lambda x, dy: impl(x).vjp(x, dy),
                                **kw)
t = time.perf_counter()
report = run()
print(json.dumps({"seconds": time.perf_counter() - t, "cover_seconds": cover_s, "ok": report.ok,
                  "shapes": len(shapes), "plan": [list(s) for s in shapes],
                  "cells": sum(math.prod(s) for s in shapes), "calls": report.stats["backward_calls"]}))
"""

#: Long kernels (--long): (spec, PyTorch call through symjac.frameworks.torch as ``t``).
LONG = [
    ('symjac.Pool("avg", (1024,), stride=1024)', "t.avg_pool1d(1024, 1024)"),
    ('symjac.Pool("max", (1024,), stride=1024)', "t.max_pool1d(1024, 1024)"),
    ('symjac.Pool("avg", (4096,), stride=4096)', "t.avg_pool1d(4096, 4096)"),
    ('symjac.Pool("max", (4096,), stride=4096)', "t.max_pool1d(4096, 4096)"),
    ('symjac.Pool("avg", (1024,), stride=256, padding=512, ceil_mode=True, divisor="include_pad")',
     "t.avg_pool1d(1024, 256, 512, ceil_mode=True)"),
    ('symjac.Pool("max", (4096,), stride=1)', "t.max_pool1d(4096, 1)"),
    ('symjac.Pool("avg", (1024,), stride=1, padding=512, divisor="include_pad")', "t.avg_pool1d(1024, 1, 512)"),
    ('symjac.Pool("max", (1024,), stride=1, padding=512)', "t.max_pool1d(1024, 1, 512)"),
]
ADAPTIVE = [f'symjac.AdaptivePool("{mode}", {o})' for o in ("(5,)", "(7, 7)", "(3, 3, 3)") for mode in ("avg", "max")]


def _run(tree: str, spec: str, large: bool, torch_call: str | None = None) -> dict[str, object] | str:
    env = dict(os.environ, PYTHONPATH=tree)
    args = [sys.executable, "-c", CHILD, spec, "1" if large else "0", "torch" if torch_call else "lower", torch_call or ""]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tree, timeout=3600)
    if done.returncode != 0:
        return "error: " + (done.stderr.strip().splitlines() or ["?"])[-1][:100]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _compare(base: str, specs: list[tuple[str, str]], repeat: int) -> None:
    print(f"{'case':<24} {'shapes':>13} {'cells':>17} {'calls':>11} {'before s':>9} {'after s':>9} {'ratio':>6}")
    for name, spec in specs:
        runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
        for _ in range(repeat):
            for side, tree in (("before", base), ("after", TREE)):
                r = _run(tree, spec, False)
                if isinstance(r, str):
                    print(f"{name} {side}: {r}")
                    return
                runs[side].append(r)
        b, a = runs["before"][0], runs["after"][0]
        tb = statistics.median(float(r["seconds"]) for r in runs["before"])  # type: ignore[arg-type]
        ta = statistics.median(float(r["seconds"]) for r in runs["after"])  # type: ignore[arg-type]
        print(f"{name:<24} {b['shapes']:>5} -> {a['shapes']:<5} {b['cells']:>7} -> {a['cells']:<7} "
              f"{b['calls']:>4} -> {a['calls']:<4} {tb:>9.2f} {ta:>9.2f} {ta / tb:>6.2f}"
              + ("" if b["ok"] and a["ok"] else "  NOT OK"))


def _long() -> None:
    try:
        import torch  # noqa: F401
        use_torch = True
    except ImportError:
        use_torch = False
    print(f"\nthis tree, long kernels, implementation: {'PyTorch' if use_torch else 'symjac.lower'}, one run each")
    for spec, call in LONG:
        r = _run(TREE, spec, False, call if use_torch else None)
        if isinstance(r, str):
            print(f"{spec}: {r}")
            continue
        plan = [tuple(s[-1:]) if len(s) == 3 else tuple(s[2:]) for s in r["plan"]]  # type: ignore[union-attr]
        print(f"{spec}: plan lengths {plan}, cover {float(r['cover_seconds']):.2f} s, verify "  # type: ignore[arg-type]
              f"{float(r['seconds']):.1f} s, {r['calls']} backward calls, ok={r['ok']}")  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", help="the revision to compare against (e.g. a commit on main); none: --long only")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case on each tree (median)")
    parser.add_argument("--adaptive", action="store_true", help="also compare adaptive pools (5, 7x7, 3x3x3)")
    parser.add_argument("--long", action="store_true", help="this tree only: long kernels (1024, 4096)")
    parser.add_argument("--large", action="store_true", help="this tree only: the plan with large=True")
    args = parser.parse_args()
    cases = [(f"{mode} {rank}-D", f'symjac.Pool("{mode}", {(3,) * rank}, stride=1, padding=1)')
             for rank in (1, 2, 3) for mode in ("avg", "max")]
    if args.adaptive:
        cases += [(f"adaptive {spec.split('(', 1)[1][1:4]} {spec.split(', ', 1)[1][:-1]}", spec) for spec in ADAPTIVE]
    if args.base is None:
        _long()
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", TREE, "worktree", "add", "--detach", base, args.base], check=True,
                       capture_output=True)
        try:
            print(f"verify with no shape: {args.base} (before) vs this tree (after), median of {args.repeat}")
            _compare(base, cases, args.repeat)
            if args.large:
                print("\nthis tree, verify(..., large=True) (the plan and its index-width shapes), one run each")
                for _, spec in cases[:6]:
                    print(f"{spec}: {_run(TREE, spec, True)}")
        finally:
            subprocess.run(["git", "-C", TREE, "worktree", "remove", "--force", base], capture_output=True)
    if args.long:
        _long()


if __name__ == "__main__":
    main()
