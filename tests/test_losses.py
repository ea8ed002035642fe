"""symjac.losses: the Loss spec, exact values and derivatives per kind, bad input.

Every expected number is from seed 003 (shared/seeds/003_*.txt), a hand derivation
in the comment beside it, or mpmath used directly (independent of the code under
test: closed forms evaluated by mpmath, or mpmath.diff of an independently
written loss formula).
"""

from __future__ import annotations

import dataclasses
import doctest
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symjac
from symjac import InputError, Loss, SpecError, loss_derivative, loss_derivative_set, loss_value
from symjac.loss import _elements as LE, _evaluate as L, _templates as LT, _spec as LS
from sampling import examples

TIGHT = mpmath.mpf("1e-50")  # ">= 50 digits": agreement demanded of exact values


@pytest.fixture(autouse=True, scope="module")
def _sixty_digits():
    # The independent mpmath oracles here work at 60 digits; restored after this module.
    with mpmath.workdps(60):
        yield


def vals(a):
    return [mpmath.mpf(v) for v in np.asarray(a, dtype=object).reshape(-1)]


def assert_exact(got, want):
    """got (mpf array/scalar) equals want (numbers/strings/mpf) to 50 digits."""
    g = vals(got)
    w = [mpmath.mpf(Fraction(x).numerator) / Fraction(x).denominator if isinstance(x, (int, str, Fraction)) else
         mpmath.mpf(x) for x in np.asarray(want, dtype=object).reshape(-1)]
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert abs(a - b) <= TIGHT * max(1, abs(b)), (a, b)


# ----------------------------------------------------------------- seed 003


def test_seed003_sigmoid_ce_logit0_label1_scale8():
    # seed 003: base derivative -0.5, expected scaled -4.0. By hand: σ(0) - 1 = -1/2; ×8 = -4.
    assert_exact(loss_derivative(Loss("sigmoid_ce", scale=8), [0.0], [1.0]), [-4])
    assert_exact(loss_derivative(Loss("sigmoid_ce", scale=1), [0.0], [1.0]), ["-1/2"])


def test_seed003_softmax_ce_logits00_label10_scale8():
    # seed 003: base [-0.5, 0.5], expected [-4.0, 4.0]. By hand: softmax([0,0]) - [1,0] = [-1/2, 1/2].
    assert_exact(loss_derivative(Loss("softmax_ce", scale=8), [[0.0, 0.0]], [[1.0, 0.0]]), [-4, 4])
    # Same with a class index instead of the one-hot row.
    assert_exact(loss_derivative(Loss("softmax_ce", scale=8, labels="indices"), [[0.0, 0.0]], [0]), [-4, 4])


def test_seed003_kld_p_quarter_q_half_scale8():
    # seed 003: base -P/Q = -0.5, expected -4.0.
    assert_exact(loss_derivative(Loss("kld", scale=8), [0.5], [0.25]), [-4])


def test_seed003_constant_derivative_scale8():
    # seed 003: base 1.0, expected 8.0.
    assert_exact(loss_derivative(Loss("constant_derivative", scale=8), [0.5]), [8])


# ---------------------------------------------------------- per kind, by hand


def test_mse_by_hand():
    # ℓ = (z - y)²: d = [1, -1] -> ℓ = [1, 1]; mean over n = 2 -> L = 1.
    # dL/dz = 2d/n = [1, -1]; S = 4 -> [4, -4]. sum: 2d·S = [8, -8].
    assert_exact(loss_value(Loss("mse"), [1.5, -0.5], [0.5, 0.5]), [1])
    assert_exact(loss_derivative(Loss("mse", scale=4), [1.5, -0.5], [0.5, 0.5]), [4, -4])
    assert_exact(loss_derivative(Loss("mse", scale=4, reduction="sum"), [1.5, -0.5], [0.5, 0.5]), [8, -8])


def test_mae_by_hand_and_clarke_set_at_the_kink():
    # ℓ = |z - y|: d = [1, -1, 0]; mean over 3: dL/dz = sign(d)/3 = [1/3, -1/3, 0];
    # at d = 0 the Clarke set is [-1, 1]/3 and its minimal-norm element 0 is reported.
    pred, label = [2.0, 0.0, 1.0], [1.0, 1.0, 1.0]
    assert_exact(loss_derivative(Loss("mae"), pred, label), ["1/3", "-1/3", 0])
    lo, hi = loss_derivative_set(Loss("mae"), pred, label)
    assert_exact(lo, ["1/3", "-1/3", "-1/3"])
    assert_exact(hi, ["1/3", "-1/3", "1/3"])
    assert_exact(loss_value(Loss("mae"), pred, label), ["2/3"])  # (1 + 1 + 0)/3


def test_smooth_l1_divides_by_beta_and_huber_does_not():
    # smooth_l1 (β = 2): d = 1 < β: ℓ = d²/(2β) = 1/4, dℓ/dz = d/β = 1/2;
    #                    d = 3 >= β: ℓ = |d| - β/2 = 2,  dℓ/dz = sign(d) = 1.
    # huber (δ = 2):     d = 1: ℓ = d²/2 = 1/2, dℓ/dz = d = 1;
    #                    d = 3: ℓ = δ(|d| - δ/2) = 4, dℓ/dz = δ·sign(d) = 2.   (huber = δ·smooth_l1)
    pred, label = [1.0, 3.0], [0.0, 0.0]
    sl1 = Loss("smooth_l1", delta=2, reduction="none")
    hub = Loss("huber", delta=2, reduction="none")
    assert_exact(loss_value(sl1, pred, label), ["1/4", 2])
    assert_exact(loss_derivative(sl1, pred, label), ["1/2", 1])
    assert_exact(loss_value(hub, pred, label), ["1/2", 4])
    assert_exact(loss_derivative(hub, pred, label), [1, 2])


def test_sigmoid_ce_pos_weight_and_weight_by_hand():
    # ℓ = -w[p·y·log σ(z) + (1-y)·log(1-σ(z))]; dℓ/dz = w[σ(z)(1 - y + p·y) - p·y].
    # z = 0, y = 1, p = 3: σ = 1/2 -> dℓ/dz = 3/2 - 3 = -3/2; ℓ = 3·log 2. S = 8 -> -12.
    loss = Loss("sigmoid_ce", scale=8, pos_weight=3)
    assert_exact(loss_derivative(loss, [0.0], [1.0]), [-12])
    assert_exact(loss_value(loss, [0.0], [1.0]), [3 * mpmath.log(2)])
    # y = 0 ignores p: dℓ/dz = σ(0) = 1/2; weight w = 1/2 halves it -> 1/4; S = 8 -> 2.
    assert_exact(loss_derivative(Loss("sigmoid_ce", scale=8, pos_weight=3, weight=0.5), [0.0], [0.0]), [2])


def test_bce_by_hand():
    # ℓ = -[y log p + (1-y) log(1-p)], dℓ/dp = (p - y)/(p(1 - p)).
    # p = 1/4, y = 1: (-3/4)/(3/16) = -4, ℓ = log 4.   p = 1/4, y = 0: (1/4)/(3/16) = 4/3, ℓ = log(4/3).
    loss = Loss("bce", reduction="none")
    assert_exact(loss_derivative(loss, [0.25, 0.25], [1.0, 0.0]), [-4, "4/3"])
    assert_exact(loss_value(loss, [0.25, 0.25], [1.0, 0.0]), [mpmath.log(4), mpmath.log(mpmath.mpf(4) / 3)])


def test_softmax_ce_weight_smoothing_ignore_index_by_hand():
    # Logits [0, 0]: p = [1/2, 1/2].
    # indices, weight (2, 1), y = 0, mean: D = w_0 = 2; ℓ = 2 log 2 -> L = log 2;
    #   dℓ/dz = w_0 (p - onehot) = [-1, 1] -> dL/dz = [-1/2, 1/2].
    w = Loss("softmax_ce", labels="indices", weight=(2, 1))
    assert_exact(loss_value(w, [[0.0, 0.0]], [0]), [mpmath.log(2)])
    assert_exact(loss_derivative(w, [[0.0, 0.0]], [0]), ["-1/2", "1/2"])
    # label_smoothing ε = 1/2, C = 2: t̃ = (1-ε)·[1, 0] + ε/2 = [3/4, 1/4]; dℓ/dz = p·Σt̃ - t̃ = [-1/4, 1/4].
    ls = Loss("softmax_ce", labels="indices", label_smoothing=0.5)
    assert_exact(loss_derivative(ls, [[0.0, 0.0]], [0]), ["-1/4", "1/4"])
    # Same smoothing on probability labels (PyTorch applies it to both forms).
    assert_exact(loss_derivative(Loss("softmax_ce", label_smoothing=0.5), [[0.0, 0.0]], [[1.0, 0.0]]),
                 ["-1/4", "1/4"])
    # ignore_index: the second row is ignored; mean divides by the 1 counted row.
    ig = Loss("softmax_ce", labels="indices", ignore_index=-100)
    assert_exact(loss_derivative(ig, [[0.0, 0.0], [3.0, -1.0]], [0, -100]), ["-1/2", "1/2", 0, 0])
    assert_exact(loss_value(ig, [[0.0, 0.0], [3.0, -1.0]], [0, -100]), [mpmath.log(2)])


def test_softmax_ce_large_logit_against_mpmath():
    # Independent oracle: mpmath's own log/exp of the closed form, d/dz_c = softmax_c - t_c.
    z = [30.0, -30.0, 0.5]
    den = sum(mpmath.exp(v) for v in z)
    want = [mpmath.exp(z[0]) / den - 1, mpmath.exp(z[1]) / den, mpmath.exp(z[2]) / den]
    assert_exact(loss_derivative(Loss("softmax_ce", labels="indices"), [z], [0]), want)


def test_kld_forms_by_hand():
    # ℓ = P(log P - log Q): P = 1/4, Q = 1/2 -> ℓ = -(log 2)/4 (seed 003's inputs).
    assert_exact(loss_value(Loss("kld"), [0.5], [0.25]), [-mpmath.log(2) / 4])
    # P = 0: 0·log 0 = 0, derivative -P/Q = 0.
    assert_exact(loss_derivative(Loss("kld", reduction="none"), [0.5], [0.0]), [0])
    # log_input (PyTorch kl_div): pred s = log Q, ℓ = P(log P - s), dℓ/ds = -P = -1/4.
    assert_exact(loss_derivative(Loss("kld", log_input=True), [-1.0], [0.25]), ["-1/4"])
    # log_target: label t = log P = -1, ℓ = e^t (t - log Q), dℓ/dQ = -e^t/Q; Q = 1/2 -> -2/e.
    assert_exact(loss_derivative(Loss("kld", log_target=True), [0.5], [-1.0]), [-2 * mpmath.exp(-1)])


def test_constant_derivative_by_hand():
    # ℓ = z, dℓ/dz = 1: sum -> S each; mean over 4 -> S/4 = 2 with S = 8.
    assert_exact(loss_derivative(Loss("constant_derivative", scale=8, reduction="sum"), [1.0, 2.0]), [8, 8])
    assert_exact(loss_derivative(Loss("constant_derivative", scale=8), [[1.0, 2.0], [3.0, 4.0]]), [2, 2, 2, 2])


def test_reductions_divide_by_what_the_docstring_says():
    # mse on a (2, 3) pred with d = 1 everywhere: dℓ/dz = 2.
    # mean: /6 -> 1/3; batch_mean: /2 -> 1; sum: 2; none with upstream u: 2u.
    pred, label = np.ones((2, 3)), np.zeros((2, 3))
    assert_exact(loss_derivative(Loss("mse"), pred, label), ["1/3"] * 6)
    assert_exact(loss_derivative(Loss("mse", reduction="batch_mean"), pred, label), [1] * 6)
    assert_exact(loss_derivative(Loss("mse", reduction="sum"), pred, label), [2] * 6)
    u = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])
    assert_exact(loss_derivative(Loss("mse", reduction="none"), pred, label, u), [2, -4, 1, 0, 6, 2])
    # softmax_ce: one element per row; batch_mean over rows = mean for probabilities.
    z = np.zeros((2, 2))
    t = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert_exact(loss_derivative(Loss("softmax_ce", reduction="batch_mean"), z, t), ["-1/4", "1/4", "1/4", "-1/4"])
    assert_exact(loss_value(Loss("softmax_ce", reduction="none"), z, t), [mpmath.log(2)] * 2)


def test_values_carry_at_least_50_digits():
    # log 2 to 55 digits, from mpmath at 60 digits directly.
    v = loss_value(Loss("softmax_ce"), [[0.0, 0.0]], [[1.0, 0.0]])
    assert abs(v - mpmath.log(2)) < mpmath.mpf(10) ** -55


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.integers(-512, 512), min_size=1, max_size=6), st.integers(0, 3), st.integers(1, 64))
def test_mse_derivative_matches_fractions(ints, shift, scale):
    # Independent exact oracle: d(S·mean((z - y)²))/dz = 2·S·(z - y)/n, in Fractions.
    z = [Fraction(i, 64) for i in ints]
    y = [Fraction(i - shift, 32) for i in ints]
    got = loss_derivative(Loss("mse", scale=scale), [float(v) for v in z], [float(v) for v in y])
    assert_exact(got, [2 * scale * (a - b) / len(z) for a, b in zip(z, y)])


@settings(max_examples=examples(15), deadline=None)
@given(st.integers(-600, 600), st.sampled_from([0.0, 0.25, 1.0]), st.sampled_from([1, 3, 0.5]))
def test_sigmoid_ce_matches_mpmath_diff_of_independent_formula(k, y, pw):
    # Oracle: mpmath.diff of -[p·y·log σ + (1-y) log(1-σ)], σ written with mpmath.exp.
    z = k / 64
    def ell(x):
        s = 1 / (1 + mpmath.exp(-x))
        return -(pw * y * mpmath.log(s) + (1 - y) * mpmath.log(1 - s))
    want = mpmath.diff(ell, mpmath.mpf(z))
    got = loss_derivative(Loss("sigmoid_ce", pos_weight=pw), [z], [y])
    assert abs(got[0] - want) <= mpmath.mpf(10) ** -40 * max(1, abs(want))


# ------------------------------------------------------------------ templates


def test_template_is_sympy_and_differentiated_once():
    t = LE.loss_template(Loss("mse"))
    z, y = t.pred[0], t.label[0]
    assert sympy.expand(t.loss - (z - y) ** 2) == 0
    assert sympy.expand(t.derivatives[0] - 2 * (z - y)) == 0  # by hand: d/dz (z - y)² = 2(z - y)
    c3 = LE.loss_template(Loss("softmax_ce"), classes=3)
    assert len(c3.pred) == 3 and len(c3.derivatives) == 3
    assert LE.loss_template(Loss("softmax_ce"), classes=3) is c3  # cached: built once per class count


def test_rounding_depth_counts_by_hand():
    z, y = sympy.symbols("z y", real=True)
    assert LT.rounding_depth(z - y) == 1          # one subtraction
    assert LT.rounding_depth((z - y) ** 2) == 2   # subtraction, square
    assert LT.rounding_depth(2 * (z - y)) == 1    # ×2 is exact
    assert LT.rounding_depth(sympy.exp(z)) == 2   # libm: 1 ulp = 2u
    assert LT.rounding_depth(z + y + 1) == 2      # a 3-term sum: 2 additions


def test_running_error_by_hand():
    a, b = sympy.symbols("a b", real=True)
    # fl(a + b): error <= u·(|a| + |b|) -> in units of u: |a| + |b|.
    e = LT.running_error(a + b)
    assert e.subs({a: 3, b: -2}) == 5
    # fl(exp(a)): 2u·|exp a| (libm within 1 ulp).
    assert sympy.simplify(LT.running_error(sympy.exp(a)) - 2 * sympy.exp(a)) == 0


def test_to_numpy_rounds_to_nearest():
    # 1/3 to float32 is numpy's own float32(1/3) (double rounding cannot bite here: checked by hand,
    # 1/3 in binary is 0.0101…, far from a float32 midpoint).
    assert L.to_numpy(mpmath.mpf(1) / 3, np.float32) == np.float32(1 / 3)
    assert L.to_numpy(np.array([mpmath.mpf(-4)], dtype=object), np.float16)[0] == np.float16(-4)


def test_default_inputs_are_in_domain_and_dyadic():
    for kind in (name for name in LS.KINDS if not LS.kind_of(Loss(name)).whole):  # ctc: tests/test_loss_ctc.py
        for red in LS.REDUCTIONS:
            loss = Loss(kind, reduction=red)
            pred, label, up = L.default_inputs(loss)
            assert np.array_equal(pred.astype(np.float16).astype(np.float64), pred)  # exact in float16
            L.evaluate(loss, pred, label, up)  # raises if outside the domain
            assert (up is not None) == (red == "none")


def test_module_doctests():
    # The examples in the docstrings run (STYLE: docs examples are executed in tests).
    failures, tried = doctest.testmod(L, verbose=False)[:2]
    assert tried >= 3 and failures == 0


# ------------------------------------------------------------------------ spec


def test_spec_is_frozen_hashable_and_normalised():
    a = Loss("sigmoid_ce", scale=8, pos_weight=[3])
    assert a == Loss("sigmoid_ce", scale=Fraction(8), pos_weight=(3,))
    assert hash(a) == hash(Loss("sigmoid_ce", scale=8, pos_weight=(3,)))
    assert a.scale == Fraction(8) and a.pos_weight == (Fraction(3),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.scale = 1  # type: ignore[misc]
    assert Loss("huber").delta == 1 and Loss("softmax_ce").labels == "probabilities"
    assert repr(Loss("kld", scale=8)) == "Loss('kld', reduction='mean', scale=8, log_input=False, log_target=False)"
    with pytest.raises(SpecError, match=r"scale=0 is not valid"):
        dataclasses.replace(a, scale=0)  # replace re-validates


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "cross_entropy"}, r"kind='cross_entropy' is not valid \(did you mean 'softmax_ce'\?\): give one of 'mse'"),
        ({"kind": "mse", "reduction": "avg"},
         r"reduction='avg' is not valid \(did you mean 'mean'\?\): give one of 'mean', 'batch_mean'"),
        ({"kind": "mse", "scale": 0}, r"scale=0 is not valid: the loss scale S must be > 0"),
        ({"kind": "mse", "scale": -8}, r"scale=-8 is not valid: the loss scale S must be > 0"),
        ({"kind": "mse", "scale": float("nan")}, r"scale=nan is not valid: give a finite number > 0"),
        ({"kind": "mse", "scale": "eight"}, r"scale='eight' is not valid"),
        ({"kind": "huber", "delta": 0}, r"delta=0 is not valid: give a number > 0"),
        ({"kind": "smooth_l1", "delta": -1}, r"delta=-1 is not valid.*kind='mae'"),
        ({"kind": "mse", "pos_weight": 2}, r"pos_weight=2 does not apply to kind='mse': it is an option of 'sigmoid_ce'"),
        ({"kind": "bce", "label_smoothing": 0.1}, r"label_smoothing=0.1 does not apply to kind='bce'"),
        ({"kind": "mse", "log_target": True}, r"log_target=True does not apply to kind='mse'"),
        ({"kind": "softmax_ce", "label_smoothing": 1.5}, r"label_smoothing=1.5 is not valid: give a number in \[0, 1\]"),
        ({"kind": "softmax_ce", "ignore_index": -100}, r"ignore_index=-100 needs labels='indices'"),
        ({"kind": "softmax_ce", "labels": "onehot"}, r"labels='onehot' is not valid: give one of 'probabilities'"),
        ({"kind": "softmax_ce", "labels": "indices", "ignore_index": 1.5}, r"ignore_index=1.5 is not valid"),
        ({"kind": "softmax_ce", "weight": (1, -1)}, r"weight=\(1, -1\) is not valid: -1 < 0"),
        ({"kind": "kld", "log_input": "yes"}, r"log_input='yes' is not valid: give True or False"),
    ],
)
def test_bad_spec_raises_spec_error_naming_the_field(kwargs, match):
    kind = kwargs.pop("kind")
    with pytest.raises(SpecError, match=match):
        Loss(kind, **kwargs)


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "loss, pred, label, match",
    [
        (Loss("mse"), np.zeros((2, 3)), np.zeros((2, 2)),
         r"label has shape \(2, 2\) but pred has shape \(2, 3\)"),
        (Loss("softmax_ce", labels="indices"), np.zeros((2, 3)), np.zeros((2, 3), dtype=int),
         r"label has shape \(2, 3\) but pred has shape \(2, 3\): labels='indices' needs one class index per row"),
        (Loss("bce"), [0.5, 1.0], [0.0, 1.0], r"pred\[1\] = 1.0 is outside \(0, 1\)"),
        (Loss("bce"), [0.5, 0.5], [0.0, 1.5], r"label\[1\] = 1.5 is outside \[0, 1\]"),
        (Loss("kld"), [0.5, 0.5], [-0.25, 0.5], r"label\[0\] = -0.25 is outside \[0, 1\]"),
        (Loss("kld"), [0.0, 0.5], [0.25, 0.5], r"pred\[0\] = 0.0 is outside \(0, 1\]"),
        (Loss("kld"), [1.5, 0.5], [0.25, 0.5], r"pred\[0\] = 1.5 is outside \(0, 1\]"),
        (Loss("kld", log_target=True), [0.5], [0.5], r"label\[0\] = 0.5 is outside \(-inf, 0\]"),
        (Loss("sigmoid_ce"), [0.0], [2.0], r"label\[0\] = 2.0 is outside \[0, 1\]"),
        (Loss("softmax_ce"), [[0.0, 0.0]], [[1.5, 0.0]], r"label\[0, 0\] = 1.5 is outside \[0, 1\]"),
        (Loss("softmax_ce", labels="indices"), np.zeros((2, 3)), [0, 3],
         r"label\[1\] = 3 is out of range: class indices must be in \[0, 3\)"),
        (Loss("softmax_ce", labels="indices"), np.zeros((2, 3)), [0, -1], r"label\[1\] = -1 is out of range"),
        (Loss("softmax_ce", labels="indices"), np.zeros((1, 3)), [0.5], r"label\[0\] = 0.5 is not an integer"),
        (Loss("softmax_ce", labels="indices", ignore_index=-100), np.zeros((2, 3)), [-100, -100],
         r"ignore_index=-100 matches every row of label: reduction='mean' would divide by zero"),
        (Loss("mse"), [float("nan")], [0.0], r"pred\[0\] ?= ?nan is not finite"),
        (Loss("mse"), [0.0], [float("inf")], r"label\[0\] ?= ?inf is not finite"),
        (Loss("mse"), [0.0], None, r"label is None; kind='mse' needs a label"),
        (Loss("mse"), 1.0, 1.0, r"pred is a scalar"),
        (Loss("mse"), np.zeros((0,)), np.zeros((0,)), r"pred has shape \(0,\) with no elements"),
    ],
)
def test_bad_input_raises_input_error_naming_the_argument(loss, pred, label, match):
    with pytest.raises(InputError, match=match):
        loss_derivative(loss, pred, label)
    with pytest.raises(InputError, match=match):
        loss_value(loss, pred, label)


def test_bad_input_with_spec_and_shape():
    with pytest.raises(SpecError, match=r"weight has 2 entries but pred has 3 classes"):
        loss_derivative(Loss("softmax_ce", weight=(1, 2)), np.zeros((1, 3)), [[1.0, 0.0, 0.0]])
    with pytest.raises(SpecError, match=r"pos_weight has 2 entries but pred has 3 classes"):
        loss_derivative(Loss("sigmoid_ce", pos_weight=(1, 2)), np.zeros((1, 3)), np.zeros((1, 3)))
    with pytest.raises(InputError, match=r"weight=\(0.0, 1.0\) gives the labelled rows a total weight of 0"):
        loss_derivative(Loss("softmax_ce", labels="indices", weight=(0, 1)), np.zeros((1, 2)), [0])
    with pytest.raises(InputError, match=r"upstream has shape \(3,\); reduction='none' needs"):
        loss_derivative(Loss("mse", reduction="none"), np.zeros(2), np.zeros(2), np.ones(3))
    with pytest.raises(InputError, match=r"upstream has shape \(2,\); reduction='mean' gives one number"):
        loss_derivative(Loss("mse"), np.zeros(2), np.zeros(2), np.ones(2))
    with pytest.raises(SpecError, match=r"loss='mse' is not a loss spec"):
        loss_value("mse", [0.0], [0.0])  # type: ignore[arg-type]


def test_ignore_index_on_every_row_is_fine_with_sum():
    # With reduction='sum' nothing is divided: every row ignored -> derivative 0, value 0 (by definition).
    loss = Loss("softmax_ce", labels="indices", ignore_index=-100, reduction="sum")
    assert_exact(loss_derivative(loss, np.zeros((2, 2)), [-100, -100]), [0, 0, 0, 0])
    assert_exact(loss_value(loss, np.zeros((2, 2)), [-100, -100]), [0])


def test_public_names():
    for name in ("Loss", "verify_loss", "check_loss_family", "loss_value", "loss_derivative",
                 "loss_derivative_set", "LossImpl", "FamilyTable"):
        assert name in symjac.__all__ and hasattr(symjac, name)


def test_to_numpy_beyond_float_range_is_inf_not_overflow():
    # Issue 10: was OverflowError. 1e400 exceeds float64's 1.8e308 and float32's 3.4e38.
    big = [mpmath.mpf("1e400"), -mpmath.mpf("1e400"), mpmath.mpf("1e39"), mpmath.inf]
    assert L.to_numpy(big).tolist() == [np.inf, -np.inf, 1e39, np.inf]
    assert L.to_numpy(big, np.float32).tolist() == [np.inf, -np.inf, np.inf, np.inf]
