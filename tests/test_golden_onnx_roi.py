"""golden --format onnx for RoI Align (ONNX ``RoiAlign``, opset 16), RoI max pooling (``MaxRoiPool``) and
max unpooling (``MaxUnpool``): each written model passes ``onnx.checker`` and runs, in ONNX Runtime
(an independent implementation) and in ``onnx.reference.ReferenceEvaluator`` (ONNX's own
reference; it has no MaxRoiPool), to the stored output within ``data.json``'s atol; the stored
output is the json golden file's exact rational ``y`` rounded once. Max kinds (MaxRoiPool,
MaxUnpool: y copies inputs) have atol 0, so they are equal exactly. Settings with no ONNX
equivalent are named, not written (issue 31).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import cli_runner

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from test_golden_roi import ALIGN  # noqa: E402 - the json tests' dyadic case

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float16", "float32", "float64")

# dyadic boxes, scale and bins (sizes 3 and 3/2 over 2 bins, 2 points each): every sample
# coordinate is exact in float16, so only the sums round and atol is the dtype's rounding
ALIGN_DYADIC = ALIGN

# symjac's default boxes (inside, partly and wholly outside, points exactly at y = H and x = W, a
# point box, an inverted box: output_half_pixel's 1 x 1 clamp), bins of a third, both grids and modes
ALIGN_DEFAULT = """
[operator]
kind = "roi_align"
output_size = [2, 3]
sampling_ratio = {ratio}
aligned = {aligned}
mode = "{mode}"
[input]
shape = [2, 2, 6, 7]
seed = 5
"""

ROI_POOL = """
[operator]
kind = "roi_pool"
output_size = [2, 2]
spatial_scale = "1/2"
boxes = [[0, 0, 0, 7, 7], [0, 2, 2, 5, 9], [1, "-1", 3, 13, 11], [1, 6, 6, 6, 6], [0, 20, 20, 24, 24]]
[input]
shape = [2, 3, 6, 7]
generator = "ties"
"""

# the default boxes: overlapping bins, coordinates at halves (C's round), boxes outside, point and inverted
ROI_POOL_DEFAULT = """
[operator]
kind = "roi_pool"
output_size = [2, 3]
[input]
shape = [2, 2, 6, 7]
"""

# indices as a max pooling of 3-wide windows at stride 2 gives them: repeated where windows overlap
UNPOOL_PLANE = """
[operator]
kind = "max_unpool"
kernel = [3, 3]
stride = [2, 2]
padding = [[1, 0], [0, 1]]
[input]
shape = [2, 3, 3, 3]
"""

UNPOOL_TENSOR = """
[operator]
kind = "max_unpool"
kernel = [2]
stride = [2]
output_size = [6]
flat = "tensor"
indices = [[[0, 3, 5], [6, 6, 11]]]
[input]
x = [[[1, -2, 3], [4, 5, -6]]]
"""

UNPOOL_3D = """
[operator]
kind = "max_unpool"
kernel = [2, 2, 2]
[input]
shape = [1, 2, 2, 2, 3]
generator = "repeats"
"""


def _golden(tmp_path: Path, specs: dict[str, str], formats: str = "json,onnx") -> tuple[Path, str]:
    tmp_path.mkdir(exist_ok=True)
    paths = []
    for name, text in specs.items():
        (tmp_path / f"{name}.toml").write_text(f'name = "{name}"\n' + text)
        paths.append(str(tmp_path / f"{name}.toml"))
    out = tmp_path / "golden"
    r = cli_runner.symjac("golden", *paths, "--out", str(out), "--format", formats, "--dtype", ",".join(DTYPES))
    assert r.returncode == 0, r.stderr
    return out, r.stderr


def _proto(path: Path) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return t


def _tensor(path: Path) -> np.ndarray:
    return numpy_helper.to_array(_proto(path))


def _test(out: Path, name: str, dt: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray, float]:
    folder = out / "onnx" / f"test_symjac_{name}_{dt}"
    model = onnx.load(str(folder / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    feeds = {}
    for i in range(len(model.graph.input)):
        t = _proto(folder / "test_data_set_0" / f"input_{i}.pb")
        assert t.name == model.graph.input[i].name
        feeds[t.name] = numpy_helper.to_array(t)
    atol = json.loads((folder / "data.json").read_text())
    assert atol["rtol"] == 0 and atol["atol"] >= 0
    return model, feeds, _tensor(folder / "test_data_set_0" / "output_0.pb"), atol["atol"]


def _exact_y(out: Path, name: str, dt: str) -> np.ndarray:
    """The json golden file's exact y at the input ``dt`` holds (``<case>__<dtype>.json`` where the
    dtypes hold the input differently: symjac.io.golden._held)."""
    path = out / f"{name}__{dt}.json"
    entry = json.loads((path if path.exists() else out / f"{name}.json").read_text())["arrays"]["y"]
    return np.array([float(Fraction(v)) for v in entry["exact"]]).reshape(entry["shape"])


#: ONNX Runtime 1.32's CPU provider has no float64 kernel for these (NOT_IMPLEMENTED): the test is
#: written (ONNX's type constraints allow double) and checked by onnx.reference where it has the op.
NO_ORT_FLOAT64 = ("MaxRoiPool", "MaxUnpool")


def _runs_to_stored(out: Path, name: str, op: str) -> int:
    """Every dtype's model through ONNX Runtime and onnx.reference: the stored output within atol,
    and (both runtimes and the stored output) the exact y within atol; the number of runs."""
    runs = 0
    for dt in DTYPES:
        model, feeds, want, atol = _test(out, name, dt)
        assert model.graph.node[0].op_type == op and want.dtype == np.dtype(dt)
        exact = _exact_y(out, name, dt).reshape(want.shape)
        half_ulp = np.spacing(np.abs(want)).astype(np.float64) / 2  # in the dtype
        assert np.all(np.abs(want.astype(np.float64) - exact) <= half_ulp)  # rounded once
        outputs = []
        if dt == "float64" and op in NO_ORT_FLOAT64:
            with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
                ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        else:
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            outputs.append(("onnxruntime", session.run(None, feeds)[0]))
        if op != "MaxRoiPool":  # onnx.reference has no MaxRoiPool
            outputs.append(("onnx.reference", ReferenceEvaluator(model).run(None, feeds)[0]))
        for who, got in outputs:
            assert got.dtype == want.dtype and got.shape == want.shape, (who, name, dt)
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            assert np.all(err <= atol), (who, name, dt, err.max(), atol)
            if atol == 0:
                assert np.array_equal(got, want), (who, name, dt)
            assert np.all(np.abs(got.astype(np.float64) - exact) <= atol + half_ulp), (who, name, dt)
            runs += 1
    return runs


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    specs = {"align_dyadic": ALIGN_DYADIC, "roi_pool": ROI_POOL, "roi_pool_default": ROI_POOL_DEFAULT,
             "unpool_plane": UNPOOL_PLANE, "unpool_tensor": UNPOOL_TENSOR, "unpool_3d": UNPOOL_3D}
    for aligned in ("true", "false"):
        for ratio in (2, -1):
            for mode in ("avg", "max"):
                specs[f"align_{aligned}_{-ratio if ratio < 0 else ratio}{'a' if ratio < 0 else ''}_{mode}"] = \
                    ALIGN_DEFAULT.format(ratio=ratio, aligned=aligned, mode=mode)
    return _golden(tmp_path_factory.mktemp("onnx_roi"), specs)


def test_roi_align_dyadic_case_runs_to_the_stored_output_in_both_runtimes(written):
    out, notes = written
    assert _runs_to_stored(out, "align_dyadic", "RoiAlign") == 6
    model, feeds, want, atol = _test(out, "align_dyadic", "float32")
    node = model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert list(node.input) == ["X", "rois", "batch_indices"] and model.opset_import[0].version == 16
    assert attrs == {"output_height": 2, "output_width": 2, "sampling_ratio": 2, "spatial_scale": 0.5,
                     "mode": b"avg", "coordinate_transformation_mode": b"half_pixel"}
    # K boxes first: Y is (K, C, out_h, out_w), X the (N, C, H, W) map as given
    assert feeds["X"].shape == (2, 2, 5, 6) and want.shape == (3, 2, 2, 2)
    assert feeds["rois"].tolist() == [[0.5, 0, 3.5, 3], [1, 1, 2, 2.5], [-0.75, 1.25, 6, 4]]
    assert feeds["batch_indices"].dtype == np.int64 and feeds["batch_indices"].tolist() == [0, 1, 0]
    # exact sample coordinates: atol is float32's rounding of the sums (golden's own bound), not more
    y_bound = json.loads((out / "align_dyadic.json").read_text())["arrays"]["y"]["max_abs_error"]["float32"]
    assert 0 < atol <= 2 * max(y_bound) < 2**-16


@pytest.mark.parametrize("aligned", ["true", "false"])
@pytest.mark.parametrize("grid", ["2", "1a"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_default_boxes_in_both_coordinate_modes_and_reductions(written, aligned, grid, mode):
    # output_half_pixel (aligned = false) clamps a box to at least 1 x 1 in ONNX's reference and ONNX
    # Runtime as in torchvision: the default boxes' point and inverted boxes agree in both runtimes
    out, _ = written
    name = f"align_{aligned}_{grid}_{mode}"
    assert _runs_to_stored(out, name, "RoiAlign") == 6
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in _test(out, name, "float32")[0].graph.node[0].attribute}
    assert attrs["coordinate_transformation_mode"] == (b"half_pixel" if aligned == "true" else b"output_half_pixel")
    assert attrs["mode"] == mode.encode() and attrs["sampling_ratio"] == (2 if grid == "2" else 0)


@pytest.mark.parametrize("name", ["roi_pool", "roi_pool_default"])
def test_max_roi_pool_equals_onnx_runtime_exactly(written, name):
    out, _ = written
    assert _runs_to_stored(out, name, "MaxRoiPool") == 2  # float64: no ORT kernel, no reference
    model, feeds, want, atol = _test(out, name, "float16")
    assert atol == 0 and list(model.graph.node[0].input) == ["X", "rois"] and feeds["rois"].shape[1] == 5
    assert want.shape[0] == feeds["rois"].shape[0]  # one output per box


@pytest.mark.parametrize("name, runs", [("unpool_plane", 5), ("unpool_tensor", 5), ("unpool_3d", 5)])
def test_max_unpool_equals_onnx_runtime_and_the_reference_exactly(written, name, runs):
    out, _ = written
    assert _runs_to_stored(out, name, "MaxUnpool") == runs
    model, feeds, want, atol = _test(out, name, "float32")
    assert atol == 0 and feeds["I"].dtype == np.int64 and want.size > 0


def test_max_unpool_plane_indices_become_tensor_indices_with_the_same_scatter(written):
    # PyTorch's indices count their (N, C) plane; ONNX's the whole output: offset by the plane's start
    out, _ = written
    doc = json.loads((out / "unpool_plane.json").read_text())
    plane = np.array(doc["arrays"]["indices"]["values"]).reshape(doc["arrays"]["indices"]["shape"])
    _, feeds, want, _ = _test(out, "unpool_plane", "float32")
    n, c = plane.shape[:2]
    size = int(np.prod(want.shape[2:]))
    assert (feeds["I"] == plane + (np.arange(n * c).reshape(n, c, 1, 1) * size)).all()
    assert any(len(set(p)) < len(p) for p in plane.reshape(n * c, -1).tolist())  # repeated indices: the last write wins
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in _test(out, "unpool_plane", "float32")[0].graph.node[0].attribute}
    assert attrs == {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 1]}


def test_max_unpool_output_size_at_the_default_is_the_output_shape_input(written):
    out, _ = written
    model, feeds, want, _ = _test(out, "unpool_tensor", "float16")
    assert list(model.graph.node[0].input) == ["X", "I", "output_shape"]
    # by hand: y[i[k]] = x[k] over the whole (1, 2, 6) output; index 6 written by 4, then by 5 (the last wins)
    assert feeds["output_shape"].tolist() == [1, 2, 6]
    assert want.reshape(-1).tolist() == [1, 0, 0, -2, 0, 3, 5, 0, 0, 0, 0, -6]


REFUSED = {
    "scale_third": ("[operator]\nkind = \"roi_pool\"\noutput_size = 2\nspatial_scale = \"1/3\"\n[input]\nshape = [2, 1, 6, 7]\n",
                    "scale_third: no ONNX form: spatial_scale=1/3: ONNX MaxRoiPool's spatial_scale attribute is a "
                    "32-bit float"),
    "box_third": ("[operator]\nkind = \"roi_align\"\noutput_size = 2\nboxes = [[0, \"1/3\", 1, 2, 3]]\n[input]\n"
                  "shape = [1, 1, 5, 6]\n",
                  "box_third: no ONNX backend test in float64: boxes[0][1] = 1/3 (a coordinate): ONNX RoiAlign reads "
                  "rois in X's dtype, and float64 does not hold 1/3"),
    "unpool_first": ("[operator]\nkind = \"max_unpool\"\nkernel = [3]\nstride = [2]\nwrite = \"first\"\n[input]\n"
                     "shape = [1, 2, 5]\n",
                     "unpool_first: no ONNX form: write='first' with a repeated index: ONNX MaxUnpool (ONNX Runtime and "
                     "onnx.reference) keeps the last write"),
    "unpool_larger": ("[operator]\nkind = \"max_unpool\"\nkernel = [2, 2]\noutput_size = [5, 6]\n[input]\n"
                      "shape = [2, 2, 2, 3]\n",
                      "unpool_larger: no ONNX form: output_size=(5, 6), not the default (4, 6)"),
}


def test_settings_with_no_onnx_equivalent_are_named_not_written(tmp_path):
    specs = {name: text for name, (text, _) in REFUSED.items()}
    # 1 + 1/2048 needs 12 significant bits: float32 holds it, float16 does not (that dtype alone is left out)
    specs["box_fp16"] = ("[operator]\nkind = \"roi_align\"\noutput_size = 2\nsampling_ratio = 1\n"
                         "boxes = [[0, \"2049/2048\", 1, 3, 3]]\n[input]\nshape = [1, 1, 5, 6]\n")
    out, notes = _golden(tmp_path, specs, formats="onnx")
    for name, (_, note) in REFUSED.items():
        assert note in notes, name
        assert not list((out / "onnx").glob(f"test_symjac_{name}_*")), name
    assert "box_fp16: no ONNX backend test in float16: boxes[0][1] = 2049/2048 (a coordinate)" in notes
    assert sorted(p.name for p in (out / "onnx").glob("test_symjac_box_fp16_*")) == \
        ["test_symjac_box_fp16_float32", "test_symjac_box_fp16_float64"]
    assert _runs_to_stored_dtypes(out, "box_fp16", ("float32", "float64")) == 4


def _runs_to_stored_dtypes(out: Path, name: str, dtypes: tuple[str, ...]) -> int:
    runs = 0
    for dt in dtypes:
        model, feeds, want, atol = _test(out, name, dt)
        for got in (ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0],
                    ReferenceEvaluator(model).run(None, feeds)[0]):
            assert np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= atol), (name, dt)
            runs += 1
    return runs


def test_the_mapping_raises_a_typed_error_naming_the_setting():
    from symjac import MaxUnpool, RoiAlign, SpecError
    from symjac.io.golden._onnx_nodes import NoOnnxForm, onnx_node
    from symjac.pool._geometry import resolved

    spec = RoiAlign(2, spatial_scale="1/3")
    with pytest.raises(SpecError, match=r"spatial_scale=1/3: .* give a scale float32 holds exactly") as info:
        onnx_node(spec, resolved(spec, (2, 1, 6, 7)))
    assert isinstance(info.value, NoOnnxForm)
    unpool = MaxUnpool(2, output_size=(5, 5))
    qs = {"indices": np.zeros((1, 1, 2, 2), dtype=np.int64), "y": np.zeros((1, 1, 5, 5))}
    with pytest.raises(NoOnnxForm, match=r"give output_size equal to the default, or none"):
        onnx_node(unpool, None, qs)


def test_why_a_larger_unpool_output_size_is_refused_the_two_readings_differ():
    # ONNX's own backend test test_maxunpool_export_with_output_shape (onnx 1.23, by hand from its
    # expected y): indices 5, 7, 13, 15 of the default 4 x 4 output, padded to 5 x 5 at the end;
    # ONNX Runtime 1.32 reads them as cells of the 5 x 5 tensor. If the two ever agree, the refusal
    # in symjac.io.golden._onnx_nodes can become an output_shape input.
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("MaxUnpool", ["X", "I", "output_shape"], ["Y"], kernel_shape=[2, 2], strides=[2, 2])
    graph = helper.make_graph([node], "unpool", [helper.make_tensor_value_info("X", tp.FLOAT, [1, 1, 2, 2]),
                                                 helper.make_tensor_value_info("I", tp.INT64, [1, 1, 2, 2]),
                                                 helper.make_tensor_value_info("output_shape", tp.INT64, [4])],
                              [helper.make_tensor_value_info("Y", tp.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    feeds = {"X": np.array([[[[5, 6], [7, 8]]]], dtype=np.float32), "I": np.array([[[[5, 7], [13, 15]]]]),
             "output_shape": np.array([1, 1, 5, 5])}
    reference = ReferenceEvaluator(model).run(None, feeds)[0]
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.argwhere(reference[0, 0]).tolist() == [[1, 1], [1, 3], [3, 1], [3, 3]]
    assert np.argwhere(runtime[0, 0]).tolist() == [[1, 0], [1, 2], [2, 3], [3, 0]]
