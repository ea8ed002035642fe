"""The in-process guarded call at its edges (issue 34): object-dtype results are a finding, not a
``TypeError``; a helper thread that writes into a returned array some time after the call is caught
in every run, not only when the verification happens to be slow enough."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import symjac

SPEC = symjac.Pool("avg", 2, stride=1, padding="same")
SHAPE = (2, 3, 4, 5)


def _lowered(x):
    return symjac.lower(SPEC, x.shape)


def _forward(x):
    return _lowered(x).forward(x)


def _backward(x, dy):
    return _lowered(x).vjp(x, dy)


@pytest.mark.parametrize("role", ["backward", "forward", "both"])
def test_an_implementation_returning_object_arrays_is_a_bad_output_finding(role):
    """Issue 34: ``.view()`` on an object array made ``verify`` raise TypeError (a regression)."""
    def backward(x, dy):
        return _backward(x, dy).astype(object)

    def forward(x):
        return _forward(x).astype(object)

    kwargs = {"backward": backward if role != "forward" else _backward,
              "forward": forward if role != "backward" else _forward}
    rep = symjac.verify(SPEC, input_shape=SHAPE, **kwargs)
    assert not rep.ok
    assert "bad_output" in rep.categories()
    assert any("dtype object" in f.message for f in rep.findings if f.category == "bad_output")


def test_object_arrays_from_a_loss_derivative_are_a_finding_too():
    loss = symjac.Loss("mse")

    def derivative(pred, label, upstream=None):
        return (2 * (pred - label) / pred.size).astype(object)

    rep = symjac.verify_loss(loss, derivative=derivative)
    assert not rep.ok and "bad_output" in rep.categories()


def _writing_later(fn, delay):
    """``fn`` whose every result a helper thread writes into ``delay`` seconds after the call returned
    (a kernel still finishing into its output). The write is timed by the clock, not by the next call."""
    def call(*args):
        out = fn(*args)

        def scribble():
            time.sleep(delay)
            out[...] += 1.0

        threading.Thread(target=scribble, daemon=True).start()
        return out

    return call


@pytest.mark.parametrize("delay", [0.002, 0.02, 0.06])
def test_a_helper_thread_writing_after_return_is_caught_in_every_run(delay):
    """Measured on main: a write 10 ms to 50 ms after return was missed in 3 of 3 runs (the
    verification had ended, or let the array go, before it landed)."""
    for _ in range(3):
        rep = symjac.verify(SPEC, backward=_writing_later(_backward, delay), forward=_forward, input_shape=SHAPE)
        assert "result_changed_after_return" in rep.categories()
        if delay >= 0.02:  # (2 ms: on a loaded machine the write may land before the copy at return)
            assert set(rep.categories()) == {"result_changed_after_return"}  # the values at return are right


def test_a_forward_written_after_return_across_the_coverage_plan_is_caught():
    rep = symjac.verify(SPEC, backward=_backward, forward=_writing_later(_forward, 0.03))
    assert "result_changed_after_return" in rep.categories()


def test_a_large_result_let_go_early_is_still_followed():
    """At 128x128 only the latest few results are held (symjac.check._watch.HELD_BYTES); an earlier one
    the helper thread still holds is followed by a checksum."""
    rep = symjac.verify(SPEC, backward=_writing_later(_backward, 0.03), forward=_forward, input_shape=(1, 1, 128, 128))
    assert "result_changed_after_return" in rep.categories()


def test_results_the_implementation_keeps_are_no_finding_and_cost_little():
    """A memoising implementation holds every result it returned (and never writes into one): the
    last look waits for it (symjac.check._watch.SETTLE after the last call) and finds nothing."""
    kept: list[np.ndarray] = []

    def backward(x, dy):
        kept.append(_backward(x, dy))
        return kept[-1]

    rep = symjac.verify(SPEC, backward=backward, forward=_forward, input_shape=SHAPE)
    assert rep.ok, rep.summary()
