"""Long kernels get a coverage plan (issue 34, deliverable 4).

The issue: ``Pool("avg", (1024,), stride=1024)`` at defaults (no shape) failed with "cover supports
at most 4096: give input_shape": the plan enumerated every length up to a bound past 4096. A long
kernel's plan is now a few derived shapes that show every kind of window (interior, low edge, high
edge, both ends, ceil overhang, the cells past the last window, a dropped window, L below the
kernel) with each one-ended cut at its least and greatest (module doc of symjac/pool/_cover.py,
"Long kernels"). Here: the issue's spec gets a plan and a verdict at defaults, planted bugs of each
kind are caught there and correct implementations pass, and on random specs small enough to
enumerate, the long-kernel plan shows every kind and cut extreme that any length shows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mutants import NumpyPool, spec_for

import symjac
from symjac import Pool, SpecError
from symjac.pool import _cover
from sampling import examples


def test_the_issues_long_kernel_gets_a_plan():
    spec = Pool("avg", (1024,), stride=1024)
    # Valid padding, floor mode: every window is interior (no pads, no overhang), so what varies is
    # whether cells lie past the last window (an output size rounded up shows only there) and whether
    # there are three windows or more (a wrong stride shows only there): L = 1024, the shortest length
    # with a window (one, nothing past it), and 4097, the first steady length (2·extent + 2·stride:
    # symjac/pool/_cover.py's steady_length counts a string padding as one extent) with one cell past
    # its fourth window; and the wide shape.
    assert symjac.cover(spec) == ((2, 3, 1024), (2, 3, 4097), (3, 37, 1024))


def test_the_issues_long_kernel_is_verified_at_defaults():
    spec = Pool("avg", (1024,), stride=1024)
    good = NumpyPool("avg", (1024,), (1024,), dilation=(1,))
    assert symjac.verify(spec, backward=good.backward, forward=good.forward).ok
    # an output size rounded up (ceil mode where the spec floors): a window over the cells past the last
    rounded_up = NumpyPool("avg", (1024,), (1024,), dilation=(1,), ceil_mode=True)
    report = symjac.verify(spec, backward=rounded_up.backward, forward=rounded_up.forward)
    assert not report.ok and report.stats["root_cause_shape"] == [2, 3, 4097], report.summary()
    # a wrong stride: window i read at cells [1023 i, 1023 i + 1024), right where there is one window
    def wrong_stride(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        dx = np.zeros_like(x)
        for i in range(dy.shape[-1]):
            dx[..., 1023 * i:1023 * i + 1024] += dy[..., i:i + 1] / 1024
        return dx

    report = symjac.verify(spec, backward=wrong_stride, forward=good.forward)
    assert not report.ok and report.stats["root_cause_shape"] == [2, 3, 4097], report.summary()


#: A long kernel with every kind of window: pads (100, 150), stride 200 (windows overlap by 100),
#: ceil mode (an overhang past the high pad, and lengths where it drops the last window), and
#: PyTorch's include_pad divisor (pad cells count, the overhang does not). Its exact bound
#: (950 + 300 + 200 + 1 = 1451) passes 1024, so it takes the long-kernel plan.
LONG = dict(kernel=(300,), stride=(200,), padding=((100, 150),), dilation=(1,), ceil_mode=True)


def test_the_long_plan_shows_short_lengths_edges_and_steady_residues():
    spec = spec_for(NumpyPool("avg", divisor="include_pad", **LONG))
    lengths = sorted({sh[2] for sh in symjac.cover(spec) if sh[:2] == (2, 3)})
    assert _cover.length_bound(spec, 0) > 1024
    assert min(lengths) < 300 and max(lengths) < 2 * 300 + 250 + 3 * 200  # below the kernel, and steady ones
    assert len(lengths) <= 8, lengths


class ShortInputPath:
    """A correct pool but for inputs shorter than the kernel, where a separate path divides every
    window by the kernel size (a bug only L below the kernel shows)."""

    def __init__(self, mode: str, **kw):
        self.good = NumpyPool(mode, divisor="include_pad" if mode == "avg" else "exclude_pad", **kw)
        self.short = NumpyPool(mode, divisor="include_pad" if mode == "avg" else "exclude_pad", bug="divisor_kk", **kw)

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        return (self.short if x.shape[-1] < 300 else self.good).backward(x, dy)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self.good.forward(x)


@pytest.mark.parametrize("mode, bug", [
    ("avg", "swap_pad_sides"), ("avg", "ceil_floor"), ("avg", "fwd_ceil_keep"), ("avg", "divisor_kk"),
    ("avg", "assign"), ("avg", "short_input_path"),
    ("max", "swap_pad_sides"), ("max", "ceil_floor"), ("max", "fwd_ceil_keep"), ("max", "pad_zero"),
    ("max", "tie_all"),
])
def test_planted_long_kernel_bugs_fail_at_defaults(mode, bug):
    divisor = "include_pad" if mode == "avg" else "exclude_pad"
    spec = spec_for(NumpyPool(mode, divisor=divisor, **LONG))
    impl = ShortInputPath(mode, **LONG) if bug == "short_input_path" else NumpyPool(mode, divisor=divisor, bug=bug,
                                                                                    **LONG)
    report = symjac.verify(spec, backward=impl.backward, forward=impl.forward)
    assert not report.ok, (bug, report.summary())


@pytest.mark.parametrize("mode, tie", [("avg", "first"), ("max", "first"), ("max", "last"), ("max", "split")])
def test_correct_long_kernels_pass_at_defaults(mode, tie):
    divisor = "include_pad" if mode == "avg" else "exclude_pad"
    good = NumpyPool(mode, divisor=divisor, tie=tie, **LONG)
    report = symjac.verify(spec_for(good), backward=good.backward, forward=good.forward)
    assert report.ok, report.summary()


def _items_by_length(spec: Pool, top: int) -> dict[int, set]:
    return {L: items for L in range(1, top + 1) if (items := _cover.long_items(spec, 0, L)) is not None}


one_d = st.builds(
    lambda mode, k, s, d, pad, ceil, div: Pool(
        mode, (k,), stride=s, dilation=d, ceil_mode=ceil and not isinstance(pad, str),
        padding=pad if isinstance(pad, str) else ((min(pad[0], d * (k - 1)), min(pad[1], d * (k - 1))),),
        divisor=div if mode == "avg" else "exclude_pad"),
    st.sampled_from(["avg", "max"]), st.integers(2, 20), st.integers(1, 24), st.integers(1, 3),
    st.one_of(st.sampled_from(["valid", "same", "same_lower"]), st.tuples(st.integers(0, 40), st.integers(0, 40))),
    st.booleans(), st.sampled_from(["exclude_pad", "include_pad"]))


@settings(max_examples=examples(60), deadline=None)
@given(one_d)
def test_the_long_plan_shows_every_kind_and_cut_extreme_of_any_length(spec):
    # The long-kernel plan is derived, not enumerated; here, on kernels small enough to enumerate,
    # every length up to three times the exact bound is compared with it.
    every = _items_by_length(spec, 3 * _cover.length_bound(spec, 0))
    try:
        lengths = _cover.long_lengths(spec, 0)
    except SpecError:
        assert not every
        return
    wanted = set().union(*_cover._extremes(every).values())
    shown = set().union(*(_cover.long_items(spec, 0, L) for L in lengths))
    assert wanted <= shown, (sorted(wanted - shown), lengths)
