"""RoI max pooling (issue 31, item 2): the exact forward and Jacobian against the transcribed
torchvision kernel (``tests/roi_reference.py``) and ONNX Runtime's ``MaxRoiPool``, and
``symjac.verify`` at its defaults: the correct implementation passes, the planted defects are
caught and named by box and bin."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import symjac
from symjac._exact import ExactArray
from symjac.frameworks._adapter import Impl
from symjac.pool._geometry import resolved

from roi_reference import RoiPoolBackward, roi_pool_forward

SPECS = [symjac.RoiPool(2), symjac.RoiPool((3, 2)), symjac.RoiPool(2, spatial_scale=Fraction(1, 2)),
         symjac.RoiPool(3, boxes=[(0, 1, 1, 6, 5), (0, -3, -2, 2, 1), (1, 5, 5, 5, 5)], spatial_scale=Fraction(1, 2))]


def _args(spec):
    return spec.rois(), spec.output_size, float(spec.spatial_scale)


def _impl(spec, forward_defect=None, backward_defect=None):
    a = _args(spec)
    return Impl(forward=lambda x: roi_pool_forward(x, *a, **(forward_defect or {}))[0],
                backward=RoiPoolBackward(*a, **(backward_defect or {})), framework="numpy", op="roi_pool")


def _distinct(shape, seed):
    return np.random.default_rng(seed).permutation(int(np.prod(shape))).reshape(shape).astype(np.float64) - 50


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_exact_forward_and_vjp_equal_torchvision_reference(spec):
    for shape in symjac.cover(spec):
        g = resolved(spec, shape)
        x = _distinct(shape, 3)
        ex = ExactArray.from_any(x)
        y = g.operator.exact_forward(g, ex).to_numpy()
        np.testing.assert_array_equal(y, roi_pool_forward(x, *_args(spec))[0])
        dy = np.random.default_rng(4).integers(-8, 8, size=y.shape).astype(np.float64)
        dx = g.operator.exact_vjp(g, ex, ExactArray.from_any(dy), "first").to_numpy()
        np.testing.assert_array_equal(dx, RoiPoolBackward(*_args(spec))(x, dy))


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_exact_forward_equals_onnxruntime_max_roi_pool(spec):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=list(spec.output_size),
                            spatial_scale=float(spec.spatial_scale))
    graph = helper.make_graph([node], "roi", [helper.make_tensor_value_info("X", tp.FLOAT, None),
                                              helper.make_tensor_value_info("rois", tp.FLOAT, None)],
                              [helper.make_tensor_value_info("Y", tp.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = symjac.cover(spec)[-1]
    g = resolved(spec, shape)
    x = _distinct(shape, 5)
    exact = g.operator.exact_forward(g, ExactArray.from_any(x)).to_numpy()
    got = sess.run(None, {"X": x.astype(np.float32), "rois": spec.rois(np.float32)})[0]
    np.testing.assert_array_equal(got.astype(np.float64), exact)  # a max selects an input: exact in float32


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("spec", SPECS[:2], ids=repr)
def test_correct_reference_passes_at_defaults(spec, dtype):
    report = symjac.verify(spec, _impl(spec), dtype=dtype)
    assert report.ok, report


DEFECTS = {
    "spatial_scale ignored": (symjac.RoiPool(2, spatial_scale=Fraction(1, 2)), {"ignore_scale": True}),
    "half to even instead of C's round": (symjac.RoiPool(2), {"half_even": True}),
    "a bin's end rounded down": (symjac.RoiPool((3, 2)), {"end_floor": True}),
}


@pytest.mark.parametrize("name", list(DEFECTS))
def test_planted_defect_caught_at_defaults(name):
    spec, defect = DEFECTS[name]
    report = symjac.verify(spec, _impl(spec, defect, defect))
    assert not report.ok, name
    assert "box " in report.details() and "bin (" in report.details()


def test_backward_never_zeroing_its_output_is_caught():
    spec = symjac.RoiPool(2)
    report = symjac.verify(spec, _impl(spec, None, {"stale": True}))
    assert not report.ok


def test_default_boxes_reach_the_edge_cases():
    """Bins overlap (box 0: 5 rows in 2 bins share row 2), a box outside has empty bins (value 0,
    no gradient), a half rounds away from zero (box 1: x1 = -1/2 -> -1, so its first column bin
    is cut at the map's edge)."""
    spec = symjac.RoiPool(2)
    g = resolved(spec, (2, 1, 6, 7))
    words = g.table.words
    assert "bin (0, 0): rows 0..2" in words[0] and "bin (1, 0): rows 2..4" in words[2]
    assert all("no cell (empty)" in w for w in words[8:12])  # box 2: wholly outside
    x = _distinct((2, 1, 6, 7), 1)
    assert (roi_pool_forward(x, *_args(spec))[0][2] == 0).all()


def test_ties_follow_the_first_maximum():
    """At a tie the exact row is the first maximal cell in row-major order, as torchvision's
    strict > scan (the reference) routes it."""
    spec = symjac.RoiPool(1, boxes=[(0, 0, 0, 2, 1)])
    x = np.array([[[[1.0, 3.0, 3.0], [3.0, 0.0, 1.0]]]])
    dx = symjac.vjp(spec, x, np.ones((1, 1, 1, 1)))
    np.testing.assert_array_equal(np.asarray(dx, dtype=np.float64), RoiPoolBackward(*_args(spec))(x, np.ones((1, 1, 1, 1))))


def test_a_scan_from_a_float32_sentinel_is_caught_in_float64_by_the_extreme_family():
    """torchvision's ``roi_pool_kernel.cpp`` starts each bin's scan at ``maxval = -FLT_MAX`` whatever the
    dtype and takes a cell only when ``x > maxval``. In float64, values below -FLT_MAX (the ``extreme``
    family: near -DBL_MAX) never beat it: the bin is -FLT_MAX and its gradient goes nowhere. The
    reference scan (np.argmax) passes the same family."""
    spec = symjac.RoiPool(2)
    rois, out, scale = _args(spec)
    sentinel = float(np.finfo(np.float32).max)

    def forward(x):
        y, _ = roi_pool_forward(x, rois, out, scale)
        return np.where(y > -sentinel, y, -sentinel).astype(x.dtype)

    def backward(x, dy):
        y, arg = roi_pool_forward(x, rois, out, scale)
        dx = np.zeros_like(x)
        for k, c, ph, pw in np.ndindex(*arg.shape):
            if arg[k, c, ph, pw] >= 0 and y[k, c, ph, pw] > -sentinel:
                n, (r, col) = int(rois[k, 0]), divmod(int(arg[k, c, ph, pw]), x.shape[3])
                dx[n, c, r, col] += dy[k, c, ph, pw]
        return dx

    report = symjac.verify(spec, forward=forward, backward=backward, dtype="float64")
    assert not report.ok and {f.family for f in report.findings} == {"extreme"}, report
    assert symjac.verify(spec, _impl(spec), dtype="float64").ok
