"""One implementation object in place of ``backward=``/``forward=`` (issue 24): ``symjac.verify(spec, impl)``
and ``symjac.verify_loss(loss, impl)`` take what the command line's ``--impl`` and the pytest fixture take."""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac.frameworks import Impl


def _mean_pool_1d(x: np.ndarray) -> np.ndarray:
    """Average pooling, kernel 2, stride 2, no padding, on (N, C, L): y_j = (x_2j + x_2j+1) / 2 (by definition)."""
    return ((x[..., 0::2] + x[..., 1::2]) / 2).astype(x.dtype)


def _mean_pool_1d_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx_i = dy_{i//2} / 2: each input cell is in one window of weight 1/2."""
    return (np.repeat(dy, 2, axis=-1) / 2).astype(x.dtype)


SPEC = symjac.Pool("avg", (2,), stride=2)
SHAPE = (1, 1, 8)


@pytest.mark.parametrize("holder", [
    Impl(_mean_pool_1d, _mean_pool_1d_backward, "numpy", "mean_pool"),
    {"forward": _mean_pool_1d, "backward": _mean_pool_1d_backward},
], ids=["Impl", "dict"])
def test_an_implementation_object_is_verified_as_its_callables(holder):
    assert symjac.verify(SPEC, holder, input_shape=SHAPE).ok


def test_the_object_is_what_runs_and_keywords_replace_its_callables():
    wrong = Impl(_mean_pool_1d, lambda x, dy: _mean_pool_1d_backward(x, dy) * 2, "numpy", "doubled")
    assert not symjac.verify(SPEC, wrong, input_shape=SHAPE).ok  # the object's backward ran
    assert symjac.verify(SPEC, wrong, backward=_mean_pool_1d_backward, input_shape=SHAPE).ok


def test_a_forward_only_impl_is_checked_forward_only():
    report = symjac.verify(SPEC, Impl(_mean_pool_1d, None, "numpy", "fwd"), input_shape=SHAPE)
    assert report.ok and "only the forward was checked" in report.headline


def test_an_object_without_a_backward_is_a_named_input_error():
    with pytest.raises(symjac.InputError, match="has no callable 'backward'"):
        symjac.verify(SPEC, object(), input_shape=SHAPE)


def test_a_torch_autograd_function_is_accepted_positionally():
    torch = pytest.importorskip("torch")

    class Pool2(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return (x[..., 0::2] + x[..., 1::2]) / 2

        @staticmethod
        def backward(ctx, dy):
            return torch.repeat_interleave(dy, 2, dim=-1) / 4  # a bug: the weight is 1/2

    report = symjac.verify(SPEC, Pool2, input_shape=SHAPE)
    assert not report.ok and "wrong_weights" in report.categories()


def test_verify_loss_takes_a_loss_impl_with_its_inputs():
    # mse, mean over n = 2 elements: dL/dp = 2(p - y)/n = p - y; scale 1.
    pred, label = np.array([0.5, 2.0]), np.array([1.0, 1.0])
    impl = symjac.LossImpl("mse", derivative=lambda p, y: (p - y).astype(p.dtype), pred=pred, label=label)
    report = symjac.verify_loss(symjac.Loss("mse"), impl)
    assert report.ok and report.stats["elements"] == 2
    halved = {"derivative": lambda p, y: ((p - y) / 2).astype(p.dtype)}
    assert not symjac.verify_loss(symjac.Loss("mse"), halved, pred=pred, label=label).ok


def test_verify_loss_without_an_implementation_says_what_to_give():
    with pytest.raises(symjac.InputError, match="derivative="):
        symjac.verify_loss(symjac.Loss("mse"))


def test_the_testing_asserts_take_an_implementation_object_too():
    from symjac.testing import assert_backward_matches, assert_loss_matches

    impl = Impl(_mean_pool_1d, _mean_pool_1d_backward, "numpy", "mean_pool")
    assert assert_backward_matches(SPEC, impl, input_shape=SHAPE).ok
    with pytest.raises(symjac.VerificationError):
        assert_backward_matches(SPEC, {"backward": lambda x, dy: _mean_pool_1d_backward(x, dy) * 3},
                                input_shape=SHAPE)
    # mse over n = 2: dL/dp = p - y (as above)
    loss_impl = symjac.LossImpl("mse", derivative=lambda p, y: (p - y).astype(p.dtype),
                                pred=np.array([0.5, 2.0]), label=np.array([1.0, 1.0]))
    assert assert_loss_matches(symjac.Loss("mse"), loss_impl).ok
