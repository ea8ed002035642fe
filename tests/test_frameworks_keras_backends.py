"""``symjac.frameworks.keras`` on Keras's JAX and PyTorch backends (issue 24): the same ready-made ops, the
same argument mapping, each backend's own autodiff, no glue. The backend is chosen by ``KERAS_BACKEND``
before Keras is imported, so each runs in its own subprocess (both at once)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = '''
import keras
import symjac
import symjac.frameworks.keras as sjk

assert keras.backend.backend() == BACKEND, keras.backend.backend()
spec, impl = sjk.MaxPooling2D(pool_size=3, strides=2, padding="same")
# the mapping is Keras's documentation's, whatever the backend: SAME, channels_last, strides 2
assert spec == symjac.Pool("max", (3, 3), stride=2, padding="same", layout="channels_last"), spec
report = symjac.verify(spec, impl, input_shape=(1, 5, 5, 2), dtype="float32")
# on JAX, lax.reduce_window's max and its gradient route a NaN window's gradient by JAX's own NaN
# handling, a defect JAX's adapter documents for the nonfinite family (tests/test_nonfinite_frameworks.py)
assert report.ok or (BACKEND == "jax" and {f.family for f in report.findings} == {"nonfinite"}), report.headline
assert impl.framework == "keras" and GRADIENT in impl.reproducer, impl.reproducer

spec, impl = sjk.keras_ops_average_pool((2,), strides=1, padding="same")
assert symjac.verify(spec, impl, input_shape=(1, 5, 2)).ok
# Keras averages over the valid cells (exclude_pad): claimed as include_pad, the padded last window's
# weight is 1/2 against Keras's 1/1, a wrong_weights finding
wrong = symjac.verify(symjac.Pool("avg", (2,), stride=1, padding="same", layout="channels_last",
                                  divisor="include_pad"), impl, input_shape=(1, 5, 2))
assert "wrong_weights" in wrong.categories(), wrong.categories()

layer = keras.layers.AveragePooling1D(2, 1, padding="same", dtype="float64")
assert sjk.check(layer, input_shape=(1, 5, 2)).ok
print("ok", BACKEND)
'''


def _available(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


@pytest.mark.slow  # two fresh processes importing Keras and a framework: 30-90 s (the TF backend runs by default)
def test_keras_on_the_jax_and_pytorch_backends():
    pytest.importorskip("keras")  # the parent needs keras too (the scripts import it in their own processes)
    backends = {"jax": ("jax.vjp", ("keras", "jax")), "torch": ("torch.autograd.grad", ("keras", "torch"))}
    runnable = {b: gradient for b, (gradient, modules) in backends.items() if _available(*modules)}
    if not runnable:
        pytest.skip("needs keras with jax or torch")
    procs = {}
    for backend, gradient in runnable.items():
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        code = f"BACKEND = {backend!r}\nGRADIENT = {gradient!r}\n" + SCRIPT
        procs[backend] = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
    for backend, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0 and f"ok {backend}" in out, err[-3000:]
