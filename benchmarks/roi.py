"""RoI Align verify against average pooling verify on the same map (issue 31, item 2, the bar:
within 2x).

A 64 x 64 map (N = 1, C = 3), 8 boxes of 7 x 7 bins with sampling ratio 2 (boxes 8 to 48 cells
on a side, one partly outside), verified with ``symjac.verify`` at that input shape against
symjac's own NumPy lowering (``symjac.lower``: a correct implementation whose cost is small
next to the verifier's); the same for ``Pool("avg", 2)`` on the same map. Median of
``--repeat`` runs each.

Run: python benchmarks/roi.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import symjac

SHAPE = (1, 3, 64, 64)
BOXES = [(0, 0, 0, 8, 8), (0, 4, 10, 40, 30), (0, 20, 20, 60, 60), (0, -6, 30, 20, 62), (0, 50, 2, 63, 14),
         (0, 10, 40, 58, 63), (0, 30, 5, 47, 23), (0, 1, 1, 49, 49)]


def _time(spec: object, repeat: int) -> tuple[float, float, bool, str]:
    """(the first run's seconds, with the geometry and tables built; the median of the rest; ok; summary)."""
    start = time.perf_counter()
    lowered = symjac.lower(spec, SHAPE)
    report = symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, input_shape=SHAPE)
    cold = time.perf_counter() - start
    times, ok = [], report.ok
    for _ in range(repeat):
        start = time.perf_counter()
        again = symjac.verify(spec, forward=lowered.forward, backward=lowered.vjp, input_shape=SHAPE)
        times.append(time.perf_counter() - start)
        ok = ok and again.ok
    return cold, statistics.median(times), ok, report.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per spec (the median is shown)")
    args = parser.parse_args()
    roi = symjac.RoiAlign(7, boxes=BOXES, sampling_ratio=2)
    avg = symjac.Pool("avg", 2)
    small = symjac.lower(symjac.Pool("max", 2), (1, 1, 4, 4))  # the verifier's imports, before either is timed
    symjac.verify(symjac.Pool("max", 2), forward=small.forward, backward=small.vjp, input_shape=(1, 1, 4, 4))
    c_roi, t_roi, ok_roi, s_roi = _time(roi, args.repeat)
    c_avg, t_avg, ok_avg, s_avg = _time(avg, args.repeat)
    print(f"{'spec':<52} {'first s':>8} {'median s':>9}  ok")
    print(f"{'RoiAlign(7, 8 boxes, sampling_ratio=2) @ ' + str(SHAPE):<52} {c_roi:8.3f} {t_roi:9.3f}  {ok_roi}")
    print(f"{'Pool(avg, 2) @ ' + str(SHAPE):<52} {c_avg:8.3f} {t_avg:9.3f}  {ok_avg}")
    print(f"ratio RoiAlign / avg pool: first {c_roi / c_avg:.2f}, median {t_roi / t_avg:.2f} (the bar: <= 2)")
    print(f"RoiAlign: {s_roi}\navg: {s_avg}")


if __name__ == "__main__":
    main()
