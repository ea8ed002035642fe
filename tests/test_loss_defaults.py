"""Issue 21's verify_loss items: default inputs built from the Loss (the class count from a
per-class option, a row at ignore_index) and the dtype taken from the data, as verify does.

Expected derivatives come from PyTorch's own losses (float64 autograd), never from symjac.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import symjac

torch = pytest.importorskip("torch")


def _torch_grad(fn: Any) -> Any:
    """The derivative callable: PyTorch's gradient of fn(z, y) at z, in z's dtype."""
    def derivative(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        zt = torch.tensor(z.astype(np.float64), requires_grad=True)
        fn(zt, torch.tensor(y)).backward()
        return zt.grad.numpy().astype(z.dtype)
    return derivative


def test_a_four_class_weight_gets_four_class_default_inputs() -> None:
    w = (1.0, 0.5, 2.0, 4.0)
    loss = symjac.Loss("softmax_ce", weight=w)
    pred, label = symjac.default_loss_inputs(loss)[:2]
    assert pred.shape[-1] == 4 and label.shape == pred.shape
    ref = _torch_grad(lambda z, y: torch.nn.functional.cross_entropy(z, y, weight=torch.tensor(w, dtype=torch.float64)))
    rep = symjac.verify_loss(loss, derivative=ref)  # before: SpecError, weight has 4 entries but pred has 3 classes
    assert rep.ok, rep


def test_a_per_class_pos_weight_gets_default_inputs_of_its_width() -> None:
    pw = (1.0, 2.0, 0.5, 3.0, 0.25)
    loss = symjac.Loss("sigmoid_ce", pos_weight=pw)
    ref = _torch_grad(lambda z, y: torch.nn.functional.binary_cross_entropy_with_logits(
        z, y, pos_weight=torch.tensor(pw, dtype=torch.float64)))
    rep = symjac.verify_loss(loss, derivative=ref)
    assert rep.ok, rep
    assert rep.stats["elements"] == 2 * 5


def _ce(ignore: int) -> Any:
    return lambda z, y: torch.nn.functional.cross_entropy(z, y.long(), ignore_index=ignore)


@pytest.mark.parametrize("ignore", [-100, 1])
def test_the_default_inputs_have_a_row_at_ignore_index(ignore: int) -> None:
    loss = symjac.Loss("softmax_ce", labels="indices", ignore_index=ignore)
    label = symjac.default_loss_inputs(loss)[1]
    assert ignore in label and any(v != ignore for v in label)
    assert symjac.verify_loss(loss, derivative=_torch_grad(_ce(ignore))).ok


def test_a_mean_over_every_row_despite_ignore_index_fails_at_the_defaults() -> None:
    # the mutant divides by all N rows where PyTorch divides by the counted ones: its
    # derivative is PyTorch's times counted / N, which differs only when a row is ignored
    loss = symjac.Loss("softmax_ce", labels="indices", ignore_index=-100)
    ref = _torch_grad(_ce(-100))

    def mutant(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        counted = int(np.sum(y != -100))
        return (ref(z, y) * counted / len(y)).astype(z.dtype)

    assert not symjac.verify_loss(loss, derivative=mutant).ok  # before: no ignored row, so it passed


def _sigmoid_ce_grad(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _torch_grad(lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b))(z, y)


def test_float32_data_means_float32_checks() -> None:
    pred = np.array([[0.5, -1.0, 2.0], [-0.25, 1.5, -2.0]], dtype=np.float32)
    label = np.array([[1.0, 0.0, 0.25], [0.0, 1.0, 0.75]], dtype=np.float32)
    loss = symjac.Loss("sigmoid_ce")
    rep = symjac.verify_loss(loss, derivative=_sigmoid_ce_grad, pred=pred, label=label)
    assert rep.stats["dtype"] == "float32" and rep.ok, rep
    # a float64 result for float32 inputs is a wrong dtype: float32 is what was asked
    wide = symjac.verify_loss(loss, derivative=lambda z, y: _sigmoid_ce_grad(z, y).astype(np.float64), pred=pred,
                              label=label)
    assert "bad_output" in wide.categories()
    assert symjac.verify_loss(loss, derivative=_sigmoid_ce_grad, pred=pred, label=label,
                              dtype="float64").stats["dtype"] == "float64"


def test_lists_and_integer_data_stay_float64() -> None:
    loss = symjac.Loss("mse")
    rep = symjac.verify_loss(loss, derivative=lambda z, y: 2 * (z - y) / z.size, pred=[1, 2], label=np.array([0, 1]))
    assert rep.stats["dtype"] == "float64" and rep.ok


@pytest.mark.parametrize("kind, width, torch_loss", [
    ("huber", 2, lambda z, y: torch.nn.functional.huber_loss(z, y, delta=2.0)),
    ("smooth_l1", 2, lambda z, y: torch.nn.functional.smooth_l1_loss(z, y, beta=2.0)),
    ("huber", 3, lambda z, y: torch.nn.functional.huber_loss(z, y, delta=3.0)),
    ("smooth_l1", 0.25, lambda z, y: torch.nn.functional.smooth_l1_loss(z, y, beta=0.25)),
])
def test_a_delta_loss_is_verified_at_its_own_defaults(kind: str, width: float, torch_loss: Any) -> None:
    # Issue 34: Loss("huber", delta=2) refused its own default inputs, one |pred - label| being 2, where
    # the second derivative jumps ("InputError: pred[1, 2] is at a kink of huber"). PyTorch's own gradient
    # and double backward pass, and a gradient that takes the quadratic branch's slope everywhere fails
    # (the defaults reach both branches).
    loss = symjac.Loss(kind, delta=width)
    ref = _torch_grad(torch_loss)

    def hvp(z: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
        zt = torch.tensor(z.astype(np.float64), requires_grad=True)
        (g,) = torch.autograd.grad(torch_loss(zt, torch.tensor(y)), zt, create_graph=True)
        (h,) = torch.autograd.grad((g * torch.tensor(v)).sum(), zt)
        return h.numpy().astype(z.dtype)

    rep = symjac.verify_loss(loss, derivative=ref, hvp=hvp)
    assert rep.ok, rep
    scale = 1.0 if kind == "huber" else 1.0 / width  # smooth_l1's quadratic branch is d²/(2β)

    def quadratic_everywhere(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return ((z - y) * scale / z.size).astype(z.dtype)

    assert not symjac.verify_loss(loss, derivative=quadratic_everywhere).ok
