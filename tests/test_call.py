"""The guarded-call core: every misbehaviour of an implementation is a finding, for pools and losses alike."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import symjac
from symjac.check._call import Guard
from symjac.check._report import Finding

SPEC = symjac.Pool("avg", 2)  # 2x2 windows, stride 2: (1, 1, 4, 4) -> (1, 1, 2, 2)
SHAPE = (1, 1, 4, 4)


def _guard(fn, **kw):
    findings: list[Finding] = []
    return Guard(fn, "backward", ("x", "dy"), findings, **kw), findings


def test_exception_keeps_traceback_and_argument_shapes():
    def deep(x, dy):
        return inner(x)

    def inner(x):
        raise RuntimeError("kernel not implemented for this layout")

    report = symjac.verify(SPEC, backward=deep, input_shape=SHAPE, dtype="float32")
    f = report.findings[0]
    assert f.category == "bad_output"
    assert f.message == "backward raised RuntimeError: kernel not implemented for this layout"
    assert "in inner" in f.detail["traceback"] and "in deep" in f.detail["traceback"]
    assert f.detail["arguments"] == {"x": "float32 (1, 1, 4, 4)", "dy": "float32 (1, 1, 2, 2)"}
    doc = json.loads(report.to_json())
    assert doc["findings"][0]["detail"]["arguments"]["dy"] == "float32 (1, 1, 2, 2)"
    assert "RuntimeError: kernel not implemented" in doc["findings"][0]["detail"]["traceback"]
    assert "in inner" in str(report)  # the text rendering shows the frames too


def test_system_exit_is_a_finding_keyboard_interrupt_propagates():
    def exits(x, dy):
        raise SystemExit(3)

    report = symjac.verify(SPEC, backward=exits, input_shape=SHAPE)
    assert report.categories() == ["bad_output"] and "SystemExit: 3" in report.findings[0].message

    def interrupted(x, dy):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        symjac.verify(SPEC, backward=interrupted, input_shape=SHAPE)
    with pytest.raises(KeyboardInterrupt):
        symjac.verify(SPEC, backward=interrupted, input_shape=SHAPE, timeout=None)


def test_hanging_call_is_a_timeout_and_the_report_still_comes_back():
    release = threading.Event()

    def hangs(x, dy):
        release.wait(30)
        return np.zeros_like(x)

    try:
        report = symjac.verify(SPEC, backward=hangs, input_shape=SHAPE, timeout=0.2)
    finally:
        release.set()
    assert report.categories() == ["timeout"]
    assert "did not return within 0.2 s" in report.findings[0].message
    assert not report.ok and report.stats["backward_ok"] is False


def test_loss_derivative_timeout():
    release = threading.Event()

    def hangs(z, y):
        release.wait(30)
        return z

    try:
        report = symjac.verify_loss(symjac.Loss("mse"), derivative=hangs, timeout=0.2)
    finally:
        release.set()
    assert report.categories() == ["timeout"]


@pytest.mark.parametrize("value, said", [
    (None, "returned None, not an array of shape (1, 1, 4, 4)"),
    ((v for v in range(3)), "returned a generator, not an array"),
    (2.5, "returned a scalar (float 2.5), not an array"),
    ("dx", "returned text (str), not an array"),
])
def test_non_arrays_say_what_came_back(value, said):
    report = symjac.verify(SPEC, backward=lambda x, dy: value, input_shape=SHAPE)
    assert report.categories() == ["bad_output"]
    assert said in report.findings[0].message


def test_mutation_is_reported_once_with_checksums_and_restored():
    seen = []

    def scribbles(x, dy):
        seen.append(float(x.reshape(-1)[0]))
        x[...] = 7
        return np.zeros_like(x)

    g, findings = _guard(scribbles)
    x = np.arange(4.0).reshape(2, 2)
    for _ in range(3):
        g.call(x, np.ones(1))
    assert seen == [0.0, 0.0, 0.0]  # restored after every call
    assert [f.category for f in findings] == ["mutates_inputs"]
    assert "changed x in place (sha256" in findings[0].message and "first change at x[0, 0]: 0.0 -> 7.0" in findings[0].message
    assert g.mutated == {"x"} and g.calls == 3

    g2, _ = _guard(scribbles, restore=False)
    x2 = np.arange(4.0).reshape(2, 2)
    g2.call(x2, np.ones(1))
    g2.call(x2, np.ones(1), again=True)
    assert seen[-1] == 7.0  # without restore the second call reads what the first wrote


def test_compare_flags_nondeterminism_once():
    g, findings = _guard(lambda x, dy: x)
    a = np.array([1.0, 2.0, 3.0])
    assert g.compare(a, a.copy())
    assert not g.compare(a, np.array([1.0, 2.5, 3.0]), "dx")
    assert not g.compare(a, np.array([0.0, 2.0, 3.0]), "dx")
    assert [f.category for f in findings] == ["nondeterministic"]
    assert "at 1 of 3 elements (first at dx[1]: 2.0 vs 2.5)" in findings[0].message


def test_one_number_accepts_scalars_and_one_element_arrays():
    g, findings = _guard(lambda x, dy: x)
    assert g.check_output(np.float32(1.5), (), None) == 1.5
    assert g.check_output(np.array([[1.5]]), (), None).shape == ()
    assert g.check_output(np.array([1.0, 2.0]), (), None) is None
    assert "expected one number" in findings[0].message


def test_timeout_must_be_positive():
    with pytest.raises(symjac.InputError, match="timeout=0 is not valid"):
        symjac.verify(SPEC, backward=lambda x, dy: x, input_shape=SHAPE, timeout=0)


# -- sequences of calls (Guard.arrays): one hand-over to the call thread for a whole probe plan --------------


def _avg3(x):
    """3x3 stride-1 average pooling, padding 1, pad cells not counted (NumPy, the benchmark's convention)."""
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    ones = np.pad(np.ones(x.shape[-2:]), 1)
    win = np.lib.stride_tricks.sliding_window_view
    return win(xp, (3, 3), axis=(-2, -1)).sum(axis=(-2, -1)) / win(ones, (3, 3), axis=(-2, -1)).sum(axis=(-2, -1))


def _avg3_backward(x, dy):
    ones = np.pad(np.ones(x.shape[-2:]), 1)
    win = np.lib.stride_tricks.sliding_window_view
    g = np.pad(dy / win(ones, (3, 3), axis=(-2, -1)).sum(axis=(-2, -1)), [(0, 0), (0, 0), (1, 1), (1, 1)])
    return win(g, (3, 3), axis=(-2, -1)).sum(axis=(-2, -1))  # the 3x3 stencil is symmetric


AVG3 = symjac.Pool("avg", 3, stride=1, padding=1)


@pytest.fixture
def sequences(monkeypatch):
    """Every sequence of calls handed to the call thread during the test."""
    from symjac.check import _call

    made = []

    class Recorded(_call.CallSequence):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(_call, "CallSequence", Recorded)
    return made


def test_a_probe_plan_is_one_hand_over(sequences):
    report = symjac.verify(AVG3, backward=_avg3_backward, forward=_avg3, input_shape=(1, 1, 12, 12))
    assert report.ok
    sizes = [s.made for s in sequences]
    # 3x3 stride-1 windows read disjoint cells only 3 apart on each axis: 9 window colours,
    # and 9 input colours for the finite differences; each set of calls is one hand-over,
    # the dense confirmation (twice: determinism) riding on the probes' sequence; the
    # near-tie, extreme and non-finite families' forward and backward are one more each
    assert sorted(sizes) == [2, 2, 2, 9, 11]
    calls = report.stats["backward_calls"] + report.stats["forward_calls"]
    hand_overs = len(sequences) + calls - sum(sizes)  # the other calls go one by one
    assert hand_overs <= calls / 3


def test_each_call_of_a_sequence_reads_the_original_input():
    seen = []

    def scribbles(x, dy):
        seen.append(x.copy())
        x[...] = 7.0
        return _avg3_backward(seen[-1], dy)

    report = symjac.verify(AVG3, backward=scribbles, input_shape=(1, 1, 6, 6))
    assert "mutates_inputs" in report.categories()
    assert len(seen) == report.stats["backward_calls"] >= 9
    assert all(np.array_equal(s, seen[0]) for s in seen[:9])  # the probe plan's calls all read the same x
    assert not (seen[0] == 7.0).any()


def _hangs_at(n, result):
    """A backward whose n-th call waits (up to 30 s) for the returned event, and the list of its calls."""
    release, made = threading.Event(), []

    def backward(x, dy):
        made.append(1)
        if len(made) == n:
            release.wait(30)
        return result(x, dy)

    return backward, release, made


def test_a_call_that_hangs_inside_a_sequence_is_a_timeout():
    third_hangs, release, _ = _hangs_at(3, _avg3_backward)
    try:
        report = symjac.verify(AVG3, backward=third_hangs, input_shape=(1, 1, 6, 6), timeout=0.3)
    finally:
        release.set()
    assert report.categories() == ["timeout"]
    assert "did not return within 0.3 s (call 3;" in report.findings[0].message


def test_every_call_made_is_counted_though_reading_stopped_early():
    calls = []

    def nan_from_the_second(x, dy):
        calls.append(1)
        return x if len(calls) == 1 else x * np.nan

    g, findings = _guard(nan_from_the_second)
    got = []
    for dx in g.arrays(((np.ones(3), np.ones(1)) for _ in range(9)), shape=(3,), dtype=np.dtype(np.float64)):
        got.append(dx)
        if dx is None:
            break
    assert got[0] is not None and got[1] is None and len(got) == 2
    assert [f.category for f in findings] == ["bad_output"] and "non-finite" in findings[0].message
    assert g.calls == len(calls) >= 2  # the call thread may have run ahead of the reading


def test_a_call_that_times_out_in_a_sequence_is_counted_once():
    second_hangs, release, made = _hangs_at(2, lambda x, dy: x)
    g, findings = _guard(second_hangs, timeout=0.3)
    try:
        got = list(g.arrays(((np.ones(2), np.ones(1)) for _ in range(4)), shape=(2,), dtype=np.dtype(np.float64)))
    finally:
        release.set()
    assert got[0] is not None and got[1:] == [None]  # the sequence ends at the hung call
    assert [f.category for f in findings] == ["timeout"]
    assert g.calls == len(made) == 2


def test_an_error_building_the_arguments_is_raised_not_a_finding():
    g, findings = _guard(lambda x, dy: x)

    def broken():
        yield (np.zeros(2), np.zeros(1))
        raise ValueError("symjac's own bug")

    with pytest.raises(ValueError, match="own bug"):
        list(g.arrays(broken(), shape=(2,), dtype=np.dtype(np.float64)))
    assert findings == []


def test_each_call_of_a_sequence_has_its_own_timeout():
    import time

    def slow(x, dy):
        time.sleep(0.2)
        return x

    g, findings = _guard(slow, timeout=0.6)
    calls = ((np.ones(2), np.ones(1)) for _ in range(4))  # 0.8 s in all: over the limit only as a whole
    got = list(g.arrays(calls, shape=(2,), dtype=np.dtype(np.float64)))
    assert findings == [] and len(got) == 4 and all(v is not None for v in got)


def test_a_mixed_sequence_settles_each_call_on_its_own_guard():
    from symjac.check._call import call_each

    findings: list[Finding] = []
    fwd = Guard(lambda x: x * 2, "forward", ("x",), findings)
    seen = []

    def writes(x, dy):
        seen.append(threading.current_thread().name)
        x[0] = 7.0  # in place: a finding of the backward, not of the forward
        return dy

    bwd = Guard(writes, "backward", ("x", "dy"), findings)
    x, dy = np.zeros(3), np.ones(3)
    calls = [(fwd, (x,), (3,), x.dtype, "y"), (bwd, (x, dy), (3,), x.dtype, "dx")]
    y, dx = call_each([fwd, bwd], calls, 24)
    assert y.tolist() == [0.0, 0.0, 0.0] and dx.tolist() == [1.0, 1.0, 1.0]
    assert (fwd.calls, bwd.calls) == (1, 1)
    assert seen == ["symjac-call"]  # in the call thread
    assert [f.category for f in findings] == ["mutates_inputs"] and "backward changed x" in findings[0].message
    assert x.tolist() == [0.0, 0.0, 0.0]  # the call wrote into its own copy


def test_a_raise_ends_a_mixed_sequence_and_the_family_pass_still_calls_the_backward():
    # call_each stops at a raise (as a sequence of one callable does); verify's family pass
    # then makes the backward call on its own, as two separate calls would.
    from symjac.check._call import call_each

    findings: list[Finding] = []
    fwd = Guard(lambda x: 1 / 0, "forward", ("x",), findings)
    bwd = Guard(lambda x, dy: dy, "backward", ("x", "dy"), findings)
    x = np.zeros(3)
    calls = [(fwd, (x,), (3,), x.dtype, "y"), (bwd, (x, x), (3,), x.dtype, "dx")]
    assert list(call_each([fwd, bwd], calls, 24)) == [None]
    assert (fwd.calls, bwd.calls) == (1, 0)

    spec = symjac.Pool("avg", 2)
    raised_at, backward_at = [], []

    def forward(x):
        if np.all(np.abs(x - 1) < 1e-6):  # the near-tie family's input, 1 + q·eps (no other input)
            raised_at.append(x.copy())
            raise ValueError("no negative inputs")
        return x.reshape(1, 1, 2, 2, 2, 2).mean(axis=(3, 5))

    def backward(x, dy):
        backward_at.append(x.copy())
        return np.repeat(np.repeat(dy / 4, 2, axis=2), 2, axis=3)

    report = symjac.verify(spec, backward=backward, forward=forward, input_shape=(1, 1, 4, 4))
    assert [f.category for f in report.findings] == ["bad_output"], report.findings
    assert report.findings[0].family == "near_ties"
    # the raising call, then the guard's look at whether the forward is bound to its thread: the
    # same call on the caller's thread, which raises too (so it is not), at the same input
    assert len(raised_at) == 2 and np.array_equal(raised_at[0], raised_at[1])
    x_near = raised_at[0]
    assert any(np.array_equal(x, x_near) for x in backward_at)  # the backward was still checked there


def test_a_sequence_holds_a_few_megabytes_of_arguments_however_small_its_results():
    # 64 calls, each given a fresh 1 MiB argument and returning 8 bytes, read slowly (the call thread
    # runs ahead). The look-ahead counts results with their arguments (AHEAD_BYTES = 4 MiB, waiting in
    # the call thread and again in the reader's chunk): about 8 MiB of arguments at most, where counting
    # the 8-byte results alone (2^19 of them) let all 64 MiB wait (long kernels' probe tangents: 15 GB).
    import time
    import tracemalloc

    findings: list[Finding] = []
    guard = Guard(lambda a: np.zeros(1), "backward", ("a",), findings, timeout=60.0)

    def calls():
        for _ in range(64):
            yield (np.ones(2**17),)

    tracemalloc.start()
    try:
        for out in guard.arrays(calls(), shape=(1,), dtype=np.dtype(np.float64)):
            assert out is not None
            time.sleep(0.002)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not findings and peak < 16 * 2**20, peak / 2**20
