"""Framework adapters: configurations and wall time of verifying each adapter's grid.

For every installed framework, prints the number of configurations of ``grid`` (default
``small``), how many (configuration, dtype) pairs were verified in float32 and float64 (known
framework defects and missing kernels skipped, as the tests do), the findings (expected 0), and
the wall time and pairs per second. ONNX Runtime is forward only: its forward is compared with
the exact one instead (as in tests/test_frameworks_onnxruntime.py).

Run: python benchmarks/frameworks.py [small|full] [torch jax tensorflow onnxruntime]
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

import symjac

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from framework_checks import forward_matches, runnable  # noqa: E402

REQUIRES = {"torch": "torch", "jax": "flax", "tensorflow": "keras", "onnxruntime": "onnxruntime"}


def bench(name: str, grid: str) -> None:
    module = importlib.import_module(f"symjac.frameworks.{name}")
    start = time.perf_counter()
    configs = runnable(module, grid)
    listed = time.perf_counter() - start
    pairs = findings = 0
    start = time.perf_counter()
    for config, dtypes in configs:
        spec, impl = module.make(config)
        for dtype in dtypes:
            pairs += 1
            if impl.backward is None:
                from symjac.verifiers.pool._inputs import distinct_input

                x = distinct_input(symjac.resolve(spec, config.input_shape), np.dtype(dtype), 0)
                findings += forward_matches(spec, impl.forward, x) is not None
            else:
                report = symjac.verify(spec, forward=impl.forward, backward=impl.backward,
                                       input_shape=config.input_shape, dtype=dtype)
                findings += not report.ok
    took = time.perf_counter() - start
    print(f"{name:12s} {grid}: {len(configs):4d} configurations ({listed:5.1f} s to list), {pairs:4d} "
          f"(configuration, dtype) pairs, {findings} findings, {took:6.1f} s, {pairs / took:5.1f} pairs/s")


def main() -> None:
    grid = sys.argv[1] if len(sys.argv) > 1 else "small"
    names = sys.argv[2:] or list(REQUIRES)
    symjac.verify(symjac.Pool("max", 2), backward=lambda x, dy: x, input_shape=(2, 2))  # warm SymPy up
    for name in names:
        if importlib.util.find_spec(REQUIRES[name]) is None:
            print(f"{name:12s} not installed")
            continue
        bench(name, grid)


if __name__ == "__main__":
    main()
