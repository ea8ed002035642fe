"""An independent NumPy RoI Align / RoI pooling, written from torchvision's kernels as documented
(``torchvision/csrc/ops/cpu/roi_align_kernel.cpp``, ``roi_pool_kernel.cpp``: the same loops, the
same order of float operations, in the input's dtype), with switches that plant the defects the
issue names. Nothing here reads symjac's tables: it is the oracle symjac's exact values are
tested against, and the implementation object symjac verifies.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _type(x: np.ndarray) -> type:
    """The arithmetic of the kernel: x's float dtype, or exact ``Fraction`` for an object array
    (the kernel's own loops run in exact rational arithmetic: its exact semantics)."""
    return Fraction if x.dtype == object else x.dtype.type


def _bilinear(plane: np.ndarray, y: float, x: float, t: type, low_clamp: float = -1.0,
              high_strict: bool = True) -> list[tuple[int, int, float]]:
    """torchvision's ``bilinear_interpolate`` as (row, col, weight) corners; [] outside.

    ``low_clamp`` and ``high_strict`` plant a wrong clamp: 0 instead of -1 below, ``>=`` instead
    of ``>`` above."""
    height, width = plane.shape
    outside_high = (y >= height or x >= width) if not high_strict else (y > height or x > width)
    if y < low_clamp or x < low_clamp or outside_high:
        return []
    y, x = t(max(y, 0.0)), t(max(x, 0.0))
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = t(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = t(x_low)
    else:
        x_high = x_low + 1
    ly, lx = t(y - t(y_low)), t(x - t(x_low))
    hy, hx = t(t(1) - ly), t(t(1) - lx)
    return [(y_low, x_low, t(hy * hx)), (y_low, x_high, t(hy * lx)), (y_high, x_low, t(ly * hx)),
            (y_high, x_high, t(ly * lx))]


def _align_bins(roi: np.ndarray, out: tuple[int, int], scale: float, ratio: int, aligned: bool, t: type,
                offset_missing: bool = False, grid_floor: bool = False):
    """Per box: start, bin sizes, grids and the count, as torchvision computes them in dtype t."""
    offset = t(0.5) if aligned and not offset_missing else t(0.0)
    start_w, start_h = t(t(roi[1]) * t(scale) - offset), t(t(roi[2]) * t(scale) - offset)
    end_w, end_h = t(t(roi[3]) * t(scale) - offset), t(t(roi[4]) * t(scale) - offset)
    roi_w, roi_h = t(end_w - start_w), t(end_h - start_h)
    if not aligned:
        roi_w, roi_h = max(roi_w, t(1)), max(roi_h, t(1))
    bin_h, bin_w = t(roi_h / t(out[0])), t(roi_w / t(out[1]))
    rounding = math.floor if grid_floor else math.ceil
    grid_h = ratio if ratio > 0 else int(rounding(roi_h / t(out[0])))
    grid_w = ratio if ratio > 0 else int(rounding(roi_w / t(out[1])))
    count = max(grid_h * grid_w, 1)
    return start_h, start_w, bin_h, bin_w, grid_h, grid_w, count


def _samples(roi, out, scale, ratio, aligned, t, ph, pw, **bins_kw):
    start_h, start_w, bin_h, bin_w, grid_h, grid_w, count = _align_bins(roi, out, scale, ratio, aligned, t, **bins_kw)
    for iy in range(grid_h):
        y = t(t(start_h + t(ph) * bin_h) + t(t(t(iy + 0.5) * bin_h) / t(grid_h)))
        for ix in range(grid_w):
            x = t(t(start_w + t(pw) * bin_w) + t(t(t(ix + 0.5) * bin_w) / t(grid_w)))
            yield y, x, count


def align_points(x: np.ndarray, spec, t: type):
    """RoI Align's sample points as ONNX Runtime's max mode (and a kernel's backward) walks them: per
    output cell ``(k, c, ph, pw)``, the box's batch item ``n`` and each sample point's bilinear corners
    ``(row, col, weight)`` in order (a point outside the map: four corners of weight 0 at cell (0, 0)).
    ``spec`` is a ``symjac.RoiAlign``; ``t`` the arithmetic (x's dtype, or ``Fraction``)."""
    rois, out = spec.rois(), spec.output_size
    for k, roi in enumerate(rois):
        n = int(roi[0])
        for c in range(x.shape[1]):
            plane = x[n, c]
            for ph in range(out[0]):
                for pw in range(out[1]):
                    points = [_bilinear(plane, yy, xx, t) or [(0, 0, t(0))] * 4
                              for yy, xx, _ in _samples(roi, out, float(spec.spatial_scale), spec.sampling_ratio,
                                                        spec.aligned, t, ph, pw)]
                    yield (k, c, ph, pw), n, points


def roi_align_forward(x: np.ndarray, rois: np.ndarray, out: tuple[int, int], scale: float = 1.0, ratio: int = -1,
                      aligned: bool = False, *, offset_missing: bool = False, low_clamp: float = -1.0,
                      high_strict: bool = True, ignore_scale: bool = False) -> np.ndarray:
    """torchvision ``roi_align`` forward on a (N, C, H, W) map: (K, C, out_h, out_w) in x's dtype."""
    t = _type(x)
    scale = 1.0 if ignore_scale else scale
    y = np.zeros((rois.shape[0], x.shape[1]) + tuple(out), dtype=x.dtype)
    for k, roi in enumerate(rois):
        for c in range(x.shape[1]):
            plane = x[int(roi[0]), c]
            for ph in range(out[0]):
                for pw in range(out[1]):
                    acc = t(0)
                    count = _align_bins(roi, out, scale, ratio, aligned, t, offset_missing=offset_missing)[-1]
                    for yy, xx, _ in _samples(roi, out, scale, ratio, aligned, t, ph, pw,
                                              offset_missing=offset_missing):
                        for r, col, w in _bilinear(plane, yy, xx, t, low_clamp, high_strict):
                            acc = t(acc + t(w * plane[r, col]))
                    y[k, c, ph, pw] = t(acc / t(count))
    return y


class RoiAlignBackward:
    """torchvision ``roi_align`` backward: ``dx`` of a (N, C, H, W) map. ``stale`` plants a buffer
    that is never zeroed (each call accumulates into the last one's result); ``grid_floor`` a
    bin count that differs from the forward's (floor instead of ceil for the adaptive grid)."""

    def __init__(self, rois: np.ndarray, out: tuple[int, int], scale: float = 1.0, ratio: int = -1,
                 aligned: bool = False, *, stale: bool = False, grid_floor: bool = False, offset_missing: bool = False,
                 low_clamp: float = -1.0, high_strict: bool = True, ignore_scale: bool = False) -> None:
        self.args = (rois, out, 1.0 if ignore_scale else scale, ratio, aligned)
        self.stale, self.grid_floor, self.offset_missing = stale, grid_floor, offset_missing
        self.clamp = (low_clamp, high_strict)
        self.buffer: np.ndarray | None = None

    def __call__(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        rois, out, scale, ratio, aligned = self.args
        t = _type(x)
        if self.stale and self.buffer is not None and self.buffer.shape == x.shape:
            dx = self.buffer
        else:
            dx = np.zeros_like(x) if x.dtype != object else np.full(x.shape, Fraction(0), dtype=object)
        for k, roi in enumerate(rois):
            for c in range(x.shape[1]):
                n = int(roi[0])
                for ph in range(out[0]):
                    for pw in range(out[1]):
                        for yy, xx, count in _samples(roi, out, scale, ratio, aligned, t, ph, pw,
                                                      offset_missing=self.offset_missing, grid_floor=self.grid_floor):
                            g = t(dy[k, c, ph, pw] / t(count))
                            for r, col, w in _bilinear(x[n, c], yy, xx, t, *self.clamp):
                                dx[n, c, r, col] = t(dx[n, c, r, col] + t(g * w))
        self.buffer = dx
        return dx.copy() if self.stale else dx


def roi_pool_forward(x: np.ndarray, rois: np.ndarray, out: tuple[int, int], scale: float = 1.0,
                     *, ignore_scale: bool = False, half_even: bool = False, end_floor: bool = False,
                     sentinel_scan: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """torchvision ``roi_pool`` forward: (output, argmax), argmax a flat H*W index or -1.
    ``half_even`` plants NumPy's rounding (half to even) for C's; ``end_floor`` a bin end rounded down.

    A bin's scan is NumPy's ``argmax`` (the first maximum; the first NaN where one is: NaN wins),
    which equals torchvision's at finite values above ``-FLT_MAX``. ``sentinel_scan`` runs the
    kernel's own loop instead: ``maxval = -FLT_MAX`` (float32's, in either dtype), ``argmax = -1``,
    a cell taken when ``x > maxval`` (NaN never; -inf and values below ``-FLT_MAX`` never)."""
    scale = 1.0 if ignore_scale else scale
    _round = _round_half_even if half_even else _round_away
    _ceil = math.floor if end_floor else math.ceil
    _, channels, height, width = x.shape
    y = np.zeros((rois.shape[0], channels) + tuple(out), dtype=x.dtype)
    arg = np.full(y.shape, -1, dtype=np.int64)
    for k, roi in enumerate(rois):
        sw, sh = _round(roi[1] * scale), _round(roi[2] * scale)
        ew, eh = _round(roi[3] * scale), _round(roi[4] * scale)
        roi_w, roi_h = max(ew - sw + 1, 1), max(eh - sh + 1, 1)
        bin_h, bin_w = np.float32(roi_h) / np.float32(out[0]), np.float32(roi_w) / np.float32(out[1])
        for ph in range(out[0]):
            for pw in range(out[1]):
                hs = min(max(int(math.floor(ph * bin_h)) + sh, 0), height)
                he = min(max(int(_ceil((ph + 1) * bin_h)) + sh, 0), height)
                ws = min(max(int(math.floor(pw * bin_w)) + sw, 0), width)
                we = min(max(int(_ceil((pw + 1) * bin_w)) + sw, 0), width)
                for c in range(channels):
                    if he <= hs or we <= ws:
                        continue
                    plane = x[int(roi[0]), c, hs:he, ws:we]
                    if sentinel_scan:
                        y[k, c, ph, pw], i = _sentinel_scan(plane.reshape(-1))
                        if i < 0:
                            continue
                    else:
                        i = int(np.argmax(plane))  # the first maximum in row-major order (strict >)
                        y[k, c, ph, pw] = plane.reshape(-1)[i]
                    r, col = divmod(i, we - ws)
                    arg[k, c, ph, pw] = (hs + r) * width + ws + col
    return y, arg


def _sentinel_scan(cells: np.ndarray) -> tuple[float, int]:
    """torchvision's loop over a non-empty bin: ``T maxval = -FLT_MAX; int maxidx = -1;
    for (...) if (input[i] > maxval) { maxval = input[i]; maxidx = i; }``."""
    maxval, maxidx = cells.dtype.type(-np.finfo(np.float32).max), -1
    for i, v in enumerate(cells):
        if v > maxval:
            maxval, maxidx = v, i
    return maxval, maxidx


def _round_away(v: float) -> int:
    """C's ``round``: half away from zero."""
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def _round_half_even(v: float) -> int:
    return int(np.round(v))


class RoiPoolBackward:
    """torchvision ``roi_pool`` backward: dy to each bin's argmax (``stale``: a buffer never zeroed)."""

    def __init__(self, rois: np.ndarray, out: tuple[int, int], scale: float = 1.0, *, stale: bool = False,
                 **kw) -> None:
        self.args, self.kw, self.stale, self.buffer = (rois, out, scale), kw, stale, None

    def __call__(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        dx = roi_pool_backward(x, dy, *self.args, **self.kw)
        if self.stale and self.buffer is not None and self.buffer.shape == dx.shape:
            dx = dx + self.buffer
        self.buffer = dx
        return dx.copy()


def roi_pool_backward(x: np.ndarray, dy: np.ndarray, rois: np.ndarray, out: tuple[int, int], scale: float = 1.0,
                      **kw) -> np.ndarray:
    """torchvision ``roi_pool`` backward: dy to each bin's argmax."""
    _, arg = roi_pool_forward(x, rois, out, scale, **kw)
    dx = np.zeros_like(x)
    height, width = x.shape[2:]
    for k, c, ph, pw in np.ndindex(*arg.shape):
        a = arg[k, c, ph, pw]
        if a >= 0:
            n = int(rois[k, 0])
            dx[n, c, a // width, a % width] += dy[k, c, ph, pw]
    return dx
