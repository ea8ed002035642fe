"""``--impl`` as a new user writes it (issue 24, item 6): a file that imports its sibling module,
and a ``torch.autograd.Function`` subclass as the implementation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cli_runner import symjac

ROOT = Path(__file__).resolve().parent.parent
MAX_4X4 = str(ROOT / "specs" / "seeds" / "textbook_4x4_max.toml")


def verify(*args, cwd):
    return symjac("verify", *args, cwd=cwd)


def test_an_impl_file_imports_its_sibling_module_without_pythonpath(tmp_path):
    impls = tmp_path / "impls"
    impls.mkdir()
    (impls / "pool_helpers_sibling.py").write_text(
        "import numpy as np\n\n"
        "def backward(x, dy):\n"
        "    # max 2x2 stride 2, one maximum per window: dy goes to the argmax of each window\n"
        "    h, w = x.shape\n"
        "    win = x.reshape(h // 2, 2, w // 2, 2).transpose(0, 2, 1, 3).reshape(h // 2, w // 2, 4)\n"
        "    hot = np.eye(4)[win.argmax(-1)] * dy[..., None]\n"
        "    return hot.reshape(h // 2, w // 2, 2, 2).transpose(0, 2, 1, 3).reshape(h, w).astype(x.dtype)\n")
    (impls / "mine.py").write_text("from pool_helpers_sibling import backward  # noqa: F401\n")
    r = verify(MAX_4X4, "--impl", str(impls / "mine.py"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("PASS textbook_4x4_max")
    assert str(impls) not in sys.path  # the folder was on it only while the file loaded


def test_a_torch_autograd_function_is_an_implementation(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "mypools.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\n"
        "class MaxPool2x2(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        y, idx = F.max_pool2d(x[None], 2, return_indices=True)\n"
        "        ctx.save_for_backward(idx)\n"
        "        ctx.shape = x[None].shape\n"
        "        return y[0]\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (idx,) = ctx.saved_tensors\n"
        "        return F.max_unpool2d(g[None], idx, 2, output_size=ctx.shape[-2:])[0]\n")
    r = verify(MAX_4X4, "--impl", "mypools.py:MaxPool2x2", cwd=tmp_path)
    # the spec file's [expect] (by hand): forward [[6, 7], [7, 8]], gradient dy at each window's maximum
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("PASS textbook_4x4_max")


def test_an_impl_objects_jvp_is_checked_through_the_command_line(tmp_path):
    """``--impl`` reaches every derivative the object defines, as ``symjac.verify(spec, impl)`` does
    (issue 34): a right backward beside a wrong jvp is a finding naming the jvp, exit 1."""
    (tmp_path / "mine.py").write_text(
        "import numpy as np\n\n"
        "def _route(x):\n"
        "    # max 2x2 stride 2 on a 4x4 map: the flat argmax (first maximum) of each window\n"
        "    win = x.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(2, 2, 4)\n"
        "    return np.eye(4)[win.argmax(-1)]\n\n"
        "def _back(hot, dy):\n"
        "    return (hot * dy[..., None]).reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(4, 4)\n\n"
        "def forward(x):\n"
        "    return x.reshape(2, 2, 2, 2).max(axis=(1, 3))\n\n"
        "def backward(x, dy):\n"
        "    return _back(_route(x), dy).astype(x.dtype)\n\n"
        "def jvp(x, t):\n"
        "    win = t.reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(2, 2, 4)\n"
        "    return (2 * (_route(x) * win).sum(-1)).astype(x.dtype)  # planted: twice J t\n")
    r = verify(MAX_4X4, "--impl", str(tmp_path / "mine.py"), cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("FAIL textbook_4x4_max") and "jvp" in r.stdout
