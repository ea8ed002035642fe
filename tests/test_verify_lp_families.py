"""lp pooling's input families (issue 21 item 5): signed inputs, all-zero windows, finite differences.

The correct implementation here is written from the definition (PyTorch's lp_pool,
symjac/pool/_lp.py's docstring): ``y = S^(1/p)``, ``S = Σ_window x^p`` (signed terms for
odd p), ``∂y/∂x_i = x_i^(p-1)·S^(1/p - 1)``, 0 at ``S = 0`` (``zero_window="zero"``);
each mutant changes one thing a real kernel gets wrong. Before these families every lp
input was made non-negative (``np.abs``), the zero windows came by chance and lp had no
finite differences, so each mutant below passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import symjac
from symjac import Pool


def _windows(x: np.ndarray, k: int) -> np.ndarray:
    """(N, C, L/k, k) disjoint 1-D windows of stride k."""
    n, c, length = x.shape
    return x[..., : length // k * k].reshape(n, c, length // k, k)


def lp_1d(p: int, k: int, *, power: Callable[[np.ndarray, int], np.ndarray] = np.power,
          slope: Callable[[np.ndarray, int], np.ndarray] | None = None,
          zero_row: float = 0.0, quantise: bool = False) -> tuple[Any, Any]:
    """forward and backward of ``Pool("lp", (k,), p=p)`` (stride k), with optional faults:
    ``power`` the term x^p, ``slope`` the factor x^(p-1), ``zero_row`` the row at S = 0,
    ``quantise`` a forward that casts x to integers first."""
    slope = slope or (lambda v, q: np.power(v, q))

    def forward(x: np.ndarray) -> np.ndarray:
        v = np.floor(x) if quantise else x
        s = power(_windows(v, k), p).sum(axis=-1)
        return np.asarray(np.power(s, 1 / p) if p > 1 else s).astype(x.dtype)

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        w = _windows(x, k).astype(np.float64)
        s = power(w, p).sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = slope(w, p - 1) * np.power(s, 1 / p - 1)
        rows = np.where(s == 0, zero_row, rows) if p > 1 else np.ones_like(w)
        dx = np.zeros(x.shape)
        dx[..., : w.shape[2] * k] = (rows * dy[..., None]).reshape(*x.shape[:2], -1)
        return dx.astype(x.dtype)

    return forward, backward


SHAPE = (2, 3, 8)
#: ``lp_1d`` forms x^p before any scale, as PyTorch's lp_pool does: both overflow at the ``extreme``
#: family's inputs (a defect: tests/test_extreme.py), so the tests of the other families here run these.
FAMILIES = {"families": ("nonfinite",)}


@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_a_correct_lp_passes_at_the_signed_inputs(p: int) -> None:
    fwd, bwd = lp_1d(p, 2)
    report = symjac.verify(Pool("lp", (2,), p=p), forward=fwd, backward=bwd, input_shape=SHAPE, **FAMILIES)
    assert report.ok, report.summary()
    assert report.stats["fd_consistent"] is True  # the finite differences ran and agree


@pytest.mark.parametrize("p", [2, 4])
def test_a_backward_that_drops_the_sign_of_x_is_found(p: int) -> None:
    # even p: ∂y/∂x_i = x_i^(p-1)·S^(1/p-1) is odd in x_i; |x_i|^(p-1) is wrong at every negative cell
    fwd, bwd = lp_1d(p, 2, slope=lambda v, q: np.abs(v) ** q)
    report = symjac.verify(Pool("lp", (2,), p=p), forward=fwd, backward=bwd, input_shape=SHAPE, **FAMILIES)
    assert "wrong_weights" in report.categories(), report.summary()


def test_an_odd_p_computed_as_the_p_norm_is_found() -> None:
    # p = 3 with Σ|x|^3 (the 3-norm) for PyTorch's Σx^3: equal at x >= 0, wrong at a negative cell,
    # forward and backward alike (the backward's sign(x)|x|^2 = x·|x|)
    fwd, bwd = lp_1d(3, 2, power=lambda v, q: np.abs(v) ** q, slope=lambda v, q: v * np.abs(v))
    report = symjac.verify(Pool("lp", (2,), p=3), forward=fwd, backward=bwd, input_shape=SHAPE, **FAMILIES)
    assert {"forward_values", "wrong_weights"} <= set(report.categories()), report.summary()


def test_signed_default_inputs_keep_odd_powers_defined() -> None:
    # the generated x has negative cells, and every window of p = 3 a power sum >= Σ|x|^3 / 4 > 0
    from symjac.verifiers.pool._inputs import distinct_input

    for p in (3, 5):
        spec = Pool("lp", (3, 3), stride=1, p=p)
        g = symjac.resolve(spec, (2, 3, 7, 7))
        x = g.operator.default_input(g, distinct_input(g, np.float64, 0))
        vals = g.to_canonical(x)[:, g.cells]
        assert (x < 0).any()
        assert ((vals ** p).sum(axis=-1) * 4 >= (np.abs(vals) ** p).sum(axis=-1)).all()
        assert ((vals ** p).sum(axis=-1) > 0).all()


@pytest.mark.parametrize("p", [2, 3])
def test_a_backward_wrong_only_at_all_zero_windows_is_found(p: int) -> None:
    # rows of 1/2 at S = 0: for p = 2 and a 3-cell window Σ|g|^2 = 3/4 <= 1 (inside the Clarke
    # set, passes); 2 each is outside it (Σ = 12) and is not the spec's row (0) for p = 3
    spec = Pool("lp", (3,), p=p)
    for row, ok in ((2.0, False),) + (((0.5, True),) if p == 2 else ()):
        fwd, bwd = lp_1d(p, 3, zero_row=row)
        report = symjac.verify(spec, forward=fwd, backward=bwd, input_shape=(1, 1, 3), **FAMILIES)
        assert report.ok is ok, report.summary()
        if not ok:
            assert report.categories() == ["tie_not_subgradient"]
            assert any("all-zero window" in f.message for f in report.findings)


def test_the_tie_pass_has_all_zero_windows_at_every_shape() -> None:
    from symjac.verifiers.pool._inputs import tie_input

    for spec, shape in ((Pool("lp", (3,), p=2), (1, 1, 3)), (Pool("lp", (2, 2), p=3), (2, 3, 4, 5)),
                        (Pool("lp", (3, 3), stride=1, p=4), (1, 2, 6, 6))):
        g = symjac.resolve(spec, shape)
        for seed in range(5):
            x = g.operator.tie_input(g, tie_input(g, np.float64, seed))
            zero = (g.to_canonical(x)[:, g.cells] == 0).all(axis=-1)
            assert zero.any(axis=1).all()  # in every (N, C) slice
            assert not zero.all() or g.n_out == 1  # beside nonzero windows


@pytest.mark.parametrize("p", [2, 3])
def test_a_forward_that_casts_to_integers_is_found_by_the_finite_differences(p: int) -> None:
    # correct at every integer input, so the forward check passes; its slope is 0 between
    # integers while the (correct) backward says x^(p-1)·S^(1/p-1): only FD sees the pair disagree
    fwd, bwd = lp_1d(p, 2, quantise=True)
    report = symjac.verify(Pool("lp", (2,), p=p), forward=fwd, backward=bwd, input_shape=SHAPE, **FAMILIES)
    assert report.categories() == ["not_fd_consistent"], report.summary()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("p", [2, 3])
def test_the_finite_differences_bound_holds_for_the_lowering(p: int, dtype: str) -> None:
    # symjac's own lowering (sum in the dtype, then sqrt/pow) at the coverage plan: no false alarm
    spec = Pool("lp", (2, 2), stride=1, p=p)
    lowered = symjac.lower(spec, (2, 3, 5, 5))
    report = symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, input_shape=(2, 3, 5, 5), dtype=dtype)
    assert report.ok, report.summary()


torch = pytest.importorskip("torch")


def _torch_lp(p: int, k: int, s: int, rank: int) -> tuple[Any, Any]:
    fn = torch.nn.functional.lp_pool1d if rank == 1 else torch.nn.functional.lp_pool2d

    def forward(x: np.ndarray) -> np.ndarray:
        return fn(torch.tensor(x), p, k, s).numpy()

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        xt = torch.tensor(x, requires_grad=True)
        fn(xt, p, k, s).backward(torch.tensor(dy))
        return xt.grad.numpy()

    return forward, backward


_GRID = [pytest.param(rank, k, s, p, dtype, marks=() if dtype == "float64" and (rank, k) != (2, 2) else pytest.mark.slow)
         for rank, k, s in [(1, 3, 1), (2, 2, 2), (2, 3, 1)] for p in (2, 3, 4) for dtype in ("float32", "float64")]


@pytest.mark.parametrize("rank, k, s, p, dtype", _GRID)
def test_torch_lp_pool_passes_at_signed_inputs_with_finite_differences(rank: int, k: int, s: int, p: int,
                                                                       dtype: str) -> None:
    # PyTorch 2.13's lp_pool computes (sign(S)·relu(|S|)·k·avg(x^p))^(1/p): Σ x^p with signed
    # terms, as symjac defines it, wherever S > 0. It differs only where symjac refuses or
    # reports: S < 0 for p >= 2 (NaN; the inputs keep S > 0) and p = 1 at S = 0 (gradient 0 where
    # the window sum's derivative is 1: tests/test_verify_lp.py)
    fwd, bwd = _torch_lp(p, k, s, rank)
    report = symjac.verify(Pool("lp", (k,) * rank, stride=s, p=p), forward=fwd, backward=bwd, dtype=dtype,
                           **FAMILIES)
    assert report.ok, report.summary()
    assert report.stats["fd_consistent"] is True
