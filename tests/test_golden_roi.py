"""Golden data of RoI Align and RoI max pooling: the arrays against an independent oracle, and the
metadata a test in C builds its layer from (issue 31).

Oracles: ``tests/roi_reference.py`` (torchvision's CPU kernels transcribed from their documentation,
run here in exact ``Fraction`` arithmetic on the golden file's own x, dy and boxes) and ONNX
Runtime's ``RoiAlign`` forward (opset 16; ``half_pixel`` is ``aligned = true``), where installed.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import cli_runner
from roi_reference import RoiAlignBackward, roi_align_forward, roi_pool_backward, roi_pool_forward

ROOT = Path(__file__).resolve().parents[1]

ALIGN = """
[operator]
kind = "roi_align"
output_size = [2, 2]
boxes = [[0, "1/2", 0, "7/2", 3], [1, 1, 1, 2, "5/2"], [0, "-3/4", "5/4", 6, 4]]
spatial_scale = "1/2"
sampling_ratio = 2
aligned = true
[input]
shape = [2, 2, 5, 6]
seed = 3
"""

ALIGN_ADAPTIVE = """
[operator]
kind = "roi_align"
output_size = [2, 3]
boxes = [[0, 0, 0, 5, 4], [0, "3/2", "1/2", "9/2", "7/2"]]
sampling_ratio = -1
[input]
shape = [1, 1, 5, 6]
"""

POOL = """
[operator]
kind = "roi_pool"
output_size = [2, 2]
boxes = [[0, 0, 0, 3, 3], [0, 1, 1, 2, 2], [1, "1/2", 2, 5, 4]]
[input]
shape = [2, 1, 5, 6]
generator = "ties"
"""


def _golden(tmp_path: Path, text: str, *args: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    spec = tmp_path / "case.toml"
    spec.write_text(text)
    out = tmp_path / "golden"
    r = cli_runner.symjac("golden", str(spec), "--out", str(out), *args)
    assert r.returncode == 0, r.stderr
    return out


def _exact(entry: dict) -> np.ndarray:
    return np.array([Fraction(v) for v in entry["exact"]], dtype=object).reshape(entry["shape"])


def _rois(doc: dict) -> np.ndarray:
    """The boxes as the golden file gives them to a test in C: numerators over denominators."""
    num, den = doc["arrays"]["boxes_num"], doc["arrays"]["boxes_den"]
    rois = [Fraction(n, d) for n, d in zip(num["values"], den["values"])]
    return np.array(rois, dtype=object).reshape(num["shape"])


def _scale(doc: dict) -> Fraction:
    return Fraction(doc["operator"]["spatial_scale"])


@pytest.mark.parametrize("text", [ALIGN, ALIGN_ADAPTIVE], ids=["fixed_grid_aligned", "adaptive"])
def test_roi_align_golden_y_and_dx_equal_the_torchvision_reference_exactly(tmp_path, text):
    doc = json.loads((_golden(tmp_path, text, "--format", "json") / "case.json").read_text())
    op = doc["operator"]
    x, dy, rois = _exact(doc["arrays"]["x"]), _exact(doc["arrays"]["dy"]), _rois(doc)
    args = (rois, tuple(op["output_size"]), _scale(doc), op["sampling_ratio"], op.get("aligned", False))
    assert (_exact(doc["arrays"]["y"]) == roi_align_forward(x, *args)).all()
    assert (_exact(doc["arrays"]["dx"]) == RoiAlignBackward(*args)(x, dy)).all()
    # the Jacobian's COO gives the same dx: J^T dy
    a = doc["arrays"]
    jt_dy = np.full(x.size, Fraction(0), dtype=object)
    for r, c, v in zip(a["jac_rows"]["values"], a["jac_cols"]["values"], a["jac_values"]["exact"]):
        jt_dy[c] += Fraction(v) * dy.reshape(-1)[r]
    assert (jt_dy == _exact(a["dx"]).reshape(-1)).all()


def test_roi_align_golden_y_is_onnxruntimes_forward_within_its_bound(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    doc = json.loads((_golden(tmp_path, ALIGN, "--format", "json", "--dtype", "float32") / "case.json").read_text())
    op, a = doc["operator"], doc["arrays"]
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode="avg",
                            output_height=op["output_size"][0], output_width=op["output_size"][1],
                            sampling_ratio=op["sampling_ratio"], spatial_scale=float(_scale(doc)),
                            coordinate_transformation_mode="half_pixel")  # aligned = true
    graph = helper.make_graph([node], "roi", [helper.make_tensor_value_info("X", tp.FLOAT, None),
                                              helper.make_tensor_value_info("rois", tp.FLOAT, None),
                                              helper.make_tensor_value_info("batch_indices", tp.INT64, None)],
                              [helper.make_tensor_value_info("Y", tp.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rois = _rois(doc).astype(np.float64).astype(np.float32)  # every box coordinate here is dyadic: exact
    x = np.array(a["x"]["float32"], dtype=np.float32).reshape(a["x"]["shape"])
    got = sess.run(None, {"X": x, "rois": rois[:, 1:], "batch_indices": rois[:, 0].astype(np.int64)})[0]
    want = np.array(a["y"]["float32"], dtype=np.float64).reshape(a["y"]["shape"])
    bound = np.array(a["y"]["max_abs_error"]["float32"]).reshape(a["y"]["shape"])
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


def test_roi_pool_golden_y_and_dx_equal_the_torchvision_reference_at_ties(tmp_path):
    doc = json.loads((_golden(tmp_path, POOL, "--format", "json") / "case.json").read_text())
    op, a = doc["operator"], doc["arrays"]
    x, dy, rois = _exact(a["x"]), _exact(a["dy"]), _rois(doc)
    args = (rois, tuple(op["output_size"]), _scale(doc))
    y, _ = roi_pool_forward(x, *args)
    assert (_exact(a["y"]) == y).all()
    assert (_exact(a["dx"]) == roi_pool_backward(x, dy, *args)).all()  # torchvision: the first maximal cell
    assert len(set(a["x"]["exact"])) < len(a["x"]["exact"])  # the ties generator did tie cells


def test_roi_operator_object_states_rank_boxes_and_ties_truly(tmp_path):
    out = _golden(tmp_path, ALIGN, "--format", "json,npz,bin")
    index = json.loads((out / "case" / "index.json").read_text())
    doc = json.loads((out / "case.json").read_text())
    assert index["operator"] == doc["operator"] == json.loads(np.load(out / "case.npz")["operator.json"].item())
    op = doc["operator"]
    # a 2-D map, windows given as a table: no padding; a weighted sum: nothing can tie
    assert op["rank"] == 2 and "pads" not in op and "tie" not in op and "max" not in doc["jacobian"]
    # every coordinate exact: an integer as a number, any other rational as its text (never a rounded float)
    assert op["boxes"] == [[0, "1/2", 0, "7/2", 3], [1, 1, 1, 2, "5/2"], [0, "-3/4", "5/4", 6, 4]]
    assert op["spatial_scale"] == "1/2"
    # the boxes as integers a C test reads with symjac_golden.h: x1 of box 2 is -3/4
    num = np.fromfile(out / "case" / "boxes_num.bin", dtype="<i8").reshape(3, 5)
    den = np.fromfile(out / "case" / "boxes_den.bin", dtype="<i8").reshape(3, 5)
    assert (num[2, 1], den[2, 1]) == (-3, 4) and index["arrays"]["boxes_num"]["shape"] == [3, 5]
    pool = json.loads((_golden(tmp_path / "p", POOL, "--format", "json") / "case.json").read_text())
    assert pool["operator"]["tie"] == "first" and "pads" not in pool["operator"] and pool["operator"]["rank"] == 2
    assert "first maximal cell" in pool["jacobian"]


def test_roi_onnx_format_writes_a_roialign_backend_test(tmp_path):
    # (it wrote none before issue 31's export: tests/test_golden_onnx_roi.py runs them)
    pytest.importorskip("onnx")
    spec = tmp_path / "case.toml"
    spec.write_text(ALIGN)
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "o"), "--format", "onnx", "--dtype", "float32")
    assert r.returncode == 0 and "no ONNX" not in r.stderr, r.stderr
    data = tmp_path / "o" / "onnx" / "test_symjac_case_float32" / "test_data_set_0"
    assert sorted(p.name for p in data.iterdir()) == ["input_0.pb", "input_1.pb", "input_2.pb", "output_0.pb"]
