"""golden --format onnx: ONNX backend-test directories that onnx loads and ONNX Runtime (an
independent implementation) runs to the stored outputs, within the bound written beside them."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

import cli_runner

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(str(p) for p in (ROOT / "specs").rglob("*.toml"))
DTYPES = ("float16", "float32", "float64")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden")
    r = cli_runner.symjac("golden", *SPECS, "--out", str(out), "--format", "onnx,json", "--dtype", ",".join(DTYPES))
    assert r.returncode == 0, r.stderr
    return out, r.stderr


def _tensor(path):
    t = onnx.TensorProto()
    t.ParseFromString(Path(path).read_bytes())
    return numpy_helper.to_array(t)


def test_every_expressible_pooling_case_is_a_backend_test_onnx_loads(exported):
    out, notes = exported
    cases = load_model_tests(data_dir=str(out), kind="onnx")
    names = {c.name for c in cases}
    # the repo's pooling specs that ONNX expresses: channels_first, exclude/include_pad, not adaptive
    for stem in ("nntrainer_avgpool_same_2x2", "maxpool_ties_3x3", "textbook_4x4_avg", "dilated_max",
                 "onnx_same_lower", "tf_same_stride2", "torch_ceil_include_pad"):
        assert {f"test_symjac_{stem}_{dt}" for dt in DTYPES} <= names, stem
    for c in cases:
        model = onnx.load(os.path.join(c.model_dir, "model.onnx"))
        onnx.checker.check_model(model, full_check=True)
        assert c.rtol == 0 and c.atol >= 0  # data.json: symjac's bound, not ONNX's default rtol 1e-3
    # what ONNX cannot express is named, not dropped in silence
    assert "channels_last: no ONNX form: layout 'channels_last'" in notes
    assert "adaptive_5_to_3: no ONNX form: AdaptivePool" in notes
    assert not any("channels_last" in n or "adaptive_5_to_3" in n for n in names)


def test_onnx_runtime_runs_each_case_to_the_stored_output(exported):
    ort = pytest.importorskip("onnxruntime")
    out, _ = exported
    ran = 0
    for c in load_model_tests(data_dir=str(out), kind="onnx"):
        x = _tensor(os.path.join(c.model_dir, "test_data_set_0", "input_0.pb"))
        want = _tensor(os.path.join(c.model_dir, "test_data_set_0", "output_0.pb"))
        try:
            session = ort.InferenceSession(os.path.join(c.model_dir, "model.onnx"), providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT's CPU provider has no float64 AveragePool kernel
            assert "NOT_IMPLEMENTED" in str(exc) and c.name.endswith("_float64"), (c.name, exc)
            continue
        got = session.run(None, {"X": x})[0]
        assert got.dtype == want.dtype and got.shape == want.shape, c.name
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        assert np.all(err <= c.atol), (c.name, err.max(), c.atol)
        ran += 1
    assert ran >= 16


def test_the_stored_output_is_the_json_golden_rounded_value(exported):
    # the two formats are one computation: same input, same rounded forward, same bound
    out, _ = exported
    doc = json.loads((out / "textbook_4x4_avg.json").read_text())
    folder = out / "onnx" / "test_symjac_textbook_4x4_avg_float16"
    y = _tensor(folder / "test_data_set_0" / "output_0.pb")
    assert y.reshape(-1).tolist() == doc["arrays"]["y"]["float16"]
    assert json.loads((folder / "data.json").read_text())["atol"] == max(doc["arrays"]["y"]["max_abs_error"]["float16"])


def test_a_pool_against_pytorch_through_the_export(tmp_path):
    # The mapping itself, against an independent library: an avg pool with explicit asymmetric
    # pads ONNX reads as pads=[b1, b2, e1, e2]; PyTorch pads symmetric only, so compare a pad-1
    # count_include_pad=True ceil case with F.avg_pool2d.
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    spec = tmp_path / "c.toml"
    spec.write_text('name = "c"\n[operator]\nkind = "pool"\nmode = "avg"\nkernel = 3\nstride = 2\npadding = 1\n'
                    'ceil_mode = true\ndivisor = "include_pad"\n[input]\nshape = [1, 2, 6, 7]\ngenerator = "random"\n')
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--format", "onnx", "--dtype", "float32")
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "g" / "onnx" / "test_symjac_c_float32"
    x = _tensor(folder / "test_data_set_0" / "input_0.pb")
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(x.copy()).double(), 3, 2, 1, ceil_mode=True,
                                          count_include_pad=True).numpy()
    stored = _tensor(folder / "test_data_set_0" / "output_0.pb")
    assert stored.shape == want.shape and np.allclose(stored, want, rtol=2**-23, atol=0)
    got = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    assert np.allclose(got, want, rtol=2**-20, atol=0)


def _golden_onnx(tmp_path, name, operator, input_lines, formats="onnx"):
    spec = tmp_path / f"{name}.toml"
    spec.write_text(f'name = "{name}"\n[operator]\nkind = "pool"\nmode = "lp"\n{operator}\n[input]\n{input_lines}\n')
    return cli_runner.symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--format", formats, "--dtype",
                             "float16,float32,float64")


@pytest.mark.parametrize("name, operator, input_lines, p, kernel, stride", [
    # p = 2 on a random input with negative entries: |x|^2 = x^2, ONNX's LpPool is symjac's
    ("lp2", "kernel = 2\np = 2", 'shape = [1, 2, 4, 6]\ngenerator = "random"\nseed = 3', 2, (2, 2), (2, 2)),
    # p = 3 on a non-negative input (odd p: ONNX's |x| matters only for negative x)
    ("lp3", "kernel = [2, 3]\nstride = 1\np = 3",
     'x = [[1, 0.5, 3, 2.25], [0, 4, 1.5, 7], [2, 6, 0.75, 5]]', 3, (2, 3), (1, 1)),
])
def test_lp_pool_against_onnx_runtime_and_pytorch(tmp_path, name, operator, input_lines, p, kernel, stride):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    r = _golden_onnx(tmp_path, name, operator, input_lines)
    assert r.returncode == 0, r.stderr
    cases = {c.name: c for c in load_model_tests(data_dir=str(tmp_path / "g"), kind="onnx")}
    assert set(cases) == {f"test_symjac_{name}_{dt}" for dt in DTYPES}
    for dt in DTYPES:
        c = cases[f"test_symjac_{name}_{dt}"]
        model = onnx.load(os.path.join(c.model_dir, "model.onnx"))
        onnx.checker.check_model(model, full_check=True)
        (node,) = model.graph.node
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert node.op_type == "LpPool" and attrs["p"] == p and attrs["kernel_shape"] == list(kernel)
        assert attrs["strides"] == list(stride) and attrs["pads"] == [0] * 4
        x = _tensor(os.path.join(c.model_dir, "test_data_set_0", "input_0.pb"))
        stored = _tensor(os.path.join(c.model_dir, "test_data_set_0", "output_0.pb"))
        assert x.dtype == stored.dtype == np.dtype(dt) and c.rtol == 0 and 0 < c.atol
        # PyTorch in float64 on the same (rounded) input: the exact value up to float64 rounding,
        # so the stored (correctly rounded) output is within half an ULP of it, plus float64's own error
        want = torch.nn.functional.lp_pool2d(torch.from_numpy(x.astype(np.float64)), p, kernel, stride).numpy()
        assert stored.shape == want.shape
        half_ulp = np.spacing(np.abs(stored)).astype(np.float64) / 2
        assert np.all(np.abs(stored.astype(np.float64) - want) <= half_ulp + 1e-14 * np.abs(want)), dt
        # ONNX Runtime's CPU LpPool (float32 only) runs to the stored output within data.json's atol
        if dt == "float32":
            session = ort.InferenceSession(os.path.join(c.model_dir, "model.onnx"), providers=["CPUExecutionProvider"])
            got = session.run(None, {"X": x})[0]
            assert got.dtype == stored.dtype and got.shape == stored.shape
            assert np.all(np.abs(got.astype(np.float64) - stored.astype(np.float64)) <= c.atol), name


def test_lp_pool_odd_p_with_a_negative_input_is_skipped_with_a_note(tmp_path):
    r = _golden_onnx(tmp_path, "lp3neg", "kernel = 2\np = 3", "x = [[1, -2], [3, 4]]")
    assert r.returncode == 0, r.stderr
    assert "note: lp3neg: no ONNX form: p=3 with a negative input: ONNX LpPool computes (Σ |x|^3)" in r.stderr
    assert not (tmp_path / "g" / "onnx").exists()


def test_lp_pool_with_a_rational_format_is_refused_as_before(tmp_path):
    r = _golden_onnx(tmp_path, "lp2json", "kernel = 2\np = 2", "x = [[1, -2], [3, 4]]", formats="onnx,json")
    assert r.returncode != 0 and "lp pooling's are algebraic" in r.stderr
