"""The golden metadata's ``operator`` object (index.json, json, npz alike): the layer's
settings as structured fields, the same data the native wire's settings lines carry, and
a C test that builds its layer from index.json alone (contrib/symjac_golden.h) and runs the
contrib reference kernels against the golden arrays (compiled when a compiler exists)."""

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from native_kernels import CC, build

import cli_runner
from symjac.frameworks.native._wire import settings
from symjac.io._operator import operator_json
from symjac.loss._spec import Loss
from symjac.pool._spec import AdaptivePool, GlobalPool, Pool

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "specs" / "seeds"
CASES = """\
[[case]]
name = "avg_same"
[case.operator]
kind = "pool"
mode = "avg"
kernel = 2
stride = 1
padding = "same"
[case.input]
shape = [2, 2]

[[case]]
name = "avg_include_pad"
[case.operator]
kind = "pool"
mode = "avg"
kernel = 3
stride = 2
padding = 1
divisor = "include_pad"
[case.input]
shape = [2, 3, 5, 5]

[[case]]
name = "max_ceil"
[case.operator]
kind = "pool"
mode = "max"
kernel = 2
stride = 2
ceil_mode = true
tie = "last"
[case.input]
shape = [1, 2, 5, 4]

[[case]]
name = "adaptive"
[case.operator]
kind = "adaptive_pool"
mode = "avg"
output_size = [2, 3]
[case.input]
shape = [1, 1, 5, 7]

[[case]]
name = "loss"
[case.operator]
kind = "loss"
loss = "huber"
reduction = "sum"
scale = 0.375
delta = 0.5
[case.input]
pred = [0.25, 3.0]
label = [0.0, 1.0]
"""


def golden(tmp_path, *args, spec=None):
    if spec is None:
        spec = tmp_path / "cases.toml"
        spec.write_text(CASES)
    out = tmp_path / "golden"
    r = cli_runner.symjac("golden", str(spec), "--out", str(out), *args)
    assert r.returncode == 0, r.stderr
    return out


def test_operator_object_fields_and_resolved_pads(tmp_path):
    out = golden(tmp_path, "--format", "bin", "--divisors")
    op = {name: json.loads((out / name / "index.json").read_text())["operator"]
          for name in ("avg_same", "avg_include_pad", "max_ceil", "adaptive", "loss")}
    # SAME, k=2, s=1 on L=2: out = ceil(2/1) = 2, total pad = (2-1)*1 + 2 - 2 = 1, the extra cell high: (0, 1).
    # Windows (0,0) 2x2 cells, (0,1) and (1,0) 2x1 and 1x2, (1,1) 1x1: divisors 4, 2, 2, 1 (exclude_pad).
    assert op["avg_same"] == {"operator": "pool", "mode": "avg", "kernel": [2, 2], "stride": [1, 1], "padding": "same",
                              "dilation": [1, 1], "ceil_mode": False, "divisor": "exclude_pad",
                              "layout": "channels_first", "zero_window": "zero", "rank": 2, "pads": [[0, 1], [0, 1]],
                              "divisors": [4, 2, 2, 1]}  # no "tie": average pooling's windows cannot tie
    # padding 1 on 5, k=3, s=2: out = (5 + 2 - 3)//2 + 1 = 3; every window lies inside the padded 7x7: 9 cells each.
    assert op["avg_include_pad"]["pads"] == [[1, 1], [1, 1]] and op["avg_include_pad"]["divisors"] == [9] * 9
    assert op["avg_include_pad"]["divisor"] == "include_pad" and op["avg_include_pad"]["stride"] == [2, 2]
    # ceil_mode, k=s=2 on H=5: ceil(3/2) + 1 = 3 windows, the last one reads cell 4 only: pads stay (0, 0).
    # Divisors of max pooling are the windows' valid cells: rows 2, 2, 1 cells x columns 2, 2 cells.
    assert op["max_ceil"]["ceil_mode"] is True and op["max_ceil"]["pads"] == [[0, 0], [0, 0]]
    assert op["max_ceil"]["tie"] == "last" and op["max_ceil"]["divisors"] == [4, 4, 4, 4, 2, 2]
    # adaptive 5 -> 2: [0, 3), [2, 5); 7 -> 3: [0, 3), [2, 5), [4, 7): 3x3 cells each.
    assert op["adaptive"]["operator"] == "adaptive_pool" and op["adaptive"]["output_size"] == [2, 3]
    assert op["adaptive"]["rank"] == 2 and op["adaptive"]["divisors"] == [9] * 6
    # a loss: its fields as set; 0.375 = 3/8 is exact, written as the text of the fraction
    assert op["loss"] == {"operator": "loss", "kind": "huber", "reduction": "sum", "scale": "3/8", "delta": "1/2"}


def test_json_npz_and_index_carry_the_same_operator_and_keep_its_repr(tmp_path):
    out = golden(tmp_path, "--format", "json,npz,bin")
    for name in ("avg_same", "loss"):
        index = json.loads((out / name / "index.json").read_text())
        doc = json.loads((out / f"{name}.json").read_text())
        npz = json.loads(np.load(out / f"{name}.npz")["operator.json"].item())
        assert index["operator"] == doc["operator"] == npz
        assert "divisors" not in index["operator"]  # only when asked
        assert index["operator_repr"] == doc["operator_repr"]
    assert index["operator_repr"] == repr(Loss("huber", reduction="sum", scale=Fraction(3, 8), delta=Fraction(1, 2)))
    avg = json.loads((out / "avg_same" / "index.json").read_text())
    assert avg["operator_repr"] == ("Pool(mode='avg', kernel=(2, 2), stride=(1, 1), padding='same', dilation=(1, 1), "
                                    "ceil_mode=False, divisor='exclude_pad', layout='channels_first')")


@pytest.mark.parametrize("spec, pads", [
    (Pool("max", (3, 3), stride=2, padding="same_lower", pad_value=0), ((1, 1), (1, 0))),
    (Pool("lp", (2,), p=3), ((0, 0),)),
    (AdaptivePool("max", (2, 2), layout="channels_last"), ((0, 0), (0, 0))),
    (GlobalPool("avg", rank=3), ((0, 0),) * 3),
    (Loss("softmax_ce", reduction="mean", scale=Fraction(1, 3), weight=(1, 2), labels="indices", ignore_index=0), None),
])
def test_the_wire_and_golden_share_one_serializer(spec, pads):
    # the settings lines say, word for word, what the operator object holds
    lines = dict(line.split(" ", 1) for line in settings(spec, pads))
    obj = operator_json(spec, pads)
    assert list(lines) == list(obj)

    def words(v):
        if isinstance(v, bool):
            return "1" if v else "0"
        return " ".join(words(e) for e in v) if isinstance(v, list) else str(v)

    assert {k: words(v) for k, v in obj.items()} == lines


def _compile(tmp_path, *defines):
    return build(tmp_path, ROOT / "tests" / "golden_layer.c", *defines)


def test_c_test_builds_the_layer_from_index_json(tmp_path):
    if CC is None:
        pytest.skip("no C compiler")
    spec = tmp_path / "cases.toml"
    spec.write_text(CASES)
    out = golden(tmp_path, "--format", "bin", "--dtype", "float64", spec=spec)
    seeds = golden(tmp_path / "seeds", "--format", "bin", "--dtype", "float64",
                   spec=SEEDS / "nntrainer_avgpool_same_2x2.toml")
    fixed, buggy = _compile(tmp_path), _compile(tmp_path, "-DSEED000_BUG")
    folders = [out / "avg_same", out / "avg_include_pad", out / "max_ceil", seeds / "nntrainer_avgpool_same_2x2"]
    for folder in folders:
        r = subprocess.run([str(fixed), str(folder)], capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (0, "y: 0 bad, dx: 0 bad\n"), (folder, r.stdout, r.stderr)
    # seed 000's planted defect visits 1 of the 4 windows: dx is wrong at 3 of the 4 cells
    # (cell (0,0) reads only window (0,0), which the loop visits)
    r = subprocess.run([str(buggy), str(seeds / "nntrainer_avgpool_same_2x2")], capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (1, "y: 0 bad, dx: 3 bad\n")
    # what the reference kernels cannot compute, the test refuses by reading the operator
    r = subprocess.run([str(fixed), str(out / "adaptive")], capture_output=True, text=True)
    assert r.returncode == 2 and "not a 2-D NCHW pool case" in r.stderr


def test_a_loss_sends_only_options_away_from_its_kinds_default():
    # docs/native.md: `operator loss`, `kind`, `reduction`, `scale`, then the kind's options that differ from
    # its default (docs/golden-data.md's operator object alike). Seed 003 sets only kind and scale = 8 (its
    # reduction the default mean): no option line for any case (issue 33 item 8: softmax_ce sent
    # label_smoothing 0 and labels probabilities, kld log_input 0 and log_target 0).
    from symjac.io._specfile import load
    for case in load(SEEDS / "loss_scale_family.toml").cases:
        assert settings(case.operator) == ["operator loss", f"kind {case.name}", "reduction mean", "scale 8"]
        assert operator_json(case.operator) == {"operator": "loss", "kind": case.name, "reduction": "mean",
                                                "scale": 8}
    # an option given at its default (softmax_ce's label_smoothing 0, kld's log_target False) is not sent;
    # one away from it is, as the spec holds it, in the spec's field order (ignore_index before labels)
    assert settings(Loss("softmax_ce", label_smoothing=0, labels="indices", ignore_index=-100)) == [
        "operator loss", "kind softmax_ce", "reduction mean", "scale 1", "ignore_index -100", "labels indices"]
    assert settings(Loss("kld", log_input=True, log_target=False)) == [
        "operator loss", "kind kld", "reduction mean", "scale 1", "log_input 1"]
