"""Seed 001's per-precision table, reproduced on a small CNN: bifurcation vs compensation zones.

Model: scikit-learn's bundled digits (1797 images, 8x8, integer intensities 0..16,
shipped inside the package: no download), x = intensity/16 (exact in every float
dtype); a 3x3 valid convolution with 4 output channels, seeded float32 weights and
biases; ReLU; 2x2 max pooling (stride 2): 6x6 -> 3x3 per channel.

The same computation runs exactly (integers over one common denominator: every
float32 weight is a dyadic rational) and in float16, float32 and float64 (each
addition and product rounded to the dtype, in a fixed order). symjac's tie census
classifies every pooling window of the float run against the exact one:
exact tie (bifurcation zone), rounding tie (compensation zone), broken tie.

Backprop: an upstream gradient dy at the pool output (seeded nonzero multiples of
1/8, the same for every precision), the max pooling's β = 0 (PyTorch: first
maximum) and β = 1 (split) Jacobians, ReLU' = 1[z > 0] of the float run (PyTorch's
choice at 0), then the convolution-weight gradient dW = Σ_pos dz·patch. The
difference dW_β=1 − dW_β=0 is computed exactly from the census's exact
``(J_1 − J_0)^T dy``; a batch "differs" when it is not zero. The same difference
restricted to exact-tie windows and to rounding-tie windows attributes it to the
bifurcation or the compensation zone.

Per precision and batch size (32, 128; the shuffled images cut into full batches),
the script prints the fraction of batches with >= 1 exact tie, >= 1 rounding tie,
where backprop differs (any zone, bifurcation, compensation), and writes a PNG
plot of the fractions against precision (``--plot``; needs matplotlib).

``--blocks 2`` runs conv(same) -> ReLU -> pool twice (8x8 -> 4x4 -> 2x2) and prints
the tie zones and pool-input gradient changes of each pooling layer.

Run: python benchmarks/census.py [--plot census.png] [--channels 4] [--seed 0] [--blocks 2]
Needs scikit-learn (``pip install symjac[census]``).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import symjac
from symjac._exact import ExactArray

DTYPES = (np.float16, np.float32, np.float64)
BATCHES = (32, 128)
SPEC = symjac.Pool("max", 2)


def load_digits(seed: int) -> np.ndarray:
    """(1797, 1, 8, 8) integer intensities 0..16, shuffled with ``seed``."""
    from sklearn.datasets import load_digits as sk_digits

    images = sk_digits().images.astype(np.int64)
    return images[np.random.default_rng(seed).permutation(len(images))][:, None]


def weights(channels: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded float32 conv weights (C, 3, 3) ~ N(0, 1/9) and biases ~ N(0, 1/100)."""
    rng = np.random.default_rng(seed + 1)
    w = (rng.standard_normal((channels, 3, 3)) / 3).astype(np.float32)
    b = (rng.standard_normal(channels) / 10).astype(np.float32)
    return w, b


def taps() -> list[tuple[int, int]]:
    return [(i, j) for i in range(3) for j in range(3)]


def conv_exact(k: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[ExactArray, np.ndarray]:
    """Exact z = b + Σ w·(k/16) as integers over one denominator; returns (z, patches-free num)."""
    ew, eb = ExactArray.from_any(w.astype(np.float64)), ExactArray.from_any(b.astype(np.float64))
    den = math.lcm(ew.den * 16, eb.den)
    kind = np.int64 if int(np.abs(ew.num).max()) * (den // (ew.den * 16)) * 16 * 9 < 2**62 else object
    n, h = k.shape[0], k.shape[-1] - 2
    z = np.zeros((n, w.shape[0], h, h), dtype=kind)
    z += (eb.num.astype(kind) * (den // eb.den))[None, :, None, None]
    wn = ew.num.astype(kind) * (den // (ew.den * 16))
    for i, j in taps():
        z += wn[None, :, i, j, None, None] * k[:, :, i:i + h, j:j + h].astype(kind)
    return ExactArray(z, den), k


def conv_float(k: np.ndarray, w: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    """z in ``dtype``: bias, then the 9 taps in row-major order, every operation rounded."""
    x = (k / 16).astype(dtype)
    wd, bd = w.astype(dtype), b.astype(dtype)
    h = k.shape[-1] - 2
    z = np.broadcast_to(bd[None, :, None, None], (k.shape[0], w.shape[0], h, h)).astype(dtype)
    for i, j in taps():
        z = z + wd[None, :, i, j, None, None] * x[:, :, i:i + h, j:j + h]
    return z


def dw_differs(diff: ExactArray, z: np.ndarray, k: np.ndarray, batch: int) -> np.ndarray:
    """Per batch: is the exact dW difference Σ_pos (diff ⊙ 1[z > 0]) · x_patch nonzero?"""
    dz = np.where(z > 0, diff.num, 0).astype(object if diff.num.dtype == object else np.int64)
    h = z.shape[-1]
    n_batches = z.shape[0] // batch
    out = np.zeros(n_batches, dtype=bool)
    for i, j in taps():
        patch = k[:, :, i:i + h, j:j + h]                                   # (N, 1, h, h)
        per_item = (dz * patch).sum(axis=(2, 3))                            # (N, C): exact integers
        per_batch = per_item[: n_batches * batch].reshape(n_batches, batch, -1).sum(axis=1)
        out |= (per_batch != 0).any(axis=1)
    return out


def _batch_any(items: tuple[int, ...], n_batches: int, batch: int) -> float:
    """Fraction of batches holding at least one of ``items``."""
    hit = np.zeros(n_batches, dtype=bool)
    for i in items:
        if i < n_batches * batch:
            hit[i // batch] = True
    return float(hit.mean())


def measure(channels: int, seed: int) -> dict:
    k = load_digits(seed)
    w, b = weights(channels, seed)
    z_exact, _ = conv_exact(k, w, b)
    ref = ExactArray(np.maximum(z_exact.num, 0), z_exact.den)            # exact ReLU
    rng = np.random.default_rng(seed + 2)
    out_shape = (k.shape[0], channels, 3, 3)
    dy = (rng.integers(1, 9, size=out_shape) * rng.choice([-1, 1], size=out_shape)) / 8
    results: dict = {}
    for dtype in DTYPES:
        z = conv_float(k, w, b, dtype)
        r = np.maximum(z, dtype(0))
        census = symjac.tie_census(SPEC, r, ref, dy=dy)
        kinds = census.kinds
        window_max = ref.num.reshape(*out_shape[:2], 3, 2, 3, 2).max(axis=(3, 5))   # exact max per window
        zone_diff = {}
        for zone, kind in (("bifurcation", 1), ("compensation", 2)):
            zone_diff[zone] = symjac.tie_census(SPEC, r, ref, dy=np.where(kinds == kind, dy, 0)).difference
        per_item = census.per_item
        for batch in BATCHES:
            nb = k.shape[0] // batch
            counts = per_item[: nb * batch].reshape(nb, batch, -1).sum(axis=1)
            results[np.dtype(dtype).name, batch] = {
                "batches": nb,
                "exact_tie": float((counts[:, 1] > 0).mean()),
                "rounding_tie": float((counts[:, 2] > 0).mean()),
                "broken_tie": float((counts[:, 3] > 0).mean()),
                "differs": float(dw_differs(census.difference, z, k, batch).mean()),
                "differs_bifurcation": float(dw_differs(zone_diff["bifurcation"], z, k, batch).mean()),
                "differs_compensation": float(dw_differs(zone_diff["compensation"], z, k, batch).mean()),
                "dx_differs": _batch_any(census.differs["bifurcation"] + census.differs["compensation"], nb, batch),
                "dx_differs_compensation": _batch_any(census.differs["compensation"], nb, batch),
                "windows": {zone: int(n) for zone, n in census.totals.items()},
                "exact_ties_at_zero": int(((kinds == 1) & (window_max == 0)).sum()),
            }
    return results


# -- two blocks: conv(same) -> ReLU -> pool -> conv(same) -> ReLU -> pool, 8x8 -> 4x4 -> 2x2 --------------


def conv_same_exact(x: ExactArray, w: np.ndarray, b: np.ndarray) -> ExactArray:
    """Exact z = b + Σ_{c, tap} w·x with zero padding 1 (Python ints: no overflow)."""
    ew, eb = ExactArray.from_any(w.astype(np.float64)), ExactArray.from_any(b.astype(np.float64))
    den = math.lcm(ew.den * x.den, eb.den)
    h = x.shape[-1]
    xn = np.zeros(x.shape[:2] + (h + 2, h + 2), dtype=object)   # Python ints (np.pad would give int64)
    xn[:, :, 1:-1, 1:-1] = [[[[int(v) for v in row] for row in c] for c in item] for item in x.num]
    z = np.zeros((x.shape[0], w.shape[0], h, h), dtype=object)
    z += (eb.num.astype(object) * (den // eb.den))[None, :, None, None]
    wn = ew.num.astype(object) * (den // (ew.den * x.den))
    for i, j in taps():
        for o in range(w.shape[0]):
            for c in range(w.shape[1]):
                z[:, o] += wn[o, c, i, j] * xn[:, c, i:i + h, j:j + h]
    return ExactArray(z, den)


def conv_same_float(x: np.ndarray, w: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    """The same in ``dtype``: bias, then per tap and input channel one product and one sum."""
    wd, bd = w.astype(dtype), b.astype(dtype)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = x.shape[-1]
    z = np.broadcast_to(bd[None, :, None, None], (x.shape[0], w.shape[0], h, h)).astype(dtype)
    for i, j in taps():
        for c in range(w.shape[1]):
            z = z + wd[None, :, c, i, j, None, None] * xp[:, c:c + 1, i:i + h, j:j + h]
    return z


def pool_max(a: np.ndarray) -> np.ndarray:
    n, c, h, _ = a.shape
    return a.reshape(n, c, h // 2, 2, h // 2, 2).max(axis=(3, 5))


def measure_two_blocks(channels: int, seed: int) -> dict:
    """Per pooling layer, precision and batch size: tie zones and pool-input gradient changes."""
    k = load_digits(seed)
    rng = np.random.default_rng(seed + 3)
    w1 = (rng.standard_normal((channels, 1, 3, 3)) / 3).astype(np.float32)
    w2 = (rng.standard_normal((channels, channels, 3, 3)) / (3 * channels ** 0.5)).astype(np.float32)
    b1, b2 = ((rng.standard_normal((2, channels)) / 10).astype(np.float32))
    r1 = conv_same_exact(ExactArray(k, 16), w1, b1)
    r1 = ExactArray(np.maximum(r1.num, 0), r1.den)
    p1 = ExactArray(pool_max(r1.num), r1.den)
    r2 = conv_same_exact(p1, w2, b2)
    r2 = ExactArray(np.maximum(r2.num, 0), r2.den)
    results: dict = {}
    for dtype in DTYPES:
        f1 = np.maximum(conv_same_float((k / 16).astype(dtype), w1, b1, dtype), dtype(0))
        f2 = np.maximum(conv_same_float(pool_max(f1), w2, b2, dtype), dtype(0))
        for layer, (x, ref) in enumerate(((f1, r1), (f2, r2)), start=1):
            out = pool_max(x).shape
            dy = rng.integers(1, 9, size=out) * rng.choice([-1, 1], size=out) / 8
            census = symjac.tie_census(SPEC, x, ref, dy=dy)
            for batch in BATCHES:
                nb = k.shape[0] // batch
                counts = census.per_item[: nb * batch].reshape(nb, batch, -1).sum(axis=1)
                results[layer, np.dtype(dtype).name, batch] = {
                    "exact_tie": float((counts[:, 1] > 0).mean()),
                    "rounding_tie": float((counts[:, 2] > 0).mean()),
                    "broken_tie": float((counts[:, 3] > 0).mean()),
                    "dx_differs": _batch_any(census.differs["bifurcation"] + census.differs["compensation"], nb, batch),
                    "dx_differs_compensation": _batch_any(census.differs["compensation"], nb, batch),
                    "windows": census.totals,
                }
    return results


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bits = [16, 32, 64]
    fig, axes = plt.subplots(1, len(BATCHES), figsize=(10, 3.8), sharey=True)
    for ax, batch in zip(axes, BATCHES):
        for key, label, style in (("exact_tie", ">= 1 exact tie (bifurcation)", "o-"),
                                  ("rounding_tie", ">= 1 rounding tie (compensation)", "s-"),
                                  ("differs", "dW differs, beta 0 vs 1", "^--"),
                                  ("differs_compensation", "dW differs via rounding ties", "v:")):
            ax.plot(bits, [results[f"float{b}", batch][key] for b in bits], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(bits, [f"float{b}" for b in bits])
        ax.set_title(f"batch {batch}")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("precision")
    axes[0].set_ylabel("fraction of batches")
    axes[-1].legend(fontsize=7, loc="center right")
    fig.suptitle("digits CNN (conv3x3 -> ReLU -> maxpool2x2): tie zones per precision")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="write the PNG plot here")
    parser.add_argument("--blocks", type=int, default=1, choices=(1, 2),
                        help="2: conv(same)-ReLU-pool twice; tie zones per pooling layer (no dW columns)")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.blocks == 2:
        two = measure_two_blocks(args.channels, args.seed)
        print(f"{'layer':5} {'dtype':8} {'batch':>5} {'exact':>6} {'round':>6} {'broken':>6} {'dx':>6} {'dx_cmp':>6}")
        for (layer, dtype, batch), r in two.items():
            print(f"{layer:5d} {dtype:8} {batch:5d} {r['exact_tie']:6.2f} {r['rounding_tie']:6.2f} "
                  f"{r['broken_tie']:6.2f} {r['dx_differs']:6.2f} {r['dx_differs_compensation']:6.2f}")
        for layer in (1, 2):
            for dtype in ("float16", "float32", "float64"):
                print(f"windows layer {layer} {dtype}: {two[layer, dtype, BATCHES[0]]['windows']}")
        print(f"measured in {time.perf_counter() - start:.1f} s")
        return
    results = measure(args.channels, args.seed)
    elapsed = time.perf_counter() - start
    print("fraction of batches with: >= 1 exact / rounding / broken tie; pool-input gradient dx differing"
          " (any zone, compensation); conv-weight gradient dW differing (any, bifurcation, compensation)")
    header = (f"{'dtype':8} {'batch':>5} {'n':>3} {'exact':>6} {'round':>6} {'broken':>6} {'dx':>6} {'dx_cmp':>6}"
              f" {'dW':>6} {'dW_bif':>6} {'dW_cmp':>6}")
    print(header)
    for (dtype, batch), r in results.items():
        print(f"{dtype:8} {batch:5d} {r['batches']:3d} {r['exact_tie']:6.2f} {r['rounding_tie']:6.2f} "
              f"{r['broken_tie']:6.2f} {r['dx_differs']:6.2f} {r['dx_differs_compensation']:6.2f} "
              f"{r['differs']:6.2f} {r['differs_bifurcation']:6.2f} {r['differs_compensation']:6.2f}")
    for dtype in ("float16", "float32", "float64"):
        r = results[dtype, BATCHES[0]]
        print(f"windows {dtype}: {r['windows']}; exact ties whose maximum is a ReLU zero: {r['exact_ties_at_zero']}")
    print(f"measured in {elapsed:.1f} s")
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
