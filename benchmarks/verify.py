"""Verifier speed: symjac.verify on vectorised NumPy 3x3 stride-1 pooling, and
torch.autograd.gradcheck on the same op, side by side in one run.

Prints, for avg and max 3x3 stride 1 (padding 1, PyTorch style) on 1x1xHxW:
seconds, backward and forward calls and peak traced memory of `symjac.verify`
(with forward, so the finite-difference oracle runs too) at 256x256, then both
tools at 32x32 and 48x48 and the speed ratios: symjac on the NumPy pool below and on
PyTorch's own op (the one gradcheck checks), one cold run each.

Run: python benchmarks/verify.py        (gradcheck columns need torch)
"""

from __future__ import annotations

import statistics
import time
import tracemalloc

import numpy as np

import symjac
from symjac.pool import _caches

K, S, P = 3, 1, 1


def windows(xp: np.ndarray) -> np.ndarray:
    """(…, H, W, 3, 3) view of the padded input's 3x3 stride-1 windows."""
    return np.lib.stride_tricks.sliding_window_view(xp, (K, K), axis=(-2, -1))


def avg_forward(x: np.ndarray) -> np.ndarray:
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(P, P)] * 2)
    ones = np.pad(np.ones(x.shape[-2:], x.dtype), P)
    return windows(xp).sum(axis=(-2, -1)) / windows(ones).sum(axis=(-2, -1))


def avg_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    ones = np.pad(np.ones(x.shape[-2:], x.dtype), P)
    g = dy / windows(ones).sum(axis=(-2, -1))
    gp = np.pad(g, [(0, 0)] * (x.ndim - 2) + [(P, P)] * 2)
    return windows(gp).sum(axis=(-2, -1))  # 3x3 symmetric: the transpose is the same stencil


def max_forward(x: np.ndarray) -> np.ndarray:
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(P, P)] * 2, constant_values=-np.inf)
    return windows(xp).max(axis=(-2, -1))


def max_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Route each dy to its window's first maximum (row-major), accumulating with add.at: a NaN is
    the maximum where the window holds one, and a pad cell (-inf) never is (a window of -inf cells
    routes to its first real one)."""
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(P, P)] * 2, constant_values=-np.inf)
    real = windows(np.pad(np.ones(x.shape[-2:], bool), P))
    w = windows(xp)
    top = w.max(axis=(-2, -1), keepdims=True)
    hit = real & ((w == top) | (np.isnan(w) & np.isnan(top)))
    first = hit.reshape(hit.shape[:-2] + (K * K,)).argmax(axis=-1)
    di, dj = np.divmod(first, K)
    H, W = x.shape[-2:]
    rows = np.arange(H)[:, None] + di - P
    cols = np.arange(W)[None, :] + dj - P
    lead = np.indices(x.shape[:-2] + (H, W))[:-2]  # batch indices broadcast over the grid
    dx = np.zeros_like(x)
    np.add.at(dx, (*lead, rows, cols), dy)
    return dx


IMPLS = {"avg": (avg_forward, avg_backward), "max": (max_forward, max_backward)}


def run_symjac(mode: str, size: int, trace: bool = False, cold: bool = True) -> tuple[float, symjac.Report, float]:
    """symjac.verify at size², timed. cold: geometry, window classes and SymPy templates
    are built in the run; else the templates (per mode, not per size) are kept from an
    earlier run, as gradcheck's timed run follows a warm-up on the same op."""
    spec = symjac.Pool(mode, K, stride=S, padding=P)
    fwd, bwd = IMPLS[mode]
    if cold:
        _caches.clear_caches()
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    report = symjac.verify(spec, backward=bwd, forward=fwd, input_shape=(1, 1, size, size), dtype="float64")
    seconds = time.perf_counter() - t0
    peak = 0.0
    if trace:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return seconds, report, peak


def run_symjac_torch(mode: str, size: int, cold: bool = True) -> tuple[float, symjac.Report] | None:
    """symjac.verify of PyTorch's own op, the one :func:`run_gradcheck` checks (through
    ``symjac.frameworks.torch``: torch's autograd backward, float64), timed like
    :func:`run_symjac`; None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    from symjac.frameworks import torch as adapter

    spec, impl = adapter.avg_pool2d(K, S, P, count_include_pad=False) if mode == "avg" else adapter.max_pool2d(K, S, P)
    if cold:
        _caches.clear_caches()
    t0 = time.perf_counter()
    report = symjac.verify(spec, backward=impl.backward, forward=impl.forward, input_shape=(1, 1, size, size),
                           dtype="float64")
    return time.perf_counter() - t0, report


def run_gradcheck(mode: str, size: int, repeat: int = 1) -> float | None:
    """torch.autograd.gradcheck (slow mode) of the same op at size², warmed at 4x4: the
    median of ``repeat`` timed runs (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    op = torch.nn.functional.avg_pool2d if mode == "avg" else torch.nn.functional.max_pool2d
    kw = {"count_include_pad": False} if mode == "avg" else {}
    warm = torch.randn(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda t: op(t, K, S, P, **kw), (warm,), fast_mode=False)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, size, size, dtype=torch.float64, generator=gen, requires_grad=True)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        torch.autograd.gradcheck(lambda t: op(t, K, S, P, **kw), (x,), fast_mode=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    print("symjac.verify at 1x1x256x256, float64, with forward (FD oracle on):")
    for mode in ("avg", "max"):
        seconds, report, _ = run_symjac(mode, 256)
        _, _, peak = run_symjac(mode, 256, trace=True)
        s = report.stats
        print(f"  {mode}: {seconds:.2f} s, backward calls {s['backward_calls']}, forward calls {s['forward_calls']}, "
              f"peak {peak:.0f} MiB, ok={report.ok}")
        if not report.ok:
            print("   ", report.summary())
    print("\nside by side (seconds; one cold symjac run each, on the NumPy impl and on PyTorch's op;"
          " benchmarks/cliffs.py takes medians of warm runs):")
    print(f"  {'mode':4} {'HxW':>6} {'symjac':>8} {'on torch':>9} {'gradcheck':>10} {'ratio':>7} {'torch':>7}")
    for mode in ("avg", "max"):
        for size in (32, 48):
            ours, report, _ = run_symjac(mode, size)
            run_symjac_torch(mode, 4)  # PyTorch's first calls (as run_gradcheck warms at 4x4)
            on_torch = run_symjac_torch(mode, size)
            theirs = run_gradcheck(mode, size)
            ratio = f"{theirs / ours:6.0f}x" if theirs else "   n/a"
            ratio_torch = f"{theirs / on_torch[0]:6.0f}x" if theirs and on_torch else "   n/a"
            tt = f"{on_torch[0]:9.3f}" if on_torch else "      n/a"
            tg = f"{theirs:10.2f}" if theirs else "       n/a"
            print(f"  {mode:4} {size:>3}x{size:<2} {ours:8.3f} {tt} {tg} {ratio} {ratio_torch}  (symjac ok={report.ok})")


if __name__ == "__main__":
    main()
