"""Mutation campaign: random pooling specs x the mutant suite's bugs x dtypes, at default verify arguments.

Each spec is a random :class:`symjac.Pool` (or adaptive/global pool); each mutant is
the test suite's :class:`NumpyPool` (tests/mutants.py) with one ``bug``; each is verified
with ``symjac.verify(spec, backward=..., forward=..., dtype=...)`` and nothing else (the
coverage plan and every default family). A mutant *misses* when that report is ok.

Equivalent mutants are told apart by an oracle that does not use the verifier: in the
dtype under test at every plan shape and two more random shapes, at 3 inputs of
distinct integers (no ties; float16 averages take integers small enough that no window's
sum overflows) and at one normal random input (not for float16 max: ties) with random integer dy, the mutant's forward and backward
against symjac's exact forward and ``J(x)^T dy`` (SymPy rationals, within a relative
1e-12 in float64 and the dtype's own rounding bound otherwise: γ_{n+2} with n a window's cells
for y and the windows reading a cell for dx; where γ is no bound, as for a float16 sum of
thousands of cells, the bug-free reference's values bit for bit), and its calling
contract (raises, shape, dtype, NaN, inputs mutated, two calls equal). A mutant equal
to the exact derivative everywhere there is *equivalent*: it is no defect, and its
pass is no miss (a divisor_kk bug where every window is full, say).

Run: python benchmarks/campaign.py [--specs 400] [--dtypes float16,float32,float64] [--seed 0]
     [--kinds a,b] [--minutes M]   (stops starting new specs after M minutes; the table
     covers the specs done)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections import defaultdict
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import symjac  # noqa: E402
from mutants import BUGS, NumpyPool, spec_for  # noqa: E402

DTYPES = ("float16", "float32", "float64")
#: every bug of the mutant suite but ``noise`` (+-1 ULP per call): within the rounding bound that is
#: valid nondeterminism, a note and no finding (docs/coverage.md), so its pass is no miss
DEFAULT_KINDS = [k for k in BUGS if k != "noise"]


def random_pool(rng: np.random.Generator) -> NumpyPool:
    """A random spec the mutant suite's NumpyPool implements (small kernels, ranks 1-3)."""
    mode = str(rng.choice(["avg", "max"]))
    last = bool(rng.random() < 0.3)
    rank = int(rng.choice([1, 2, 3], p=[0.4, 0.5, 0.1]))
    if rng.random() < 0.1:
        out = tuple(int(o) for o in rng.integers(1, 4, size=rank))
        return NumpyPool(mode, output_size=out, channels_last=last)
    k = tuple(int(v) for v in rng.integers(1, 4, size=rank))
    s = tuple(int(v) for v in rng.integers(1, 4, size=rank))
    d = tuple(int(v) for v in (1 + (rng.random(rank) < 0.2)))
    kind = rng.choice(["valid", "same", "same_lower", "explicit"])
    padding: Any = str(kind)
    if kind == "explicit":
        padding = tuple((int(rng.integers(0, ki // 2 + 1)), int(rng.integers(0, ki // 2 + 1))) for ki in k)
    divisor: Any = "exclude_pad"
    if mode == "avg":
        divisor = rng.choice(["exclude_pad", "include_pad", "int"])
        divisor = int(rng.integers(1, 10)) if divisor == "int" else str(divisor)
    return NumpyPool(mode, k, s, padding, d, ceil_mode=bool(rng.random() < 0.3), divisor=divisor,
                     channels_last=last)


def _exact_close(got: np.ndarray, want: np.ndarray, scale: np.ndarray, dtype: np.dtype[Any],
                 terms: int) -> bool | None:
    """Within a relative 1e-12 of ``scale`` in float64, else gamma_{terms+2} of the dtype times
    ``scale`` (the exact value at |x| or |dy|: the sum of the terms' magnitudes); None where
    gamma_{terms+2} is no bound ((terms + 2)·u >= 1/2: a float16 sum of thousands of cells)."""
    u = 2.0 ** -53 if dtype == np.float64 else float(np.finfo(dtype).eps) / 2
    if (terms + 2) * u >= 0.5:
        return None
    g = (terms + 2) * u / (1 - (terms + 2) * u)
    return bool(np.all(np.abs(got - want) <= max(g, 1e-12) * np.abs(scale)))


def _reads_per_cell(g: Any) -> int:
    """The most windows any input cell is read by (the terms of a cell's dx)."""
    return int(np.bincount(g.cells[g.valid].ravel(), minlength=1).max())


def equivalent(pool: NumpyPool, spec: Any, shapes: list[tuple[int, ...]], dtype: str,
               rng: np.random.Generator) -> bool:
    """Whether the mutant equals the exact forward and derivative (and keeps the calling
    contract) at every shape, at 3 tie-free integer inputs each (see the module doc)."""
    dt = np.dtype(dtype)
    reference = dataclasses.replace(pool, bug=None)
    for shape in shapes:
        g = symjac.resolve(spec, shape)
        terms = int(g.cells.shape[1])  # y: a window's cells (and one division)
        dx_terms = _reads_per_cell(g) + 1  # dx: a share dy/d (one division) from each window reading the cell
        for attempt in range(4):
            n = math.prod(shape)
            x = (rng.permutation(n) - n // 2).reshape(shape).astype(dt)
            if dt == np.float16 and n > 2048:
                x = (rng.permutation(n) % 2048 - 1024).reshape(shape).astype(dt)  # exact; ties possible
            if dt == np.float16 and pool.mode == "avg":
                # a window's sum must stay below float16's 65504 (an inf there is no defect of the
                # mutant): |x| <= 30000 // cells per window; ties are no matter for an average
                top = max(1, min(1024, 30000 // int(g.cells.shape[1])))
                x = rng.integers(-top, top + 1, size=shape).astype(dt)
            if attempt == 3:  # non-integers too (float32 accumulation, a float16 argmax), but no float16 max ties
                if dt == np.float16 and pool.mode == "max":
                    continue
                x = (rng.standard_normal(shape) * min(1.0, 4000 / int(g.cells.shape[1]))).astype(dt)
            dy = rng.integers(1, 5, size=g.output_shape) * rng.choice([-1, 1], size=g.output_shape)
            dy = dy.astype(dt)
            x0, dy0 = x.copy(), dy.copy()
            try:
                y = pool.forward(x.copy())
                dx1 = pool.backward(x, dy)
                dx2 = pool.backward(x0.copy(), dy0.copy())
            except Exception:
                return False
            if not (np.array_equal(x, x0) and np.array_equal(dy, dy0)):
                return False
            for a, want_shape in ((y, g.output_shape), (dx1, shape), (dx2, shape)):
                if not isinstance(a, np.ndarray) or a.shape != want_shape or a.dtype != dt or not np.isfinite(a).all():
                    return False
            if not np.array_equal(dx1, dx2):
                return False
            xe = x0.astype(np.float64)
            dye = dy0.astype(np.float64)
            fy = np.asarray(symjac.forward(spec, xe), dtype=np.float64)
            fdx = np.asarray(symjac.vjp(spec, xe, dye), dtype=np.float64)
            fy_abs = np.asarray(symjac.forward(spec, np.abs(xe)), dtype=np.float64) if pool.mode == "avg" else fy
            fdx_abs = np.asarray(symjac.vjp(spec, xe, np.abs(dye)), dtype=np.float64)
            close = [_exact_close(y.astype(np.float64), fy, fy_abs, dt, terms),
                     _exact_close(dx1.astype(np.float64), fdx, fdx_abs, dt, dx_terms)]
            if False in close:
                return False
            if None in close:  # no rounding bound to hold it to: it must be the bug-free reference, bit for bit
                if not (np.array_equal(y, reference.forward(x0.copy()))
                        and np.array_equal(dx1, reference.backward(x0.copy(), dy0.copy()))):
                    return False
    return True


def _extra_shapes(spec: Any, plan: tuple[tuple[int, ...], ...], rng: np.random.Generator) -> list[tuple[int, ...]]:
    out = []
    base = plan[0]
    rank = len(base) - 2
    last = getattr(spec, "layout", "channels_first") == "channels_last"
    for _ in range(2):
        sp = tuple(int(v) for v in rng.integers(1, 13, size=rank))
        shape = (2, *sp, 3) if last else (2, 3, *sp)
        try:
            symjac.resolve(spec, shape)
        except symjac.SpecError:
            continue
        out.append(shape)
    return out


def run_campaign(specs: int, dtypes: list[str], kinds: list[str], seed: int = 0, minutes: float = 0,
                 verbose: bool = False) -> tuple[dict[str, dict[str, int]], list[str], int]:
    """(counts per kind: runs, caught, equivalent, missed; the misses; specs done)."""
    rng = np.random.default_rng(seed)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    misses: list[str] = []
    start, done = time.perf_counter(), 0
    while done < specs:
        if minutes and time.perf_counter() - start > 60 * minutes:
            break
        pool = random_pool(rng)
        try:
            spec = spec_for(pool)
            plan = symjac.cover(spec)
            ok = symjac.verify(spec, backward=pool.backward, forward=pool.forward, dtype="float64")
        except symjac.SymjacError:
            continue  # a spec symjac refuses (a pad that leaves a window of padding only, say)
        if not ok.ok:
            print(f"FALSE ALARM on the bug-free reference: {spec!r}: {ok.summary()}", flush=True)
            counts["(reference)"]["false_alarm"] += 1
        done += 1
        shapes = list(plan) + _extra_shapes(spec, plan, rng)
        for kind in kinds:
            if pool.mode not in BUGS[kind]:
                continue
            mutant = dataclasses.replace(pool, bug=kind)
            for dtype in dtypes:
                report = symjac.verify(spec, backward=mutant.backward, forward=mutant.forward, dtype=dtype)
                c = counts[kind]
                c["runs"] += 1
                if not report.ok:
                    c["caught"] += 1
                elif equivalent(mutant, spec, shapes, dtype, np.random.default_rng(done)):
                    c["equivalent"] += 1
                else:
                    c["missed"] += 1
                    misses.append(f"{kind} {dtype} {spec!r}")
                    if verbose:
                        print(f"MISS {kind} {dtype} {spec!r}", flush=True)
        print(f"... {done} specs, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return counts, misses, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--specs", type=int, default=400, help="random specs")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--kinds", default="", help="comma-separated bug names (default: every one but noise)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=0, help="stop starting new specs after this long (0: no limit)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every miss as it happens")
    args = parser.parse_args()
    dtypes = [d for d in args.dtypes.split(",") if d]
    kinds = [k for k in args.kinds.split(",") if k] or DEFAULT_KINDS
    start = time.perf_counter()
    counts, misses, done = run_campaign(args.specs, dtypes, kinds, args.seed, args.minutes, args.verbose)
    elapsed = time.perf_counter() - start
    print(f"mutation campaign: {done} random specs x {len(kinds)} bug kinds x {len(dtypes)} dtypes "
          f"({', '.join(dtypes)}), default verify arguments, seed {args.seed}, {elapsed:.0f} s")
    print(f"{'kind':<16} {'runs':>6} {'caught':>7} {'equiv':>6} {'missed':>7} {'miss rate (non-equivalent)':>28}")
    total = defaultdict(int)
    for kind in kinds:
        c = counts[kind]
        for key in ("runs", "caught", "equivalent", "missed"):
            total[key] += c[key]
        non_eq = c["runs"] - c["equivalent"]
        rate = f"{c['missed'] / non_eq:.4f}" if non_eq else "-"
        print(f"{kind:<16} {c['runs']:>6} {c['caught']:>7} {c['equivalent']:>6} {c['missed']:>7} {rate:>28}")
    non_eq = total["runs"] - total["equivalent"]
    print(f"{'all':<16} {total['runs']:>6} {total['caught']:>7} {total['equivalent']:>6} {total['missed']:>7} "
          f"{(total['missed'] / non_eq if non_eq else 0):>28.4f}")
    print(f"false alarms on the bug-free references: {counts['(reference)']['false_alarm']}")
    for m in misses[:50]:
        print("MISS", m)


if __name__ == "__main__":
    main()
