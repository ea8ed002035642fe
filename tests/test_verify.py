"""Tests for ``symjac.verify``: the verifier must catch wrong backwards and pass right ones.

Sources of every expected value (never symjac itself):

* seed 000 (``shared/seeds/000_*.txt``, "When SAME Padding Makes Average-Pooling
  Backward Skip Windows"): the nntrainer SAME average-pooling counterexample;
* hand derivations in comments;
* independent implementations: the NumPy pooling below (written from the PyTorch /
  TensorFlow / ONNX definitions, cross-checked against PyTorch where PyTorch has the
  operator) and PyTorch 2.13 autograd itself.

The mutant suite gives each NumPy implementation exactly one deliberate bug; the
verifier must flag it with the right finding category, and the bug-free version
must pass with no finding at all.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random

import numpy as np
import pytest

import symjac
from symjac import AdaptivePool, GlobalPool, Pool

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sampling import examples  # noqa: E402

SHAPE_CATEGORIES = {"missing_windows", "partial_windows", "wrong_cells", "wrong_weights"}


# =============================================================================== seed 000
# Seed 000: nntrainer Pooling2DLayer, average pooling, kernel 2x2, stride 1x1, padding
# "same" on a 2x2 input. SAME resolves to top=0, bottom=1, left=0, right=1; the forward
# (correct) visits output windows i in [-top, H - k + bottom] = [0, 1] and likewise for
# j; the buggy backward ends its loops at H - k + top = 0 and W - k + left = 0, so it
# visits only window (0,0).
SEED_X = [[1, 2], [3, 4]]
SEED_SPEC = Pool("avg", 2, stride=1, padding="same")


def _nntrainer_pool(x: np.ndarray, bug: bool, dy: np.ndarray | None = None) -> np.ndarray:
    """nntrainer-style loops over padded window origins (i, j); exclude-pad average.

    Forward when ``dy`` is None, else backward. ``bug`` ends the backward loops at
    ``H - k + top`` / ``W - k + left`` (seed 000) instead of ``+ bottom`` / ``+ right``.
    """
    H, W = x.shape
    k, s = 2, 1
    top, bottom, left, right = 0, 1, 0, 1  # seed 000: SAME -> top=0, bottom=1, left=0, right=1
    backward = dy is not None
    end_h = H - k + (top if (bug and backward) else bottom)
    end_w = W - k + (left if (bug and backward) else right)
    out = np.zeros_like(x)
    oi = 0
    for i in range(-top, end_h + 1, s):
        oj = 0
        for j in range(-left, end_w + 1, s):
            cells = [(a, b) for a in range(i, i + k) for b in range(j, j + k) if 0 <= a < H and 0 <= b < W]
            n = x.dtype.type(len(cells))
            if backward:
                for a, b in cells:
                    out[a, b] += dy[oi, oj] / n
            else:
                acc = x.dtype.type(0)
                for a, b in cells:
                    acc += x[a, b]
                out[oi, oj] = acc / n
            oj += 1
        oi += 1
    return out


def seed_forward(x):
    return _nntrainer_pool(x, bug=False)


def seed_backward_buggy(x, dy):
    return _nntrainer_pool(x, bug=True, dy=dy)


def seed_backward_fixed(x, dy):
    return _nntrainer_pool(x, bug=False, dy=dy)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed000_summary_names_the_missing_windows(dtype):
    report = symjac.verify(SEED_SPEC, backward=seed_backward_buggy, forward=seed_forward,
                           x=SEED_X, dy=np.ones((2, 2)), dtype=dtype)
    assert not report.ok
    summary = report.summary()
    # Seed 000: "Backward visits only the first output window" -> 1 of 4 windows.
    assert "backward visits 1 of 4 output windows" in summary, summary
    # Seed 000: the three windows the buggy loops never reach are (0,1), (1,0), (1,1).
    for window in ("(0,1)", "(1,0)", "(1,1)"):
        assert window in summary, summary
    assert "(0,0)" not in summary, summary
    # Seed 000: gradient sum 1 instead of 4 ("retains one quarter of the required gradient sum").
    assert "1/4 of the gradient mass" in summary, summary
    assert "missing_windows" in report.categories()
    missing = [f.window for f in report.findings if f.category == "missing_windows" and f.window is not None]
    assert sorted(missing) == [(0, 1), (1, 0), (1, 1)]
    assert report.stats["windows_missing"] == 3
    assert report.stats["windows_total"] == 4
    assert report.stats["forward_ok"] is True  # seed 000: "The forward pass is correct."
    assert report.stats["backward_ok"] is False
    # Seed 000 table, upstream grad [1,1,1,1]: correct input gradient [0.25, 0.75, 0.75, 2.25].
    # (Derivation: window sizes 4, 2, 2, 1; cell (1,1) is in all four: 1/4 + 1/2 + 1/2 + 1.)
    np.testing.assert_array_equal(report.stats["expected_gradient"], [[1 / 4, 3 / 4], [3 / 4, 9 / 4]])
    # Seed 000 table, "Current source": [0.25, 0.25, 0.25, 0.25].
    np.testing.assert_array_equal(report.stats["observed_gradient"], [[1 / 4] * 2] * 2)
    # Seed 000: "The maximum absolute error is 2" (|2.25 - 0.25|) on the dense gradient;
    # per Jacobian entry the largest error is window (1,1)'s single weight, 1 vs 0.
    assert report.stats["max_abs_error"] in (1.0, 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed000_finite_differences_of_the_forward(dtype):
    dy = [[1, -2], [3, 4]]
    report = symjac.verify(SEED_SPEC, backward=seed_backward_buggy, forward=seed_forward,
                           x=SEED_X, dy=dy, dtype=dtype)
    # Seed 000: "With mixed upstream gradient [1,-2,3,4], central finite differences
    # produce: [0.25, -0.75, 1.75, 4.75]". (Derivation: dx00 = 1/4; dx01 = 1/4 - 2/2;
    # dx10 = 1/4 + 3/2; dx11 = 1/4 - 2/2 + 3/2 + 4/1.)
    np.testing.assert_array_equal(report.stats["fd_gradient"], [[0.25, -0.75], [1.75, 4.75]])
    # Seed 000: "The current backward again returns four values of 0.25."
    np.testing.assert_array_equal(report.stats["observed_gradient"], [[0.25, 0.25], [0.25, 0.25]])
    assert "not_fd_consistent" in report.categories()
    assert "missing_windows" in report.categories()
    assert report.stats["fd_consistent"] is False


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_seed000_repaired_backward_passes(dtype):
    # Seed 000: "Replacing the two end bounds with bottom and right makes backward visit
    # the same output-window grid as forward."
    for kw in ({"x": SEED_X}, {"x": SEED_X, "dy": [[1, -2], [3, 4]]}, {"x": SEED_X, "dy": np.ones((2, 2))}):
        report = symjac.verify(SEED_SPEC, backward=seed_backward_fixed, forward=seed_forward, dtype=dtype, **kw)
        assert report.ok, str(report)
        assert report.stats["fd_consistent"] is True
        assert report.stats["forward_ok"] is True and report.stats["backward_ok"] is True
    report = symjac.verify(SEED_SPEC, backward=seed_backward_fixed, forward=seed_forward,
                           x=SEED_X, dy=np.ones((2, 2)), dtype=dtype)
    # Seed 000, "Correct / local repair": [0.25, 0.75, 0.75, 2.25].
    np.testing.assert_array_equal(report.stats["observed_gradient"], [[0.25, 0.75], [0.75, 2.25]])


def test_seed000_assert_backward_matches():
    with pytest.raises(symjac.VerificationError) as info:
        symjac.testing.assert_backward_matches(SEED_SPEC, seed_backward_buggy, seed_forward,
                                               x=SEED_X, dtype="float32")
    err = info.value
    assert isinstance(err, AssertionError)
    assert err.report.summary() in str(err)
    assert "backward visits 1 of 4 output windows" in str(err)  # seed 000
    # AssertionError is the type pytest and unittest treat as a test failure.
    with pytest.raises(AssertionError):
        symjac.testing.assert_backward_matches(SEED_SPEC, seed_backward_buggy, x=SEED_X)
    report = symjac.testing.assert_backward_matches(SEED_SPEC, seed_backward_fixed, seed_forward,
                                                    x=SEED_X, dtype="float32")
    assert isinstance(report, symjac.Report) and report.ok


def test_seed000_report_dict_and_json():
    report = symjac.verify(SEED_SPEC, backward=seed_backward_buggy, forward=seed_forward,
                           x=SEED_X, dy=np.ones((2, 2)), dtype="float32")
    d = report.to_dict()
    keys = {"ok", "forward_ok", "backward_ok", "fd_consistent", "windows_total", "windows_missing",
            "windows_partial", "edges_missing", "edges_extra", "weights_wrong", "max_abs_error",
            "tie_policy", "mutated_inputs", "backward_calls", "findings"}
    assert keys <= set(d), keys - set(d)
    assert d["ok"] is False and d["windows_total"] == 4 and d["windows_missing"] == 3  # seed 000
    # Missing edges: window (0,1) -> 2 cells, (1,0) -> 2 cells, (1,1) -> 1 cell (seed 000's
    # window sizes 4, 2, 2, 1); nothing extra, no wrong weights.
    assert d["edges_missing"] == 5 and d["edges_extra"] == 0 and d["weights_wrong"] == 0
    assert d["mutated_inputs"] == [] and d["tie_policy"] is None
    assert isinstance(d["backward_calls"], int) and d["backward_calls"] >= 1
    assert d["findings"], d
    for f in d["findings"]:
        assert {"category", "window", "cells", "expected", "observed"} <= set(f), f
    assert json.loads(report.to_json()) == d
    assert json.loads(report.to_json(indent=None)) == d
    ok = symjac.verify(SEED_SPEC, backward=seed_backward_fixed, forward=seed_forward, x=SEED_X)
    assert json.loads(ok.to_json()) == ok.to_dict()
    assert ok.to_dict()["ok"] is True and ok.to_dict()["findings"] == []


# ======================================================= independent NumPy pooling (no symjac): tests/mutants.py
from mutants import NumpyPool, ref_shape, spec_for  # noqa: E402


# ----------------------------------------------------------------- the reference, against PyTorch
def _torch_ref_cases():
    """(NumpyPool, PyTorch op on (N, C, *sp), spatial) — the reference's own validation."""
    cases = [
        (NumpyPool("avg", (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)), dict(op="avg_pool2d", kernel_size=3, stride=1, padding=1, count_include_pad=False), (5, 6)),
        (NumpyPool("avg", (3, 2), (2, 1), ((1, 1), (1, 1)), (1, 1), divisor="include_pad", ceil_mode=True), dict(op="avg_pool2d", kernel_size=(3, 2), stride=(2, 1), padding=1, ceil_mode=True, count_include_pad=True), (6, 5)),
        (NumpyPool("avg", (2, 2), (2, 2), ((1, 1), (0, 0)), (1, 1), divisor=3), dict(op="avg_pool2d", kernel_size=2, stride=2, padding=(1, 0), divisor_override=3), (5, 4)),
        (NumpyPool("max", (3, 3), (2, 1), ((1, 1), (1, 1)), (2, 1), ceil_mode=True), dict(op="max_pool2d", kernel_size=3, stride=(2, 1), padding=1, dilation=(2, 1), ceil_mode=True), (7, 5)),
        (NumpyPool("max", (2,), (1,), ((1, 1),), (2,)), dict(op="max_pool1d", kernel_size=2, stride=1, padding=1, dilation=2), (6,)),
        (NumpyPool("avg", (2, 2, 2), (1, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 1, 1), divisor="include_pad"), dict(op="avg_pool3d", kernel_size=2, stride=(1, 2, 1), padding=(1, 0, 1), count_include_pad=True), (3, 4, 3)),
        (NumpyPool("max", output_size=(2, 3)), dict(op="adaptive_max_pool2d", output_size=(2, 3)), (5, 7)),
        (NumpyPool("avg", output_size=(3,)), dict(op="adaptive_avg_pool1d", output_size=3), (7,)),
        (NumpyPool("avg", output_size=(1, 1)), dict(op="adaptive_avg_pool2d", output_size=1), (4, 3)),
    ]
    return cases


def test_numpy_reference_agrees_with_torch():
    """The mutant suite's bug-free reference equals PyTorch (forward and backward)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for pool, op, spatial in _torch_ref_cases():
        kw = dict(op)
        fn = getattr(torch.nn.functional, kw.pop("op"))
        for channels_last in (False, True):
            p = dataclasses.replace(pool, channels_last=channels_last)
            shape = ref_shape(p, 2, 3, spatial)
            x = rng.integers(-3, 4, size=shape).astype(np.float64) / 2  # small: ties too
            t = torch.from_numpy(x.copy()).requires_grad_(True)
            tc = t if not channels_last else t.movedim(-1, 1)
            y = fn(tc, **kw)
            y = y if not channels_last else y.movedim(1, -1)
            dy = rng.integers(-8, 9, size=tuple(y.shape)).astype(np.float64) / 8
            y.backward(torch.from_numpy(dy))
            np.testing.assert_allclose(p.forward(x), y.detach().numpy(), rtol=1e-14, atol=0, err_msg=str(p))
            np.testing.assert_allclose(p.backward(x, dy.copy()), t.grad.numpy(), rtol=1e-14, atol=1e-15, err_msg=str(p))


# ================================================================================ mutant suite
# Reference configurations (name -> (NumpyPool, input shape)).
P2 = ((1, 1), (1, 1))
REFERENCES: dict[str, tuple[NumpyPool, tuple[int, ...]]] = {
    "avg_k3_s1": (NumpyPool("avg", (3, 3), (1, 1), "valid", (1, 1)), (2, 2, 6, 5)),
    "avg_k3_s1_pad": (NumpyPool("avg", (3, 3), (1, 1), P2, (1, 1)), (1, 2, 5, 6)),
    "avg_same_k3": (NumpyPool("avg", (3, 3), (1, 1), "same", (1, 1)), (1, 2, 5, 5)),
    "avg_same_k2": (NumpyPool("avg", (2, 2), (1, 1), "same", (1, 1)), (1, 2, 4, 5)),
    "avg_same_lower_k2": (NumpyPool("avg", (2, 2), (1, 1), "same_lower", (1, 1)), (1, 2, 4, 5)),
    "max_same_k3_s2": (NumpyPool("max", (3, 3), (2, 2), "same", (1, 1)), (1, 2, 6, 6)),
    "avg_stride12": (NumpyPool("avg", (2, 2), (1, 2), "valid", (1, 1)), (1, 2, 5, 6)),
    "max_stride12": (NumpyPool("max", (2, 3), (1, 2), "valid", (1, 1)), (1, 2, 5, 7)),
    "max_dil12": (NumpyPool("max", (2, 2), (1, 1), "valid", (1, 2)), (1, 2, 5, 6)),
    "avg_ceil": (NumpyPool("avg", (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), ceil_mode=True), (1, 2, 5, 5)),
    "avg_ceil_drop": (NumpyPool("avg", (2, 2), (2, 2), P2, (1, 1), ceil_mode=True), (1, 2, 5, 5)),
    "max_ceil": (NumpyPool("max", (3, 3), (2, 2), P2, (1, 1), ceil_mode=True), (1, 2, 6, 6)),
    "avg_include": (NumpyPool("avg", (3, 3), (2, 2), P2, (1, 1), divisor="include_pad", ceil_mode=True), (1, 2, 6, 5)),
    "avg_override": (NumpyPool("avg", (2, 3), (1, 2), ((1, 1), (1, 1)), (1, 1), divisor=5), (1, 2, 4, 5)),
    "avg_nhwc": (NumpyPool("avg", (2, 2), (1, 1), "valid", (1, 1), channels_last=True), (2, 4, 5, 3)),
    "max_nhwc": (NumpyPool("max", (3, 2), (2, 1), P2, (1, 1), channels_last=True), (2, 5, 4, 3)),
    "max_k2_s1": (NumpyPool("max", (2, 2), (1, 1), "valid", (1, 1)), (2, 2, 5, 5)),
    "max_1d": (NumpyPool("max", (3,), (2,), ((1, 1),), (1,)), (2, 3, 9)),
    "avg_3d": (NumpyPool("avg", (2, 2, 2), (1, 1, 2), ((1, 1), (0, 0), (1, 1)), (1, 1, 1)), (1, 2, 3, 4, 4)),
    "max_3d_dil": (NumpyPool("max", (2, 2, 2), (1, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 1, 2)), (1, 2, 3, 4, 5)),
    "adaptive_max": (NumpyPool("max", output_size=(2, 3)), (2, 2, 5, 7)),
    "adaptive_avg_1d": (NumpyPool("avg", output_size=(3,)), (1, 3, 7)),
    "global_avg": (NumpyPool("avg", output_size=(1, 1)), (2, 3, 4, 5)),
}


def run(name: str, bug: str | None = None, dtype: str = "float32", **kw) -> symjac.Report:
    pool, shape = REFERENCES[name]
    pool = dataclasses.replace(pool, bug=bug)
    return symjac.verify(spec_for(pool), backward=pool.backward, forward=pool.forward,
                         input_shape=shape, dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_implementations_pass(name, dtype):
    report = run(name, None, dtype)
    assert report.ok, str(report)
    assert report.findings == ()
    assert report.stats["forward_ok"] is True and report.stats["backward_ok"] is True
    assert report.stats["fd_consistent"] in (True, None)  # FD needs x +- 1/4 exact in dtype
    assert report.stats["mutated_inputs"] == []
    if REFERENCES[name][0].mode == "max":
        assert report.stats["tie_policy"] in ("first", None)


BOTH = ["float32", "float64"]
ALL3 = ["float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("name", ["avg_k3_s1", "avg_k3_s1_pad"])
def test_mutant_overlap_assign_instead_of_accumulate(name, dtype):
    # dx[c] = share instead of dx[c] += share, stride 1 < kernel 3: a later window in the
    # loop overwrites the cells it shares with earlier ones, with 0 when its dy is 0. In a
    # probe of window w, w's top-left cell (read by no later window in row-major order)
    # keeps its 1/9, its other shared cells get 0: part of the window -> partial_windows.
    # Without padding the top-left slot is always a real cell, so no window loses all of
    # its cells (no missing_windows); with padding 1 a border window's top-left slot is
    # padding and its real cells are all shared with later windows, so border windows
    # may lose everything (missing_windows allowed there).
    report = run(name, "assign", dtype)
    cats = report.categories()
    assert "partial_windows" in cats, str(report)
    assert "wrong_weights" not in cats and "wrong_cells" not in cats, str(report)
    if name == "avg_k3_s1":
        assert "missing_windows" not in cats, str(report)
    assert "not_fd_consistent" in cats  # the forward is right, so its differences disagree
    assert report.stats["windows_partial"] > 0
    assert report.stats["forward_ok"] is True and report.stats["backward_ok"] is False


@pytest.mark.parametrize("dtype", BOTH)
def test_mutant_overlap_assign_only_visible_with_dense_dy(dtype):
    # "=" only where the window's dy is nonzero: every probe whose nonzero dy windows are
    # pairwise disjoint gets exact rows; only a dense dy (overlapping nonzero windows)
    # shows the overwrite -> partial_windows from the confirmation pass, and the rows the
    # finite differences see are right.
    report = run("avg_k3_s1", "assign_nonzero", dtype)
    assert report.categories() == ["partial_windows"], str(report)
    assert report.stats["fd_consistent"] is True
    assert report.stats["backward_ok"] is False


@pytest.mark.parametrize("dtype", ALL3)
def test_mutant_divisor_always_kernel_area(dtype):
    # SAME k=3 s=1 on 5x5: pads (1,1); border windows hold 6 (edge) or 4 (corner) real
    # cells, so exclude_pad weights are 1/6 and 1/4, while the bug divides by 9: the right
    # cells get wrong values -> wrong_weights (and interior windows, 9 cells, stay right).
    report = run("avg_same_k3", "divisor_kk", dtype)
    cats = report.categories()
    assert "wrong_weights" in cats, str(report)
    assert not ({"missing_windows", "partial_windows", "wrong_cells"} & set(cats)), str(report)
    assert "not_fd_consistent" in cats
    assert report.stats["weights_wrong"] > 0
    assert report.stats["edges_missing"] == 0 and report.stats["edges_extra"] == 0


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("name", ["avg_same_k2", "avg_same_lower_k2", "max_same_k3_s2"])
def test_mutant_swapped_pad_sides(name, dtype):
    # SAME k=2 s=1 on L=4/5: total pad 1 -> SAME_UPPER (0, 1), SAME_LOWER (1, 0). With the
    # sides swapped every backward window is shifted by one cell: e.g. (SAME_UPPER) window
    # 0 reads {-1, 0} -> only cell 0 gets the gradient (cell 1 nothing), and the last
    # window reads {L-2, L-1} where only L-1 should: missing and extra cells, not merely
    # wrong values. For max (k=3 s=2 on 6: pads (0, 1)) the routed argmax comes from a
    # shifted window.
    # At the tie pass the shifted max windows route to cells outside their tie sets too.
    report = run(name, "swap_pad_sides", dtype)
    cats = set(report.categories())
    assert cats & {"missing_windows", "partial_windows", "wrong_cells"}, str(report)
    assert cats != {"wrong_weights"}
    assert cats <= SHAPE_CATEGORIES | {"not_fd_consistent", "tie_not_subgradient"}, str(report)
    assert report.stats["edges_missing"] + report.stats["edges_extra"] > 0


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("name,bug", [("avg_stride12", "swap_stride"), ("max_stride12", "swap_stride"),
                                      ("max_dil12", "swap_dilation"), ("max_3d_dil", "swap_dilation")])
def test_mutant_axis_swapped(name, bug, dtype):
    # stride (1, 2) used as (2, 1) (or dilation likewise) in backward: window (i, j) reads
    # rows from 2i and columns from j instead of i and 2j -> gradient lands on cells the
    # window does not read (wrong_cells), or nowhere when the shifted window leaves the
    # input (missing/partial).
    report = run(name, bug, dtype)
    cats = set(report.categories())
    assert cats & {"wrong_cells", "partial_windows", "missing_windows"}, str(report)
    assert cats <= SHAPE_CATEGORIES | {"not_fd_consistent", "tie_not_subgradient"}, str(report)
    assert report.stats["edges_missing"] + report.stats["edges_extra"] > 0


@pytest.mark.parametrize("dtype", ALL3)
def test_mutant_ceil_mode_window_dropped_in_backward(dtype):
    # k=2 s=2 ceil_mode on 5x5, no padding: floor gives 2 windows per axis, ceil 3 (the
    # third starts at 4 < L + 0 = 5, so it is kept, reading only cell 4). The backward
    # loops over the floor-mode grid: row 2 and column 2 of the 3x3 output get nothing:
    # 5 of 9 windows per (N, C) slice -> missing_windows. With N=1, C=2: 10 of 18.
    report = run("avg_ceil", "ceil_floor", dtype)
    assert "missing_windows" in report.categories(), str(report)
    assert set(report.categories()) <= {"missing_windows", "not_fd_consistent"}, str(report)
    assert report.stats["windows_total"] == 18 and report.stats["windows_missing"] == 10
    assert "backward visits 8 of 18 output windows" in report.summary()


@pytest.mark.parametrize("dtype", BOTH)
def test_mutant_ceil_mode_window_kept_in_forward(dtype):
    # k=2 s=2 pad 1 ceil_mode on 5: ceil((5 + 2 - 2) / 2) + 1 = 4, but window 3 starts at
    # 3*2 - 1 = 5 >= L + pad_low... (3 * 2 >= 5 + 1): PyTorch drops it -> 3. The mutant
    # forward keeps it and returns a 4x4 output: the forward's output is malformed.
    report = run("avg_ceil_drop", "fwd_ceil_keep", dtype)
    assert report.categories() == ["bad_output"], str(report)
    assert report.stats["forward_ok"] is False
    assert "forward" in report.findings[0].message


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("name", ["avg_nhwc", "max_nhwc"])
def test_mutant_channels_last_mixup(name, dtype):
    # dx computed in (N, C, H, W) and returned with reshape instead of a transpose: for
    # C=3 the values land on cells of other positions/channels -> gradient on cells whose
    # derivative is 0 (edges_extra), and window cells that get nothing (edges_missing).
    # symjac files a window with both under partial_windows (any missing cell wins over
    # extra cells), so either category is accepted here; see
    # test_window_sending_everything_elsewhere_is_not_partial for the misnomer.
    report = run(name, "nchw_mixup", dtype)
    cats = set(report.categories())
    assert cats & {"wrong_cells", "partial_windows"}, str(report)
    assert cats <= SHAPE_CATEGORIES | {"not_fd_consistent", "tie_not_subgradient"}, str(report)
    assert report.stats["edges_extra"] > 0 and report.stats["edges_missing"] > 0


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("name", ["max_k2_s1", "max_1d", "adaptive_max", "max_3d_dil"])
def test_mutant_max_gradient_to_every_tied_cell(name, dtype):
    # At a window with |I| >= 2 maximal cells, sending dy to all of them makes the row sum
    # |I| > 1: outside the Clarke set (convex hull of the one-hot rows) -> tie_not_subgradient.
    # At distinct inputs the mutant is exact, so nothing else is found.
    report = run(name, "tie_all", dtype)
    assert report.categories() == ["tie_not_subgradient"], str(report)
    assert report.stats["backward_ok"] is False
    assert report.stats["forward_ok"] is True


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("policy", ["first", "last", "split"])
@pytest.mark.parametrize("name", ["max_k2_s1", "max_ceil", "adaptive_max"])
def test_tie_policies_are_recognised(name, policy, dtype):
    # first/last/split are all in the Clarke set at ties: tie="any" accepts each and names
    # it; demanding a different policy yields exactly one finding, tie_policy.
    pool, shape = REFERENCES[name]
    pool = dataclasses.replace(pool, tie=policy)
    spec = spec_for(pool)
    report = symjac.verify(spec, backward=pool.backward, forward=pool.forward, input_shape=shape, dtype=dtype)
    assert report.ok, str(report)
    assert report.stats["tie_policy"] == policy
    other = {"first": "last", "last": "split", "split": "first"}[policy]
    report = symjac.verify(spec, backward=pool.backward, forward=pool.forward, input_shape=shape, dtype=dtype,
                           tie=other)
    assert report.categories() == ["tie_policy"], str(report)
    assert policy in report.findings[0].message and other in report.findings[0].message


@pytest.mark.parametrize("dtype", ALL3)
def test_mutant_mutates_dy(dtype):
    report = run("avg_k3_s1_pad", "mutate_dy", dtype)
    assert report.categories() == ["mutates_inputs"], str(report)
    assert "dy" in report.stats["mutated_inputs"] and "x" not in report.stats["mutated_inputs"]


@pytest.mark.parametrize("dtype", BOTH)
def test_mutant_mutates_x(dtype):
    report = run("max_k2_s1", "mutate_x", dtype)
    assert "mutates_inputs" in report.categories(), str(report)
    assert "x" in report.stats["mutated_inputs"]


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("bug", ["raise", "wrong_shape", "nan"])
@pytest.mark.parametrize("name", ["avg_k3_s1", "max_ceil"])
def test_mutant_bad_output(name, bug, dtype):
    report = run(name, bug, dtype)
    assert report.categories() == ["bad_output"], str(report)
    assert report.stats["backward_ok"] is False
    assert not report.ok
    msg = report.findings[0].message
    assert {"raise": "RuntimeError", "wrong_shape": "shape", "nan": "NaN"}[bug] in msg, msg


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", ["avg_k3_s1", "max_ceil"])
def test_mutant_returns_float64(name, dtype):
    # Values are right (float64 holds the float16/32 results exactly); the dtype is not.
    report = run(name, "float64", dtype)
    assert report.categories() == ["bad_output"], str(report)
    assert "float64" in report.findings[0].message


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("name", ["avg_k3_s1_pad", "max_ceil"])
def test_mutant_nondeterministic(name, dtype):
    # +1 ULP on a random half of the nonzero entries, a new draw each call: two calls on
    # the same x, dy differ bitwise. Where the dtype holds the exact entry (1 for max, 1/4
    # for a 4-cell average) one ULP off is also a wrong value: the issue asks for exact
    # comparison there, so wrong_weights is found (each call's result is checked for what
    # it asked: the colour probes' rows). A dense call's one ULP may stay within the dense
    # bound γ_{m+2}·Σ|terms| (a note then) or not (nondeterministic).
    report = run(name, "noise", dtype)
    assert "wrong_weights" in report.categories(), str(report)
    assert set(report.categories()) <= {"nondeterministic", "wrong_weights"}, str(report)
    assert report.stats["backward_ok"] is False


@pytest.mark.parametrize("dtype", ALL3)
@pytest.mark.parametrize("name", ["avg_same_k3", "max_ceil", "adaptive_avg_1d"])
def test_mutant_forward_off(name, dtype):
    # y[0] += 1: a constant offset, so central differences (and the backward) are unchanged.
    report = run(name, "fwd_off", dtype)
    assert report.categories() == ["forward_values"], str(report)
    assert report.stats["forward_ok"] is False and report.stats["backward_ok"] is True
    assert report.stats["fd_consistent"] is True
    f = report.findings[0]
    assert f.window == (0,) * len(REFERENCES[name][1])  # the first output, in layout order


@pytest.mark.parametrize("dtype", BOTH)
def test_mutant_forward_wrong_divisor(dtype):
    # Forward divides border windows by 9 (SAME k=3 exclude_pad wants 6 or 4); backward is
    # right: forward_values, and the backward disagrees with its own forward's differences.
    report = run("avg_same_k3", "fwd_divisor_kk", dtype)
    assert set(report.categories()) == {"forward_values", "not_fd_consistent"}, str(report)
    assert report.stats["forward_ok"] is False and report.stats["backward_ok"] is True
    assert report.stats["fd_consistent"] is False


# ============================================================ PyTorch: zero false alarms
N_TORCH_CONFIGS = 320


# symjac builds one SymPy Max template per max-window size, at a cost that grows about
# as n^3 (36 cells: ~30 s; see the report); keep max windows small so the sweep stays fast.
MAX_WINDOW_CELLS = 16


def _torch_configs(torch, n: int, seed: int = 20260909):
    """Deterministic sample: (label, spec, torch op, kwargs, NumpyPool, shape, layout, batch, rank)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        kind = rng.choice(["pool"] * 6 + ["adaptive"] * 2 + ["global"])
        mode = rng.choice(["max", "avg"])
        rank = rng.choice([1, 2, 2, 3])
        layout = rng.choice(["channels_first", "channels_first", "channels_last"])
        batch = rng.choice(["NC", "NC", "C"]) if layout == "channels_first" else "NC"
        small = 3 if rank == 3 else 4
        if kind == "pool":
            k = tuple(rng.randint(1, 3 if rank < 3 else 2) for _ in range(rank))
            rel = rng.choice(["lt", "eq", "gt"])
            s = tuple(max(1, {"lt": ki - 1, "eq": ki, "gt": ki + 1}[rel]) for ki in k)
            d = tuple(rng.choice([1, 1, 2]) for _ in range(rank)) if mode == "max" else (1,) * rank
            p = tuple(rng.randint(0, ki // 2) for ki in k)
            ceil_mode = rng.random() < 0.35
            extent = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
            spatial = tuple(max(1, e - 2 * pi) + rng.randint(0, small) for e, pi in zip(extent, p))
            kw: dict = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode)
            divisor: object = "exclude_pad"
            if mode == "max":
                kw["dilation"] = d
            else:
                cip = rng.random() < 0.5
                kw["count_include_pad"] = cip
                divisor = "include_pad" if cip else "exclude_pad"
                if rank > 1 and rng.random() < 0.25:
                    divisor = rng.randint(1, 5)
                    kw["divisor_override"] = divisor
            op = f"{mode}_pool{rank}d"
            spec = Pool(mode, k, stride=s, padding=tuple((pi, pi) for pi in p), dilation=d,
                        ceil_mode=ceil_mode, divisor=divisor, layout=layout)
            ref = NumpyPool(mode, k, s, tuple((pi, pi) for pi in p), d, ceil_mode, divisor)
        else:
            spatial = tuple(rng.randint(1, 3 + small) for _ in range(rank))
            osz = tuple(rng.randint(1, L) for L in spatial) if kind == "adaptive" else (1,) * rank
            op, kw = f"adaptive_{mode}_pool{rank}d", dict(output_size=osz)
            spec = AdaptivePool(mode, osz, layout=layout) if kind == "adaptive" else GlobalPool(mode, rank=rank, layout=layout)
            ref = NumpyPool(mode, output_size=osz)
        nb, c = rng.randint(1, 2), rng.randint(1, 3)
        if batch == "C":
            shape = (c, *spatial)
        else:
            shape = (nb, c, *spatial) if layout == "channels_first" else (nb, *spatial, c)
        try:
            symjac.resolve(spec, shape)  # skip shapes with a window reading only padding
        except symjac.SpecError:
            continue
        sp = shape[-rank - 1:-1] if layout == "channels_last" else shape[-rank:]
        if mode == "max" and max(len(ref.window(pos, sp)[0]) for pos in np.ndindex(*ref.out_spatial(sp))) > MAX_WINDOW_CELLS:
            continue
        forward, _, _ = _torch_wrap(torch, op, kw, layout, batch, rank)
        try:  # PyTorch refuses some shapes (avg_pool3d: input smaller than the kernel)
            forward(np.zeros(shape))
        except RuntimeError:
            continue
        label = f"{op}({kw}) shape={shape} layout={layout}"
        out.append((label, spec, op, kw, ref, shape, layout, batch, rank))
    return out


def _torch_wrap(torch, op: str, kw: dict, layout: str, batch: str, rank: int):
    fn = getattr(torch.nn.functional, op)

    def apply(t):
        if batch == "C":
            t = t[None]
        if layout == "channels_last":  # (N, *sp, C) -> (N, C, *sp): PyTorch's NHWC kernels run
            t = t.permute(0, rank + 1, *range(1, rank + 1))
        y = fn(t, **kw)
        if layout == "channels_last":
            y = y.permute(0, *range(2, rank + 2), 1)
        return y[0] if batch == "C" else y

    def forward(x):
        with torch.no_grad():
            return apply(torch.from_numpy(x.copy())).numpy().copy()

    def backward(x, dy):
        calls.append(x.copy())
        t = torch.from_numpy(x.copy()).requires_grad_(True)
        apply(t).backward(torch.from_numpy(dy.copy()))
        return t.grad.numpy().copy()

    calls: list[np.ndarray] = []
    return forward, backward, calls


def _has_ties(ref: NumpyPool, shape: tuple[int, ...], layout: str, batch: str, xs: list[np.ndarray]) -> bool:
    """Whether any window of any of xs has two or more maximal cells (independent count)."""
    for x in xs:
        xc = x[None] if batch == "C" else x
        xc = np.moveaxis(xc, -1, 1) if layout == "channels_last" else xc
        spatial = xc.shape[2:]
        for pos in np.ndindex(*ref.out_spatial(spatial)):
            cells, _ = ref.window(pos, spatial)
            vals = np.stack([xc[(slice(None), slice(None)) + c] for c in cells], axis=-1)
            if ((vals == vals.max(axis=-1, keepdims=True)).sum(axis=-1) >= 2).any():
                return True
    return False


def _channels_last_minus_inf_defect(op: str, layout: str, shape: tuple[int, ...], report) -> bool:
    """PyTorch's channels_last max_pool3d with 2 or more channels indexes a window of -inf cells only
    into depth 0 (tests/test_nonfinite_frameworks.py reproduces it with PyTorch alone): findings of that
    defect at the nonfinite family only (a -inf window misrouted is outside its Clarke set)."""
    return (op == "max_pool3d" and layout == "channels_last" and shape[-1] >= 2 and
            all(f.family == "nonfinite" and f.category in ("wrong_cells", "tie_not_subgradient")
                for f in report.findings))


@pytest.mark.slow
def test_torch_pooling_has_no_false_alarms():
    torch = pytest.importorskip("torch")
    configs = _torch_configs(torch, N_TORCH_CONFIGS)
    assert len(configs) >= 300
    failures, ties_seen, kinds = [], 0, set()
    for (label, spec, op, kw, ref, shape, layout, batch, rank), dtype in itertools.product(configs, ("float64", "float32")):
        forward, backward, calls = _torch_wrap(torch, op, kw, layout, batch, rank)
        kinds.add(op)
        try:
            report = symjac.verify(spec, backward=backward, forward=forward, input_shape=shape, dtype=dtype)
        except Exception as exc:  # a crash of symjac is a failure too
            failures.append(f"{label} {dtype}: symjac raised {type(exc).__name__}: {exc}")
            continue
        if not report.ok and not _channels_last_minus_inf_defect(op, layout, shape, report):
            failures.append(f"{label} {dtype}: {report}")
            continue
        if spec.mode == "max":
            ties = _has_ties(ref, shape, layout, batch, calls)
            ties_seen += ties
            want = "first" if ties else None  # PyTorch CPU: the first maximal cell wins
            if report.stats["tie_policy"] != want:
                failures.append(f"{label} {dtype}: tie_policy {report.stats['tie_policy']!r}, expected {want!r}")
    assert not failures, f"{len(failures)} of {len(configs)} PyTorch configs flagged:\n" + "\n\n".join(failures[:20])
    assert ties_seen > 20  # the tie pass really exercised PyTorch's tie routing
    assert len(kinds) >= 10, kinds


# ======================================================================== property: hypothesis
@st.composite
def small_cases(draw):
    kind = draw(st.sampled_from(["pool", "pool", "adaptive", "global"]))
    mode = draw(st.sampled_from(["max", "avg"]))
    rank = draw(st.integers(1, 2))
    layout = draw(st.sampled_from(["channels_first", "channels_last"]))
    # <= 4 per axis: max windows of <= 16 cells (symjac's Max templates grow ~n^3).
    spatial = tuple(draw(st.integers(1, 4 if mode == "max" and kind != "pool" else 5)) for _ in range(rank))
    if kind == "pool":
        kernel = tuple(draw(st.integers(1, 3)) for _ in range(rank))
        stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
        dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
        padding = draw(st.one_of(
            st.sampled_from(["valid", "same", "same_lower"]),
            st.tuples(*[st.tuples(st.integers(0, 2), st.integers(0, 2)) for _ in range(rank)])))
        ceil_mode = not isinstance(padding, str) and draw(st.booleans())
        divisor = draw(st.sampled_from(["exclude_pad", "include_pad", 1, 3])) if mode == "avg" else "exclude_pad"
        try:
            spec = Pool(mode, kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                        divisor=divisor, layout=layout)
        except symjac.SpecError:
            assume(False)
    elif kind == "adaptive":
        spec = AdaptivePool(mode, tuple(draw(st.integers(1, L)) for L in spatial), layout=layout)
    else:
        spec = GlobalPool(mode, rank=rank, layout=layout)
    extra = draw(st.sampled_from(["none", "C", "NC"]))
    n, c = 2, draw(st.integers(1, 2))
    if extra == "none":
        shape = spatial
    elif layout == "channels_first":
        shape = (c, *spatial) if extra == "C" else (n, c, *spatial)
    else:
        shape = (*spatial, c) if extra == "C" else (n, *spatial, c)
    try:
        symjac.resolve(spec, shape)
    except symjac.SpecError:
        assume(False)
    dtype = draw(st.sampled_from(["float16", "float32", "float64"]))
    return spec, shape, dtype


@settings(max_examples=examples(40), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
@given(case=small_cases(), data=st.data())
def test_property_lowered_passes_and_corruption_fails(case, data):
    spec, shape, dtype = case
    low = symjac.lower(spec, shape)
    report = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, dtype=dtype)
    assert report.ok, str(report)

    out_shape = low.forward(np.zeros(shape, dtype=dtype)).shape
    n_out, n_in = math.prod(out_shape), math.prod(shape)
    w = data.draw(st.integers(0, n_out - 1), label="window")
    cell = data.draw(st.integers(0, n_in - 1), label="cell")

    def plus_one(x, dy):
        # +1 at a fixed input cell whenever the fixed window has gradient: in the probe
        # that gives window w dy = 1, that cell's entry is exact + 1 (exact is 0 or a
        # weight in (0, 1]) -> a wrong row whether or not w reads the cell.
        dx = low.vjp(x, dy).copy()
        if dy.flat[w] != 0:
            dx.flat[cell] += 1
        return dx

    def doubled(x, dy):
        # Window w's contribution counted twice: its row is 2 * (a nonzero row).
        one = np.zeros_like(dy)
        one.flat[w] = dy.flat[w]
        return low.vjp(x, dy) + low.vjp(x, one)

    for bad in (plus_one, doubled):
        r = symjac.verify(spec, backward=bad, forward=low.forward, input_shape=shape, dtype=dtype)
        assert not r.ok, f"{bad.__name__} w={w} cell={cell}: {r}"
        assert r.stats["backward_ok"] is False
    r = symjac.verify(spec, backward=doubled, input_shape=shape, dtype=dtype)
    assert set(r.categories()) & {"wrong_weights", "tie_not_subgradient", "partial_windows"}, str(r)


# ================================================================ regressions: bugs found and fixed
# Each test below states what a correct verifier must do; each failed before its fix.
DISJOINT = Pool("avg", (2,), stride=(2,))  # 1-D, windows [0, 1], [2, 3], ...: no window overlaps


def disjoint_forward(x):
    return ((x[..., 0::2] + x[..., 1::2]) / 2).astype(x.dtype)


def disjoint_backward(x, dy):
    """Correct: each window's dy / 2 to its two cells."""
    return np.repeat(dy / 2, 2, axis=-1).astype(x.dtype)


def test_disjoint_reference_passes():
    for shape in ((4,), (2, 8)):
        report = symjac.verify(DISJOINT, backward=disjoint_backward, forward=disjoint_forward, input_shape=shape)
        assert report.ok, str(report)


def swap_windows(i: int, j: int, channel=Ellipsis):
    def backward(x, dy):  # window i's gradient goes to window j's cells and vice versa
        d = dy.copy()
        d[channel, [i, j]] = d[channel, [j, i]]
        return disjoint_backward(x, d)
    return backward


def test_swapped_windows_caught_with_dy_ones():
    # backward(x, e_0) = [0, 0, 1/2, 1/2] but d y_0 / d x = [1/2, 1/2, 0, 0] (y_0 = (x0 + x1)/2).
    report = symjac.verify(DISJOINT, backward=swap_windows(0, 1), forward=disjoint_forward,
                           x=[1.0, 2.0, 3.0, 5.0], dy=[1.0, 1.0])
    assert not report.ok, str(report)


def test_swapped_windows_caught_with_default_inputs():
    # Channel 0's windows 1 and 3 exchange gradients: backward(x, e_(0,1)) puts 1/2 on
    # cells (0,6), (0,7) instead of (0,2), (0,3).
    backward = swap_windows(1, 3, channel=0)
    x = np.zeros((2, 8))
    e = np.zeros((2, 4))
    e[0, 1] = 1
    assert backward(x, e)[0, 6] == 0.5  # the mutant really is wrong
    report = symjac.verify(DISJOINT, backward=backward, forward=disjoint_forward, input_shape=(2, 8))
    assert not report.ok, str(report)


def test_swapped_windows_reported_as_fd_inconsistent():
    report = symjac.verify(DISJOINT, backward=swap_windows(0, 1), forward=disjoint_forward, input_shape=(2, 8))
    assert not report.ok
    # Central differences of the (correct) forward give window 0 the row [1/2, 1/2] on
    # cells 0, 1; the backward sends window 0's gradient to cells 2, 3.
    assert report.stats["fd_consistent"] is False, str(report)
    assert not any("overlapping windows" in f.message for f in report.findings), str(report)


def test_window_sending_everything_elsewhere_is_not_partial():
    def misrouted(x, dy):  # window 0's gradient lands on window 1's cells; window 1 is right
        dx = np.zeros_like(x)
        dx[2:4] = (dy[0] + dy[1]) / 2
        return dx

    report = symjac.verify(DISJOINT, backward=misrouted, forward=disjoint_forward, input_shape=(4,))
    window0 = [f.category for f in report.findings if f.window == (0,) and f.category in SHAPE_CATEGORIES]
    # One-hot probe of window 0: cells 0, 1 get 0 (want 1/2 each), cells 2, 3 get 1/2.
    assert window0 and window0[0] in ("wrong_cells", "missing_windows"), str(report)
    assert "partial_windows" not in report.categories(), str(report)


def test_backward_ok_ignores_forward_bad_output():
    report = run("avg_ceil_drop", "fwd_ceil_keep", "float64")
    assert report.categories() == ["bad_output"]
    assert report.stats["forward_ok"] is False
    assert report.stats["backward_ok"] is True, str(report)


def _torch_max_pool_2x2():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    def forward(x):
        with torch.no_grad():
            return F.max_pool2d(torch.from_numpy(x)[None, None], 2)[0, 0].numpy()

    def backward(x, dy):
        t = torch.from_numpy(x.copy()).requires_grad_(True)
        F.max_pool2d(t[None, None], 2)[0, 0].backward(torch.from_numpy(dy.copy()))
        return t.grad.numpy()

    return forward, backward


def test_torch_max_pool_at_user_ties_is_not_flagged():
    forward, backward = _torch_max_pool_2x2()
    x = [[0.0, 0.0], [0.0, 0.0]]  # e.g. post-ReLU zeros; PyTorch routes dy to cell (0,0)
    assert symjac.verify(Pool("max", 2), backward=backward, x=x).ok  # without the forward: fine
    report = symjac.verify(Pool("max", 2), backward=backward, forward=forward, x=x)
    assert report.ok, str(report)


def test_last_policy_at_user_ties_accepted_with_tie_any():
    pool = NumpyPool("max", (2,), (2,), "valid", (1,), tie="last")
    x = np.array([[[1.0, 1.0, 0.0, 2.0]]])  # window 0 ties: "last" routes to cell 1
    report = symjac.verify(spec_for(pool), backward=pool.backward, x=x, tie="any")
    assert report.ok, str(report)


def test_exact_where_the_dtype_holds_the_value():
    # 1-D avg, kernel 2, stride 2: every weight is 1/2, exact in float32, so a backward one
    # ULP off is wrong. Kernel 3: 1/3 is not a float; fl32(1/3) one ULP away either side is
    # within one rounding of the weight and one of the product (gamma_3 |1/3|).
    def off_by_ulp(k):
        def backward(x, dy):
            dx = np.repeat(dy / np.float32(k), k, axis=-1).astype(np.float32)
            return np.where(dx != 0, np.nextafter(dx, np.float32(np.inf)), dx)
        return backward

    half = symjac.verify(Pool("avg", (2,)), backward=off_by_ulp(2), input_shape=(4,), dtype="float32")
    assert "wrong_weights" in half.categories(), str(half)
    third = symjac.verify(Pool("avg", (3,)), backward=off_by_ulp(3), input_shape=(6,), dtype="float32")
    assert "wrong_weights" not in third.categories() and third.stats["max_ulp_error"] <= 1.5, str(third)


@pytest.mark.requires("ml_dtypes")
def test_gamma_is_a_bound_for_any_number_of_roundings() -> None:
    import mpmath

    from symjac.check._rounding import gamma, gamma_mp, unit_roundoff, unit_roundoff_mp

    # 1 + θ_n = Π (1 + δ_i)^{±1}, |δ_i| <= u: each factor lies in [1 - u, 1/(1 - u)], so
    # |θ_n| <= (1 - u)^{-n} - 1, for every n. Higham's γ_n = nu/(1 - nu) bounds it too, but
    # only while nu < 1: 256 roundings in bfloat16 (u = 2^-8), 2048 in float16 (u = 2^-11).
    for dtype, n in (("bfloat16", 256), ("bfloat16", 300), ("float16", 2048), ("float16", 5000)):
        u = unit_roundoff(dtype)
        with mpmath.workdps(120):
            product = (1 - mpmath.mpf(u)) ** -n - 1
            assert product <= float(gamma(n, u)) <= product * (1 + mpmath.mpf(2) ** -30)
            assert product <= mpmath.mpf(str(gamma_mp(n, unit_roundoff_mp(dtype)))) <= product * (1 + mpmath.mpf(2) ** -100)
    u = 2.0**-8
    assert float(gamma(255, u)) == 255 * u / (1 - 255 * u)  # below nu = 1: Higham's γ_n itself


@pytest.mark.parametrize(("side", "dtype"), [(64, "float16"), pytest.param(24, "bfloat16", marks=pytest.mark.requires("ml_dtypes"))])
def test_a_global_average_over_more_cells_than_gamma_allows_is_no_false_alarm(side: int, dtype: str) -> None:
    from symjac.check._rounding import float_dtype

    # 4096 cells in float16 and 576 in bfloat16: n·u >= 1, where γ_n would be negative and
    # every output a finding. The implementation sums in the working dtype, one running
    # sum (each partial sum rounded: the worst case the bound covers), then divides. The
    # input: quarters in [-2, 2], exact in both dtypes, whose running sums stay finite.
    dt = float_dtype(dtype)
    n = side * side
    x = (np.random.default_rng(0).integers(-8, 9, size=(1, 1, side, side)) / 4).astype(dt)

    def forward(x: np.ndarray) -> np.ndarray:
        total = np.cumsum(x.reshape(x.shape[:2] + (-1,)), axis=-1, dtype=dt)[..., -1]
        return (total / np.asarray(n, dtype=dt)).astype(dt).reshape(x.shape[:2] + (1, 1))

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return np.broadcast_to(dy / np.asarray(n, dtype=dt), x.shape).astype(dt)

    spec = symjac.GlobalPool("avg")
    report = symjac.verify(spec, backward=backward, forward=forward, x=x, dtype=dtype)
    assert report.ok, report
    torch = pytest.importorskip("torch")
    if dtype == "float16":  # PyTorch's own global average pooling, through the adapter
        from symjac.frameworks import torch as torch_adapter

        spec_t, impl = torch_adapter.adaptive_avg_pool2d(1)
        report = symjac.verify(spec_t, backward=impl.backward, forward=impl.forward, x=x, dtype=dtype)
        assert report.ok, report
        assert torch.__version__


@pytest.mark.requires("ml_dtypes")
def test_torch_average_pool_of_289_cells_in_bfloat16_is_no_false_alarm() -> None:
    pytest.importorskip("torch")
    from symjac.frameworks import torch as torch_adapter

    # A 17x17 window: 289 terms, past 1/u = 256 in bfloat16. γ_291 would be negative, and
    # PyTorch's correct avg_pool2d was reported wrong at 676 of 1600 outputs.
    spec, impl = torch_adapter.avg_pool2d(17, 1, 8, count_include_pad=False)
    report = symjac.verify(spec, backward=impl.backward, forward=impl.forward, input_shape=(1, 1, 40, 40),
                           dtype="bfloat16")
    assert report.ok, report


def test_verifier_conversions_made_once_answer_for_their_own_input():
    """The verifier converts an x to exact numbers once and makes a family's dy once per
    seed; the expected values are the generators' and ExactArray's own, made afresh here."""
    from symjac._exact import ExactArray
    from symjac.verifiers.pool._inputs import distinct_dy, near_tie_dy
    from symjac.pool._geometry import resolve
    from symjac.verifiers.pool._verifier import _Verifier

    spec = Pool("max", 3, stride=1, padding=1)
    g = resolve(spec, (1, 1, 5, 5))
    v = _Verifier(spec, g, lambda x, dy: x, None, np.dtype("float32"), "any", 64, None)
    a, b = np.arange(25.0).reshape(g.input_shape) / 4, np.arange(25.0).reshape(g.input_shape)
    for x in (a, b, a):  # a cached conversion must not answer for another x
        got, want = v.exact(x), ExactArray.from_any(x)
        assert got.den == want.den and np.array_equal(got.num, want.num)
    assert v.exact(a) is v.exact(a)
    for family, seed, make in (("distinct", 0, distinct_dy), ("all_negative", 0, distinct_dy),
                               ("all_negative", 3, distinct_dy), ("near_ties", 0, near_tie_dy)):
        dy, dy_c = v.dense_dy(family, seed)
        fresh = make(g, np.dtype("float32"), seed)
        assert dy.dtype == np.float32 and np.array_equal(dy, fresh)
        assert np.array_equal(dy_c, g.to_canonical(fresh, g.out_spatial).astype(np.float64))
    assert v.dense_dy("all_negative", 0)[1] is v.dense_dy("distinct", 0)[1]  # generated once
    assert not np.array_equal(v.dense_dy("distinct", 3)[0], v.dense_dy("distinct", 0)[0])
    g_avg = resolve(Pool("avg", 3, stride=1, padding=1), (1, 1, 5, 5))  # no all-negative family: nothing kept
    v_avg = _Verifier(g_avg.spec, g_avg, lambda x, dy: x, None, np.dtype("float32"), "any", 64, None)
    assert np.array_equal(v_avg.dense_dy("distinct", 0)[0], distinct_dy(g_avg, np.dtype("float32"), 0))
    assert np.array_equal(v_avg.exact(b).num, ExactArray.from_any(b).num) and not v_avg.dys


@pytest.mark.parametrize("bug, name, dtypes", [
    # padding read as 0: wrong wherever a padded window's cells are all negative (the all_negative family)
    ("pad_zero", "max_nhwc", ALL3),
    # the argmax of a float16 copy: two cells closer than float16 resolves (near ties); in float16 itself
    # the copy is exact, so there it is no defect
    ("argmax_f16", "max_k2_s1", BOTH),
    # averages summed in float32 in a float64 layer: errors far above float64's bound at non-integers
    ("acc_f32", "avg_3d", ["float64"]),
])
def test_mutants_of_precision_and_padding_are_caught_at_the_defaults(bug, name, dtypes):
    for dtype in dtypes:
        report = run(name, bug, dtype)
        assert not report.ok, (bug, dtype)
        assert set(report.categories()) & {"forward_values", "wrong_cells", "partial_windows", "wrong_weights"}
