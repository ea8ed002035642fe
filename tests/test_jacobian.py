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
