"""Verifier reach (issue 10): input families, the coverage plan, bfloat16, no false alarms.

The mutants below are plain NumPy poolings written here, each with one bug that the
small distinct integers of the main pass cannot show; each must be flagged at the
default inputs, with no x given, by the family (or the plan) that targets it.
"""

import numpy as np
import pytest

import symjac
from symjac import Pool

ml_dtypes = pytest.importorskip("ml_dtypes")
ALL_DTYPES = ("float64", "float32", "float16", "bfloat16")


def same_pads(length: int, k: int, s: int) -> tuple[int, int]:
    """TF SAME: out = ceil(L/s), total = max((out-1)s + k - L, 0), the extra cell high."""
    total = max((-(-length // s) - 1) * s + k - length, 0)
    return total // 2, total - total // 2


class Naive2d:
    """Textbook 2-D pooling over an explicitly padded copy (N, C, H, W), one window at a time.

    Knobs for the mutants: ``pads(L)`` per axis, the value padding holds for max
    (``-inf``: correct; ``0``: the pad-as-zero bug), the dtype the argmax is taken in,
    and the dtype averages accumulate in.
    """

    def __init__(self, mode, k, s, pads, pad_value=-np.inf, argmax_dtype=None, acc_dtype=None):
        self.mode, self.k, self.s, self.pads = mode, k, s, pads
        self.pad_value, self.argmax_dtype, self.acc_dtype = pad_value, argmax_dtype, acc_dtype

    def windows(self, shape):
        (top, bottom), (left, right) = self.pads(shape[2]), self.pads(shape[3])
        oh = (shape[2] + top + bottom - self.k) // self.s + 1
        ow = (shape[3] + left + right - self.k) // self.s + 1
        for i in range(oh):
            for j in range(ow):
                rows = [i * self.s + a - top for a in range(self.k)]
                cols = [j * self.s + c - left for c in range(self.k)]
                yield (i, j), [(p, q) for p in rows for q in cols], (oh, ow), shape[2:]

    def forward(self, x):
        out = None
        for (i, j), cells, (oh, ow), (H, W) in self.windows(x.shape):
            out = np.zeros(x.shape[:2] + (oh, ow), x.dtype) if out is None else out
            inside = [(p, q) for p, q in cells if 0 <= p < H and 0 <= q < W]
            vals = np.stack([x[:, :, p, q] for p, q in inside], -1)
            if self.mode == "max":
                pad = np.full(x.shape[:2] + (len(cells) - len(inside),), self.pad_value, x.dtype)
                out[:, :, i, j] = np.concatenate([vals, pad], -1).max(-1)
            else:
                acc = vals.astype(self.acc_dtype or x.dtype)
                out[:, :, i, j] = (acc.sum(-1) / acc.dtype.type(len(inside))).astype(x.dtype)
        return out

    def backward(self, x, dy):
        dx = np.zeros(x.shape, self.acc_dtype or x.dtype)
        for (i, j), cells, _, (H, W) in self.windows(x.shape):
            g = dy[:, :, i, j].astype(dx.dtype)
            inside = [(p, q) for p, q in cells if 0 <= p < H and 0 <= q < W]
            if self.mode == "avg":
                for p, q in inside:
                    dx[:, :, p, q] += g / dx.dtype.type(len(inside))
                continue
            # The real cells, then the pad slots (pad_value), in the argmax dtype; the first
            # maximum wins, so at a tie with padding a real cell does.
            vals = np.stack([x[:, :, p, q] for p, q in inside]
                            + [np.full(x.shape[:2], self.pad_value, x.dtype)] * (len(cells) - len(inside)), -1)
            win = vals.astype(self.argmax_dtype or x.dtype).argmax(-1)
            for n, (p, q) in enumerate(inside):  # gradient routed to a pad slot is dropped
                dx[:, :, p, q] += np.where(win == n, g, 0)
        return dx.astype(x.dtype)


def explicit(pad):
    return lambda length: pad


def check(spec, impl, **kw):
    return symjac.verify(spec, backward=impl.backward, forward=impl.forward, **kw)


# -------------------------------------------------------------------- the mutants
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_naive_pooling_passes_everywhere(dtype):
    # The knobs at their correct settings: the plan, every family, no finding.
    for spec, impl in [(Pool("max", 3, stride=2, padding=1), Naive2d("max", 3, 2, explicit((1, 1)))),
                       (Pool("avg", 3, stride=2, padding="same"), Naive2d("avg", 3, 2, lambda L: same_pads(L, 3, 2)))]:
        report = check(spec, impl, dtype=dtype)
        assert report.ok, report


def test_pad_as_zero_max_is_caught_by_all_negative_inputs():
    spec = Pool("max", 3, stride=2, padding=1)
    bug = Naive2d("max", 3, 2, explicit((1, 1)), pad_value=0.0)
    # The main pass's distinct values are centred on 0: some padded windows are all
    # negative by chance, or not; give the family nothing to hide behind: without it, at
    # a shape where every padded window holds a positive value, the bug passes.
    x = np.arange(1, 2 * 3 * 5 * 5 + 1, dtype=np.float64).reshape(2, 3, 5, 5)
    assert check(spec, bug, x=x, families=()).ok
    report = check(spec, bug)  # defaults: the coverage plan and every family
    assert not report.ok
    assert "all_negative" in {f.family for f in report.findings}
    assert report.stats["families"]["all_negative"] > 0
    doc = report.to_dict()
    assert all("family" in f for f in doc["findings"])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_argmax_on_a_float16_copy_is_caught_by_near_ties(dtype):
    spec = Pool("max", 2, stride=1)
    bug = Naive2d("max", 2, 1, explicit((0, 0)), argmax_dtype=np.float16)
    # Small distinct integers are exact in float16: the bug is invisible to them.
    assert check(spec, bug, input_shape=(2, 3, 5, 5), dtype=dtype, families=()).ok
    report = check(spec, bug, dtype=dtype)
    assert not report.ok
    assert {f.family for f in report.findings} == {"near_ties"}
    assert report.findings[0].category in ("wrong_cells", "partial_windows", "wrong_weights")
    assert "at near-tie inputs" in report.findings[0].message


def test_float32_accumulation_in_a_float64_layer_is_caught_by_near_ties():
    spec = Pool("avg", 2, stride=1)
    bug = Naive2d("avg", 2, 1, explicit((0, 0)), acc_dtype=np.float32)
    assert check(spec, bug, input_shape=(2, 3, 5, 5), families=()).ok  # integers: float32 sums them exactly
    report = check(spec, bug)
    assert not report.ok
    assert {f.family for f in report.findings} == {"near_ties"}
    assert {"forward_values"} <= set(report.categories())


def test_low_high_pad_swap_is_caught_by_the_coverage_plan():
    # SAME, kernel 3, stride 2: pads (1, 1) at odd L, (0, 1) at even L. The bug puts the
    # extra cell low: invisible at 5x5 (issue 10's example), visible at 6x7.
    spec = Pool("avg", 3, stride=2, padding="same")
    swapped = Naive2d("avg", 3, 2, lambda L: same_pads(L, 3, 2)[::-1])
    assert check(spec, swapped, input_shape=(1, 1, 5, 5)).ok
    assert not check(spec, swapped, input_shape=(1, 1, 6, 7)).ok
    report = check(spec, swapped)  # no x, no shape: every shape of the plan
    assert not report.ok
    bad = [s for s in report.stats["shapes"] if not s["ok"]]
    assert bad and all(f.detail["input_shape"] in [tuple(s["input_shape"]) for s in bad] for f in report.findings)
    assert report.findings[0].message.startswith("at input shape (")


# -------------------------------------------------------------------- no false alarms
SPECS = [Pool("avg", 3, stride=2, padding="same"), Pool("max", 3, stride=2, padding="same"),
         Pool("max", 2, stride=1, padding=1), Pool("avg", (3,), stride=2, padding=1, ceil_mode=True, divisor="include_pad"),
         Pool("max", (2, 3), stride=(1, 2), dilation=(2, 1), padding=((1, 0), (0, 1))),
         Pool("avg", 2, stride=1, padding="same", layout="channels_last"),
         symjac.AdaptivePool("avg", (3, 2)), symjac.GlobalPool("max", rank=1)]


class Lowered:
    """The lowered reference, lowered at each call's shape."""

    def __init__(self, spec):
        self.spec = spec

    def forward(self, x):
        return symjac.lower(self.spec, x.shape).forward(x)

    def backward(self, x, dy):
        return symjac.lower(self.spec, x.shape).vjp(x, dy)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_lowered_reference_passes_the_plan_and_every_family(dtype):
    for spec in SPECS:
        report = check(spec, Lowered(spec), dtype=dtype)
        assert report.ok, report
        assert report.stats["dtype"] == dtype and len(report.stats["coverage_plan"]) >= 1


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_torch_pooling_passes_the_plan_in_every_dtype(dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    tdt = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    cases = [(Pool("max", 3, stride=2, padding=1), lambda t: F.max_pool2d(t, 3, 2, 1)),
             (Pool("avg", 3, stride=2, padding=1, divisor="include_pad"), lambda t: F.avg_pool2d(t, 3, 2, 1)),
             (Pool("avg", 2, stride=2, padding=1, ceil_mode=True),
              lambda t: F.avg_pool2d(t, 2, 2, 1, ceil_mode=True, count_include_pad=False)),
             (Pool("max", (3,), stride=1, dilation=2, padding=1), lambda t: F.max_pool1d(t, 3, 1, 1, dilation=2))]

    def to_torch(a):  # bfloat16 travels as its float32 value (exact); the others as they are
        return torch.from_numpy(np.array(a, np.float32 if dtype == "bfloat16" else a.dtype)).to(tdt)

    def to_numpy(t):
        if dtype == "bfloat16":
            return t.to(torch.float32).numpy().astype(ml_dtypes.bfloat16)
        return t.numpy().copy()

    for spec, op in cases:
        def forward(x, op=op):
            with torch.no_grad():
                return to_numpy(op(to_torch(x)))

        def backward(x, dy, op=op):
            t = to_torch(x).requires_grad_(True)
            op(t).backward(to_torch(dy))
            return to_numpy(t.grad)

        report = symjac.verify(spec, backward=backward, forward=forward, dtype=dtype)
        assert report.ok, report


def test_budget_grows_by_one_dense_call_per_family():
    spec = Pool("max", 3, stride=2, padding=1)
    impl = Lowered(spec)
    base = check(spec, impl, input_shape=(2, 3, 7, 7), families=())
    full = check(spec, impl, input_shape=(2, 3, 7, 7))
    assert list(full.stats["families"]) == ["distinct", "ties", "all_negative", "near_ties", "orders", "extreme",
                                            "nonfinite"]
    # one call each for all_negative, near_ties and extreme; orders: 2 ramps per axis (4) and one slab
    # input per residue, windows spanning 3 cells along both axes (3): 3 + 7; nonfinite (NaN and the
    # infinities tie): a probe of the windows that tie and one dense call. Its patterns sit in the windows
    # of one colour here (one window an axis is apart: too few to hold all 11 patterns over 6 slices):
    # windows (0, 0), (0, 2), (2, 0), (2, 2), the k-th of slice b taking pattern (k + b) mod 11. In
    # slice 3, window (0, 0) (cells 0..1 an axis, cut by the padding) takes pattern 3, +inf at its first
    # and last cells (0, 0) and (1, 1), and window (2, 2) pattern 6, +inf at its first cell (3, 3): so
    # windows (0, 0) and (1, 1) (cells 1..3) each hold two +inf, and share cell (1, 1): 2 probe colours
    assert full.stats["window_colours"] == 4
    assert full.stats["backward_calls"] - base.stats["backward_calls"] == 10 + 2 + 1
    assert full.stats["forward_calls"] - base.stats["forward_calls"] == 10 + 1


def test_the_nonfinite_family_probes_only_the_windows_that_tie():
    # 3x3 windows at stride 1 on 24x24: 22 windows an axis, each [i, i + 2]. The windows apart (no window
    # reads cells of two) along an axis: 0, then the first whose cells lie beyond what the windows meeting
    # the last one taken read (window 0: windows 0..2 meet it, reading up to cell 4): 0, 5, 10, 15, 20;
    # 25 windows a slice, enough for the 11 patterns. A pattern's two NaN (or +inf) sit at its window's
    # first and last cells, opposite corners: no other 3x3 window holds both, and no window reads cells
    # of two patterns, so the windows that tie are disjoint: one probe call for all, and one dense call
    # (the probe plan takes 9, one a window colour: 3 an axis).
    spec = Pool("max", 3, stride=1)
    impl = Lowered(spec)
    base = check(spec, impl, input_shape=(1, 1, 24, 24), families=())
    full = check(spec, impl, input_shape=(1, 1, 24, 24), families=("nonfinite",))
    assert full.ok and base.stats["window_colours"] == 9
    assert full.stats["backward_calls"] - base.stats["backward_calls"] == 1 + 1


def test_families_argument_is_checked():
    with pytest.raises(symjac.InputError, match="families="):
        check(Pool("max", 2), Lowered(Pool("max", 2)), input_shape=(1, 1, 4, 4), families=("zeros",))


def test_a_timeout_on_the_plan_stops_at_the_first_shape():
    import threading

    release = threading.Event()

    def hangs(x, dy):
        release.wait(30)
        return np.zeros_like(x)

    spec = Pool("avg", 3, stride=2, padding="same")
    try:
        report = symjac.verify(spec, backward=hangs, timeout=0.2)
    finally:
        release.set()
    assert report.categories() == ["timeout"] and len(report.stats["shapes"]) == 1
    # 9 shapes and the wide one (37 channels)
    assert len(report.stats["coverage_plan"]) == 10 and "9 more shapes not run after the timeout" in report.summary()
