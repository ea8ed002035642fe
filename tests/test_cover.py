"""Shape-coverage plan: the plan's shapes produce every window class seen at any length."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symjac
from symjac import AdaptivePool, GlobalPool, Pool, SpecError
from symjac.pool._cover import length_bound
from sampling import examples


def classes_at(spec: Pool, length: int) -> set | None:
    """Brute force, one window at a time: (kernel slots on real cells, divisor) of every
    window of a 1-D spec at length L; None when the spec refuses L."""
    try:
        g = symjac.resolve(spec, (length,))
    except SpecError:
        return None
    (k,), (d,) = spec.kernel, spec.dilation
    out = set()
    for w, start in enumerate(g.axes[0].starts.tolist()):
        slots = tuple(j for j in range(k) if 0 <= start + j * d < length)
        assert sorted(start + j * d for j in slots) == sorted(c for c in g.cells[w].tolist() if c >= 0)
        out.add((slots, int(g.divisor[w]) if spec.mode == "avg" else None))
    return out


one_d = st.builds(
    lambda mode, k, s, d, pad, ceil, div: Pool(
        mode, (k,), stride=s, dilation=d, ceil_mode=ceil and not isinstance(pad, str),
        padding=pad, divisor=div if mode == "avg" else "exclude_pad"),
    st.sampled_from(["avg", "max"]), st.integers(1, 5), st.integers(1, 4), st.integers(1, 3),
    st.one_of(st.sampled_from(["valid", "same", "same_lower"]),
              st.tuples(st.integers(0, 4), st.integers(0, 4)).map(lambda p: (p,))),
    st.booleans(), st.sampled_from(["exclude_pad", "include_pad", 3]))


@settings(max_examples=examples(150), deadline=None)
@given(one_d)
def test_plan_covers_every_class_up_to_three_times_the_bound(spec):
    try:
        plan = symjac.cover(spec)
    except SpecError as e:
        # Only when no length fits (a pad at least the extent, say): then no L has a class.
        assert "fits no input length" in str(e)
        assert all(classes_at(spec, L) is None for L in range(1, 60))
        return
    lengths = sorted({shape[-1] for shape in plan})
    covered = set().union(*(classes_at(spec, L) for L in lengths))
    for L in range(1, 3 * length_bound(spec, 0) + 1):
        seen = classes_at(spec, L)
        assert seen is None or seen <= covered, (L, seen - covered, lengths)


@settings(max_examples=examples(60), deadline=None)
@given(one_d)
def test_plan_has_every_residue_of_the_long_lengths(spec):
    try:
        plan = symjac.cover(spec)
    except SpecError:
        return
    lengths = {shape[-1] for shape in plan}
    s = spec.stride[0]
    # "Long": both ends' windows distinct with one between, i.e. L >= extent + lo + hi + 2s
    # (SAME: pads up to the extent).
    extent = spec.dilation[0] * (spec.kernel[0] - 1) + 1
    long = extent + (sum(spec.padding[0]) if not isinstance(spec.padding, str) else extent) + 2 * s
    long_residues = {L % s for L in range(long, long + s) if classes_at(spec, L) is not None}
    assert long_residues <= {L % s for L in lengths if L >= long}


def test_plan_shapes_have_batch_and_channels_and_combine_axes():
    spec = Pool("avg", 3, stride=2, padding="same")
    full = symjac.cover(spec)
    # the wide shape (issue 21): 37 channels (a remainder mod 4, 8, 16, 32), batch 3, at the
    # smallest lengths >= 2 with windows (SAME: 2); the others batch 2 and 3 channels
    assert [sh for sh in full if sh[:2] != (2, 3)] == [(3, 37, 2, 2)]
    plan = [sh for sh in full if sh[:2] == (2, 3)]
    rows, cols = {sh[2] for sh in plan}, {sh[3] for sh in plan}
    assert {sh[2:] for sh in plan} == {(r, c) for r in rows for c in cols}  # every combination
    last = symjac.cover(Pool("avg", 3, stride=2, padding="same", layout="channels_last"))
    assert all(sh[0] == 2 and sh[-1] == 3 for sh in last if sh != (3, 2, 2, 37))
    assert (3, 2, 2, 37) in last
    # k3 s2 SAME: the low/high pads are (1, 1) for odd L and (0, 1) for even L (out = ceil(L/2),
    # total = (out-1)*2 + 3 - L); a long length of each parity is in the plan.
    assert {r % 2 for r in rows if r >= 6} == {0, 1}


def test_adaptive_and_global_plans():
    # Adaptive (module doc of symjac/pool/_cover.py): L = o - 1, o, 2o - 1, 2o + 1; the wide shape
    # (3, 37) at max(2, o) along each axis.
    plan = symjac.cover(AdaptivePool("avg", (3, 2)))
    assert {sh[2] for sh in plan if sh[:2] == (2, 3)} == {2, 3, 5, 7}
    assert {sh[3] for sh in plan if sh[:2] == (2, 3)} == {1, 2, 3, 5}
    assert [sh for sh in plan if sh[:2] == (3, 37)] == [(3, 37, 3, 2)]
    # global: o = 1, so L = 1, 1, 3 (o - 1 = 0 dropped), and the wide shape at 2
    assert {sh[2:] for sh in symjac.cover(GlobalPool("max", rank=1))} == {(1,), (2,), (3,)}


def test_cover_refuses_a_plan_past_the_budget_up_front():
    # A kernel of 10^6 along both axes: its long-kernel plan needs a shape of 10^6 x 10^6 cells
    # (the window reads every cell), 6 x 10^12 Jacobian entries against the 2^26 budget. On main
    # this was "cover supports at most 4096"; now the plan is built and refused by its size.
    with pytest.raises(SpecError, match=r"cover: the coverage plan's shape \(2, 3, 1000000, 1000000\) is too "
                                        r"large: .* exceed the budget of 67108864.*give input_shape explicitly"):
        symjac.cover(Pool("avg", 10**6, padding="same"))


@pytest.mark.parametrize("padding", ["valid", "same_lower"])
def test_cover_refuses_a_huge_dilation_before_listing_its_windows(padding):
    # Hypothesis's CI profile (derandomized) drew this spec in tests/test_fuzz.py: a window extent of
    # d(k-1)+1 = 2*10^9 + 1 cells. The long-kernel plan's candidates reach the steady length,
    # extent + pads + 2 strides (a padding string counts one extent of pads), 4*10^9 + 10 at most
    # (steady_length plus a residue); listing the windows
    # of one such length (10^9 of them at stride 3) took 24 GB before the kernel's OOM killer ended
    # the worker. 2 x 3 planes of that length hold 2.4*10^10 cells, past the budget of 2^26.
    spec = Pool("max", (3, 1, 3), stride=(3, 1, 3), padding=padding, dilation=10**9, layout="channels_last")
    with pytest.raises(SpecError, match=r"too large to plan: along axis 0 its window spans 2000000001 cells .*"
                                        r"lengths up to 4000000010.* 24000000060 cells, beyond the budget of "
                                        r"67108864 .*give input_shape explicitly"):
        symjac.cover(spec)


def test_cover_is_public_and_deterministic():
    spec = Pool("max", (2, 3), stride=(1, 2), padding=((0, 1), (1, 0)))
    assert symjac.cover(spec) == symjac.cover(spec)
    assert all(isinstance(v, int) for sh in symjac.cover(spec) for v in sh)
    assert [symjac.resolve(spec, sh).batch for sh in symjac.cover(spec)].count(3 * 37) == 1
