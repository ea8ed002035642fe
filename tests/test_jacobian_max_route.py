"""Max pooling with tie policy first/last, routed axis by axis, against PyTorch.

``symjac.jacobian`` / ``vjp`` / ``forward`` of max pooling with ``tie="first"`` or
``"last"`` find each window's one slot one spatial axis at a time
(:func:`symjac.pool._ties.max_route`). Every expected value here comes from
PyTorch 2.13 (CPU, contiguous float64): ``max_pool{1,2,3}d(..., return_indices=True)``
and ``adaptive_max_pool{1,2,3}d`` give each window's first maximal cell in row-major
order (checked on random {0, 1} inputs against a brute-force scan of every window
while writing these tests: the CPU kernels keep a value only when it is strictly
greater), and ``torch.autograd`` the VJP.

``last``: flipping the input along every spatial axis reverses the row-major order of
every window's cells (a lexicographic order reversed coordinate by coordinate), and
on a geometry that is its own mirror image (symmetric pads with windows that tile the
padded input exactly, or adaptive windows: L - ceil((o-i)L/o) = floor(iL/o)) maps
window i to window o-1-i. So the last maximal cell of window i at x is the mirror of
the first maximal cell of window o-1-i at flip(x), which PyTorch gives.

Inputs are integers in {0, 1} (ties in most windows) or {-1, 0, 1} with ``pad_value=0``;
dy is dyadic (multiples of 1/4) and at most a few windows route to one cell, so every
float sum is exact: values must agree exactly.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest

import symjac
from symjac.pool import _jacobian
from symjac.pool import _ties
from symjac.pool import _caches
from symjac.pool._geometry import resolve

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py

DEFAULT_ROUTE_BY_MEMBERS = _ties.ROUTE_BY_MEMBERS


@pytest.fixture(autouse=True, params=["by axis", "by tie sets"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test on both of max_route's paths: axis by axis, and from the tie sets (what
    it takes for window tables up to ``ROUTE_BY_MEMBERS`` entries); caches cleared so
    neither path returns the other's result for the same x."""
    monkeypatch.setattr(_ties, "ROUTE_BY_MEMBERS", 0 if request.param == "by axis" else 2**62)
    _caches.clear_caches(templates=False)
    return str(request.param)


MAX_POOLS = {1: "max_pool1d", 2: "max_pool2d", 3: "max_pool3d"}
ADAPTIVE_POOLS = {1: "adaptive_max_pool1d", 2: "adaptive_max_pool2d", 3: "adaptive_max_pool3d"}


def _torch_pool(x: np.ndarray, cfg: dict[str, Any]) -> tuple[Any, Any, Any]:
    """PyTorch on channels-first ``x``: (leaf tensor, y, flat index of each window's first
    maximal cell in the unpadded spatial grid, -1 where it is a pad cell)."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    rank = x.ndim - 2
    if "output_size" in cfg:
        y, idx = getattr(F, ADAPTIVE_POOLS[rank])(t, cfg["output_size"], return_indices=True)
        return t, y, idx
    pads = cfg.get("pads", ((0, 0),) * rank)
    kernel, dilation = cfg["kernel"], cfg.get("dilation", (1,) * rank)
    # PyTorch pads by at most half the kernel itself; beyond, the pads are explicit
    native = cfg.get("pad_value") is None and all(lo == hi and 2 * lo <= k for (lo, hi), k in zip(pads, kernel))
    if native:  # PyTorch's own padding: -inf, outside every max
        src, torch_pad = t, [lo for lo, _ in pads]
    else:  # explicit: -inf pads take no part in the max (no real cell is -inf); 0 pads compete
        fill = -math.inf if cfg.get("pad_value") is None else 0.0
        src = F.pad(t, [p for pair in reversed(pads) for p in pair], value=fill)
        torch_pad = [0] * rank
    y, idx = getattr(F, MAX_POOLS[rank])(src, kernel, cfg.get("stride", kernel), torch_pad, dilation,
                                         ceil_mode=cfg.get("ceil_mode", False), return_indices=True)
    if not native:  # indices into the padded grid: back to input cells, -1 for a pad cell
        padded = src.shape[2:]
        coords = np.unravel_index(idx.numpy(), padded)
        inside = np.ones(idx.shape, dtype=bool)
        real = []
        for c, (lo, _), length in zip(coords, pads, x.shape[2:]):
            inside &= (c - lo >= 0) & (c - lo < length)
            real.append(np.clip(c - lo, 0, length - 1))
        idx = torch.tensor(np.where(inside, np.ravel_multi_index(tuple(real), x.shape[2:]), -1))
    return t, y, idx


def torch_first(x: np.ndarray, dy: np.ndarray, cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, first maximal cell per window (-1: a pad cell), dx = J^T dy) from PyTorch, channels first."""
    t, y, idx = _torch_pool(x, cfg)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), idx.numpy(), t.grad.numpy()


def torch_last(x: np.ndarray, dy: np.ndarray, cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`torch_first` for the last maximal cell, by mirroring every spatial axis (module docstring)."""
    spatial = tuple(range(2, x.ndim))
    y, idx, dx = torch_first(np.flip(x, spatial).copy(), np.flip(dy, spatial).copy(), cfg)
    idx = np.flip(idx, spatial)
    cells = np.unravel_index(np.maximum(idx, 0), x.shape[2:])
    mirrored = np.ravel_multi_index(tuple(length - 1 - c for c, length in zip(cells, x.shape[2:])), x.shape[2:])
    return np.flip(y, spatial), np.where(idx >= 0, mirrored, -1), np.flip(dx, spatial)


def expected_pairs(idx: np.ndarray, in_spatial: tuple[int, ...], layout: str) -> list[tuple[int, int]]:
    """(row, col) of the Jacobian's entries in the layout's flat order, one per window routed to a cell."""
    n, c = idx.shape[:2]
    out_spatial = idx.shape[2:]
    pairs = []
    for pos in np.ndindex(*idx.shape):
        cell = int(idx[pos])
        if cell < 0:
            continue
        b, ch, o = pos[0], pos[1], pos[2:]
        i = tuple(int(v) for v in np.unravel_index(cell, in_spatial))
        if layout == "channels_first":
            row = np.ravel_multi_index((b, ch) + o, (n, c) + out_spatial)
            col = np.ravel_multi_index((b, ch) + i, (n, c) + in_spatial)
        else:
            row = np.ravel_multi_index((b,) + o + (ch,), (n,) + out_spatial + (c,))
            col = np.ravel_multi_index((b,) + i + (ch,), (n,) + in_spatial + (c,))
        pairs.append((int(row), int(col)))
    return sorted(pairs)


def symjac_spec(cfg: dict[str, Any], layout: str = "channels_first") -> Any:
    if "output_size" in cfg:
        return symjac.AdaptivePool("max", cfg["output_size"], layout=layout)
    rank = len(cfg["kernel"])
    return symjac.Pool("max", cfg["kernel"], stride=cfg.get("stride"), padding=cfg.get("pads", ((0, 0),) * rank),
                       dilation=cfg.get("dilation", 1), ceil_mode=cfg.get("ceil_mode", False),
                       pad_value=cfg.get("pad_value"), layout=layout)


def check(cfg: dict[str, Any], shape: tuple[int, ...], tie: str, seed: int, layout: str = "channels_first",
          kind: str = "float") -> None:
    """symjac's jacobian, vjp and forward (forward: tie first only) against PyTorch at a tie-rich x."""
    rng = np.random.default_rng(seed)
    low = -1 if cfg.get("pad_value") == 0 else 0
    x = rng.integers(low, 2, shape).astype(np.float64)
    out_shape = _torch_pool(x, cfg)[1].shape
    dy = rng.integers(-8, 9, tuple(out_shape)) / 4
    y, idx, dx = (torch_first if tie == "first" else torch_last)(x, dy, cfg)
    to_layout = (lambda a: np.moveaxis(a, 1, -1)) if layout == "channels_last" else (lambda a: a)
    xs: Any = to_layout(x)
    if kind == "int":
        xs = xs.astype(np.int64)
    elif kind == "big":  # Python ints beyond int64: the same order as x, so the same routes
        xs = xs.astype(np.int64).astype(object) * 2**70  # a positive scale keeps every sign (pads hold 0)
    spec = symjac_spec(cfg, layout)
    J = symjac.jacobian(spec, xs, tie=tie)
    assert list(zip(J.rows.tolist(), J.cols.tolist())) == expected_pairs(idx, x.shape[2:], layout)
    assert set(J.values.tolist()) <= {1}
    got_dx = np.array(symjac.vjp(spec, xs, to_layout(dy), tie=tie), dtype=np.float64)
    np.testing.assert_array_equal(got_dx, to_layout(dx))
    if tie == "first":
        got_y = symjac.forward(spec, xs)
        want_y = to_layout(y)
        if kind == "big":
            want_y = want_y.astype(np.int64).astype(object) * 2**70
            assert got_y.tolist() == want_y.tolist()
        else:
            np.testing.assert_array_equal(np.array(got_y, dtype=np.float64), want_y)


# Each config: PyTorch-style arguments. "last" needs a mirror-symmetric geometry (see the
# module docstring): MIRRORED marks those (symmetric pads, windows tiling the padded input).
CONFIGS: dict[str, tuple[dict[str, Any], tuple[int, ...], bool]] = {
    "2d k3 s1 pad1": ({"kernel": (3, 3), "stride": (1, 1), "pads": ((1, 1), (1, 1))}, (2, 3, 7, 6), True),
    "2d k3 s1 valid": ({"kernel": (3, 3), "stride": (1, 1)}, (1, 2, 5, 8), True),
    "2d k(2,3) s(2,1)": ({"kernel": (2, 3), "stride": (2, 1), "pads": ((0, 0), (1, 1))}, (2, 2, 8, 7), True),
    "2d k3 s2 pad1 ceil": ({"kernel": (3, 3), "stride": (2, 2), "pads": ((1, 1), (1, 1)), "ceil_mode": True},
                           (2, 2, 8, 7), False),
    "2d k2 s2 ceil": ({"kernel": (2, 2), "stride": (2, 2), "ceil_mode": True}, (1, 3, 5, 7), False),
    "2d dilation 2": ({"kernel": (3, 3), "stride": (1, 1), "dilation": (2, 2), "pads": ((2, 2), (2, 2))},
                      (2, 2, 7, 8), True),
    "2d dilation (1,3) s2": ({"kernel": (2, 3), "stride": (2, 2), "dilation": (1, 3), "pads": ((1, 1), (0, 0))},
                             (1, 2, 9, 10), False),
    "2d same asymmetric": ({"kernel": (4, 2), "stride": (1, 1), "pads": ((1, 2), (0, 1))}, (2, 2, 6, 7), False),
    "2d k15 s1 pad7": ({"kernel": (15, 15), "stride": (1, 1), "pads": ((7, 7), (7, 7))}, (1, 2, 17, 16), True),
    "1d k4 s2 pad1": ({"kernel": (4,), "stride": (2,), "pads": ((1, 1),)}, (3, 2, 12), True),
    "1d k3 s1 ceil dil2": ({"kernel": (3,), "stride": (2,), "dilation": (2,), "ceil_mode": True}, (2, 2, 10), False),
    "3d k(2,3,2) s(1,2,1)": ({"kernel": (2, 3, 2), "stride": (1, 2, 1), "pads": ((0, 0), (1, 1), (1, 1)),
                             "dilation": (1, 1, 2)}, (2, 2, 4, 7, 6), False),
    "3d k3 s1 pad1": ({"kernel": (3, 3, 3), "stride": (1, 1, 1), "pads": ((1, 1),) * 3}, (1, 2, 5, 4, 6), True),
    "2d pad_value 0": ({"kernel": (3, 3), "stride": (1, 1), "pads": ((1, 1), (1, 1)), "pad_value": 0},
                       (2, 2, 6, 7), True),
    "2d pad_value 0 asym s2": ({"kernel": (3, 2), "stride": (2, 1), "pads": ((1, 2), (1, 0)), "pad_value": 0},
                               (2, 2, 7, 6), False),
    "3d pad_value 0": ({"kernel": (3, 2, 3), "stride": (1, 2, 1), "pads": ((1, 1), (0, 0), (1, 1)),
                       "pad_value": 0}, (1, 2, 4, 6, 5), True),
    "adaptive 2d": ({"output_size": (3, 4)}, (2, 2, 10, 9), True),
    "adaptive 2d 1x1": ({"output_size": (1, 1)}, (1, 3, 6, 5), True),
    "adaptive 1d": ({"output_size": (4,)}, (2, 3, 11), True),
    "adaptive 3d": ({"output_size": (2, 3, 2)}, (1, 2, 5, 7, 4), True),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_first_against_torch(name: str) -> None:
    cfg, shape, _ = CONFIGS[name]
    for seed in range(3):
        check(cfg, shape, "first", seed)


@pytest.mark.parametrize("name", sorted(n for n, (_, _, mirrored) in CONFIGS.items() if mirrored))
def test_last_against_mirrored_torch(name: str) -> None:
    cfg, shape, _ = CONFIGS[name]
    for seed in range(3):
        check(cfg, shape, "last", seed)


@pytest.mark.parametrize("tie", ["first", "last"])
@pytest.mark.parametrize("name", ["2d k3 s1 pad1", "adaptive 2d", "3d k3 s1 pad1", "2d pad_value 0"])
def test_channels_last_against_torch(name: str, tie: str) -> None:
    cfg, shape, _ = CONFIGS[name]
    check(cfg, shape, tie, seed=7, layout="channels_last")


@pytest.mark.parametrize("kind", ["int", "big"])
@pytest.mark.parametrize("tie", ["first", "last"])
def test_integer_and_big_integer_inputs_against_torch(kind: str, tie: str) -> None:
    # int64 inputs, and Python ints beyond 2^64 (object arrays): x * 2^70 has the same
    # order and signs as the x PyTorch sees, so the same routes; forward values scale exactly.
    check(CONFIGS["2d pad_value 0"][0], (2, 2, 6, 7), tie, seed=11, kind=kind)
    check(CONFIGS["2d k3 s1 pad1"][0], (2, 3, 7, 6), tie, seed=12, kind=kind)


@pytest.mark.parametrize("tie", ["first", "last"])
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_global_max_pool_is_the_one_window_adaptive_pool(tie: str, layout: str) -> None:
    # GlobalPool("max") has one window spanning the map: PyTorch's adaptive_max_pool2d to
    # output (1, 1) gives its first maximal cell (mirrored for "last").
    rng = np.random.default_rng(21)
    x = rng.integers(0, 2, (2, 3, 6, 5)).astype(np.float64)
    dy = rng.integers(-8, 9, (2, 3, 1, 1)) / 4
    y, idx, dx = (torch_first if tie == "first" else torch_last)(x, dy, {"output_size": (1, 1)})
    to_layout = (lambda a: np.moveaxis(a, 1, -1)) if layout == "channels_last" else (lambda a: a)
    spec = symjac.GlobalPool("max", layout=layout)
    J = symjac.jacobian(spec, to_layout(x), tie=tie)
    assert list(zip(J.rows.tolist(), J.cols.tolist())) == expected_pairs(idx, x.shape[2:], layout)
    got_dx = np.array(symjac.vjp(spec, to_layout(x), to_layout(dy), tie=tie), dtype=np.float64)
    np.testing.assert_array_equal(got_dx, to_layout(dx))
    np.testing.assert_array_equal(np.array(symjac.forward(spec, to_layout(x)), dtype=np.float64), to_layout(y))


def test_first_route_finds_no_maximum_outside_the_window() -> None:
    # Hand derivation: 1-D max k3 s1 valid on x = [5, 0, 0, 0, 5]: window 1 reads
    # cells 1..3, all 0: first = cell 1, last = cell 3 (the 5s lie outside it);
    # windows 0 and 2 read a 5 at cells 0 and 4.
    spec = symjac.Pool("max", (3,), stride=1)
    x = np.array([[[5, 0, 0, 0, 5]]])
    for tie, middle in (("first", 1), ("last", 3)):
        J = symjac.jacobian(spec, x, tie=tie)
        assert J.cols.tolist() == [0, middle, 4]


@pytest.mark.parametrize("tie", ["first", "last"])
def test_first_last_build_no_windows_by_slots_array(monkeypatch: pytest.MonkeyPatch, tie: str, route: str) -> None:
    # Issue 11's structural regression (no timing): max k31 stride 1 SAME on 64^2 has
    # W = 4096 windows of K = 961 slots; first/last must cost O(W x sum_a K_a) = O(W x 62),
    # never a (W, K) array (a bool one is 3.9 MB; the support and tie sets of before, and
    # the geometry's int64 cell table, 31 MB, were all (W, K)). With the default
    # ROUTE_BY_MEMBERS, whatever the fixture set.
    monkeypatch.setattr(_ties, "ROUTE_BY_MEMBERS", DEFAULT_ROUTE_BY_MEMBERS)
    spec = symjac.Pool("max", 31, stride=1, padding="same")
    shape = (1, 1, 64, 64)
    x = np.random.default_rng(5).integers(0, 3, shape).astype(np.float64)
    dy = np.ones(shape)
    _ties.max_template(2, 2)  # SymPy's derivation: O(1), not part of the structure

    def no_support(self: Any) -> None:
        raise AssertionError("the (batch, windows, K) support was built on the first/last path")

    monkeypatch.setattr(_jacobian.Stamp, "support", property(no_support))
    _caches.clear_caches(templates=False)
    tracemalloc.start()
    try:
        J = symjac.jacobian(spec, x, tie=tie)
        symjac.vjp(spec, x, dy, tie=tie)
        symjac.forward(spec, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    g = resolve(spec, shape)  # the cached geometry the calls used
    windows = g.n_out
    slots = math.prod(ax.cells.shape[1] for ax in g.axes)
    assert (windows, slots) == (4096, 961)
    assert "cells" not in g.__dict__ and "valid" not in g.__dict__  # its (W, K) tables were never built
    assert J.nnz == windows
    # The largest arrays are one level's (64, 64, 31) float64 values and their tie mask
    # (9 bytes x W x 31), a few of them: well below one byte per (window, slot).
    assert peak < windows * slots, f"peak {peak} bytes >= one byte per (window, slot) = {windows * slots}"
