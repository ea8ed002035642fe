"""Issue 34 (deliverable 5, second half): conform checks each derivative in the mode the framework's users
run (``tf.function``, ``jax.jit``, ``torch.compile``) as well as eagerly; "unsupported" only for a capability
the framework lacks; known defects match each of their forms on the right cells; every cell records its
transform; ``--no-isolate`` honours ``--timeout``. Each test is written from the issue's description."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import cli_runner
import symjac

ROOT = Path(__file__).resolve().parent.parent
QUICK = ("--dtype", "float32", "--families", "distinct", "-q")


def cli(*args, **options):
    return cli_runner.symjac("conform", *args, env={"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}, **options)


def _adapter(tmp_path, body, name="adapter"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return f"{path}:"


def _cells(result):
    return {(r["config"]["label"], r["transform"], r["mode"]): r for r in result.results}


# ----------------------------------------------------------------------------- the compiled mode (item 1)

STACKED = """
import dataclasses
import symjac
import tensorflow as tf
import symjac.frameworks.tensorflow as stf
from symjac.frameworks import Config

# two stacked max pools of window 1: the identity, twice (issue 34's measurement)
def stacked(t):
    return tf.nn.max_pool1d(tf.nn.max_pool1d(t, 1, 1, "VALID"), 1, 1, "VALID")

COMPILED_MODE = stf.COMPILED_MODE

def configurations(grid="small"):
    return [Config("stacked", {}, (1, 4, 1), "stacked"),
            Config("pool", {"window_shape": [1], "pooling_type": "MAX", "strides": [1], "padding": "VALID",
                            "dilations": [2]}, (1, 8, 2), "pool d2")]

def make(config):
    if config.op == "stacked":  # the snippet defines fn: its reproducer script runs as it is
        impl = stf.wrap(stacked, name="stacked")
        head = "import tensorflow as tf\\nfn = lambda t: tf.nn.max_pool1d(tf.nn.max_pool1d(t, 1, 1, 'VALID'), 1, 1, 'VALID')\\n"
        return symjac.Pool("max", (1,), layout="channels_last"), dataclasses.replace(impl, reproducer=head + impl.reproducer)
    return stf.make(config)

def known_defect(config, transform="vjp", mode="eager"):
    if config.op == "stacked":  # two tf.nn.max_pool1d: TensorFlow's max pooling NaN handling, documented
        return stf.known_defect(dataclasses.replace(config, op="max_pool1d"), transform, mode)
    return stf.known_defect(config, transform, mode) if config.op == "pool" else None
"""


def test_tf_graph_mode_jvp_of_stacked_max_pools_is_flagged_by_a_direct_verify():
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    import symjac.frameworks.tensorflow as stf

    def stacked(t):
        return tf.nn.max_pool1d(tf.nn.max_pool1d(t, 1, 1, "VALID"), 1, 1, "VALID")

    impl = stf.wrap(stacked)
    graph = impl.modes["tf.function"]
    assert (impl.mode, graph.mode) == ("eager", "tf.function")
    spec = symjac.Pool("max", (1,), layout="channels_last")  # window 1: y = x, so J = I and J·t = t
    x = np.array([1, 2, 3, 4], np.float32).reshape(1, 4, 1)
    t = np.ones_like(x)
    np.testing.assert_array_equal(impl.jvp(x, t), t)  # eagerly [1 1 1 1]
    np.testing.assert_array_equal(graph.jvp(x, t), np.zeros_like(t))  # in a tf.function [0 0 0 0] (TF 2.21)
    # (families=(): TensorFlow's max pooling NaN handling is its own documented defect, tests/test_nonfinite_frameworks.py)
    eager = symjac.verify(spec, forward=impl.forward, jvp=impl.jvp, double_backward=impl.double_backward, x=x,
                          families=())
    assert eager.ok, eager.summary()
    compiled = symjac.verify(spec, forward=graph.forward, jvp=graph.jvp, double_backward=graph.double_backward, x=x,
                             families=())
    # the JVP and the double backward's ddy = J·v are zero in every window: the exact J is the identity
    assert "missing_windows" in compiled.categories(), compiled.summary()
    assert "JVP" in compiled.summary() and "double backward" in compiled.summary()


def test_tf_graph_mode_defect_is_a_known_defect_of_the_compiled_cells_only(tmp_path):
    pytest.importorskip("tensorflow")
    result = symjac.conform(_adapter(tmp_path, STACKED), dtypes=("float32",), families=("distinct",),
                            transforms=("jvp", "hvp"), modes=("eager", "compiled"), isolate=False)
    cells = _cells(result)
    for transform in ("jvp", "hvp"):
        # eagerly: only TensorFlow's NaN handling (the forward at the nonfinite family), documented
        eager = cells["stacked", transform, "eager"]
        assert eager["status"] == "pass" or {f for _, f in eager["found"]} == {"nonfinite"}, eager
        # a wrap()ped function has no documented defect: a finding, named in the compiled column
        compiled = cells["stacked", transform, "tf.function"]
        assert compiled["status"] == "finding" and "missing_windows" in compiled["categories"], compiled
        pool = cells["pool d2", transform, "eager"]
        assert pool["status"] == "pass" or {f for _, f in pool["found"]} == {"nonfinite"}, pool
        known = cells["pool d2", transform, "tf.function"]
        assert known["status"] == "known_defect" and "graph mode" in known["known_defect"], known
    table = result.table()
    assert "jvp@tf.function/float32" in table.splitlines()[0] and "hvp@tf.function/float32" in table.splitlines()[0]
    doc = json.loads(result.to_json())
    assert doc["modes"] == ["eager", "compiled"] and doc["compiled_mode"] == "tf.function"
    assert {(r["transform"], r["mode"]) for r in doc["results"]} == \
        {(t, m) for t in ("jvp", "hvp") for m in ("eager", "tf.function")}


def test_compiled_reproducer_runs_the_transform_in_a_tf_function(tmp_path):
    pytest.importorskip("tensorflow")
    result = symjac.conform(_adapter(tmp_path, STACKED), ops=["stacked"], dtypes=("float32",),
                            families=("distinct",), transforms=("jvp",), modes=("compiled",), isolate=False)
    (script,) = [p for p in result.write_reproducers(tmp_path / "rep") if p.suffix == ".py"]
    assert "jvp_tf.function" in script.name and "tf.function(compute)" in script.read_text()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr
    # the framework's JVP, five calls in the tf.function: the worst differs from J·t = t everywhere
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("jvp:"))
    assert line.startswith("jvp: 4 of 4 values differ"), out.stdout


def test_tensorflow_and_jax_check_the_compiled_mode_by_default_torch_on_request():
    from symjac.frameworks.conform._modes import default_modes
    from symjac.frameworks.conform._plan import load_adapter

    assert default_modes(load_adapter("symjac.frameworks.tensorflow")) == ("eager", "compiled")
    assert default_modes(load_adapter("symjac.frameworks.jax")) == ("eager", "compiled")
    assert default_modes(load_adapter("symjac.frameworks.torch")) == ("eager",)  # torch.compile: opt-in
    assert default_modes(load_adapter("symjac.frameworks.onnxruntime")) == ("eager",)
    with pytest.raises(symjac.InputError, match="mode 'graph' is not valid: give a subset of eager, compiled"):
        symjac.conform("onnxruntime", modes=("graph",))


def test_jax_eager_twin_runs_op_by_op():
    pytest.importorskip("jax")
    import jax

    import symjac.frameworks.jax as sjj

    traced = []

    def f(t):
        traced.append(1)  # a Python side effect: once per trace under jax.jit, every call eagerly
        return jax.lax.reduce_window(t, -np.inf, jax.lax.max, (1, 2, 1), (1, 1, 1), "VALID")

    impl = sjj.wrap(f)
    eager = impl.modes["eager"]
    assert (impl.mode, eager.mode, impl.vmap(0, 0).mode, eager.vmap(0, 0).mode) == ("jax.jit", "eager", "jax.jit", "eager")
    x = np.arange(6, dtype=np.float32).reshape(1, 6, 1)
    for _ in range(3):
        impl.jvp(x, x)
    after_jit = len(traced)
    for _ in range(3):
        eager.jvp(x, x)
    assert len(traced) - after_jit >= 3  # traced anew at every eager call
    spec = symjac.Pool("max", (2,), stride=1, layout="channels_last")
    for one in (impl, eager):  # (not at NaN: JAX's max pooling NaN routing is a documented defect)
        assert symjac.verify(spec, forward=one.forward, backward=one.backward, jvp=one.jvp, x=x,
                             families=("all_negative", "near_ties", "orders", "extreme")).ok


def test_jax_conform_has_an_eager_and_a_jit_column():
    pytest.importorskip("jax")
    result = symjac.conform("jax", ops=["reduce_window_max"], dtypes=("float32",), families=("distinct",),
                            transforms=("vjp", "jvp"), isolate=False)
    assert result.modes == ("eager", "compiled") and result.compiled_mode == "jax.jit"
    assert {r["mode"] for r in result.results} == {"eager", "jax.jit"}
    # the JVP cells pass; the VJP cells show JAX's NaN routing, a defect documented for the nonfinite family only
    assert result.ok and {r["status"] for r in result.results if r["transform"] == "jvp"} == {"pass"}
    assert all(r["status"] == "pass" or {f for _, f in r["found"]} == {"nonfinite"}
               for r in result.results if r["transform"] == "vjp")
    assert "jvp@jax.jit/float32" in result.table().splitlines()[0]


@pytest.mark.slow  # Inductor compiles each transform for seconds
def test_torch_compile_twin_passes_on_max_pool2d():
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt
    from symjac.frameworks.conform._transforms import verify_transform

    spec, impl = sjt.max_pool2d(3, 2, 1)
    compiled = impl.modes["torch.compile"]
    assert compiled.mode == "torch.compile"
    for transform in ("vjp", "jvp", "hvp", "vmap"):
        report = verify_transform(spec, compiled, transform, np.dtype("float32"), input_shape=(1, 2, 7, 7))
        assert report.ok, (transform, report.summary())


# ----------------------------------------------------------------------------- unsupported (item 2)

RAISES_INSIDE = """
import symjac
import tensorflow as tf
import symjac.frameworks.tensorflow as stf
from symjac.frameworks import Config

def inside(t):
    if not tf.executing_eagerly():  # in a traced graph (tf.vectorized_map): an error raised inside the op
        raise ValueError("index 3 out of range in the traced graph")
    return tf.nn.max_pool1d(t, 2, 2, "VALID")

def no_rule(t):  # EagerPyFunc: pfor has no converter for it (a batching rule TensorFlow lacks)
    return tf.py_function(lambda a: tf.nn.max_pool1d(a, 2, 2, "VALID"), [t], t.dtype)

def configurations(grid="small"):
    return [Config("inside", {}, (1, 4, 1), "inside"), Config("no_rule", {}, (1, 4, 1), "no_rule"),
            Config("max_pool2d", {"ksize": [3, 3], "strides": [3, 3], "padding": [[0, 0], [1, 0], [0, 1], [0, 0]]},
                   (1, 6, 6, 2), "explicit")]

def make(config):
    if config.op == "explicit" or config.op == "max_pool2d":
        return stf.make(config)
    fn = inside if config.op == "inside" else no_rule
    return symjac.Pool("max", (2,), stride=2, layout="channels_last"), stf.wrap(fn, name=config.op)

known_defect = stf.known_defect
"""


def test_an_error_raised_inside_a_tf_op_under_vectorized_map_is_a_finding_not_unsupported(tmp_path):
    pytest.importorskip("tensorflow")
    result = symjac.conform(_adapter(tmp_path, RAISES_INSIDE), dtypes=("float32",), families=("distinct",),
                            transforms=("vmap",), isolate=False)  # (a user adapter: eager by default)
    cells = {r["config"]["label"]: r for r in result.results}
    # the traced error mentions pfor / vectorized_map, as every traced error does: still the op's own error
    assert (cells["inside"]["status"], cells["inside"].get("category")) == ("finding", "bad_output")
    assert "out of range in the traced graph" in cells["inside"]["summary"]
    # a forward and VJP that batch, a JVP that raises inside (MaxPoolGradGrad rejects EXPLICIT): a documented defect
    explicit = cells["explicit"]  # (and TensorFlow's NaN handling, documented for the nonfinite family)
    assert explicit["status"] == "known_defect" and ("bad_output", "given") in map(tuple, explicit["found"])
    # an op with no pfor converter: the capability TensorFlow lacks, unsupported
    assert cells["no_rule"]["status"] == "unsupported" and "No pfor vectorization defined" in cells["no_rule"]["reason"]
    from symjac.frameworks.keras._tape import no_batching_rule

    assert no_batching_rule(ValueError("in user code:\n  tf.vectorized_map ...\nValueError: Negative dimension size "
                                       "caused by subtracting 6 from 5 (pfor)")) is None


# ----------------------------------------------------------------------------- known defects (item 3)

ORT_SAME_DILATED = """
import symjac.frameworks.onnxruntime as so
from symjac.frameworks import Config

make, known_defect = so.make, so.known_defect

def configurations(grid="small"):
    return [Config("average_pool", {"kernel_shape": [2], "strides": [3], "dilations": [2], "auto_pad": "SAME_LOWER"},
                   (1, 2, 3), "values"),
            Config("average_pool", {"kernel_shape": [3], "dilations": [3], "auto_pad": "SAME_UPPER"}, (1, 1, 7),
                   "shape")]
"""


def test_ort_same_with_dilation_known_defect_matches_its_wrong_values_form(tmp_path):
    pytest.importorskip("onnxruntime")
    import symjac.frameworks.onnxruntime as so

    result = symjac.conform(_adapter(tmp_path, ORT_SAME_DILATED), dtypes=("float32",), families=("distinct",),
                            isolate=False)
    cells = {r["config"]["label"]: r for r in result.results}
    # L = 3, s = 3: out = ceil(3/3) = 1 either way; the dilated extent (2 - 1)·2 + 1 = 3 needs no pad, so the
    # window is cells {0, 2}: y = (x0 + x2)/2. ORT pads for the undilated kernel: same shape, other values.
    assert (cells["values"]["status"], cells["values"]["category"]) == ("known_defect", "forward_values")
    # k = 3, d = 3 on L = 7: the spec says 7 outputs, ORT returns 3
    assert (cells["shape"]["status"], cells["shape"]["category"]) == ("known_defect", "bad_output")
    assert result.ok
    _, impl = so.average_pool(kernel_shape=[2], strides=[3], dilations=[2], auto_pad="SAME_LOWER")
    x = np.array([[[1, 2, 4]]], np.float32)
    # ORT 1.32 returns 1 (cell 0 alone) where the mean of cells 0 and 2 is (1 + 4)/2 = 2.5
    assert impl.forward(x).shape == (1, 1, 1) and impl.forward(x)[0, 0, 0] != (1 + 4) / 2
    r = cli(_adapter(tmp_path, ORT_SAME_DILATED, "ort_cli"), *QUICK)
    assert r.returncode == 0, r.stdout + r.stderr


def test_keras_adaptive_max_jvp_cells_carry_their_own_form(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    import symjac.frameworks.tensorflow as stf
    from symjac.frameworks import Config

    # output size 1 on the first axis: eagerly the forward runs, the backward reads uninitialized memory, and
    # ForwardAccumulator's JVP raises (Negative dimension size); the SIGFPE is the last axis's (forward) form
    config = Config("AdaptiveMaxPooling2D", {"output_size": (1, 3)}, (1, 4, 5, 1))
    jvp_text, vjp_text = stf.known_defect(config, "jvp"), stf.known_defect(config, "vjp")
    assert "JVP raises" in jvp_text and "Negative dimension size" in jvp_text
    assert "garbage" in vjp_text
    adapter = _adapter(tmp_path, """
        import symjac.frameworks.tensorflow as stf
        from symjac.frameworks import Config
        make, known_defect = stf.make, stf.known_defect
        def configurations(grid="small"):
            return [Config("AdaptiveMaxPooling2D", {"output_size": (1, 3)}, (1, 4, 5, 1), "first axis 1")]
    """)
    result = symjac.conform(adapter, dtypes=("float32",), families=("distinct",), transforms=("jvp",))
    (cell,) = result.results
    assert (cell["status"], cell["category"]) == ("known_defect", "bad_output"), cell
    assert "JVP raises" in cell["known_defect"] and "Negative dimension size" in cell["summary"]


def test_a_transform_cell_does_not_call_the_callables_it_does_not_check(tmp_path):
    # the backward kills the process; forward mode is right: the jvp cell passes, the vjp cell crashed
    adapter = _adapter(tmp_path, """
        import dataclasses, os
        import symjac
        from symjac.frameworks import Config, Impl
        from symjac.pool._jacobian import jvp

        def configurations(grid="small"):
            return [Config("max", {}, (1, 1, 6), "max k2")]

        def make(config):
            spec = symjac.Pool("max", (2,))
            low = symjac.lower(spec, (1, 1, 6))
            return spec, Impl(low.forward, lambda x, dy: os.abort(), "numpy", "max",
                              jvp=lambda x, t: jvp(spec, x, t).astype(x.dtype))
    """)
    result = symjac.conform(adapter, dtypes=("float64",), families=("distinct",), transforms=("vjp", "jvp"))
    cells = {r["config"].get("transform", "vjp"): r for r in result.results}
    assert (cells["vjp"]["category"], cells["vjp"]["signal"]) == ("crashed", "SIGABRT")
    assert cells["jvp"]["status"] == "pass"


# ----------------------------------------------------------------------------- every cell's transform

CRASHES = """
import os
import symjac
from symjac.frameworks import Config, Impl

def configurations(grid="small"):
    return [Config("abort", {}, (1, 1, 4), "abort"), Config("ok", {}, (1, 1, 4), "ok")]

def make(config):
    spec = symjac.Pool("avg", (2,))
    low = symjac.lower(spec, (1, 1, 4))
    if config.op == "abort":
        return spec, Impl(lambda x: os.abort(), None, "numpy", "abort", jvp=lambda x, t: os.abort())
    return spec, Impl(low.forward, lambda x, dy: low.vjp(x, dy).astype(x.dtype), "numpy", "ok")
"""


def test_every_cell_records_its_transform_crashed_and_not_run_too(tmp_path):
    adapter = _adapter(tmp_path, CRASHES)
    result = symjac.conform(adapter, dtypes=("float64",), families=("distinct",), transforms=("vjp", "jvp"))
    crashed = [r for r in result.results if r.get("category") == "crashed"]
    assert {r["transform"] for r in crashed} == {"vjp", "jvp"}
    unrun = symjac.conform(adapter, dtypes=("float64",), families=("distinct",), transforms=("vjp", "jvp"),
                           budget=1e-9, isolate=False)
    assert {r["status"] for r in unrun.results} == {"not_run"}
    for doc in (json.loads(result.to_json()), json.loads(unrun.to_json())):
        assert all(r["transform"] in ("vjp", "jvp") and r["mode"] == "eager" for r in doc["results"]), doc


# ----------------------------------------------------------------------------- --no-isolate --timeout (item 4)

HUNG = """
import time
import symjac
from symjac.frameworks import Config, Impl

def configurations(grid="small"):
    return [Config("hung", {}, (1, 1, 4), "hung"), Config("ok", {}, (1, 1, 4), "ok")]

def make(config):
    spec = symjac.Pool("max", (2,))
    low = symjac.lower(spec, (1, 1, 4))
    backward = lambda x, dy: low.vjp(x, dy).astype(x.dtype)
    if config.op == "hung":
        return spec, Impl(lambda x: time.sleep(3600), backward, "numpy", "hung")
    return spec, Impl(low.forward, backward, "numpy", "ok")
"""


def test_no_isolate_with_a_hung_op_returns_a_timeout_finding(tmp_path):
    started = time.monotonic()
    r = cli(_adapter(tmp_path, HUNG), "--no-isolate", "--timeout", "2", "--dtype", "float64", "--families",
            "distinct", "-q", "--json", str(tmp_path / "c.json"), timeout=120)
    assert time.monotonic() - started < 100
    assert r.returncode == 1, r.stdout + r.stderr
    cells = {c["config"]["label"]: c for c in json.loads((tmp_path / "c.json").read_text())["results"]}
    assert (cells["hung"]["status"], cells["hung"]["category"], cells["hung"]["transform"]) == \
        ("finding", "timeout", "vjp")
    assert "did not return within 2 s" in cells["hung"]["summary"]
    assert cells["ok"]["status"] == "pass"  # the run went on
