"""The symjac command line, run as a user would (a subprocess), and its exit codes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED000 = "specs/seeds/nntrainer_avgpool_same_2x2.toml"
BUGGY = "examples/nntrainer_pool.py:buggy"
FIXED = "examples/nntrainer_pool.py:fixed"


def symjac(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "symjac", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_verify_seed_000_buggy_exits_1_with_the_diagnosis():
    r = symjac("verify", SEED000, "--impl", BUGGY)
    assert r.returncode == 1, r.stderr
    # Seed 000: backward visits only the first of four windows; a quarter of the mass arrives.
    assert "backward visits 1 of 4 output windows: (0,1), (1,0), (1,1) get nothing; 1/4 of the gradient mass arrives" in r.stdout


def test_verify_seed_000_fixed_exits_0():
    r = symjac("verify", SEED000, "--impl", FIXED, "--dtype", "float32")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("PASS")


def test_verify_json_has_stable_keys():
    r = symjac("verify", SEED000, "--impl", BUGGY, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["windows_missing"] == 3 and doc["windows_total"] == 4 and doc["ok"] is False
    assert {"category", "window", "cells", "expected", "observed"} <= set(doc["findings"][1])


def test_verify_loss_family_file(tmp_path):
    # Seed 003: unscaled sibling derivatives; only MSE applies S.
    impl = tmp_path / "losses_impl.py"
    impl.write_text(
        "import numpy as np\n"
        "from types import SimpleNamespace as NS\n"
        "S = 8\n"
        "sigmoid_ce = NS(derivative=lambda z, y: 1 / (1 + np.exp(-z)) - y)\n"
        "def _softmax(z, y):\n"
        "    e = np.exp(z - z.max(axis=-1, keepdims=True)); return (e / e.sum(axis=-1, keepdims=True) - y) / z.shape[0]\n"
        "softmax_ce = NS(derivative=_softmax)\n"
        "kld = NS(derivative=lambda q, p: -p / q)\n"
        "constant_derivative = NS(derivative=lambda z, y=None: np.ones_like(z))\n"
        "mse = NS(derivative=lambda z, y: S * 2 * (z - y) / z.size)\n"
    )
    r = symjac("verify", "specs/seeds/loss_scale_family.toml", "--impl", f"{impl}")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert sum("FAIL" in line for line in lines) == 4 and sum(line.startswith("PASS mse") for line in lines) == 1
    assert all("loss scale" in line for line in lines if line.startswith("FAIL")), r.stdout


@pytest.mark.parametrize("args, message", [
    (("verify", "no/such/file.toml", "--impl", FIXED), "no such spec file"),
    (("verify", SEED000, "--impl", "examples/nntrainer_pool.py:nothing"), "has no attribute 'nothing'"),
    (("verify", SEED000, "--impl", "no_such_module_xyz:impl"), "importing no_such_module_xyz failed"),
    (("golden", SEED000, "--out", "/tmp/symjac-cli-test", "--format", "xml"), "--format 'xml' is not valid"),
    (("graph", SEED000, "--out", "/tmp/x.gif"), "give a .dot, .png or .svg file"),
])
def test_usage_errors_exit_2_with_one_line(args, message):
    r = symjac(*args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_impl_lacking_backward_exits_2(tmp_path):
    impl = tmp_path / "fwd_only.py"
    impl.write_text("def forward(x):\n    return x\n")
    r = symjac("verify", SEED000, "--impl", str(impl))
    assert r.returncode == 2 and "no callable 'backward'" in r.stderr and "Traceback" not in r.stderr


def test_unknown_spec_key_names_file_key_and_nearest(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernal = 2\n[input]\nshape = [2, 2]\n')
    r = symjac("explain", str(bad))
    assert r.returncode == 2
    assert f"{bad} [operator]: unknown key 'kernal'; did you mean 'kernel'?" in r.stderr


def test_explain_prints_templates_and_latex():
    r = symjac("explain", SEED000)
    assert r.returncode == 0
    # Seed 000's four windows hold 4, 2, 2 and 1 valid cells: four classes.
    assert "4 window classes" in r.stdout and "y[0,1] = x[0,1]/2 + x[1,1]/2" in r.stdout
    assert "dy[1,1]/dx[1,1] = 1" in r.stdout
    r = symjac("explain", SEED000, "--latex")
    assert r"\frac{x[0,1]}{2}" in r.stdout


def test_golden_is_byte_identical_and_exact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        r = symjac("golden", SEED000, "--out", str(out), "--format", "json,npz,bin", "--dtype", "float32,float64")
        assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    doc = json.loads((a / "nntrainer_avgpool_same_2x2.json").read_text())
    # Seed 000: gradient [0.25, 0.75, 0.75, 2.25] for dy = ones.
    assert doc["arrays"]["dx"]["exact"] == ["1/4", "3/4", "3/4", "9/4"]
    assert doc["provenance"]["symjac_version"] and len(doc["provenance"]["spec_hash"]) == 64
    npz = np.load(a / "nntrainer_avgpool_same_2x2.npz")
    assert npz["y.float32"].dtype == np.float32 and npz["y.float32"].tolist() == [[2.5, 3.0], [3.5, 4.0]]
    index = json.loads((a / "nntrainer_avgpool_same_2x2" / "index.json").read_text())
    meta = index["arrays"]["dx.float64"]
    raw = np.fromfile(a / "nntrainer_avgpool_same_2x2" / meta["file"], dtype=meta["dtype"]).reshape(meta["shape"])
    assert raw.tolist() == [[0.25, 0.75], [0.75, 2.25]]


def test_graph_writes_dot_and_png(tmp_path):
    dot = tmp_path / "g.dot"
    r = symjac("graph", SEED000, "--impl", BUGGY, "--out", str(dot))
    assert r.returncode == 1, r.stderr  # the picture is written, and the finding sets the exit code
    text = dot.read_text()
    assert text.startswith("digraph") and text.count('fillcolor="#d62728"') == 3  # the 3 missing windows
    png = tmp_path / "g.png"
    r = symjac("graph", SEED000, "--impl", BUGGY, "--out", str(png))
    assert r.returncode == 1
    assert symjac("graph", SEED000, "--impl", FIXED, "--out", str(tmp_path / "ok.dot")).returncode == 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "pip install 'symjac[plot]'" in r.stdout and png.with_suffix(".dot").exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_console_script_is_installed():
    exe = shutil.which("symjac")
    if exe is None:
        pytest.skip("console script not on PATH (package not installed with pip)")
    r = subprocess.run([exe, "verify", SEED000, "--impl", FIXED], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0


def test_golden_loss_with_default_inputs(tmp_path):
    spec = tmp_path / "mse_none.toml"
    spec.write_text('[operator]\nkind = "loss"\nloss = "mse"\nreduction = "none"\n')
    r = symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--format", "json,npz")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "g" / "mse_none.json").read_text())
    assert doc["provenance"]["generator"] == "default"
    from fractions import Fraction

    pred, label, up, der = ([Fraction(v) for v in doc["arrays"][k]["exact"]] for k in ("pred", "label", "upstream", "derivative"))
    # reduction none, S = 1: the derivative is upstream * d(z - y)^2/dz = upstream * 2 (z - y).
    assert der == [u * 2 * (z - y) for z, y, u in zip(pred, label, up)]
    npz = np.load(tmp_path / "g" / "mse_none.npz")
    assert npz["provenance.json"].shape == ()  # 0-d arrays keep their shape
