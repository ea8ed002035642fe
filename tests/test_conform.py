"""symjac conform: the convention matrix of a framework (or a user adapter), isolated per configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli_runner
import symjac

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = str(ROOT / "tests" / "conform_adapter.py")


@pytest.fixture(scope="module")
def broken():
    return symjac.conform(ADAPTER, dtypes=("float32", "float64"), families=("distinct", "ties"))


def _cells(result):
    return {(r["config"]["op"], r["dtype"]): r for r in result.results}


def test_each_kind_of_cell(broken):
    cells = _cells(broken)
    for dtype in ("float32", "float64"):
        assert cells["max_ok", dtype]["status"] == "pass"
        assert cells["avg_ok", dtype]["status"] == "pass"
        # gradient x 2: the exact derivative of max at its (untied) maximum is 1, the op sends 2
        assert cells["max_doubled", dtype]["category"] == "wrong_weights"
        # os.abort() in the forward and signal.raise_signal(SIGFPE) in the backward: the run goes on
        assert (cells["max_abort", dtype]["category"], cells["max_abort", dtype]["signal"]) == ("crashed", "SIGABRT")
        assert (cells["avg_fpe", dtype]["category"], cells["avg_fpe", dtype]["signal"]) == ("crashed", "SIGFPE")
        assert cells["unsupported_op", dtype]["status"] == "unsupported"
    assert not broken.ok
    assert set(broken.failure_classes()) == {("max_doubled", "wrong_weights"), ("max_abort", "crashed"),
                                             ("avg_fpe", "crashed")}
    table = broken.table()
    assert "crashed:SIGFPE" in table and "unsupported" in table
    assert "6 configurations x 2 dtypes = 12 cells: 4 pass, 6 finding, 2 unsupported" in table


def test_reproducers_load_as_spec_files(broken, tmp_path):
    written = broken.write_reproducers(tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted(f"conform_adapter-{op}-{cat}.{ext}" for op, cat in
                           [("max_doubled", "wrong_weights"), ("max_abort", "crashed"), ("avg_fpe", "crashed")]
                           for ext in ("toml", "py"))
    case = symjac.load_spec_file(tmp_path / "conform_adapter-max_doubled-wrong_weights.toml").cases[0]
    assert case.operator == symjac.Pool("max", 2)
    assert case.inputs["shape"] == (1, 1, 4, 4)
    script = (tmp_path / "conform_adapter-max_doubled-wrong_weights.py").read_text()
    assert "dx = backward(x, dy)  # the broken op" in script and "expected_dx = np.array(" in script
    compile(script, "reproducer", "exec")


def test_without_isolation_the_crash_free_cells_are_the_same():
    # (no crashing op here: without isolation an abort would end this test process)
    result = symjac.conform(ADAPTER + ":crash_free", dtypes=("float64",), families=("distinct",), isolate=False)
    statuses = {r["config"]["op"]: r.get("category", r["status"]) for r in result.results}
    assert statuses == {"max_ok": "pass", "avg_ok": "pass", "max_doubled": "wrong_weights",
                        "unsupported_op": "unsupported"}


def test_cli_exit_codes_json_and_reproducers(tmp_path):
    out = tmp_path / "c.json"
    r = cli_runner.symjac("conform", ADAPTER, "--dtype", "float64", "--families", "distinct", "--json", str(out),
                          "--reproducers", str(tmp_path / "rep"))
    assert r.returncode == 1, r.stderr
    assert "crashed:SIGABRT" in r.stdout and "wrong_weights" in r.stdout
    # stderr is a pipe here: no progress bar (issue 33 item 4a: its \r-redrawn lines went into pipes and logs)
    assert "\r" not in r.stderr and "6/6" not in r.stderr and "failures:" not in r.stderr
    doc = json.loads(out.read_text())
    assert doc["ok"] is False and doc["counts"]["finding"] == 3 and doc["counts"]["unsupported"] == 1
    assert len(list((tmp_path / "rep").glob("*.toml"))) == 3


def test_cli_usage_errors():
    r = cli_runner.symjac("conform", "nosuchframework")
    assert r.returncode == 2 and "give one of torch, jax, tensorflow, onnxruntime" in r.stderr
    r = cli_runner.symjac("conform", ADAPTER, "--dtype", "float8")
    assert r.returncode == 2 and "--dtype 'float8' is not valid" in r.stderr
    r = cli_runner.symjac("conform", ADAPTER, "--budget", "0")
    assert r.returncode == 2


def test_budget_stops_starting_configurations():
    result = symjac.conform(ADAPTER, dtypes=("float64",), families=("distinct",), budget=1e-9)
    # the listing of the configurations counts against the budget: it is spent before any cell starts
    assert {r["status"] for r in result.results} == {"not_run"} and result.verified == 0
    assert result.ok  # cells not run are no findings (the command line exits 2: nothing verified)


def test_torch_small_grid_has_no_false_alarm():
    pytest.importorskip("torch")
    result = symjac.conform("torch", grid="small", dtypes=("float32", "float64"), families=("distinct", "ties"))
    assert result.ok, result.table()
    assert sum(r["status"] == "pass" for r in result.results) >= 60


def test_torch_small_grid_has_no_false_alarm_in_bfloat16():
    pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    result = symjac.conform("torch", grid="small", dtypes=("bfloat16",), families=("distinct", "ties"))
    assert result.ok, result.table()
    # PyTorch has no CPU bfloat16 kernel for avg_pool3d ("avg_pool3d_out_frame" not implemented): unsupported;
    # lp_pool (p >= 2) overflows at the extreme family's inputs: its known defect (tests/test_extreme.py);
    # max_unpool's gather backward at a repeated index: its known defect (tests/test_unpool.py); PyTorch has no
    # CPU bfloat16 kernel for multi_margin_loss / multilabel_margin_loss ("... not implemented for 'BFloat16'"),
    # nor for ctc_loss ("ctc_loss_cpu" not implemented for 'BFloat16')
    for r in result.results:
        op = r["config"]["op"]
        no_kernel = ("avg_pool3d", "multi_margin_loss", "multilabel_margin_loss", "ctc_loss")
        want = "unsupported" if op in no_kernel else "known_defect" if op.startswith("lp_pool") and \
            float(r["config"]["kwargs"]["norm_type"]) > 1 or op.startswith("max_unpool") else "pass"
        assert r["status"] == want, r


def test_onnxruntime_bfloat16_is_unsupported():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ml_dtypes")
    result = symjac.conform("onnxruntime", grid="small", dtypes=("bfloat16",), families=("distinct",))
    assert {r["status"] for r in result.results} == {"unsupported"}
    assert all("no bfloat16 kernel" in r["reason"] for r in result.results)


# -- the two framework defects of issue 9, reproduced by conform (skipped without the framework) --


def test_tensorflow_maxpool3d_grad_at_ties():
    pytest.importorskip("tensorflow")
    result = symjac.conform("tensorflow", ops=["max_pool3d"], dtypes=["float32"], families=["ties"])
    # TF 2.21 MaxPool3DGrad sends the whole upstream gradient to every tied maximum, where any
    # element of the Clarke subdifferential of max sums to 1 over the tied cells: a defect the
    # adapter documents, so a known_defect cell (shown; not a finding)
    # (two cells, eager and tf.function, the same gradient in both: measured with TF 2.21 directly,
    # max_pool3d of ones (1, 2, 3, 3, 1), window 1x2x2, stride 1 gives the centre cells 4 in each;
    # both also show TensorFlow's NaN handling, documented for the nonfinite family)
    assert [r["mode"] for r in result.known] == ["eager", "tf.function"]
    eager = [r for r in result.known if r["mode"] == "eager"]
    assert [r["category"] for r in result.known] == ["tie_not_subgradient"] * 2 and result.ok
    assert all(family == "nonfinite" for r in result.known for category, family in r["found"]
               if category != "tie_not_subgradient")
    assert "tied windows route gradient outside the convex hull" in eager[0]["summary"]
    assert "known:tie_not_subgradient" in result.table()


def test_tensorflow_keras_adaptive_max_pool_with_an_output_of_1_is_a_known_cell():
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    result = symjac.conform("tensorflow", ops=["keras_ops_adaptive_max_pool"], dtypes=["float32"],
                            families=["distinct"])
    # Keras adaptive max pooling on TF with an output size of 1 pools with a window longer than the axis:
    # eagerly, oneDNN's MaxPool divides by zero (SIGFPE) on some CPUs and gives a gradient of uninitialized
    # memory on others (this TF 2.21 wheel: both seen, by machine); either way a known_defect cell,
    # never a crash of conform, and a crashed cell names its signal
    ones = [r for r in result.results if 1 in r["config"]["kwargs"]["output_size"]]
    assert ones and all(r["status"] == "known_defect" for r in ones), [r["summary"] for r in ones]
    crashed = [r for r in result.known if r["category"] == "crashed"]
    assert {r["signal"] for r in crashed} <= {"SIGFPE"}
    assert all(r["config"]["kwargs"]["output_size"][-1] == 1 for r in crashed)
    assert not result.findings


def test_onnxruntime_same_padding_with_dilations():
    pytest.importorskip("onnxruntime")
    result = symjac.conform("onnxruntime", ops=["average_pool", "max_pool"], dtypes=["float32"],
                            families=["distinct"])

    def same_dilated_kernel(kw):  # SAME, and an axis whose kernel the dilation actually widens (k > 1)
        return str(kw.get("auto_pad")).startswith("SAME") and any(
            k > 1 and d > 1 for k, d in zip(kw["kernel_shape"], kw.get("dilations") or [1] * len(kw["kernel_shape"])))

    same_dilated = {id(r) for r in result.results
                    if same_dilated_kernel(r["config"]["kwargs"]) and r["status"] != "unsupported"}
    # every max pool is known too: its NaN handling (the nonfinite family; tests/test_nonfinite_frameworks.py)
    max_pools = {id(r) for r in result.known if r["config"]["op"] == "max_pool"}
    assert same_dilated and {id(r) for r in result.known} - max_pools == same_dilated - max_pools
    assert not result.findings
    # ONNX: SAME keeps out = ceil(L / s) per axis; ORT 1.32 sizes the padding from the undilated kernel
    for r in (r for r in result.known if id(r) in same_dilated):
        shape, kw = r["config"]["input_shape"], r["config"]["kwargs"]
        strides = kw.get("strides") or [1] * (len(shape) - 2)
        want = tuple(shape[:2]) + tuple(-(-n // s) for n, s in zip(shape[2:], strides))
        if r["category"] == "forward_values":  # the other form: both paddings give the same shape, wrong values
            assert "forward differs from the exact forward" in r["summary"], r["summary"]
            continue
        assert r["category"] == "bad_output" and f"expected {want}" in r["summary"], r["summary"]


@pytest.mark.slow
def test_dask_and_local_jobs_give_the_same_table():
    distributed = pytest.importorskip("distributed")
    here = symjac.conform(ADAPTER, dtypes=("float64",), families=("distinct",))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        there = symjac.conform(ADAPTER, dtypes=("float64",), families=("distinct",), scheduler=cluster.scheduler_address)
    jobs = symjac.conform(ADAPTER, dtypes=("float64",), families=("distinct",), jobs=2)
    cells = [[(r["config"]["op"], r["status"], r.get("category"), r.get("signal")) for r in c.results]
             for c in (here, there, jobs)]
    assert cells[0] == cells[1] == cells[2]
