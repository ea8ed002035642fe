"""The TensorFlow loss adapters (``tf.nn``, ``keras.losses``): ``derivative`` through
``tf.GradientTape``, ``hvp`` through two nested tapes, checked by ``verify_loss`` (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

import symjac

pytest.importorskip("tensorflow")
import symjac.frameworks.tensorflow as stf  # noqa: E402
from symjac.frameworks.tensorflow._losses import OPS as TF_OPS  # noqa: E402

# dyadic inputs, exact in float32 and float64 (the exact engine and TF see the same numbers)
LOGITS = np.array([[0.5, -1.25, 2.0], [0.75, 0.125, -0.5]])
UPSTREAM = {"elements": np.array([[1.0, -0.5, 2.0], [0.25, 1.0, -1.0]]), "rows": np.array([1.0, -0.5])}
CASES = [(stf.sigmoid_cross_entropy_with_logits, np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.5]]), "elements"),
         (stf.softmax_cross_entropy_with_logits, np.array([[0.25, 0.5, 0.25], [0.0, 1.0, 0.0]]), "rows"),
         (stf.sparse_softmax_cross_entropy_with_logits, np.array([2, 0]), "rows")]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_tf_nn_losses_pass_derivative_and_hvp(case, reduction):
    make, label, per = CASES[case]
    loss, impl = make(reduction)
    upstream = UPSTREAM[per] if reduction == "none" else None
    for dtype in ("float32", "float64"):
        report = symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=impl.hvp,
                                    pred=LOGITS, label=label, upstream=upstream, dtype=dtype)
        assert report.ok, f"{loss} {dtype}: {report}"


def test_keras_mean_squared_error_passes_derivative_and_hvp():
    loss, impl = stf.keras_mean_squared_error()
    for dtype in ("float32", "float64"):
        report = symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=impl.hvp,
                                    pred=LOGITS, label=LOGITS[::-1] / 2, dtype=dtype)
        assert report.ok, f"{dtype}: {report}"


def test_one_configuration_of_every_loss_passes():
    from framework_checks import check_losses

    configs = list(stf.loss_configurations("small"))
    configs = configs[:11] + configs[36:38]  # one of each op of the first cycle (36 of them), then of the Poisson one
    assert {c.op for c in configs} == set(TF_OPS)
    assert check_losses(stf, configs, ("float32",))["float32"] == len(TF_OPS)


def test_grid_covers_the_options():
    configs = list(stf.loss_configurations("full"))
    kwargs = [c.kwargs for c in configs]
    assert {c.op for c in configs} == set(TF_OPS) | {"ctc_loss"}  # ctc: tests/test_ctc_frameworks.py
    for key in ("pos_weight", "label_smoothing", "delta", "compute_full_loss"):
        assert any(k.get(key) for k in kwargs), key
    assert {k.get("from_logits") for k in kwargs if "from_logits" in k} == {True, False}
    assert {k["reduction"] for k in kwargs if "reduction" in k} == {"mean", "sum", "none", None, "sum_over_batch_size"}


@pytest.mark.slow
def test_every_loss_configuration_passes_derivative_and_hvp():
    from framework_checks import check_losses

    checked = check_losses(stf, stf.loss_configurations("full"))
    assert min(checked.values()) >= 300, checked


def test_tensorflow_weighted_cross_entropy_gradient_at_zero_logits():
    # Found by the full loss grid. The loss -[p·y·log σ(z) + (1-y)·log(1-σ(z))] is smooth at z = 0;
    # by hand, with σ(0) = 1/2 and σ' = σ(1-σ): dℓ/dz = -p·y·(1-σ) + (1-y)·σ = (1 - y - p·y)/2 and
    # d²ℓ/dz² = (p·y + 1 - y)·σ(1-σ) = (p·y + 1 - y)/4. TF's formula
    # (1-y)·z + (1 + (p-1)·y)·(log1p(exp(-|z|)) + relu(-z)) differentiates |z| and relu at 0 as
    # 0, which gives 1 - y and 0. Either side of 0 (z = ±1e-30) TF agrees with the closed form.
    tf = pytest.importorskip("tensorflow")
    p, y = 0.5, np.array([0.0, 0.25, 1.0])

    def grads(z):
        zt = tf.constant(np.full(3, z))
        with tf.GradientTape() as outer:
            outer.watch(zt)
            with tf.GradientTape() as inner:
                inner.watch(zt)
                loss = tf.reduce_sum(tf.nn.weighted_cross_entropy_with_logits(labels=tf.constant(y), logits=zt,
                                                                              pos_weight=p))
            g = inner.gradient(loss, zt)
        return g.numpy(), outer.gradient(g, zt).numpy()

    g, h = grads(0.0)
    np.testing.assert_array_equal(g, 1 - y)  # the defect
    np.testing.assert_array_equal(h, np.zeros(3))
    np.testing.assert_allclose(grads(1e-30)[0], (1 - y - p * y) / 2, rtol=1e-15)  # the closed form
    np.testing.assert_allclose(grads(-1e-30)[1], (p * y + 1 - y) / 4, rtol=1e-15)
    loss, impl = stf.weighted_cross_entropy_with_logits((p, p, p), "sum")
    report = symjac.verify_loss(loss, derivative=impl.derivative, hvp=impl.hvp, pred=np.zeros((1, 3)),
                                label=y[None], dtype="float64")
    assert {"wrong_values", "wrong_second_derivative"} <= set(report.categories())
    config = next(c for c in stf.loss_configurations("full") if c.op == "weighted_cross_entropy_with_logits"
                  and (c.pred == 0).any())
    assert "logits == 0" in stf.known_loss_defect(config, np.float32, "derivative")


def test_a_scalar_bfloat16_loss_comes_back_as_an_array():
    # np.array() of a 0-d bfloat16 tf.Tensor raises ("__array__ method not producing an array"):
    # the adapter reads tensors with .numpy(), so bfloat16 cells are checked, not bad_output
    pytest.importorskip("ml_dtypes")
    loss, impl = stf.sigmoid_cross_entropy_with_logits("mean")
    report = symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=impl.hvp,
                                pred=LOGITS, label=CASES[0][1], dtype="bfloat16")
    assert report.ok, str(report)


# ------------------------------------------------------------------ Poisson (issue 32)

# log-rates and targets: counts 0, 1 (the Stirling mask's edge), 2, 6 and rates 0.5, 3.5
LOG_RATES = np.array([[0.5, -1.25, 0.0], [1.5, -0.75, 2.0]])
COUNTS = np.array([[0.0, 0.5, 1.0], [2.0, 3.5, 6.0]])


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_log_poisson_loss_passes_derivative_and_hvp(full, reduction):
    loss, impl = stf.log_poisson_loss(full, reduction)
    assert loss == symjac.Loss("poisson_nll", reduction=reduction, full=full)
    upstream = UPSTREAM["elements"] if reduction == "none" else None
    for dtype in ("float32", "float64"):
        report = symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, hvp=impl.hvp,
                                    pred=LOG_RATES, label=COUNTS, upstream=upstream, dtype=dtype)
        assert report.ok, f"{loss} {dtype}: {report}"


def test_log_poisson_stirling_mask_differs_from_pytorch_below_zero_only():
    # TF: the Stirling term y·log y - y + ½·log(2πy) except where 0 <= y <= 1 (tf.nn.log_poisson_loss's
    # source); PyTorch adds it where y > 1. At y = 3.5 both add it: by hand 3.5·log 3.5 - 3.5 + ½·log 7π;
    # at y = 0.5 neither; at y = -1 TF adds it (NaN: log of a negative) where PyTorch adds 0
    tf = pytest.importorskip("tensorflow")
    c = np.array([0.25, 0.25, 0.25])
    y = np.array([3.5, 0.5, -1.0])
    got = tf.nn.log_poisson_loss(targets=tf.constant(y), log_input=tf.constant(c), compute_full_loss=True).numpy()
    base = np.exp(c) - c * y
    np.testing.assert_allclose(got[0], base[0] + 3.5 * np.log(3.5) - 3.5 + 0.5 * np.log(7 * np.pi), rtol=1e-14)
    assert got[1] == base[1]
    assert np.isnan(got[2])


def test_keras_poisson_passes_at_the_kinds_default_inputs():
    # the default rates reach 2^-10, where an ε = 1e-7 left out shows in float32 and float64
    loss, impl = stf.keras_poisson()
    assert loss == symjac.Loss("poisson_nll", log_input=False, eps=1e-7)
    for dtype in ("float32", "float64"):
        report = symjac.verify_loss(loss, impl, dtype=dtype, families=())
        assert report.ok, f"{dtype}: {report}"


def test_planted_poisson_defects_are_caught():
    tf = pytest.importorskip("tensorflow")
    loss, _ = stf.keras_poisson()
    # ε left out: log(z) for log(z + ε)
    no_eps = stf.loss_impl(lambda p, y: tf.reduce_mean(p - y * tf.math.log(p)), loss)
    report = symjac.verify_loss(loss, no_eps, dtype="float64", families=())
    assert {"wrong_values", "forward_values"} <= set(report.categories()), report
    # the sum under a spec of the mean: the derivative and the forward 6 times too large
    spec, _ = stf.log_poisson_loss(False, "mean")
    summed = stf.loss_impl(lambda p, y: tf.reduce_sum(tf.nn.log_poisson_loss(y, p)), spec)
    report = symjac.verify_loss(spec, summed, pred=LOG_RATES, label=COUNTS, dtype="float32")
    assert "wrong_scale" in report.categories() and "6" in report.summary(), report
    # the Stirling term left out under full=True: the forward only (it does not depend on the log-rate)
    full, _ = stf.log_poisson_loss(True, "sum")
    partial = stf.loss_impl(lambda p, y: tf.reduce_sum(tf.nn.log_poisson_loss(y, p)), full)
    report = symjac.verify_loss(full, partial, pred=LOG_RATES, label=COUNTS, dtype="float64")
    assert report.categories() == ["forward_values"], report
