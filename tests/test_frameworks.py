"""The adapter protocol without any framework: Impl/Config, the missing-framework error, seeded
generation, and a user adapter for a framework symjac does not know (NumPy itself)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import symjac
from symjac.frameworks import Config, FrameworkMissing, Impl, Unsupported
from symjac.frameworks._adapter import generate, label, require


def test_importing_the_adapters_imports_no_framework():
    code = ("import sys, symjac.frameworks, symjac.frameworks.torch, symjac.frameworks.jax, "
            "symjac.frameworks.tensorflow, symjac.frameworks.onnxruntime\n"
            "print(sorted(m for m in ('torch', 'jax', 'flax', 'tensorflow', 'keras', 'onnx', 'onnxruntime') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module, extra", [("torch", "torch"), ("jax", "jax"), ("flax.linen", "jax"),
                                           ("tensorflow", "tensorflow"), ("keras", "tensorflow"),
                                           ("onnxruntime", "onnx")])
def test_a_missing_framework_names_the_pip_extra(monkeypatch, module, extra):
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, module.split(".")[0], None)  # makes `import module` raise ImportError
    with pytest.raises(FrameworkMissing, match=rf"pip install 'symjac\[{extra}\]'") as info:
        require(module)
    assert isinstance(info.value, ImportError) and isinstance(info.value, symjac.SymjacError)


def test_ready_made_op_without_its_framework_raises_framework_missing(monkeypatch):
    import symjac.frameworks.torch as sjt

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(FrameworkMissing, match="symjac\\[torch\\]"):
        sjt.max_pool2d(kernel_size=2)


def test_unsupported_is_a_symjac_error_and_not_implemented():
    assert issubclass(Unsupported, symjac.SymjacError) and issubclass(Unsupported, NotImplementedError)


def test_generate_is_seeded_distinct_and_drops_invalid_geometry():
    def family(rng):
        k = int(rng.integers(1, 6))  # k = 5 > L = 4 has no valid window: must be drawn again
        return Config("pool", {"k": k}, (1, 1, 4), label("pool", k=k))

    build = lambda c: (symjac.Pool("max", (c.kwargs["k"],)), None)
    first = list(generate("small", [family], build))
    assert first == list(generate("small", [family], build))
    assert sorted(c.kwargs["k"] for c in first) == [1, 2, 3, 4]  # every distinct valid k, then the family runs dry
    with pytest.raises(symjac.SymjacError, match="grid='huge'"):
        list(generate("huge", [family], build))


def test_label():
    assert label("max_pool2d", k=(3, 3), s=2, ceil=True, d=None, pad=False) == "max_pool2d k3x3 s2 ceil"


# ------------------------------------------------------------------ a user adapter


def numpy_max_pool_1d(k):
    """A 'framework' symjac has no adapter for: NumPy, with a hand-written backward."""

    def forward(x):
        windows = np.lib.stride_tricks.sliding_window_view(x, k, axis=-1)[..., ::k, :]
        return windows.max(axis=-1)

    def backward(x, dy, scale=1.0, drop=False):
        dx = np.zeros_like(x)
        windows = np.lib.stride_tricks.sliding_window_view(x, k, axis=-1)[..., ::k, :]
        first = windows.argmax(axis=-1)  # ties: the first maximum (a valid Clarke choice)
        for index in np.ndindex(dy.shape):
            if drop and index[-1] == 0:
                continue
            dx[index[:-1] + (index[-1] * k + first[index],)] += scale * dy[index]
        return dx

    return forward, backward


def test_a_user_adapter_is_an_impl_and_verifies():
    forward, backward = numpy_max_pool_1d(2)
    impl = Impl(forward, backward, framework="numpy", op="max_pool1d", kwargs={"k": 2})
    report = symjac.verify(symjac.Pool("max", (2,)), forward=impl.forward, backward=impl.backward,
                           input_shape=(1, 2, 8))
    assert report.ok, report


@pytest.mark.parametrize("broken, category", [({"scale": 2.0}, "wrong_weights"), ({"drop": True}, "missing_windows")])
def test_broken_user_wrappers_are_flagged(broken, category):
    forward, backward = numpy_max_pool_1d(2)
    report = symjac.verify(symjac.Pool("max", (2,)), forward=forward,
                           backward=lambda x, dy: backward(x, dy, **broken), input_shape=(1, 2, 8))
    assert category in report.categories(), report
