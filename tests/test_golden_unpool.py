"""Golden data of max unpooling (issue 31 item 1): x, the indices as the implementation gets them, y,
dy, dx, the Jacobian's COO and a JVP, every bound 0.

Oracles: PyTorch's ``max_unpool1d/2d`` forward and autograd (torch 2.13 CPU) where no index repeats;
at a repeated index, the derivation written beside the test (PyTorch's backward gathers dy for every
write, overwritten ones too, so it is no oracle there)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import cli_runner

ROOT = Path(__file__).resolve().parents[1]

REPEATED = """
[operator]
kind = "max_unpool"
kernel = [2]
indices = [[[1, 1, 3, 1]]]
write = "{write}"
[input]
x = [[[1, 2, 3, 4]]]
dy = [[[10, 20, 30, 40, 50, 60, 70, 80]]]
"""


def _golden(folder: Path, text: str, *args: str) -> cli_runner.Run:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.toml").write_text(text)
    return cli_runner.symjac("golden", str(folder / "case.toml"), "--out", str(folder / "golden"), *args)


def _exact(entry: dict) -> list:
    return [Fraction(v) for v in entry["exact"]]


@pytest.mark.parametrize("write, y, dx", [
    # Inputs 0, 1 and 3 all name output cell 1 (a repeated index), input 2 names cell 3; 8 outputs (L=4,
    # kernel = stride = 2: (4 - 1)·2 + 2). write "last": cell 1 keeps x[3] = 4, so y = [0, 4, 0, 3, 0, 0, 0, 0],
    # dy reaches input 3 (dy[1] = 20) and input 2 (dy[3] = 40); inputs 0 and 1 were overwritten: dx 0.
    ("last", [0, 4, 0, 3, 0, 0, 0, 0], [0, 0, 40, 20]),
    # write "first": cell 1 keeps x[0] = 1; dx = dy[1] at input 0, dy[3] at input 2, 0 at inputs 1 and 3.
    ("first", [0, 1, 0, 3, 0, 0, 0, 0], [20, 0, 40, 0]),
])
def test_a_repeated_index_follows_the_write_order_derivation(tmp_path, write, y, dx):
    r = _golden(tmp_path, REPEATED.format(write=write), "--format", "json,bin")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "golden" / "case.json").read_text())
    a = doc["arrays"]
    assert _exact(a["y"]) == y and _exact(a["dx"]) == dx
    assert a["indices"] == {"shape": [1, 1, 4], "values": [1, 1, 3, 1]}
    winner = 3 if write == "last" else 0
    assert (a["jac_rows"]["values"], a["jac_cols"]["values"], _exact(a["jac_values"])) == ([1, 3], [winner, 2], [1, 1])
    assert doc["repeated_outputs"] == [1] and doc["overwritten_inputs"] == sorted({0, 1, 3} - {winner})
    # the jvp is the forward of the tangent: t[winner] at output 1, t[2] at output 3
    t = _exact(a["t"])
    assert _exact(a["jvp"]) == [0, t[winner], 0, t[2], 0, 0, 0, 0]
    op = doc["operator"]
    assert op == {"operator": "max_unpool", "kernel": [2], "stride": [2], "padding": [[0, 0]], "flat": "plane",
                  "write": write, "rank": 1, "output_size": [8]}
    for name in ("y", "dx", "jac_values", "jvp"):  # copies: nothing rounds
        assert set(a[name]["max_abs_error"]["float32"]) == {0.0}
    folder = tmp_path / "golden" / "case"
    assert np.fromfile(folder / "indices.bin", dtype="<i8").tolist() == [1, 1, 3, 1]
    index = json.loads((folder / "index.json").read_text())
    assert index["arrays"]["indices"]["dtype"] == "<i8" and index["operator"]["write"] == write


@pytest.mark.parametrize("rank", [1, 2])
def test_golden_equals_pytorchs_max_unpool_and_autograd_without_repeats(tmp_path, rank):
    torch = pytest.importorskip("torch")
    # kernel = stride: the pooled generator's windows do not overlap, so no index repeats
    text = (f'[operator]\nkind = "max_unpool"\nkernel = {[2] * rank}\n[input]\nshape = {[2, 3] + [3] * rank}\n'
            'generator = "pooled"\nseed = 5\n')
    r = _golden(tmp_path, text, "--format", "json", "--dtype", "float64")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "golden" / "case.json").read_text())
    a = doc["arrays"]
    assert doc["repeated_outputs"] == []
    x = torch.tensor(np.array(a["x"]["float64"]).reshape(a["x"]["shape"]), requires_grad=True)
    idx = torch.tensor(np.array(a["indices"]["values"], dtype=np.int64).reshape(a["indices"]["shape"]))
    unpool = torch.nn.functional.max_unpool1d if rank == 1 else torch.nn.functional.max_unpool2d
    y = unpool(x, idx, 2, output_size=doc["output_shape"][2:])
    dy = torch.tensor(np.array(a["dy"]["float64"]).reshape(a["dy"]["shape"]))
    (dx,) = torch.autograd.grad(y, x, dy)
    assert list(y.shape) == doc["output_shape"]
    assert np.array_equal(y.detach().numpy().reshape(-1), np.array(a["y"]["float64"]))
    assert np.array_equal(dx.numpy().reshape(-1), np.array(a["dx"]["float64"]))


def test_cover_writes_repeated_indices_from_the_plan(tmp_path):
    # kernel 3, stride 2: neighbouring windows share a row/column, so pooled indices repeat; "repeats"
    # repeats at every pair of input cells
    r = _golden(tmp_path, '[operator]\nkind = "max_unpool"\nkernel = [3, 3]\nstride = [2, 2]\n', "--cover",
                "--format", "json", "--dtype", "float32")
    assert r.returncode == 0, r.stderr
    docs = {p.name: json.loads(p.read_text()) for p in (tmp_path / "golden").glob("*.json")}
    generators = {name.split("__")[2].removesuffix(".json") for name in docs}
    assert generators == {"pooled", "repeats", "equal_values", "extreme"}
    for name, doc in docs.items():
        assert doc["repeated_outputs"], name
        dx = doc["arrays"]["dx"]["exact"]
        assert doc["overwritten_inputs"] and all(dx[i] == "0" for i in doc["overwritten_inputs"]), name


def test_the_stages_without_scatter_support_still_refuse_it(tmp_path):
    (tmp_path / "case.toml").write_text(REPEATED.format(write="last"))
    r = cli_runner.symjac("explain", str(tmp_path / "case.toml"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "symjac golden writes its data" in r.stderr and "explain, graph, census" in r.stderr
