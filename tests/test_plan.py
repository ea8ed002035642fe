"""Seed-independent verdicts, the coverage plan over N and C, index width, causes across shapes (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest

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
    # 2 ramps per axis, slabs: windows span 3 cells along each axis (3 + 3)
    assert order_count(g) == 4 + 6
    for i in range(order_count(g)):
        x = order_input(g, np.float64, i)
        assert x.shape == (2, 3, 5, 4) and (x < 0).all() and np.unique(x).size == x.size
    ramp = order_input(g, np.float64, 0)[0, 0]
    assert (np.diff(ramp, axis=0) > 0).all()  # axis 0 most significant, ascending
    assert (np.diff(order_input(g, np.float64, 1)[0, 0], axis=0) < 0).all()  # descending
    slab = order_input(g, np.float64, 4)[0, 0]  # axis 0, residue 0: rows 0 and 3 above the rest
    assert slab[[0, 3]].min() > slab[[1, 2, 4]].max()


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
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "wrap.toml").write_text('name = "wrap"\n[operator]\nkind = "pool"\nmode = "avg"\nkernel = [3]\n'
                                        'stride = [64]\npadding = [[1, 1]]\n')
    here = str(Path(__file__).parent)
    (tmp_path / "wrap_impl.py").write_text(
        f"import sys\nsys.path.insert(0, {here!r})\nimport symjac\nfrom test_plan import _int16_indices\n"
        "spec = symjac.Pool('avg', (3,), stride=64, padding=1)\nforward, backward = _int16_indices(spec)\n")
    root = Path(__file__).resolve().parent.parent

    def cli(*extra):
        return subprocess.run([sys.executable, "-m", "symjac", "verify", str(tmp_path / "wrap.toml"), "--impl",
                               str(tmp_path / "wrap_impl.py"), *extra], cwd=root, capture_output=True, text=True,
                              timeout=300)

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
