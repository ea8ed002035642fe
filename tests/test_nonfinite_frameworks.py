"""What PyTorch, JAX, TensorFlow and ONNX Runtime do at NaN and ±inf windows: the evidence the
conventions of ``symjac/pool/_ops/{avg,max,lp}.py`` are written from (docs/coverage.md, "NaN and
±inf"), each measured here with the framework itself, and symjac's verdict on each (issue 34).

Windows of 3 cells, stride 3, float32; ``dx`` is the backward of ``sum(y)`` (dy = 1 per window)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import symjac

nan, inf = np.nan, np.inf
WINDOWS = [[nan, 1, 2], [1, nan, 2], [1, 2, nan], [nan, nan, 1], [inf, 1, 2], [1, inf, inf],
           [-inf, -inf, -inf], [inf, -inf, 1], [inf, nan, 1]]
X = np.array(WINDOWS, dtype=np.float32).reshape(1, 1, -1)


def rows(a):
    return np.asarray(a, dtype=np.float64).reshape(len(WINDOWS), -1)


def test_pytorch_propagates_nan_and_sends_its_gradient_to_the_last_nan_cell():
    torch = pytest.importorskip("torch")
    t = torch.tensor(X, requires_grad=True)
    y = torch.nn.functional.max_pool1d(t, 3)
    y.backward(torch.ones_like(y))
    np.testing.assert_array_equal(y.detach().numpy().ravel(), [nan, nan, nan, nan, inf, inf, -inf, inf, nan])
    np.testing.assert_array_equal(rows(t.grad), [[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 0],
                                                 [1, 0, 0], [1, 0, 0], [0, 1, 0]])
    t = torch.tensor(X, requires_grad=True)
    y = torch.nn.functional.avg_pool1d(t, 3)
    y.backward(torch.ones_like(y))
    np.testing.assert_array_equal(y.detach().numpy().ravel(), [nan, nan, nan, nan, inf, inf, -inf, nan, nan])
    np.testing.assert_allclose(rows(t.grad), np.full((len(WINDOWS), 3), 1 / 3), rtol=1e-7)  # 1/D at every x
    t = torch.tensor(X, requires_grad=True)
    y = torch.nn.functional.lp_pool1d(t, 2, 3)
    y.backward(torch.ones_like(y))
    g = rows(t.grad)
    assert np.isnan(g[0]).all() and g[4, 1:].tolist() == [0, 0] and np.isnan(g[4, 0])  # [inf, 1, 2]: 0 at 1 and 2


def test_jax_propagates_nan_but_routes_its_gradient_by_select_ge():
    jax = pytest.importorskip("jax")
    from jax import lax

    def pool(t):
        return lax.reduce_window(t, -np.inf, lax.max, (1, 1, 3), (1, 1, 3), "VALID")

    y, vjp = jax.vjp(pool, X)
    (dx,) = vjp(np.ones_like(np.asarray(y)))
    np.testing.assert_array_equal(np.asarray(y).ravel(), [nan, nan, nan, nan, inf, inf, -inf, inf, nan])
    # [nan, 1, 2] -> the 2 and [inf, nan, 1] -> the 1: neither a NaN cell nor a maximum
    np.testing.assert_array_equal(rows(dx)[[0, 1, 2, 3, 8]], [[0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1], [0, 0, 1]])
    import symjac.frameworks.jax as sjj

    rep = symjac.verify(*sjj.max_pool((3,), (2,)), dtype="float32")
    assert not rep.ok
    assert {f.category for f in rep.findings} <= {"wrong_cells", "tie_not_subgradient", "partial_windows"}
    assert all(f.family == "nonfinite" for f in rep.findings)
    assert symjac.verify(*sjj.avg_pool((3,), (2,)), dtype="float32").ok


def _max_pool_with_indices(x):
    """ONNX Runtime's MaxPool asked for its Indices output too (another kernel than Y alone)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["X"], ["Y", "I"], kernel_shape=[3], strides=[3])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None] * 3)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("I", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})


def test_onnxruntime_ignores_nan_or_propagates_it_from_a_windows_first_cell_only():
    pytest.importorskip("onnxruntime")
    import symjac.frameworks.onnxruntime as sjo
    from symjac.frameworks.onnxruntime import run_node

    # Y alone: NaN ignored, and a window of -inf only is -max (as TensorFlow's)
    y = run_node("MaxPool", {"kernel_shape": [3], "strides": [3]})(X)
    np.testing.assert_array_equal(y.ravel(), [2, 2, 2, 1, inf, inf, -np.finfo(np.float32).max, inf, inf])
    # with Indices: a NaN counts in the first cell only ([nan, 1, 2] is NaN, [1, nan, 2] is 2)
    y, index = _max_pool_with_indices(X)
    np.testing.assert_array_equal(y.ravel(), [nan, 2, 2, nan, inf, inf, -inf, inf, inf])
    np.testing.assert_array_equal(index.ravel() % 3, [0, 2, 1, 0, 0, 1, 0, 0, 0])
    rep = symjac.verify(*sjo.max_pool([3], strides=[2]), dtype="float32")
    assert not rep.ok
    finding = next(f for f in rep.findings if f.category == "forward_values")
    assert finding.family == "nonfinite"
    assert symjac.verify(*sjo.average_pool([3], strides=[2]), dtype="float32").ok


def test_tensorflow_ignores_nan_and_gives_minus_max_for_a_window_of_minus_inf():
    if os.environ.get("SYMJAC_SKIP_TF"):
        pytest.skip("SYMJAC_SKIP_TF")
    tf = pytest.importorskip("tensorflow")
    t = tf.constant(np.transpose(X, (0, 2, 1)))
    with tf.GradientTape() as tape:
        tape.watch(t)
        y = tf.nn.max_pool1d(t, 3, 3, "VALID")
    dx = tape.gradient(y, t, tf.ones_like(y)).numpy()
    y = y.numpy().ravel()
    assert y[0] == 2 and y[6] == -np.finfo(np.float32).max  # [nan, 1, 2] -> 2; [-inf]*3 -> -max, not -inf
    assert rows(np.transpose(dx, (0, 2, 1)))[0].tolist() == [1, 0, 0]  # ... yet its gradient goes to the NaN
    import symjac.frameworks.tensorflow as sjt

    rep = symjac.verify(*sjt.max_pool1d(3, 2, "VALID"), dtype="float32")
    assert not rep.ok and "forward_values" in rep.categories()
    assert symjac.verify(*sjt.avg_pool1d(3, 2, "VALID"), dtype="float32").ok


def test_pytorch_channels_last_max_pool3d_indexes_an_all_minus_inf_window_into_the_first_plane():
    # Found by tests/test_verify.py's PyTorch grid at symjac's nonfinite family (torch 2.13, CPU). A window
    # whose cells are all -inf has no cell above the kernel's initial -inf, so its index stays the initial
    # one; in the channels_last_3d kernel with 2 or more channels that index lacks the window's depth
    # offset: it points at depth 0 (index = d·H·W + h·W + w), outside the window, and the backward sends
    # the gradient there. The contiguous kernel gives the window's own first cell. Kernel (1, 2, 1): each
    # window reads one depth; shape (N, C, D, H, W) = (1, 2, 2, 2, 1): one window per depth and channel.
    torch = pytest.importorskip("torch")
    x = torch.zeros(1, 2, 2, 2, 1)
    x[:, :, 1] = -inf  # depth 1: two -inf cells
    kw = {"kernel_size": (1, 2, 1), "stride": 1, "return_indices": True}
    _, contiguous = torch.nn.functional.max_pool3d(x, **kw)
    _, last = torch.nn.functional.max_pool3d(x.contiguous(memory_format=torch.channels_last_3d), **kw)
    assert contiguous[0, 0].ravel().tolist() == [0, 2]  # depth 0: cell (0, 0, 0); depth 1: its first cell = 2
    if last[0, 0].ravel().tolist() == [0, 2]:
        pytest.skip("this PyTorch indexes channels_last all -inf windows in their own plane: fixed")
    assert last[0, 0].ravel().tolist() == [0, 0]  # depth 1's window points at depth 0's cell
    t = x.contiguous(memory_format=torch.channels_last_3d).requires_grad_(True)
    y = torch.nn.functional.max_pool3d(t, (1, 2, 1), 1)
    dy = torch.zeros_like(y)
    dy[0, 0, 1] = 1.0  # depth 1's window of channel 0 only
    y.backward(dy)
    assert t.grad[0, 0, 0, 0, 0] == 1 and t.grad[0, 0, 1].abs().sum() == 0  # sent outside its window
    spec = symjac.Pool("max", (1, 2, 1), stride=1)

    def backward(xa, dya):
        tt = torch.from_numpy(xa.copy()).contiguous(memory_format=torch.channels_last_3d).requires_grad_(True)
        torch.nn.functional.max_pool3d(tt, (1, 2, 1), 1).backward(torch.from_numpy(dya.copy()))
        return tt.grad.numpy().copy()

    report = symjac.verify(spec, backward=backward, x=x.numpy().astype(np.float64))
    # the tied -inf window's gradient lands on depth 0's cell (0,0,0,0,0), outside its Clarke set, and the
    # report shows it there
    assert report.categories() == ["tie_not_subgradient"] and "(0,0,0,0,0)  1.0" in str(report), str(report)
