"""Geometry: pads, output sizes, windows and divisors against hand derivations."""

import numpy as np
import pytest

import symjac
from symjac import AdaptivePool, GlobalPool, Pool


def test_seed_000_same_padding():
    # Seed 000: kernel 2x2, stride 1, SAME on 2x2 "resolves to top=0, bottom=1,
    # left=0, right=1. The four output windows contain 4, 2, 2 and 1 valid elements."
    g = symjac.resolve(Pool("avg", 2, stride=1, padding="same"), (1, 1, 2, 2))
    assert g.pads == ((0, 1), (0, 1))
    assert g.output_shape == (1, 1, 2, 2)
    assert g.valid.sum(axis=1).tolist() == [4, 2, 2, 1]
    assert g.divisor.tolist() == [4, 2, 2, 1]


@pytest.mark.parametrize(
    "length, k, s, d, upper, lower, out",
    [
        # out = ceil(L/s); total = max((out-1)s + (k-1)d + 1 - L, 0)
        (5, 2, 2, 1, (0, 1), (1, 0), 3),  # out 3, total (2*2+2-5)=1
        (4, 3, 1, 1, (1, 1), (1, 1), 4),  # out 4, total 3+3-4=2
        (4, 2, 1, 1, (0, 1), (1, 0), 4),  # out 4, total 3+2-4=1
        (6, 3, 2, 1, (0, 1), (1, 0), 3),  # out 3, total 4+3-6=1
        (7, 3, 3, 1, (1, 1), (1, 1), 3),  # out 3, total 6+3-7=2
        (5, 3, 1, 2, (2, 2), (2, 2), 5),  # dilated extent 5: total 4+5-5=4
        (4, 2, 1, 3, (1, 2), (2, 1), 4),  # extent 4: total 3+4-4=3
        (3, 1, 2, 1, (0, 0), (0, 0), 2),  # out 2, total max(2+1-3,0)=0
        (2, 3, 3, 1, (0, 1), (1, 0), 1),  # out 1, total 0+3-2=1
    ],
)
def test_same_upper_and_lower(length, k, s, d, upper, lower, out):
    for padding, pads in (("same", upper), ("same_lower", lower)):
        g = symjac.resolve(Pool("max", (k,), stride=s, dilation=d, padding=padding), (length,))
        assert g.pads == (pads,) and g.out_spatial == (out,)


def test_ceil_mode_keeps_and_drops_windows():
    # L=5, k=2, s=2, no pad: floor gives (5-2)//2+1 = 2 windows; ceil gives
    # ceil(3/2)+1 = 3, and the third starts at 4 < L, so it stays (cells 4, 5;
    # 5 is overhang, so include_pad counts only 1 cell).
    floor = symjac.resolve(Pool("avg", (2,), ceil_mode=False), (5,))
    ceil = symjac.resolve(Pool("avg", (2,), ceil_mode=True, divisor="include_pad"), (5,))
    assert floor.out_spatial == (2,) and ceil.out_spatial == (3,)
    assert ceil.divisor.tolist() == [2, 2, 1]
    # L=5, k=3, s=3, pad 1: ceil((5+2-3)/3)+1 = 3 windows, but the third would start
    # at padded position 6 >= L + pad = 6, inside the high padding: dropped.
    g = symjac.resolve(Pool("avg", (3,), padding=1, ceil_mode=True), (5,))
    assert g.out_spatial == (2,)


def test_include_and_exclude_pad_divisors():
    # L=3, k=3, s=1, pad 1: windows start at -1, 0, 1. Valid cells 2, 3, 2; with
    # padding counted every window has 3 cells inside [-1, 4).
    ex = symjac.resolve(Pool("avg", (3,), stride=1, padding=1), (3,))
    inc = symjac.resolve(Pool("avg", (3,), stride=1, padding=1, divisor="include_pad"), (3,))
    over = symjac.resolve(Pool("avg", (3,), stride=1, padding=1, divisor=7), (3,))
    assert ex.divisor.tolist() == [2, 3, 2]
    assert inc.divisor.tolist() == [3, 3, 3]
    assert over.divisor.tolist() == [7, 7, 7]


def test_adaptive_windows():
    # L=5, o=3: [floor(0), ceil(5/3)) = [0, 2), [floor(5/3), ceil(10/3)) = [1, 4),
    # [floor(10/3), ceil(5)) = [3, 5).
    g = symjac.resolve(AdaptivePool("avg", (3,)), (5,))
    cells = [sorted(c[c >= 0].tolist()) for c in g.cells]
    assert cells == [[0, 1], [1, 2, 3], [3, 4]]
    assert g.divisor.tolist() == [2, 3, 2]


def test_adaptive_upsampling_windows():
    # Issue 34: an output size above the input length (PyTorch allows it). L=3, o=5:
    # [floor(3i/5), ceil(3(i+1)/5)) = [0, 1), [0, 2), [1, 2), [1, 3), [2, 3): windows of 1 and 2
    # cells that overlap, two of them starting where the one before does.
    g = symjac.resolve(AdaptivePool("avg", (5,)), (3,))
    cells = [sorted(c[c >= 0].tolist()) for c in g.cells]
    assert cells == [[0], [0, 1], [1], [1, 2], [2]]
    assert g.divisor.tolist() == [1, 2, 1, 2, 1]
    # L=1: every window is the one cell
    one = symjac.resolve(AdaptivePool("max", (4,)), (1,))
    assert [sorted(c[c >= 0].tolist()) for c in one.cells] == [[0]] * 4


def test_adaptive_upsampling_vjp_sums_every_window_over_a_repeated_start():
    # The windows of L=3, o=5 above with dy = 1, 10, 100, 1000, 10000: cell 0 gets 1/1 + 10/2 = 6,
    # cell 1 gets 10/2 + 100/1 + 1000/2 = 605, cell 2 gets 1000/2 + 10000/1 = 10500. Windows 0 and 1
    # (and 2 and 3) start at one cell: a scatter over the slot lines must add both, not keep one.
    dy = np.array([[[1.0, 10, 100, 1000, 10000]]])
    dx = symjac.vjp(AdaptivePool("avg", (5,)), np.arange(3.0).reshape(1, 1, 3), dy)
    assert np.asarray(dx, dtype=float).tolist() == [[[6.0, 605.0, 10500.0]]]
    lowered = symjac.lower(AdaptivePool("avg", (5,)), (1, 1, 3)).vjp(np.arange(3.0).reshape(1, 1, 3), dy)
    assert lowered.tolist() == [[[6.0, 605.0, 10500.0]]]


def test_global_pool_reads_everything():
    g = symjac.resolve(GlobalPool("max", rank=3), (2, 3, 2, 3, 4))
    assert g.output_shape == (2, 3, 1, 1, 1)
    assert sorted(g.cells[0].tolist()) == list(range(24))


def test_windows_are_the_product_of_axis_windows():
    # 2-D stride 2, dilation 2, kernel 2 on 5x5: axis windows start at 0, 2 with
    # cells {0,2}, {2,4}; window (1, 0) reads rows {2,4} x cols {0,2}.
    g = symjac.resolve(Pool("max", 2, stride=2, dilation=2), (5, 5))
    assert g.out_spatial == (2, 2)
    cells = sorted(g.cells[2].tolist())
    assert cells == [2 * 5 + 0, 2 * 5 + 2, 4 * 5 + 0, 4 * 5 + 2]


@pytest.mark.parametrize("shape, lead, spatial, trail", [
    ((4, 4), (), (4, 4), ()),
    ((4, 4, 3), (), (4, 4), (3,)),
    ((2, 4, 4, 3), (2,), (4, 4), (3,)),
])
def test_channels_last_shapes(shape, lead, spatial, trail):
    g = symjac.resolve(Pool("avg", 2, layout="channels_last"), shape)
    assert (g.lead, g.in_spatial, g.trail) == (lead, spatial, trail)
    a = np.arange(int(np.prod(shape))).reshape(shape)
    assert np.array_equal(g.from_canonical(g.to_canonical(a), spatial), a)


# -- issue 10: no crash, no hang on huge kernels and pads ---------------------------------
import time  # noqa: E402

import symjac.pool as pool_package  # noqa: E402
from symjac import SpecError  # noqa: E402


def test_huge_same_kernel_stores_only_cells_that_exist():
    # Was a MemoryError after allocating gigabytes. Stride = kernel = 10^9 on 7x7:
    # one window per axis, SAME pads total 10^9 - 7, and its 7 real cells per axis.
    t = time.perf_counter()
    g = symjac.resolve(Pool("avg", 10**9, padding="same"), (7, 7))
    assert time.perf_counter() - t < 5  # generous: the point is "not 42 s / not GBs"
    assert g.out_spatial == (1, 1) and g.cells.shape == (1, 49) and g.divisor.tolist() == [49]


def test_huge_pad_is_refused_up_front():
    # Was 42 s building 2*10^8 windows before refusing; the first window reads only padding.
    t = time.perf_counter()
    with pytest.raises(SpecError, match=r"window 0 reads only padding"):
        symjac.resolve(Pool("avg", (3,), stride=(1,), padding=10**8), (7,))
    assert time.perf_counter() - t < 5


def test_budget_refuses_and_is_adjustable(monkeypatch):
    spec = Pool("avg", 3, stride=1)
    # 4 slices x 2x2 windows x 9 slots = 144 entries; 4 x 16 inputs = 64.
    with pytest.raises(SpecError, match=r"144 Jacobian entries exceed the budget of 100.*max_nnz"):
        symjac.resolve(spec, (2, 2, 4, 4), max_nnz=100)
    assert symjac.resolve(spec, (2, 2, 4, 4), max_nnz=144).out_spatial == (2, 2)
    monkeypatch.setattr(pool_package, "MAX_NNZ", 100)
    with pytest.raises(SpecError, match=r"budget of 100"):
        symjac.resolve(spec, (2, 2, 4, 4))
    with pytest.raises(SpecError, match=r"too large"):
        symjac.resolve(Pool("max", 2), (10**6, 10**6))  # no array is built first


def test_trimmed_slots_keep_windows_and_divisors():
    # kernel 7 with pads (5, 5) on L=3, stride 1: windows start at -5..-1 (out = 3+10-7+1 = 7,
    # starts -5..1). Stored slots: only those that ever hit [0, 3).
    g = symjac.resolve(Pool("avg", (7,), stride=1, padding=5, divisor="include_pad"), (3,))
    starts = range(-5, 2)
    expect = [sorted(c for c in range(s, s + 7) if 0 <= c < 3) for s in starts]
    assert [sorted(c[c >= 0].tolist()) for c in g.cells] == expect
    # include_pad counts kernel cells inside [-5, 8): all 7 for every window.
    assert g.divisor.tolist() == [7] * 7


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("x, k, s, pad", [([1.0, 2.0], 3, 3, 0), ([1.0], 3, 3, 0), ([1.0, 2.0, 4.0], 5, 4, 1),
                                          ([1.0, 2.0], 4, 2, 1)])
def test_ceil_mode_kernel_longer_than_input_follows_pytorch(x, k, s, pad):
    # PyTorch defines these (issue 10: avg_pool1d([1, 2], k=3, s=3, ceil_mode=True) = [1.5]).
    F = torch.nn.functional
    xt = torch.tensor([[x]], dtype=torch.float64)
    for mode in ("avg", "max"):
        if mode == "avg":
            want = F.avg_pool1d(xt, k, s, pad, ceil_mode=True, count_include_pad=True)
            spec = Pool("avg", (k,), stride=s, padding=pad, ceil_mode=True, divisor="include_pad")
        else:
            if pad > k // 2:
                continue  # PyTorch: pad must be at most half the kernel
            want = F.max_pool1d(xt, k, s, pad, ceil_mode=True)
            spec = Pool("max", (k,), stride=s, padding=pad, ceil_mode=True)
        got = symjac.forward(spec, [[x]])
        assert [float(v) for v in got.ravel()] == want.ravel().tolist()


def test_ceil_mode_first_case_is_one_and_a_half():
    got = symjac.forward(Pool("avg", (3,), stride=3, ceil_mode=True, divisor="include_pad"), [1, 2])
    assert [str(v) for v in got] == ["3/2"]
    ref = torch.nn.functional.avg_pool1d(torch.tensor([[1.0, 2.0]]), 3, 3, ceil_mode=True)
    assert ref.tolist() == [[1.5]]
