"""Before and after in one run: benchmarks/cliffs.py's cases and benchmarks/verify.py on two trees.

The base revision is checked out into a temporary git worktree; each tree runs its own copy
of the benchmark scripts with its own ``symjac`` on ``PYTHONPATH`` (a script may read
private modules that a refactor moved). cliffs.py's cases alternate between the trees case
by case, each case in its own process, ``--repeat`` times, so a burst of load on this
shared machine hits both columns alike; the table prints the median seconds and peak RSS
of each side and their ratio. verify.py's output follows for each tree.

Run: python benchmarks/compare.py --base REV [--only SUBSTRING] [--repeat 3] [--no-verify]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)


def _env(tree: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _labels(tree: str, only: str) -> list[str]:
    code = "import sys, json; sys.path.insert(0, sys.argv[1]); import cliffs; print(json.dumps([c[0] for c in cliffs.CASES]))"
    done = subprocess.run([sys.executable, "-c", code, os.path.join(tree, "benchmarks")], capture_output=True,
                          text=True, env=_env(tree), check=True)
    return [label for label in json.loads(done.stdout) if only in label]


def _case(tree: str, label: str, timeout: float) -> dict[str, float] | str:
    try:
        done = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "cliffs.py"), "--child", label],
                              capture_output=True, text=True, timeout=timeout, env=_env(tree))
    except subprocess.TimeoutExpired:
        return f"> {timeout:g} s"
    if done.returncode != 0:
        return "error: " + (done.stderr.strip().splitlines() or ["?"])[-1][:50]
    r: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if r.get("ok") not in (None, True):
        return "NOT OK"
    return r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the revision to compare against (e.g. a commit on main)")
    parser.add_argument("--only", default="", help="cliffs.py cases whose label contains this")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case on each tree (median)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a case may take")
    parser.add_argument("--no-verify", action="store_true", help="skip benchmarks/verify.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="symjac-base-") as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "-C", TREE, "worktree", "add", "--detach", "-q", base, args.base], check=True)
        try:
            trees = {"before": base, "after": TREE}
            labels = [label for label in _labels(TREE, args.only) if label in set(_labels(base, args.only))]
            print(f"{'case':46} {'before s':>9} {'after s':>9} {'after/before':>12} {'RSS MB before/after':>20}")
            for label in labels:
                runs: dict[str, list[dict[str, float] | str]] = {"before": [], "after": []}
                for _ in range(args.repeat):
                    for side, tree in trees.items():
                        runs[side].append(_case(tree, label, args.timeout))
                cells = {}
                for side, got in runs.items():
                    good = [r for r in got if isinstance(r, dict)]
                    if len(good) < len(got):
                        cells[side] = next(r for r in got if isinstance(r, str))
                    else:
                        cells[side] = (statistics.median(r["seconds"] for r in good),
                                       max(r["rss_mb"] for r in good))
                b, a = cells["before"], cells["after"]
                if isinstance(b, tuple) and isinstance(a, tuple):
                    print(f"{label:46} {b[0]:9.3f} {a[0]:9.3f} {a[0] / b[0]:11.2f}x {b[1]:9.0f} / {a[1]:<9.0f}",
                          flush=True)
                else:
                    print(f"{label:46} {b if isinstance(b, str) else f'{b[0]:.3f}':>9} "
                          f"{a if isinstance(a, str) else f'{a[0]:.3f}':>9}", flush=True)
            if not args.no_verify:
                for side, tree in trees.items():
                    print(f"\nbenchmarks/verify.py, {side} ({args.base if side == 'before' else 'this tree'}):",
                          flush=True)
                    subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "verify.py")], env=_env(tree))
        finally:
            subprocess.run(["git", "-C", TREE, "worktree", "remove", "--force", base], check=False)


if __name__ == "__main__":
    main()
