"""Exact forward, Jacobian and VJP against the seed documents and hand derivations."""

from fractions import Fraction

import numpy as np
import pytest
import sympy

import symjac
from symjac import InputError, Pool

R = sympy.Rational
SEED000 = Pool("avg", 2, stride=1, padding="same")
X000 = [[1, 2], [3, 4]]


def rationals(values):
    return [[R(str(v)) for v in row] for row in values]


def test_seed_000_forward():
    # Seed 000: "Forward [2.5, 3, 3.5, 4]".
    assert symjac.forward(SEED000, X000).tolist() == rationals([[2.5, 3], [3.5, 4]])


def test_seed_000_gradient_for_ones():
    # Seed 000: correct input gradient for upstream [1,1,1,1] is [0.25, 0.75, 0.75, 2.25].
    assert symjac.vjp(SEED000, X000, [[1, 1], [1, 1]]).tolist() == rationals([[0.25, 0.75], [0.75, 2.25]])


def test_seed_000_gradient_for_mixed_dy():
    # Seed 000: central differences of the forward at dy = [1,-2,3,4] give [0.25,-0.75,1.75,4.75].
    assert symjac.vjp(SEED000, X000, [[1, -2], [3, 4]]).tolist() == rationals([[0.25, -0.75], [1.75, 4.75]])


def test_seed_000_jacobian_entries():
    # Window (0,0) averages 4 cells, (0,1) cells (0,1),(1,1), (1,0) cells (1,0),(1,1),
    # (1,1) cell (1,1) alone: 4 + 2 + 2 + 1 = 9 nonzeros.
    J = symjac.jacobian(SEED000, (2, 2))
    assert J.nnz == 9 and J.shape == (4, 4)
    assert J.entry((0, 0), (1, 1)) == R(1, 4)
    assert J.entry((0, 1), (1, 1)) == R(1, 2)
    assert J.entry((1, 1), (1, 1)) == 1
    assert J.entry((1, 1), (0, 0)) == 0
    assert J.todense() == sympy.Matrix([
        [R(1, 4), R(1, 4), R(1, 4), R(1, 4)],
        [0, R(1, 2), 0, R(1, 2)],
        [0, 0, R(1, 2), R(1, 2)],
        [0, 0, 0, 1],
    ])


def test_expressions_name_cells_by_index():
    e = symjac.expressions(SEED000, (1, 1, 2, 2))
    x = {f"{i}{j}": sympy.Symbol(f"x[0,0,{i},{j}]", real=True) for i in range(2) for j in range(2)}
    assert sympy.simplify(e[0, 0, 0, 1] - (x["01"] + x["11"]) / 2) == 0
    assert e[0, 0, 1, 1] == x["11"]


# Seed 004 (textbook): 4x4 map, 2x2 max pooling, stride 2. The seed's figures were
# lost, but its text fixes: argmaxes at (1,1), (0,2), (3,0), (2,3); runner-up 5 at
# (1,0) and 4 at (2,2); max bottom-right 8; average bottom-right 5.5. This input is
# one map satisfying every stated fact (bottom-right window 4 + 8 + 6 + 4 = 22 = 4 * 5.5).
X004 = [[1, 3, 7, 2],
        [5, 6, 1, 0],
        [2, 1, 4, 8],
        [7, 3, 6, 4]]
DY004 = [[0.5, -1.0], [2.0, 1.0]]


def test_seed_004_max_backward_routes_to_argmax():
    spec = Pool("max", 2, stride=2)
    y = symjac.forward(spec, X004)
    assert y[1, 1] == 8
    dx = symjac.vjp(spec, X004, DY004)
    expected = np.zeros((4, 4), dtype=object)
    # Seed 004: "(1,1)=0.5 ... (0,2)=-1.0 ... (3,0)=2.0 ... (2,3)=1.0"; every other cell 0.
    expected[1, 1], expected[0, 2], expected[3, 0], expected[2, 3] = R(1, 2), -1, 2, 1
    assert dx.tolist() == expected.tolist()
    assert dx[1, 0] == 0 and dx[2, 2] == 0  # the runner-ups get nothing


def test_seed_004_avg_backward_spreads_a_quarter():
    spec = Pool("avg", 2, stride=2)
    assert symjac.forward(spec, X004)[1, 1] == R(11, 2)  # seed 004: 5.5
    dx = symjac.vjp(spec, X004, DY004)
    # Seed 004: window (0,0) adds 0.5/4 = 0.125 to each of its four cells.
    assert [dx[0, 0], dx[0, 1], dx[1, 0], dx[1, 1]] == [R(1, 8)] * 4
    assert dx[3, 3] == R(1, 4)  # 1.0 / 4


def test_max_tie_policies():
    # 2x2 max, stride 1, SAME on [[1,4],[4,2]]: window (0,0) reads all four cells and
    # ties between (0,1) and (1,0) at 4; the others have unique maxima.
    spec = Pool("max", 2, stride=1, padding="same")
    x = [[1, 4], [4, 2]]
    ties = symjac.tie_sets(spec, x)
    assert ties[0, 0] == ((0, 1), (1, 0)) and ties[1, 1] == ((1, 1),)
    ones = [[1, 1], [1, 1]]
    # first: window (0,0) -> (0,1); window (0,1) reads (0,1),(1,1) -> (0,1);
    # (1,0) reads (1,0),(1,1) -> (1,0); (1,1) -> (1,1).
    assert symjac.vjp(spec, x, ones, tie="first").tolist() == [[0, 2], [1, 1]]
    assert symjac.vjp(spec, x, ones, tie="last").tolist() == [[0, 1], [2, 1]]
    assert symjac.vjp(spec, x, ones, tie="split").tolist() == [[0, R(3, 2)], [R(3, 2), 1]]
    J = symjac.jacobian(spec, x, tie="split")
    assert J.entry((0, 0), (0, 1)) == R(1, 2) and J.entry((0, 0), (1, 0)) == R(1, 2)


def test_exact_inputs_of_every_kind():
    spec = Pool("avg", (2,))
    assert symjac.forward(spec, [Fraction(1, 3), R(2, 3)])[0] == R(1, 2)
    assert symjac.forward(spec, ["1/3", "2/3", 0.1, 0])[1] == R(0.1) / 2  # 0.1 is its exact binary value
    big = 2**70
    assert symjac.forward(spec, [big, big + 2])[0] == big + 1


def test_to_numpy_rounds_each_value_once():
    # avg of 3 cells: 1/3 correctly rounded in each dtype.
    J = symjac.jacobian(Pool("avg", (3,)), (3,))
    for dt in (np.float16, np.float32, np.float64):
        assert J.to_numpy(dt)[0, 0] == dt(1) / dt(3)  # IEEE division of exact operands rounds once


def test_bad_inputs_are_input_errors():
    with pytest.raises(InputError, match=r"max pooling's Jacobian depends on x"):
        symjac.jacobian(Pool("max", 2), (2, 2))
    with pytest.raises(InputError, match=r"dy has shape \(1, 1\); the output shape is \(2, 2\)"):
        symjac.vjp(SEED000, X000, [[1]])
    with pytest.raises(InputError, match=r"is not finite"):
        symjac.forward(SEED000, [[1.0, np.nan], [0.0, 1.0]])
    with pytest.raises(InputError, match=r"tie='random' is not valid"):
        symjac.vjp(Pool("max", 2), X000, [[1]], tie="random")


# -- Pool(pad_value=0): zero padding that takes part in the max -----------------------------------


def _zero_pad_max_pool(x, k, s, p):
    """numpy-ml style 2-D max pooling, written here as the oracle: np.pad with zeros, then the
    argmax of each window (first in row-major order) gets the whole upstream gradient; a pad
    cell has no input to send it to."""
    xp = np.pad(x, p)
    out = (xp.shape[0] - k) // s + 1, (xp.shape[1] - k) // s + 1
    y = np.zeros(out)
    dxp = np.zeros_like(xp)
    for i in range(out[0]):
        for j in range(out[1]):
            win = xp[i * s:i * s + k, j * s:j * s + k]
            a, b = np.unravel_index(np.argmax(win), win.shape)
            y[i, j] = win[a, b]
            dxp[i * s + a, j * s + b] += 1.0
    return y, dxp[p:-p, p:-p] if p else dxp


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k, s, p", [(2, 2, 1), (3, 1, 1), (3, 2, 2), (2, 1, 1)])
def test_pad_value_zero_matches_a_zero_padding_oracle(seed, k, s, p):
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 3, size=(5, 4)).astype(np.float64)  # many negative cells: the pad often wins, often ties
    spec = symjac.Pool("max", k, stride=s, padding=p, pad_value=0)
    y, dx = _zero_pad_max_pool(x, k, s, p)
    assert np.array_equal(np.array(symjac.forward(spec, x), dtype=float), y)
    assert np.array_equal(np.array(symjac.vjp(spec, x, np.ones(y.shape)), dtype=float), dx)  # tie policy "first"
    lowered = symjac.lower(spec, x.shape)
    assert np.array_equal(lowered.forward(x), y) and np.array_equal(lowered.vjp(x, np.ones(y.shape)), dx)


def test_pad_value_zero_gradient_goes_nowhere_when_the_pad_wins():
    # x[0, 0] = -1 alone with three pad cells (value 0) in window (0, 0): y = 0, a constant,
    # so the window's row of the Jacobian is 0 under every policy.
    spec = symjac.Pool("max", 2, stride=2, padding=1, pad_value=0)
    x = np.array([[-1.0, 5.0], [6.0, 7.0]])
    assert symjac.forward(spec, x)[0, 0] == 0
    for tie in ("first", "last", "split"):
        assert symjac.vjp(spec, x, [[1, 0], [0, 0]], tie=tie)[0, 0] == 0
    assert symjac.tie_sets(spec, x)[0, 0] == ()


def test_pad_value_zero_tie_with_the_pad_follows_the_policy_over_all_slots():
    # Window (0, 0) = [[pad, pad], [pad, x00 = 0]]: four slots tie at 0. "first" picks a pad
    # slot (gradient lost), "last" picks x00 (gets 1), "split" gives x00 1/4 (one of 4 tied slots).
    spec = symjac.Pool("max", 2, stride=2, padding=1, pad_value=0)
    x = np.array([[0.0, -5.0], [-6.0, -7.0]])
    got = {t: symjac.vjp(spec, x, [[1, 0], [0, 0]], tie=t)[0, 0] for t in ("first", "last", "split")}
    assert got == {"first": 0, "last": 1, "split": sympy.Rational(1, 4)}


def test_pad_value_is_validated():
    with pytest.raises(symjac.SpecError, match="only meaningful for mode='max'"):
        symjac.Pool("avg", 2, padding=1, pad_value=0)
    with pytest.raises(symjac.SpecError, match="pad_value=1 is not valid"):
        symjac.Pool("max", 2, padding=1, pad_value=1)
    assert "pad_value" not in repr(symjac.Pool("max", 2)) and "pad_value=0" in repr(symjac.Pool("max", 2, pad_value=0))
