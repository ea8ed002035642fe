"""RoI Align ``reduction="max"`` (ONNX ``RoiAlign`` ``mode="max"``, issue 31): the exact forward against
ONNX Runtime's, hand derivations of values and Jacobian entries, the tie policy, ``symjac.verify`` of
ONNX Runtime's forward (no false alarm) and of planted defects, and the spec file's ``mode = "max"``.

Oracles: ONNX Runtime 1.32's ``RoiAlign`` (opset 16, CPU, float32) and a NumPy transcription of its
max-mode loop below (``_ort_max``: per sample point the largest of the four bilinear-weighted corners
``w·x``, an outside point 0, then the largest over the bin's points), built on the torchvision-style
sampling of ``tests/roi_reference.py`` (which reads nothing of symjac). At dyadic boxes, 2 x 2 bins
and inputs k/8, every float32 operation of ONNX Runtime is exact, so its output equals the exact
forward to the bit.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import symjac
from symjac.frameworks._adapter import Impl
from symjac.pool._geometry import resolved

from roi_reference import align_points


def _ort(x, spec):
    """ONNX Runtime's RoiAlign mode='max' on ``x`` (float32) with ``spec``'s boxes and settings."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from symjac.frameworks import onnxruntime as ort_adapter

    _, impl = ort_adapter.roi_align(*spec.output_size, rois=spec.boxes, sampling_ratio=max(spec.sampling_ratio, 0),
                                    spatial_scale=spec.spatial_scale, mode="max",
                                    coordinate_transformation_mode="half_pixel" if spec.aligned else "output_half_pixel")
    return impl.forward(np.asarray(x, dtype=np.float32))


def _ort_max(x, spec, *, skip_zero_weights=False, average=False, unweighted=False):
    """ONNX Runtime's max-mode loop in x's dtype (or exact ``Fraction`` for an object array), with
    switches planting defects: weight-0 corners left out of the max, the average of the points'
    maxima, the corners' values unweighted."""
    t = Fraction if x.dtype == object else x.dtype.type
    y = np.zeros((len(spec.boxes), x.shape[1]) + spec.output_size, dtype=x.dtype)
    for idx, n, points in align_points(x, spec, t):
        plane, best, count = x[n, idx[1]], None, 0
        for corners in points:
            vals = [t(plane[r, col]) if unweighted else t(w * plane[r, col]) for r, col, w in corners
                    if not (skip_zero_weights and w == 0)]
            if not vals:
                continue
            v = max(vals)
            best, count = (v if best is None else (best + v if average else max(best, v))), count + 1
        y[idx] = t(0) if best is None else (t(best / count) if average else best)
    return y


def test_onnxruntime_values_derived_by_hand():
    """One bin, one sample point, map x[r, c] = 4r + c + 1 (4 x 4), measured with ONNX Runtime 1.32.

    - box (0, 0, 1, 1), output_half_pixel: the point (1/2, 1/2), corners x = 1, 2, 5, 6 each weight
      1/4: max(1/4, 2/4, 5/4, 6/4) = 3/2 (the average mode gives 7/2).
    - box (1, 1, 3/2, 3/2), half_pixel: start 1/2, size 1/2, the point (3/4, 3/4): ly = lx = 3/4,
      weights 1/16, 3/16, 3/16, 9/16 on x = 1, 2, 5, 6: max = 9/16 · 6 = 27/8; dy/dx[1, 1] = 9/16.
    - the same map negated, box (0, 0, 2, 2), output_half_pixel: the point (1, 1) is on a grid
      point: weights 1, 0, 0, 0 on x = -6, -7, -10, -11; the weight-0 corners compete with 0, so the
      value is 0 and its derivative 0 (the average mode: -6).
    """
    x = np.arange(1, 17, dtype=np.float64).reshape(1, 1, 4, 4)
    cases = [(symjac.RoiAlign(1, boxes=[(0, 0, 0, 1, 1)], sampling_ratio=1, reduction="max"), x, Fraction(3, 2)),
             (symjac.RoiAlign(1, boxes=[(0, 1, 1, Fraction(3, 2), Fraction(3, 2))], sampling_ratio=1, aligned=True,
                              reduction="max"), x, Fraction(27, 8)),
             (symjac.RoiAlign(1, boxes=[(0, 0, 0, 2, 2)], sampling_ratio=1, reduction="max"), -x, Fraction(0))]
    for spec, xi, want in cases:
        assert symjac.forward(spec, xi).reshape(-1)[0] == want
        assert _ort(xi, spec).reshape(-1)[0] == float(want)
    J = symjac.jacobian(cases[1][0], x).todense()
    assert J[0, 5] == Fraction(9, 16) and sum(v != 0 for v in J[0, :]) == 1  # cell (1, 1) is flat index 5
    assert all(v == 0 for v in symjac.jacobian(cases[2][0], -x).todense()[0, :])


@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [0, 1, 2])
def test_exact_forward_equals_onnxruntime_at_the_default_boxes(aligned, ratio):
    """symjac's default boxes (outside, on the edges, degenerate, several per item), 2 x 2 bins, signed
    inputs k/8 (ties at 0 and all-negative bins among them): ONNX Runtime's float32 output equals the
    exact forward to the bit, and so does the Fraction transcription of its loop."""
    spec = symjac.RoiAlign(2, sampling_ratio=ratio, aligned=aligned, reduction="max")
    rng = np.random.default_rng(31 + ratio)
    x = rng.integers(-16, 17, size=(2, 2, 6, 7)) / 8
    exact = symjac.forward(spec, x)
    assert (np.asarray(exact, dtype=np.float64) == _ort(x, spec).astype(np.float64)).all()
    fractions = _ort_max(np.vectorize(Fraction, otypes=[object])(x), spec)
    assert (exact == fractions).all()


def test_ties_first_policy_and_clarke_hull():
    """A tie at the top between candidates with different gradients. Box (0, 1/2, 0, 3/2, 2), half_pixel,
    sampling ratio 2, one bin on a 2 x 2 map: y from -1/2, size 2, points y = 0 and 1 (on grid rows:
    row 1 is H - 1, clamped, weight 1); x from 0, size 1, points x = 1/4 and 3/4, weights (3/4, 1/4)
    and (1/4, 3/4) on columns 0, 1. With row 0 = (3, 3) and row 1 = (-5, -7): point (0, 1/4) gives
    3/4·3 = 9/4 at (0, 0) and 1/4·3 = 3/4 at (0, 1); point (0, 3/4) gives 3/4 and 9/4 at (0, 1); row
    1's points give negative values and the weight-0 corners 0. So y = 9/4, attained twice, with
    gradients 3/4·e_00 and 3/4·e_01. ONNX Runtime's std::max keeps the first (point 0's corner (0, 0)):
    policy first is 3/4 at (0, 0). The Clarke set is {(3λ/4, 3(1-λ)/4, 0, 0)}: (3/8, 3/8) and
    (0, 3/4) are in it, (3/4, 3/4) is not."""
    spec = symjac.RoiAlign(1, boxes=[(0, Fraction(1, 2), 0, Fraction(3, 2), 2)], sampling_ratio=2, aligned=True,
                           reduction="max")
    g = resolved(spec, (1, 1, 2, 2))
    assert "sample points y [0, 1], x [1/4, 3/4]" in g.table.words[0]
    x = np.array([[[[3.0, 3.0], [-5.0, -7.0]]]])
    assert symjac.forward(spec, x).reshape(-1)[0] == Fraction(9, 4)
    assert _ort(x, spec).reshape(-1)[0] == 2.25
    J = symjac.jacobian(spec, x).todense()
    assert list(J[0, :]) == [Fraction(3, 4), 0, 0, 0]  # policy first: point 0's corner (0, 0)

    def impl(row):
        return Impl(forward=lambda xx: _ort_max(xx, spec),
                    backward=lambda xx, dy: (np.array(row, dtype=xx.dtype).reshape(1, 1, 2, 2) * dy.reshape(-1)[0]),
                    framework="numpy", op="roi_align_max")

    # at this x only (families=(): the fixed rows are this x's, not the extreme or nonfinite inputs')
    assert symjac.verify(spec, impl([0.375, 0.375, 0, 0]), x=x, families=()).ok  # the Clarke set's midpoint
    assert symjac.verify(spec, impl([0, 0.75, 0, 0]), x=x, families=()).ok  # the other tied candidate ("last")
    assert not symjac.verify(spec, impl([0.75, 0.75, 0, 0]), x=x, families=()).ok  # both: outside the hull


@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_verify_onnxruntime_max_no_false_alarm(ctm):
    """ONNX Runtime's forward at symjac's defaults (the coverage plan, float32 and float16) and at a
    scale of 1/2 with 3 bins (coordinates not exact in the dtype: the rounding model's coordinate
    term): no finding."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from symjac.frameworks import onnxruntime as ort_adapter

    for kw in ({"sampling_ratio": 0}, {"sampling_ratio": 2, "spatial_scale": 0.5}):
        for out in ((2, 2), (3, 2)):
            spec, impl = ort_adapter.roi_align(*out, coordinate_transformation_mode=ctm, mode="max", **kw)
            assert spec.reduction == "max" and spec.aligned == (ctm == "half_pixel")
            for dtype in ("float32", "float16"):
                report = symjac.verify(spec, forward=impl.forward, dtype=dtype)
                # its NaN handling is its documented defect (tests/test_roi_families.py); nothing else
                assert {(f.category, f.family) for f in report.findings} <= {("forward_values", "nonfinite")}, \
                    (kw, out, dtype, report)
                assert report.ok or ort_adapter.known_defect(_config(ort_adapter, spec, ctm, kw, out))


def _config(adapter, spec, ctm, kw, out):
    kwargs = {"output_height": out[0], "output_width": out[1], "sampling_ratio": kw["sampling_ratio"],
              "spatial_scale": kw.get("spatial_scale", 1), "coordinate_transformation_mode": ctm, "mode": "max"}
    return adapter.Config("roi_align", kwargs, (2, 1, 6, 7), "")


DEFECTS = {
    "the average mode's output": {"average": True},
    "weight-0 corners left out of the max": {"skip_zero_weights": True},
    "corners unweighted": {"unweighted": True},
}


@pytest.mark.parametrize("name", list(DEFECTS))
@pytest.mark.parametrize("aligned", [False, True])
def test_planted_forward_defects_caught_at_defaults(name, aligned):
    """A forward-only implementation (as ONNX Runtime is) with a planted defect, at symjac's defaults:
    caught, the finding naming the box and bin. The correct transcription passes."""
    spec = symjac.RoiAlign(2, aligned=aligned, reduction="max")
    # without the nonfinite family: ONNX Runtime's loop at NaN is its known defect (tests/test_roi_families.py)
    finite = ("extreme",)
    assert symjac.verify(spec, forward=lambda x: _ort_max(x, spec), dtype="float32", families=finite).ok
    report = symjac.verify(spec, forward=lambda x: _ort_max(x, spec, **DEFECTS[name]), dtype="float32", families=finite)
    assert not report.ok, name
    assert "forward_values" in report.categories()
    assert "box " in report.details() and "bin (" in report.details()


def _backward(spec, weight_one=False):
    """The max mode's backward as a kernel writes it: dy to the winning corner's cell times its weight
    (``weight_one``: times 1, a planted defect), ONNX Runtime's first-of-equals order."""
    def backward(x, dy):
        t = x.dtype.type
        dx = np.zeros_like(x)
        for idx, n, points in align_points(x, spec, t):
            plane, best = x[n, idx[1]], None
            for r, col, w in (corner for corners in points for corner in corners):
                v = t(w * plane[r, col])
                if best is None or v > best[0]:
                    best = (v, r, col, w)
            if best is not None and best[3] != 0:
                dx[n, idx[1], best[1], best[2]] += dy[idx] * (t(1) if weight_one else best[3])
        return dx
    return backward


def test_backward_verified_and_unweighted_route_caught():
    spec = symjac.RoiAlign(2, sampling_ratio=2, aligned=True, reduction="max")
    good = Impl(forward=lambda x: _ort_max(x, spec), backward=_backward(spec), framework="numpy", op="roi_align_max")
    report = symjac.verify(spec, good, families=("extreme",))  # ONNX Runtime's loop: its NaN defect aside
    assert report.ok, report
    bad = Impl(forward=lambda x: _ort_max(x, spec), backward=_backward(spec, weight_one=True), framework="numpy",
               op="roi_align_max")
    report = symjac.verify(spec, bad, families=("extreme",))
    assert not report.ok and "wrong_weights" in report.categories()
    assert "largest weighted corner" in report.details()


def test_spec_file_mode_max_round_trip(tmp_path):
    """``kind = "roi_align"`` with ``mode = "max"`` reads as ``reduction="max"`` and is written back so."""
    from symjac.io._specwrite import operator_table

    path = tmp_path / "m.toml"
    path.write_text('[[case]]\nname = "m"\n[case.operator]\nkind = "roi_align"\noutput_size = [2, 2]\n'
                    'mode = "max"\naligned = true\nsampling_ratio = 2\n')
    spec = symjac.load_spec_file(path).cases[0].operator
    assert spec == symjac.RoiAlign(2, aligned=True, sampling_ratio=2, reduction="max")
    table = operator_table(spec)
    assert table["kind"] == "roi_align" and table["mode"] == "max"
    assert "mode" not in operator_table(symjac.RoiAlign(2))  # avg specs' tables are unchanged
    assert eval(repr(spec), {"RoiAlign": symjac.RoiAlign}) == spec
    path.write_text('[[case]]\nname = "m"\n[case.operator]\nkind = "roi_align"\noutput_size = 2\nmode = "min"\n')
    with pytest.raises(symjac.SpecError, match="'avg'.*'max'"):
        symjac.load_spec_file(path)
    with pytest.raises(symjac.SpecError, match="reduction='sum' is not valid"):
        symjac.RoiAlign(2, reduction="sum")


@pytest.mark.slow
def test_conform_onnxruntime_covers_roi_align_max():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    result = symjac.conform("onnxruntime", ops=["roi_align"], dtypes=["float32"], grid="full")
    modes = {r["config"]["kwargs"].get("mode") for r in result.results}
    assert "max" in modes
    # mode="max" at NaN is ONNX Runtime's documented defect (tests/test_roi_families.py): known, or not reached
    off = [r for r in result.results if r["status"] != "pass" and not (r["status"] == "known_defect"
                                                                         and r["config"]["kwargs"]["mode"] == "max")]
    assert not off, off
