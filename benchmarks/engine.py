"""Engine speed and memory: exact jacobian + vjp for 3x3 stride-1 SAME pooling.

For avg and max on 1x1xHxW with H = W = 16, 64, 256, prints seconds for
`symjac.jacobian` + `symjac.vjp`, nnz and peak traced memory, then the ratio to
`sympy.Matrix(outputs).jacobian(inputs)` at 16x16, measured in the same run.

Run: python benchmarks/engine.py
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import sympy

import symjac
from symjac.pool import _caches


def dyadic_input(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Distinct dyadic values (exact in every float dtype): a permutation of k/4."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) - n // 2) * 0.25


def run(mode: str, size: int) -> tuple[float, int, float]:
    spec = symjac.Pool(mode, 3, stride=1, padding="same")
    shape = (1, 1, size, size)
    x = dyadic_input(shape, 0)
    dy = dyadic_input(shape, 1)

    def once() -> int:
        # Cold: no cached geometry, classes or SymPy templates.
        _caches.clear_caches()
        jac = symjac.jacobian(spec, x)
        symjac.vjp(spec, x, dy)
        return jac.nnz

    t0 = time.perf_counter()
    nnz = once()
    seconds = time.perf_counter() - t0
    tracemalloc.start()  # a second run for memory: tracing slows allocation
    once()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, nnz, peak / 2**20


def sympy_baseline(mode: str, size: int) -> float:
    xs = sympy.Matrix(size, size, lambda i, j: sympy.Symbol(f"x{i}_{j}"))
    outs = []
    for i in range(size):
        for j in range(size):
            cells = [xs[a, b] for a in range(i - 1, i + 2) for b in range(j - 1, j + 2) if 0 <= a < size and 0 <= b < size]
            outs.append(sympy.Add(*cells) / len(cells) if mode == "avg" else sympy.Max(*cells))
    t0 = time.perf_counter()
    sympy.Matrix(outs).jacobian(list(xs))
    return time.perf_counter() - t0


def main() -> None:
    print(f"{'mode':4} {'HxW':>8} {'seconds':>9} {'nnz':>8} {'peak MiB':>9}")
    results = {}
    for mode in ("avg", "max"):
        for size in (16, 64, 256):
            seconds, nnz, peak = run(mode, size)
            results[mode, size] = seconds
            print(f"{mode:4} {size:>4}x{size:<3} {seconds:9.3f} {nnz:8d} {peak:9.1f}")
    print()
    for mode in ("avg", "max"):
        base = sympy_baseline(mode, 16)
        print(f"{mode}: sympy Matrix.jacobian at 16x16 {base:.3f} s; symjac {results[mode, 16]:.4f} s; "
              f"ratio {base / results[mode, 16]:.0f}x")
        print(f"{mode}: growth 256^2 vs 64^2 (16x the nnz): {results[mode, 256] / results[mode, 64]:.1f}x time")


if __name__ == "__main__":
    main()
