"""Readable findings: exact values as simple rationals, cells named with their values,
missing windows reported as missing, the dtype in every headline, one default dtype."""

import dataclasses
import inspect
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import symjac

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def test_forward_expected_value_is_the_simplest_rational():
    # 1-D average over 3 cells of x = (1, 1, 0): y = 2/3 exactly (by hand). A forward
    # returning 0.5 is wrong; the finding shows 2/3, not the float64's binary fraction.
    spec = symjac.Pool("avg", (3,))
    report = symjac.verify(spec, backward=lambda x, dy: np.repeat(dy / 3, 3, axis=-1).astype(x.dtype),
                           forward=lambda x: np.full((1,), 0.5, x.dtype), x=[1.0, 1.0, 0.0])
    finding = next(f for f in report.findings if f.category == "forward_values")
    assert finding.expected == [Fraction(2, 3)]
    assert "expected: [2/3]" in str(report) and "6004799503160661" not in str(report)
    assert json.loads(report.to_json())["findings"][0]["expected"] == ["2/3"]


def test_wrong_cells_name_each_cell_with_exact_and_observed_values():
    # Max pool 2 over x = (3, 1) (1-D, by hand): the exact gradient goes to cell 0; this
    # backward sends it to cell 1 instead.
    spec = symjac.Pool("max", (2,))
    report = symjac.verify(spec, backward=lambda x, dy: np.array([0.0, dy[0]], x.dtype), x=[3.0, 1.0])
    finding = next(f for f in report.findings if f.category == "wrong_cells" and f.window is not None)
    assert finding.cells == ((0,), (1,))
    assert finding.expected == [1, 0] and all(isinstance(v, Fraction) for v in finding.expected)
    doc = json.loads(report.to_json())
    listed = next(f for f in doc["findings"] if f["category"] == "wrong_cells" and f["window"] is not None)
    assert listed["expected"] == [1, 0] and listed["cells"] == [[0], [1]]  # ints, not '1' beside 0
    text = str(report)
    assert "    cell  expected  observed\n    (0)   1         0.0\n    (1)   0         1.0" in text, text


def test_missing_window_is_reported_missing_not_as_a_huge_ulp_error():
    import nntrainer_pool

    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    report = symjac.verify(spec, backward=nntrainer_pool.buggy.backward, x=[[1.0, 2.0], [3.0, 4.0]])
    # Seed 000: 3 of 4 windows missing; the one window that arrives is exact.
    assert report.stats["windows_missing"] == 3 and report.stats["edges_missing"] == 5
    assert report.stats["max_ulp_error"] == 0.0
    assert "windows send no gradient" in str(report)


def test_str_has_the_headline_once_and_details_follow():
    import nntrainer_pool

    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    report = symjac.verify(spec, backward=nntrainer_pool.buggy.backward, input_shape=(2, 2))
    lines = str(report).splitlines()
    assert lines[0] == f"FAIL: {report.summary()}" and str(report).count(report.summary()) == 1
    assert lines[1].startswith("subject: Pool(") and report.details().splitlines()[0] == lines[1]
    error = symjac.VerificationError(report)
    assert str(error).splitlines()[0] == report.summary() and str(error).count(report.summary()) == 1


def test_input_shape_and_x_must_agree():
    import nntrainer_pool

    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    x = [[1.0, 2.0], [3.0, 4.0]]
    assert symjac.verify(spec, backward=nntrainer_pool.fixed.backward, x=x, input_shape=(2, 2)).ok
    with pytest.raises(symjac.InputError, match=r"input_shape=\(3, 3\) disagrees with x's shape \(2, 2\)"):
        symjac.verify(spec, backward=nntrainer_pool.fixed.backward, x=x, input_shape=(3, 3))


def test_one_default_dtype_everywhere():
    from symjac.cli._main import DEFAULT_DTYPE, build_parser

    defaults = {fn.__name__: inspect.signature(fn).parameters["dtype"].default
                for fn in (symjac.verify, symjac.verify_loss, symjac.check_loss_family)}
    # verify: None = the dtype of a float x when one is given (issue 9), else float64;
    # verify_loss the same with pred (issue 21)
    assert defaults == {"verify": None, "verify_loss": None, "check_loss_family": "float64"}
    lowered = symjac.lower(symjac.Pool("avg", 2), (2, 2))
    assert symjac.verify(symjac.Pool("avg", 2), backward=lowered.vjp, input_shape=(2, 2)).stats["dtype"] == "float64"
    mse = symjac.Loss("mse")  # the default inputs: float64
    assert symjac.verify_loss(mse, derivative=lambda z, y: 2 * (z - y) / z.size).stats["dtype"] == "float64"
    _, parsers = build_parser()
    for name in ("verify", "graph", "sweep"):
        assert parsers[name].get_default("dtype") == DEFAULT_DTYPE == "float64"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_headline_names_the_dtype(dtype):
    import nntrainer_pool

    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    for impl in (nntrainer_pool.fixed, nntrainer_pool.buggy):
        report = symjac.verify(spec, backward=impl.backward, input_shape=(3, 3), dtype=dtype)
        assert f"in {dtype}" in report.summary() and report.stats["dtype"] == dtype
    loss = symjac.Loss("sigmoid_ce", scale=8)
    for scale in (8, 1):  # with and without the loss scale (seed 003)
        report = symjac.verify_loss(loss, derivative=lambda z, y, s=scale: (s * (1 / (1 + np.exp(-z)) - y)).astype(z.dtype),
                                    pred=[0.0], label=[1.0], dtype=dtype)
        assert report.ok == (scale == 8)
        assert report.summary().startswith(f"sigmoid_ce in {dtype}: ") and report.stats["dtype"] == dtype


def test_loss_expected_values_are_exact_where_they_are_short_binary_fractions():
    # Seed 003: sigmoid_ce with S = 8 at z = 0, y = 1 (mean over one element): the exact
    # derivative is 8 * (sigmoid(0) - 1) = -4 (by hand); a derivative missing S gives -1/2.
    # At z = 1, y = 0: 8 * sigmoid(1) / 2 is irrational, shown as decimal digits.
    loss = symjac.Loss("sigmoid_ce", scale=8)
    report = symjac.verify_loss(loss, derivative=lambda z, y: (1 / (1 + np.exp(-z)) - y) / z.size, pred=[0.0, 1.0],
                                label=[1.0, 0.0])
    expected = json.loads(report.to_json())["findings"][0]["expected"]
    assert expected[0] == -2  # 8 * (1/2 - 1) / 2 elements
    import mpmath

    with mpmath.workdps(30):
        assert expected[1] == mpmath.nstr(4 / (1 + mpmath.exp(-1)), 17)
    assert "expected: [-2, 2.9242343145200195]" in str(report)


# -- renderings a person reads (issue 24, item 6: `str` ran to ~200 lines, `repr` was a 5,039-character dump)

def _many_findings(n):
    from symjac.check._report import Finding, Report

    findings = tuple(Finding("missing_windows", f"window ({i},0) gets nothing", window=(i, 0), cells=((i, 0), (i, 1)),
                             expected=["1/4", "1/4"], observed=[0.0, 0.0]) for i in range(n))
    return Report("Pool(mode='avg', ...)", findings, {"dtype": "float32"}, f"backward visits 0 of {n} output windows")


def test_str_of_a_long_report_fits_one_screen_and_says_what_is_wrong_first():
    from symjac.check._report import SCREEN_LINES

    report = _many_findings(60)  # 60 findings x 4 lines: 241 lines of details
    text = str(report).splitlines()
    assert len(text) <= SCREEN_LINES
    assert text[0] == "FAIL: backward visits 0 of 60 output windows"
    assert text[1] == "findings: missing_windows x60"
    assert text[-1].startswith("... ") and "print(report.details())" in text[-1]
    assert len(report.details().splitlines()) == 1 + 60 * 4  # nothing is lost from details()


def test_str_of_a_short_report_is_the_summary_then_every_detail():
    report = _many_findings(2)
    assert str(report) == "FAIL: backward visits 0 of 2 output windows\n" + report.details()


def test_repr_is_one_short_line_naming_verdict_categories_and_dtype():
    report = _many_findings(60)
    assert repr(report) == "<Report FAIL missing_windows: backward visits 0 of 60 output windows (float32)>"
    long = dataclasses.replace(report, headline="x" * 500)
    assert len(repr(long)) < 200 and repr(long).endswith("... (float32)>")


def test_repr_html_escapes_and_tabulates():
    from symjac.check._report import Finding, Report

    report = Report("<spec>", (Finding("wrong_cells", "a < b & c"),), {}, "1 <wrong> cell")
    page = report._repr_html_()
    assert "<b style='color:#cf222e'>FAIL</b>" in page and "1 &lt;wrong&gt; cell" in page
    assert "a &lt; b &amp; c" in page and "&lt;spec&gt;" in page and "<td><code>wrong_cells</code></td>" in page
