"""verify_loss's size budget (issue 24 item 5): what cannot finish is refused up front.

Before the budget, mse at 10^7 entries reached 7.3 GB and ran past 300 s, and
softmax_ce at 10^6 rows x 10 classes aborted inside GNU MP at 7.8 GB. The budget
counts pred's entries (rows x classes for softmax_ce) and is checked before any
input is copied or evaluated, so the implementation is never called.
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
import symjac.loss


def _never_called(*args: object) -> object:
    raise AssertionError("the implementation must not be called on a refused input")


@pytest.mark.parametrize("kind,shape", [("mse", (1001,)), ("sigmoid_ce", (7, 143)), ("softmax_ce", (101, 10))])
def test_over_the_budget_is_refused_before_any_call(monkeypatch: pytest.MonkeyPatch, kind: str,
                                                    shape: tuple[int, ...]) -> None:
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)
    n = int(np.prod(shape))  # 1001, 1001, 1010: each one past 1000
    pred = np.zeros(shape)
    label = np.eye(shape[-1])[np.zeros(shape[0], dtype=int)] if kind == "softmax_ce" else np.zeros(shape)
    with pytest.raises(symjac.InputError) as err:
        symjac.verify_loss(symjac.Loss(kind), derivative=_never_called, forward=_never_called, pred=pred, label=label)
    msg = str(err.value)
    assert f"{n:,d} entries" in msg and "budget of 1,000" in msg and "symjac.loss.MAX_ELEMENTS" in msg


def test_at_the_budget_is_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 1000)
    pred, label = np.linspace(-1, 1, 1000), np.zeros(1000)
    # mse, mean: d/dz_j (1/n) Σ (z_i - y_i)^2 = 2 (z_j - y_j) / n; 2·z_j is exact and the
    # division by n = 1000 rounds once, within the derived bound
    derivative = 2 * (pred - label) / 1000
    assert symjac.verify_loss(symjac.Loss("mse"), derivative=lambda z, y: derivative, pred=pred, label=label).ok


def test_the_default_budget_admits_a_million_and_refuses_the_issues_sizes() -> None:
    # 10^6 entries (the size issue 24 asks for) fit; 10^7 (mse at 7.3 GB) and 10^6 x 10
    # (softmax_ce, aborted at 7.8 GB) do not
    assert 10**6 <= symjac.loss.MAX_ELEMENTS < 10**7


def test_a_raised_budget_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 10)
    pred = np.zeros(11)
    with pytest.raises(symjac.InputError, match="budget of 10 "):
        symjac.verify_loss(symjac.Loss("mse"), derivative=_never_called, pred=pred, label=pred)
    monkeypatch.setattr(symjac.loss, "MAX_ELEMENTS", 11)
    # mse at pred == label: the derivative 2 (z - y) / n is exactly 0
    assert symjac.verify_loss(symjac.Loss("mse"), derivative=lambda z, y: np.zeros(11), pred=pred, label=pred).ok
