"""verify(spec, jvp=..., double_backward=...): forward mode and second order of pooling.

The implementations under test are PyTorch's own autodiff (``torch.func.jvp``,
``autograd.grad(create_graph=True)``) or NumPy loops written here from the definition of
pooling; the planted bugs change one thing each, so the windows and cells a report must
name follow from the bug as written (the derivation is beside each one).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import symjac

TORCH = pytest.mark.usefixtures("one_torch_thread")  # the tests of PyTorch's transforms (skip without torch)
MAX = symjac.Pool("max", kernel=(2, 2), stride=(1, 1))
SHAPE = (1, 1, 5, 5)


def _np_avg_jvp(k: int, s: int) -> Any:
    """1-D average pooling's J·t by its definition: y_i = mean(x[i*s : i*s + k])."""
    def jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        n = (x.shape[-1] - k) // s + 1
        return np.stack([t[..., i * s:i * s + k].sum(axis=-1) / k for i in range(n)], axis=-1).astype(x.dtype)
    return jvp


def _np_max_jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """2x2 stride-1 max pooling's J·t: t at the first (row-major) maximum of each window."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, h - 1, w - 1), dtype=x.dtype)
    for idx in np.ndindex(n, c, h - 1, w - 1):
        b, ch, i, j = idx
        win = x[b, ch, i:i + 2, j:j + 2].reshape(-1)
        a = int(np.argmax(win))
        out[idx] = t[b, ch, i + a // 2, j + a % 2]
    return out


def test_a_correct_numpy_jvp_passes_avg_and_max() -> None:
    r = symjac.verify(symjac.Pool("avg", kernel=(4,), stride=(2,)), jvp=_np_avg_jvp(4, 2), input_shape=(2, 3, 12))
    assert r.ok, str(r)
    assert r.stats["transforms"]["jvp"]["ok"]
    r = symjac.verify(MAX, jvp=_np_max_jvp, input_shape=SHAPE)
    assert r.ok, str(r)
    # ties: the first maximum is a Clarke element (PyTorch's "first" policy)
    assert r.stats["transforms"]["jvp"]["shapes"][0]["tie_policy"] == "first"


def test_a_jvp_dropping_one_window_is_named() -> None:
    def dropped(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        y = _np_max_jvp(x, t)
        y[0, 0, 1, 2] = 0  # the planted bug: output window (0,0,1,2) never receives a tangent
        return y

    r = symjac.verify(MAX, jvp=dropped, input_shape=SHAPE)
    assert not r.ok
    assert "missing_windows" in r.categories()
    windows = {f.window for f in r.findings if f.category == "missing_windows" and f.window is not None}
    assert windows == {(0, 0, 1, 2)}
    assert all(f.message.startswith("jvp") for f in r.findings)


def test_a_jvp_reading_a_cell_outside_its_window_names_window_and_cell() -> None:
    jvp = _np_avg_jvp(2, 2)

    def stray(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        y = jvp(x, t)
        y[..., 0] += t[..., 5] / 2  # window 0 reads cells 0, 1; the bug adds cell 5 (weight 1/2)
        return y

    r = symjac.verify(symjac.Pool("avg", kernel=(2,), stride=(2,)), jvp=stray, input_shape=(1, 1, 8))
    assert "wrong_cells" in r.categories()
    f = next(f for f in r.findings if f.category == "wrong_cells" and f.window is not None)
    assert f.window == (0, 0, 0)
    assert (0, 0, 5) in f.cells


def test_a_jvp_that_is_not_linear_in_t_is_found() -> None:
    jvp = _np_avg_jvp(2, 1)

    def absolute(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return jvp(x, np.abs(t))  # right on every indicator probe (t >= 0), wrong on signed t

    r = symjac.verify(symjac.Pool("avg", kernel=(2,), stride=(1,)), jvp=absolute, input_shape=(1, 1, 6))
    assert not r.ok and "partial_windows" in r.categories()


def test_a_jvp_summing_tied_cells_is_outside_the_clarke_set() -> None:
    def summed(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        out = np.zeros((n, c, h - 1, w - 1), dtype=x.dtype)
        for b, ch, i, j in np.ndindex(*out.shape):
            win = x[b, ch, i:i + 2, j:j + 2]
            out[b, ch, i, j] = t[b, ch, i:i + 2, j:j + 2][win == win.max()].sum()  # row sums to |ties| > 1
        return out

    r = symjac.verify(MAX, jvp=summed, input_shape=SHAPE)
    assert "tie_not_subgradient" in r.categories()
    assert all(f.family == "ties" for f in r.findings)


def test_misbehaving_jvps_are_findings() -> None:
    def raises(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        raise RuntimeError("no forward mode")

    r = symjac.verify(MAX, jvp=raises, input_shape=SHAPE)
    assert r.categories() == ["bad_output"] and "RuntimeError" in r.findings[0].message
    r = symjac.verify(MAX, jvp=lambda x, t: np.full((1, 1, 4, 4), np.nan), input_shape=SHAPE)
    assert r.categories() == ["bad_output"]


def test_nothing_to_verify_and_not_callable_raise() -> None:
    with pytest.raises(symjac.InputError, match="nothing to verify"):
        symjac.verify(MAX, input_shape=SHAPE)
    with pytest.raises(symjac.InputError, match="jvp="):
        symjac.verify(MAX, jvp=3, input_shape=SHAPE)


# ---------------------------------------------------------------- PyTorch's own transforms


def _torch(f: Any) -> tuple[Any, Any, Any]:
    torch = pytest.importorskip("torch")

    def jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return torch.func.jvp(f, (torch.tensor(x),), (torch.tensor(t),))[1].numpy()

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        xt = torch.tensor(x, requires_grad=True)
        f(xt).backward(torch.tensor(dy))
        return xt.grad.numpy()

    def double_backward(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xt, dyt = torch.tensor(x, requires_grad=True), torch.tensor(dy, requires_grad=True)
        (dx,) = torch.autograd.grad(f(xt), xt, dyt, create_graph=True)
        ddx, ddy = torch.autograd.grad(dx, (xt, dyt), torch.tensor(v), allow_unused=True)
        return (np.zeros_like(x) if ddx is None else ddx.numpy()), ddy.numpy()

    return jvp, backward, double_backward


def _pool_cases() -> list[Any]:
    return [
        pytest.param(symjac.Pool("max", kernel=(3, 3), stride=(2, 2), padding=((1, 1), (1, 1))),
                     lambda F: (lambda a: F.max_pool2d(a, 3, 2, 1)), (2, 2, 7, 7), id="max3x3s2p1"),
        pytest.param(symjac.Pool("max", kernel=(3,), stride=(1,)), lambda F: (lambda a: F.max_pool1d(a, 3, 1)),
                     (1, 2, 9), id="max1d"),
        pytest.param(symjac.Pool("avg", kernel=(3, 3), stride=(2, 2), padding=((1, 1), (1, 1)), divisor="include_pad"),
                     lambda F: (lambda a: F.avg_pool2d(a, 3, 2, 1)), (2, 2, 7, 7), id="avg-include-pad"),
        pytest.param(symjac.Pool("avg", kernel=(2, 2), stride=(2, 2), ceil_mode=True),
                     lambda F: (lambda a: F.avg_pool2d(a, 2, 2, ceil_mode=True)), (1, 1, 5, 5), id="avg-ceil"),
    ]


@TORCH
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("spec", "make", "shape"), _pool_cases())
def test_pytorch_jvp_and_double_backward_pass(spec: Any, make: Any, shape: Any, dtype: str) -> None:
    F = pytest.importorskip("torch").nn.functional
    jvp, backward, double_backward = _torch(make(F))
    r = symjac.verify(spec, jvp=jvp, backward=backward, double_backward=double_backward, input_shape=shape,
                      dtype=dtype)
    assert r.ok, str(r)
    t = r.stats["transforms"]
    assert t["vjp"]["ok"] and t["jvp"]["ok"] and t["double_backward"]["ok"]
    if spec.mode == "max":  # torch's forward AD routes ties as its backward does (both "first")
        assert t["jvp"]["shapes"][0]["same_element_as_backward"] is True


@TORCH
def test_a_jvp_with_another_valid_tie_element_than_the_backward_is_said_so() -> None:
    _, backward, _ = _torch(lambda a: pytest.importorskip("torch").nn.functional.max_pool2d(a, 2, 1))

    def last(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        # the last maximum: a valid Clarke element, but not PyTorch's backward's (the first)
        flipped = _np_max_jvp(x[..., ::-1, ::-1], t[..., ::-1, ::-1])
        return np.ascontiguousarray(flipped[..., ::-1, ::-1])

    r = symjac.verify(MAX, jvp=last, backward=backward, input_shape=SHAPE)
    assert r.ok, str(r)
    shape_stats = r.stats["transforms"]["jvp"]["shapes"][0]
    assert shape_stats["same_element_as_backward"] is False and shape_stats["elements_differ_at"]
    assert "not the backward's" in r.headline


@TORCH
def test_a_double_backward_with_nonzero_ddx_for_max_names_the_cells() -> None:
    _, _, double_backward = _torch(lambda a: pytest.importorskip("torch").nn.functional.max_pool2d(a, 2, 1))

    def planted(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ddx, ddy = double_backward(x, dy, v)
        ddx = ddx.copy()
        ddx[0, 0, 3, 1] += v[0, 0, 3, 1]  # the bug: cell (0,0,3,1) gets v back as if ∂²/∂x² were 1 there
        return ddx, ddy

    r = symjac.verify(MAX, double_backward=planted, input_shape=SHAPE)
    assert r.categories() == ["wrong_second_derivative"]
    assert all(f.cells == ((0, 0, 3, 1),) for f in r.findings)


@TORCH
def test_a_double_backward_whose_ddy_drops_a_window_is_named() -> None:
    _, _, double_backward = _torch(lambda a: pytest.importorskip("torch").nn.functional.avg_pool1d(a, 2, 1))

    def planted(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ddx, ddy = double_backward(x, dy, v)
        ddy = ddy.copy()
        ddy[0, 1, 3] = 0  # output window (0,1,3) loses its J·v
        return ddx, ddy

    r = symjac.verify(symjac.Pool("avg", kernel=(2,), stride=(1,)), double_backward=planted, input_shape=(1, 2, 7))
    assert "missing_windows" in r.categories()
    assert {f.window for f in r.findings if f.window is not None} == {(0, 1, 3)}
    r = symjac.verify(symjac.Pool("avg", kernel=(2,), stride=(1,)), double_backward=lambda x, dy, v: x,
                      input_shape=(1, 2, 7))
    assert r.categories() == ["bad_output"] and "not a pair" in r.findings[0].message


X_POS = (np.arange(2 * 5 * 5).reshape(1, 2, 5, 5) % 7 + 1) / 4  # no all-zero window: lp is smooth here


@TORCH
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("p", [2, 3])
def test_lp_double_backward_of_pytorch_matches_the_exact_hvp(p: int, dtype: str) -> None:
    F = pytest.importorskip("torch").nn.functional
    jvp, _, double_backward = _torch(lambda a: F.lp_pool2d(a, p, 2, 1))
    spec = symjac.Pool("lp", kernel=(2, 2), stride=(1, 1), p=p)
    r = symjac.verify(spec, jvp=jvp, double_backward=double_backward, x=X_POS.astype(dtype))
    # at the given (positive) x every check passes; the tie input's all-zero windows are another matter
    at_x = [f for f in r.findings if f.family == "given"]
    assert at_x == [], str(r)
    # PyTorch's forward AD of lp_pool2d gives NaN at an all-zero window, where its backward gives 0
    assert {f.category for f in r.findings} <= {"bad_output"}

    def zero_ddx(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros_like(x), double_backward(x, dy, v)[1]  # the bug: lp treated as piecewise linear

    r = symjac.verify(spec, double_backward=zero_ddx, x=X_POS.astype(dtype))
    given = [f for f in r.findings if f.family == "given"]
    assert [f.category for f in given] == ["wrong_second_derivative"]
    assert "50 of 50 cells" in given[0].message  # every cell of a positive window has a nonzero HVP


def test_a_coverage_plan_runs_every_shape() -> None:
    r = symjac.verify(symjac.Pool("avg", kernel=(4,), stride=(2,)), jvp=_np_avg_jvp(4, 2))
    assert r.ok, str(r)
    assert len(r.stats["transforms"]["jvp"]["shapes"]) == len(symjac.cover(symjac.Pool("avg", kernel=(4,),
                                                                                        stride=(2,))))


@pytest.mark.parametrize("p", [1, 2, 3])
def test_the_vectorised_lp_hvp_is_the_exact_engines(p: int) -> None:
    from symjac.pool._jacobian import hvp
    from symjac.verifiers.pool._second import _lp_hvp_mpfr

    spec = symjac.Pool("lp", kernel=(2, 2), stride=(1, 1), p=p)
    g = symjac.resolve(spec, X_POS.shape)
    rng = np.random.default_rng(3)
    dy = rng.integers(-4, 5, size=g.output_shape) / 4
    v = rng.integers(-4, 5, size=X_POS.shape) / 8
    exact = hvp(spec, X_POS, dy, v)  # SymPy, window by window
    want = np.vectorize(lambda e: float(e.evalf(40)), otypes=[np.float64])(exact)
    got = g.from_canonical(_lp_hvp_mpfr(g, X_POS, dy, g.to_canonical(v)), g.in_spatial)
    np.testing.assert_array_equal(got, want)  # both the exact value rounded to float64


def test_a_demanded_tie_policy_applies_to_the_jvp() -> None:
    # _np_max_jvp takes the first maximum: "first" passes, "last" is a tie_policy finding
    assert symjac.verify(MAX, jvp=_np_max_jvp, input_shape=SHAPE, tie="first").ok
    r = symjac.verify(MAX, jvp=_np_max_jvp, input_shape=SHAPE, tie="last")
    assert r.categories() == ["tie_policy"] and "'first'" in r.findings[0].message


def test_a_jvp_that_swaps_channels_is_pinned_to_the_cells_of_the_other_channel() -> None:
    jvp = _np_avg_jvp(2, 2)

    def swapped(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return jvp(x, t[:, ::-1])  # the bug: channel 0 reads channel 1's tangent and vice versa

    # every colour probe's t is the same on both channels, so only the dense t (distinct
    # per channel) shows it; one-hot columns then name the cells in the other channel
    r = symjac.verify(symjac.Pool("avg", kernel=(2,), stride=(2,)), jvp=swapped, input_shape=(1, 2, 4))
    assert "wrong_cells" in r.categories(), str(r)
    f = next(f for f in r.findings if f.category == "wrong_cells" and f.window == (0, 0, 0))
    assert (0, 1, 0) in f.cells and (0, 1, 1) in f.cells  # window (0,0,0) reads channel 1's cells 0 and 1


@TORCH
@pytest.mark.slow
def test_pytorch_transforms_pass_over_a_grid_of_configurations() -> None:
    """60 seeded configurations (1-D/2-D, max/avg, kernel, stride, padding, dilation, ceil_mode,
    float64/float32): PyTorch's VJP, JVP and double backward all pass, no false alarm."""
    F = pytest.importorskip("torch").nn.functional
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(60):
        rank, mode = int(rng.integers(1, 3)), ("max", "avg")[trial % 2]
        k, s = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        pd, d = int(rng.integers(0, k // 2 + 1)), int(rng.integers(1, 3)) if mode == "max" else 1
        ceil = bool(rng.integers(0, 2))
        shape = (1, 2) + (int(rng.integers(max(k * d, 3), 8)),) * rank
        kw: dict[str, Any] = dict(kernel=(k,) * rank, stride=(s,) * rank, padding=((pd, pd),) * rank, ceil_mode=ceil)
        kw.update(dilation=(d,) * rank) if mode == "max" else kw.update(divisor="include_pad")
        try:
            spec = symjac.Pool(mode, **kw)
            symjac.resolve(spec, shape)
        except symjac.SpecError:
            continue
        fn = getattr(F, f"{mode}_pool{rank}d")
        args = (k, s, pd, d, ceil) if mode == "max" else (k, s, pd, ceil)  # avg: count_include_pad=True
        f = functools.partial(lambda a, fn, args: fn(a, *args), fn=fn, args=args)
        jvp, backward, double_backward = _torch(f)
        r = symjac.verify(spec, jvp=jvp, backward=backward, double_backward=double_backward, input_shape=shape,
                          dtype=("float64", "float32")[trial % 3 == 0])
        assert r.ok, f"{spec} at {shape}: {r}"
        checked += 1
    assert checked >= 50


def test_a_wrong_jvp_leads_the_headline_and_the_repr() -> None:
    # issue 33 item 2: a report whose JVP is wrong began "backward matches the exact Jacobian ...",
    # and its repr was cut before it said which derivative failed. 1-D average pooling k=2 s=2:
    # the backward gives each cell dy/2 (right), the JVP twice J·t (wrong weights everywhere).
    spec = symjac.Pool("avg", kernel=(2,), stride=(2,))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return np.repeat(dy / 2, 2, axis=-1).astype(x.dtype)

    def doubled(x: np.ndarray, t: np.ndarray) -> np.ndarray:
        return 2 * _np_avg_jvp(2, 2)(x, t)

    r = symjac.verify(spec, backward=backward, jvp=doubled, input_shape=(1, 1, 8))
    assert not r.ok and r.stats["transforms"]["vjp"]["ok"] and not r.stats["transforms"]["jvp"]["ok"]
    assert r.summary().startswith("jvp: ") and "backward matches the exact Jacobian" in r.summary()
    assert repr(r).startswith("<Report FAIL wrong_weights: jvp: ")
