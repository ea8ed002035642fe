"""RoI Align and RoI max pooling through the native routes (issue 31): contrib/examples/roi.c, a C99
torchvision-style RoI Align and RoI pooling forward and backward, runs through ``--exec``, the process
route, ctypes and the offline probes/check loop.

Independent oracles: the kernel's forward equals tests/roi_reference.py (torchvision's CPU
``roi_align`` transcribed loop by loop in NumPy, reading nothing of symjac) bit for bit, in float64
and float32 (the same float operations in the same order), and RoI pooling's equals ``roi_pool_forward``; so the
correct kernel must pass, and its
planted defects (roi_kernels.h: each a kind reported against framework RoI Align kernels) must fail,
named by the box, the bin and its sample points.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.ctypes as sjc
import symjac.frameworks.native.process as sjp
from native_kernels import CC, ROOT, build, deadline, needs_cc  # noqa: F401 - deadline: a fixture
from roi_reference import roi_align_forward, roi_pool_forward
from symjac.cli._select import select_cases
from symjac.frameworks.native._offline import answer, run_offline
from symjac.frameworks.native._wire import settings
from symjac.io._case import verify_case
from symjac.pool._geometry import resolve

pytestmark = pytest.mark.usefixtures("deadline")

DEFAULT = symjac.RoiAlign(2)  # symjac's default boxes: edge cases drawn on a 6 x 7 map (roi_align.DEFAULT_BOXES)
# Given specs: aligned (the half-pixel offset), a fixed grid, 3 x 2 bins with 3 x 3 points, a
# scale of 1/2, and boxes of one's own on one map (one partly outside, one a vertical line).
SPECS = [
    symjac.RoiAlign(2, aligned=True),
    symjac.RoiAlign(2, sampling_ratio=2),
    symjac.RoiAlign((3, 2), aligned=True, sampling_ratio=3),
    symjac.RoiAlign((2, 3), spatial_scale=Fraction(1, 2)),
    symjac.RoiAlign(2, boxes=[(0, 2, 2, 9, 7), (1, -3, -3, 4, 4), (0, 8, 6, 16, 14), (0, 1, 1, 1, 5)],
                    spatial_scale=Fraction(1, 2), aligned=True),
]
DEFECTS = ("-DROI_NO_ALIGN_OFFSET", "-DROI_BACKWARD_NO_ZERO", "-DROI_BACKWARD_BIN_COUNT", "-DROI_CLAMP_BUG",
           "-DROI_POOL_ROUND_EVEN", "-DROI_POOL_END_FLOOR")
POOL = symjac.RoiPool(2)  # symjac's default boxes for RoI pooling (roi_pool.DEFAULT_BOXES): halves, overlaps, outside
POOL_SPECS = [symjac.RoiPool((3, 2)), symjac.RoiPool(2, spatial_scale=Fraction(1, 2)),
              symjac.RoiPool((2, 3), boxes=[(0, 0, 0, 6, 4), (1, -2, 1, 3, Fraction(7, 2)), (0, 4, 4, 4, 4)])]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if CC is None:
        pytest.skip("no C compiler (cc or gcc) on PATH")
    out = tmp_path_factory.mktemp("roi")
    built = {"roi": str(build(out, "roi.c")), "libroi": str(build(out, "roi.c", shared=True))}
    built.update({d: str(build(out, "roi.c", d)) for d in DEFECTS})
    return built


def _args(spec: symjac.RoiAlign) -> tuple:
    return spec.rois(), spec.output_size, float(spec.spatial_scale), spec.sampling_ratio, spec.aligned


# ------------------------------------------------------------------ the wire


def test_settings_carry_the_boxes_exactly_with_rank_and_no_pads() -> None:
    """The boxes travel as one settings line of exact numbers, K rows of 5 flat (the spec's own
    boxes, written here by hand); a RoI map is 2-D (rank 2) and has no pads."""
    spec = symjac.RoiAlign((2, 3), boxes=[(0, Fraction(1, 3), -2, 4, Fraction(7, 2)), (1, 0, 0, 5, 5)],
                           spatial_scale=Fraction(1, 16), sampling_ratio=2, aligned=True)
    lines = settings(spec, resolve(spec, (2, 1, 6, 6)).pads)
    assert lines == ["operator roi_align", "output_size 2 3", "boxes 0 1/3 -2 4 7/2 1 0 0 5 5", "spatial_scale 1/16",
                     "sampling_ratio 2", "aligned 1", "rank 2"]


def test_settings_a_request_cannot_carry_are_a_spec_error() -> None:
    """contrib/symjac_driver.h holds 16384 bytes of settings (SYMJAC_SETTINGS): 2000 boxes of 5
    numbers of at least 2 characters each take more, refused when the impl is made, naming the setting."""
    spec = symjac.RoiAlign(2, boxes=[(0, i, 1, i + 1, 2) for i in range(2000)])
    with pytest.raises(symjac.SpecError, match=r"settings of this RoiAlign take \d+ bytes \(the longest, 'boxes'.*"
                                               r"at most 16383"):
        sjp.impl([sys.executable, "-c", "pass"], spec)


SETTING_NUMBERS = r"""
#include "symjac_driver.h"
int main(void) {
    static symjac_request r;
    double v[8];
    int i, n;
    strcpy(r.settings, "operator roi_align\nboxes 0 -5/2 7/2 1/3 2.5 -1/16\nspatial_scale 1/16\n");
    n = symjac_setting_numbers(&r, "boxes", v, 8);
    for (i = 0; i < n; i++) printf("%.17g\n", v[i]);
    printf("cut %d absent %d\n", symjac_setting_numbers(&r, "boxes", v, 2), symjac_setting_numbers(&r, "box", v, 8));
    return 0;
}
"""


@needs_cc
def test_setting_numbers_reads_exact_numbers(tmp_path: pathlib.Path) -> None:
    """symjac_setting_numbers reads p/q as the division of two exact doubles: IEEE division is
    correctly rounded, so 1/3 is the double nearest 1/3 (Python's float(Fraction(1, 3)))."""
    (tmp_path / "numbers.c").write_text(SETTING_NUMBERS)
    run = subprocess.run([str(build(tmp_path, tmp_path / "numbers.c"))], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    *values, last = run.stdout.splitlines()
    assert [float(v) for v in values] == [0.0, -2.5, 3.5, float(Fraction(1, 3)), 2.5, -0.0625]
    assert last == "cut 2 absent 0"


# ------------------------------------------------------------------ the correct kernel


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
@needs_cc
@pytest.mark.parametrize("spec", [DEFAULT, *SPECS], ids=repr)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_forward_equals_the_independent_reference(kernels, spec, dtype) -> None:
    """The C forward equals tests/roi_reference.py bit for bit on every shape of the coverage plan."""
    impl, lib = sjp.impl(kernels["roi"], spec), sjc.impl(kernels["libroi"], spec)
    rng = np.random.default_rng(31)
    for shape in symjac.cover(spec):
        x = rng.integers(-64, 64, size=shape).astype(dtype)
        expected = roi_align_forward(x, *_args(spec))
        np.testing.assert_array_equal(impl.forward(x), expected)
        np.testing.assert_array_equal(lib.forward(x), expected)


@needs_cc
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_correct_kernel_passes_at_the_defaults_on_both_routes(kernels, dtype) -> None:
    """No shape, no input given: the coverage plan of the default boxes; process and ctypes agree."""
    on_process = symjac.verify(DEFAULT, sjp.impl(kernels["roi"], DEFAULT), dtype=dtype)
    on_ctypes = symjac.verify(DEFAULT, sjc.impl(kernels["libroi"], DEFAULT), dtype=dtype)
    assert on_process.ok, on_process
    assert on_ctypes.headline == on_process.headline


@needs_cc
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_correct_kernel_passes_given_specs(kernels, spec) -> None:
    report = symjac.verify(spec, sjp.impl(kernels["roi"], spec))
    assert report.ok, report


@needs_cc
def test_correct_kernel_passes_at_a_given_shape_and_input(kernels) -> None:
    spec = symjac.RoiAlign(2, boxes=[(0, Fraction(1, 2), 1, 4, Fraction(7, 2)), (0, -1, 3, 2, 6)], sampling_ratio=2)
    x = np.arange(2 * 5 * 5, dtype=np.float64).reshape(1, 2, 5, 5) / 8
    report = symjac.verify(spec, sjc.impl(kernels["libroi"], spec), x=x)
    assert report.ok, report


# ------------------------------------------------------------------ the planted defects

# (spec, defect): aligned=True for the ignored offset (at aligned=False there is none to ignore).
CAUGHT = {
    "-DROI_NO_ALIGN_OFFSET": symjac.RoiAlign(2, aligned=True),
    "-DROI_BACKWARD_BIN_COUNT": DEFAULT,
    "-DROI_CLAMP_BUG": DEFAULT,
}


@needs_cc
@pytest.mark.parametrize("defect", list(CAUGHT))
def test_planted_defect_fails_named_by_box_bin_and_sample_points(kernels, defect) -> None:
    spec = CAUGHT[defect]
    report = symjac.verify(spec, sjp.impl(kernels[defect], spec))
    assert not report.ok, defect
    text = report.details()
    assert "box " in text and "bin (" in text and "sample points" in text, text


@needs_cc
def test_ignored_offset_is_off_the_independent_reference(kernels) -> None:
    """The reference with the offset applied disagrees with the defective forward (the finding is real)."""
    spec = CAUGHT["-DROI_NO_ALIGN_OFFSET"]
    x = np.arange(84, dtype=np.float64).reshape(2, 1, 6, 7)
    assert not np.array_equal(sjp.impl(kernels["-DROI_NO_ALIGN_OFFSET"], spec).forward(x),
                              roi_align_forward(x, *_args(spec)))
    report = symjac.verify(spec, sjp.impl(kernels["-DROI_NO_ALIGN_OFFSET"], spec))
    assert "forward_values" in report.categories()


@needs_cc
def test_bin_count_and_clamp_defects_are_backward_only(kernels) -> None:
    """Their forwards equal the reference: the backward alone diverges (wrong weights, dropped points)."""
    x = np.arange(84, dtype=np.float64).reshape(2, 1, 6, 7)
    for defect, category in (("-DROI_BACKWARD_BIN_COUNT", "wrong_weights"), ("-DROI_CLAMP_BUG", "missing_windows")):
        impl = sjp.impl(kernels[defect], DEFAULT)
        np.testing.assert_array_equal(impl.forward(x), roi_align_forward(x, *_args(DEFAULT)))
        report = symjac.verify(DEFAULT, impl)
        assert "forward_values" not in report.categories() and category in report.categories(), report


@needs_cc
def test_backward_that_never_zeroes_reads_the_poison(kernels) -> None:
    """Without zeroing dx the backward adds into symjac's poison: dx depends on memory it never wrote."""
    report = symjac.verify(DEFAULT, sjp.impl(kernels["-DROI_BACKWARD_NO_ZERO"], DEFAULT))
    assert {"uninitialized_read", "unwritten_output"} <= set(report.categories()), report
    assert "elements of dx" in report.details()


# ------------------------------------------------------------------ RoI max pooling


@needs_cc
@pytest.mark.parametrize("spec", [POOL, *POOL_SPECS], ids=repr)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_roi_pool_forward_equals_the_independent_reference(kernels, spec, dtype) -> None:
    impl, lib = sjp.impl(kernels["roi"], spec), sjc.impl(kernels["libroi"], spec)
    rng = np.random.default_rng(31)
    for shape in symjac.cover(spec):
        x = rng.integers(-64, 64, size=shape).astype(dtype)
        expected, _ = roi_pool_forward(x, spec.rois(), spec.output_size, float(spec.spatial_scale))
        np.testing.assert_array_equal(impl.forward(x), expected)
        np.testing.assert_array_equal(lib.forward(x), expected)


@needs_cc
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_roi_pool_passes_at_the_defaults_on_both_routes(kernels, dtype) -> None:
    on_process = symjac.verify(POOL, sjp.impl(kernels["roi"], POOL), dtype=dtype)
    on_ctypes = symjac.verify(POOL, sjc.impl(kernels["libroi"], POOL), dtype=dtype)
    assert on_process.ok, on_process
    assert on_ctypes.headline == on_process.headline


@needs_cc
@pytest.mark.parametrize("spec", POOL_SPECS, ids=repr)
def test_roi_pool_passes_given_specs(kernels, spec) -> None:
    report = symjac.verify(spec, sjp.impl(kernels["roi"], spec))
    assert report.ok, report


@needs_cc
@pytest.mark.parametrize(("defect", "planted"), [("-DROI_POOL_ROUND_EVEN", {"half_even": True}),
                                                 ("-DROI_POOL_END_FLOOR", {"end_floor": True})])
def test_roi_pool_defect_fails_named_by_box_and_bin(kernels, defect, planted) -> None:
    """The defective forward is the reference's with the same defect planted (half to even: box 1's
    x2 = 5/2 rounds to 2, not 3; a bin end rounded down), and verify names the box and its bin."""
    impl = sjp.impl(kernels[defect], POOL)
    x = np.random.default_rng(5).integers(-64, 64, size=(2, 2, 6, 7)).astype(np.float64)
    np.testing.assert_array_equal(impl.forward(x), roi_pool_forward(x, POOL.rois(), (2, 2), **planted)[0])
    assert not np.array_equal(impl.forward(x), roi_pool_forward(x, POOL.rois(), (2, 2))[0])
    report = symjac.verify(POOL, impl)
    assert "forward_values" in report.categories(), report
    text = report.details()
    assert "box 1 (batch item 0, x -1/2..5/2, y 5/2..11/2), bin (" in text and "rows " in text, text


@needs_cc
def test_roi_pool_backward_that_never_zeroes_reads_the_poison(kernels) -> None:
    report = symjac.verify(POOL, sjc.impl(build(pathlib.Path(kernels["roi"]).parent, "roi.c", "-DROI_BACKWARD_NO_ZERO",
                                                shared=True), POOL))
    assert {"uninitialized_read", "unwritten_output"} <= set(report.categories()), report


# ------------------------------------------------------------------ --exec and probes/check

TOML = """[[case]]
name = "roi_align_aligned"
[case.operator]
kind = "roi_align"
output_size = [2, 2]
aligned = true
"""


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
@needs_cc
def test_exec_from_the_command_line(kernels, tmp_path: pathlib.Path) -> None:
    (tmp_path / "roi.toml").write_text(TOML)
    for kernel, code, word in (("roi", 0, "PASS roi_align_aligned"), ("-DROI_NO_ALIGN_OFFSET", 1, "FAIL roi_align")):
        run = cli_runner.symjac("verify", str(tmp_path / "roi.toml"), "--exec", kernels[kernel])
        assert run.returncode == code, run.stdout + run.stderr
        assert run.stdout.startswith(word)
    assert "box 0 (batch item 0, x 1..4, y 1..7/2), bin (0, 0): sample points" in run.stdout


@needs_cc
@pytest.mark.parametrize(("kind", "kernel"), [("roi_align", "roi"),
                                             pytest.param("roi_align", "-DROI_CLAMP_BUG", marks=pytest.mark.slow),
                                             pytest.param("roi_pool", "roi", marks=pytest.mark.slow),
                                             pytest.param("roi_pool", "-DROI_POOL_END_FLOOR", marks=pytest.mark.slow)])
@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_offline_rounds_give_the_process_routes_report(kernels, kind, kernel, tmp_path: pathlib.Path) -> None:
    (tmp_path / "roi.toml").write_text(f'name = "defaults"\n[operator]\nkind = "{kind}"\noutput_size = 2\n')
    case = select_cases([str(tmp_path / "roi.toml")], (), None)[0]
    assert case.operator == (DEFAULT if kind == "roi_align" else POOL)
    folder = tmp_path / "dir"
    while isinstance(got := run_offline(case, folder), int):
        assert answer(folder, exec=kernels[kernel]) == got
    online = verify_case(case, sjp.impl(kernels[kernel], case.operator), "float64")
    assert got.to_dict() == online.to_dict()
    assert got.ok == (kernel == "roi")
