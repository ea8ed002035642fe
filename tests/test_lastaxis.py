"""Tests for ``symjac._lastaxis``: each reduction is NumPy's own reduction over the last
axis (the expected values are NumPy's ``max``/``any``/``sum``), value and dtype, on
small arrays (the contiguous-copy path) and on the arrays it leaves to NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from symjac._lastaxis import SMALL, any_last, count_last, max_last


def _cases():
    rng = np.random.default_rng(7)
    yield rng.integers(-5, 5, size=(2, 1024, 9)).astype(np.float64)  # ties within rows
    yield np.where(rng.random((1, 32, 32, 3)) < 0.2, -np.inf, rng.random((1, 32, 32, 3)))
    yield rng.integers(-2**62, 2**62, size=(3, 7), dtype=np.int64)
    yield rng.random(5).astype(np.float16)
    yield np.array([[1, 2**70], [3, -4]], dtype=object)  # Python ints: left to NumPy
    yield rng.random((1, SMALL // 8 + 1, 9))  # above SMALL: left to NumPy
    yield np.zeros((4, 1))


@pytest.mark.parametrize("a", list(_cases()), ids=lambda a: f"{a.dtype}{a.shape}")
def test_reductions_are_numpys(a):
    for keepdims in (False, True):
        got, want = max_last(a, keepdims=keepdims), a.max(axis=-1, keepdims=keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    b = a > np.median(a.astype(np.float64)) if a.dtype != object else a > 1
    for got, want in ((any_last(b), b.any(axis=-1)), (count_last(b), b.sum(axis=-1))):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_an_empty_axis_raises_as_numpy_does():
    with pytest.raises(ValueError):
        max_last(np.zeros((3, 0)))
    assert any_last(np.zeros((3, 0), dtype=bool)).tolist() == [False] * 3
