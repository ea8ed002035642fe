"""The mutant suite's independent NumPy pooling (no symjac): one home for the test suite
(tests/test_verify.py) and the mutation campaign (benchmarks/campaign.py).

:class:`NumpyPool` implements max/avg (adaptive, global) pooling by the definitions;
``bug`` names one deliberate defect (:data:`BUGS`). Its bug-free version is checked
against PyTorch in tests/test_verify.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

import symjac

#: Every ``NumpyPool.bug``: (name, the modes it applies to).
BUGS = {
    "swap_stride": ("avg", "max"), "swap_dilation": ("avg", "max"), "ceil_floor": ("avg", "max"),
    "fwd_ceil_keep": ("avg", "max"), "swap_pad_sides": ("avg", "max"), "divisor_kk": ("avg",),
    "fwd_divisor_kk": ("avg",), "fwd_off": ("avg", "max"), "raise": ("avg", "max"), "assign": ("avg",),
    "assign_nonzero": ("avg",), "tie_all": ("max",), "nchw_mixup": ("avg", "max"), "mutate_dy": ("avg", "max"),
    "mutate_x": ("avg", "max"), "wrong_shape": ("avg", "max"), "nan": ("avg", "max"), "float64": ("avg", "max"),
    "noise": ("avg", "max"), "pad_zero": ("max",), "argmax_f16": ("max",), "acc_f32": ("avg",),
}


def same_pads(length: int, k: int, s: int, d: int, lower: bool) -> tuple[int, int]:
    """TF/Keras SAME (SAME_UPPER: extra pad cell at the end) or ONNX SAME_LOWER.

    out = ceil(L / s); total = max((out - 1) * s + extent - L, 0); low = total // 2.
    """
    extent = d * (k - 1) + 1
    out = -(-length // s)
    total = max((out - 1) * s + extent - length, 0)
    small, large = total // 2, total - total // 2
    return (large, small) if lower else (small, large)


def pooled_length(length: int, k: int, s: int, d: int, lo: int, hi: int, ceil_mode: bool, drop: bool = True) -> int:
    """PyTorch's pooling_output_shape: floor/ceil((L + lo + hi - extent) / s) + 1; in
    ceil mode a last window starting in the high padding is dropped."""
    span = length + lo + hi - (d * (k - 1) + 1)
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and drop and (out - 1) * s >= length + lo:
        out -= 1
    return out


@dataclasses.dataclass
class NumpyPool:
    """Max/avg (adaptive, global) pooling forward and backward, by the definitions.

    Arrays are (N, C, *spatial), or (N, *spatial, C) when ``channels_last``. Arithmetic
    is done in the input's dtype. Max pooling routes to the first maximal cell in
    row-major window order (PyTorch). ``bug`` names one deliberate defect.
    """

    mode: str
    kernel: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: object = "valid"  # "valid" | "same" | "same_lower" | ((lo, hi), ...)
    dilation: tuple[int, ...] = ()
    ceil_mode: bool = False
    divisor: object = "exclude_pad"  # "exclude_pad" | "include_pad" | int
    output_size: tuple[int, ...] | None = None  # adaptive (global: all ones)
    channels_last: bool = False
    tie: str = "first"  # max pooling at ties: "first", "last" or "split" (1/|I| each)
    bug: str | None = None

    # -- geometry --------------------------------------------------------------------
    def _pads(self, axis: int, length: int, stride: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, int]:
        if self.padding == "valid":
            return 0, 0
        if self.padding in ("same", "same_lower"):
            return same_pads(length, self.kernel[axis], stride[axis], dilation[axis], self.padding == "same_lower")
        return tuple(self.padding[axis])  # type: ignore[index,return-value]

    def _geometry(self, role: str):
        s, d = tuple(self.stride), tuple(self.dilation)
        if role == "backward" and self.bug == "swap_stride":
            s = s[::-1]
        if role == "backward" and self.bug == "swap_dilation":
            d = d[::-1]
        return s, d

    def out_spatial(self, spatial: tuple[int, ...], role: str = "forward") -> tuple[int, ...]:
        if self.output_size is not None:
            return tuple(self.output_size)
        s, d = self._geometry(role)
        ceil = self.ceil_mode and not (role == "backward" and self.bug == "ceil_floor")
        drop = not (role == "forward" and self.bug == "fwd_ceil_keep")
        out = []
        for a, length in enumerate(spatial):
            lo, hi = self._pads(a, length, s, d)
            out.append(pooled_length(length, self.kernel[a], s[a], d[a], lo, hi, ceil, drop))
        return tuple(out)

    def window(self, pos: tuple[int, ...], spatial: tuple[int, ...], role: str = "forward"):
        """(valid cells in row-major slot order, number of cells include_pad counts)."""
        per_axis, counted = [], 1
        if self.output_size is not None:
            for p, o, length in zip(pos, self.output_size, spatial):
                lo, hi = (p * length) // o, -(-(p + 1) * length // o)  # [floor(pL/o), ceil((p+1)L/o))
                per_axis.append(list(range(lo, hi)))
                counted *= hi - lo
            return list(itertools.product(*per_axis)), counted
        s, d = self._geometry(role)
        for a, (p, length) in enumerate(zip(pos, spatial)):
            lo, hi = self._pads(a, length, s, d)
            if role == "backward" and self.bug == "swap_pad_sides":
                lo, hi = hi, lo
            taps = [p * s[a] - lo + j * d[a] for j in range(self.kernel[a])]
            per_axis.append([t for t in taps if 0 <= t < length])
            counted *= sum(1 for t in taps if -lo <= t < length + hi)
        return list(itertools.product(*per_axis)), counted

    def _divisor(self, cells, counted, role: str) -> int:
        if role in self.bug_roles("divisor_kk"):
            return math.prod(self.kernel)
        if self.divisor == "exclude_pad" or self.output_size is not None:
            return len(cells)
        if self.divisor == "include_pad":
            return counted
        return int(self.divisor)  # type: ignore[call-overload]

    def bug_roles(self, name: str) -> tuple[str, ...]:
        if self.bug == name:
            return ("backward",)
        if self.bug == "fwd_" + name:
            return ("forward",)
        return ()

    def _acc_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype averages accumulate in: the input's, or float32 for the ``acc_f32`` bug."""
        return np.dtype(np.float32) if self.bug == "acc_f32" and self.mode == "avg" else np.dtype(dtype)

    # -- operators ---------------------------------------------------------------------
    def _to_cf(self, a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, -1, 1) if self.channels_last else a

    def _from_cf(self, a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, 1, -1) if self.channels_last else a

    def forward(self, x: np.ndarray) -> np.ndarray:
        xc = self._to_cf(x)
        lead, spatial = xc.shape[:2], xc.shape[2:]
        out_sp = self.out_spatial(spatial, "forward")
        y = np.zeros(lead + out_sp, dtype=x.dtype)
        for pos in np.ndindex(*out_sp):
            cells, counted = self.window(pos, spatial)
            if not cells:  # only the fwd_ceil_keep mutant builds a window of pure padding
                continue
            vals = np.stack([xc[(slice(None), slice(None)) + c] for c in cells], axis=-1)  # (N, C, cells)
            if self.mode == "max":
                top = vals.max(axis=-1)
                if self.bug == "pad_zero" and counted > len(cells):  # padding read as 0, not -inf
                    top = np.maximum(top, x.dtype.type(0))
                y[(slice(None), slice(None)) + pos] = top
            else:
                acc_dt = self._acc_dtype(x.dtype)
                acc = vals[..., 0].astype(acc_dt)
                for i in range(1, vals.shape[-1]):
                    acc = acc + vals[..., i].astype(acc_dt)
                y[(slice(None), slice(None)) + pos] = acc / acc_dt.type(self._divisor(cells, counted, "forward"))
        if self.bug == "fwd_off":
            y.flat[0] += 1  # forward off by one at its first output; constant, so d/dx unchanged
        return self._from_cf(y)

    def backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        bug = self.bug
        if bug == "raise":
            raise RuntimeError("deliberate failure")
        xc, dyc = self._to_cf(x), self._to_cf(dy)
        spatial = xc.shape[2:]
        acc_dt = self._acc_dtype(x.dtype)
        dx = np.zeros(xc.shape, dtype=acc_dt)
        positions = np.ndindex(*dyc.shape[2:])
        if bug == "ceil_floor":
            positions = np.ndindex(*self.out_spatial(spatial, "backward"))
        z = (slice(None), slice(None))
        for pos in positions:
            cells, counted = self.window(pos, spatial, "backward")
            if not cells:
                continue
            g = dyc[z + pos]  # (N, C)
            if self.mode == "avg":
                share = g.astype(acc_dt) / acc_dt.type(self._divisor(cells, counted, "backward"))
                for c in cells:
                    if bug == "assign":  # overlap accumulation by "=" instead of "+="
                        dx[z + c] = share
                    elif bug == "assign_nonzero":  # "=" but only where this window has gradient
                        dx[z + c] = np.where(g != 0, share, dx[z + c])
                    else:
                        dx[z + c] += share
            else:
                vals = np.stack([xc[z + c] for c in cells], axis=-1)
                top = vals.max(axis=-1, keepdims=True)  # NaN where the window holds one: NaN is its maximum
                tied = (vals == top) | (np.isnan(vals) & np.isnan(top))
                share = g
                if bug == "tie_all":  # every cell equal to the maximum gets the full gradient
                    chosen = tied
                elif self.tie == "last":
                    chosen = np.arange(len(cells)) == (len(cells) - 1 - tied[..., ::-1].argmax(axis=-1))[..., None]
                elif self.tie == "split":
                    chosen, share = tied, g / tied.sum(axis=-1).astype(x.dtype)
                else:  # first maximal cell (np.argmax returns the first occurrence)
                    key = vals.astype(np.float16) if bug == "argmax_f16" else vals  # argmax of a float16 copy
                    chosen = np.arange(len(cells)) == key.argmax(axis=-1)[..., None]
                    if bug == "pad_zero" and counted > len(cells):  # a pad 0 above every cell takes it
                        chosen = chosen & (vals.max(axis=-1) >= 0)[..., None]
                for i, c in enumerate(cells):
                    dx[z + c] += np.where(chosen[..., i], share, x.dtype.type(0))
        dx = dx.astype(x.dtype)
        if bug == "nchw_mixup":  # NHWC input treated as NCHW on the way out: reshape, not transpose
            out = dx.reshape(x.shape)
        else:
            out = self._from_cf(dx)
        if bug == "mutate_dy":
            dy[...] = 0  # "frees" the upstream gradient buffer in place
        if bug == "mutate_x":
            x += 1
        if bug == "wrong_shape":
            return out.reshape(-1)
        if bug == "nan":
            out = out.copy()
            out.flat[out.size // 2] = np.nan
        if bug == "float64":
            return out.astype(np.float64)
        if bug == "noise":  # +-1 ULP on a data-independent random subset of nonzero entries
            rng = np.random.default_rng(next(_NOISE_SEEDS))
            flip = rng.integers(0, 2, size=out.shape).astype(bool) & (out != 0)
            out = np.where(flip, np.nextafter(out, np.inf), out).astype(x.dtype)
        return out


_NOISE_SEEDS = itertools.count(1)


def ref_shape(pool: NumpyPool, n: int, c: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
    return (n, *spatial, c) if pool.channels_last else (n, c, *spatial)


def spec_for(pool: NumpyPool) -> symjac.Pool | symjac.AdaptivePool | symjac.GlobalPool:
    """The symjac spec a bug-free NumpyPool implements."""
    layout = "channels_last" if pool.channels_last else "channels_first"
    if pool.output_size is not None:
        if all(o == 1 for o in pool.output_size) and pool.mode == "avg":
            return symjac.GlobalPool(pool.mode, rank=len(pool.output_size), layout=layout)
        return symjac.AdaptivePool(pool.mode, tuple(pool.output_size), layout=layout)
    return symjac.Pool(pool.mode, tuple(pool.kernel), stride=tuple(pool.stride), padding=pool.padding,
                       dilation=tuple(pool.dilation), ceil_mode=pool.ceil_mode, divisor=pool.divisor, layout=layout)
