"""Issue 24 item 6, the loss friction: a forward that returns S·L is named as such, and
class indices given where softmax_ce expects probability rows point at labels="indices"."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import symjac

Z = np.array([0.3, -1.2, 2.0])
Y = np.array([1.0, 0.0, 0.5])


def _exact_mean_sigmoid_ce() -> mpmath.mpf:
    # independent of symjac: mean of log(1 + e^z) - y·z at 50 digits
    with mpmath.workdps(50):
        return sum(mpmath.log1p(mpmath.exp(mpmath.mpf(z))) - mpmath.mpf(y) * mpmath.mpf(z) for z, y in zip(Z, Y)) / 3


def _forward(z: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0, z) - y * z))


def _derivative(scale: float):  # S·(sigmoid(z) - y)/n, the mean's derivative
    return lambda z, y: scale * (1 / (1 + np.exp(-z)) - y) / z.size


def test_a_forward_returning_s_times_l_is_named() -> None:
    r = symjac.verify_loss(symjac.Loss("sigmoid_ce", scale=1024), derivative=_derivative(1024),
                           forward=lambda z, y: 1024 * _forward(z, y), pred=Z, label=Y)
    (msg,) = [f.message for f in r.findings if f.category == "forward_values"]
    # the exact ratio: 1024·fl(L) / L is 1024 within one rounding of L
    assert abs(1024 * _forward(Z, Y) / _exact_mean_sigmoid_ce() - 1024) < 1024 * 2**-50
    assert "your forward equals S·L (S = 1024, the loss scale)" in msg


@pytest.mark.parametrize("c,name", [(1000, "1000"), (1 / 64, "1/64"), (-2, "-2")])
def test_a_forward_off_by_an_integer_or_power_of_two_names_the_factor(c: float, name: str) -> None:
    r = symjac.verify_loss(symjac.Loss("sigmoid_ce"), derivative=_derivative(1), forward=lambda z, y: c * _forward(z, y),
                           pred=Z, label=Y)
    (msg,) = [f.message for f in r.findings if f.category == "forward_values"]
    assert f"your forward equals {name}·L" in msg


def test_a_forward_that_is_wrong_otherwise_gets_no_scale_hint() -> None:
    r = symjac.verify_loss(symjac.Loss("sigmoid_ce", scale=1024), derivative=_derivative(1024),
                           forward=lambda z, y: 1 + _forward(z, y), pred=Z, label=Y)
    (msg,) = [f.message for f in r.findings if f.category == "forward_values"]
    assert "your forward equals" not in msg


def test_class_indices_for_probability_rows_hint_at_labels_indices() -> None:
    with pytest.raises(symjac.InputError, match='labels="indices"'):
        symjac.verify_loss(symjac.Loss("softmax_ce"), derivative=_derivative(1), pred=np.zeros((2, 3)),
                           label=np.array([2, 0]))


def test_a_label_of_the_wrong_shape_that_is_not_indices_gets_no_hint() -> None:
    with pytest.raises(symjac.InputError) as err:
        symjac.verify_loss(symjac.Loss("softmax_ce"), derivative=_derivative(1), pred=np.zeros((2, 3)),
                           label=np.array([0.25, 0.5]))
    assert "indices" not in str(err.value)
    with pytest.raises(symjac.InputError) as err:  # mse has no labels option
        symjac.verify_loss(symjac.Loss("mse"), derivative=_derivative(1), pred=np.zeros((2, 3)), label=np.array([2, 0]))
    assert "indices" not in str(err.value)
