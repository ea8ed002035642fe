"""Spec files a user (or a fuzzer) might write by mistake: each an exit 2 with one line, never a
traceback, a hang or a silent exit 0 (issue 24, item 4); a byte-order mark is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_checks import one_line_error
from cli_runner import symjac

ROOT = Path(__file__).resolve().parent.parent
FIXED = str(ROOT / "examples" / "nntrainer_pool.py:fixed")
AVG = """[operator]
kind = "pool"
mode = "avg"
kernel = 2
stride = 1
padding = "same"
[input]
x = [[1, 2], [3, 4]]
dy = [[1, 1], [1, 1]]
"""


@pytest.mark.parametrize("command", ["verify", "golden"])
def test_an_empty_case_list_is_a_usage_error(tmp_path, command):
    (tmp_path / "empty.toml").write_text("case = []\n")
    extra = ["--impl", FIXED] if command == "verify" else ["--out", str(tmp_path / "out")]
    r = symjac(command, "empty.toml", *extra, cwd=tmp_path)
    one_line_error(r, "empty.toml", "case = []", "[[case]]")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("value", ["[" * 1000 + "]" * 1000, "{a = " * 1000 + "1" + "}" * 1000],
                         ids=["arrays", "inline-tables"])
def test_a_file_nested_a_thousand_levels_deep_is_a_usage_error(tmp_path, value):
    (tmp_path / "deep.toml").write_text(f"x = {value}\n")
    # a process of its own: "too deep" is the recursion limit's, which the conform tests' frameworks raise to 3000 here
    r = symjac("verify", "deep.toml", "--impl", FIXED, cwd=tmp_path, process=True, timeout=120)
    one_line_error(r, "deep.toml", "nested too deeply")


def test_a_quoted_recursive_glob_does_not_follow_a_symlink_cycle(tmp_path):
    sub = tmp_path / "d" / "sub"
    sub.mkdir(parents=True)
    (sub / "avg.toml").write_text(AVG)
    (sub / "up").symlink_to("..", target_is_directory=True)  # d/sub/up -> d: d/sub/up/sub/up/... without end
    (sub / "top").symlink_to("../..", target_is_directory=True)
    r = symjac("verify", "d/**/*.toml", "--impl", FIXED, cwd=tmp_path, timeout=60)  # (it did not end)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("PASS") == 1, r.stdout  # the one file, once


def test_a_file_named_twice_through_a_symlink_runs_once(tmp_path):
    (tmp_path / "avg.toml").write_text(AVG)
    (tmp_path / "alias.toml").symlink_to("avg.toml")
    r = symjac("verify", "avg.toml", "alias.toml", "--impl", FIXED, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("PASS") == 1, r.stdout


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + f'name = "bom"\n{AVG}'.encode())
    r = symjac("verify", "bom.toml", "--impl", FIXED, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("PASS bom"), (r.stdout, r.stderr)


# a newline is the default run's representative; the other control characters take the same path (slow)
@pytest.mark.parametrize("name", ["a\\nPASS fake", *(pytest.param(n, marks=pytest.mark.slow)
                                                     for n in ("tab\\there", "bell\\u0007", "line\\u2028sep"))])
@pytest.mark.parametrize("command", ["verify", "golden"])
def test_a_control_character_in_a_case_name_is_refused(tmp_path, name, command):
    (tmp_path / "nl.toml").write_text(f'[[case]]\nname = "{name}"\n' + AVG.replace("[operator]", "[case.operator]")
                                      .replace("[input]", "[case.input]"))
    extra = ["--impl", FIXED] if command == "verify" else ["--out", str(tmp_path / "out")]
    r = symjac(command, "nl.toml", *extra, cwd=tmp_path)
    line = one_line_error(r, "nl.toml", "control character")
    assert r.stdout == ""
    assert "PASS" not in line.split("name = ")[0]


MSE = """name = "{name}"
[operator]
kind = "loss"
loss = "mse"
scale = {scale}
[input]
pred = [{p}, -{p}]
label = [-{p}, {p}]
"""


def test_golden_of_a_derivative_past_float64_is_a_usage_error(tmp_path):
    # mse with reduction mean over n = 2: d/dpred_i = scale * 2 (pred_i - label_i) / n = scale * 2 * 1e10
    # = 2e310 > the largest float64, 1.797...e308; pred = 1e10 itself is finite in float32 and float64
    (tmp_path / "big.toml").write_text(MSE.format(name="big", scale="1e300", p="1e10"))
    r = symjac("golden", "big.toml", "--out", "out", "--dtype", "float64", cwd=tmp_path)
    line = one_line_error(r, "big.toml", "'big'", "derivative", "2.0000", "e+310", "float64")
    assert "Overflow" not in line
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


def test_golden_of_an_input_past_float32_is_a_usage_error(tmp_path):
    # pred = 1e308 is finite in float64 but not in float32 (largest 3.4028235e38): rounding it to
    # float32 raised OverflowError: cannot convert Infinity to integer ratio
    (tmp_path / "big.toml").write_text(MSE.format(name="huge", scale="1", p="1e308"))
    r = symjac("golden", "big.toml", "--out", "out", cwd=tmp_path)
    one_line_error(r, "big.toml", "'huge'", "pred", "1.0000", "e+308", "float32")
