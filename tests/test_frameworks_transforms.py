"""The adapters' forward-mode, second-order and batched transforms (issue 23): ``Impl.jvp``,
``Impl.double_backward``, ``Impl.vmap`` (and ``verifiers._vmap.per_sample``), checked through
``symjac.verify``; planted bugs in each transform; ``conform --transforms``; the full grids
(slow) with their counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import cli_runner
import symjac
from framework_checks import nan_only, FULL, assert_counts, check_configurations
from symjac.frameworks import Impl
from symjac.frameworks.conform._transforms import verify_transform
from symjac.verifiers._vmap import per_sample as batched_per_sample

TRANSFORMS = ("jvp", "hvp", "vmap")


def _distinct(shape, seed=0):
    """Distinct small integers (exact in every dtype; no ties in any window)."""
    return np.random.default_rng(seed).permutation(np.prod(shape)).reshape(shape).astype(np.float64)


def per_sample(impl):
    """The adapter's batching rule one sample at a time (forward, backward, jvp), the per-sample op
    the reference where the sample's slots of a batch disagree."""
    import types

    reference = {role: getattr(impl, role) for role in ("forward", "backward", "jvp")}
    return types.SimpleNamespace(**batched_per_sample(impl.vmap, reference))


def _dense_jacobian(backward, x, out_shape):
    """The reverse-mode Jacobian, one one-hot dy per output: rows = outputs."""
    rows = []
    for i in range(int(np.prod(out_shape))):
        e = np.zeros(int(np.prod(out_shape)))
        e[i] = 1
        rows.append(np.asarray(backward(x, e.reshape(out_shape))).reshape(-1))
    return np.array(rows)


# ----------------------------------------------------------------------------- wiring, independent of symjac


@pytest.fixture
def torch_pools():
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    square, line = (1, 1, 6, 6), (1, 2, 9)
    return [(*sjt.max_pool2d(3, 2, 1), square), (*sjt.avg_pool2d(2, 2), square),
            (*sjt.adaptive_max_pool2d((2, 3)), square), (*sjt.max_pool1d(3, 1, 1, dilation=2), line)]


def test_torch_jvp_is_the_reverse_mode_jacobian_times_t(torch_pools):
    # Forward AD and reverse mode are separate code in PyTorch: J·t from forward AD must equal the
    # reverse-mode Jacobian (one-hot backward calls) times t. Max pooling routes values and avg_pool2d
    # (2, 2) divides dyadic sums by 4: both exact in float64.
    for _, impl, shape in torch_pools:
        x = _distinct(shape)
        t = np.random.default_rng(1).integers(-4, 5, x.shape).astype(np.float64)
        y = impl.forward(x)
        jac = _dense_jacobian(impl.backward, x, y.shape)
        np.testing.assert_array_equal(impl.jvp(x, t).reshape(-1), jac @ t.reshape(-1))


def test_torch_double_backward_is_jacobian_in_dy_and_zero_in_x(torch_pools):
    # ddy = J·v (the VJP is linear in dy); ddx = 0: avg and max pooling are piecewise linear, so the
    # VJP does not change with x away from ties (distinct inputs).
    for _, impl, shape in torch_pools:
        x = _distinct(shape)
        v = np.random.default_rng(2).integers(-4, 5, x.shape).astype(np.float64)
        y = impl.forward(x)
        dy = np.random.default_rng(3).integers(-4, 5, y.shape).astype(np.float64)
        ddx, ddy = impl.double_backward(x, dy, v)
        assert ddx.shape == x.shape and not ddx.any()
        np.testing.assert_array_equal(ddy.reshape(-1), _dense_jacobian(impl.backward, x, y.shape) @ v.reshape(-1))


def test_per_sample_returns_the_per_sample_results(torch_pools):
    for _, impl, shape in torch_pools:
        x = _distinct(shape)
        sample = per_sample(impl)
        y = impl.forward(x)
        dy = np.arange(y.size, dtype=np.float64).reshape(y.shape)
        np.testing.assert_array_equal(sample.forward(x), y)
        np.testing.assert_array_equal(sample.backward(x, dy), impl.backward(x, dy))
        np.testing.assert_array_equal(sample.jvp(x, x), impl.jvp(x, x))


def test_keras_global_pool_transforms_keep_symjac_s_output_shape():
    pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as stf

    spec, impl = stf.GlobalMaxPooling2D()  # (N, C) output, seen as (N, 1, 1, C)
    for transform in TRANSFORMS:
        report = verify_transform(spec, impl, transform, np.dtype("float32"), input_shape=(1, 3, 4, 2))
        assert report.ok or nan_only(report), f"{transform}: {report}"  # (its NaN handling: a known defect)


# ----------------------------------------------------------------------------- planted bugs


@pytest.fixture
def planted():
    pytest.importorskip("torch")
    import planted_torch

    return planted_torch


SPEC = symjac.Pool("max", (2, 2), stride=2)
SHAPE = (1, 1, 6, 6)


def _windows(report, category=None, family="distinct"):
    """The windows a report's findings name (of ``category``; at the distinct-values input): a
    finding's ``window`` and the ``(n,c,i,j)`` windows its message lists."""
    named = set()
    for f in report.findings:
        if f.family == family and category in (None, f.category):
            named |= {f.window} - {None}
            listed = f.message.split("cells")[0]  # the windows, not the cells a window's finding names
            named |= {tuple(int(v) for v in m.split(",")) for m in re.findall(r"\((\d+,\d+,\d+,\d+)\)", listed)}
    return sorted(named)


def test_zero_forward_ad_is_missing_windows_everywhere(planted):
    import torch

    import symjac.frameworks.torch as sjt

    impl = sjt.wrap(planted.ZeroJvp)
    report = symjac.verify(SPEC, forward=impl.forward, jvp=impl.jvp, input_shape=SHAPE)
    # every one of the 3 x 3 windows (the first listed one by one; the report lists at most 8)
    assert any(f.window is None and "9 of 9 windows send no gradient" in f.message for f in report.findings)
    assert _windows(report, "missing_windows") == [(0, 0, i, j) for i in range(3) for j in range(3)][:8]
    # PyTorch's own finite-difference check agrees there is a fault, without naming windows.
    x = torch.tensor(_distinct(SHAPE) / 8, requires_grad=True)
    assert not torch.autograd.gradcheck(planted.ZeroJvp.apply, (x,), check_forward_ad=True, raise_exception=False)
    # The VJP is PyTorch's own and right.
    assert symjac.verify(SPEC, forward=impl.forward, backward=impl.backward, input_shape=SHAPE).ok


def test_forward_ad_wrong_in_one_column_names_those_windows(planted):
    import symjac.frameworks.torch as sjt

    impl = sjt.wrap(planted.LastColumnJvp)
    report = symjac.verify(SPEC, forward=impl.forward, backward=impl.backward, jvp=impl.jvp, input_shape=SHAPE)
    # planted: the tangent of the last column of windows (j = 2) is dropped
    assert _windows(report) == [(0, 0, i, 2) for i in range(3)]
    assert _windows(report, "missing_windows") == [(0, 0, i, 2) for i in range(3)]


def test_wrong_double_backward_names_the_last_row(planted):
    import torch

    import symjac.frameworks.torch as sjt

    impl = sjt.wrap(planted.WrongDoubleBackward)
    report = symjac.verify(SPEC, forward=impl.forward, backward=impl.backward, double_backward=impl.double_backward,
                           input_shape=SHAPE)
    assert not report.ok
    # planted: the last row of windows (i = 2) of J·ggx reads the first row's cells
    assert _windows(report) == [(0, 0, 2, j) for j in range(3)]
    x = torch.tensor(_distinct(SHAPE) / 8, requires_grad=True)
    assert torch.autograd.gradcheck(planted.WrongDoubleBackward.apply, (x,), raise_exception=False)
    assert not torch.autograd.gradgradcheck(planted.WrongDoubleBackward.apply, (x,), raise_exception=False)


def test_batching_rule_that_reverses_samples_is_a_vmap_finding(planted):
    import symjac.frameworks.torch as sjt

    impl = sjt.wrap(planted.ReversedBatchRule)
    assert symjac.verify(SPEC, forward=impl.forward, backward=impl.backward, input_shape=SHAPE).ok
    report = verify_transform(SPEC, impl, "vmap", np.dtype("float64"), input_shape=SHAPE)
    # every window's forward is the companion's (negated, reversed) max: all 9 outputs differ
    assert any(f.category == "forward_values" and "at 9 of 9 outputs" in f.message for f in report.findings)


def test_vmap_rule_that_mixes_samples_in_one_slot_only():
    # A framework-free Impl: the batched backward of the second slot takes the first slot's dy.
    spec = symjac.Pool("avg", (2,), stride=2)  # y = pairwise means; J^T dy: dy/2 on each cell of a window

    def forward(x):
        return (x[..., 0::2] + x[..., 1::2]) / 2

    def backward(x, dy):
        return np.repeat(dy / 2, 2, axis=-1)

    def batched_backward(xs, dys):
        dys = dys.copy()
        dys[1] = dys[0]
        return np.repeat(dys / 2, 2, axis=-1)

    vmap = Impl(lambda xs: forward(xs), batched_backward, "numpy", "vmap")
    impl = Impl(forward, backward, "numpy", "avg", vmap=vmap)
    report = verify_transform(spec, impl, "vmap", np.dtype("float64"), input_shape=(1, 1, 6))
    assert not report.ok
    assert verify_transform(spec, impl, "vjp", np.dtype("float64"), input_shape=(1, 1, 6)).ok


def test_a_batched_rule_that_raises_is_a_finding_not_a_crash():
    spec = symjac.Pool("avg", (2,), stride=2)

    def forward(x):
        return (x[..., 0::2] + x[..., 1::2]) / 2

    def broken(xs):
        raise RuntimeError("no batching rule")

    impl = Impl(forward, None, "numpy", "avg", vmap=Impl(broken, None, "numpy", "vmap"))
    report = verify_transform(spec, impl, "vmap", np.dtype("float64"), input_shape=(1, 1, 6))
    assert "bad_output" in report.categories()


# ----------------------------------------------------------------------------- conform --transforms


def test_conform_has_one_column_per_transform():
    pytest.importorskip("torch")
    result = symjac.conform("torch", ops=["max_pool2d"], dtypes=("float32",), families=("distinct",),
                            transforms=("vjp", "jvp", "hvp", "vmap"), isolate=False)
    head = result.table().splitlines()[0].split()
    assert head == ["configuration", "vjp/float32", "jvp/float32", "hvp/float32", "vmap/float32"]
    assert result.ok and result.counts()["pass"] == len(result.results) > 0
    assert {r["config"].get("transform", "vjp") for r in result.results} == {"vjp", "jvp", "hvp", "vmap"}
    assert result.to_dict()["transforms"] == ["vjp", "jvp", "hvp", "vmap"]


def test_conform_planted_jvp_is_a_finding_in_the_jvp_column_only(tmp_path):
    pytest.importorskip("torch")
    adapter = tmp_path / "planted_adapter.py"
    adapter.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import symjac\nimport symjac.frameworks.torch as sjt\nfrom symjac.frameworks import Config\n"
        "import planted_torch\n"
        "class Adapter:\n"
        "    def configurations(self, grid='small'):\n"
        "        return [Config('zero_jvp', {}, (1, 1, 6, 6), 'ZeroJvp k2 s2')]\n"
        "    def make(self, config):\n"
        "        return symjac.Pool('max', (2, 2), stride=2), sjt.wrap(planted_torch.ZeroJvp)\n"
        "adapter = Adapter()\n")
    result = symjac.conform(f"{adapter}:adapter", dtypes=("float64",), families=("distinct",),
                            transforms=("vjp", "jvp"), isolate=False)
    status = {r["config"].get("transform", "vjp"): (r["status"], r.get("category")) for r in result.results}
    assert status == {"vjp": ("pass", None), "jvp": ("finding", "missing_windows")}
    assert ("zero_jvp", "jvp:missing_windows") in result.failure_classes()
    assert "vjp/float64" in result.table() and "missing_windows" in result.table()


def test_conform_transform_an_adapter_lacks_is_unsupported(tmp_path):
    pytest.importorskip("onnxruntime")
    result = symjac.conform("onnxruntime", ops=["max_pool"], dtypes=("float32",), families=("distinct",),
                            transforms=("jvp",), isolate=False)
    assert result.results and {r["status"] for r in result.results} == {"unsupported"}
    assert "no jvp" in result.results[0]["reason"]


def test_conform_unknown_transform_is_an_input_error():
    with pytest.raises(symjac.InputError, match="transform 'jacfwd' is not valid: give a subset of vjp, jvp, hvp, vmap"):
        symjac.conform("torch", transforms=("jacfwd",))


# ----------------------------------------------------------------------------- JAX and TensorFlow, one op each


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_jax_reduce_window_max_transforms_pass(transform):
    pytest.importorskip("jax")
    import symjac.frameworks.jax as sjj

    spec, impl = sjj.reduce_window_max((1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    report = verify_transform(spec, impl, transform, np.dtype("float32"), input_shape=(1, 5, 6, 2))
    assert report.ok or nan_only(report), report  # (JAX's NaN routing: a known defect)


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_tensorflow_avg_pool_transforms_pass(transform):
    pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as stf

    spec, impl = stf.avg_pool2d(3, 2, "SAME")
    report = verify_transform(spec, impl, transform, np.dtype("float32"), input_shape=(1, 5, 6, 2))
    assert report.ok, report


# ----------------------------------------------------------------------------- the full grids (slow)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_every_generated_configuration_passes_each_transform(framework, transform):
    pytest.importorskip(framework)
    import importlib

    module = importlib.import_module(f"symjac.frameworks.{framework}")
    # as the VJP grids: torch's full grid; JAX's and TensorFlow's (XLA compiles, eager calls) with
    # SYMJAC_FULL_GRID=1 (tests/framework_checks.py), their small grids otherwise
    grid = "full" if framework == "torch" or FULL else "small"
    assert_counts(check_configurations(module, grid, transform), grid)



def test_cli_transforms_option_rejects_an_unknown_one_in_one_line():

    r = cli_runner.symjac("conform", "torch", "--transforms", "vjp,jacfwd")
    assert r.returncode == 2
    assert "--transforms 'jacfwd' is not valid: give a comma-separated subset of vjp,jvp,hvp,vmap" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_tensorflow_defects_the_transforms_found():
    # Found by the transforms grid (tensorflow --grid small); per sample the VJP passes in each.
    pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as stf
    from symjac.frameworks import Config

    # tf.nn.max_pool2d with explicit padding: MaxPoolGradGrad takes only SAME / VALID, so its forward
    # mode (ForwardAccumulator transposes the gradient) and its second derivative raise.
    config = Config("max_pool2d", {"ksize": [3, 3], "strides": [3, 3], "padding": [[0, 0], [1, 0], [0, 1], [0, 0]]},
                    (1, 6, 6, 2))
    spec, impl = stf.make(config)
    vjp = verify_transform(spec, impl, "vjp", np.dtype("float32"), input_shape=config.input_shape)
    assert vjp.ok or nan_only(vjp)  # (TensorFlow's NaN handling: a known defect of the nonfinite family)
    report = verify_transform(spec, impl, "jvp", np.dtype("float32"), input_shape=config.input_shape)
    assert "bad_output" in report.categories() and "EXPLICIT" in report.summary()
    assert "MaxPoolGradGrad" in stf.known_defect(config, "hvp") and stf.known_defect(config).families == ("nonfinite",)
    # Keras adaptive max pooling under tf.vectorized_map: the JVP came back zero in most of the 18
    # windows, a different number from call to call, in a process that had run other configurations
    # first (none in 4 runs of a fresh process, TF 2.21): whatever shows is the documented defect's.
    config = Config("AdaptiveMaxPooling2D", {"output_size": [3, 6]}, (1, 5, 6, 1))
    spec, impl = stf.make(config)
    jvp = verify_transform(spec, impl, "jvp", np.dtype("float32"), input_shape=config.input_shape)
    assert jvp.ok or nan_only(jvp)  # (its forward's NaN handling: a known defect)
    report = verify_transform(spec, impl, "vmap", np.dtype("float32"), input_shape=config.input_shape)
    known = stf.known_defect(config, "vmap")
    unexplained = [(f.category, f.family, f.message) for f in report.findings if not known.explains(f.category, f.family)]
    assert not report.ok and not unexplained, unexplained
    assert "vectorized_map" in known and set(known.categories) >= {"missing_windows", "nondeterministic"}


def test_tensorflow_forward_mode_defects_of_the_full_grid():
    # Found by the transforms' full TensorFlow grid (SYMJAC_FULL_GRID=1); per sample the VJP passes in each.
    pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as stf
    from symjac.frameworks import Config

    # tf.nn.pool with window 1 and dilation 2 is the identity (each output cell reads one input cell),
    # so J·t = t. Per sample ForwardAccumulator gives t; under tf.vectorized_map it gives zeros.
    config = Config("pool", {"window_shape": [1], "pooling_type": "MAX", "strides": [1], "padding": "VALID",
                             "dilations": [2]}, (1, 8, 2))
    spec, impl = stf.make(config)
    x = np.arange(16, dtype=np.float32).reshape(1, 8, 2)
    t = np.ones_like(x)
    np.testing.assert_array_equal(impl.jvp(x, t), t)
    assert not per_sample(impl).jvp(x, t).any()
    report = verify_transform(spec, impl, "vmap", np.dtype("float32"), input_shape=config.input_shape)
    assert "missing_windows" in report.categories()
    assert "vectorized_map" in stf.known_defect(config, "vmap") and stf.known_defect(config).families == ("nonfinite",)
    # Keras adaptive average pooling to one output cell: the mean of the 5 cells (here 4 and 5 per
    # channel) is right; Keras' second window of ceil(5/1) + 1 = 6 cells exceeds the axis, and the JVP raises.
    config = Config("AdaptiveAveragePooling1D", {"output_size": (1,)}, (1, 5, 2))
    spec, impl = stf.make(config)
    x = np.arange(10, dtype=np.float32).reshape(1, 5, 2)
    np.testing.assert_array_equal(impl.forward(x), x.mean(axis=1, keepdims=True))
    report = verify_transform(spec, impl, "jvp", np.dtype("float32"), input_shape=config.input_shape)
    assert "bad_output" in report.categories() and "Negative dimension size" in str(report)
    assert "ceil(L/o) + 1" in stf.known_defect(config, "jvp")
    # two output cells: windows of 3 and 4 cells fit the axis, and the JVP is right
    config = Config("AdaptiveAveragePooling1D", {"output_size": (2,)}, (1, 5, 2))
    spec, impl = stf.make(config)
    assert stf.known_defect(config, "jvp") is None
    assert verify_transform(spec, impl, "jvp", np.dtype("float32"), input_shape=config.input_shape).ok


@pytest.mark.slow
def test_tensorflow_dilated_pool_jvp_raises_after_many_shapes_in_one_process():
    # The full grid's 34 dilated tf.nn.pool configurations (float32), in its order, in a fresh
    # process that runs only TensorFlow: ForwardAccumulator's JVP of each alone is right (the grid
    # verifies them one by one: ok), yet the 34th raises once the 33 before it have run.
    pytest.importorskip("tensorflow")
    import subprocess
    import sys

    import symjac.frameworks.tensorflow as stf

    cases = [(c.input_shape, c.kwargs["window_shape"], c.kwargs["pooling_type"], c.kwargs["dilations"])
             for c in stf.configurations("full") if c.op == "pool" and max(c.kwargs["dilations"] or (1,)) > 1
             and not stf.limitation(c, "float32")][:34]
    script = (
        "import numpy as np, tensorflow as tf\n"
        f"cases = {cases!r}\n"
        "def jvp(shape, w, typ, d):\n"
        "    x = tf.constant(np.random.default_rng(0).standard_normal(shape).astype(np.float32))\n"
        "    with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as acc:\n"
        "        y = tf.nn.pool(x, window_shape=w, pooling_type=typ, strides=[1] * len(w), padding='VALID', dilations=d)\n"
        "    return acc.jvp(y)\n"
        "import sys\n"
        "order = [33] if sys.argv[1] == 'alone' else range(34)\n"
        "for i in order:\n"
        "    try:\n"
        "        jvp(*cases[i])\n"
        "    except ValueError as e:\n"
        "        print('raised at', i, str(e).splitlines()[0]); break\n"
        "else:\n"
        "    print('no raise')\n")
    out = {how: subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=600).stdout
           for how in ("alone", "sequence")}
    assert "no raise" in out["alone"], out
    assert "raised at 33 block_shape must have known size" in out["sequence"], out


def test_tensorflow_vectorized_jvp_of_max_pooling_is_zero_for_a_batch_of_one():
    # Found when the batched check ran batches of 1, 2 and 3 (issue 34): TensorFlow's own calls, no
    # symjac in between. tf.nn.max_pool1d(x, 3, 1, "SAME") on one sample of (1, 6, 2) with distinct
    # values is piecewise the identity on its window maxima, so its JVP at tangent t is t at each
    # window's argmax: nonzero for a nonzero t. Per sample ForwardAccumulator gives it; under
    # tf.vectorized_map a batch of 1 gives zeros, batches of 2 and 3 the per-sample values.
    tf = pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as stf
    from symjac.frameworks import Config

    def jvp(x, t):
        with tf.autodiff.ForwardAccumulator(x, t) as acc:
            y = tf.nn.max_pool1d(x, [3], [1], "SAME")
        return acc.jvp(y)

    mapped = tf.function(lambda a, b: tf.vectorized_map(lambda e: jvp(*e), (a, b), fallback_to_while_loop=False))
    rng = np.random.default_rng(0)
    for batch in (1, 2, 3):
        xs = rng.permutation(batch * 12).reshape(batch, 1, 6, 2).astype(np.float32)
        ts = np.ones_like(xs)
        want = np.stack([jvp(tf.constant(xs[b]), tf.constant(ts[b])).numpy() for b in range(batch)])
        assert (want == 1).all()  # every window's argmax gets its tangent 1
        got = mapped(xs, ts).numpy()
        if batch == 1 and got.any():
            pytest.skip("this TensorFlow's vectorized JVP of max pooling is right for a batch of 1: fixed")
        np.testing.assert_array_equal(got, np.zeros_like(want) if batch == 1 else want)
    config = Config("max_pool1d", {"ksize": [3], "strides": [1], "padding": "SAME"}, (1, 6, 2))
    assert "batch of one sample" in stf.known_defect(config, "vmap")
    assert "batch of one sample" not in (stf.known_defect(config, "jvp") or "")
    spec, impl = stf.make(config)
    report = verify_transform(spec, impl, "vmap", np.dtype("float32"), input_shape=config.input_shape)
    assert not report.ok and {f.category for f in report.findings if f.family != "nonfinite"} <= set(
        stf.known_defect(config, "vmap").categories)
