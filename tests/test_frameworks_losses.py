"""The framework loss adapters (issue 23): ``torch.nn.functional`` losses as ``(Loss, LossImpl)``
whose ``derivative`` and ``hvp`` are PyTorch's autograd, checked by ``verify_loss`` (its hvp
against the exact Hessian); a planted double-backward bug; PyTorch's BCE double-backward eps.
"""

from __future__ import annotations


import numpy as np
import pytest

import symjac
from framework_checks import check_losses

torch = pytest.importorskip("torch")
import symjac.frameworks.torch as sjt  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py
DTYPES = ("float32", "float64")


def _check(configs, dtypes=DTYPES):
    return check_losses(sjt, configs, dtypes)


def test_the_documented_arguments_map_to_the_spec():
    assert sjt.cross_entropy(weight=(1, 2, 0.5), label_smoothing=0.25, reduction="sum")[0] == symjac.Loss(
        "softmax_ce", reduction="sum", weight=(1, 2, 0.5), label_smoothing=0.25, labels="indices", ignore_index=-100)
    assert sjt.kl_div(reduction="batchmean")[0] == symjac.Loss("kld", reduction="batch_mean", log_input=True,
                                                                log_target=False)
    assert sjt.smooth_l1_loss(beta=0.5)[0] == symjac.Loss("smooth_l1", delta=0.5)
    assert sjt.binary_cross_entropy_with_logits(pos_weight=(2, 3))[0] == symjac.Loss("sigmoid_ce", pos_weight=(2, 3))


def test_a_few_configurations_of_every_loss_pass():
    configs = list(sjt.loss_configurations("small"))[:9]  # one of each op of the cycle
    assert {c.op for c in configs} == {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                                       "binary_cross_entropy_with_logits", "cross_entropy", "kl_div"}
    assert _check(configs, ("float32",))["float32"] == 9


@pytest.mark.slow
def test_every_loss_configuration_passes_derivative_and_hvp():
    checked = _check(sjt.loss_configurations("full"))
    assert min(checked.values()) >= 300, checked


def test_grid_covers_the_options():
    configs = list(sjt.loss_configurations("full"))
    kwargs = [c.kwargs for c in configs]
    assert {c.op for c in configs} >= {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                                        "binary_cross_entropy_with_logits", "cross_entropy", "kl_div"}
    for key in ("weight", "pos_weight", "label_smoothing", "log_target", "beta", "delta"):
        assert any(k.get(key) for k in kwargs), key
    assert any(c.op == "cross_entropy" and c.target is not None and (np.asarray(c.target) == -100).any()
               for c in configs)  # ignore_index rows
    assert {k["reduction"] for k in kwargs} == {"mean", "sum", "none", "batchmean"}


def test_pytorch_bce_double_backward_adds_eps_in_float64():
    # PyTorch's binary_cross_entropy double backward is (z^2 - 2zy + y) / ((z + eps)^2 (1 - z + eps)^2)
    # with eps = 1e-12; the exact second derivative is y/z^2 + (1-y)/(1-z)^2: at z = 1/4, y = 1 it
    # is 16, the eps form 16 - 1.7e-10 (computed here in float64, independently of symjac).
    loss, impl = sjt.binary_cross_entropy(reduction="sum")
    pred, label, v = np.array([[0.25, 0.5]]), np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]])
    eps = 1e-12
    with_eps = (pred**2 - 2 * pred * label + label) / ((pred + eps) ** 2 * (1 - pred + eps) ** 2)
    np.testing.assert_array_equal(impl.hvp(pred, label, v), with_eps)
    report = symjac.verify_loss(loss, hvp=impl.hvp, pred=pred, label=label, v=v, dtype="float64")
    assert report.categories() == ["wrong_second_derivative"]
    # float32: 1e-12 is far below its rounding, and the same double backward passes
    assert symjac.verify_loss(loss, hvp=impl.hvp, pred=pred, label=label, v=v, dtype="float32").ok


class _MseGradient(torch.autograd.Function):
    """dL/dpred of a mean squared error, 2(p - y)/n; its own backward (the double backward) forgets the 2."""

    @staticmethod
    def forward(ctx, p, y):
        ctx.n = p.numel()
        return 2 * (p - y) / ctx.n

    @staticmethod
    def backward(ctx, gg):
        return gg / ctx.n, None


class _PlantedMse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, y):
        ctx.save_for_backward(p, y)
        return ((p - y) ** 2).mean()

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        return g * _MseGradient.apply(p, y), None


def test_planted_double_backward_is_wrong_scale_by_one_half():
    loss = symjac.Loss("mse")
    impl = sjt.loss_impl(_PlantedMse.apply, loss)
    pred, label = np.array([[0.5, -1.0, 2.0]]), np.array([[0.25, 0.0, 1.5]])
    assert symjac.verify_loss(loss, derivative=impl.derivative, forward=impl.forward, pred=pred, label=label).ok
    report = symjac.verify_loss(loss, hvp=impl.hvp, pred=pred, label=label)
    # exact: H = 2/n I; the planted one is 1/n I, half of it
    assert report.categories() == ["wrong_scale"] and "1/2" in report.summary()
