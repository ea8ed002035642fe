"""The TensorFlow/Keras adapter: the documented mapping, generated configurations in float32 and
float64, TF's MaxPool3DGrad tie defect, and a broken wrapper.

Eager TensorFlow/Keras calls are slow (a Keras layer call is ~ms), so the default run checks the
``"small"`` grid; ``SYMJAC_FULL_GRID=1`` checks the ``"full"`` one.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("keras")

import symjac  # noqa: E402
import symjac.frameworks.tensorflow as stf  # noqa: E402
from framework_checks import FULL, assert_counts, check_configurations  # noqa: E402
from symjac.frameworks import Unsupported  # noqa: E402

LAST = "channels_last"

# The mapping, from the tf.nn.*pool* and keras.layers pooling documentation.
MAPPING = [
    (stf.max_pool3d(ksize=2, strides=1, padding="VALID")[0], symjac.Pool("max", (2, 2, 2), stride=1, layout=LAST)),
    (stf.avg_pool2d(3, 2, "SAME")[0], symjac.Pool("avg", 3, stride=2, padding="same", layout=LAST)),
    (stf.max_pool2d([1, 3, 3, 1], [1, 2, 1, 1], [[0, 0], [1, 0], [0, 2], [0, 0]])[0],
     symjac.Pool("max", 3, stride=(2, 1), padding=((1, 0), (0, 2)), layout=LAST)),
    (stf.max_pool1d(2, 2, "VALID", data_format="NCW")[0], symjac.Pool("max", (2,), stride=2)),
    (stf.pool([3], "AVG", dilations=[2])[0], symjac.Pool("avg", (3,), stride=1, dilation=2, layout=LAST)),
    # Keras: strides=None → pool_size; data_format=None → image_data_format() = channels_last.
    (stf.MaxPooling2D()[0], symjac.Pool("max", (2, 2), stride=(2, 2), layout=LAST)),
    (stf.AveragePooling1D(3, 1, "same")[0], symjac.Pool("avg", (3,), stride=1, padding="same", layout=LAST)),
    (stf.GlobalMaxPooling3D()[0], symjac.GlobalPool("max", rank=3, layout=LAST)),
    (stf.AdaptiveAveragePooling2D((2, 3))[0], symjac.AdaptivePool("avg", (2, 3), layout=LAST)),
    (stf.keras_ops_average_pool(2, rank=1)[0], symjac.Pool("avg", (2,), stride=2, layout=LAST)),
]


@pytest.mark.parametrize("got, expected", MAPPING, ids=[str(i) for i in range(len(MAPPING))])
def test_documented_arguments_map_to_the_spec(got, expected):
    assert got == expected


def test_unsupported_conventions():
    with pytest.raises(Unsupported, match="dilations > 1"):
        stf.pool([3], "MAX", padding="SAME", dilations=[2])
    with pytest.raises(Unsupported, match="rank="):
        stf.keras_ops_max_pool(2)
    with pytest.raises(Unsupported, match="padding"):
        stf.max_pool2d(2, 1, "SAME_LOWER")


@pytest.mark.slow
def test_generated_configurations_verify_in_float32_and_float64():
    grid = "full" if FULL else "small"
    assert_counts(check_configurations(stf, grid), grid)


def test_global_pool_output_is_viewed_with_kept_dims():
    spec, impl = stf.GlobalAveragePooling2D()
    x = np.arange(24, dtype=np.float32).reshape(2, 2, 3, 2)
    assert impl.forward(x).shape == (2, 1, 1, 2)
    np.testing.assert_array_equal(impl.forward(x).ravel(), x.mean(axis=(1, 2)).ravel())


def test_tf_maxpool3d_grad_at_ties_is_reported():
    # tf.nn.max_pool3d on ones((1, 2, 2, 2, 1)), VALID, kernel 2: one window, eight tied maxima.
    # Any Clarke subgradient of max sums to 1 over the window; TF's MaxPool3DGrad gives 1 to
    # every cell (sum 8), while tf.nn.max_pool2d on ones((1, 2, 2, 1)) gives a one-hot (sum 1).
    x = np.ones((1, 2, 2, 2, 1), np.float32)
    spec, impl = stf.max_pool3d(ksize=2, strides=1, padding="VALID")
    assert impl.backward(x, np.ones((1, 1, 1, 1, 1), np.float32)).sum() == 8
    _, impl2d = stf.max_pool2d(ksize=2, strides=1, padding="VALID")
    assert impl2d.backward(np.ones((1, 2, 2, 1), np.float32), np.ones((1, 1, 1, 1), np.float32)).sum() == 1
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, x=x, dtype="float32")
    assert "tie_not_subgradient" in report.categories(), report
    assert stf.known_defect(symjac.frameworks.Config("max_pool3d", {}, (1, 2, 2, 2, 1), ""))


def test_gradient_scaled_by_two_is_flagged():
    spec, impl = stf.AveragePooling2D(2, 1, "same")
    report = symjac.verify(spec, forward=impl.forward, backward=lambda x, dy: 2 * impl.backward(x, dy),
                           input_shape=(1, 3, 3, 1))
    assert "wrong_weights" in report.categories(), report


def test_reproducer_runs_and_agrees():
    spec, impl = stf.MaxPooling2D(3, 2, "same")
    x = np.arange(50, dtype=np.float32).reshape(1, 5, 5, 2)
    dy = np.ones((1, 3, 3, 2), np.float32)
    namespace = {"x": x, "dy": dy, "print": lambda *a: None}
    exec(impl.reproducer, namespace)
    np.testing.assert_array_equal(namespace["y"].numpy(), impl.forward(x))
    np.testing.assert_array_equal(namespace["dx"].numpy(), impl.backward(x, dy))


def test_dtype_follows_x_for_tf_nn_and_keras():
    for make in (lambda: stf.avg_pool1d(2, 2, "VALID"), lambda: stf.AveragePooling1D(2)):
        _, impl = make()
        for dtype in (np.float16, np.float32, np.float64):
            x = np.arange(8, dtype=dtype).reshape(1, 4, 2)
            assert impl.forward(x).dtype == dtype
            assert impl.backward(x, np.ones((1, 2, 2), dtype)).dtype == dtype
