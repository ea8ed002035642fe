"""The coverage plan's cost before and after, in one run: seconds per ``verify`` with no shape.

For avg and max 3x3 (kernel 3 along every axis, stride 1, padding 1) in 1-D, 2-D and 3-D,
``symjac.verify(spec, forward=L.forward, backward=L.vjp)`` (the spec's own lowering
as the implementation, so the figure is symjac's cost) runs on two trees: the base
revision (checked out into a temporary git worktree) and this tree, alternating case
by case, each case in its own process, ``--repeat`` times (median), so a burst of load
on this shared machine hits both columns alike. Also printed: plan shapes, input cells
over the plan, backward calls.

Run: python benchmarks/plan_cost.py --base REV [--repeat 3] [--large]
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

#: Runs in the child process with the tree's own symjac (the base has no plan_cost.py).
CHILD = """
import json, math, sys, time
import symjac
mode, rank, large = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
spec = symjac.Pool(mode, (3,) * rank, stride=1, padding=1)
kw = {"large": True} if large else {}
shapes = symjac.cover(spec, **kw)
lowered = {}

def impl(x):
    if x.shape not in lowered:
        lowered[x.shape] = symjac.lower(spec, x.shape)
    return lowered[x.shape]

t = time.perf_counter()
report = symjac.verify(spec, forward=lambda x: impl(x).forward(x), backward=lambda x, dy: impl(x).vjp(x, dy), **kw)
print(json.dumps({"seconds": time.perf_counter() - t, "ok": report.ok, "shapes": len(shapes),
                  "cells": sum(math.prod(s) for s in shapes), "calls": report.stats["backward_calls"]}))
"""


def _run(tree: str, mode: str, rank: int, large: bool) -> dict[str, object] | str:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(rank), "1" if large else "0"], capture_output=True,
                          text=True, env=env, cwd=tree, timeout=1800)
    if done.returncode != 0:
        return "error: " + (done.stderr.strip().splitlines() or ["?"])[-1][:60]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the revision to compare against (e.g. a commit on main)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case on each tree (median)")
    parser.add_argument("--large", action="store_true", help="this tree only: the plan with large=True")
    args = parser.parse_args()
    cases = [(mode, rank) for rank in (1, 2, 3) for mode in ("avg", "max")]
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", TREE, "worktree", "add", "--detach", base, args.base], check=True,
                       capture_output=True)
        try:
            print(f"verify with no shape: {args.base} (before) vs this tree (after), median of {args.repeat}")
            print(f"{'case':<10} {'shapes':>13} {'cells':>15} {'calls':>11} {'before s':>9} {'after s':>9} {'ratio':>6}")
            for mode, rank in cases:
                runs: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
                for _ in range(args.repeat):
                    for side, tree in (("before", base), ("after", TREE)):
                        r = _run(tree, mode, rank, False)
                        if isinstance(r, str):
                            print(f"{mode} {rank}-D {side}: {r}")
                            return
                        runs[side].append(r)
                b, a = runs["before"][0], runs["after"][0]
                tb = statistics.median(float(r["seconds"]) for r in runs["before"])  # type: ignore[arg-type]
                ta = statistics.median(float(r["seconds"]) for r in runs["after"])  # type: ignore[arg-type]
                print(f"{mode} {rank}-D{'':<4} {b['shapes']:>5} -> {a['shapes']:<5} {b['cells']:>6} -> {a['cells']:<6} "
                      f"{b['calls']:>4} -> {a['calls']:<4} {tb:>9.2f} {ta:>9.2f} {ta / tb:>6.2f}"
                      + ("" if b["ok"] and a["ok"] else "  NOT OK"))
            if args.large:
                print("\nthis tree, verify(..., large=True) (the plan and its index-width shapes), one run each")
                for mode, rank in cases:
                    r = _run(TREE, mode, rank, True)
                    print(f"{mode} {rank}-D: {r}")
        finally:
            subprocess.run(["git", "-C", TREE, "worktree", "remove", "--force", base], capture_output=True)


if __name__ == "__main__":
    main()
