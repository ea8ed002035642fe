"""``tf.image.crop_and_resize`` (bilinear) as RoI Align (issue 31, item 4): the box mapping derived by
hand, TensorFlow 2.21's forward equal to the exact forward, its ``GradientTape`` backward verified, the
mappings one convention away caught, and ``conform tensorflow`` covering the op.

Expected numbers come from TensorFlow's own ``crop_and_resize`` (run here) or from the derivations
written beside them; the sample points are TensorFlow's documented ``in_y = y1·(H - 1) + i·(y2 -
y1)·(H - 1)/(crop_h - 1)``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import symjac
from symjac.frameworks._adapter import Unsupported

tf = pytest.importorskip("tensorflow")

from symjac.frameworks.tensorflow import crop_and_resize  # noqa: E402 - after the skip
from symjac.frameworks.tensorflow._crop import roi_boxes  # noqa: E402


def _tf(x_nchw, boxes, indices, crop):
    y = tf.image.crop_and_resize(np.transpose(x_nchw, (0, 2, 3, 1)).astype(np.float32), boxes, indices, crop)
    return np.transpose(y.numpy(), (0, 3, 1, 2))


def test_box_mapping_derived_by_hand():
    """H = 5, box y 1/4..3/4, crop 3: TensorFlow samples in_y = 1/4·4 + i·(1/2·4)/2 = 1, 2, 3. RoI Align
    (aligned, one point per bin) samples Y1 - 1/2 + (i + 1/2)·(Y2 - Y1)/3: with a = 1, s = 1 the box is
    Y1 = a - s/2 + 1/2 = 1, Y2 = Y1 + 3s = 4, points 1, 2, 3. x 0..1 on W = 3, crop 2: in_x = 0, 2, so
    a = 0, s = 2, X1 = -1/2, X2 = 7/2. A crop of 1 samples the centre (y1 + y2)·(H - 1)/2 = 2: s = 0,
    the box a point at 2 + 1/2."""
    assert roi_boxes((1, 5, 3, 1), [[0.25, 0, 0.75, 1]], [0], (3, 2)) == \
        ((0, Fraction(-1, 2), Fraction(1), Fraction(7, 2), Fraction(4)),)
    ((_, x1, y1, x2, y2),) = roi_boxes((1, 5, 3, 1), [[0.25, 0, 0.75, 1]], [0], (1, 1))
    assert (y1, y2) == (Fraction(5, 2), Fraction(5, 2)) and (x1, x2) == (Fraction(3, 2), Fraction(3, 2))
    spec, _ = crop_and_resize((1, 5, 3, 1), [[0.25, 0, 0.75, 1]], [0], (3, 2))
    g = symjac.resolve(spec, (1, 1, 5, 3))
    assert "sample points y [1], x [0]" in g.table.words[0] and "sample points y [3], x [2]" in g.table.words[-1]


def test_whole_image_crop_is_the_image_and_forward_equals_tensorflow():
    """Box (0, 0, 1, 1) with crop (H, W) samples every cell at an integer point: the crop is the image
    (derivation: in_y = i·(H - 1)/(H - 1) = i). Then several boxes (inverted, a point, partial) on two
    images, inputs k/8: TensorFlow's float32 crop equals the exact forward to the bit."""
    x = np.arange(2 * 2 * 5 * 5, dtype=np.float64).reshape(2, 2, 5, 5) / 8
    spec, _ = crop_and_resize((2, 5, 5, 2), [[0, 0, 1, 1]], [1], (5, 5))
    assert (np.asarray(symjac.forward(spec, x), dtype=np.float64)[0] == x[1]).all()
    boxes = [[0, 0, 1, 1], [1, 1, 0, 0], [0.5, 0.25, 0.5, 0.25], [0.125, 0.375, 0.875, 0.625]]
    indices = [0, 1, 1, 0]
    for crop in ((2, 3), (3, 5), (1, 2)):
        spec, _ = crop_and_resize((2, 5, 5, 2), boxes, indices, crop)
        exact = np.asarray(symjac.forward(spec, x), dtype=np.float64)
        assert (exact == _tf(x, boxes, indices, crop)).all(), crop


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tensorflow_forward_and_gradient_tape_verified(dtype):
    spec, impl = crop_and_resize((2, 6, 7, 2), [[0, 0, 1, 1], [0.25, 0.5, 0.75, 1.0], [1, 1, 0, 0],
                                                [0, 0.125, 0.5, 0.625]], [0, 1, 0, 1], (3, 5))
    report = symjac.verify(spec, impl, input_shape=(2, 2, 6, 7), dtype=dtype,
                           families=["extreme"])  # at NaN and ±inf: the known defect below
    assert report.ok, report
    assert sorted(impl.missing) == ["double_backward", "jvp", "vmap"]


def test_infinite_corner_gives_nan_known_defect():
    """TensorFlow's lerp form ``tl + (tr - tl)·x_lerp`` at tl = +inf, tr = 1, x_lerp = 1/4 (box x 1/4 on
    W = 2: in_x = 1/4, in_y = 0): +inf + (-inf)/4 = NaN, where the bilinear value 3/4·inf + 1/4·1 is +inf
    (measured). symjac's nonfinite family finds it (forward_values only), and the adapter documents it
    as a known defect of that family."""
    from symjac.frameworks import tensorflow as tf_adapter
    from symjac.frameworks._adapter import Config

    x = np.array([[[[np.inf, 1.0], [1.0, 1.0]]]])
    assert np.isnan(_tf(x, [[0, 0.25, 0, 0.25]], [0], (1, 1))).all()
    spec, impl = crop_and_resize((2, 6, 7, 2), [[0, 0, 1, 1], [0.25, 0.5, 0.75, 1.0]], [0, 1], (3, 5))
    report = symjac.verify(spec, impl, input_shape=(2, 2, 6, 7), dtype="float32")
    assert not report.ok and set(report.categories()) == {"forward_values"} and "non-finite" in report.details()
    defect = tf_adapter.known_defect(Config("crop_and_resize", {}, (1, 1, 2, 2), ""))
    assert defect is not None and defect.families == ("nonfinite",)


def test_mappings_one_convention_away_are_caught():
    """TensorFlow's crop against the spec of a mapping one step off: the image size H instead of H - 1
    (the classic normalized-coordinate slip), and the box not moved onto RoI Align's grid (its corners
    used as they are): each differs, and verify says so."""
    image, boxes, indices, crop = (1, 6, 7, 1), [[0.25, 0.125, 0.75, 0.875]], [0], (3, 3)
    _, impl = crop_and_resize(image, boxes, indices, crop)
    n, h, w, c = image
    wrong_size = roi_boxes((n, h + 1, w + 1, c), boxes, indices, crop)
    corners = ((0, Fraction(1, 8) * (w - 1), Fraction(1, 4) * (h - 1), Fraction(7, 8) * (w - 1), Fraction(3, 4) * (h - 1)),)
    for roi in (wrong_size, corners):
        report = symjac.verify(symjac.RoiAlign(crop, boxes=roi, sampling_ratio=1, aligned=True), impl,
                               input_shape=(n, c, h, w), dtype="float32")
        assert not report.ok and "forward_values" in report.categories()


def test_unmapped_arguments_are_unsupported():
    with pytest.raises(Unsupported, match=r"outside \[0, 1\]"):
        crop_and_resize((1, 4, 4, 1), [[-0.5, 0, 1, 1]], [0], (2, 2))
    with pytest.raises(Unsupported, match="nearest"):
        crop_and_resize((1, 4, 4, 1), [[0, 0, 1, 1]], [0], (2, 2), method="nearest")


@pytest.mark.slow
def test_conform_tensorflow_covers_crop_and_resize():
    result = symjac.conform("tensorflow", ops=["crop_and_resize"], dtypes=["float32", "float16", "float64"])
    statuses = {(r["dtype"], r["status"]) for r in result.results}
    # float64: TensorFlow computes in float32; known_defect: the lerp form's NaN at ±inf (nonfinite family)
    assert statuses <= {("float32", "pass"), ("float16", "pass"), ("float32", "known_defect"),
                        ("float16", "known_defect"), ("float64", "unsupported")}, \
        [r for r in result.results if r["status"] not in ("pass", "unsupported", "known_defect")]
    assert ("float32", "pass") in statuses or ("float32", "known_defect") in statuses
