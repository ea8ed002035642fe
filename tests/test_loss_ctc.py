"""symjac.Loss("ctc"): the exact loss and derivative, verify_loss's sequence route, PyTorch's convention.

References, independent of the code under test: the loss written out from its definition in mpmath
(every path of C^T collapsed and compared with the target, ``-log Σ_paths Π_t e^{x}``) and
differentiated by ``mpmath.diff``; PyTorch's ``ctc_loss`` forward and backward (float64); a plain
NumPy log-space alpha-beta (``tests/ctc_reference.py``) with one planted slip per defect.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

import symjac
from symjac import InputError, Loss, SpecError, verify_loss

from ctc_reference import pair


def _collapse(path: tuple[int, ...], blank: int) -> tuple[int, ...]:
    out = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
    return tuple(c for c in out if c != blank)


def _brute(x: Any, target: tuple[int, ...], frames: int, blank: int) -> Any:
    """ℓ from the definition: every path of C^T_b whose collapse is the target (mpmath)."""
    classes = len(x[0])
    total = mpmath.mpf(0)
    for path in itertools.product(range(classes), repeat=frames):
        if _collapse(path, blank) == target:
            total += mpmath.exp(mpmath.fsum(x[t][c] for t, c in enumerate(path)))
    return -mpmath.log(total) if total else mpmath.inf


def _inputs(seed: int, frames: int, batch: int, classes: int) -> np.ndarray:
    rng = np.random.default_rng(seed)  # eighths in [-3, -1/8]: exact in every dtype
    return -rng.integers(1, 25, size=(frames, batch, classes)).astype(np.float64) / 8


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_exact_loss_and_derivative_against_mpmath_from_the_definition(reduction: str) -> None:
    x = _inputs(1, 4, 3, 3)
    targets = np.array([[1, 1], [1, 2], [2, 0]])  # a repeat (needs a blank between), two labels, one label
    il, tl = np.array([4, 3, 4]), np.array([2, 2, 1])
    loss = Loss("ctc", reduction=reduction)
    label = (targets, il, tl)
    with mpmath.workdps(40):
        rows = [(1, 1), (1, 2), (2,)]

        def item(b: int, column: Any) -> Any:
            return _brute(column, rows[b], int(il[b]), 0)

        def weight(b: int) -> Fraction:
            return Fraction(1, 3 * int(tl[b])) if reduction == "mean" else Fraction(1)

        cols = [[[mpmath.mpf(float(x[t, b, c])) for c in range(3)] for t in range(4)] for b in range(3)]
        expected = sum(mpmath.mpf(weight(b).numerator) / weight(b).denominator * item(b, cols[b]) for b in range(3))
        assert abs(symjac.loss_value(loss, x, label) - expected) < mpmath.mpf(10) ** -35
        got = symjac.loss_derivative(loss, x, label)
        for b, t, c in [(0, 0, 0), (0, 1, 1), (0, 2, 0), (1, 2, 2), (1, 3, 1), (2, 1, 2), (2, 2, 1)]:
            def moved(v: Any, b: int = b, t: int = t, c: int = c) -> Any:
                col = [row[:] for row in cols[b]]
                col[t][c] = v
                return item(b, col)
            w = weight(b)
            d = mpmath.diff(moved, cols[b][t][c]) * w.numerator / w.denominator
            assert abs(got[t, b, c] - d) < mpmath.mpf(10) ** -30, (b, t, c)
    assert got[3, 1, 1] == 0  # beyond item 1's input length: no derivative


def test_repeated_labels_need_a_blank_and_impossible_alignments_are_infinite() -> None:
    x = _inputs(2, 3, 1, 3)
    loss = Loss("ctc", reduction="none")
    # [1, 1] needs 3 frames (1, blank, 1); in 2 frames no path collapses to it
    assert symjac.loss_value(loss, x[:2], (np.array([[1, 1]]), np.array([2]), np.array([2])))[0] == mpmath.inf
    finite = symjac.loss_value(loss, x, (np.array([[1, 1]]), np.array([3]), np.array([2])))[0]
    with mpmath.workdps(40):
        col = [[mpmath.mpf(float(x[t, 0, c])) for c in range(3)] for t in range(3)]
        assert abs(finite - _brute(col, (1, 1), 3, 0)) < mpmath.mpf(10) ** -35
    zeroed = Loss("ctc", reduction="none", zero_infinity=True)
    assert symjac.loss_value(zeroed, x[:2], (np.array([[1, 1]]), np.array([2]), np.array([2])))[0] == 0
    assert all(v == 0 for v in symjac.loss_derivative(zeroed, x[:2], (np.array([[1, 1]]), np.array([2]),
                                                                      np.array([2])), np.array([1.0])).reshape(-1))


def _torch_pair(loss: Loss) -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def call(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray) -> Any:
        return F.ctc_loss(lp, torch.from_numpy(tg), torch.from_numpy(il), torch.from_numpy(tl), blank=loss.blank,
                          reduction=loss.reduction, zero_infinity=bool(loss.zero_infinity))

    def forward(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray) -> np.ndarray:
        return call(torch.from_numpy(lp), tg, il, tl).numpy()

    def derivative(lp: np.ndarray, tg: np.ndarray, il: np.ndarray, tl: np.ndarray, up: Any = None) -> np.ndarray:
        x = torch.from_numpy(lp).requires_grad_()
        out = call(x, tg, il, tl)
        g = torch.ones_like(out) if up is None else torch.from_numpy(up)
        out.backward(g * float(loss.scale))
        return x.grad.numpy()

    return forward, derivative


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_pytorch_forward_equals_the_exact_loss_and_its_gradient_is_the_log_softmax_convention(reduction: str) -> None:
    x = _inputs(3, 9, 3, 5)
    label = (np.array([[1, 1, 2], [3, 4, 0], [2, 2, 2]]), np.array([9, 7, 9]), np.array([3, 2, 3]))
    loss = Loss("ctc", reduction=reduction)
    forward, derivative = _torch_pair(loss)
    up = np.array([0.5, -1.0, 2.0]) if reduction == "none" else None
    exact = np.array(symjac.loss_value(loss, x, label), dtype=float)
    np.testing.assert_allclose(forward(x, *label), exact, rtol=1e-13)
    got = derivative(x, *label, up)
    through = symjac.loss_derivative(Loss("ctc", reduction=reduction, assume_log_softmax=True), x, label, up)
    np.testing.assert_allclose(got, np.array(through, dtype=float), rtol=1e-11, atol=1e-15)
    free = np.array(symjac.loss_derivative(loss, x, label, up), dtype=float)
    # the difference is r_b·e^x at t < T_b (from the definitions: d/dx of ℓ∘log_softmax, Σ_c γ = 1)
    r = up if up is not None else (1 / (3 * np.array([3, 2, 3])) if reduction == "mean" else np.ones(3))
    frames = (np.arange(9)[:, None] < label[1][None, :])[:, :, None]
    np.testing.assert_allclose(got - free, r[None, :, None] * np.exp(x) * frames, rtol=1e-10, atol=1e-15)


def test_default_inputs_reach_repeats_blanks_padding_and_an_impossible_alignment() -> None:
    pred, label, _ = symjac.default_loss_inputs(Loss("ctc", zero_infinity=True))
    targets, il, tl = label
    assert pred.shape == (6, 4, 4) and np.array_equal(pred.astype(np.float16).astype(np.float64), pred)
    assert targets[0, 0] == targets[0, 1] and tl[0] == 3  # a repeat: a blank must separate its copies
    assert il[2] < pred.shape[0]  # padding frames
    assert il[3] < tl[3] + 1 and targets[3, 0] == targets[3, 1]  # 3 frames, [a, a, c] needs 4: impossible
    assert symjac.loss_value(Loss("ctc", reduction="none"), pred, label)[3] == mpmath.inf


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("opts", [{}, {"zero_infinity": True}, {"blank": 2}])
def test_a_correct_numpy_ctc_passes_at_the_defaults(opts: dict[str, Any], reduction: str, dtype: str) -> None:
    loss = Loss("ctc", reduction=reduction, scale=8, **opts)
    forward, derivative = pair(loss)
    r = verify_loss(loss, derivative=derivative, forward=forward, dtype=dtype)
    assert r.ok, str(r)
    assert r.stats["fd_checked"] > 0 and r.stats["fd_consistent"]
    assert r.stats["impossible_alignments"] == (1 if opts.get("zero_infinity") or reduction == "none" else 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_pytorch_ctc_loss_passes_under_its_declared_convention(zero_infinity: bool, reduction: str,
                                                               dtype: str) -> None:
    loss = Loss("ctc", reduction=reduction, scale=8, zero_infinity=zero_infinity, assume_log_softmax=True)
    forward, derivative = _torch_pair(loss)
    r = verify_loss(loss, derivative=derivative, forward=forward, dtype=dtype)
    assert r.ok, str(r)


def test_pytorch_ctc_loss_gradient_is_named_assumes_log_softmax() -> None:
    loss = Loss("ctc", scale=8)
    forward, derivative = _torch_pair(loss)
    r = verify_loss(loss, derivative=derivative, forward=forward)
    assert r.categories() == ["assumes_log_softmax"], str(r)
    assert "assume_log_softmax=True" in r.findings[0].message


DEFECTS = [
    ("mean_no_length", {}, "mean", "wrong_scale", "division by each item's target length"),
    ("ignores_zero_infinity", {"zero_infinity": True}, "mean", "wrong_values", "zero_infinity"),
    ("ignores_zero_infinity", {"zero_infinity": True}, "none", "forward_values", "not zeroed"),
    ("ignores_upstream", {}, "none", "wrong_values", "incoming gradient is ignored"),
    ("wrong_blank", {}, "mean", "wrong_values", ""),
    ("wrong_blank", {}, "sum", "forward_values", ""),
    ("unscaled", {}, "sum", "missing_scale", "S = 8"),
]


@pytest.mark.parametrize(("defect", "opts", "reduction", "category", "said"), DEFECTS)
def test_planted_defects_are_caught_at_the_defaults(defect: str, opts: dict[str, Any], reduction: str,
                                                    category: str, said: str) -> None:
    loss = Loss("ctc", reduction=reduction, scale=8, **opts)
    forward, derivative = pair(loss, defect)
    r = verify_loss(loss, derivative=derivative, forward=forward)
    assert category in r.categories(), str(r)
    assert any(said in f.message for f in r.findings if f.category == category), str(r)


def test_the_declared_convention_flags_a_free_derivative() -> None:
    loss = Loss("ctc", scale=8, assume_log_softmax=True)
    _, derivative = pair(loss)
    r = verify_loss(loss, derivative=derivative)
    assert r.categories() == ["wrong_values"] and "as given" in r.findings[0].message


def test_bad_inputs_and_stages_without_a_template_are_named() -> None:
    x = _inputs(4, 4, 2, 3)
    label = (np.array([[1, 2], [2, 1]]), np.array([4, 4]), np.array([2, 2]))
    with pytest.raises(InputError, match="targets, input_lengths"):
        symjac.loss_value(Loss("ctc"), x, np.array([[1, 2], [2, 1]]))
    with pytest.raises(InputError, match="other than blank=0"):
        symjac.loss_value(Loss("ctc"), x, (np.array([[1, 0], [2, 1]]), label[1], label[2]))
    with pytest.raises(InputError, match="> T = 4"):
        symjac.loss_value(Loss("ctc"), x, (label[0], np.array([5, 4]), label[2]))
    with pytest.raises(InputError, match=r"shape \(T, N, C\)"):
        symjac.loss_value(Loss("ctc"), x[0], label)
    with pytest.raises(SpecError, match="batch_mean"):
        Loss("ctc", reduction="batch_mean")
    with pytest.raises(SpecError, match="blank="):
        Loss("ctc", blank=-1)
    with pytest.raises(SpecError, match="no element template"):
        symjac.loss_hessian(Loss("ctc"), x, label)
    with pytest.raises(InputError, match="hvp"):
        verify_loss(Loss("ctc"), derivative=lambda *a: a[0], hvp=lambda *a: a[0])
    concatenated = (np.array([1, 2, 2, 1]), label[1], label[2])  # PyTorch's 1-D form
    assert symjac.loss_value(Loss("ctc"), x, concatenated) == symjac.loss_value(Loss("ctc"), x, label)
