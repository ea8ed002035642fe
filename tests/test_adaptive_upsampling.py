"""Adaptive upsampling: an output size above the input length (issue 34, deliverable 4).

PyTorch's adaptive pools allow it (``adaptive_avg_pool1d`` of a length-3 input to 5 outputs: windows
``[floor(i*L/o), ceil((i+1)*L/o))`` = [0, 1), [0, 2), [1, 2), [1, 3), [2, 3), overlapping); symjac
refused it ("output size 5 is larger than the input length 3"), so PyTorch's own op could not be
verified there. Expected values here come from PyTorch (float64 forward and autograd backward).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import symjac
from symjac import AdaptivePool

torch = pytest.importorskip("torch")
F = torch.nn.functional

OPS = {("avg", 1): F.adaptive_avg_pool1d, ("avg", 2): F.adaptive_avg_pool2d,
       ("max", 1): F.adaptive_max_pool1d, ("max", 2): F.adaptive_max_pool2d}

#: (spatial, output size): every axis upsampled, or one up and one down (2-D), and o = L + 1, 2L, 2L + 1.
CASES = [((3,), (5,)), ((1,), (4,)), ((2,), (3,)), ((4,), (9,)), ((5,), (7,)),
         ((3, 2), (5, 4)), ((2, 3), (3, 7)), ((1, 4), (3, 5)), ((3, 7), (5, 3)), ((6, 2), (4, 5))]


def _torch(mode: str, x: np.ndarray, dy: np.ndarray, out: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    y = OPS[mode, len(out)](xt, out if len(out) > 1 else out[0])
    (dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))
    return y.detach().numpy(), dx.numpy()


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("spatial, out", CASES)
def test_forward_and_backward_match_pytorch(mode, spatial, out):
    rng = np.random.default_rng(sum(spatial) * 31 + sum(out))
    shape = (2, 3, *spatial)
    # distinct integers (no ties: max routes to one cell) and integer dy: every window of an upsampled
    # axis has 1 or 2 cells, so the exact values are multiples of 1/4 (float64 holds them exactly)
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(np.float64) - 10
    dy = rng.integers(-9, 10, size=(2, 3, *out)).astype(np.float64)
    spec = AdaptivePool(mode, out)
    y_t, dx_t = _torch(mode, x, dy, out)
    y = np.asarray(symjac.forward(spec, x), dtype=np.float64)
    dx = np.asarray(symjac.vjp(spec, x, dy), dtype=np.float64)
    lowered = symjac.lower(spec, shape)
    if all(o > L for L, o in zip(spatial, out)):  # exact
        assert np.array_equal(y, y_t) and np.array_equal(dx, dx_t)
        assert np.array_equal(lowered.forward(x), y_t) and np.array_equal(lowered.vjp(x, dy), dx_t)
    else:  # a downsampled axis divides by 3, ...: both round once or a few times
        assert np.allclose(y, y_t, rtol=1e-14, atol=0) and np.allclose(dx, dx_t, rtol=1e-14, atol=1e-13)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_the_issues_example(mode):
    # adaptive_avg_pool1d(x of length 3, 5): windows [0, 1), [0, 2), [1, 2), [1, 3), [2, 3)
    x = np.array([[[0.0, 2.0, 8.0]]])
    y_t, dx_t = _torch(mode, x, np.array([[[1.0, 10, 100, 1000, 10000]]]), (5,))
    assert y_t.tolist() == ([[[0.0, 1.0, 2.0, 5.0, 8.0]]] if mode == "avg" else [[[0.0, 2.0, 2.0, 8.0, 8.0]]])
    assert np.asarray(symjac.forward(AdaptivePool(mode, (5,)), x), dtype=float).tolist() == y_t.tolist()
    dx = symjac.vjp(AdaptivePool(mode, (5,)), x, np.array([[[1.0, 10, 100, 1000, 10000]]]))
    assert np.asarray(dx, dtype=float).tolist() == dx_t.tolist()


@pytest.mark.parametrize("mode, rank", list(itertools.product(["avg", "max"], [1, 2])))
def test_verify_passes_pytorchs_own_op_upsampling(mode, rank):
    from symjac.frameworks import torch as adapters

    out = (5,) if rank == 1 else (5, 4)
    spec, impl = getattr(adapters, f"adaptive_{mode}_pool{rank}d")(out if rank > 1 else out[0])
    shape = (2, 3, 3) if rank == 1 else (2, 3, 3, 6)  # axis 0 upsampled (3 -> 5); in 2-D axis 1 down (6 -> 4)
    report = symjac.verify(spec, impl, input_shape=shape)
    assert report.ok, report.summary()
    # at defaults the plan holds o - 1 along every axis (module doc of symjac/pool/_cover.py): upsampling too
    report = symjac.verify(spec, impl)
    assert report.ok, report.summary()
    assert any(all(L < o for L, o in zip(sh[2:], out)) for sh in report.stats["coverage_plan"])
