"""Max unpooling (issue 31, item 1): symjac.MaxUnpool, its exact forward and derivative, and verify.

Expected values come from hand derivations written beside them, PyTorch's ``F.max_unpool*d``
and ``F.max_pool*d(return_indices=True)`` (torch 2.13, one thread: its CPU kernel writes each plane
sequentially then) and ONNX Runtime's ``MaxUnpool`` (opset 22); never from symjac itself.
Planted defects of every category the issue names are caught at symjac's defaults (no shape, no
input given), and correct implementations pass (0 false alarms).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cli_runner
import symjac
from symjac.pool._ops.unpool import cover, pooled_indices, repeated_indices, scatter


# -- a NumPy reference written from the frameworks' documentation, and its planted defects ----------
def reference(spec: symjac.MaxUnpool, *, order: str | None = None, overwritten_grad: bool = False,
              off_by_one: bool = False, ignore_dy: bool = False, size: str = "") -> dict:
    """forward/backward/jvp: y[index[i]] = x[i] in row-major order (the last write wins with
    ``order="last"``); the backward gathers dy for each winning write, 0 for an overwritten one."""
    order = order or spec.write

    def out_shape(x):
        sp = [(n - 1) * s + k - lo - hi for n, s, k, (lo, hi) in zip(x.shape[2:], spec.stride, spec.kernel,
                                                                         spec.padding)]
        if spec.output_size is not None and size != "ignores_output_size":
            sp = list(spec.output_size)
        if size == "times_stride":  # the defect: L·stride, PyTorch's rule forgotten
            sp = [n * s for n, s in zip(x.shape[2:], spec.stride)]
        return x.shape[:2] + tuple(sp)

    def targets(x, idx):
        shp = out_shape(x)
        t = idx.reshape(-1).astype(np.int64).copy()
        if spec.flat == "plane":
            t += np.arange(t.size) // math.prod(x.shape[2:]) * math.prod(shp[2:])
        if off_by_one:
            t = np.minimum(t + 1, math.prod(shp) - 1)
        return shp, t

    def winners(t):
        win = {}
        for i in (range(t.size) if order == "last" else reversed(range(t.size))):
            win[int(t[i])] = i
        return win

    def forward(x, idx):
        shp, t = targets(x, idx)
        y = np.zeros(math.prod(shp), dtype=x.dtype)
        for o, i in winners(t).items():
            y[o] = x.reshape(-1)[i]
        return y.reshape(shp)

    def backward(x, idx, dy):
        _, t = targets(x, idx)
        win = winners(t)
        dx = np.zeros(t.size, dtype=x.dtype)
        for i in range(t.size):
            if overwritten_grad or win[int(t[i])] == i:
                dx[i] = 1 if ignore_dy else dy.reshape(-1)[t[i]]
        return dx.reshape(x.shape)

    return {"forward": forward, "backward": backward, "jvp": lambda x, idx, t: forward(t, idx)}


SPECS = [symjac.MaxUnpool((3,), stride=2), symjac.MaxUnpool((3, 3), stride=2, padding=1),
         symjac.MaxUnpool((2, 2, 2)), symjac.MaxUnpool((3, 2), stride=(2, 1), output_size=(6, 4), flat="tensor")]


def _causes(report: symjac.Report) -> set[str]:
    return {str((f.detail or {}).get("cause", f.category)) for f in report.findings}


# -- spec -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"kernel_size": 2}, "kernel=2"),
    ({"kernel": 2, "padding": "same"}, "padding='same' is not valid for max unpooling"),
    ({"kernel": 2, "flat": "onnx"}, "flat='onnx' is not valid"),
    ({"kernel": 2, "write": "middle"}, "write='middle' is not valid"),
    ({"kernel": 2, "indices": [[[0.5, 1.0]]]}, "give integers"),
    ({"kernel": 2, "indices": np.zeros((1, 1, 2), dtype=np.int64)}, "have 1 spatial axes"),
    ({"kernel": 2, "indices": -np.ones((1, 1, 2, 2), dtype=np.int64)}, "counts output cells from 0"),
])
def test_spec_refuses_bad_fields_naming_them(kwargs, words) -> None:
    with pytest.raises(symjac.SpecError, match=words.replace("(", r"\(").replace(")", r"\)")):
        symjac.MaxUnpool(**kwargs)


def test_given_indices_out_of_the_output_are_an_input_error() -> None:
    # kernel 2, L = 2: the default output length is (2 - 1)·2 + 2 = 4, so index 4 is outside
    spec = symjac.MaxUnpool((2,), indices=np.array([[[1, 4]]]))
    with pytest.raises(symjac.InputError, match=r"index 4 at input cell \(0, 0, 1\) is outside the output"):
        symjac.verify(spec, reference(spec))


# -- exact forward and derivative -------------------------------------------------------------------
def test_write_order_and_gradient_by_hand() -> None:
    # x = [1, 2, 3, 4], indices [1, 1, 3, 1], kernel 2 (output length (4 - 1)·2 + 2 = 8): cells 0, 1 and 3
    # write output 1; the last write (x[3] = 4) wins: y = [0, 4, 0, 3, 0, 0, 0, 0]; the gradient goes to
    # input 3 (dy[1]) and input 2 (dy[3]); inputs 0 and 1 were overwritten: 0.
    s = scatter(symjac.MaxUnpool((2,)), (1, 1, 4), np.array([[[1, 1, 3, 1]]]))
    assert s.forward(np.array([[[1.0, 2, 3, 4]]])).tolist() == [[[0, 4, 0, 3, 0, 0, 0, 0]]]
    dy = np.arange(10.0, 90.0, 10.0).reshape(1, 1, 8)
    assert s.vjp(dy).tolist() == [[[0, 0, 40, 20]]]
    first = scatter(symjac.MaxUnpool((2,), write="first"), (1, 1, 4), np.array([[[1, 1, 3, 1]]]))
    assert first.forward(np.array([[[1.0, 2, 3, 4]]])).tolist() == [[[0, 1, 0, 3, 0, 0, 0, 0]]]
    assert first.vjp(dy).tolist() == [[[20, 0, 40, 0]]]
    j = s.jacobian().todense()  # one 1 per written output cell: (1, 3) and (3, 2)
    assert [(r, c) for r in range(8) for c in range(4) if j[r, c] != 0] == [(1, 3), (3, 2)]


def test_default_inputs_repeat_indices_on_their_own() -> None:
    # overlapping windows (kernel 3 > stride 2): pairs of windows share their maximum in the pooled family;
    # the repeats family repeats an index whatever the kernel (2 = stride here)
    for spec in (symjac.MaxUnpool((3, 3), stride=2, padding=1), symjac.MaxUnpool((2, 2))):
        for shape in cover(spec):
            s = scatter(spec, shape, repeated_indices(spec, shape))
            assert s.repeated().sum() > 0 and s.overwritten().sum() > 0
    spec = symjac.MaxUnpool((3, 3), stride=2, padding=1)
    assert all(scatter(spec, sh, pooled_indices(spec, sh)).repeated().sum() > 0 for sh in cover(spec))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_forward_matches_pytorch_on_max_pooling_indices(rank) -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # PyTorch's CPU kernel writes a plane sequentially on one thread
    try:
        kernel, stride = (3,) * rank, (2,) * rank
        source = torch.from_numpy(np.random.default_rng(rank).permutation(2 * 2 * 7**rank).astype(np.float64)
                                  .reshape((2, 2) + (7,) * rank))
        pool = [None, F.max_pool1d, F.max_pool2d, F.max_pool3d][rank]
        unpool = [None, F.max_unpool1d, F.max_unpool2d, F.max_unpool3d][rank]
        pooled, idx = pool(source, kernel, stride, 1, return_indices=True)
        for spec, shape_args in ((symjac.MaxUnpool(kernel, stride=stride, padding=1), {}),
                                 (symjac.MaxUnpool(kernel, stride=stride, padding=1, output_size=(7,) * rank),
                                  {"output_size": (7,) * rank})):
            x = pooled.numpy()
            s = scatter(spec, x.shape, idx.numpy())
            want = unpool(pooled, idx, kernel, stride, 1, **shape_args).numpy()
            np.testing.assert_array_equal(s.forward(x), want)
            # and with every pair of cells repeating an index (the write order decides each pair)
            rep = repeated_indices(spec, x.shape)
            np.testing.assert_array_equal(scatter(spec, x.shape, rep).forward(x),
                                          unpool(pooled, torch.from_numpy(rep), kernel, stride, 1,
                                                 **shape_args).numpy())
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("length, output_size", [(3, None), (3, 5), (3, 6), (3, 7), (3, 4), (3, 8), (2, 3)])
def test_output_size_rules_are_pytorchs_and_onnx_runtimes(length, output_size) -> None:
    torch = pytest.importorskip("torch")
    # kernel 3, stride 2: the default length is (L - 1)·2 + 3; PyTorch takes default ± stride exclusive
    x = torch.zeros(1, 1, length)
    idx = torch.zeros(1, 1, length, dtype=torch.long)
    try:
        want = torch.nn.functional.max_unpool1d(x, idx, 3, 2, output_size=output_size and [output_size]).shape
    except ValueError:
        want = None
    size = None if output_size is None else (output_size,)
    try:
        got = scatter(symjac.MaxUnpool((3,), stride=2, output_size=size), (1, 1, length),
                      np.zeros((1, 1, length), dtype=np.int64)).output_shape
    except symjac.SpecError:
        got = None
    assert got == (None if want is None else tuple(want))


def _onnx_unpool(x, idx, kernel, strides, pads, output_shape):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    h = onnx.helper
    names = ["X", "I"] + (["S"] if output_shape is not None else [])
    types = [onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.INT64]
    node = h.make_node("MaxUnpool", names, ["Y"], kernel_shape=kernel, strides=strides, pads=pads)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
                         [h.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 22)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"X": x, "I": idx} | ({"S": np.array(output_shape, dtype=np.int64)} if output_shape is not None else {})
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("output_size", [None, (6, 9), (5, 7)])
def test_tensor_indices_match_onnx_runtime(output_size) -> None:
    # ONNX's indices count the whole output tensor: an index of plane 1 may write into plane 0
    spec = symjac.MaxUnpool((3, 2), stride=(2, 2), padding=((1, 0), (0, 1)), flat="tensor", output_size=output_size)
    shape = (1, 2, 3, 4)
    default = (1, 2) + spec.default_size(shape[2:])  # (3-1)·2 + 3 - 1 = 6, (4-1)·2 + 2 - 1 = 7
    full = (1, 2) + (output_size or default[2:])
    x = (np.arange(24, dtype=np.float32) + 1).reshape(shape)
    idx = repeated_indices(spec, shape) if output_size != (5, 7) else None
    if idx is None:  # smaller than the default: ONNX Runtime refuses it, and so does the spec
        with pytest.raises(Exception, match="smaller than minimum"):
            _onnx_unpool(x, np.zeros(shape, dtype=np.int64), [3, 2], [2, 2], [1, 0, 0, 1], full)
        with pytest.raises(symjac.SpecError, match="give a size >= 6"):
            scatter(spec, shape, np.zeros(shape, dtype=np.int64))
        return
    idx[0, 1, 0, 0] = 3  # plane 1 writes plane 0's cell 3
    got = scatter(spec, shape, idx).forward(x)
    want = _onnx_unpool(x, idx, [3, 2], [2, 2], [1, 0, 0, 1], full if output_size else None)
    np.testing.assert_array_equal(got, want)


# -- verify: correct implementations pass, planted defects are caught at the defaults --------------
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_the_reference_passes_at_the_defaults(spec) -> None:
    report = symjac.verify(spec, reference(spec))
    assert report.ok, report.headline
    assert report.stats["repeated_outputs"] > 0  # repeated indices were exercised


def test_a_first_write_reference_passes_its_own_convention_and_fails_the_default() -> None:
    spec = symjac.MaxUnpool((3, 3), stride=2, padding=1)
    first = symjac.MaxUnpool((3, 3), stride=2, padding=1, write="first")
    assert symjac.verify(first, reference(first)).ok
    report = symjac.verify(spec, reference(spec, order="first"))
    assert _causes(report) == {"write_order"}
    assert "a repeated index's other write wins" in report.headline


@pytest.mark.parametrize("spec", [pytest.param(s, marks=pytest.mark.slow) if s.rank == 3 else s for s in SPECS],
                         ids=repr)
@pytest.mark.parametrize("defect, cause", [
    ({"order": "other"}, "write_order"),
    ({"overwritten_grad": True}, "overwritten"),
    ({"off_by_one": True}, "wrong_index"),
    ({"ignore_dy": True}, "ignores_upstream"),
])
def test_planted_defects_are_caught_and_named(spec, defect, cause) -> None:
    if defect.get("order") == "other":
        defect = {"order": "first" if spec.write == "last" else "last"}
    report = symjac.verify(spec, reference(spec, **defect))
    assert not report.ok
    if cause == "wrong_index":  # an index off by one: values land one output cell over (or nowhere)
        assert _causes(report) & {"wrong_index", "missing", "unwritten"}, report.headline
    else:
        assert cause in _causes(report), report.headline


@pytest.mark.parametrize("spec, defect", [
    (symjac.MaxUnpool((3,), stride=2), "times_stride"),
    (symjac.MaxUnpool((2, 2), output_size=(5, 5)), "ignores_output_size"),
])
def test_a_wrong_output_size_is_a_bad_output(spec, defect) -> None:
    report = symjac.verify(spec, reference(spec, size=defect))
    assert any(f.category == "bad_output" and "returned shape" in f.message for f in report.findings), \
        report.headline


def test_a_backward_routing_by_equal_values_is_caught() -> None:
    # dx[i] = dy[index[i]] where y[index[i]] == x[i]: right at distinct values, wrong where writes are equal
    spec = symjac.MaxUnpool((2,))
    ref = reference(spec)

    def backward(x, idx, dy):
        y = ref["forward"](x, idx).reshape(x.shape[0] * x.shape[1], -1)
        at = idx.reshape(y.shape[0], -1)
        won = np.take_along_axis(y, at, axis=1).reshape(x.shape) == x
        return np.where(won, np.take_along_axis(dy.reshape(y.shape), at, axis=1).reshape(x.shape), 0).astype(x.dtype)

    report = symjac.verify(spec, {"forward": ref["forward"], "backward": backward})
    # equal writes: every one "won" (the overwritten get dy); a NaN never equals itself (its gradient is lost)
    assert {f.family for f in report.findings} == {"equal_values", "nonfinite"}, report.headline
    assert _causes(report) == {"overwritten", "missing"}


# -- PyTorch's own F.max_unpool*d, through the adapter ---------------------------------------------------
@pytest.mark.parametrize("op, kwargs", [("max_unpool1d", {"kernel_size": 2}),
                                        ("max_unpool2d", {"kernel_size": 2, "output_size": [5, 5]}),
                                        ("max_unpool3d", {"kernel_size": 2})])
def test_pytorch_passes_where_no_index_repeats(op, kwargs) -> None:
    # kernel = stride: a max pooling's indices never repeat; PyTorch's forward, backward, jvp and double
    # backward are exact there
    sjt = pytest.importorskip("symjac.frameworks.torch")
    pytest.importorskip("torch")
    spec, impl = getattr(sjt, op)(**kwargs)
    report = symjac.verify(spec, impl, families=("pooled",))
    assert report.ok, report.headline
    assert report.stats["repeated_outputs"] == 0
    assert {n for n, t in report.stats["transforms"].items() if t["checked"]} == {"vjp", "jvp", "double_backward"}


def test_pytorch_sends_gradient_to_overwritten_values() -> None:
    # PyTorch's backward is dy.gather(indices) for every input cell (measured, torch 2.13): at a repeated
    # index the overwritten value gets dy too, which is not the derivative of its forward; its double
    # backward's ddy adds the writes to one cell up. Two planes per call: each on its own thread, so its
    # forward keeps the last write and nothing else is found.
    sjt = pytest.importorskip("symjac.frameworks.torch")
    pytest.importorskip("torch")
    spec, impl = sjt.max_unpool2d(3, 2, 1)
    assert spec == symjac.MaxUnpool((3, 3), stride=2, padding=1)
    report = symjac.verify(spec, impl, input_shape=(1, 2, 3, 3), transforms=("vjp", "jvp", "double_backward"))
    assert {(f.detail["role"], f.detail.get("cause")) for f in report.findings} == {
        ("backward", "overwritten"), ("double_backward", None)}, report.headline


def test_conform_torch_documents_the_defect_and_onnx_runtime_passes() -> None:
    pytest.importorskip("torch")
    conformance = symjac.conform("torch", ops=["max_unpool2d"], dtypes=("float32",), isolate=False)
    assert {r["status"] for r in conformance.results} == {"known_defect"}
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    conformance = symjac.conform("onnxruntime", ops=["max_unpool"], dtypes=("float32", "float64"), isolate=False)
    status = {(r["config"]["label"], r["dtype"]): r["status"] for r in conformance.results}
    assert {s for (_, d), s in status.items() if d == "float32"} == {"pass"}  # the last write wins (1.32)
    assert {s for (_, d), s in status.items() if d == "float64"} == {"unsupported"}  # no float64 kernel


# -- spec files: the [operator] form -------------------------------------------------------------------
def test_spec_file_operator_round_trips_and_verifies(tmp_path) -> None:
    from symjac.io._specwrite import dumps, operator_table

    spec = symjac.MaxUnpool((3, 2), stride=(2, 1), padding=((1, 0), (0, 0)), output_size=(4, 4), flat="tensor",
                            write="first")
    path = tmp_path / "unpool.toml"
    path.write_text(dumps("unpool", "max unpooling", operator_table(spec), {}))
    (case,) = symjac.load_spec_file(path).cases
    assert case.operator == spec
    given = tmp_path / "given.toml"  # the write order by hand: indices [1, 1, 3, 1], the last write wins
    given.write_text('[operator]\nkind = "max_unpool"\nkernel = [2]\nindices = [[[1, 1, 3, 1]]]\n\n'
                     '[input]\nx = [[[1, 2, 3, 4]]]\n')
    (case,) = symjac.load_spec_file(given).cases
    assert case.operator.scatter().forward(np.array([[[1.0, 2, 3, 4]]])).tolist() == [[[0, 4, 0, 3, 0, 0, 0, 0]]]
    from symjac.io._case import verify_case

    assert verify_case(case, reference(case.operator), "float64").ok
    bad = verify_case(case, reference(case.operator, overwritten_grad=True), "float64")
    assert _causes(bad) == {"overwritten"} and {f.family for f in bad.findings} >= {"given"}


def test_spec_file_refuses_unknown_keys_and_pool_inputs(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[operator]\nkind = "max_unpool"\nkernel = [2]\nmode = "max"\n')
    with pytest.raises(symjac.SpecError, match="mode"):
        symjac.load_spec_file(path)
    path.write_text('[operator]\nkind = "max_unpool"\nkernel = [2]\n\n[input]\ngenerator = "distinct"\n')
    with pytest.raises(symjac.SpecError, match="generator"):
        symjac.load_spec_file(path)


# -- arguments: typed errors, given values, other dtypes ------------------------------------------------
def test_bad_arguments_are_typed_errors_naming_what_is_valid() -> None:
    spec = symjac.MaxUnpool((2,))
    ref = reference(spec)
    with pytest.raises(symjac.InputError, match="families=.*'pooled', 'repeats'"):
        symjac.verify(spec, ref, families=("ties",))
    with pytest.raises(symjac.InputError, match=r"give \(N, C\) and 1 spatial sizes"):
        symjac.verify(spec, ref, input_shape=(1, 2, 3, 3))
    with pytest.raises(symjac.InputError, match="not exactly representable in float16"):
        symjac.verify(spec, ref, x=np.full((1, 1, 2), 0.1), dtype="float16")
    with pytest.raises(symjac.InputError, match="no ties"):
        symjac.verify(spec, ref, tie="first")
    with pytest.raises(symjac.InputError, match="nothing to verify"):
        symjac.verify(spec, {"vmap": lambda i, o: None})


@pytest.mark.parametrize("dtype", ["float16", "float32", pytest.param("bfloat16", marks=pytest.mark.requires("ml_dtypes"))])
def test_given_values_and_other_dtypes(dtype) -> None:
    spec = symjac.MaxUnpool((3, 3), stride=2, padding=1)
    x = np.arange(1.0, 17.0).reshape(2, 2, 2, 2)  # exact in every dtype (integers up to 16)
    assert symjac.verify(spec, reference(spec), x=x, dtype=dtype).ok
    report = symjac.verify(spec, reference(spec, overwritten_grad=True), x=x, dtype=dtype)
    assert _causes(report) == {"overwritten"}


# -- the command line ----------------------------------------------------------------------------------
def test_window_stages_refuse_max_unpooling_with_a_typed_error(tmp_path) -> None:
    from symjac.frameworks.native._offline import run_offline
    from symjac.io._explain import explain
    from symjac.io._specfile import pool_input

    path = tmp_path / "unpool.toml"
    path.write_text('[operator]\nkind = "max_unpool"\nkernel = [3]\nstride = [2]\n')
    (case,) = symjac.load_spec_file(path).cases
    for call in (lambda: explain(case), lambda: pool_input(case, plan=True)):
        with pytest.raises(symjac.SpecError, match=r"max unpooling \(kind = \"max_unpool\"\) has no windows"):
            call()
    # the offline route takes it (the indices are an input array: tests/test_native_unpool.py)
    assert run_offline(case, tmp_path / "requests") > 0


@pytest.mark.slow  # five runs of the command line
def test_command_line_verifies_and_refuses_window_stages_with_a_typed_error(tmp_path) -> None:

    spec_file = tmp_path / "unpool.toml"
    spec_file.write_text('[operator]\nkind = "max_unpool"\nkernel = [3]\nstride = [2]\n')
    impl = tmp_path / "impl.py"
    impl.write_text(f"import sys\nsys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})\n"
                    "import symjac\nfrom test_unpool import reference\n"
                    "good = reference(symjac.MaxUnpool((3,), stride=2))\n"
                    "bad = reference(symjac.MaxUnpool((3,), stride=2), overwritten_grad=True)\n")

    def run(*args):
        return cli_runner.symjac(*args, cwd=tmp_path)

    assert run("verify", "unpool.toml", "--impl", "impl.py:good").returncode == 0
    bad = run("verify", "unpool.toml", "--impl", "impl.py:bad")
    assert bad.returncode == 1 and "an overwritten value gets a gradient" in bad.stdout
    for args in (("explain", "unpool.toml"), ("graph", "unpool.toml", "--out", "g.dot")):
        r = run(*args)
        assert r.returncode == 2 and "max unpooling (kind = \"max_unpool\") has no windows" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    # the native routes take it (tests/test_native_unpool.py): probes writes its first round of requests
    r = run("probes", "unpool.toml", "--out", "requests")
    assert r.returncode == 0 and "more request(s) to run in requests" in r.stdout, r.stdout + r.stderr
