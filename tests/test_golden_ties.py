"""Tied windows in golden data: which windows are tied, between which cells, and the dx of
each valid tie policy (first, last, split), so a kernel with another valid policy is told
which one it follows. Expected values: seed 001 by hand, PyTorch (first maximum) for the
others, and a plain loop over the windows for split."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from native_kernels import CC, build

import cli_runner

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "specs" / "seeds"
TIES = """name = "ties"
[operator]
kind = "pool"
mode = "max"
kernel = 3
stride = 1
padding = 1
[input]
shape = [2, 3, 6, 6]
generator = "ties"
seed = 4
"""
AVG = TIES.replace('mode = "max"', 'mode = "avg"').replace('name = "ties"', 'name = "avg"')


def golden(tmp_path, spec, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    if not isinstance(spec, Path):
        (tmp_path / "case.toml").write_text(spec)
        spec = tmp_path / "case.toml"
    out = tmp_path / "golden"
    r = cli_runner.symjac("golden", str(spec), "--out", str(out), *args)
    assert r.returncode == 0, r.stderr
    return out


def test_seed001_tied_windows_and_every_policy_by_hand(tmp_path):
    doc = json.loads((golden(tmp_path, SEEDS / "maxpool_ties.toml") / "maxpool_ties_3x3.json").read_text())
    a = doc["arrays"]
    # x = [[1,1,1],[1,0,1],[1,1,1]], 2x2 windows, stride 1: each window holds three 1s (tied) and the 0.
    assert a["tied"]["values"] == [1, 1, 1, 1]
    # the cells (flat, row-major) holding the 1s: window (0,0) 0,1,3; (0,1) 1,2,5; (1,0) 3,6,7; (1,1) 5,7,8
    assert a["tie_rows"]["values"] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert a["tie_cols"]["values"] == [0, 1, 3, 1, 2, 5, 3, 6, 7, 5, 7, 8]
    # dy = ones. first: (0,0) (0,1) (1,0) (1,2) (the spec's comment); last: (1,0) (1,2) (2,1) (2,2);
    # split: 1/3 to each tied cell, summed over the windows reading it
    assert a["dx_first"]["exact"] == ["1", "1", "0", "1", "0", "1", "0", "0", "0"] == a["dx"]["exact"]
    assert a["dx_last"]["exact"] == ["0", "0", "0", "1", "0", "1", "0", "1", "1"]
    assert a["dx_split"]["exact"] == ["1/3", "2/3", "1/3", "2/3", "0", "2/3", "1/3", "2/3", "1/3"]
    assert a["tie_weight_last"]["exact"] == ["0", "0", "1"] * 4 and a["tie_weight_split"]["exact"] == ["1/3"] * 12
    assert "ties" in doc and a["dx_split"]["max_abs_error"]["float32"][4] == 0.0  # no term: exact zero


def _split_by_loop(x, dy):
    """Max pooling 3x3, stride 1, padding 1 (padding ignored), gradient split evenly over each window's maxima."""
    dx = np.zeros_like(x)
    n, c, h, w = x.shape
    for b in range(n):
        for ch in range(c):
            for i in range(h):
                for j in range(w):
                    rows, cols = slice(max(i - 1, 0), i + 2), slice(max(j - 1, 0), j + 2)
                    win = x[b, ch, rows, cols]
                    at = win == win.max()
                    dx[b, ch, rows, cols] += at * dy[b, ch, i, j] / at.sum()
    return dx


def test_policies_against_pytorch_and_a_loop(tmp_path):
    torch = pytest.importorskip("torch")
    out = golden(tmp_path, TIES, "--format", "npz", "--dtype", "float64")
    z = np.load(out / "ties.npz")
    x, dy = z["x.float64"], z["dy.float64"]
    assert z["tied"].sum() > 0  # the tie family has tied windows

    def torch_dx(xa, dya):
        t = torch.tensor(xa, requires_grad=True)
        torch.nn.functional.max_pool2d(t, 3, stride=1, padding=1).backward(torch.tensor(dya))
        return t.grad.numpy()

    # PyTorch's CPU max pooling routes to the first maximum in row-major order; flipping both
    # spatial axes reverses that order (the windows are symmetric: stride 1, padding 1), so the
    # first maximum of the flipped input is the last one of the input
    flip = (2, 3)
    assert np.array_equal(z["dx_first.float64"], torch_dx(x, dy))
    assert np.array_equal(z["dx_last.float64"], np.flip(torch_dx(np.flip(x, flip).copy(), np.flip(dy, flip).copy()), flip))
    split = _split_by_loop(x, dy)
    assert np.all(np.abs(z["dx_split.float64"] - split) <= z["dx_split.float64.max_abs_error"])
    # tied[w]: the window's maximum is attained more than once
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    counts = (windows == windows.max(axis=(-1, -2), keepdims=True)).sum(axis=(-1, -2))
    assert np.array_equal(z["tied"], (counts > 1).astype(np.int64))


def test_no_tie_arrays_without_tied_windows(tmp_path):
    z = np.load(golden(tmp_path, AVG, "--format", "npz") / "avg.npz")
    assert not [k for k in z.files if k.startswith(("tie", "dx_"))]


def test_c_helper_names_the_policy_a_kernel_follows(tmp_path):
    if CC is None:
        pytest.skip("no C compiler")
    out = golden(tmp_path, TIES, "--format", "bin", "--dtype", "float64")
    exe = build(tmp_path, ROOT / "tests" / "golden_layer.c")
    # the contrib max kernel keeps the first maximum (x[at] > x[best]): policy first
    r = subprocess.run([str(exe), str(out / "ties"), "ties"], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "y: 0 bad, dx: 0 bad\ntie policy: first\n"), r.stderr
    avg = golden(tmp_path / "avg", AVG, "--format", "bin", "--dtype", "float64")
    r = subprocess.run([str(exe), str(avg / "avg"), "ties"], capture_output=True, text=True)
    assert r.returncode == 0 and "the case has no tied windows" in r.stdout


def test_a_tie_that_appears_once_rounded_gets_the_tie_arrays(tmp_path):
    # x = [[1, 1 + 2^-20]] under a (1, 2) max window: float32 (24 bits) holds both, the maximum is
    # the second cell; float16 (11 bits) rounds 1 + 2^-20 to 1, a tie the first maximum sends to
    # the first cell. Golden data is per dtype, each at its own input: float16 with the tie arrays
    # (dx_first [3/2, 0], dx_last [0, 3/2], dx_split [3/4, 3/4] for dy = 3/2), float32 without.
    spec = tmp_path / "t.toml"
    spec.write_text('name = "t"\n[operator]\nkind = "pool"\nmode = "max"\nkernel = [1, 2]\n'
                    '[input]\nx = [[1, "1048577/1048576"]]\ndy = [["3/2"]]\n')
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--dtype", "float16,float32", "--format",
                          "json,bin")
    assert r.returncode == 0, r.stderr
    half = json.loads((tmp_path / "g" / "t__float16.json").read_text())
    single = json.loads((tmp_path / "g" / "t__float32.json").read_text())
    assert half["dtypes"] == ["float16"] and single["dtypes"] == ["float32"]
    a = half["arrays"]
    assert a["x"]["exact"] == ["1", "1"] and a["y"]["exact"] == ["1"] and a["tied"]["values"] == [1]
    assert a["dx"]["exact"] == ["3/2", "0"] and a["dx_first"]["exact"] == ["3/2", "0"]
    assert a["dx_last"]["exact"] == ["0", "3/2"] and a["dx_split"]["exact"] == ["3/4", "3/4"]
    b = single["arrays"]
    assert b["x"]["exact"] == ["1", "1048577/1048576"] and b["dx"]["exact"] == ["0", "3/2"] and "tied" not in b
    index = json.loads((tmp_path / "g" / "t__float16" / "index.json").read_text())
    assert index["dtypes"] == ["float16"] and "dx_last.float16" in index["arrays"]


def test_a_case_written_per_dtype_never_takes_another_case_name(tmp_path):
    # case "a" (x = 1/3: float16 and float32 hold it differently) would be written as a__float16,
    # the name of the second case: refused before anything is written
    spec = tmp_path / "two.toml"
    spec.write_text('[[case]]\nname = "a"\n[case.operator]\nkind = "pool"\nmode = "max"\nkernel = [1, 2]\n'
                    '[case.input]\nx = [[1, "1/3"]]\n'
                    '[[case]]\nname = "a__float16"\n[case.operator]\nkind = "pool"\nmode = "max"\nkernel = [1, 2]\n'
                    '[case.input]\nx = [[1, 2]]\n')
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--dtype", "float16,float32")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "'a__float16'" in r.stderr and "rename" in r.stderr
    assert not (tmp_path / "g").exists() or not list((tmp_path / "g").iterdir())
