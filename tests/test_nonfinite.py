"""NaN and ±inf inputs to pooling (issue 34): a default input family (``nonfinite``) with each
operator's stated convention, a user's x with NaN accepted, and the guard letting NaN/inf through
exactly where the exact answer is NaN/inf. Written from the issue: which cell receives a NaN
window's gradient is a convention (PyTorch sends it to the NaN cell), so planted defects that send
it elsewhere or drop it are findings naming the window and the convention, while correct
implementations (NumPy references written from the definitions, PyTorch's own ops) pass."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import edge_impls as E
import symjac

nan, inf = np.nan, np.inf
MAX = symjac.Pool("max", (3,), stride=2, padding=1)
AVG = symjac.Pool("avg", (3,), stride=2, padding=1)
LP = symjac.Pool("lp", (2,), stride=2, p=2)


def impl(forward, backward, tie=None, **kw):
    return {"forward": functools.partial(forward, **kw) if forward else None,
            "backward": functools.partial(backward, **kw, **({"tie": tie} if tie else {})) if backward else None}


def verify(spec, forward=None, backward=None, **kw):
    return symjac.verify(spec, forward=forward, backward=backward, **kw)


# -- correct implementations pass, their policies named ------------------------------------------------


@pytest.mark.parametrize("tie", ["first", "last"])
def test_a_numpy_max_that_propagates_nan_passes_and_names_its_policy(tie):
    rep = verify(MAX, **impl(E.max_forward, E.max_backward, tie=tie))
    assert rep.ok, rep.summary()
    assert rep.stats["families"]["nonfinite"] == 0
    assert rep.stats["nan_policy"] == "propagate"
    assert f"{tie} at NaN windows" in rep.stats["nonfinite_tie_policy"]
    assert "NaN policy propagate" in rep.summary()


def test_a_numpy_max_that_ignores_nan_consistently_passes_as_policy_ignore():
    """IEEE 754-2019 maximumNumber (C's fmax): the window is its largest other cell, the gradient goes there."""
    rep = verify(MAX, forward=functools.partial(E.max_forward, nan="ignore"),
                 backward=functools.partial(E.max_backward, nan="ignore"))
    assert rep.ok, rep.summary()
    assert rep.stats["nan_policy"] == "ignore"


def test_numpy_avg_and_scaled_lp_pass_at_nonfinite_inputs():
    assert verify(AVG, forward=E.avg_forward, backward=E.avg_backward).ok
    lp = dict(kernel=2, stride=2, p=2)
    rep = verify(LP, **impl(E.lp_forward, E.lp_backward, **lp))
    assert rep.ok, rep.summary()
    assert "nonfinite" in rep.stats["families"]


def test_pytorchs_own_pools_pass_with_nan_to_the_last_nan_cell():
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    for spec, fn in (sjt.max_pool2d(3, 2, 1), sjt.avg_pool2d(3, 2, 1), sjt.adaptive_max_pool1d(3),
                     sjt.adaptive_avg_pool2d((2, 3))):
        rep = symjac.verify(spec, fn, dtype="float32")
        assert rep.ok, rep.summary()
        assert "nonfinite" in rep.stats["families"]
    rep = symjac.verify(*sjt.max_pool1d(3, 2), dtype="float32")
    # measured (torch 2.13): [nan, nan, 1] -> dx = [0, 1, 0] (the last NaN), [1, inf, inf] -> [0, 1, 0] (the first inf)
    assert rep.stats["nonfinite_tie_policy"] == "last at NaN windows, first at ±inf windows"
    # lp_pool's VJP at NaN and ±inf only (its unscaled power sum is the extreme family's known defect;
    # its JVP and double backward give NaN at all-zero windows, the tie family's: sjt.known_defect)
    lp = symjac.verify(*sjt.lp_pool1d(2, 2), families=("nonfinite",), dtype="float32", transforms=("vjp",))
    assert lp.ok, lp.summary()


# -- planted defects: findings naming the window and the convention ----------------------------------


def test_max_sending_a_nan_windows_gradient_to_its_largest_number_is_wrong_cells():
    """JAX's shape of bug: the forward propagates NaN, the backward routes as if NaN were not there."""
    rep = verify(MAX, forward=E.max_forward, backward=functools.partial(E.max_backward, nan="ignore"))
    assert not rep.ok
    finding = next(f for f in rep.findings if f.family == "nonfinite")
    assert finding.category in ("wrong_cells", "tie_not_subgradient")
    assert "NaN policy 'propagate'" in finding.message and "at non-finite inputs" in finding.message


def test_max_dropping_a_nan_windows_gradient_is_missing_windows():
    def backward(x, dy):  # routes to the cells equal to the window's maximum: NaN equals nothing
        y = E.max_forward(x)
        _, valid, w = E.windows(x, 3, 2, 1)
        hit = (w == y[..., None]) & valid
        first = hit & (np.cumsum(hit, axis=-1) == 1)
        return E.scatter(x, *E.windows(x, 3, 2, 1)[:2], first * dy[..., None])

    rep = verify(MAX, forward=E.max_forward, backward=backward)
    assert not rep.ok
    assert {f.category for f in rep.findings if f.family == "nonfinite"} & {"missing_windows", "partial_windows"}


def test_max_whose_forward_ignores_nan_but_backward_propagates_is_a_finding():
    rep = verify(MAX, forward=functools.partial(E.max_forward, nan="ignore"), backward=E.max_backward)
    assert not rep.ok
    assert rep.stats["nan_policy"] == "ignore"
    assert any(f.family == "nonfinite" for f in rep.findings)


def test_max_whose_nan_counts_only_in_first_position_follows_no_policy():
    """The C idiom ``if (v > m) m = v`` from the first cell (ONNX Runtime's MaxPool): [nan, 1, 2] is
    NaN but [1, nan, 2] is 2; the value depends on where the NaN sits."""
    def forward(x):
        _, valid, w = E.windows(x, 3, 2, 1)
        best = np.where(valid[..., 0], w[..., 0], -np.inf)
        for k in range(1, w.shape[-1]):
            best = np.where(valid[..., k] & ((w[..., k] > best) | ~valid[..., :k].any(axis=-1)), w[..., k], best)
        return best

    rep = verify(MAX, forward=forward)
    assert not rep.ok
    finding = next(f for f in rep.findings if f.category == "forward_values")
    assert "follows no one policy" in finding.message


def test_avg_turning_an_infinity_into_nan_is_a_forward_values_finding():
    def forward(x):  # the mean scaled by the window's largest magnitude: inf/inf is NaN
        _, valid, w = E.windows(x, 3, 2, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.abs(np.where(valid, w, 0)).max(axis=-1, keepdims=True)
            m = np.where(m == 0, 1, m)
            return (m[..., 0] * (np.where(valid, w, 0) / m).sum(axis=-1) / valid.sum(axis=-1)).astype(x.dtype)

    rep = verify(AVG, forward=forward, backward=E.avg_backward)
    assert not rep.ok
    finding = next(f for f in rep.findings if f.category == "forward_values")
    assert finding.family == "nonfinite" and "IEEE 754's sum" in finding.message
    assert any(np.isinf(float(e)) for e in finding.expected) and any(np.isnan(o) for o in finding.observed)


def test_avg_backward_with_nan_where_its_derivative_is_one_over_d_is_bad_output():
    def backward(x, dy):  # dy/D times x/x: NaN at the NaN and infinite cells
        with np.errstate(invalid="ignore", divide="ignore"):
            return E.avg_backward(x, dy) * np.where(x == 0, 1, x / x)

    rep = verify(AVG, forward=E.avg_forward, backward=backward)
    assert not rep.ok
    assert any(f.category == "bad_output" and "non-finite" in f.message and f.family == "nonfinite"
               for f in rep.findings)


def test_lp_scaled_by_a_maximum_that_includes_the_infinity_is_nan_where_the_exact_is_inf():
    def forward(x):
        _, _, w = E.windows(x, 2, 2, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.abs(w).max(axis=-1, keepdims=True)
            m = np.where(m == 0, 1, m)
            return (m[..., 0] * np.sqrt(((w / m) ** 2).sum(axis=-1))).astype(x.dtype)

    rep = verify(LP, forward=forward, backward=functools.partial(E.lp_backward, kernel=2, stride=2, p=2))
    assert not rep.ok
    assert any(f.category == "forward_values" and f.family == "nonfinite" for f in rep.findings)


def test_lp_backward_spreading_nan_to_the_finite_cells_of_an_infinite_window_is_a_finding():
    """The limit of x_j·S^(-1/2) at a finite cell is 0 when another cell is infinite (PyTorch gives 0)."""
    def backward(x, dy):  # x/y with y = inf, times y/y: NaN everywhere in the window
        dx = E.lp_backward(x, dy, kernel=2, stride=2, p=2)
        _, _, w = E.windows(x, 2, 2, 0)
        bad = np.isinf(w).any(axis=-1)
        return np.where(np.repeat(bad, 2, axis=-1)[..., :x.shape[-1]], np.nan, dx).astype(x.dtype)

    rep = verify(LP, forward=functools.partial(E.lp_forward, kernel=2, stride=2, p=2), backward=backward)
    assert not rep.ok
    assert any(f.family == "nonfinite" for f in rep.findings)


# -- the user's x, and the guard ---------------------------------------------------------------------


def test_a_users_x_with_nan_and_infinities_is_accepted():
    x = np.array([[[nan, 1, 2, 1, nan, nan, inf, 1, 2, -inf, -inf, -inf, 4]]])
    rep = verify(MAX, forward=E.max_forward, backward=E.max_backward, x=x)
    assert rep.ok, rep.summary()
    assert any("finite differences not taken" in n for n in rep.notes)
    wrong = verify(MAX, forward=E.max_forward, backward=functools.partial(E.max_backward, nan="ignore"), x=x)
    assert not wrong.ok and "wrong_cells" in wrong.categories()
    with pytest.raises(symjac.InputError, match="not finite"):
        verify(MAX, forward=E.max_forward, x=np.ones((1, 1, 5)), dy=np.full((1, 1, 3), nan))
    with pytest.raises(symjac.InputError, match="power sum is negative"):  # odd p: -inf is outside lp's domain
        verify(symjac.Pool("lp", (2,), p=3), forward=E.lp_forward, x=np.array([[[-inf, 1.0]]]))


def test_the_guard_flags_a_nan_where_the_exact_answer_is_finite():
    def forward(x):  # NaN at the first output of every row, whatever the input
        y = E.max_forward(x)
        y[..., 0] = np.nan
        return y

    rep = verify(MAX, forward=forward, input_shape=(1, 1, 7))
    assert not rep.ok
    assert any(f.category == "bad_output" and "non-finite" in f.message for f in rep.findings)


def test_nonfinite_is_a_family_of_every_pooling_operator():
    from symjac.pool._geometry import resolve
    from symjac.verifiers.pool._inputs import families, nonfinite_input

    for spec in (MAX, AVG, LP, symjac.AdaptivePool("max", (3,)), symjac.GlobalPool("avg", rank=1),
                 symjac.Pool("lp", (2,), p=3)):
        g = resolve(spec, (2, 3, 11))
        assert "nonfinite" in families(g) and "extreme" in families(g)
        x = nonfinite_input(g, np.float32)
        assert np.isnan(x).any() and np.isposinf(x).any()
        assert np.isneginf(x).any() == (spec.mode != "lp" or spec.p % 2 == 0)


def test_a_framework_object_at_a_nan_x_checks_its_vjp_and_names_what_it_did_not():
    # a user's x holding NaN, given to an object that defines a jvp, a double backward and a batching rule:
    # the VJP is checked there (by max pooling's NaN policy), the others are named as not checked (no
    # exact tangent at NaN), and asking for one by name is a typed error
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    spec, impl = sjt.max_pool2d(2, 2)
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.nan
    rep = symjac.verify(spec, impl, x=x)
    assert rep.ok, rep.summary()
    for name in ("jvp", "double_backward", "vmap"):
        assert rep.stats["transforms"][name] == {"checked": False, "why": "no exact model at an x holding NaN or ±inf"}
    assert "not checked: " in rep.headline and "NaN" in rep.headline
    with pytest.raises(symjac.InputError, match="x holds NaN or ±inf"):
        symjac.verify(spec, impl, x=x, transforms=("jvp",))
