"""Native-kernel routes: symjac.verify of a C kernel through the process protocol and ctypes,
beside the same verification of in-process NumPy, in one run.

Average pooling 3x3, stride 1, padding 1 on 1x1xHxW float64 at 64x64 and 256x256, with
forward (so the finite-difference oracle runs too). The C kernel is
contrib/examples/pool.c built with the system compiler (-O2) into a temporary folder;
NumPy is symjac's own lowering (`symjac.lower(spec, shape)`: forward and vjp). Each
cell is the median of --repeat runs (after one warm-up run that builds symjac's caches);
the ratio is route / NumPy (issue 22's target for the process route: <= 2x).

Run: python benchmarks/native.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import symjac
import symjac.frameworks.ctypes as sjc
import symjac.frameworks.process as sjp

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = symjac.Pool("avg", 3, stride=1, padding=1)
SIZES = (64, 256)


def build(out: pathlib.Path) -> tuple[str, str]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("benchmarks/native.py needs a C compiler (cc or gcc)")
    src, inc = ROOT / "contrib" / "examples" / "pool.c", ROOT / "contrib"
    exe, lib = out / "pool", out / "libpool.so"
    subprocess.run([cc, "-std=c99", "-O2", "-I", str(inc), "-o", str(exe), str(src), "-lm"], check=True)
    subprocess.run([cc, "-std=c99", "-O2", "-I", str(inc), "-shared", "-fPIC", "-DSYMJAC_SHARED", "-o", str(lib),
                    str(src), "-lm"], check=True)
    return str(exe), str(lib)


def timed(run: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    report = run()  # warm-up: symjac's geometry/lowering caches, the child started
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        report = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per cell (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe, lib = build(pathlib.Path(tmp))
        print(f"{SPEC!r}, float64, verify with forward; median of {args.repeat}")
        print(f"{'shape':>16} {'numpy s':>9} {'process s':>10} {'ratio':>6} {'ctypes s':>9} {'ratio':>6} "
              f"{'requests':>9} {'MB sent':>8}")
        with sjp.Child(exe) as child:
            for n in SIZES:
                shape = (1, 1, n, n)
                low = symjac.lower(SPEC, shape)
                proc, so = sjp.impl(child, SPEC), sjc.impl(lib, SPEC)
                routes = {}
                for name, fwd, bwd in (("numpy", low.forward, low.vjp), ("process", proc.forward, proc.backward),
                                       ("ctypes", so.forward, so.backward)):
                    before = child.next_id()

                    def run(fwd: Any = fwd, bwd: Any = bwd, shape: tuple[int, ...] = shape) -> symjac.Report:
                        return symjac.verify(SPEC, forward=fwd, backward=bwd, input_shape=shape)

                    seconds, report = timed(run, args.repeat)
                    assert report.ok, report.headline
                    routes[name] = (seconds, child.next_id() - before - 1)
                np_s, (pr_s, requests), (ct_s, _) = routes["numpy"][0], routes["process"], routes["ctypes"]
                per_run = requests // (args.repeat + 1)
                megabytes = per_run * 3 * n * n * 8 / 1e6  # x, dy sent and dx returned, per backward (upper bound)
                print(f"{str(shape):>16} {np_s:9.3f} {pr_s:10.3f} {pr_s / np_s:6.2f} {ct_s:9.3f} {ct_s / np_s:6.2f} "
                      f"{per_run:9d} {megabytes:8.1f}")


if __name__ == "__main__":
    main()
