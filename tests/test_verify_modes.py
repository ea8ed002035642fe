"""verify's modes: forward only, crash isolation, the dtype of x, root cause first, convention hints."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import symjac

SPEC = symjac.Pool("avg", 3, stride=1, padding=1)  # exclude-pad divisor
INCLUDE = symjac.Pool("avg", 3, stride=1, padding=1, divisor="include_pad")


def _reference(spec, shape):
    lowered = symjac.lower(spec, shape)
    return lowered.forward, lowered.vjp


# -- forward only ---------------------------------------------------------------------------------


def test_forward_only_passes_and_says_only_the_forward_was_checked():
    fwd, _ = _reference(symjac.Pool("max", 2, stride=1), (1, 2, 4, 4))
    report = symjac.verify(symjac.Pool("max", 2, stride=1), forward=fwd, input_shape=(1, 2, 4, 4))
    assert report.ok, report
    assert report.summary().endswith("only the forward was checked (no backward given)")
    # max: the forward runs at the distinct input, at the tied input, at the near-tie family's input
    # (no padding here, so no all-negative family), at the 6 ordered inputs (2 ramps per axis,
    # windows spanning 2 cells: 2 slab inputs, both axes at once), at the extreme and the non-finite
    # inputs, and twice more at x (determinism)
    assert report.stats["checked"] == "forward" and report.stats["forward_calls"] == 13
    assert report.stats["families"] == {"distinct": 0, "ties": 0, "near_ties": 0, "orders": 0, "extreme": 0,
                                        "nonfinite": 0}
    assert report.stats["backward_ok"] is None and report.stats["backward_calls"] == 0


def test_forward_only_finds_wrong_values_shape_and_dtype():
    fwd, _ = _reference(INCLUDE, (1, 1, 5, 5))  # include-pad values where exclude-pad is specified
    report = symjac.verify(SPEC, forward=fwd, input_shape=(1, 1, 5, 5), hints=False)
    assert report.categories() == ["forward_values"]
    # (1,1,5,5) pooled with k3 s1 p1 stays 5x5; a 4x4 answer is a shape error
    report = symjac.verify(SPEC, forward=lambda x: x[..., :4, :4], input_shape=(1, 1, 5, 5), hints=False)
    assert report.categories() == ["bad_output"] and "returned shape (1, 1, 4, 4)" in report.summary()
    report = symjac.verify(SPEC, forward=lambda x: _reference(SPEC, (1, 1, 5, 5))[0](x).astype(np.float32),
                           input_shape=(1, 1, 5, 5), hints=False)
    assert report.categories() == ["bad_output"] and "dtype float32; expected float64" in report.summary()


def test_forward_only_nondeterminism():
    calls = []

    def flaky(x):
        calls.append(1)
        return _reference(SPEC, (1, 1, 5, 5))[0](x) + (len(calls) == 3) * 0.5

    # the families before the repeat (the 3rd and 4th calls): near_ties only; at the extreme inputs the
    # +0.5 is below the rounding of values near 1e300
    report = symjac.verify(SPEC, forward=flaky, input_shape=(1, 1, 5, 5), hints=False, families=("near_ties",))
    assert "nondeterministic" in report.categories()


def test_nothing_to_verify_is_an_input_error():
    with pytest.raises(symjac.InputError, match="give backward"):
        symjac.verify(SPEC, input_shape=(1, 1, 5, 5))


# -- isolation ------------------------------------------------------------------------------------


def _aborts(x, dy):
    os.abort()


def _fpe(x):
    signal.raise_signal(signal.SIGFPE)


def test_isolate_turns_abort_and_sigfpe_into_crashed_findings():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))
    report = symjac.verify(SPEC, forward=fwd, backward=_aborts, input_shape=(1, 1, 5, 5), isolate=True)
    assert report.categories() == ["crashed"]
    assert report.findings[0].detail["signal"] == "SIGABRT"
    assert "backward crashed its worker process: killed by SIGABRT" in report.summary()
    assert report.stats["forward_ok"] is True  # the run went on: the forward was still checked
    report = symjac.verify(SPEC, forward=_fpe, backward=bwd, input_shape=(1, 1, 5, 5), isolate=True)
    assert report.findings[0].category == "crashed" and report.findings[0].detail["signal"] == "SIGFPE"


def test_isolated_results_equal_in_process_results():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))
    doubled = lambda x, dy: 2 * bwd(x, dy)  # noqa: E731
    here = symjac.verify(SPEC, forward=fwd, backward=doubled, input_shape=(1, 1, 5, 5), hints=False)
    there = symjac.verify(SPEC, forward=fwd, backward=doubled, input_shape=(1, 1, 5, 5), hints=False, isolate=True)
    assert here.categories() == there.categories() == ["wrong_weights", "not_fd_consistent"]
    assert here.stats["backward_calls"] == there.stats["backward_calls"]


def test_isolated_mutation_is_seen():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))

    def mutating(x, dy):
        dx = bwd(x, dy)
        x[0, 0, 0, 0] = 99.0
        return dx

    report = symjac.verify(SPEC, forward=fwd, backward=mutating, input_shape=(1, 1, 5, 5), isolate=True)
    assert report.categories()[0] == "mutates_inputs"


# -- the dtype of x -------------------------------------------------------------------------------


def test_dtype_comes_from_a_float_x():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    report = symjac.verify(SPEC, forward=fwd, backward=bwd, x=x)
    assert report.ok and report.stats["dtype"] == "float32"
    assert symjac.verify(SPEC, forward=fwd, backward=bwd, x=x, dtype="float64").stats["dtype"] == "float64"
    assert symjac.verify(SPEC, forward=fwd, backward=bwd, x=x.astype(int)).stats["dtype"] == "float64"


# -- root cause first -----------------------------------------------------------------------------


def test_wrong_dtype_is_the_root_cause_of_the_value_findings():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))

    def fwd32(x):
        return fwd(x.astype(np.float32))  # float32 arithmetic: values off in the last bits of float64

    report = symjac.verify(SPEC, forward=fwd32, backward=bwd, input_shape=(1, 1, 5, 5))
    assert report.categories() == ["bad_output"]
    consequences = [f for f in report.findings if f.consequence_of]
    assert consequences and all(f.consequence_of == "forward returned dtype float32; expected float64"
                                for f in consequences)
    assert {f.category for f in consequences} <= {"forward_values", "not_fd_consistent"}
    assert "further finding" in report.summary() and "(a consequence of: forward returned dtype" in str(report)
    assert report.to_dict()["findings"][1]["consequence_of"] is not None


# -- hints ----------------------------------------------------------------------------------------


def test_hint_names_the_divisor_torch_uses_by_default():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def fwd(x):
        return F.avg_pool2d(torch.from_numpy(x), 3, 1, 1).numpy()

    def bwd(x, dy):
        t = torch.from_numpy(x).requires_grad_(True)
        F.avg_pool2d(t, 3, 1, 1).backward(torch.from_numpy(dy))
        return t.grad.numpy()

    # PyTorch's avg_pool2d counts padding by default (count_include_pad=True); the spec excludes it.
    report = symjac.verify(SPEC, forward=fwd, backward=bwd, input_shape=(1, 1, 5, 5))
    assert report.categories() == ["forward_values", "wrong_weights"]
    assert report.stats["hint"] == "forward and backward match divisor='include_pad' exactly"
    assert report.summary().endswith("; hint: forward and backward match divisor='include_pad' exactly")


def test_hint_names_channels_last():
    spec = symjac.Pool("max", 2, layout="channels_last")
    fwd, bwd = _reference(spec, (1, 4, 6, 3))
    report = symjac.verify(symjac.Pool("max", 2), forward=fwd, backward=bwd, input_shape=(1, 4, 6, 3))
    assert report.stats.get("hint") == "forward and backward match layout='channels_last' exactly", report


def test_no_hint_when_nothing_neighbouring_matches():
    fwd, bwd = _reference(SPEC, (1, 1, 5, 5))
    report = symjac.verify(SPEC, forward=fwd, backward=lambda x, dy: 3 * bwd(x, dy), input_shape=(1, 1, 5, 5))
    assert not report.ok and "hint" not in report.stats


def test_loss_hint_names_the_reduction_over_elements():
    loss = symjac.Loss("softmax_ce", reduction="mean", scale=1024)
    pred = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.5], [1.0, 1.0, 0.0], [-2.0, 0.5, 0.75]])
    label = np.eye(3)[[0, 1, 2, 1]]

    def derivative(z, y):  # mean over all 12 elements instead of the 4 rows
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return 1024 * (e / e.sum(axis=1, keepdims=True) - y) / z.size

    report = symjac.verify_loss(loss, derivative=derivative, pred=pred, label=label)
    # c = S * D / elements = 1024 * 4 / 12 = 1024/3
    assert report.categories() == ["wrong_scale"]
    assert "c = 1024/3 (matches reduction='mean' over elements: divided by all 12 elements of pred, not by D = 4)" \
        in report.summary()


# -- pad_value=0: max pooling over zero padding ---------------------------------------------------


def _numpy_ml_max_pool(k, s, p):
    """numpy-ml style max pooling (written here as the implementation under test): np.pad with
    zeros, argmax of each window (first in row-major order) gets the window's gradient."""

    def windows(x):
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
        for i in range(oh):
            for j in range(ow):
                yield i, j, xp[:, :, i * s:i * s + k, j * s:j * s + k].reshape(x.shape[0], x.shape[1], -1)

    def forward(x):
        out = {}
        for i, j, w in windows(x):
            out[i, j] = w.max(axis=-1)
        oh, ow = max(i for i, _ in out) + 1, max(j for _, j in out) + 1
        return np.stack([np.stack([out[i, j] for j in range(ow)], -1) for i in range(oh)], -2)

    def backward(x, dy):
        dxp = np.zeros((x.shape[0], x.shape[1], x.shape[2] + 2 * p, x.shape[3] + 2 * p), x.dtype)
        for i, j, w in windows(x):
            a, b = np.divmod(w.argmax(axis=-1), k)
            for n in range(x.shape[0]):
                for c in range(x.shape[1]):
                    dxp[n, c, i * s + a[n, c], j * s + b[n, c]] += dy[n, c, i, j]
        return dxp[:, :, p:-p, p:-p]

    return forward, backward


@pytest.mark.parametrize("k, s, p", [(2, 2, 1), (3, 1, 1), (3, 2, 1)])
def test_zero_padding_max_pool_verifies_against_pad_value_zero(k, s, p):
    fwd, bwd = _numpy_ml_max_pool(k, s, p)
    report = symjac.verify(symjac.Pool("max", k, stride=s, padding=p, pad_value=0), forward=fwd, backward=bwd,
                           input_shape=(2, 2, 5, 6))
    assert report.ok, report
    assert report.stats["tie_policy"] == "first"
    # against the default (padding takes no part in the max) it fails, and the hint names pad_value=0
    report = symjac.verify(symjac.Pool("max", k, stride=s, padding=p), forward=fwd, backward=bwd,
                           input_shape=(2, 2, 5, 6))
    assert not report.ok and report.stats["hint"] == "forward and backward match pad_value=0 exactly"


def test_no_hint_from_a_neighbour_with_the_same_windows():
    # A 9x9 window on a 9x9 input, no padding: include_pad and ceil_mode change nothing
    # at this shape. The implementation sums in float16 and so overflows on large inputs
    # (81 x 1000 > 65504, the float16 maximum) and clips in its backward; at the small
    # inputs of the hint's screen it is right. Neither failure is a convention's doing: a
    # neighbour with the same windows "matching" at other inputs names nothing.
    spec = symjac.Pool("avg", 9)
    x = np.full((1, 1, 9, 9), 1000, dtype=np.float16)

    def forward(x: np.ndarray) -> np.ndarray:
        total = np.cumsum(x.reshape(1, 1, -1), axis=-1, dtype=np.float16)[..., -1]  # one running float16 sum
        return (total / np.float16(81)).astype(np.float16).reshape(1, 1, 1, 1)

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        g = np.broadcast_to(dy / np.float16(81), x.shape).astype(np.float16)
        return np.where(np.abs(x) > 500, np.float16(0), g)  # drops the gradient of large inputs

    report = symjac.verify(spec, forward=forward, backward=backward, x=x, dtype="float16")
    assert {"bad_output", "missing_windows"} & set(report.categories()), report
    assert "hint" not in report.stats, report.stats.get("hint")
    only_backward = symjac.verify(spec, backward=backward, x=x, dtype="float16")
    assert not only_backward.ok and "hint" not in only_backward.stats, only_backward.stats.get("hint")
