"""Max pooling's padding value, against an oracle written here: ``np.pad`` and a max per window.

Issue 21 item 3: ``Pool("max", (3,), stride=1, padding=1, pad_value=0)`` at x = [-1] gave -1,
though the window is [0, -1, 0] (max 0): kernel slots that are a pad cell in *every*
window were not stored, so their 0 never competed. The property test draws geometries
whose windows reach far into the padding, up to a kernel spanning the whole padded axis,
for every pad value (None: padding takes no part; 0: pad cells hold 0 and compete).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import sympy

import symjac
from sampling import examples

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


def _oracle(x: np.ndarray, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
            pads: tuple[tuple[int, int], ...], pad_value: int | None) -> tuple[np.ndarray, np.ndarray]:
    """y and dx (upstream gradient all ones) by definition: pad x with ``pad_value`` (-inf for None:
    padding never wins), take each window's max; the first maximal slot in row-major order
    gets the window's gradient (PyTorch's, TF's "first"), and a pad cell has no input to pass it to."""
    fill = -np.inf if pad_value is None else float(pad_value)
    xp = np.pad(x, pads, constant_values=fill)
    real = np.pad(np.ones(x.shape, dtype=bool), pads, constant_values=False)
    out = tuple((xp.shape[a] - dilation[a] * (kernel[a] - 1) - 1) // stride[a] + 1 for a in range(x.ndim))
    y = np.empty(out)
    dxp = np.zeros(xp.shape)
    for o in np.ndindex(*out):
        slots = [tuple(o[a] * stride[a] + j[a] * dilation[a] for a in range(x.ndim))
                 for j in itertools.product(*(range(k) for k in kernel))]
        values = [xp[s] for s in slots]
        top = max(values)
        y[o] = top
        first = slots[values.index(top)]
        if real[first]:
            dxp[first] += 1
    inner = tuple(slice(lo, lo + n) for (lo, _), n in zip(pads, x.shape))
    return y, dxp[inner]


@st.composite
def _cases(draw: Any) -> tuple[Any, np.ndarray, tuple[Any, ...]]:
    rank = draw(st.integers(1, 2))
    kernel, stride, dilation, pads, shape = [], [], [], [], []
    for _ in range(rank):
        length = draw(st.integers(1, 4))
        d = draw(st.integers(1, 2))
        lo, hi = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        # up to the whole padded axis: k = 1 .. the largest with d(k - 1) + 1 <= L + lo + hi
        k = draw(st.integers(1, (length + lo + hi - 1) // d + 1))
        kernel.append(k)
        stride.append(draw(st.integers(1, 3)))
        dilation.append(d)
        pads.append((lo, hi))
        shape.append(length)
    pad_value = draw(st.sampled_from([None, 0]))
    try:
        spec = symjac.Pool("max", tuple(kernel), stride=tuple(stride), padding=tuple(pads),
                           dilation=tuple(dilation), pad_value=pad_value)
        symjac.resolve(spec, tuple(shape))
    except symjac.SpecError:  # a window reading only padding, a pad not below the extent: not a pooling
        hypothesis.assume(False)
    # small integers, often negative (the pad's 0 wins), often 0 (a real cell ties with it)
    x = np.array(draw(st.lists(st.integers(-3, 2), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                 dtype=np.float64).reshape(shape)
    return spec, x, (tuple(kernel), tuple(stride), tuple(dilation), tuple(pads), pad_value)


@hypothesis.settings(max_examples=examples(150), deadline=None)
@hypothesis.given(_cases())
def test_max_pooling_matches_np_pad_and_max_for_every_pad_value(case: Any) -> None:
    spec, x, args = case
    y, dx = _oracle(x, *args)
    assert np.array_equal(np.array(symjac.forward(spec, x), dtype=float), y)
    ones = np.ones(y.shape)
    assert np.array_equal(np.array(symjac.vjp(spec, x, ones, tie="first"), dtype=float), dx)
    lowered = symjac.lower(spec, x.shape)
    assert np.array_equal(lowered.forward(x), y)
    assert np.array_equal(lowered.vjp(x, ones), dx)
    # the expressions evaluate to the forward too (pad cells as their constant)
    names = {sympy.Symbol("x[" + ",".join(map(str, i)) + "]", real=True): sympy.Integer(int(x[i]))
             for i in np.ndindex(*x.shape)}
    exprs = symjac.expressions(spec, x.shape)
    assert np.array_equal(np.array([[e.xreplace(names) for e in exprs.reshape(-1)]], dtype=float).reshape(y.shape), y)


def test_a_window_of_one_cell_between_two_pad_cells_is_their_max() -> None:
    # the reproducer: the one window is [0, -1, 0] with pad_value=0 (max 0, a constant:
    # no gradient), [-inf, -1, -inf] without (max -1, gradient 1)
    x = np.array([[[-1.0]]])
    zero = symjac.Pool("max", (3,), stride=1, padding=1, pad_value=0)
    assert symjac.forward(zero, x)[0, 0, 0] == 0
    assert symjac.jacobian(zero, x).todense() == sympy.Matrix([[0]])
    assert symjac.lower(zero, x.shape).forward(x)[0, 0, 0] == 0
    assert str(symjac.expressions(zero, x.shape)[0, 0, 0]) == "Max(0, x[0,0,0])"
    plain = symjac.Pool("max", (3,), stride=1, padding=1)
    assert symjac.forward(plain, x)[0, 0, 0] == -1
    assert symjac.jacobian(plain, x).todense() == sympy.Matrix([[1]])


def test_a_real_zero_tied_with_pad_cells_follows_the_policy_over_every_padded_slot() -> None:
    # window [pad, x0 = 0, pad]: three slots tie at 0 (row-major pad, x0, pad). "first" and "last"
    # pick a pad cell (gradient lost), "split" gives x0 1/3 (one of 3 tied slots); any row in
    # [0, 1] is in the Clarke set (the hull of e_x0 and the pads' 0)
    spec = symjac.Pool("max", (3,), stride=1, padding=1, pad_value=0)
    x = np.array([[[0.0]]])
    got = {t: symjac.vjp(spec, x, [[[1]]], tie=t)[0, 0, 0] for t in ("first", "last", "split")}
    assert got == {"first": 0, "last": 0, "split": sympy.Rational(1, 3)}
    lowered = symjac.lower(spec, x.shape)
    for row in (0.0, 0.5, 1.0):  # at the tie (x0 = 0) any row in [0, 1]; elsewhere the lowering's
        def backward(x: np.ndarray, dy: np.ndarray, row: float = row) -> np.ndarray:
            return np.where(x == 0, row * dy, lowered.vjp(x, dy))

        report = symjac.verify(spec, forward=lowered.forward, backward=backward, x=x)
        assert report.ok, report.summary()
    report = symjac.verify(spec, forward=lowered.forward, backward=lambda x, dy: np.where(x == 0, 2 * dy, dy), x=x)
    assert "tie_not_subgradient" in report.categories()  # 2 is outside [0, 1]


def test_a_zero_padding_pool_that_forgets_the_pad_fails_verify() -> None:
    # a forward that ignores the padding entirely (PyTorch's -inf padding) on the spec
    spec = symjac.Pool("max", (3,), stride=1, padding=1, pad_value=0)
    plain = symjac.lower(symjac.Pool("max", (3,), stride=1, padding=1), (1, 1, 1))
    report = symjac.verify(spec, forward=plain.forward, backward=plain.vjp, x=np.array([[[-1.0]]]))
    assert not report.ok and "forward_values" in report.categories()
    good = symjac.lower(spec, (1, 1, 1))
    assert symjac.verify(spec, forward=good.forward, backward=good.vjp, x=np.array([[[-1.0]]])).ok
