"""Each default input family's share of a verify: seconds, seconds inside the implementation, calls.

For every ``verify`` row of benchmarks/cliffs.py (each in its own process, as cliffs runs it),
``symjac.verify``'s ``stats["family_cost"]`` split by family (the main ``distinct`` pass holds
the forward check, the probed pass and the finite-difference oracle; ``ties`` the probed pass at
tied inputs; the extra families their dense or probed passes), so that a family that adds a cliff
shows in one run. The last columns are symjac's own seconds (the family's total less the
implementation's) and their ratio to the implementation's.

Run: python benchmarks/family_cost.py [--only SUBSTRING] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cliffs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    for label, fn, _ in cliffs.CASES:
        if fn != "case_verify" or args.only not in label:
            continue
        try:
            done = subprocess.run([sys.executable, cliffs.__file__, "--child", label], capture_output=True,
                                  text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{label}: timeout after {args.timeout:.0f} s\n")
            continue
        if done.returncode != 0:
            print(f"{label}: error {(done.stderr.strip().splitlines() or ['?'])[-1][:80]}\n")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        own_all = r["seconds"] - r["impl"]
        print(f"{label}: {r['seconds']:.2f} s, {r['impl']:.2f} s in the implementation, symjac's own {own_all:.2f} s"
              f"{'' if r.get('ok', True) else ' (NOT OK)'}")
        print(f"  {'family':14} {'seconds':>8} {'share':>6} {'impl s':>7} {'own s':>7} {'own/impl':>8} "
              f"{'bwd calls':>9} {'fwd calls':>9}")
        for family, c in r["families"].items():
            own = c["seconds"] - c["implementation_seconds"]
            ratio = f"{own / c['implementation_seconds']:.1f}x" if c["implementation_seconds"] > 0 else "-"
            print(f"  {family:14} {c['seconds']:8.2f} {c['seconds'] / r['seconds']:6.0%} "
                  f"{c['implementation_seconds']:7.2f} {own:7.2f} {ratio:>8} "
                  f"{c['backward_calls']:9d} {c['forward_calls']:9d}")
        rest = r["seconds"] - sum(c["seconds"] for c in r["families"].values())
        print(f"  {'(outside)':14} {rest:8.2f} {rest / r['seconds']:6.0%}   plan, inputs, report\n", flush=True)


if __name__ == "__main__":
    main()
