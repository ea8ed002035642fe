"""β tie policies (seed 001): J_β = β·J_split + (1−β)·J_first, exact norms, Clarke membership.

Every expected number is derived by hand in a comment.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy

import symjac
from symjac import Beta, InputError, Pool

SPEC = Pool("max", 2, stride=1)
# Seed 001's tie map (specs/seeds/maxpool_ties.toml): every 2x2 window's maximum 1 is
# attained on three cells; first maximal cells (0,0), (0,1), (1,0), (1,2).
X = [[1, 1, 1], [1, 0, 1], [1, 1, 1]]
ONES = [[1, 1], [1, 1]]
R = sympy.Rational


def test_beta_rows_on_the_seed_map():
    # |I| = 3: the first tied cell gets 1 − β + β/3 = 1 − 2β/3, the two others β/3.
    # β = 1/2: 2/3 and 1/6. Window (0,0) reads (0,0), (0,1), (1,0), (1,1); (1,1) = 0 is untied.
    J = symjac.jacobian(SPEC, X, tie=Beta("1/2")).todense()
    assert J.row(0).tolist() == [[R(2, 3), R(1, 6), 0, R(1, 6), 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("beta, norm, clarke", [
    # Frobenius norm² = 4 windows x ((1 − 2β/3)² + 2(β/3)²):
    (0, 2, True),                                   # 4·1 = 4
    ("1/2", sympy.sqrt(2), True),                   # 4·(4/9 + 1/18) = 4·1/2 = 2
    (1, 2 * sympy.sqrt(3) / 3, True),               # 4·(1/9 + 2/9) = 4/3
    (3, 2 * sympy.sqrt(3), False),                  # 4·((−1)² + 2) = 12; first-cell weight −1 < 0
])
def test_beta_norms_and_clarke_membership(beta, norm, clarke):
    J = symjac.jacobian(SPEC, X, tie=Beta(beta))
    dense = J.todense()
    assert all(sum(dense.row(r)) == 1 for r in range(dense.rows))   # every J_β row sums to 1
    assert sympy.simplify(dense.norm() - norm) == 0
    assert symjac.in_clarke_set(J, X).tolist() == [[clarke, clarke], [clarke, clarke]]


def test_beta_vjp_by_hand():
    # dx = Σ rows. β = 3: first cells −1, the others +1:
    # (0,0): −1 (w00 first); (0,1): +1 (w00) − 1 (w01 first) = 0; (0,2): +1; (1,0): +1 − 1 = 0;
    # (1,2): +1 (w01) − 1 (w11 first) = 0; (2,0): +1; (2,1): +1 + 1 = 2; (2,2): +1.
    assert symjac.vjp(SPEC, X, ONES, tie=Beta(3)).tolist() == [[-1, 0, 1], [0, 0, 0], [1, 2, 1]]
    # β = 1/2: first cells 2/3, others 1/6: (0,1) = 1/6 + 2/3 = 5/6, (2,1) = 1/6 + 1/6 = 1/3.
    assert symjac.vjp(SPEC, X, ONES, tie="beta:1/2").tolist() == [
        [R(2, 3), R(5, 6), R(1, 6)], [R(5, 6), 0, R(5, 6)], [R(1, 6), R(1, 3), R(1, 6)]]
    # β = 0 and 1 are the first and split policies (docs/case-seed001-maxpool-ties.md).
    assert symjac.vjp(SPEC, X, ONES, tie=Beta(0)).tolist() == [[1, 1, 0], [1, 0, 1], [0, 0, 0]]
    assert symjac.vjp(SPEC, X, ONES, tie=Beta(1)).tolist() == symjac.vjp(SPEC, X, ONES, tie="split").tolist()


def test_clarke_limit():
    # In the set iff 0 <= β <= |I|/(|I| − 1): 3/2 for |I| = 3, 2 for a pair.
    assert symjac.in_clarke_set(symjac.jacobian(SPEC, X, tie=Beta("3/2")), X).all()
    assert not symjac.in_clarke_set(symjac.jacobian(SPEC, X, tie=Beta("8/5")), X).any()
    assert not symjac.in_clarke_set(symjac.jacobian(SPEC, X, tie=Beta(-1)), X).any()
    pair = Pool("max", (2,))
    assert symjac.in_clarke_set(symjac.jacobian(pair, [5, 5], tie=Beta(2)), [5, 5]).tolist() == [True]
    assert symjac.in_clarke_set(symjac.jacobian(pair, [5, 5], tie=Beta("201/100")), [5, 5]).tolist() == [False]
    # Untied windows get the one-hot row for any β: (5, 7) -> (0, 1) at β = 3.
    assert symjac.jacobian(pair, [5, 7], tie=Beta(3)).todense().tolist() == [[0, 1]]


def test_beta_values_are_exact():
    assert Beta("1/2") == Beta(Fraction(1, 2)) == Beta(0.5) == Beta(R(1, 2))
    assert Beta("0.1").value == Fraction(1, 10)           # decimal text is exact
    assert str(Beta("1/4")) == "beta:1/4"
    with pytest.raises(InputError, match="not a number"):
        Beta("half")
    with pytest.raises(InputError, match="not finite"):
        Beta(float("inf"))
    with pytest.raises(InputError, match="beta:<b>"):
        symjac.vjp(SPEC, X, ONES, tie="middle")


def test_lowered_beta_vjp():
    # float32 lowering: β = 1/4 at a pair tie (2, 2): first 1 − 1/4 + 1/8 = 7/8, other 1/8 (exact in binary).
    low = symjac.lower(Pool("max", (2,)), (2,))
    dx = low.vjp(np.array([2, 2], np.float32), np.array([1], np.float32), tie=Beta("1/4"))
    assert dx.dtype == np.float32 and dx.tolist() == [0.875, 0.125]


def test_spec_file_tie_key(tmp_path):
    path = tmp_path / "beta.toml"
    path.write_text('[operator]\nkind = "pool"\nmode = "max"\nkernel = 2\nstride = 1\ntie = "beta:3"\n'
                    '[input]\nx = [[1, 1, 1], [1, 0, 1], [1, 1, 1]]\ndy = [[1, 1], [1, 1]]\n'
                    # test_beta_vjp_by_hand: β = 3 on the seed map.
                    '[expect]\ngradient = [[-1, 0, 1], [0, 0, 0], [1, 2, 1]]\n')
    case = symjac.load_spec_file(path).cases[0]
    assert case.tie == Beta(3) and symjac.check_expect(case) == []
    path.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\ntie = "split"\n[input]\nshape = [2, 2]\n')
    with pytest.raises(symjac.SpecError, match="only max pooling has ties"):
        symjac.load_spec_file(path)
    path.write_text('[operator]\nkind = "pool"\nmode = "max"\nkernel = 2\ntie = "beta:x"\n[input]\nshape = [2, 2]\n')
    with pytest.raises(symjac.SpecError, match=r"\[operator\]\.tie"):
        symjac.load_spec_file(path)
