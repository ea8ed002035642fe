"""``symjac census`` on the command line (run in process: :mod:`cli_runner`); counts derived by hand."""

import json
from pathlib import Path

import numpy as np
from cli_runner import symjac

ROOT = Path(__file__).resolve().parent.parent
SPEC = """
[operator]
kind = "pool"
mode = "max"
kernel = [2]
[input]
x = [[[1, 1, 1, "2049/2048", "1/3", "5/16", 5, 3]]]
"""


def run(*args, cwd):
    return symjac("census", *args, cwd=cwd)


def test_census_rounding_the_spec_input(tmp_path):
    (tmp_path / "c.toml").write_text(SPEC)
    # float16: (1, 1) exact tie; (1, 1 + 2^-11) rounds to (1, 1): rounding tie; (1/3, 5/16) and
    # (5, 3) stay distinct. float64 holds 1 + 2^-11: only the exact tie.
    r = run("c.toml", "--dtype", "float16", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["totals"] == {"untied": 2, "exact": 1, "rounding": 1, "broken": 0}
    assert doc["differs"] == {"bifurcation": [0], "compensation": [0]}
    r = run("c.toml", "--dtype", "float64", cwd=tmp_path)
    assert r.returncode == 0 and "untied 3, exact 1, rounding 0, broken 0" in r.stdout


def test_census_npy_inputs(tmp_path):
    (tmp_path / "c.toml").write_text(SPEC)
    # The implementation saw float32 (4, 4, 1, 2); the float64 reference is (4, 4 + 2^-30, 1, 2):
    # window 0 is a rounding tie, window 1 untied.
    np.save(tmp_path / "x.npy", np.array([[[4, 4, 1, 2]]], np.float32))
    np.save(tmp_path / "ref.npy", np.array([[[4, 4 + 2.0**-30, 1, 2]]], np.float64))
    r = run("c.toml", "--x", "x.npy", "--reference", "ref.npy", "--betas", "0,1/2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "untied 1, exact 0, rounding 1, broken 0" in r.stdout
    assert "beta:0 vs beta:1/2 differs through the compensation zone in batch items [0]" in r.stdout


def test_census_usage_errors(tmp_path):
    (tmp_path / "c.toml").write_text(SPEC)
    r = run("c.toml", "--betas", "1", cwd=tmp_path)
    assert r.returncode == 2 and "give two values" in r.stderr
    r = run("c.toml", "--x", "missing.npy", cwd=tmp_path)
    assert r.returncode == 2 and "missing.npy" in r.stderr


SHAPE_ONLY = """
[operator]
kind = "pool"
mode = "max"
kernel = [2, 2]
[input]
shape = [1, 1, 7, 7]
"""


def test_census_generates_the_input_from_shape(tmp_path):
    (tmp_path / "c.toml").write_text(SHAPE_ONLY)
    # 7x7, kernel 2, stride 2, valid: floor((7 - 2) / 2) + 1 = 3 windows per axis, 9 in all;
    # the default generator ("distinct") gives distinct values: every window untied.
    r = run("c.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input (1, 1, 7, 7) generated (distinct, seed 0) from [input] shape" in r.stdout
    assert "float64: 9 windows: untied 9, exact 0, rounding 0, broken 0" in r.stdout


def test_census_without_input_uses_the_coverage_plan(tmp_path):
    (tmp_path / "c.toml").write_text(SHAPE_ONLY.split("[input]")[0])
    r = run("c.toml", "--dtype", "float16", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["input"].startswith("no [input]: input (1, 1, ")
    assert "the largest shape of the coverage plan" in doc["input"]
    shape = [int(n) for n in doc["input"].split("(")[1].split(")")[0].split(",")]
    # kernel 2 = stride 2, valid: each spatial axis of length n has n // 2 windows.
    windows = (shape[2] // 2) * (shape[3] // 2)
    assert doc["totals"] == {"untied": windows, "exact": 0, "rounding": 0, "broken": 0}
