"""RoI Align (issue 31, item 2): exact forward and Jacobian against independent oracles, and
``symjac.verify`` at its defaults against a correct torchvision-style implementation (no false
alarm) and the planted defects the issue names (each caught, named by its box and bin).

Oracles: ``tests/roi_reference.py`` (torchvision's ``roi_align`` CPU kernel transcribed loop by
loop in NumPy, in the input's dtype: it reads nothing of symjac) and ONNX Runtime's ``RoiAlign``
(``mode="avg"``, both ``coordinate_transformation_mode``s). At dyadic boxes and small integer
inputs every float operation of the reference is exact (coordinates, weights k/2^m, sums under
2^24), so float64 agrees with the exact values to the bit.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import symjac
from symjac._exact import ExactArray
from symjac.frameworks._adapter import Impl
from symjac.pool._geometry import resolved

from roi_reference import RoiAlignBackward, roi_align_forward

SPECS = [
    symjac.RoiAlign(2),
    symjac.RoiAlign(2, aligned=True),
    symjac.RoiAlign(2, sampling_ratio=2),
    symjac.RoiAlign((3, 2), aligned=True, sampling_ratio=3),
    symjac.RoiAlign((2, 3), spatial_scale=Fraction(1, 2)),
    symjac.RoiAlign(2, boxes=[(0, 2, 2, 9, 7), (1, -3, -3, 4, 4), (0, 8, 6, 16, 14), (0, 1, 1, 1, 5)],
                    spatial_scale=Fraction(1, 2), aligned=True),
]


def _args(spec):
    return spec.rois(), spec.output_size, float(spec.spatial_scale), spec.sampling_ratio, spec.aligned


def _impl(spec, forward_defect=None, backward_defect=None):
    a = _args(spec)
    return Impl(forward=lambda x: roi_align_forward(x, *a, **(forward_defect or {})),
                backward=RoiAlignBackward(*a, **(backward_defect or {})), framework="numpy", op="roi_align")


def _exact_args(spec):
    rois = np.array([[Fraction(v) for v in box] for box in spec.boxes], dtype=object)
    return rois, spec.output_size, spec.spatial_scale, spec.sampling_ratio, spec.aligned


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_exact_forward_and_vjp_equal_torchvision_reference(spec):
    """Exact y and J^T dy equal the transcribed torchvision kernel run in exact rational arithmetic
    (``Fraction``), element by element; and, run in float64, within its rounding."""
    rng = np.random.default_rng(31)
    for shape in symjac.cover(spec):
        g = resolved(spec, shape)
        x = rng.integers(-64, 64, size=shape)
        xf = np.vectorize(Fraction, otypes=[object])(x)
        y = g.operator.exact_forward(g, ExactArray.from_any(x)).to_fractions()
        assert (y == roi_align_forward(xf, *_exact_args(spec))).all()
        dy = rng.integers(-8, 8, size=y.shape)
        dx = g.operator.exact_vjp(g, None, ExactArray.from_any(dy), "first").to_fractions()
        assert (dx == RoiAlignBackward(*_exact_args(spec))(xf, np.vectorize(Fraction, otypes=[object])(dy))).all()
        np.testing.assert_allclose(roi_align_forward(x.astype(np.float64), *_args(spec)),
                                   y.astype(np.float64), rtol=0, atol=1e-12)
        jac = symjac.jacobian(spec, x.astype(np.float64))  # J^T dy through the public sparse Jacobian too
        dense = np.zeros(jac.shape, dtype=object)
        dense[jac.rows, jac.cols] = [Fraction(int(jac.table[i].p), int(jac.table[i].q)) for i in jac.value_ids]
        assert (dense.T.dot(dy.reshape(-1).astype(object)) == dx.reshape(-1)).all()


def _onnx_roi_align(spec, x):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode="avg",
                            output_height=spec.output_size[0], output_width=spec.output_size[1],
                            sampling_ratio=max(spec.sampling_ratio, 0), spatial_scale=float(spec.spatial_scale),
                            coordinate_transformation_mode="half_pixel" if spec.aligned else "output_half_pixel")
    graph = helper.make_graph([node], "roi", [helper.make_tensor_value_info("X", tp.FLOAT, None),
                                              helper.make_tensor_value_info("rois", tp.FLOAT, None),
                                              helper.make_tensor_value_info("batch_indices", tp.INT64, None)],
                              [helper.make_tensor_value_info("Y", tp.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rois = spec.rois(np.float32)
    return sess.run(None, {"X": x.astype(np.float32), "rois": rois[:, 1:],
                           "batch_indices": rois[:, 0].astype(np.int64)})[0]


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_exact_forward_equals_onnxruntime(spec):
    """ONNX Runtime's RoiAlign (float32) within float32 rounding of the exact forward: bit-equal
    where the bins are dyadic (every operation exact), else within 8 ulps of the window's Σ|x|."""
    rng = np.random.default_rng(7)
    shape = symjac.cover(spec)[-1]
    g = resolved(spec, shape)
    x = rng.integers(-64, 64, size=shape).astype(np.float64)
    exact = g.operator.exact_forward(g, ExactArray.from_any(x)).to_numpy()
    got = _onnx_roi_align(spec, x).astype(np.float64)
    assert got.shape == exact.shape
    np.testing.assert_allclose(got, exact, rtol=0, atol=8 * 2.0**-24 * 64 * 4)


# two cells in the default run, the whole grid with --run-slow
GRID = [pytest.param(spec, dtype, id=f"{spec!r}-{dtype}",
                     marks=() if (i, dtype) in ((0, "float64"), (1, "float32")) else pytest.mark.slow)
        for i, spec in enumerate(SPECS) for dtype in ("float64", "float32")]


@pytest.mark.parametrize(("spec", "dtype"), GRID)
def test_correct_reference_passes_at_defaults(spec, dtype):
    """No false alarm: the correct torchvision-style implementation passes at the coverage plan."""
    report = symjac.verify(spec, _impl(spec), dtype=dtype)
    assert report.ok, report


def test_a_point_on_a_grid_line_that_float_lands_below_is_no_false_alarm():
    """Box 1 of the defaults with 3 bins of 4/3 and 2 points each: the point y = 1 is exact, but a float
    implementation forms it from thirds and lands just below, reading row 0 with a weight of about
    1e-16 (and row 1 with 1 - 1e-16). That is the rounding of its coordinates, not a defect: the
    torchvision transcription passed in float32 and was reported ``wrong_cells`` in float64."""
    spec = symjac.RoiAlign((3, 2), sampling_ratio=2)
    rois, out, scale, ratio, aligned = _args(spec)
    ys = [float(rois[1, 2]) + ph * (float(rois[1, 4] - rois[1, 2]) / 3) + (iy + 0.5) * (4 / 3) / 2
          for ph in range(3) for iy in range(2)]
    assert any(0 < 1 - y < 1e-15 for y in ys)  # the float point the exact value 1 becomes
    for dtype in ("float64", "float32"):
        report = symjac.verify(spec, _impl(spec), dtype=dtype)
        assert report.ok, report


def test_every_derivative_route_reads_roi_align():
    """JVP, double backward and vmap are checked like any operator's (no branch on the name), and a
    wrong JVP (the aligned offset missing) or double backward (a clamp at 0) is caught."""
    spec = symjac.RoiAlign(2, aligned=True)
    a = _args(spec)

    def fwd(x, **kw):
        return roi_align_forward(x, *a, **kw)

    def vmap(in_axis, out_axis):
        def batched(fn):
            def call(*arrays):
                parts = zip(*[np.moveaxis(v, in_axis, 0) for v in arrays])
                return np.moveaxis(np.stack([fn(*p) for p in parts]), 0, out_axis)
            return call
        return {"forward": batched(fwd), "backward": batched(RoiAlignBackward(*a)),
                "jvp": batched(lambda x, t: fwd(t))}

    good = Impl(forward=fwd, backward=RoiAlignBackward(*a), framework="numpy", op="roi_align",
                jvp=lambda x, t: fwd(t), double_backward=lambda x, dy, v: (np.zeros_like(x), fwd(v)), vmap=vmap)
    report = symjac.verify(spec, good)
    assert report.ok, report
    assert "JVP matches" in str(report) and "double backward matches" in str(report) and "vmap" in str(report)
    bad = Impl(forward=fwd, backward=RoiAlignBackward(*a), framework="numpy", op="roi_align",
               jvp=lambda x, t: fwd(t, offset_missing=True),
               double_backward=lambda x, dy, v: (np.zeros_like(x), fwd(v, low_clamp=0.0)))
    report = symjac.verify(spec, bad)
    assert not report.ok
    text = report.details()
    assert "jvp" in text and "double backward" in text


# The planted defects of the issue, each at symjac's defaults (no shape, no input given).
DEFECTS = {
    "aligned offset missing": (symjac.RoiAlign(2, aligned=True), {"offset_missing": True}, {"offset_missing": True}),
    "clamp at 0 instead of -1": (symjac.RoiAlign(2), {"low_clamp": 0.0}, {"low_clamp": 0.0}),
    "a point at y = H dropped (>= H)": (symjac.RoiAlign(2), {"high_strict": False}, {"high_strict": False}),
    "a point at y = H dropped, aligned": (symjac.RoiAlign(2, aligned=True), {"high_strict": False},
                                          {"high_strict": False}),
    "spatial_scale ignored": (symjac.RoiAlign(2, spatial_scale=Fraction(1, 2)), {"ignore_scale": True},
                              {"ignore_scale": True}),
    "backward never zeroes its output": (symjac.RoiAlign(2), None, {"stale": True}),
    "backward's bin count differs from the forward's": (symjac.RoiAlign(2, aligned=True), None,
                                                        {"grid_floor": True}),
    "backward's bin count differs, unaligned": (symjac.RoiAlign((3, 2)), None, {"grid_floor": True}),
}


@pytest.mark.parametrize("name", list(DEFECTS))
def test_planted_defect_caught_at_defaults(name):
    spec, fwd_defect, bwd_defect = DEFECTS[name]
    report = symjac.verify(spec, _impl(spec, fwd_defect, bwd_defect))
    assert not report.ok, name
    if bwd_defect and "stale" in bwd_defect:
        assert "nondeterministic" in report.categories() or not report.ok
    else:  # findings name the box, the bin and its sample points
        assert "box " in report.details() and "bin (" in report.details() and "sample points" in report.details()


def test_default_boxes_reach_the_edge_cases():
    """The default boxes (drawn on a 6 x 7 map, derivation in roi_align.DEFAULT_BOXES's comment)
    hold sample points below -1, at exactly -1, in (-1, 0), exactly on y = H and x = W, beyond
    H, a box wholly outside (its bins exactly 0), a point box and an inverted box, and four boxes
    on each batch item."""
    spec = symjac.RoiAlign(2)
    g = resolved(spec, (2, 1, 6, 7))
    words = " ".join(g.table.words)
    # box 2's bin (1, 1): its sample point is exactly (y, x) = (H, W) = (6, 7), inside (torchvision's y > H)
    assert "box 2 (batch item 1, x 11/2..15/2, y 9/2..13/2), bin (1, 1): sample points y [6], x [7]" in words
    assert "y [-3/2 (outside), -1/2], x [-2 (outside), -1]" in words  # box 1: below -1, (-1, 0), exactly -1
    assert "y [13/2 (outside)]" in words  # box 3: beyond H
    assert sorted(b[0] for b in spec.boxes) == [0, 0, 0, 0, 1, 1, 1, 1]
    wholly_outside = [w for w, text in enumerate(g.table.words) if text.startswith("box 4 ")]
    assert not g.table.valid[wholly_outside].any()
    x = np.arange(84, dtype=np.float64).reshape(2, 1, 6, 7)
    y = roi_align_forward(x, *_args(spec))
    assert (y[4] == 0).all()  # the reference agrees: a box wholly outside reads nothing


def test_spec_errors_are_typed():
    with pytest.raises(symjac.SpecError, match="5 numbers"):
        symjac.RoiAlign(2, boxes=[(0, 1, 2, 3)])
    with pytest.raises(symjac.SpecError, match="batch index"):
        symjac.RoiAlign(2, boxes=[(-1, 1, 2, 3, 4)])
    with pytest.raises(symjac.SpecError, match="spatial_scale"):
        symjac.RoiAlign(2, spatial_scale=0)
    with pytest.raises(symjac.SpecError, match="N=1"):
        resolved(symjac.RoiAlign(2), (1, 1, 6, 7))
    with pytest.raises(symjac.SpecError, match="symjac.RoiAlign"):
        symjac.Pool("roi_align", 2)
    assert eval(repr(SPECS[-1]), {"RoiAlign": symjac.RoiAlign}) == SPECS[-1]  # repr round-trips


def test_rational_boxes_exact_and_refused_only_where_undecided():
    """Boxes at thirds: the exact weights are rationals (1/3 of a cell), a correct float64
    implementation passes within the coordinates' rounding; the reference differs from the exact
    forward only by rounding."""
    spec = symjac.RoiAlign(2, boxes=[(0, Fraction(1, 3), Fraction(2, 3), Fraction(10, 3), Fraction(11, 3))],
                           sampling_ratio=2)
    g = resolved(spec, (1, 1, 5, 5))
    assert g.table.q % 3 == 0  # a denominator of 3: not dyadic
    x = np.arange(25, dtype=np.float64).reshape(1, 1, 5, 5)
    exact = g.operator.exact_forward(g, ExactArray.from_any(x)).to_numpy()
    np.testing.assert_allclose(roi_align_forward(x, *_args(spec)), exact, rtol=1e-13)
    assert symjac.verify(spec, _impl(spec), input_shape=(1, 2, 5, 5)).ok


def test_spec_file_round_trip(tmp_path):
    """[operator] kind = "roi_align" / "roi_pool": written and read back as the same spec, and a case
    without input verifies at the coverage plan through the CLI's loader."""
    from symjac.io._specwrite import operator_table

    toml = """[[case]]
name = "roi"
[case.operator]
kind = "roi_align"
output_size = [2, 2]
boxes = [[0, "1/2", 1, 3, "7/2"], [0, -1, -1, 2, 2]]
spatial_scale = "1/2"
sampling_ratio = 2
aligned = true
[[case]]
name = "pool"
[case.operator]
kind = "roi_pool"
output_size = [2, 1]
"""
    path = tmp_path / "roi.toml"
    path.write_text(toml)
    cases = symjac.load_spec_file(path).cases
    align, pool = cases[0].operator, cases[1].operator
    assert align == symjac.RoiAlign(2, boxes=[(0, Fraction(1, 2), 1, 3, Fraction(7, 2)), (0, -1, -1, 2, 2)],
                                    spatial_scale=Fraction(1, 2), sampling_ratio=2, aligned=True)
    assert pool == symjac.RoiPool((2, 1))
    table = operator_table(align)
    assert table["kind"] == "roi_align" and table["boxes"][0] == [0, "1/2", "1", "3", "7/2"]
    with pytest.raises(symjac.SpecError, match="output_size"):
        bad = tmp_path / "bad.toml"
        bad.write_text('[[case]]\nname = "x"\n[case.operator]\nkind = "roi_align"\n')
        symjac.load_spec_file(bad)


@pytest.mark.slow
def test_conform_onnxruntime_covers_the_roi_ops():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    result = symjac.conform("onnxruntime", ops=["roi_align", "max_roi_pool"], dtypes=["float32"])
    ops = {r["config"]["op"] for r in result.results}
    assert ops == {"roi_align", "max_roi_pool"}
    # MaxRoiPool at NaN and -inf is ONNX Runtime's documented defect (its known_defect; tests/test_roi_families.py),
    # and RoiAlign mode="max" at NaN where the family's NaN reaches a bin's first corner (else it passes)
    off = [r for r in result.results if r["status"] != "pass" and not (r["status"] == "known_defect" and (
        r["config"]["op"] == "max_roi_pool" or r["config"]["kwargs"].get("mode") == "max"))]
    off += [r for r in result.results if r["config"]["op"] == "max_roi_pool" and r["status"] != "known_defect"]
    assert not off, off


def test_explain_names_boxes_bins_and_exact_weights(tmp_path):
    """explain reads the table operator: the window's box, bin and sample point, and SymPy's
    derivative of its expression (one sample point at the centre of 2 x 2 cells: each 1/4)."""
    from symjac.io._explain import explain

    path = tmp_path / "r.toml"
    path.write_text('[operator]\nkind = "roi_align"\noutput_size = 1\nboxes = [[0, 0, 0, 1, 1]]\nsampling_ratio = 1\n'
                    '[input]\nx = [[[[1, 2], [3, 4]]]]\n')
    text = explain(symjac.load_spec_file(path).cases[0])
    assert "box 0 (batch item 0, x 0..1, y 0..1), bin (0, 0): sample points y [1/2], x [1/2]" in text
    assert "dy[0,0,0,0]/dx[0,0,1,1] = 1/4" in text
