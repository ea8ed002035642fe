"""``symjac golden --cover``: one case per coverage-plan shape and input family, named
``<case>__<shape>__<family>``, each with its operator object; values against PyTorch."""

import json
from pathlib import Path

import numpy as np
import pytest

import cli_runner
import symjac

ROOT = Path(__file__).resolve().parent.parent
SPEC = """name = "mp"
[operator]
kind = "pool"
mode = "max"
kernel = 3
stride = 2
padding = 1
"""


def test_one_case_per_plan_shape_and_family_with_pytorch_values(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "mp.toml").write_text(SPEC)
    loss = ROOT / "specs" / "seeds" / "loss_scale_family.toml"
    r = cli_runner.symjac("golden", str(tmp_path / "mp.toml"), str(loss), "--case", "mp", "--case", "mse", "--out",
                          str(tmp_path / "g"), "--cover", "--dtype", "float64")
    assert r.returncode == 0, r.stderr
    # the families verify runs for max pooling whose windows touch padding: distinct, ties (its
    # probed pass at tied inputs), all_negative (padding taken for 0 shows), near_ties, orders (its first
    # input) and extreme (values near the lowest float64); not nonfinite (NaN has no exact golden value)
    families = ("distinct", "ties", "all_negative", "near_ties", "orders", "extreme")
    plan = symjac.cover(symjac.Pool("max", 3, stride=2, padding=1))
    # a 1x1 input has no ties (every window reads its one cell): no ties case there
    names = [f"mp__{'x'.join(map(str, shape))}__{f}" for shape in plan for f in families
             if not (f == "ties" and shape == (2, 3, 1, 1))]
    assert r.stdout.split() == [str(tmp_path / "g" / f"{n}.json") for n in names] + [str(tmp_path / "g" / "mse.json")]
    for shape in plan:
        for family in families:
            if family == "ties" and shape == (2, 3, 1, 1):
                continue
            doc = json.loads((tmp_path / "g" / f"mp__{'x'.join(map(str, shape))}__{family}.json").read_text())
            assert doc["provenance"]["generator"] == family and doc["input_shape"] == list(shape)
            # padding 1 on every axis, k=3, s=2: out = (L + 2 - 3)//2 + 1, the pads as given
            assert doc["operator"]["pads"] == [[1, 1], [1, 1]]
            assert doc["output_shape"][2:] == [(L - 1) // 2 + 1 for L in shape[2:]]
            a = doc["arrays"]
            x = torch.tensor(np.array(a["x"]["float64"]).reshape(shape), requires_grad=True)
            y = torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1)
            y.backward(torch.tensor(np.array(a["dy"]["float64"]).reshape(y.shape)))
            assert np.array_equal(y.detach().numpy().reshape(-1), a["y"]["float64"])
            assert np.array_equal(x.grad.numpy().reshape(-1), a["dx"]["float64"])  # first maximum, as PyTorch
            assert ("tied" in a) == (family == "ties")
            if family == "all_negative":
                assert max(a["x"]["float64"]) < 0


def test_a_case_without_input_writes_nothing_and_names_cover(tmp_path):
    # issue 33 item 5: given A (with [input]) then a case without one, golden wrote A's file
    # unlisted and exited 2 with no word of --cover, which writes the plan's shapes for it
    (tmp_path / "mp.toml").write_text(SPEC)
    seed = ROOT / "specs" / "seeds" / "textbook_4x4_max.toml"  # has [input]
    out = tmp_path / "g"
    r = cli_runner.symjac("golden", str(seed), str(tmp_path / "mp.toml"), "--out", str(out), "--dtype", "float64")
    assert r.returncode == 2, r.stderr
    assert not out.exists() or not list(out.iterdir())
    assert str(tmp_path / "mp.toml") in r.stderr and "--cover" in r.stderr
    assert r.stdout == ""
