"""RoI Align at the extra input families every operator runs (issue 31): ``extreme`` (magnitudes near
the overflow threshold) and ``nonfinite`` (NaN and ±inf), with the convention stated in
``symjac/pool/_ops/roi_align.py``: a bin is IEEE 754's sum of ``w·x`` over the cells its sample points
read with weight > 0, so a NaN there makes the bin NaN, an infinity the infinity, both infinities NaN.

The correct implementation is ``tests/roi_reference.py``'s transcription of torchvision's kernel (it
reads nothing of symjac); the planted defects are the classic ones (NaN cleaned away before the op,
a half-precision accumulator).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac._exact import ExactArray
from symjac.pool._geometry import resolved
from symjac.verifiers.pool._inputs import family_input

from roi_reference import RoiAlignBackward, roi_align_forward

SPECS = [symjac.RoiAlign(2), symjac.RoiAlign(2, aligned=True), symjac.RoiAlign(2, sampling_ratio=2)]


def _args(spec):
    return spec.rois(), spec.output_size, float(spec.spatial_scale), spec.sampling_ratio, spec.aligned


def test_nan_in_a_weighted_cell_makes_the_bin_nan():
    """One bin, one point at (1/2, 1/2) of a 2 x 2 map (box 0..1, output_half_pixel): every cell weighs
    1/4. Derivation: a NaN anywhere gives NaN; +inf gives +inf; +inf and -inf give NaN; and the
    reference (torchvision's loop) agrees. A point on the grid (box 0..2: the point (1, 1) reads cell
    (1, 1) with weight 1 and the others with 0) is why the family keeps NaN off weight-0 reads: there
    torchvision's 0·NaN is NaN, a kernel skipping zero weights gives x[1, 1]."""
    spec = symjac.RoiAlign(1, boxes=[(0, 0, 0, 1, 1)], sampling_ratio=1)
    for cells, want in (({(0, 1): np.nan}, "nan"), ({(1, 0): np.inf}, np.inf),
                        ({(0, 0): np.inf, (1, 1): -np.inf}, "nan")):
        x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
        for (r, c), v in cells.items():
            x[0, 0, r, c] = v
        y = roi_align_forward(x, *_args(spec))[0, 0, 0, 0]
        assert np.isnan(y) if want == "nan" else y == want
    on_grid = symjac.RoiAlign(1, boxes=[(0, 0, 0, 2, 2)], sampling_ratio=1)
    x = family_input(resolved(on_grid, (1, 1, 2, 2)), "nonfinite", np.dtype(np.float64), 0)
    assert np.isfinite(x[0, 0, [0, 0, 1], [0, 1, 0]]).all()  # the weight-0 reads hold no NaN or ±inf


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_families_run_and_the_reference_passes(spec):
    a = _args(spec)
    g = resolved(spec, (2, 2, 6, 7))
    x = family_input(g, "nonfinite", np.dtype(np.float64), 0)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    report = symjac.verify(spec, forward=lambda x: roi_align_forward(x, *a), backward=RoiAlignBackward(*a))
    assert report.ok, report
    assert {"extreme", "nonfinite"} <= set(report.stats["families"])


@pytest.mark.parametrize("spec", SPECS[:2], ids=repr)
def test_nan_cleaned_before_the_op_is_caught(spec):
    """A port that runs ``np.nan_to_num`` on the map first (NaN to 0, ±inf to ±max): caught at the
    non-finite inputs, the finding naming the family."""
    a = _args(spec)
    report = symjac.verify(spec, forward=lambda x: roi_align_forward(np.nan_to_num(x), *a),
                           backward=RoiAlignBackward(*a))
    assert not report.ok and "forward_values" in report.categories()
    assert "non-finite" in report.details() or "nonfinite" in report.details()


def test_half_precision_accumulator_caught_at_extreme_magnitudes():
    """A float32 kernel that interpolates in float16 (its products overflow near float32's top): at
    distinct small inputs it is within float16 rounding only where values are exact, at the extreme
    family's magnitudes (float32 max / 2G) it gives inf: caught there."""
    spec = symjac.RoiAlign(2, aligned=True)
    a = _args(spec)
    fwd = lambda x: roi_align_forward(x.astype(np.float16), *a).astype(x.dtype)  # noqa: E731
    report = symjac.verify(spec, forward=fwd, dtype="float32", families=["extreme"])
    assert not report.ok and "extreme" in report.details()


# -- RoI max pooling -----------------------------------------------------------------------------------

from roi_reference import RoiPoolBackward, roi_pool_forward  # noqa: E402

POOL = symjac.RoiPool(2)
LINE = symjac.RoiPool(1, boxes=[(0, 0, 0, 2, 0)])  # one bin over cells (0, 0), (0, 1), (0, 2) of a 1 x 3 map


def _pool_args(spec):
    return spec.rois(), spec.output_size, float(spec.spatial_scale)


def _first_number_scan(cells):
    """A correct ``ignore`` scan (torchvision's loop started at the bin's first cell, a number replacing a
    NaN): maximumNumber of the cells, the first maximal one; NaN (the first cell) only where all are NaN."""
    best = 0
    for i, v in enumerate(cells):
        if (np.isnan(cells[best]) and not np.isnan(v)) or v > cells[best]:
            best = i
    return best


def _ignore_forward(x, rois, out, scale):
    y, arg = roi_pool_forward(x, rois, out, scale)  # the bins' cells, as the reference finds them
    y, arg = y.copy(), arg.copy()
    for k, c, ph, pw in np.ndindex(*y.shape):
        if arg[k, c, ph, pw] < 0:
            continue
        g = resolved(symjac.RoiPool(out, boxes=[tuple(rois[k])], spatial_scale=scale), (x.shape[0], 1) + x.shape[2:])
        cells = g.cells[ph * out[1] + pw][g.valid[ph * out[1] + pw]]
        flat = x[:, c].reshape(-1)[cells]
        best = cells[_first_number_scan(flat)]
        y[k, c, ph, pw], arg[k, c, ph, pw] = flat[_first_number_scan(flat)], best % (x.shape[2] * x.shape[3])
    return y, arg


@pytest.mark.parametrize("cells, policy, value, grad", [
    # Derivation (IEEE 754-2019 maximumNumber for 'ignore', maximum for 'propagate'; ±inf ordered; the first
    # maximal cell gets the gradient): one bin over three cells.
    ((np.nan, 1.0, 2.0), "ignore", 2.0, (0, 0, 1)),
    ((np.nan, 1.0, 2.0), "propagate", np.nan, (1, 0, 0)),
    ((1.0, np.nan, np.nan), "propagate", np.nan, (0, 1, 0)),
    ((np.nan, np.nan, np.nan), "ignore", np.nan, (1, 0, 0)),
    ((-np.inf, -np.inf, -np.inf), "ignore", -np.inf, (1, 0, 0)),
    ((-np.inf, np.nan, -np.inf), "ignore", -np.inf, (1, 0, 0)),
    ((1.0, np.inf, np.inf), "ignore", np.inf, (0, 1, 0)),
    ((np.inf, np.nan, -np.inf), "propagate", np.nan, (0, 1, 0)),
])
def test_roi_pool_convention_at_one_bin(cells, policy, value, grad):
    g = resolved(LINE, (1, 1, 1, 3))
    x = np.array(cells).reshape(1, 1, 1, 3)
    view = g.operator.nonfinite(g, x, policy)
    got = view.value[0, 0] if view.special[0, 0] else float(g.operator.exact_forward(g, view.exact).to_numpy()[0, 0, 0, 0])
    assert (np.isnan(got) and np.isnan(value)) or got == value
    rows = g.operator.rows(g, view.proxy, np.dtype(np.float64), lambda: view.exact).rows
    np.testing.assert_array_equal(rows[0, 0], grad)


def test_roi_pool_families_run_and_the_numpy_scan_passes_as_propagate():
    a = _pool_args(POOL)
    report = symjac.verify(POOL, forward=lambda x: roi_pool_forward(x, *a)[0], backward=RoiPoolBackward(*a))
    assert report.ok, report
    assert {"extreme", "nonfinite"} <= set(report.stats["families"]) and report.stats["nan_policy"] == "propagate"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_scan_from_the_first_number_passes_as_ignore(dtype):
    a = _pool_args(POOL)
    fwd = lambda x: _ignore_forward(x, *a)[0]  # noqa: E731

    def bwd(x, dy):
        _, arg = _ignore_forward(x, *a)
        dx = np.zeros_like(x)
        for k, c, ph, pw in np.ndindex(*arg.shape):
            if arg[k, c, ph, pw] >= 0:
                r, col = divmod(int(arg[k, c, ph, pw]), x.shape[3])
                dx[int(a[0][k, 0]), c, r, col] += dy[k, c, ph, pw]
        return dx

    report = symjac.verify(POOL, forward=fwd, backward=bwd, dtype=dtype)
    assert report.ok, report
    assert report.stats["nan_policy"] == "ignore"


def test_torchvision_sentinel_scan_is_reported_at_bins_of_minus_inf_and_nan_only():
    """torchvision's ``roi_pool_kernel.cpp`` loop (``maxval = -FLT_MAX``, ``x > maxval``; the reference's
    ``sentinel_scan``) in float32: it ignores NaN as the ``ignore`` policy does, but a bin of -inf (and NaN)
    only is -FLT_MAX with no gradient where the convention says -inf (NaN) and its first cell: findings of the
    nonfinite family at those bins only, the forward's values -FLT_MAX (the old code ran no nonfinite family
    for RoiPool and passed it)."""
    a = _pool_args(POOL)
    report = symjac.verify(POOL, forward=lambda x: roi_pool_forward(x, *a, sentinel_scan=True)[0],
                           backward=RoiPoolBackward(*a, sentinel_scan=True), dtype="float32")
    assert not report.ok and {f.family for f in report.findings} == {"nonfinite"}, report
    assert set(report.categories()) >= {"forward_values", "missing_windows"} and report.stats["nan_policy"] == "ignore"
    fwd = next(f for f in report.findings if f.category == "forward_values")
    assert set(np.asarray(fwd.observed, dtype=np.float64).tolist()) == {-float(np.finfo(np.float32).max)}
    assert all(np.isnan(v) or v == -np.inf for v in np.asarray(fwd.expected, dtype=np.float64).tolist())


def test_roi_pool_letting_nan_win_in_the_backward_only_is_caught():
    """A kernel whose forward ignores NaN (the first-number scan) but whose backward routes by NumPy's
    argmax (the first NaN wins): gradients at bins holding a NaN and a number go to the NaN cell."""
    a = _pool_args(POOL)
    report = symjac.verify(POOL, forward=lambda x: _ignore_forward(x, *a)[0], backward=RoiPoolBackward(*a))
    assert not report.ok and {f.family for f in report.findings} == {"nonfinite"}
    assert "wrong_cells" in report.categories()


def test_onnxruntime_max_roi_pool_at_nan_follows_no_policy():
    """Measured on ONNX Runtime 1.32 (float32), one bin over three cells: a NaN stays until the next cell
    replaces it, and -inf only gives -FLT_MAX. symjac reports it at the nonfinite family, saying a NaN
    window's value depends on where its NaN sits; the adapter documents it as a known defect."""
    pytest.importorskip("onnxruntime")
    from symjac.frameworks import onnxruntime as sort

    spec, impl = sort.max_roi_pool((1, 1), rois=[(0, 0, 0, 2, 0)])
    for cells, want in (((5, np.nan, 1), 1.0), ((1, 5, np.nan), np.nan), ((np.nan, 5, 1), 5.0),
                        ((-np.inf,) * 3, -float(np.finfo(np.float32).max))):
        y = impl.forward(np.array(cells, dtype=np.float32).reshape(1, 1, 1, 3))[0, 0, 0, 0]
        assert (np.isnan(y) and np.isnan(want)) or y == want
    spec, impl = sort.max_roi_pool((2, 2))
    report = symjac.verify(spec, impl, dtype="float32")
    assert not report.ok and {(f.category, f.family) for f in report.findings} == {("forward_values", "nonfinite")}
    assert "depends on where its NaN sits" in report.summary()
    known = sort.known_defect(next(c for c in sort.configurations() if c.op == "max_roi_pool"))
    assert known is not None and known.families == ("nonfinite",)


# -- RoI Align, reduction="max" (ONNX RoiAlign mode="max") ---------------------------------------------

from roi_reference import align_points  # noqa: E402

ALIGN_MAX = [symjac.RoiAlign(2, reduction="max"), symjac.RoiAlign(2, aligned=True, sampling_ratio=2, reduction="max")]


def _bins(x, spec):
    """Per (k, c, ph, pw): the bin's candidates ``(w·x, n, row, col, w)`` in ONNX Runtime's order (point, then
    corner; an outside point four of weight 0 at cell (0, 0)), in x's dtype (tests/roi_reference.py's sampling)."""
    t = x.dtype.type
    for idx, n, points in align_points(x, spec, t):
        plane, cands = x[n, idx[1]], []
        for r, col, w in (corner for corners in points for corner in corners):
            with np.errstate(invalid="ignore"):
                cands.append((t(w * plane[r, col]) if w != 0 else t(0), n, r, col, w))
        yield idx, cands


def _winner(cands, policy, sentinel=None):
    """A correct max of the candidates under a NaN policy (the first maximal one; ``sentinel``: a kernel's
    scan from that finite value with ``>``, a planted defect)."""
    if sentinel is not None:
        best = None
        for cand in cands:
            if cand[0] > (sentinel if best is None else best[0]):
                best = cand
        return best
    nans = [cand for cand in cands if np.isnan(cand[0])]
    if nans and (policy == "propagate" or len(nans) == len(cands)):
        return nans[0]
    best = None
    for cand in cands:
        if not np.isnan(cand[0]) and (best is None or cand[0] > best[0]):
            best = cand
    return best


def _align_max(spec, policy="propagate", sentinel=None):
    def forward(x):
        y = np.zeros((len(spec.boxes), x.shape[1]) + spec.output_size, dtype=x.dtype)
        for idx, cands in _bins(x, spec):
            best = _winner(cands, policy, sentinel) if cands else None
            y[idx] = best[0] if best is not None else (sentinel if cands and sentinel is not None else 0)
        return y

    def backward(x, dy):
        dx = np.zeros_like(x)
        for idx, cands in _bins(x, spec):
            best = _winner(cands, policy, sentinel) if cands else None
            if best is not None and best[4] != 0:
                dx[best[1], idx[1], best[2], best[3]] += dy[idx] * best[4]
        return dx

    return forward, backward


@pytest.mark.parametrize("policy", ["propagate", "ignore"])
@pytest.mark.parametrize("spec", ALIGN_MAX, ids=repr)
def test_align_max_families_run_and_a_correct_max_passes(spec, policy):
    fwd, bwd = _align_max(spec, policy)
    report = symjac.verify(spec, forward=fwd, backward=bwd)
    assert report.ok, report
    assert {"extreme", "nonfinite"} <= set(report.stats["families"]) and report.stats["nan_policy"] == policy


def _std_max_chain(spec):
    """ONNX Runtime's max-mode loop as written (``roialign.cc``): per point
    ``std::max(std::max(std::max(a1, a2), a3), a4)``, then ``output = std::max(output, point)`` from the first
    point's, where ``std::max(a, b)`` is ``(a < b) ? b : a`` (NaN on the left stays, on the right is dropped)."""
    def smax(a, b):
        return b if a < b else a

    def forward(x):
        y = np.zeros((len(spec.boxes), x.shape[1]) + spec.output_size, dtype=x.dtype)
        with np.errstate(invalid="ignore"):
            for idx, cands in _bins(x, spec):
                out = None
                for p in range(0, len(cands), 4):
                    a = [x.dtype.type(w * x[n, idx[1], r, col]) for _, n, r, col, w in cands[p:p + 4]]
                    v = smax(smax(smax(a[0], a[1]), a[2]), a[3])
                    out = v if out is None else smax(out, v)
                y[idx] = 0 if out is None else out
        return y

    return forward


def test_align_max_one_point_bin_by_hand_and_onnxruntime():
    """One bin, one point at (1/2, 1/2) of x = [[1, 2], [3, 4]] (box 0..1, output_half_pixel): four candidates
    x/4. Derivation under 'ignore' (maximumNumber): NaN at (1, 1) leaves max(1/4, 2/4, 3/4) = 0.75, gradient
    1/4 at (1, 0); under 'propagate' NaN, gradient 1/4 at (1, 1); +inf at (0, 0) with -inf at (1, 1): +inf,
    gradient 1/4 at (0, 0). ONNX Runtime 1.32 (measured, float32 and float64) gives 0.75 for the NaN at (1, 1)
    but NaN for one at (0, 0), where 'ignore' says max(2, 3, 4)/4 = 1: the std::max chain's position."""
    spec = symjac.RoiAlign(1, boxes=[(0, 0, 0, 1, 1)], sampling_ratio=1, reduction="max")
    g = resolved(spec, (1, 1, 2, 2))
    base = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    cases = [((1, 1), np.nan, "ignore", 0.75, (1, 0)), ((1, 1), np.nan, "propagate", np.nan, (1, 1)),
             ((0, 0), np.nan, "ignore", 1.0, (1, 1))]
    for (r, c), v, policy, want, (gr, gc) in cases:
        x = base.copy()
        x[0, 0, r, c] = v
        view = g.operator.nonfinite(g, x, policy)
        got = view.value[0, 0] if view.special[0, 0] else float(g.operator.exact_forward(g, view.exact).to_numpy()[0, 0, 0, 0])
        assert (np.isnan(got) and np.isnan(want)) or got == want, (r, c, policy)
        dx = g.operator.exact_vjp(g, view.exact, ExactArray.from_any(np.ones((1, 1, 1, 1))), None)
        expect = np.zeros((1, 1, 2, 2))
        expect[0, 0, gr, gc] = 0.25
        np.testing.assert_array_equal(dx.to_numpy(), expect)
    pytest.importorskip("onnxruntime")
    from symjac.frameworks import onnxruntime as sort

    _, impl = sort.roi_align(1, 1, rois=[(0, 0, 0, 1, 1)], sampling_ratio=1,
                             coordinate_transformation_mode="output_half_pixel", mode="max")
    for (r, c), want in (((1, 1), 0.75), ((0, 0), np.nan)):
        x = base.astype(np.float32)
        x[0, 0, r, c] = np.nan
        y = impl.forward(x)[0, 0, 0, 0]
        assert (np.isnan(y) and np.isnan(want)) or y == want


@pytest.mark.parametrize("spec", ALIGN_MAX, ids=repr)
def test_onnxruntime_align_max_is_its_std_max_chain_and_a_known_defect_at_nan(spec):
    """ONNX Runtime's forward equals the std::max-chain transcription at the nonfinite family's input (so the
    finding is its loop's, not an artefact), passes the extreme family, and is reported at NaN only
    (forward_values of the nonfinite family), which the adapter documents as a known defect."""
    pytest.importorskip("onnxruntime")
    from symjac.frameworks import onnxruntime as sort

    _, impl = sort.roi_align(*spec.output_size, sampling_ratio=max(spec.sampling_ratio, 0), mode="max",
                             coordinate_transformation_mode="half_pixel" if spec.aligned else "output_half_pixel")
    x = family_input(resolved(spec, (2, 2, 6, 7)), "nonfinite", np.dtype(np.float32), 0)
    np.testing.assert_array_equal(impl.forward(x), _std_max_chain(spec)(x))
    report = symjac.verify(spec, forward=impl.forward, dtype="float32")
    assert report.stats["families"]["extreme"] == 0
    assert not report.ok and {(f.category, f.family) for f in report.findings} == {("forward_values", "nonfinite")}
    config = next(c for c in sort.configurations("full") if c.op == "roi_align" and c.kwargs["mode"] == "max")
    assert sort.known_defect(config).families == ("nonfinite",)


@pytest.mark.parametrize("spec", ALIGN_MAX, ids=repr)
def test_align_max_std_max_chain_follows_no_nan_policy(spec):
    """The planted defect of the category (a NaN that wins or loses by its position): the std::max chain in
    NumPy with a correct backward, caught at the nonfinite family (the old code ran no family for the max mode
    and passed it)."""
    _, bwd = _align_max(spec)
    report = symjac.verify(spec, forward=_std_max_chain(spec), backward=bwd, dtype="float32")
    assert not report.ok and {f.family for f in report.findings} == {"nonfinite"}
    assert "forward_values" in report.categories()


def test_align_max_scan_from_a_float32_sentinel_is_caught_in_float64():
    """A double kernel scanning candidates from ``-FLT_MAX`` with ``>``: at the extreme family's negative slices
    (candidates w·x of |x| in (DBL_MAX/2, DBL_MAX], far below -FLT_MAX) the sentinel wins: caught there."""
    spec = ALIGN_MAX[1]
    fwd, bwd = _align_max(spec, sentinel=-float(np.finfo(np.float32).max))
    report = symjac.verify(spec, forward=fwd, backward=bwd, dtype="float64")
    assert not report.ok and {f.family for f in report.findings} == {"extreme"}
