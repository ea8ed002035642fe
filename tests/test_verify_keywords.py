"""A mistyped keyword of verify/verify_loss is an InputError naming it and the nearest valid one
(issue 33 item 7c); a ragged x or dy for verify is an InputError, not NumPy's ValueError (item 7d)."""

from __future__ import annotations

import pytest

import symjac


def _backward(x, dy):
    return x


def test_verify_names_a_mistyped_keyword_and_the_valid_one():
    with pytest.raises(symjac.InputError, match=r"'bwd' \(did you mean 'backward'\?\).*input_shape"):
        symjac.verify(symjac.Pool("max", 2), bwd=_backward, input_shape=(2, 2))


def test_verify_loss_names_a_mistyped_keyword_and_the_valid_one():
    with pytest.raises(symjac.InputError, match=r"'derivate' \(did you mean 'derivative'\?\)"):
        symjac.verify_loss(symjac.Loss("mse"), derivate=_backward, pred=[0.0], label=[1.0])


def test_verify_of_an_unpool_spec_names_a_mistyped_keyword_too():
    with pytest.raises(symjac.InputError, match=r"'fwd' \(did you mean 'forward'\?\)"):
        symjac.verify(symjac.MaxUnpool(2), fwd=_backward, input_shape=(1, 1, 2, 2))


def test_valid_keywords_still_pass_through():
    report = symjac.verify(symjac.Pool("avg", 2), backward=lambda x, dy: x * 0, input_shape=(2, 2))
    assert not report.ok  # a zero backward of 2x2 average pooling is wrong: the keywords reached the verifier


@pytest.mark.parametrize("spec", [symjac.Pool("max", 2), symjac.Pool("avg", 2)])
def test_verify_refuses_a_ragged_x_with_an_input_error(spec):
    with pytest.raises(symjac.InputError, match="x is ragged"):
        symjac.verify(spec, backward=_backward, x=[[1, 2], [3]])


def test_verify_refuses_a_ragged_dy_with_an_input_error():
    with pytest.raises(symjac.InputError, match="dy is ragged"):
        symjac.verify(symjac.Pool("max", 2), backward=_backward, input_shape=(2, 2), dy=[[1, 2], [3]])
