"""Seed-independent verdicts, the coverage plan over N and C, index width, causes across shapes (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest

import cli_runner
import symjac
from symjac.verifiers.pool._inputs import order_count, order_input


def _verify_with(good, bad, shape, **kw):
    lg, lb = symjac.lower(good, shape), symjac.lower(bad, shape)
    return symjac.verify(good, forward=lg.forward, backward=lb.vjp, input_shape=shape, **kw)


def test_wrong_padding_max_fails_at_every_seed():
    # Issue 21 item 2: pads (0, 2) instead of (1, 1) passed at seed 134 (and about 1 seed in 4).
    shape = (1, 6, 3, 1)
    good = symjac.Pool("max", (3, 1), stride=(3, 3), padding=((1, 1), (0, 0)), layout="channels_last")
    bad = symjac.Pool("max", (3, 1), stride=(3, 3), padding=((0, 2), (0, 0)), layout="channels_last")
    for seed in [134, *range(40)]:
        assert not _verify_with(good, bad, shape, seed=seed).ok, seed


def test_same_bounding_box_other_cells_fails_at_every_seed():
    # The bad windows {0, 2} (kernel 2, dilation 2) have the true windows' {0, 1, 2} bounding
    # box, so no ramp separates them; the slab of residue 1 (cells 1, 4, ...) does: the
    # true maximum is cell 1, the bad window never reads it.
    # On main this passed at seeds 1, 4, 6, 9, ... at (1, 1, 3) (argmax at cell 0 or 2 in every family).
    good, bad = symjac.Pool("max", (3,), stride=3), symjac.Pool("max", (2,), stride=3, dilation=2)
    for seed in range(30):
        assert not _verify_with(good, bad, (1, 1, 3), seed=seed).ok, seed


def test_order_inputs_are_distinct_and_negative():
    g = symjac.resolve(symjac.Pool("max", 3, stride=2, padding=1), (2, 3, 5, 4))
    # 2 ramps per axis, slabs: windows span 3 cells along each axis, one input a residue (both axes at once)
    assert order_count(g) == 4 + 3
    for i in range(order_count(g)):
        x = order_input(g, np.float64, i)
        assert x.shape == (2, 3, 5, 4) and (x < 0).all() and np.unique(x).size == x.size
    ramp = order_input(g, np.float64, 0)[0, 0]
    assert (np.diff(ramp, axis=0) > 0).all()  # axis 0 most significant, ascending
    assert (np.diff(order_input(g, np.float64, 1)[0, 0], axis=0) < 0).all()  # descending
    slab = order_input(g, np.float64, 4)[0, 0]  # residue 0: rows 0, 3 and columns 0, 3
    rows, cols = np.array([0, 3]), np.array([0, 3])
    both = slab[np.ix_(rows, cols)]
    row_only = slab[np.ix_(rows, [1, 2])]
    col_only = slab[np.ix_([1, 2, 4], cols)]
    rest = slab[np.ix_([1, 2, 4], [1, 2])]
    # ranked by the slabs a cell lies on: both > axis 1's (bit 2) > axis 0's (bit 1) > none
    assert both.min() > col_only.max() > col_only.min() > row_only.max() > row_only.min() > rest.max()


def _subset(rng, lo, span):
    """A box's two ends along an axis and a random part of its inside."""
    inside = [c for c in range(lo + 1, lo + span - 1) if rng.random() < 0.5]
    return sorted({lo, lo + span - 1, *inside})


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_slab_inputs_part_every_pair_of_product_windows_with_one_bounding_box(rank):
    # order_input's claim: windows S != T, products of per-axis cell sets with the same bounding box
    # (span <= E_a along axis a), have different maxima at one of the slab inputs. Checked on random
    # pairs: S differs from T by cells inside the box along one axis or more.
    rng = np.random.default_rng(rank)
    kernel = (4, 3, 3)[:rank]
    g = symjac.resolve(symjac.Pool("max", kernel, stride=1), (1, 1) + (9, 8, 7)[:rank])
    slabs = [order_input(g, np.float64, 2 * rank + r)[0, 0] for r in range(max(kernel))]
    assert order_count(g) == 2 * rank + max(kernel)
    parted = 0
    for _ in range(300):
        lo = [int(rng.integers(0, n - k + 1)) for n, k in zip(g.in_spatial, kernel)]
        span = [int(rng.integers(2, k + 1)) for k in kernel]

        s_sets, t_sets = ([_subset(rng, lo[a], span[a]) for a in range(rank)] for _ in range(2))
        if s_sets == t_sets:
            continue
        parted += 1
        maxima = [(np.unravel_index(x[np.ix_(*s_sets)].argmax(), [len(c) for c in s_sets]),
                   np.unravel_index(x[np.ix_(*t_sets)].argmax(), [len(c) for c in t_sets])) for x in slabs]
        cells = [(tuple(s_sets[a][i] for a, i in enumerate(si)), tuple(t_sets[a][i] for a, i in enumerate(ti)))
                 for si, ti in maxima]
        assert any(s != t for s, t in cells), (s_sets, t_sets)
    assert parted > 100


def _channel_tail_bug(spec, lanes=8):
    """An NHWC backward vectorised over blocks of ``lanes`` channels that forgets the tail
    block once C >= lanes (below, a scalar loop handles every channel correctly)."""

    def backward(x, dy):
        dx = np.array(symjac.lower(spec, x.shape).vjp(x, dy))
        c = x.shape[-1]
        if c >= lanes:
            dx[..., (c // lanes) * lanes:] = 0
        return dx

    def forward(x):
        return symjac.lower(spec, x.shape).forward(x)

    return forward, backward


@pytest.mark.parametrize("lanes", [4, 8, 16, 32])
def test_channel_tail_of_a_vectorised_nhwc_backward_fails_the_plan(lanes):
    spec = symjac.Pool("avg", 3, stride=2, padding="same", layout="channels_last")
    forward, backward = _channel_tail_bug(spec, lanes)
    # every shape with C = 3 (the plan on main) passes: C < lanes takes the scalar path
    for shape in symjac.cover(spec):
        if shape[-1] == 3:
            assert symjac.verify(spec, forward=forward, backward=backward, input_shape=shape).ok
    report = symjac.verify(spec, forward=forward, backward=backward)
    assert not report.ok
    # 37 = 4*9 + 1 = 8*4 + 5 = 16*2 + 5 = 32 + 5: the tail channels 36, 32, 32, 32 on lose gradient
    tail = {c[-1] for f in report.findings for c in f.cells}
    assert tail and min(tail) == (37 // lanes) * lanes
    assert all(f.detail["input_shape"][-1] == 37 for f in report.findings)


def _int16_indices(spec):
    """A backward whose scatter keeps flat plane indices in int16: index p lands at
    int16(p) (wrapping past 32767; negative indices count from the end, as in C pointer
    arithmetic off the plane's base they would land elsewhere too)."""

    def backward(x, dy):
        dx = np.asarray(symjac.lower(spec, x.shape).vjp(x, dy))
        n, c = x.shape[:2]
        flat = dx.reshape(n * c, -1)
        cells = flat.shape[1]
        target = np.arange(cells).astype(np.int16).astype(np.int64) % cells
        out = np.zeros_like(flat)
        for row in range(n * c):
            np.add.at(out[row], target, flat[row])
        return out.reshape(x.shape)

    def forward(x):
        return symjac.lower(spec, x.shape).forward(x)

    return forward, backward


def test_large_plan_shapes_pass_two_to_the_sixteen_along_each_axis_and_per_plane():
    spec = symjac.Pool("max", 3, stride=2, padding=1)
    plan = symjac.cover(spec)
    large = symjac.cover(spec, large=True)
    assert large[:len(plan)] == plan
    extra = large[len(plan):]
    assert all(sh[:2] == (1, 1) for sh in extra)
    assert {i for sh in extra for i, n in enumerate(sh[2:]) if n > 2**16} == {0, 1}  # each axis past 2^16
    assert any(all(n < 2**15 for n in sh[2:]) and sh[2] * sh[3] > 2**16 for sh in extra)  # a plane past 2^16
    for sh in extra:  # within the verifier's budget
        symjac.resolve(spec, sh)


def test_int16_indices_pass_the_plan_and_fail_with_large():
    # stride 64: few windows past the wrap, so the failing report's per-window diagnosis
    # stays short (at stride 2, 16k wrong windows take the diagnosis about a minute)
    spec = symjac.Pool("avg", (3,), stride=64, padding=1)
    forward, backward = _int16_indices(spec)
    assert symjac.verify(spec, forward=forward, backward=backward).ok  # every plan plane < 2^15 cells
    report = symjac.verify(spec, forward=forward, backward=backward, large=True)
    assert not report.ok
    shape = report.findings[0].detail["input_shape"]
    assert shape[-1] > 2**16


def test_large_needs_the_plan():
    with pytest.raises(symjac.InputError, match="large=True"):
        symjac.verify(symjac.Pool("avg", 2), backward=lambda x, dy: x, input_shape=(1, 1, 4, 4), large=True)


@pytest.mark.slow
def test_cli_verify_large(tmp_path):
    from pathlib import Path

    (tmp_path / "wrap.toml").write_text('name = "wrap"\n[operator]\nkind = "pool"\nmode = "avg"\nkernel = [3]\n'
                                        'stride = [64]\npadding = [[1, 1]]\n')
    here = str(Path(__file__).parent)
    (tmp_path / "wrap_impl.py").write_text(
        f"import sys\nsys.path.insert(0, {here!r})\nimport symjac\nfrom test_plan import _int16_indices\n"
        "spec = symjac.Pool('avg', (3,), stride=64, padding=1)\nforward, backward = _int16_indices(spec)\n")
    root = Path(__file__).resolve().parent.parent

    def cli(*extra):
        return cli_runner.symjac("verify", str(tmp_path / "wrap.toml"), "--impl", str(tmp_path / "wrap_impl.py"),
                                 *extra, cwd=root)

    plain, large = cli(), cli("--large")
    assert plain.returncode == 0 and plain.stdout.startswith("PASS"), plain.stdout + plain.stderr
    assert large.returncode != 0 and large.stdout.startswith("FAIL") and "(1, 1, 65537)" in large.stdout, large.stdout


def test_a_setup_error_at_a_tiny_shape_does_not_hide_dropped_windows():
    # Issue 21 item 6: a layer that raises at a 1x1 input and drops its last window elsewhere.
    spec = symjac.Pool("avg", 3, stride=2, padding="same")

    def backward(x, dy):
        if x.shape[2] * x.shape[3] == 1:
            raise RuntimeError("setup: workspace of size 0")
        dy = np.array(dy)
        dy[:, :, -1, -1] = 0  # the last window of every plane never runs
        return symjac.lower(spec, x.shape).vjp(x, dy)

    report = symjac.verify(spec, backward=backward)
    assert not report.ok
    plan = symjac.cover(spec)
    assert plan[0] == (2, 3, 1, 1)
    root = tuple(report.stats["root_cause_shape"])
    assert root != (2, 3, 1, 1)
    headline = report.summary()
    assert f"root cause at input shape {root}: " in headline and "missing_windows" in report.categories()
    assert "bad_output at input shape (2, 3, 1, 1)" in headline, headline
    assert report.findings[0].category == "missing_windows"
    assert report.findings[0].detail["input_shape"] == root
