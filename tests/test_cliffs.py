"""Regression tests for issue 11's performance cliffs: structure, not time.

Each test pins the property that keeps a case linear in its work: SymPy work per
window class independent of the window's size, Python iterations bounded by
sqrt(windows x slots), verify-path memory within c·nnz, loss precision independent
of |z|, the finite-difference oracle's calls independent of the window size, loss
inputs read without a Fraction per element, and softmax_ce's SymPy work none per class (tests/test_softmax_classes.py).
"""

from __future__ import annotations

import tracemalloc
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import sympy

import symjac
from symjac.loss._evaluate import evaluate
from symjac.loss._spec import DPS
from symjac.pool import _symbolic
from symjac.pool._ops import avg
from symjac.pool import _ties
from symjac.pool import _caches
from symjac.pool._geometry import resolve
from symjac.pool._symbolic import lines, window_classes


def _clear_caches() -> None:
    _caches.clear_caches()


def _count_diffs(monkeypatch: pytest.MonkeyPatch, spec: symjac.AdaptivePool | symjac.GlobalPool, shape: tuple[int, ...],
                 x: np.ndarray | None = None) -> tuple[int, int]:
    calls = []
    real = sympy.diff

    def counting(*args: object, **kw: object) -> object:
        calls.append(args)
        return real(*args, **kw)

    _clear_caches()
    monkeypatch.setattr(sympy, "diff", counting)
    symjac.jacobian(spec, shape if x is None else x)
    monkeypatch.setattr(sympy, "diff", real)
    return len(calls), len(window_classes(resolve(spec, shape)))


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_sympy_differentiations_do_not_grow_with_window_size(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # adaptive 7x7 heads on 28^2 (4-cell windows) and 112^2 (16^2-cell windows): the
    # same number of SymPy diff calls, at most 2 per class (avg: d/da and the
    # symmetry check d/dr of (a + r)/D; max: d Max(a, r)/da once).
    counts = []
    for n in (28, 112):
        x = np.arange(n * n, dtype=np.float64).reshape(1, 1, n, n) if mode == "max" else None
        diffs, classes = _count_diffs(monkeypatch, symjac.AdaptivePool(mode, (7, 7)), (1, 1, n, n), x)
        assert 1 <= diffs <= 2 * classes
        counts.append(diffs)
    assert counts[0] == counts[1]
    # a global window of 96^2 = 9,216 cells costs what a 9-cell one does
    big, _ = _count_diffs(monkeypatch, symjac.GlobalPool(mode), (96, 96),
                          np.arange(96 * 96, dtype=np.float64).reshape(96, 96) if mode == "max" else None)
    small, _ = _count_diffs(monkeypatch, symjac.GlobalPool(mode), (3, 3),
                            np.arange(9, dtype=np.float64).reshape(3, 3) if mode == "max" else None)
    assert big == small


@pytest.mark.parametrize(("spec", "shape", "expected"), [
    (symjac.Pool("avg", 3, stride=1, padding="same"), (64, 64), 9),      # 9 slots across 4,096 windows
    (symjac.Pool("max", 5, stride=1, padding="same"), (40, 40), 25),
    (symjac.GlobalPool("avg"), (128, 128), 1),                           # one window across 16,384 slots
    (symjac.AdaptivePool("max", (7, 7)), (112, 112), 49),                # 49 windows of 256 slots
])
def test_python_iterations_are_min_of_windows_and_slots(spec: symjac.Pool, shape: tuple[int, int],
                                                        expected: int) -> None:
    g = resolve(spec, shape)
    found = list(lines(g))
    assert len(found) == expected == min(g.cells.shape)
    # the lines cover every valid (window, slot) pair once, and within a line no cell repeats
    assert sum(line.w.size for line in found) == int(g.valid.sum())
    assert all(np.unique(line.cells).size == line.cells.size for line in found)


def _verify_peak(spec: symjac.Pool | symjac.AdaptivePool, shape: tuple[int, ...],
                 extreme: bool = False) -> tuple[int, int]:
    """Traced peak of a verify at ``shape`` and the Jacobian's nnz; without the ``extreme`` family
    unless asked (its float64 values near 1e308 are exact Python ints of ~1020 bits: ~22 words per
    input cell for each exact copy, a cost per cell that :func:`test_the_extreme_family_costs_words_per_cell`
    bounds apart)."""
    from symjac.verifiers.pool._inputs import families

    low = symjac.lower(spec, shape)
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 0.25
    nnz = symjac.jacobian(spec, x).nnz if spec.mode == "avg" else int(resolve(spec, shape).valid.sum())
    kept = tuple(f for f in families(resolve(spec, shape)) if extreme or f != "extreme")
    symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None,
                  families=kept)  # warm caches
    tracemalloc.start()
    report = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None,
                           families=kept)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.ok, report
    return peak, nnz


@pytest.mark.parametrize(("spec", "shape"), [
    (symjac.Pool("avg", 7, stride=1, padding="same"), (1, 1, 48, 48)),
    (symjac.Pool("max", 7, stride=1, padding="same"), (1, 1, 48, 48)),
    (symjac.AdaptivePool("avg", (7, 7)), (1, 1, 112, 112)),
])
def test_verify_memory_is_linear_in_nnz(spec: symjac.Pool, shape: tuple[int, ...]) -> None:
    # Every intermediate of the verify path is (B, W, K)-sized or smaller: the traced
    # peak stays within c·nnz float64 elements (c = 32 covers the handful of row arrays
    # alive at once), never a dense (outputs x inputs) or (colours x nnz) array.
    peak, nnz = _verify_peak(spec, shape)
    assert peak <= 32 * 8 * nnz, (peak, nnz)


@pytest.mark.parametrize(("spec", "shape"), [
    (symjac.AdaptivePool("avg", (7, 7)), (1, 1, 112, 112)),
    (symjac.Pool("avg", 3, stride=1, padding="same"), (1, 1, 96, 96)),
])
def test_the_extreme_family_costs_words_per_cell(spec: symjac.Pool, shape: tuple[int, ...]) -> None:
    # The extreme family's float64 inputs near 1e308 convert to Python ints of ~1020 bits (28 + 136
    # bytes, ~21 words): measured 41.4 words/nnz for the adaptive pool (nnz = cells) against 24.3
    # without it, 12.8 against 9.7 at 3x3; linear in the cells, 48 words a cell at most above the rows.
    peak, nnz = _verify_peak(spec, shape, extreme=True)
    assert peak <= 8 * (32 * nnz + 48 * int(np.prod(shape))), (peak, nnz)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_verify_memory_with_entrywise_fd_stays_near_the_rows(mode: str) -> None:
    # 3x3 (9 input colours): the entrywise FD oracle runs. Beyond the (B, W, K) observed
    # and exact rows, FD rows and their bounds, every pass keeps O(line) temporaries, not
    # nnz-sized index arrays: measured 8.2 (avg) and 8.5 (max) x 8·nnz bytes (14.1 and
    # 12.3 with nnz-sized FD gathers). Since each result is copied at return and the latest
    # are watched for later writes (check/_call.py, issue 21): measured 11.2 (max), the
    # copies of one handed-over batch of probe calls and their watched originals.
    peak, nnz = _verify_peak(symjac.Pool(mode, 3, stride=1, padding="same"), (1, 1, 96, 96))
    assert peak <= 12 * 8 * nnz, (peak, nnz)


def test_fd_oracle_checks_directions_for_large_windows() -> None:
    # A global pool would need one forward pair per input cell for entrywise central
    # differences; with directions it needs 3, and a forward that disagrees with
    # its own backward is still caught.
    spec = symjac.GlobalPool("avg")
    shape = (1, 1, 64, 64)
    low = symjac.lower(spec, shape)
    ok = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None)
    assert ok.ok and ok.stats["fd_consistent"] is True
    # 1 forward check + 3 directions + 1 each at the near-tie, extreme and non-finite inputs
    assert ok.stats["forward_calls"] == 7
    report = symjac.verify(spec, backward=low.vjp, forward=lambda x: 2 * low.forward(x), input_shape=shape,
                           timeout=None)
    assert "not_fd_consistent" in report.categories(), report


@pytest.mark.parametrize("z", [1.0, 1e4, 1e6, 1e300])
def test_sigmoid_ce_needs_no_extra_digits_at_any_magnitude(z: float) -> None:
    # d/dz of sigmoid_ce at label 1 is σ(z) - 1 = -1/(1 + e^z); at label 0 and -z it is
    # σ(-z) = 1/(1 + e^z) (mpmath, directly from the definition, 60 digits).
    loss = symjac.Loss("sigmoid_ce", reduction="sum")
    ev = evaluate(loss, [z, -z], [1.0, 0.0], values=True, derivatives=True)
    assert ev.dps == DPS  # precision does not grow with |z|
    with mpmath.workdps(60):
        expected = [-1 / (1 + mpmath.exp(mpmath.mpf(z))), 1 / (1 + mpmath.exp(mpmath.mpf(z)))]
        for got, want in zip(ev.derivative(), expected):
            assert abs(got - want) <= abs(want) * mpmath.mpf(10) ** (-40)
        # ℓ at label 1 is log(1 + e^-z); at label 0 and -z also log(1 + e^-z)
        want_value = mpmath.log1p(mpmath.exp(-mpmath.mpf(z)))
        for got in ev.elements:
            assert abs(got - want_value) <= want_value * mpmath.mpf(10) ** (-40)


# -- large kernels and maps: what jacobian + vjp and the verifier do per nnz -------------------------------------


def test_max_tie_sets_are_computed_once_per_x(monkeypatch: pytest.MonkeyPatch) -> None:
    # jacobian, vjp and forward at one x share their work: policy "first" one axis-by-axis
    # route (never the (windows, K) tie sets), policy "split" one pass over the tie sets.
    # (A table this small is routed from the tie sets by default: see the next test.)
    monkeypatch.setattr(_ties, "ROUTE_BY_MEMBERS", 0)
    routes, members = [], []
    real_route, real_members = _ties._max_route, _ties._max_members

    def counting_route(g: object, xc: np.ndarray, tie: str) -> object:
        routes.append(tie)
        return real_route(g, xc, tie)  # type: ignore[arg-type]

    def counting_members(g: object, xc: np.ndarray) -> np.ndarray:
        members.append(xc.copy())
        return real_members(g, xc)  # type: ignore[arg-type]

    monkeypatch.setattr(_ties, "_max_route", counting_route)
    monkeypatch.setattr(_ties, "_max_members", counting_members)
    _caches.clear_caches(templates=False)
    spec = symjac.Pool("max", 3, stride=1, padding="same")
    x = np.arange(36.0).reshape(1, 1, 6, 6)
    symjac.jacobian(spec, x)
    symjac.vjp(spec, x, np.ones((1, 1, 6, 6)))
    symjac.forward(spec, x)
    assert routes == ["first"] and not members
    (entry,) = _ties._LAST_ROUTE.values()
    assert not any(a.flags.writeable for a in entry[1])  # shared: no caller may alter it
    symjac.vjp(spec, -x, np.ones((1, 1, 6, 6)))  # another x: computed afresh
    assert routes == ["first", "first"]
    symjac.jacobian(spec, x, tie="split")
    symjac.vjp(spec, x, np.ones((1, 1, 6, 6)), tie="split")
    assert len(members) == 1
    (member,) = _ties._LAST_MEMBERS.values()
    assert not member.flags.writeable


def test_small_max_tables_route_from_the_tie_sets_once_per_x(monkeypatch: pytest.MonkeyPatch) -> None:
    # Up to ROUTE_BY_MEMBERS (batch, window, slot) entries, first/last read the tie sets,
    # which verify's exact rows need at the same x: one gather of the windows for both
    # policies and the tie sets, no axis-by-axis route.
    members = []
    real_members = _ties._max_members

    def counting_members(g: object, xc: np.ndarray) -> np.ndarray:
        members.append(xc.copy())
        return real_members(g, xc)  # type: ignore[arg-type]

    def no_route(*args: object) -> None:
        raise AssertionError("routed axis by axis below ROUTE_BY_MEMBERS")

    monkeypatch.setattr(_ties, "_max_members", counting_members)
    monkeypatch.setattr(_ties, "_max_route", no_route)
    _caches.clear_caches(templates=False)
    spec = symjac.Pool("max", 3, stride=1, padding="same")
    x = np.arange(36.0).reshape(1, 1, 6, 6)  # 36 windows x 9 slots, far below the threshold
    assert 36 * 9 <= _ties.ROUTE_BY_MEMBERS
    symjac.jacobian(spec, x, tie="first")
    symjac.vjp(spec, x, np.ones((1, 1, 6, 6)), tie="last")
    symjac.forward(spec, x)
    symjac.tie_sets(spec, x)
    assert len(members) == 1


def test_max_vjp_of_a_one_slot_support_reads_only_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Policy "first" keeps one slot a window: the VJP scatters those pairs, never the
    # windows x K lines (which would make a k=15 max VJP 225 passes for 1 nnz a window).
    def no_lines(g: object) -> None:
        raise AssertionError("lines() walked for a sparse support")

    monkeypatch.setattr("symjac.pool._stamp.lines", no_lines)
    spec = symjac.Pool("max", 2, stride=1)
    # x increases along rows and columns, so every 2x2 window's max is its bottom-right
    # cell: cell (i, j) of the 3x3 input gets dy of window (i-1, j-1) when i, j >= 1.
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    dy = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    dx = symjac.vjp(spec, x, dy)
    assert dx.reshape(3, 3).tolist() == [[0, 0, 0], [0, 1, 2], [0, 3, 4]]
    # stride 1 windows overlap: a constant 3x3 ties everywhere, "first" picks each
    # window's top-left, so cell (i, j) for i, j <= 1 gets its own window's dy only.
    dx = symjac.vjp(spec, np.zeros((1, 1, 3, 3)), dy)
    assert dx.reshape(3, 3).tolist() == [[1, 2, 0], [3, 4, 0], [0, 0, 0]]


@pytest.mark.parametrize("tie", ["first", "last"])
def test_max_one_entry_a_window_is_found_per_window_not_per_slot(monkeypatch: pytest.MonkeyPatch, tie: str) -> None:
    # first/last give each window at most one entry: the Jacobian's pairs come from the
    # (windows,) slot the policy picked, never from a nonzero over the (windows, K) support.
    spec = symjac.Pool("max", 3, stride=1, padding="same")
    g = resolve(spec, (1, 1, 12, 12))
    big = g.n_out * g.cells.shape[1]
    real = np.nonzero

    def small_nonzero(a: Any) -> Any:
        assert np.size(a) < big, "nonzero over the (windows, K) support"
        return real(a)

    x = np.random.default_rng(3).integers(0, 4, (1, 1, 12, 12)) * 1.0  # many ties
    monkeypatch.setattr(np, "nonzero", small_nonzero)
    J = symjac.jacobian(spec, x, tie=tie)
    dx = symjac.vjp(spec, x, np.ones((1, 1, 12, 12)), tie=tie)
    monkeypatch.setattr(np, "nonzero", real)
    # Independent reference: scan each 3x3 window (SAME: the cells inside the map) in
    # row-major order for the first (last) maximal cell.
    rows, cols = [], []
    for i in range(12):
        for j in range(12):
            cells = [(a, b) for a in range(i - 1, i + 2) for b in range(j - 1, j + 2) if 0 <= a < 12 and 0 <= b < 12]
            top = max(x[0, 0, a, b] for a, b in cells)
            hits = [c for c in cells if x[0, 0, c[0], c[1]] == top]
            a, b = hits[0] if tie == "first" else hits[-1]
            rows.append(i * 12 + j)
            cols.append(a * 12 + b)
    assert J.rows.tolist() == rows and J.cols.tolist() == cols and set(J.values.tolist()) == {1}
    assert dx.reshape(-1).tolist() == np.bincount(cols, minlength=144).tolist()


def test_geometry_gather_fills_padding_slots() -> None:
    # 3x3 same on a 2x2 map: window (0, 0) reads cells (0,0),(0,1),(1,0),(1,1) in its
    # slots 4, 5, 7, 8 (row-major over the 3x3 kernel, centred); the others are padding.
    g = resolve(symjac.Pool("avg", 3, stride=1, padding="same"), (2, 2))
    got = g.gather(np.array([[10.0, 11.0, 12.0, 13.0]]), fill=-1.0)
    assert got.shape == (1, 4, 9)
    assert got[0, 0].tolist() == [-1, -1, -1, -1, 10, 11, -1, 12, 13]


def test_cell_counts_are_the_windows_reading_each_cell() -> None:
    from symjac.pool._rows import cell_counts

    # 3x3 same on 4x4: a corner cell is read by the 2x2 windows centred next to it,
    # an edge cell by 2x3, an interior cell by 3x3.
    g = resolve(symjac.Pool("avg", 3, stride=1, padding="same"), (4, 4))
    assert cell_counts(g).reshape(4, 4).tolist() == [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]


@pytest.mark.parametrize(("divisor", "held"), [(9, False), (4, True)])
def test_exact_rows_held_per_window(divisor: int, held: bool) -> None:
    from symjac.pool._rows import exact_rows

    # 3x3 avg valid on 3x3 with a fixed divisor: one window, 9 entries of 1/divisor;
    # 1/9 is not dyadic (float64 cannot hold it), 1/4 is.
    spec = symjac.Pool("avg", 3, divisor=divisor)
    g = resolve(spec, (1, 1, 3, 3))
    ex = exact_rows(g, np.zeros((1, 1, 3, 3)), np.dtype(np.float64))
    assert ex.rows.shape == (1, 1, 9)
    assert np.all(ex.rows == 1 / divisor)
    assert bool(ex.held.all()) is held


@pytest.mark.parametrize("shape", [(2, 5, 4, 3), (2, 3, 5, 4)])
def test_sparse_jacobian_is_sorted_by_row_then_col(shape: tuple[int, ...]) -> None:
    # channels_last with 3 channels interleaves rows (sorted once); channels_first does not.
    layout = "channels_last" if shape[-1] == 3 else "channels_first"
    jac = symjac.jacobian(symjac.Pool("avg", 3, stride=1, padding="same", layout=layout), shape)
    key = jac.rows * jac.shape[1] + jac.cols
    assert np.all(np.diff(key) > 0)
    # 3x3 same along an axis of length L: the two end windows read 2 cells, the others 3,
    # so 3L - 2 pairs; a 5x4 map has (3*5 - 2)(3*4 - 2) pairs, and there are 2 x 3 maps.
    assert jac.nnz == 6 * (3 * 5 - 2) * (3 * 4 - 2)


def test_map_beyond_the_budget_is_refused_up_front() -> None:
    # 4096^2 3x3: 16.7 M windows x 9 slots = 151 M entries > MAX_NNZ = 2^26: a SpecError
    # before any window table is built (no allocation of the size of the map's Jacobian).
    spec = symjac.Pool("avg", 3, stride=1, padding="same")
    shape = (1, 1, 4096, 4096)
    tracemalloc.start()
    with pytest.raises(symjac.SpecError, match="too large.*max_nnz"):
        symjac.verify(spec, backward=lambda x, dy: x, input_shape=shape)
    with pytest.raises(symjac.SpecError, match="too large"):
        symjac.jacobian(spec, shape)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**20


@pytest.mark.parametrize("z", [1.0, 1e4, 1e6, 1e300])
def test_softmax_ce_needs_no_extra_digits_at_any_magnitude(z: float) -> None:
    # Row [0.5, z, -z], label class 1: d/dz_c = softmax_c - [c == 1]. The oracle is the
    # definition at 1,200 bits, enough to hold 0.5 - 1e300 exactly and far more than the
    # 60 digits compared: softmax_0 = e^0.5/Σ, softmax_2 = e^-z/Σ, and
    # softmax_1 - 1 = -(e^0.5 + e^-z)/Σ with Σ = e^0.5 + e^z + e^-z.
    loss = symjac.Loss("softmax_ce", reduction="sum")
    ev = evaluate(loss, [[0.5, z, -z]], [[0.0, 1.0, 0.0]], values=True, derivatives=True)
    assert ev.dps == DPS  # precision does not grow with |z|
    got = list(ev.derivative().reshape(-1))
    with mpmath.workprec(1200):
        zz = mpmath.mpf(z)
        total = mpmath.exp(0.5) + mpmath.exp(zz) + mpmath.exp(-zz)
        expected = [mpmath.exp(0.5) / total, -(mpmath.exp(0.5) + mpmath.exp(-zz)) / total, mpmath.exp(-zz) / total]
        for g, want in zip(got, expected):
            assert abs(g - want) <= abs(want) * mpmath.mpf(10) ** (-40)
        # ℓ = log Σ - z_1 = log1p((e^0.5 + e^-z)/e^z), the exact remainder
        want_value = mpmath.log1p((mpmath.exp(0.5) + mpmath.exp(-zz)) / mpmath.exp(zz))
        assert abs(ev.elements[0] - want_value) <= want_value * mpmath.mpf(10) ** (-40)


def test_far_below_the_dtype_rounds_to_signed_zero_without_expanding() -> None:
    # e^-(1e300) is below half float64's smallest subnormal (2^-1075): it rounds to
    # ±0, and overflows to ±inf beyond 2^1025, without forming 2^(-1.4e300) exactly.
    from symjac.loss._evaluate import to_numpy
    with mpmath.workdps(60):
        tiny = mpmath.exp(-mpmath.mpf(1e300))
        out = to_numpy(np.array([tiny, -tiny, 1 / tiny, mpmath.mpf(2) ** -1074], dtype=object))
    assert out[0] == 0 and not np.signbit(out[0]) and out[1] == 0 and np.signbit(out[1])
    assert out[2] == np.inf and out[3] == np.float64(5e-324)


@pytest.mark.parametrize("kind", ["mse", "mae", "smooth_l1", "huber", "sigmoid_ce", "softmax_ce"])
def test_every_unbounded_kind_evaluates_at_1e300(kind: str) -> None:
    # The kinds whose pred is unbounded (bce and kld take probabilities) evaluate with
    # their bounds at |z| = 1e300 at DPS digits: values and bounds finite, and the
    # derivative is S·dℓ/dz at the sign the definition gives (mse 2(z - y) = ±2e300;
    # mae, smooth_l1 sign(z - y); huber δ·sign(z - y), δ = 1; sigmoid_ce σ(z) - y;
    # softmax_ce softmax - onehot = 1 - 0 at the max logit, -1 at the label).
    loss = symjac.Loss(kind, reduction="sum")
    if kind == "softmax_ce":
        pred, label, expected = [[1e300, -1e300]], [[0.0, 1.0]], [1, -1]
    else:
        pred, label = [1e300, -1e300], [0.0, 1.0]
        expected = {"mse": [2e300, -2e300], "sigmoid_ce": [1, -1]}.get(kind, [1, -1])
    ev = evaluate(loss, pred, label, values=True, derivatives=True, bounds=True)
    assert ev.dps == DPS
    assert ev.h_cond is not None and ev.element_run is not None
    for v in list(ev.elements.reshape(-1)) + list(ev.h_cond.reshape(-1)) + list(ev.element_run.reshape(-1)):
        assert mpmath.isfinite(v)
    got = [float(v) for v in ev.derivative().reshape(-1)]
    assert got == pytest.approx(expected, rel=1e-15)


# ---- losses at size: whole arrays in MPFR, mpmath only beyond 2^24, full bounds on demand


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Wrap module.name to record how many elements (first array argument's length, or 1) each call gets."""
    seen: list[int] = []
    real = getattr(module, name)

    def wrapped(*args: object, **kwargs: object) -> object:
        cols = args[1] if len(args) > 1 else None
        seen.append(len(cols[0]) if isinstance(cols, list) and cols else 1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return seen


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce", "softmax_ce", "smooth_l1"])
def test_evaluation_runs_each_lowered_function_once_per_batch(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    # 2,000 elements below the MPFR limit: no element goes through mpmath one by one, and
    # the lowered SymPy functions run once over the whole batch, however many elements.
    from symjac.loss import _elements

    scalar = _count_calls(monkeypatch, _elements, "_element")
    batches = _count_calls(monkeypatch, _elements, "_vectorised")
    rng = np.random.default_rng(1)
    pred = rng.standard_normal((200, 10))
    label = np.eye(10)[rng.integers(0, 10, 200)] if kind == "softmax_ce" else rng.random((200, 10))
    loss = symjac.Loss(kind, delta=0.5) if kind == "smooth_l1" else symjac.Loss(kind)
    evaluate(loss, pred, label, values=True, derivatives=True, bounds=True)
    assert scalar == []
    assert batches == [200 if kind == "softmax_ce" else 2000]


def test_only_inputs_beyond_the_limit_go_through_mpmath(monkeypatch: pytest.MonkeyPatch) -> None:
    # Independent oracle: dℓ/dz of sigmoid_ce is σ(z) - y (mean over 4 elements: /4),
    # σ from mpmath at 60 digits; e^-1e300 is far below any dtype (and below MPFR).
    from symjac.loss import _elements

    scalar = _count_calls(monkeypatch, _elements, "_element")
    z, y = [1e300, 1.0, 1e6, -1e300], [0.25, 0.5, 1.0, 0.0]
    got = symjac.loss_derivative(symjac.Loss("sigmoid_ce"), z, y)
    assert len(scalar) == 2  # the two elements at |z| = 1e300 (1e6 < 2^24 stays in MPFR)
    with mpmath.workdps(60):
        for g, zz, yy in zip(got, z, y):
            want = (1 / (1 + mpmath.exp(-mpmath.mpf(zz))) - yy) / 4
            assert abs(g - want) <= mpmath.mpf("1e-55") * max(1, abs(want))


def test_values_from_mpmath_keep_their_digits() -> None:
    # The element at 1e300 goes through mpmath; huber's derivative there is δ·sign(z - y)
    # = 1/3, no binary fraction, so a round trip through 53 bits anywhere would show.
    from fractions import Fraction

    got = symjac.loss_derivative(symjac.Loss("huber", delta=Fraction(1, 3), reduction="sum"), [1e300, 0.25], [0.0, 0.0])
    with mpmath.workdps(60):
        third = mpmath.mpf(1) / 3
        assert abs(got[0] - third) <= mpmath.mpf("1e-55")
        assert got[1] == mpmath.mpf(0.25)  # |d| < δ: d = 0.25


def test_verifier_forms_full_bounds_only_where_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A correct derivative at 5,000 elements: the condition sums and running errors are
    # computed for the worst entry, the probed entries (the derivative bound in each FD
    # tolerance) and their two stencil points (the forward bound) only, not per element.
    from symjac.loss._evaluate import to_numpy
    from symjac.verifiers.loss import _fd as _loss  # the stencils' evaluations

    rng = np.random.default_rng(2)
    pred, label = rng.standard_normal((500, 10)), rng.random((500, 10)).round(3)
    loss = symjac.Loss("sigmoid_ce")
    values = to_numpy(symjac.loss_derivative(loss, pred, label))
    seen: list[tuple[int, bool]] = []
    real = _loss.element_values

    def counting(tpl: object, cols: list[np.ndarray], **kw: object) -> object:
        seen.append((len(cols[0]), bool(kw.get("bounds"))))
        return real(tpl, cols, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_loss, "element_values", counting)
    report = symjac.verify_loss(loss, derivative=lambda z, y: values, pred=pred, label=label,
                                forward=lambda z, y: np.mean(np.logaddexp(0, z) - y * z))
    assert report.ok, report.summary()
    assert sum(n for n, bounds in seen if bounds) <= 1 + 3 * _loss.MAX_FD_PROBES


def test_wrong_derivative_still_gets_full_bounds_everywhere() -> None:
    # The failure path: a scale slip at 2,000 elements is classified with the full bound
    # (every element's), as before: c = 2 named (2·dL/dpred where S = 1).
    from symjac.loss._evaluate import to_numpy

    rng = np.random.default_rng(3)
    pred, label = rng.standard_normal((200, 10)), rng.standard_normal((200, 10))
    loss = symjac.Loss("mse")
    values = to_numpy(symjac.loss_derivative(loss, pred, label)) * 2
    report = symjac.verify_loss(loss, derivative=lambda z, y: values, pred=pred, label=label)
    assert report.categories() == ["wrong_scale"]
    assert "c = 2" in report.findings[0].message


def _count_fractions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every Fraction built (Python 3.11 builds them all through __new__) and every
    ExactArray.to_fractions call (as -1)."""
    from fractions import Fraction

    from symjac._exact import ExactArray

    made: list[int] = []
    real_new, real_to = Fraction.__new__, ExactArray.to_fractions

    def counting_new(cls: type, *args: object, **kw: object) -> object:
        made.append(1)
        return real_new(cls, *args, **kw)  # type: ignore[call-overload]

    def counting_to(self: ExactArray) -> np.ndarray:
        made.append(-1)
        return real_to(self)

    monkeypatch.setattr(Fraction, "__new__", staticmethod(counting_new))
    monkeypatch.setattr(ExactArray, "to_fractions", counting_to)
    return made


@pytest.mark.parametrize("loss", [symjac.Loss("softmax_ce"), symjac.Loss("softmax_ce", labels="indices"),
                                  symjac.Loss("bce"), symjac.Loss("kld"), symjac.Loss("sigmoid_ce")],
                         ids=["softmax_ce", "softmax_ce-indices", "bce", "kld", "sigmoid_ce"])
def test_float_inputs_become_no_fraction_per_element(monkeypatch: pytest.MonkeyPatch, loss: symjac.Loss) -> None:
    # Float pred and label of n elements are read, range-checked (bce, kld, softmax_ce's
    # probability labels), reduced and converted to MPFR as integer numerators over one
    # denominator: the Fractions built (the spec's options, the reduction factor, ...)
    # are as many at 40,000 elements as at 40, and no array becomes Fractions.
    made = _count_fractions(monkeypatch)
    counts = []
    for rows in (4, 4000):
        rng = np.random.default_rng(5)
        pred = rng.uniform(0.0625, 0.9375, (rows, 10))
        if loss.labels == "indices":
            label: np.ndarray = rng.integers(0, 10, rows)
        elif loss.kind == "softmax_ce":
            label = np.eye(10)[rng.integers(0, 10, rows)]
        else:
            label = rng.random((rows, 10)).round(3)
        del made[:]
        evaluate(loss, pred, label, values=True, derivatives=True)
        assert -1 not in made
        counts.append(len(made))
    assert counts[1] == counts[0] <= 32


@pytest.mark.parametrize("loss, pred, label, match", [
    # bce's pred must be in (0, 1): entry 537 of 1,000 (row 5, column 37 of 10 x 100) is
    # 1.25, entry 800 is 0.0: the first in C order, [5, 37], is named, with its value.
    (symjac.Loss("bce"), ("set", {537: 1.25, 800: 0.0}), None, r"pred\[5, 37\] = 1.25 is outside \(0, 1\)"),
    # Labels in [0, 1]: 1 + 2^-52 at entry 999 = [9, 99] is just above 1.
    (symjac.Loss("bce"), None, ("set", {999: 1 + 2.0**-52}), r"label\[9, 99\] = 1.0000000000000002 is outside \[0, 1\]"),
    # -2^-1074 (the common denominator is 2^1074, beyond int64) at entry 120 = [1, 20] is
    # below 0; 2.0 at entry 130 comes later.
    (symjac.Loss("kld"), None, ("set", {120: -(2.0**-1074), 130: 2.0}), r"label\[1, 20\] = -5e-324 is outside \[0, 1\]"),
    # kld's Q in (0, 1]: 0.0 at entry 3 = [0, 3].
    (symjac.Loss("kld"), ("set", {3: 0.0, 4: 1.5}), None, r"pred\[0, 3\] = 0.0 is outside \(0, 1\]"),
    # log_target: label = log P <= 0; 0.5 at entry 10 = [0, 10].
    (symjac.Loss("kld", log_target=True), None, ("set", {10: 0.5}), r"label\[0, 10\] = 0.5 is outside \(-inf, 0\]"),
])
def test_domain_checks_name_the_first_offending_entry(loss: symjac.Loss, pred: Any, label: Any, match: str) -> None:
    base_pred, base_label = np.full(1000, 0.5), np.full(1000, -0.25 if loss.log_target else 0.25)
    for base, change in ((base_pred, pred), (base_label, label)):
        for flat, value in ({} if change is None else change[1]).items():
            base[flat] = value
    with pytest.raises(symjac.InputError, match=match):
        evaluate(loss, base_pred.reshape(10, 100), base_label.reshape(10, 100))


@pytest.mark.parametrize("label, ignore, match", [
    # 3 classes: row 2 holds 0.5 (not an integer), row 4 holds 7 (out of range): row 2 first.
    ([0, 1, 0.5, 2, 7], None, r"label\[2\] = 0.5 is not an integer class index"),
    # The out-of-range 7 in row 1 comes before the 0.5 in row 2 (the common denominator is 2).
    ([0, 7, 0.5, 2, 1], None, r"label\[1\] = 7 is out of range: class indices must be in \[0, 3\)$"),
    # -100 is ignore_index, so row 0 is skipped, and -1 in row 3 is named.
    ([-100, 1, 2, -1, 0], -100, r"label\[3\] = -1 is out of range: class indices must be in \[0, 3\) or "
                               r"ignore_index=-100"),
])
def test_class_index_checks_name_the_first_offending_row(label: list[float], ignore: int | None, match: str) -> None:
    loss = symjac.Loss("softmax_ce", labels="indices", ignore_index=ignore)
    with pytest.raises(symjac.InputError, match=match):
        evaluate(loss, np.zeros((5, 3)), np.array(label))


def test_weighted_mean_over_class_indices_sums_the_labelled_rows_weights() -> None:
    # weight (1, 2, 4), labels 0, 2, 2, 1 with row 3 ignored: D = 1 + 4 + 4 = 9; at pred 0
    # dℓ_i/dz_j = w_{y_i}·(1/3 - [j = y_i]), so row 0's derivative is (1/9)·(1/3 - 1, 1/3, 1/3).
    from fractions import Fraction

    loss = symjac.Loss("softmax_ce", labels="indices", weight=(1, 2, 4), ignore_index=1)
    ev = evaluate(loss, np.zeros((4, 3)), np.array([0, 2, 2, 1]))
    assert ev.denominator == Fraction(9)
    assert [float(v) for v in ev.derivative()[0]] == [-2 / 27, 1 / 27, 1 / 27]
    assert [float(v) for v in ev.derivative()[3]] == [0.0, 0.0, 0.0]


def test_sigmoid_ce_value_and_derivative_share_e_to_the_z() -> None:
    # e^z is formed once per element for ℓ and dℓ/dz. ℓ's lowered code is the direct
    # lowering's with exp(z) read from E0. dℓ/dz's is w·(E0·(1 - y) - p·y)/(E0 + 1) where the
    # direct one reads w·(-p·y + x0·(1 - y))/(x0 + 1), x0 = e^z: a two-term sum in the other
    # order, and a - b for a + (-b), both correctly rounded, so equal bit for bit (checked).
    import inspect

    from symjac.loss import _numbers
    from symjac.loss._kinds import REGISTRY

    tpl = REGISTRY["sigmoid_ce"].template(symjac.Loss("sigmoid_ce"), 1)
    direct = inspect.getsource(_numbers.lambdify(tpl.symbols, [tpl.stable_loss])).split("\n", 1)[1]
    assert inspect.getsource(tpl._vec_value).split("\n", 1)[1] == direct.replace("exp(z))", "E0)")
    rng = np.random.default_rng(11)
    pred = rng.standard_normal(2000) * rng.choice([1.0, 30.0, 1e4], 2000)
    label, w, p = rng.random(2000).round(3), rng.random(2000) * 3, rng.random(2000) * 3
    with _numbers.context():
        cols = [_numbers.from_floats(v) for v in (pred, label, w, p)]
        _, got = tpl.stable_at(cols, values=False)
        want = _numbers.lambdify(tpl.symbols, [tpl.stable_derivatives[0]])(*cols)[0]
    assert [repr(v) for v in got[:, 0]] == [repr(v) for v in want]


@pytest.mark.parametrize("classes, options", [(2, {}), (3, {"label_smoothing": 0.125}),
                                             (10, {"label_smoothing": 0.1, "weight": tuple(np.linspace(0.5, 2, 10))})])
def test_softmax_derivative_from_parts_matches_mpmath(classes: int, options: dict[str, Any]) -> None:
    # dℓ/dz_j from a_c and D formed once per element (their forms checked against the
    # stable derivatives when built). Independent oracle, mpmath at 80 digits:
    # dℓ/dz_j = W·softmax_j - a_j with a_c = ((1 - ε)·t_c + ε/C)·w_c and W = Σ_c a_c (mean
    # over the rows: /rows), to 1e-55 of the terms W·softmax_j + a_j that cancel.
    rng = np.random.default_rng(classes)
    rows = 20
    pred, label = rng.standard_normal((rows, classes)) * 4, rng.random((rows, classes))
    label /= label.sum(axis=1, keepdims=True)
    loss = symjac.Loss("softmax_ce", **options)
    got = symjac.loss_derivative(loss, pred, label)
    eps = mpmath.mpf(options.get("label_smoothing", 0))
    w = [mpmath.mpf(v) for v in options.get("weight", [1] * classes)]
    with mpmath.workdps(80):
        for i in range(rows):
            z = [mpmath.mpf(v) for v in pred[i]]
            a = [((1 - eps) * mpmath.mpf(label[i, c]) + eps / classes) * w[c] for c in range(classes)]
            exps = [mpmath.exp(v) for v in z]
            p = [e / mpmath.fsum(exps) for e in exps]
            for j in range(classes):
                want = (mpmath.fsum(a) * p[j] - a[j]) / rows
                scale = (mpmath.fsum(a) * p[j] + a[j]) / rows
                assert abs(got[i, j] - want) <= mpmath.mpf("1e-55") * scale


def test_near_tie_inputs_convert_to_int64_numerators() -> None:
    from symjac._exact import ExactArray
    from symjac.verifiers.pool._inputs import near_tie_input

    # near-tie values are 1 + q*2^-e: numerators below 2^53 over 2^e, far from int64's
    # limit, so no Python-int object array (which no tie-set cache keys and which is ~50x slower).
    g = resolve(symjac.Pool("max", 15, stride=1, padding="same"), (1, 1, 32, 32))
    ex = ExactArray.from_any(near_tie_input(g, np.float64))
    assert ex.num.dtype == np.int64
    # numerators up to 2^62 stay int64; beyond, Python ints (1 + 2^-33 next to 2^61: 2^94 / 2^33)
    assert ExactArray.from_any(np.array([2.0**61, 1.0])).num.dtype == np.int64
    assert ExactArray.from_any(np.array([2.0**62, 1.0])).num.dtype == object
    assert ExactArray.from_any(np.array([2.0**61, 1 + 2.0**-33])).num.dtype == object


def test_verify_finds_tie_sets_once_per_input_and_rows_only_for_probed_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    import symjac.verifiers.pool._reading as pool_verifier  # where the verifier's exact rows are read

    # max 3x3 same: four inputs (distinct, tied, all-negative, near-tie). The policy-"first"
    # route (forward, J^T dy) once each; the full tie sets and the (B, W, K) exact rows only
    # for the two probed passes (distinct, tied): the dense family checks take J^T dy and
    # its rounding bound from the stamp (O(support)). That is the structure above
    # ROUTE_BY_MEMBERS entries; below it (the default for this small shape) each input's
    # route reads its tie sets instead: one gather per input, and no axis route.
    members, rows, routes = [], [], []
    real_members, real_rows, real_route = _ties._max_members, pool_verifier.exact_rows, _ties._max_route

    def counting_members(g: object, xc: np.ndarray, pads: bool = False) -> np.ndarray:
        members.append(1)
        return real_members(g, xc, pads)  # type: ignore[arg-type]

    def counting_rows(*args: object) -> object:
        rows.append(1)
        return real_rows(*args)  # type: ignore[arg-type]

    def counting_route(g: object, xc: np.ndarray, tie: str) -> object:
        routes.append(tie)
        return real_route(g, xc, tie)  # type: ignore[arg-type]

    monkeypatch.setattr(_ties, "_max_members", counting_members)
    monkeypatch.setattr(pool_verifier, "exact_rows", counting_rows)
    monkeypatch.setattr(_ties, "_max_route", counting_route)
    spec = symjac.Pool("max", 3, stride=1, padding="same")
    forward, backward = _numpy_max3()  # not symjac's lowering, which would share the tie-set cache
    # The orders family adds 7 inputs (2 ramps per axis, one slab input per residue of a 3-cell span, on
    # both axes at once), all_negative, near_ties and extreme one each (extreme's values, 2^971 and more,
    # are routed as int64 with the power of two out, so its forward and its stamp share one route); the
    # non-finite input is read under both NaN policies (a route each, to read which one the forward
    # follows) and again under the one chosen: 5 routes more.
    for threshold, want_routes, want_members in ((0, ["first"] * 15, 3), (_ties.ROUTE_BY_MEMBERS, [], 15)):
        monkeypatch.setattr(_ties, "ROUTE_BY_MEMBERS", threshold)
        _caches.clear_caches(templates=False)
        members.clear(), rows.clear(), routes.clear()
        report = symjac.verify(spec, backward=backward, forward=forward, input_shape=(1, 1, 12, 12), timeout=None)
        assert report.ok, report
        assert report.stats["families"].keys() == {"distinct", "ties", "all_negative", "near_ties", "orders",
                                                   "extreme", "nonfinite"}
        assert routes == want_routes
        assert len(members) == want_members
        assert len(rows) == 3  # the probed passes: distinct, tied and non-finite (NaN and the infinities tie)


def _numpy_max3() -> tuple[Any, Any]:
    """max 3x3 stride 1 padding 1 on (1, 1, H, W) in plain NumPy, routing to the first maximum (row-major)."""
    def windows(x: np.ndarray) -> np.ndarray:
        xp = np.pad(x[0, 0], 1, constant_values=-np.inf)
        return np.lib.stride_tricks.sliding_window_view(xp, (3, 3)).reshape(x.shape[2:] + (9,))

    def forward(x: np.ndarray) -> np.ndarray:
        return windows(x).max(axis=-1)[None, None]

    def backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        di, dj = np.divmod(windows(x).argmax(axis=-1), 3)
        h, w = x.shape[2:]
        dx = np.zeros_like(x)
        np.add.at(dx[0, 0], (np.arange(h)[:, None] + di - 1, np.arange(w)[None, :] + dj - 1), dy[0, 0])
        return dx

    return forward, backward


def test_avg_vjp_beyond_int64_sums_per_weight_not_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    from fractions import Fraction

    # avg 7x7 same on 12x12: window divisors are products of 4..7 valid cells per axis,
    # so q = lcm(4, 5, 6, 7)^2 = 176,400 and dy ~ 2^44 overflows int64 per pair; the
    # sums go per (cell, weight) in int64 and only the 16 weights in Python ints.
    def no_object_pairs(*args: object) -> None:
        raise AssertionError("object accumulation over every (window, slot) pair")

    monkeypatch.setattr("symjac.pool._stamp._accumulate", no_object_pairs)
    spec = symjac.Pool("avg", 7, stride=1, padding="same")
    n = 12
    dy = (2**44 + np.arange(n * n, dtype=np.int64) * 977).reshape(1, 1, n, n)
    got = symjac.vjp(spec, (1, 1, n, n), dy)
    # the definition: cell (a, b) gets dy[i, j] / D(i, j) from every window (i, j) within 3 of it,
    # D(i, j) = (cells of rows i-3..i+3 inside) x (cells of columns j-3..j+3 inside)
    def count(i: int) -> int:
        return min(i + 3, n - 1) - max(i - 3, 0) + 1

    for a, b in [(0, 0), (5, 7), (11, 3)]:
        want = sum(Fraction(int(dy[0, 0, i, j]), count(i) * count(j))
                   for i in range(max(a - 3, 0), min(a + 3, n - 1) + 1) for j in range(max(b - 3, 0), min(b + 3, n - 1) + 1))
        assert got[0, 0, a, b] == want


def test_guarded_calls_reuse_one_thread_until_a_timeout() -> None:
    import threading

    from symjac.check._call import Guard

    # Starting a thread per call cost ~0.1 ms, as much as a small implementation's call:
    # calls under a timeout run in one kept thread; a call that times out keeps its
    # thread, and the next call gets another.
    seen: list[int] = []
    release = threading.Event()

    def fn(hang: bool) -> np.ndarray:
        seen.append(threading.get_ident())
        if hang:
            release.wait(30)
        return np.zeros(2)

    guard = Guard(fn, "backward", ("hang",), [], timeout=0.2)
    try:
        for _ in range(5):
            assert guard.array(False, shape=(2,), dtype=None) is not None
        assert guard.array(True, shape=(2,), dtype=None) is None  # timed out
        assert guard.array(False, shape=(2,), dtype=None) is not None
    finally:
        release.set()
    assert len(set(seen[:6])) == 1 and threading.get_ident() not in seen
    assert seen[6] != seen[5]
    assert [f.category for f in guard.findings] == ["timeout"]


@pytest.mark.parametrize(("spec", "colours"), [
    (symjac.Pool("avg", 3, stride=1, padding="same"), 9),   # a cell's 3x3 neighbourhood: 9 input colours
    (symjac.Pool("max", 2, stride=2), 4),                   # a window's 4 cells differ; windows share colours
])
def test_fd_oracle_makes_one_forward_call_per_input_colour(spec: symjac.Pool, colours: int) -> None:
    # One-sided differences start from the forward check's f(x): 1 + colours forward
    # calls (central differences took 1 + 2 x colours).
    shape = (1, 1, 8, 8)
    low = symjac.lower(spec, shape)
    report = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, families=(), timeout=None)
    assert report.ok and report.stats["fd_consistent"] is True, report
    assert report.stats["forward_calls"] == 1 + colours


@pytest.mark.parametrize(("mode", "expected"), [
    ("max", 1),  # d Max(a, r)/da once, whatever the slot count: Heaviside(a - r)
    ("avg", 1),  # d/da of (a + r)·w once (d/dr by symmetry), instantiated at w = 1/D for D in {4, 6, 9}
])
def test_sympy_work_is_per_pair_form_not_per_class(monkeypatch: pytest.MonkeyPatch, mode: str, expected: int) -> None:
    # 3x3 same on 8x8: 9 window classes (4 corners of 4 cells, 4 edges of 6, the
    # interior of 9). The two-argument form f(a, r) does not depend on the slot count,
    # so SymPy differentiates it once per mode (avg: once for every divisor), and nothing is lambdified.
    def no_codegen(*args: object, **kw: object) -> None:
        raise AssertionError("lambdify called")

    monkeypatch.setattr(sympy, "lambdify", no_codegen)
    spec = symjac.Pool(mode, 3, stride=1, padding="same")
    x = np.arange(64, dtype=np.float64).reshape(1, 1, 8, 8)
    diffs, classes = _count_diffs(monkeypatch, spec, (1, 1, 8, 8), x)  # type: ignore[arg-type]
    assert classes == 9
    assert diffs == expected


@pytest.mark.parametrize("divisor", [1, 2, 4, 6, 9, 225, 2**40 + 1])
def test_avg_template_per_divisor_is_the_one_sympy_derives_for_it(divisor: int) -> None:
    # The generic (a + r)·w at w = 1/D against SymPy differentiating (a + r)/D itself.
    a, r = sympy.symbols("a r", real=True)
    tmpl = avg.template(4, divisor)
    pair, derivative, weight = tmpl.pair, tmpl.derivative, tmpl.weight
    assert pair == (a + r) / sympy.Integer(divisor)
    assert derivative == sympy.diff((a + r) / sympy.Integer(divisor), a) == sympy.Rational(1, divisor)
    assert weight == Fraction(1, divisor)


def test_small_geometries_build_their_lines_once() -> None:
    # A line costs ~5 us to build, as much as using it on a 32^2 map: small geometries
    # keep theirs (read-only, shared); large ones build each line when reached (no
    # O(nnz) index arrays kept alive beside the (B, W, K) rows).
    small = resolve(symjac.Pool("avg", 3, stride=1, padding="same"), (1, 1, 32, 32))
    first = lines(small)
    assert first is lines(small) and len(list(first)) == 9
    assert all(not line.cells.flags.writeable for line in first)
    big = resolve(symjac.Pool("avg", 3, stride=1, padding="same"), (1, 1, 400, 400))
    assert big.cells.size > _symbolic.CACHED_LINES
    assert not isinstance(lines(big), tuple)


def test_axis_colourings_are_built_once_per_distinct_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    from symjac.pool import _graph

    # A square map's two axes are the same windows: one conflict graph, coloured once,
    # for each of the window and input colourings (4 graphs before); a 32 x 17 map has two.
    built = []
    real = _graph._colour

    def counting(n: int, node: np.ndarray, key: np.ndarray) -> object:
        built.append(n)
        return real(n, node, key)

    monkeypatch.setattr(_graph, "_colour", counting)
    spec = symjac.Pool("max", 3, stride=1, padding="same")
    for shape, graphs in (((1, 1, 32, 32), 2), ((1, 1, 32, 17), 4)):
        _caches.clear_caches()
        built.clear()
        g = resolve(spec, shape)
        colours, n = _graph.window_colouring(g)
        _graph.input_colouring(g)
        assert len(built) == graphs
        assert n == 9
        # windows of one colour read disjoint cells: each cell is read by at most one of them
        for c in range(n):
            cells = g.cells[colours == c][g.valid[colours == c]]
            assert np.unique(cells).size == cells.size


def test_main_pass_rows_are_released_before_the_tied_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import weakref

    from symjac.verifiers.pool._verifier import _Verifier

    # Each probed pass holds (B, W, K) observed and exact rows; the tied pass must not
    # add its own on top of the main pass's (k15 256^2: ~240 MB more at the peak).
    real = _Verifier.backward_pass
    alive: list[bool] = []
    refs: list[weakref.ref[np.ndarray]] = []

    def recording(self: _Verifier, *args: object, **kw: object) -> object:
        gc.collect()
        alive.append(any(r() is not None for r in refs))
        found = real(self, *args, **kw)  # type: ignore[arg-type]
        if found is not None:
            refs.extend([weakref.ref(found[0].obs), weakref.ref(found[1].rows)])
        return found

    monkeypatch.setattr(_Verifier, "backward_pass", recording)
    forward, backward = _numpy_max3()
    report = symjac.verify(symjac.Pool("max", 3, stride=1, padding="same"), backward=backward, forward=forward,
                           input_shape=(1, 1, 12, 12), timeout=None)
    assert report.ok, report
    # the main pass, then the tied and the non-finite passes with nothing of the one before left
    assert alive == [False, False, False]


def _guarded_call_in_child() -> list[str]:
    from symjac.check._call import Guard

    guard = Guard(lambda: np.zeros(2), "forward", (), [], timeout=10.0)
    guard.array(shape=(2,), dtype=None)
    return [f.category for f in guard.findings]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_runs_guarded_calls_in_threads_of_its_own() -> None:
    import multiprocessing

    # The parent's kept call thread does not exist in a forked child (sweep --jobs forks):
    # the child must start its own, not hand its call to a thread that never runs it.
    assert _guarded_call_in_child() == []  # the parent now keeps a call thread
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_guarded_call_in_child).get(timeout=30) == []


def _count_numbers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record every SymPy number :meth:`ExactArray.to_sympy` builds."""
    from symjac import _exact

    built: list[tuple[int, int]] = []
    real = _exact._rational

    def counting(p: int, q: int) -> Any:
        built.append((p, q))
        return real(p, q)

    monkeypatch.setattr(_exact, "_rational", counting)
    return built


@pytest.mark.parametrize(("num", "den"), [
    (np.array([[0, 4, -4, 2], [0, 0, 6, 4]]), 4),           # int64 over a small denominator
    (np.array([3, -6, 3, 0, 2**61, 3]), 3 * 2**70),         # denominator beyond int64
    (np.array([2**70, 0, -(2**70), 2**70], dtype=object), 2**71),  # Python-int numerators
    (np.arange(-5000, 5000, 7) * 2**40, 2**45),             # a span too wide for a presence table
])
def test_to_sympy_builds_one_number_per_distinct_value(monkeypatch: pytest.MonkeyPatch, num: np.ndarray,
                                                       den: int) -> None:
    from symjac._exact import ExactArray

    built = _count_numbers(monkeypatch)
    got = ExactArray(num, den).to_sympy()
    # Independent reference: sympy.Rational(n, den) element by element, the slow way.
    want = [sympy.Rational(int(n), den) for n in num.reshape(-1)]
    assert got.shape == num.shape
    assert [(v, type(v)) for v in got.reshape(-1)] == [(v, type(v)) for v in want]
    assert len(built) == len(set(want))
    # to_fractions: the same values as Python's Fraction, one object per distinct value too
    fracs = ExactArray(num, den).to_fractions().reshape(-1)
    assert list(fracs) == [Fraction(int(n), den) for n in num.reshape(-1)]
    assert len({id(f) for f in fracs}) == len(set(want))


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_vjp_builds_one_sympy_number_per_distinct_gradient_value(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # 3x3 stride-1 SAME at 48^2 with dy = 1: the gradient of a cell is a sum of 1/D over
    # the windows that read it (avg; D in {4, 6, 9}) or the count of windows whose first
    # maximum it is (max, 0..9): a handful of values for 2,304 cells.
    spec = symjac.Pool(mode, 3, stride=1, padding="same")
    x = np.random.default_rng(0).permutation(48 * 48).reshape(48, 48) * 0.5
    built = _count_numbers(monkeypatch)
    dx = symjac.vjp(spec, x, np.ones((48, 48)))
    assert len(built) == len(set(dx.reshape(-1).tolist())) <= 30


@pytest.mark.parametrize(("spec", "shape", "boxes"), [
    (symjac.Pool("avg", 3, stride=1, padding="same"), (1, 1, 48, 48), 9),
    (symjac.Pool("avg", (3, 2), stride=(2, 1), padding=1, dilation=(2, 1), ceil_mode=True), (2, 3, 9, 8), 6),
    (symjac.AdaptivePool("avg", (6, 8)), (1, 12, 16), 4),  # windows all alike: 2x2 cells, step 2
])
def test_avg_vjp_and_forward_run_one_slice_operation_per_slot(monkeypatch: pytest.MonkeyPatch, spec: Any,
                                                              shape: tuple[int, ...], boxes: int) -> None:
    # Pool windows advance by the stride, so a slot's windows and cells are boxes of the
    # output and input grids: K slice operations, no (window, slot) index arrays or lines.
    from symjac.pool import _stamp
    from symjac.pool._symbolic import slabs

    def no_lines(*args: object) -> None:
        raise AssertionError("lines built")

    monkeypatch.setattr(_stamp, "lines", no_lines)
    g = resolve(spec, shape)
    found = slabs(g)
    assert found is not None and len(found) == boxes
    # each slab covers exactly the valid (window, slot) pairs of its slot, in order
    windows = np.arange(g.n_out).reshape(g.out_spatial)
    cells = np.arange(g.n_in).reshape(g.in_spatial)
    for box in found:
        w = windows[box.windows].reshape(-1)
        assert np.array_equal(w, np.flatnonzero(g.valid[:, box.k]))
        assert np.array_equal(cells[box.cells].reshape(-1), g.cells[w, box.k])
    # Independent reference: dx[c] = sum over the windows w reading c of dy[w] / D_w, and
    # y[w] = sum of x over w's cells / D_w, in Fractions, pair by pair from the window table.
    rng = np.random.default_rng(1)
    x = rng.integers(-20, 20, shape) * 0.25
    dy = rng.integers(-20, 20, g.output_shape) * 0.5
    want_dx = [Fraction(0)] * (g.batch * g.n_in)
    want_y = [Fraction(0)] * (g.batch * g.n_out)
    xc, dyc = g.to_canonical(x), g.to_canonical(dy, g.out_spatial)
    for b in range(g.batch):
        for w, k in zip(*np.nonzero(g.valid)):
            c, d = int(g.cells[w, k]), int(g.divisor[w])
            want_dx[b * g.n_in + c] += Fraction(float(dyc[b, w])) / d
            want_y[b * g.n_out + w] += Fraction(float(xc[b, c])) / d
    got_dx = g.to_canonical(symjac.vjp(spec, x, dy)).reshape(-1)
    got_y = g.to_canonical(symjac.forward(spec, x), g.out_spatial).reshape(-1)
    assert [Fraction(int(v.p), int(v.q)) for v in got_dx] == want_dx
    assert [Fraction(int(v.p), int(v.q)) for v in got_y] == want_y


def test_adaptive_windows_of_unequal_sizes_have_no_slabs() -> None:
    # 10 -> 7: window starts 0, 1, 2, 4, 5, 7, 8 do not advance by one step
    assert _symbolic.slabs(resolve(symjac.AdaptivePool("avg", (7,)), (10,))) is None


@pytest.mark.parametrize(("spec", "shape"), [
    (symjac.GlobalPool("avg"), (1, 1, 256, 256)),  # one window of 65,536 slots
    (symjac.AdaptivePool("avg", (3, 4)), (1, 12, 16)),  # 12 windows of 16 slots, all alike
])
def test_more_slots_than_windows_go_by_window_not_by_slot(spec: Any, shape: tuple[int, ...]) -> None:
    # A slab is one Python step a slot: a global pool would take 65,536 of them (1.6 s at
    # 256^2, verify's forward, VJP and bounds each), where lines take one a window.
    g = resolve(spec, shape)
    assert _symbolic.slabs(g) is None
    assert len(list(lines(g))) == g.n_out < g.cells.shape[1]


@pytest.mark.parametrize(("n", "kernel"), [(64, 3), (100, 31)])
def test_value_ids_use_the_narrowest_integer_type(n: int, kernel: int) -> None:
    # value_ids is one of the three nnz-sized arrays of a Jacobian: one byte an entry
    # while at most 128 distinct values. 1-D SAME avg of odd kernel k on n cells: window
    # w averages cells [w - k//2, w + k//2] within [0, n), so its entries are 1/count.
    J = symjac.jacobian(symjac.Pool("avg", (kernel,), stride=1, padding="same"), (n,))
    assert J.value_ids.dtype == np.int8
    half = kernel // 2
    counts = [min(w + half, n - 1) - max(w - half, 0) + 1 for w in range(n)]
    assert len(set(counts)) == len(J.table)
    assert [J.table[i] for i in J.value_ids.tolist()] == [sympy.Rational(1, counts[w]) for w in J.rows.tolist()]
    assert J.nnz == sum(counts)


def test_avg_weights_beyond_int64_many_divisors() -> None:
    # k = 255 SAME (exclude pad) on 400 cells: window w reads [w - 127, w + 127] ∩ [0, 399], so
    # its divisor runs over 128..255; their lcm is ~2^180, beyond int64 (an OverflowError before).
    # dx = J^T 1: cell c gets Σ over the windows reading it of 1 / D_w (Fractions, window by window).
    spec = symjac.Pool("avg", (255,), stride=1, padding="same")
    def span(w: int) -> range:
        return range(max(0, w - 127), min(399, w + 127) + 1)
    want = [Fraction(0)] * 400
    for w in range(400):
        for c in span(w):
            want[c] += Fraction(1, len(span(w)))
    got = symjac.vjp(spec, (400,), np.ones(400))
    assert [Fraction(int(v.p), int(v.q)) for v in got] == want
    x = np.arange(400.0)
    y = symjac.forward(spec, x)
    assert [Fraction(int(v.p), int(v.q)) for v in y] == [Fraction(sum(span(w)), len(span(w))) for w in range(400)]


def test_verify_passes_a_correct_pool_whose_weights_leave_int64() -> None:
    # k = 87 SAME on 100 cells: divisors 44..87, lcm ~2^123. Before, verify raised OverflowError.
    spec = symjac.Pool("avg", (87,), stride=1, padding="same")
    low = symjac.lower(spec, (1, 1, 100))
    report = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=(1, 1, 100))
    assert report.ok, report.summary()


def _networkx_greedy(n: int, node: np.ndarray, key: np.ndarray) -> list[int]:
    """networkx's greedy colouring in index order of nodes 0..n-1 joined when they share a key."""
    import itertools

    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    holders: dict[int, set[int]] = {}
    for a, k in zip(node.tolist(), key.tolist()):
        holders.setdefault(k, set()).add(a)
    for members in holders.values():
        graph.add_edges_from(itertools.combinations(sorted(members), 2))
    colours = nx.greedy_color(graph, strategy=lambda g, c: range(n))
    return [colours[i] for i in range(n)]


def _random_axis_specs(seed: int, count: int) -> list[tuple[Any, int]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[Any, int]] = []
    while len(out) < count:
        k, s, d = (int(v) for v in rng.integers(1, [9, 5, 4]))
        length = int(rng.integers(d * (k - 1) + 1, 41))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            spec: Any = symjac.Pool("max", (k,), stride=s, dilation=d, padding=int(rng.integers(0, (d * (k - 1)) // 2 + 1)),
                                    ceil_mode=bool(rng.integers(0, 2)))
        elif kind == 1:
            spec = symjac.AdaptivePool("avg", (int(rng.integers(1, length + 1)),))
        else:
            spec = symjac.GlobalPool("max", rank=1)
        try:
            resolve(spec, (1, 1, length))
        except symjac.SpecError:
            continue
        out.append((spec, length))
    return out


@pytest.mark.parametrize(("spec", "length"), _random_axis_specs(11, 40))
def test_axis_colourings_are_networkx_greedy_colourings(spec: Any, length: int) -> None:
    from symjac.pool import _graph

    # The colourings join nodes through their shared keys (cells, or windows) without
    # listing the pairs; they must be exactly the greedy colouring in index order of the
    # pairwise conflict graph, which networkx builds and colours independently.
    axis = resolve(spec, (1, 1, length)).axes[0]
    windows, slots = np.nonzero(axis.valid)
    cells = axis.cells[windows, slots]
    assert _graph._axis_window_colours(axis).tolist() == _networkx_greedy(axis.cells.shape[0], windows, cells)
    assert _graph._axis_input_colours(axis).tolist() == _networkx_greedy(axis.length, cells, windows)


def test_colouring_a_long_1d_axis_with_a_large_kernel_takes_one_pass_over_its_incidences(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from symjac.pool import _graph

    # 1-D audio: kernel 255 at stride 1 on 4000 samples. Every cell is read by up to 255
    # windows, so listing the pairs that share a cell took 4000·255²/2 ~ 1.3e8 steps per
    # graph (minutes). The colouring reads each (window, cell) incidence once: the keys it
    # touches, over both graphs, are exactly the valid slots twice. A kernel of 255 at
    # stride 1 needs (and gets) 255 colours (ceil(k/s), optimal for intervals).
    touched = []

    class CountingOr:  # np.bitwise_or, counting the keys each reduction reads
        def reduce(self, a: np.ndarray, *args: Any, **kw: Any) -> Any:
            touched.append(a.size)
            return np.bitwise_or.reduce(a, *args, **kw)

    class Numpy:  # _graph's numpy, but for bitwise_or
        bitwise_or = CountingOr()

        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

    monkeypatch.setattr(_graph, "np", Numpy())
    g = resolve(symjac.Pool("avg", (255,), stride=1, padding="same"), (1, 1, 4000))
    _caches.clear_caches()
    _graph.window_colouring.cache_clear()
    _graph.input_colouring.cache_clear()
    colours, n = _graph.window_colouring(g)
    cell_colours, n_in = _graph.input_colouring(g)
    assert (n, n_in) == (255, 255)
    assert 0 < sum(touched) <= 2 * int(g.valid.sum())
    for c in range(n):  # windows of one colour read disjoint cells
        read = g.cells[colours == c][g.valid[colours == c]]
        assert np.unique(read).size == read.size


@pytest.mark.parametrize(("spec", "length"), _random_axis_specs(12, 30) + [
    (symjac.Pool("avg", (255,), stride=1, padding="same", divisor="include_pad"), 600),
    (symjac.Pool("avg", (64,), stride=3, dilation=2, padding=60, ceil_mode=True), 500),
])
def test_axis_window_classes_number_the_whole_valid_patterns_in_sorted_order(spec: Any, length: int) -> None:
    # Class ids of an axis come from one int64 key a window, whatever the kernel (a run
    # of valid slots is two numbers); they must be the ids NumPy gives the whole
    # (valid pattern, include-pad count) rows, sorted lexicographically.
    axis = resolve(spec, (1, 1, length)).axes[0]
    rows = np.concatenate([axis.valid.astype(np.int64), axis.counted[:, None]], axis=1)
    expected = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
    assert _symbolic._axis_classes(axis.valid, axis.counted).tolist() == expected.tolist()


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_jacobian_and_vjp_take_no_python_step_per_slice(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # Many (N, C) slices of a small map (late layers: 512 x 64 slices of 4x4) were a
    # Python loop per slice in the Jacobian's COO, the stamp's pairs and the VJP: 0.66 s
    # for 32,768 slices of 4 windows. The work is now whole-array: the number of calls of
    # the per-index helpers is the same for 4 slices as for 1,024.
    from symjac.pool._geometry import Geometry

    calls: list[int] = []
    real = Geometry.flat_index

    def counting(self: Geometry, *args: Any) -> np.ndarray:
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(Geometry, "flat_index", counting)
    spec = symjac.Pool(mode, 2, stride=2)
    counts = []
    for slices in (4, 1024):
        x = np.random.default_rng(slices).permutation(slices * 16).reshape(slices, 1, 4, 4).astype(np.float64)
        calls.clear()
        J = symjac.jacobian(spec, x)
        dx = symjac.vjp(spec, x, np.ones((slices, 1, 2, 2)))
        counts.append(len(calls))
        # each 2x2 window sends its dy (1) to one cell (max) or 1/4 to each of its cells (avg)
        assert J.nnz == slices * 4 * (1 if mode == "max" else 4)
        assert float(np.asarray(dx, dtype=np.float64).sum()) == slices * 4
    assert counts[0] == counts[1]
