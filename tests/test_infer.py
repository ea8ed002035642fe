"""symjac.infer: the neighbouring conventions an implementation matches exactly.

The expected conventions are the frameworks' documented defaults (PyTorch
``count_include_pad=True``; TensorFlow ``"SAME"`` puts the odd pad cell last; ONNX
``SAME_LOWER`` puts it first; Keras pools are ``channels_last``), and the
implementations are the frameworks' own ops.
"""

from __future__ import annotations

import pytest

import symjac
from symjac.verifiers.pool._infer import distinct_values, hint, neighbours


def _torch_impl(op, **kwargs):
    torch = pytest.importorskip("torch")

    def forward(x):
        return op(torch.from_numpy(x), **kwargs).numpy()

    def backward(x, dy):
        t = torch.from_numpy(x).requires_grad_(True)
        (dx,) = torch.autograd.grad(op(t, **kwargs), t, torch.from_numpy(dy))
        return dx.numpy()

    return forward, backward


def test_torch_avg_pool2d_default_counts_the_padding():
    torch = pytest.importorskip("torch")
    impl = _torch_impl(torch.nn.functional.avg_pool2d, kernel_size=3, stride=2, padding=1)
    result = symjac.infer(impl, mode="avg", kernel=3, stride=2, padding=1, input_shape=(1, 2, 6, 6))
    assert result, str(result)
    # PyTorch documents count_include_pad=True as the default: pad cells count in the divisor.
    assert {m.spec.divisor for m in result.matches} == {"include_pad"}
    assert {m.spec.layout for m in result.matches} == {"channels_first"}
    assert all(m.checked == "forward and backward" for m in result.matches)
    assert str(result).startswith("matches Pool(mode='avg'")


def test_torch_max_pool_ceil_mode_and_its_tie_policy():
    torch = pytest.importorskip("torch")
    impl = _torch_impl(torch.nn.functional.max_pool2d, kernel_size=2, stride=2, ceil_mode=True)
    result = symjac.infer(impl, kernel=2, input_shape=(1, 1, 5, 5))
    # 5 = 2*2 + 1: only ceil_mode=True has a third window per axis; PyTorch routes ties to the first maximum.
    assert [(m.spec.mode, m.spec.ceil_mode, m.tie) for m in result.matches] == [("max", True, "first")]


def test_none_names_the_closest_candidate():
    torch = pytest.importorskip("torch")
    # divisor_override=5 is in no candidate: the closest is named with where it differs.
    impl = _torch_impl(torch.nn.functional.avg_pool2d, kernel_size=2, stride=2, divisor_override=5)
    result = symjac.infer(impl, mode="avg", kernel=2, input_shape=(1, 1, 4, 4))
    assert not result and result.closest is not None
    assert str(result).startswith("none, closest: Pool(mode='avg'") and "differing at forward values" in str(result)


def _ort_average_pool(auto_pad, shape, kernel, strides):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, strides=strides, auto_pad=auto_pad)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def test_onnx_same_lower_is_same_lower():
    forward = _ort_average_pool("SAME_LOWER", [1, 1, 5, 5], [2, 2], [2, 2])
    result = symjac.infer((forward, None), mode="avg", kernel=2, stride=2, padding="same", input_shape=(1, 1, 5, 5),
                          dtype="float32")
    # L=5, k=2, s=2: total pad 1; ONNX SAME_LOWER puts it at the start (count_include_pad=0: excluded).
    assert [(m.spec.padding, m.spec.divisor, m.checked) for m in result.matches] == \
        [("same_lower", "exclude_pad", "forward")]


def _tf_impl(fn):
    tf = pytest.importorskip("tensorflow")

    def forward(x):
        return fn(tf.constant(x)).numpy()

    def backward(x, dy):
        t = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = fn(t)
        return tape.gradient(y, t, output_gradients=tf.constant(dy)).numpy()

    return forward, backward


def test_tensorflow_same_is_same_upper_channels_last():
    tf = pytest.importorskip("tensorflow")
    impl = _tf_impl(lambda t: tf.nn.avg_pool2d(t, ksize=2, strides=2, padding="SAME"))
    result = symjac.infer(impl, mode="avg", kernel=2, stride=2, padding="same", input_shape=(1, 5, 5, 2))
    # TF SAME: the odd pad cell at the end; NHWC; padding not counted.
    assert [(m.spec.padding, m.spec.layout, m.spec.divisor) for m in result.matches] == \
        [("same", "channels_last", "exclude_pad")]


def test_keras_pooling_is_channels_last():
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    layer = keras.layers.MaxPooling2D(pool_size=2)
    impl = _tf_impl(layer)
    result = symjac.infer(impl, kernel=2, input_shape=(1, 4, 6, 3), dtype="float32")  # Keras layers compute in float32
    assert {(m.spec.mode, m.spec.layout) for m in result.matches} == {("max", "channels_last")}


def test_neighbours_change_one_convention_each():
    spec = symjac.Pool("avg", 3, stride=2, padding="same")
    changes = [c for _, c in neighbours(spec)]
    assert changes == ["divisor='include_pad'", "padding='same_lower'", "layout='channels_last'"]


def test_hint_names_the_matching_divisor():
    torch = pytest.importorskip("torch")
    fwd, bwd = _torch_impl(torch.nn.functional.avg_pool2d, kernel_size=3, stride=1, padding=1)
    text = hint(symjac.Pool("avg", 3, stride=1, padding=1), fwd, bwd, (1, 1, 5, 5))
    assert text == "forward and backward match divisor='include_pad' exactly"


def test_bad_impl_is_an_input_error():
    with pytest.raises(symjac.InputError, match="neither a forward nor a backward"):
        symjac.infer(object(), kernel=2, input_shape=(4, 4))


def test_distinct_values_in_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = distinct_values((1, 1, 10, 10), ml_dtypes.bfloat16)
    # bfloat16 has 8 significand bits: the integers up to 2^8 = 256 are exact, so 100 values stay distinct
    assert x.dtype.name == "bfloat16" and len(set(x.astype(float).ravel().tolist())) == 100
