"""RoI Align at the extra input families every operator runs (issue 31): ``extreme`` (magnitudes near
the overflow threshold) and ``nonfinite`` (NaN and ±inf), with the convention stated in
``symjac/pool/_ops/roi_align.py``: a bin is IEEE 754's sum of ``w·x`` over the cells its sample points
read with weight > 0, so a NaN there makes the bin NaN, an infinity the infinity, both infinities NaN.

The correct implementation is ``tests/roi_reference.py``'s transcription of torchvision's kernel (it
reads nothing of symjac); the planted defects are the classic ones (NaN cleaned away before the op,
a half-precision accumulator).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac.pool._geometry import resolved
from symjac.verifiers.pool._inputs import family_input

from roi_reference import RoiAlignBackward, roi_align_forward

SPECS = [symjac.RoiAlign(2), symjac.RoiAlign(2, aligned=True), symjac.RoiAlign(2, sampling_ratio=2)]


def _args(spec):
    return spec.rois(), spec.output_size, float(spec.spatial_scale), spec.sampling_ratio, spec.aligned


def test_nan_in_a_weighted_cell_makes_the_bin_nan():
    """One bin, one point at (1/2, 1/2) of a 2 x 2 map (box 0..1, output_half_pixel): every cell weighs
    1/4. Derivation: a NaN anywhere gives NaN; +inf gives +inf; +inf and -inf give NaN; and the
    reference (torchvision's loop) agrees. A point on the grid (box 0..2: the point (1, 1) reads cell
    (1, 1) with weight 1 and the others with 0) is why the family keeps NaN off weight-0 reads: there
    torchvision's 0·NaN is NaN, a kernel skipping zero weights gives x[1, 1]."""
    spec = symjac.RoiAlign(1, boxes=[(0, 0, 0, 1, 1)], sampling_ratio=1)
    for cells, want in (({(0, 1): np.nan}, "nan"), ({(1, 0): np.inf}, np.inf),
                        ({(0, 0): np.inf, (1, 1): -np.inf}, "nan")):
        x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
        for (r, c), v in cells.items():
            x[0, 0, r, c] = v
        y = roi_align_forward(x, *_args(spec))[0, 0, 0, 0]
        assert np.isnan(y) if want == "nan" else y == want
    on_grid = symjac.RoiAlign(1, boxes=[(0, 0, 0, 2, 2)], sampling_ratio=1)
    x = family_input(resolved(on_grid, (1, 1, 2, 2)), "nonfinite", np.dtype(np.float64), 0)
    assert np.isfinite(x[0, 0, [0, 0, 1], [0, 1, 0]]).all()  # the weight-0 reads hold no NaN or ±inf


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_families_run_and_the_reference_passes(spec):
    a = _args(spec)
    g = resolved(spec, (2, 2, 6, 7))
    x = family_input(g, "nonfinite", np.dtype(np.float64), 0)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    report = symjac.verify(spec, forward=lambda x: roi_align_forward(x, *a), backward=RoiAlignBackward(*a))
    assert report.ok, report
    assert {"extreme", "nonfinite"} <= set(report.stats["families"])


@pytest.mark.parametrize("spec", SPECS[:2], ids=repr)
def test_nan_cleaned_before_the_op_is_caught(spec):
    """A port that runs ``np.nan_to_num`` on the map first (NaN to 0, ±inf to ±max): caught at the
    non-finite inputs, the finding naming the family."""
    a = _args(spec)
    report = symjac.verify(spec, forward=lambda x: roi_align_forward(np.nan_to_num(x), *a),
                           backward=RoiAlignBackward(*a))
    assert not report.ok and "forward_values" in report.categories()
    assert "non-finite" in report.details() or "nonfinite" in report.details()


def test_half_precision_accumulator_caught_at_extreme_magnitudes():
    """A float32 kernel that interpolates in float16 (its products overflow near float32's top): at
    distinct small inputs it is within float16 rounding only where values are exact, at the extreme
    family's magnitudes (float32 max / 2G) it gives inf: caught there."""
    spec = symjac.RoiAlign(2, aligned=True)
    a = _args(spec)
    fwd = lambda x: roi_align_forward(x.astype(np.float16), *a).astype(x.dtype)  # noqa: E731
    report = symjac.verify(spec, forward=fwd, dtype="float32", families=["extreme"])
    assert not report.ok and "extreme" in report.details()
