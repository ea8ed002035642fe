"""Each transform's verify time beside the VJP's, in one run (target: <= 1.5x the VJP's).

For average and max 3x3 stride-1 pooling (padding 1, PyTorch style) on 1x1xHxW, and
lp (p = 2) 2x2 stride-1 pooling, vectorised NumPy implementations of every transform
(so the figures are symjac's cost, not a framework's): the backward ``J^T dy``, the
JVP ``J t``, the double backward ``(0 or lp's HVP, J v)`` and a batching rule of the backward
and the JVP (NumPy's own batching: the batch moved to the front, the same vectorised code).
Prints seconds for ``verify(spec, backward=...)``, ``verify(spec, jvp=...)``,
``verify(spec, double_backward=...)`` and ``verify(spec, vmap=...)`` at each size, all at the
same inputs (``families=()``: the main and tie inputs), the best of 5 warm runs (the machine
is shared, and the least disturbed run is the cost), and the ratios to the VJP's; a loss table does the same for ``verify_loss(derivative=...)``
and ``verify_loss(hvp=...)``.

Run: python benchmarks/transforms.py [--sizes 32,64,128]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import symjac

K, P = 3, 1


def windows(xp: np.ndarray, k: int = K) -> np.ndarray:
    return np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(-2, -1))


def pad(a: np.ndarray, value: float = 0.0) -> np.ndarray:
    return np.pad(a, [(0, 0)] * (a.ndim - 2) + [(P, P)] * 2, constant_values=value)


def counts(x: np.ndarray) -> np.ndarray:
    return windows(np.pad(np.ones(x.shape[-2:], x.dtype), P)).sum(axis=(-2, -1))


def avg_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    return windows(pad(dy / counts(x))).sum(axis=(-2, -1))  # 3x3 symmetric stencil


def avg_jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    return windows(pad(t)).sum(axis=(-2, -1)) / counts(x)  # linear: J t = f(t)


def _argmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = windows(pad(x, -np.inf))
    flat = w.reshape(*w.shape[:-2], K * K)
    a = flat.argmax(axis=-1)  # the first maximum, as PyTorch
    h, v = np.indices(x.shape[-2:])
    return h + a // K - P, v + a % K - P


def max_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    r, c = _argmax(x)
    h, w = x.shape[-2:]
    planes = int(np.prod(x.shape[:-2]))  # every leading axis (batch, channels, a vmapped batch) apart
    dx = np.zeros((planes, h * w), dtype=x.dtype)
    np.add.at(dx, (np.arange(planes)[:, None], (r * w + c).reshape(planes, -1)), dy.reshape(planes, -1))
    return dx.reshape(x.shape)


def max_jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    w = windows(pad(x, -np.inf))
    a = w.reshape(*w.shape[:-2], K * K).argmax(axis=-1)  # the first maximum, as max_backward
    wt = windows(pad(t))
    return np.take_along_axis(wt.reshape(*wt.shape[:-2], K * K), a[..., None], axis=-1)[..., 0]


def lp_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    y = np.sqrt((windows(x, 2) ** 2).sum(axis=(-2, -1)))
    g = np.where(y > 0, dy / np.where(y > 0, y, 1), 0)
    gp = np.pad(g, [(0, 0)] * (x.ndim - 2) + [(1, 1)] * 2)
    return x * windows(gp, 2).sum(axis=(-2, -1))


def lp_jvp(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    y = np.sqrt((windows(x, 2) ** 2).sum(axis=(-2, -1)))
    return np.where(y > 0, (windows(x * t, 2)).sum(axis=(-2, -1)) / np.where(y > 0, y, 1), 0)


def lp_double_backward(x: np.ndarray, dy: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p = 2: ∂/∂x_i [x_i Σ_w dy_w / y_w] along v = v_i Σ dy/y - x_i Σ_w dy_w (x_w·v_w) / y_w^3."""
    y = np.sqrt((windows(x, 2) ** 2).sum(axis=(-2, -1)))
    safe = np.where(y > 0, y, 1)
    a = np.where(y > 0, dy / safe, 0)
    b = np.where(y > 0, dy * windows(x * v, 2).sum(axis=(-2, -1)) / safe**3, 0)

    def spread(g: np.ndarray) -> np.ndarray:
        return windows(np.pad(g, [(0, 0)] * (x.ndim - 2) + [(1, 1)] * 2), 2).sum(axis=(-2, -1))

    return v * spread(a) - x * spread(b), lp_jvp(x, v)


CASES: dict[str, tuple[Any, Callable[..., Any], Callable[..., Any], Callable[..., Any]]] = {
    "avg 3x3 s1 p1": (symjac.Pool("avg", kernel=(3, 3), stride=(1, 1), padding=((1, 1), (1, 1))),
                      avg_backward, avg_jvp, lambda x, dy, v: (np.zeros_like(x), avg_jvp(x, v))),
    "max 3x3 s1 p1": (symjac.Pool("max", kernel=(3, 3), stride=(1, 1), padding=((1, 1), (1, 1))),
                      max_backward, max_jvp, lambda x, dy, v: (np.zeros_like(x), max_jvp(x, v))),
    "lp2 2x2 s1": (symjac.Pool("lp", kernel=(2, 2), stride=(1, 1), p=2), lp_backward, lp_jvp, lp_double_backward),
}


def rule(backward: Callable[..., Any], jvp: Callable[..., Any]) -> Callable[[int, int], dict[str, Any]]:
    """A batching rule ``rule(in_axis, out_axis)`` of the backward and the JVP: both vectorised over
    leading axes, so a batch moved to the front is one call."""
    def at(in_axis: int, out_axis: int) -> dict[str, Any]:
        def batched(f: Callable[..., Any]) -> Callable[..., Any]:
            return lambda *arrays: np.moveaxis(f(*(np.moveaxis(a, in_axis, 0) for a in arrays)), 0, out_axis)

        return {"backward": batched(backward), "jvp": batched(jvp)}

    return at


def timed(fn: Callable[..., symjac.Report], *args: Any, repeat: int = 5, **kwargs: Any) -> tuple[float, symjac.Report]:
    fn(*args, **kwargs)  # warm: templates, colourings and plans are cached per geometry, as in a test suite
    times, report = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = fn(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    assert report is not None
    return min(times), report


def pool_table(sizes: list[int]) -> None:
    print(f"{'operator':<15} {'size':>5} {'vjp s':>8} {'jvp s':>8} {'ratio':>6} {'ddx s':>8} {'ratio':>6} "
          f"{'vmap s':>8} {'ratio':>6}  verdicts")
    for name, (spec, backward, jvp, double_backward) in CASES.items():
        for n in sizes:
            shape = (1, 1, n, n)
            tv, rv = timed(symjac.verify, spec, backward=backward, input_shape=shape, families=())
            tj, rj = timed(symjac.verify, spec, jvp=jvp, input_shape=shape, families=())
            td, rd = timed(symjac.verify, spec, double_backward=double_backward, input_shape=shape, families=())
            tb, rb = timed(symjac.verify, spec, vmap=rule(backward, jvp), input_shape=shape, families=())
            verdicts = "".join("ok " if r.ok else "FAIL " for r in (rv, rj, rd, rb))
            print(f"{name:<15} {n:>5} {tv:>8.3f} {tj:>8.3f} {tj / tv:>6.2f} {td:>8.3f} {td / tv:>6.2f} "
                  f"{tb:>8.3f} {tb / tv:>6.2f}  {verdicts}")


def loss_table() -> None:
    print(f"\n{'loss':<28} {'derivative s':>12} {'hvp s':>8} {'ratio':>6}  verdicts")
    rng = np.random.default_rng(0)
    z = rng.integers(-8, 9, size=(16, 10)) / 4
    labels = rng.integers(0, 10, size=16)
    onehot = np.eye(10)[labels]
    for loss, pred, label, d, h in [
        (symjac.Loss("mse", scale=8), z, onehot, lambda p, y: 8 * 2 * (p - y) / p.size,
         lambda p, y, v: 8 * 2 * v / p.size),
        (symjac.Loss("softmax_ce", labels="indices"), z, labels, None, None),
    ]:
        if d is None:  # softmax cross-entropy with class indices, mean over rows
            def d(p: np.ndarray, y: np.ndarray) -> np.ndarray:
                e = np.exp(p - p.max(axis=1, keepdims=True))
                s = e / e.sum(axis=1, keepdims=True)
                return (s - np.eye(p.shape[1])[y]) / p.shape[0]

            def h(p: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
                e = np.exp(p - p.max(axis=1, keepdims=True))
                s = e / e.sum(axis=1, keepdims=True)
                return s * (v - (s * v).sum(axis=1, keepdims=True)) / p.shape[0]
        td, rd = timed(symjac.verify_loss, loss, derivative=d, pred=pred, label=label)
        th, rh = timed(symjac.verify_loss, loss, hvp=h, pred=pred, label=label)
        verdicts = "".join("ok " if r.ok else "FAIL " for r in (rd, rh))
        print(f"{repr(loss)[:28]:<28} {td:>12.3f} {th:>8.3f} {th / td:>6.2f}  {verdicts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="32,64,128")
    args = parser.parse_args()
    pool_table([int(s) for s in args.sizes.split(",")])
    loss_table()


if __name__ == "__main__":
    main()
