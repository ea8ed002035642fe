"""lp (power-average) pooling: exact values by hand, PyTorch lp_pool1d/2d as oracle, zero windows.

Expected numbers come from hand derivations in comments or from PyTorch 2.13
(float64). The float comparisons use the rounding bounds derived in the
docstring of ``symjac/pool/_lp.py`` (forward: relative ``(1+2u)·e^{u_r|ln S|/p}·
(1+|η|/(p(1-|η|))) - 1``; gradient entry: ``(1+γ_{9+p})(1+u_r)(1+|e||η|/(1-|η|))
e^{|δ_e||ln S|} - 1``), plus ``γ_m`` for PyTorch accumulating the m windows that read
one cell, plus half an ulp for rounding the exact reference to float64.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import sympy

import symjac
from symjac import InputError, Pool, SpecError
from symjac._exact import ExactArray
from symjac.pool._geometry import resolve
from symjac.pool._lp import bounds, round_array

U = 2.0**-53


def gamma(n, u):
    """Higham's γ_n = n·u/(1 − n·u)."""
    return n * u / (1 - n * u)


def test_bounds_are_tight_enough_to_mean_something():
    # x = (3, 4), p = 2, float64: S = 25 exact, y = 5. Forward: (1 + 2u)(1 + η/(2(1 − η))) − 1 with
    # η = γ_5·25/25 ≈ 5u: about 4.5u relative, i.e. under 2.5e-15 absolute at y = 5 (5 ulps of 5 is
    # 4.4e-15). Gradient rows: γ_11 ≈ 11u, |e|·η = 2.5u and the exponent error
    # |δ_e|·ln S = u·(1/2 + 1/2)·ln 25 ≈ 3.2u: about 16.7u, under 20u.
    spec = Pool("lp", (2,), p=2)
    b = bounds(resolve(spec, (2,)), ExactArray.from_any(np.array([3.0, 4.0])), np.float64)
    assert 0 < b.forward[0, 0] < 2.5e-15 and 0 < b.row[0, 0] < 20 * U


# -- exact values, by hand ---------------------------------------------------------------


def test_norm_pooling_sqrt5_stays_algebraic():
    # x = (1, 2): y = √(1 + 4) = √5; ∂y/∂x = x/√5 = (√5/5, 2√5/5).
    spec = Pool("lp", (2,), p=2)
    assert symjac.forward(spec, [1, 2]).tolist() == [sympy.sqrt(5)]
    assert symjac.jacobian(spec, [1, 2]).todense().tolist() == [[sympy.sqrt(5) / 5, 2 * sympy.sqrt(5) / 5]]
    assert symjac.vjp(spec, [1, 2], [3]).tolist() == [3 * sympy.sqrt(5) / 5, 6 * sympy.sqrt(5) / 5]


def test_p3_and_p1_by_hand():
    # p = 3, x = (1, 2): S = 9, y = 9^(1/3) = 3^(2/3); ∂y/∂x_i = x_i²/y² = x_i²·3^(-4/3) = x_i²·3^(2/3)/9.
    spec = Pool("lp", (2,), p=3)
    c = sympy.Integer(3) ** sympy.Rational(2, 3)
    assert symjac.forward(spec, [1, 2]).tolist() == [c]
    assert symjac.jacobian(spec, [1, 2]).todense().tolist() == [[c / 9, 4 * c / 9]]
    # p = 1 is the window sum for any signs: y = 1 + (-3) = -2, row of ones.
    spec1 = Pool("lp", (2,), p=1)
    assert symjac.forward(spec1, [1, -3]).tolist() == [-2]
    assert symjac.jacobian(spec1, [1, -3]).todense().tolist() == [[1, 1]]


def test_2d_overlapping_windows_by_hand():
    # 2x2 windows, stride 1, on [[3, 4, 0], [0, 0, 0]]: window (0,0) = (3,4,0,0), ‖·‖ = 5;
    # window (0,1) = (4,0,0,0), ‖·‖ = 4. dx = J^T (1, 1): cell (0,0) 3/5, cell (0,1) 4/5 + 4/4 = 9/5.
    spec = Pool("lp", 2, stride=1, p=2)
    x = [[3, 4, 0], [0, 0, 0]]
    assert symjac.forward(spec, x).tolist() == [[5, 4]]
    assert symjac.vjp(spec, x, [[1, 1]]).tolist() == [[sympy.Rational(3, 5), sympy.Rational(9, 5), 0], [0, 0, 0]]


def test_negative_power_sum_is_an_input_error():
    # p = 3 at (1, -2): S = 1 - 8 < 0, PyTorch returns NaN; symjac refuses with the window named.
    with pytest.raises(InputError, match=r"p=3 .*negative"):
        symjac.forward(Pool("lp", (2,), p=3), [1, -2])


def test_lp_spec_errors():
    with pytest.raises(SpecError, match="integer power >= 1"):
        Pool("lp", 2, p=0)
    with pytest.raises(SpecError, match="no padding"):
        Pool("lp", 2, p=2, padding="same")
    with pytest.raises(SpecError, match="only meaningful for mode='lp'"):
        Pool("avg", 2, p=2)
    with pytest.raises(SpecError, match="zero_window"):
        Pool("lp", 2, p=2, zero_window="half")


# -- zero windows: the two policies and the Clarke set -------------------------------------


@pytest.mark.parametrize("p", [2, 3, 4])
def test_zero_window_policies_and_clarke(p):
    # Windows (0, 0) and (3, 4). At the all-zero window the row is 0 ("zero") or 1 ("one").
    # Clarke set there: even p: the dual ball Σ|g|^q <= 1, q = p/(p-1): 0 is in it, (1, 1)
    # is not (Σ = 2). Odd p: not locally Lipschitz at S = 0, no Clarke set.
    # The (3, 4) window is smooth: its exact row is its Clarke set.
    x = [0, 0, 3, 4]
    for policy, row in (("zero", [0, 0]), ("one", [1, 1])):
        spec = Pool("lp", (2,), p=p, zero_window=policy)
        J = symjac.jacobian(spec, x)
        assert J.todense()[0, :2].tolist() == [row]
        clarke = symjac.in_clarke_set(J, x).tolist()
        assert clarke == [policy == "zero" and p % 2 == 0, True]


def test_dual_ball_row_in_clarke_set():
    # (1/2, 1/2) at an all-zero p = 2 window: ‖·‖₂ = √(1/2) <= 1, in the set; (1, 1/2): 5/4 > 1, not.
    spec = Pool("lp", (2,), p=2)
    assert symjac.in_clarke_set([["1/2", "1/2"]], [0, 0], spec=spec).tolist() == [True]
    assert symjac.in_clarke_set([[1, "1/2"]], [0, 0], spec=spec).tolist() == [False]


# -- PyTorch oracle ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
TF = torch.nn.functional


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


def _configs(count: int) -> list[dict]:
    rng = random.Random(12)
    out = []
    while len(out) < count:
        rank = rng.choice([1, 2])
        kernel = tuple(rng.randint(1, 3) for _ in range(rank))
        stride = tuple(rng.randint(1, 3) for _ in range(rank))
        spatial = tuple(k + rng.randint(0, 4) for k in kernel)
        p = rng.choice([1, 2, 3])
        kind = rng.choice(["dyadic", "normal", "zeros"])
        out.append(dict(rank=rank, kernel=kernel, stride=stride, shape=(2, 2) + spatial, p=p, kind=kind,
                        seed=rng.randrange(2**31)))
    return out


def _input(cfg: dict) -> np.ndarray:
    rng = np.random.default_rng(cfg["seed"])
    if cfg["kind"] == "dyadic":
        x = rng.integers(-24, 25, size=cfg["shape"]) / 8
    elif cfg["kind"] == "normal":
        x = rng.standard_normal(cfg["shape"]) * 2.0 ** rng.integers(-8, 9)
    else:  # mostly zeros: all-zero windows occur
        x = rng.integers(0, 3, size=cfg["shape"]) * (rng.random(cfg["shape"]) < 0.3) / 4
    if cfg["p"] == 3:
        x = np.abs(x)  # p = 3 needs S >= 0; the sign case is tested separately
    return x.astype(np.float64)


def _torch(cfg: dict, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.tensor(x, requires_grad=True)
    fn = TF.lp_pool1d if cfg["rank"] == 1 else TF.lp_pool2d
    kernel = cfg["kernel"][0] if cfg["rank"] == 1 else cfg["kernel"]
    stride = cfg["stride"][0] if cfg["rank"] == 1 else cfg["stride"]
    y = fn(xt, cfg["p"], kernel, stride)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy()


@pytest.mark.slow
def test_lp_against_torch_lp_pool_on_240_configurations():
    failures, compared, zero_windows = [], 0, 0
    for cfg in _configs(240):
        spec = Pool("lp", cfg["kernel"], stride=cfg["stride"], p=cfg["p"])
        x = _input(cfg)
        g = resolve(spec, x.shape)
        dy = np.random.default_rng(cfg["seed"] + 1).integers(-16, 17, size=g.output_shape) / 8
        y_t, dx_t = _torch(cfg, x, dy)
        ex = ExactArray.from_any(x)
        b = bounds(g, ex, np.float64)
        y_e = round_array(symjac.forward(spec, x), np.float64)
        tol_y = g.from_canonical(b.forward) + U * np.abs(y_e)
        claimed_y = g.from_canonical(b.claimed)
        bad = claimed_y & ~(np.abs(y_t - y_e) <= tol_y)

        # Gradient: dx_i = Σ_w dy_w·J_wi; each term within its window's relative row bound,
        # PyTorch's accumulation of the m_i windows reading cell i within γ_{m_i}.
        J = symjac.jacobian(spec, x)
        dense = np.abs(J.to_numpy(np.float64)) * (1 + U)        # |J| rounded up
        m = np.maximum((dense != 0).sum(axis=0), 1)
        per_term = np.abs(dy.reshape(-1))[:, None] * dense
        growth = (1 + b.row.reshape(-1))[:, None] * (1 + gamma(m, U))[None, :] - 1
        dx_e = round_array(symjac.vjp(spec, x, dy), np.float64).reshape(-1)
        tol_g = (per_term * growth).sum(axis=0) + U * np.abs(dx_e)
        window_values = g.to_canonical(x)[:, g.cells].reshape(-1, g.cells.shape[1])
        if cfg["p"] > 1:
            zero_windows += int((window_values == 0).all(axis=1).sum())
        # Compare cells read only by windows whose bound is claimed; for p = 1 also not by a
        # window with S = 0, where PyTorch's backward is 0 (test_torch_p1_zero_sum_...).
        skip = ~b.claimed.reshape(-1)
        if cfg["p"] == 1:
            skip |= window_values.sum(axis=1) == 0
        compared_cells = ~((dense != 0) & skip[:, None]).any(axis=0)
        bad_g = compared_cells & ~(np.abs(dx_t.reshape(-1) - dx_e) <= tol_g)
        compared += 1
        if bad.any() or bad_g.any():
            failures.append((cfg, float(np.abs(y_t - y_e).max()), float(np.abs(dx_t.reshape(-1) - dx_e).max())))
    assert compared >= 200 and zero_windows > 0
    assert not failures, failures[:5]


@pytest.mark.parametrize("p", [2, 3])
def test_torch_zero_window_gradient_is_the_zero_policy(p):
    # All-zero windows (0, 0) and (0, 0), then (1, 2): PyTorch sets the gradient to 0 there,
    # which is zero_window="zero"; "one" would give 1 on those cells.
    x = np.array([[[0.0, 0.0, 0.0, 0.0, 1.0, 2.0]]])
    _, dx_t = _torch(dict(rank=1, kernel=(2,), stride=(2,), p=p), x, np.ones((1, 1, 3)))
    for policy, first_four in (("zero", [0, 0, 0, 0]), ("one", [1, 1, 1, 1])):
        exact = symjac.vjp(Pool("lp", (2,), p=p, zero_window=policy), x, np.ones((1, 1, 3)))
        assert exact[0, 0, :4].tolist() == first_four
        assert (dx_t[0, 0, :4] == 0).all()
        assert np.allclose(dx_t[0, 0, 4:], round_array(exact[0, 0, 4:], np.float64), rtol=1e-15)


def test_torch_p1_zero_sum_differs_from_the_derivative():
    # p = 1 is linear (derivative 1 everywhere), but PyTorch differentiates sign(S)·relu(|S|)
    # as 0 at S = 0: at x = (1, -1) it returns (0, 0). symjac keeps the true derivative (1, 1).
    x = np.array([[[1.0, -1.0]]])
    _, dx_t = _torch(dict(rank=1, kernel=(2,), stride=(2,), p=1), x, np.ones((1, 1, 1)))
    assert dx_t.tolist() == [[[0.0, 0.0]]]
    assert symjac.vjp(Pool("lp", (2,), p=1), x, [[[1]]]).tolist() == [[[1, 1]]]


def test_torch_negative_power_sum_is_nan():
    # The case symjac refuses (test_negative_power_sum_is_an_input_error): PyTorch gives NaN.
    y, _ = _torch(dict(rank=1, kernel=(2,), stride=(2,), p=3), np.array([[[1.0, -2.0]]]), np.ones((1, 1, 1)))
    assert np.isnan(y).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_lowering_within_the_bound(dtype):
    # symjac's own NumPy lowering, checked against the exact values with the same bounds.
    u = {np.float16: 2.0**-11, np.float32: 2.0**-24, np.float64: 2.0**-53}[dtype]
    for p in (1, 2, 3):
        spec = Pool("lp", 2, stride=1, p=p)
        x = (np.random.default_rng(p).integers(0, 9, size=(2, 3, 5, 5)) / 4).astype(dtype)
        g = resolve(spec, x.shape)
        b = bounds(g, ExactArray.from_any(x), dtype)
        low = symjac.lower(spec, x.shape)
        y_e = round_array(symjac.forward(spec, x), np.float64)
        y = low.forward(x).astype(np.float64)
        assert (np.abs(y - y_e) <= g.from_canonical(b.forward) + u * np.abs(y_e)).all()
        dy = np.ones(g.output_shape, dtype)
        dx = low.vjp(x, dy).astype(np.float64)
        dx_e = round_array(symjac.vjp(spec, x, dy), np.float64)
        # Inputs >= 0, so every term of dx is >= 0 and Σ|terms| = dx: the largest row bound,
        # γ_4 for accumulating up to 4 windows, and one rounding of the reference.
        rel = float(b.row.max())
        assert (np.abs(dx - dx_e) <= ((1 + rel) * (1 + gamma(4, u)) - 1 + u) * np.abs(dx_e)).all()


def test_lp_spec_file_round_trip(tmp_path):
    path = tmp_path / "lp.toml"
    path.write_text('[operator]\nkind = "pool"\nmode = "lp"\nkernel = [2]\np = 2\nzero_window = "one"\n'
                    '[input]\nx = [3, 4, 0, 0]\n')
    case = symjac.load_spec_file(path).cases[0]
    assert case.operator == Pool("lp", (2,), p=2, zero_window="one")
    # Hand: window (3, 4): (3/5, 4/5); all-zero window, policy "one": (1, 1).
    assert symjac.vjp(case.operator, case.inputs["x"], [1, 1]).tolist() == [sympy.Rational(3, 5), sympy.Rational(4, 5), 1, 1]


def test_exact_rounding_of_algebraic_values():
    # √2 to float64 is 0x3FF6A09E667F3BCD (IEEE correctly rounded sqrt, numpy).
    assert round_array(np.array([sympy.sqrt(2)], dtype=object), np.float64)[0] == np.sqrt(2.0)
    assert Fraction(float(round_array(np.array([sympy.Rational(1, 3)], dtype=object), np.float64)[0])) == Fraction(1 / 3)


def test_golden_data_refuses_lp(tmp_path):
    # Golden data and [expect] values are rational; lp's are algebraic: a clear SpecError.
    path = tmp_path / "lp.toml"
    path.write_text('[operator]\nkind = "pool"\nmode = "lp"\nkernel = [2]\np = 2\n[input]\nx = [1, 2]\n'
                    '[expect]\nforward = [1]\n')
    with pytest.raises(SpecError, match="algebraic"):
        symjac.check_expect(symjac.load_spec_file(path).cases[0])


@pytest.mark.parametrize("p", [2, 3])
def test_hvp_matches_torch_double_backward(p: int) -> None:
    # The exact second derivative of lp pooling along v (symjac.pool._ops.lp.Lp.hvp)
    # against PyTorch's double backward of F.lp_pool2d in float64 (an independent
    # implementation: autograd through pow, sum and the root).
    torch = pytest.importorskip("torch")
    from symjac.pool._jacobian import hvp

    spec = symjac.Pool("lp", 2, stride=1, p=p)
    rng = np.random.default_rng(3)
    x = rng.integers(1, 9, size=(1, 2, 3, 4)) / 4  # positive: every power sum > 0 (smooth)
    dy = rng.integers(-4, 5, size=(1, 2, 2, 3)) / 2
    v = rng.integers(-4, 5, size=x.shape) / 4
    want = _torch_hvp(torch, x, dy, v, p)
    got = np.array([float(e) for e in hvp(spec, x, dy, v).reshape(-1)]).reshape(x.shape)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


def _torch_hvp(torch: Any, x: np.ndarray, dy: np.ndarray, v: np.ndarray, p: int) -> np.ndarray:
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.lp_pool2d(t, p, 2, stride=1)
    (g,) = torch.autograd.grad(y, t, torch.tensor(dy), create_graph=True)
    (h,) = torch.autograd.grad(g, t, torch.tensor(v))
    return np.asarray(h.detach().numpy())


def test_hvp_of_norm_pooling_by_hand() -> None:
    # p = 2, one window x = (3, 4) (kernel (2,), a 1-D pool): y = ‖x‖ = 5, and
    # H = (I − x xᵀ/‖x‖²)/‖x‖ = [[16, −12], [−12, 9]]/125. Along v = (1, 0) with dy = 1:
    # H v = (16/125, −12/125).
    from symjac.pool._jacobian import hvp

    spec = symjac.Pool("lp", (2,), p=2)
    h = hvp(spec, np.array([[[3, 4]]]), np.array([[[1]]]), np.array([[[1, 0]]]))
    assert [sympy.nsimplify(e) for e in h.reshape(-1)] == [sympy.Rational(16, 125), sympy.Rational(-12, 125)]
