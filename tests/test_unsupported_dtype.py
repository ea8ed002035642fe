"""A dtype the implementation rejects on every call is unsupported, never a defect (issue 21 item 6)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cli_runner
import symjac

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = str(ROOT / "tests" / "conform_dtypes.py")
SPEC = symjac.Pool("avg", 2)


class KernelMissing(Exception):
    """A framework's own exception type."""


def float32_only(error, spec=SPEC):
    """An exact avg pool (symjac's lowering) that raises ``error`` for every dtype but float32."""

    def check(x):
        if x.dtype != np.float32:
            raise error(f"avg_pool2d has no {x.dtype} kernel")

    def forward(x):
        check(x)
        return symjac.lower(spec, x.shape).forward(x)

    def backward(x, dy):
        check(x)
        return symjac.lower(spec, x.shape).vjp(x, dy)

    return forward, backward


@pytest.mark.parametrize("error", [TypeError, RuntimeError, KernelMissing, NotImplementedError])
def test_a_float32_only_implementation_is_unsupported_in_float64_with_its_reason(error):
    forward, backward = float32_only(error)
    rep = symjac.verify(SPEC, forward=forward, backward=backward, input_shape=(1, 2, 4, 4))
    assert not rep.ok and rep.findings == () and rep.categories() == []
    assert rep.verdict == "UNSUPPORTED"
    assert f"backward raised {error.__name__} on every call in float64: avg_pool2d has no float64 kernel" \
        in rep.unsupported
    assert str(rep).startswith("UNSUPPORTED: unsupported in float64")
    assert rep.to_dict()["unsupported"] == rep.unsupported
    # the dtype it returns in, found by calling it in float32 (a NotImplementedError too: only one raised in
    # every dtype says "not written")
    assert rep.returns_in == ("float32",) == tuple(rep.to_dict()["returns_in"])
    # and in float32 it is verified, and passes
    assert symjac.verify(SPEC, forward=forward, backward=backward, input_shape=(1, 2, 4, 4), dtype="float32").ok


def test_the_coverage_plan_of_a_float32_only_implementation_is_unsupported():
    forward, backward = float32_only(RuntimeError)
    rep = symjac.verify(SPEC, forward=forward, backward=backward)
    assert rep.verdict == "UNSUPPORTED" and rep.findings == ()
    assert rep.summary().startswith("unsupported in float64 at every shape of the coverage plan: ")
    assert rep.returns_in == ("float32",)


def test_raising_at_some_inputs_only_is_a_defect():
    lowered = symjac.lower(SPEC, (1, 2, 4, 4))

    def backward(x, dy):  # fails where the input holds a negative value: not a dtype it lacks
        if (x < 0).any():
            raise RuntimeError("kernel failed")
        return lowered.vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, forward=lowered.forward, x=np.full((1, 2, 4, 4), -1.0))
    # every call raised, and in float32 at the same input too: the input, not the dtype
    assert "bad_output" in rep.categories() and rep.unsupported is None


@pytest.mark.parametrize("only_float64", [False, True])
def test_raising_at_some_shapes_of_the_plan_only_is_a_defect(only_float64):
    # symjac.cover(Pool("avg", 2)) is (2, 3, 8, 8), (2, 3, 8, 9), (2, 3, 9, 8), (2, 3, 9, 9)
    def forward(x):
        if x.shape[-1] == 9 and (x.dtype == np.float64 or not only_float64):
            raise TypeError("setup failed")
        return symjac.lower(SPEC, x.shape).forward(x)

    rep = symjac.verify(SPEC, forward=forward)
    assert rep.categories() == ["bad_output"] and rep.unsupported is None
    assert rep.stats["shapes"][0]["ok"] and not rep.stats["shapes"][1]["ok"]
    if only_float64:  # rejected at width 9 only: the float64 kernel exists, so this is a defect
        assert "at input shape (2, 3, 8, 9): forward raised TypeError on every call in float64: setup failed " \
               "(it returns in float32), though it returns in this dtype at other shapes" in rep.findings[0].message


def test_raising_on_some_calls_only_is_a_defect():
    calls = [0]
    lowered = symjac.lower(SPEC, (1, 2, 4, 4))

    def backward(x, dy):
        calls[0] += 1
        if calls[0] > 1:
            raise TypeError("second call")
        return lowered.vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, forward=lowered.forward, input_shape=(1, 2, 4, 4))
    assert "bad_output" in rep.categories() and rep.unsupported is None


def test_raising_in_every_dtype_is_a_defect():
    def backward(x, dy):
        raise TypeError("a bug, not a dtype")

    rep = symjac.verify(SPEC, backward=backward, input_shape=(1, 2, 4, 4))
    assert rep.categories() == ["bad_output"] and rep.unsupported is None


def test_returning_another_dtype_stays_a_finding():
    lowered = symjac.lower(SPEC, (1, 2, 4, 4))
    rep = symjac.verify(SPEC, backward=lambda x, dy: lowered.vjp(x, dy).astype(np.float32),
                        input_shape=(1, 2, 4, 4))
    assert "bad_output" in rep.categories() and rep.unsupported is None
    assert any("returned dtype float32; expected float64" in f.message for f in rep.findings)


def test_isolated_the_rejected_dtype_is_unsupported_too():
    forward, backward = float32_only(KernelMissing)
    rep = symjac.verify(SPEC, forward=forward, backward=backward, input_shape=(1, 2, 4, 4), isolate=True)
    assert rep.verdict == "UNSUPPORTED" and "backward raised KernelMissing on every call" in rep.unsupported


def float32_only_transforms(error, spec=SPEC):
    """jvp and double_backward of the avg pool that raise ``error`` for every dtype but float32
    (avg pooling is linear: J·t is the pool of t, ddx = 0 and ddy = J·v)."""

    def check(x):
        if x.dtype != np.float32:
            raise error(f"avg_pool2d has no {x.dtype} kernel")

    def jvp(x, t):
        check(x)
        return symjac.lower(spec, x.shape).forward(t)

    def double_backward(x, dy, v):
        check(x)
        return np.zeros_like(x), symjac.lower(spec, x.shape).forward(v)

    return jvp, double_backward


@pytest.mark.parametrize("shape", [(1, 2, 4, 4), None])
@pytest.mark.parametrize("error", [TypeError, KernelMissing])
def test_a_float32_only_jvp_and_double_backward_are_unsupported_in_float64(error, shape):
    jvp, double_backward = float32_only_transforms(error)
    for given in ({"jvp": jvp}, {"double_backward": double_backward}, {"jvp": jvp, "double_backward": double_backward}):
        rep = symjac.verify(SPEC, input_shape=shape, **given)
        assert rep.verdict == "UNSUPPORTED" and rep.findings == ()
        for role in given:
            assert f"{role} raised {error.__name__} on every call in float64: avg_pool2d has no float64 kernel" \
                in rep.unsupported
        assert symjac.verify(SPEC, input_shape=shape, dtype="float32", **given).ok
    # beside a backward that passes, the transform's rejection still says unsupported
    forward, backward = float32_only(error)
    rep = symjac.verify(SPEC, forward=lambda x: symjac.lower(SPEC, x.shape).forward(x),
                        backward=lambda x, dy: symjac.lower(SPEC, x.shape).vjp(x, dy), jvp=jvp, input_shape=shape)
    assert rep.verdict == "UNSUPPORTED" and rep.findings == () and rep.unsupported.startswith("jvp raised")


def test_a_jvp_rejecting_the_dtype_at_some_plan_shapes_only_is_a_defect():
    def jvp(x, t):  # float64 fails at width 9 only; float32 everywhere is fine
        if x.dtype == np.float64 and x.shape[-1] == 9:
            raise RuntimeError("no float64 kernel for odd widths")
        return symjac.lower(SPEC, x.shape).forward(t)

    widths = {shape[-1] for shape in symjac.cover(SPEC)}
    assert 9 in widths and len(widths) > 1  # the plan has width 9 and another width
    rep = symjac.verify(SPEC, jvp=jvp)
    assert rep.verdict == "FAIL" and rep.unsupported is None and rep.categories() == ["bad_output"]
    assert "though it returns in this dtype at other shapes of the coverage plan" in rep.summary()


def test_a_double_backward_raising_in_every_dtype_is_a_defect():
    def double_backward(x, dy, v):
        raise RuntimeError("broken")

    rep = symjac.verify(SPEC, double_backward=double_backward, input_shape=(1, 2, 4, 4))
    assert rep.verdict == "FAIL" and rep.unsupported is None and rep.categories() == ["bad_output"]


def test_conform_calls_a_transform_that_rejects_the_dtype_unsupported():
    result = symjac.conform(ADAPTER, dtypes=("float32", "float64"), families=("distinct",), isolate=False,
                            transforms=("jvp", "hvp"), ops=["typeerror", "custom"])
    cells = {(r["config"]["op"], r["config"]["transform"], r["dtype"]): r for r in result.results}
    for op, name in (("typeerror", "TypeError"), ("custom", "KernelMissing")):
        for transform, roles in (("jvp", ("forward", "jvp")), ("hvp", ("double_backward",))):
            assert cells[op, transform, "float32"]["status"] == "pass"
            cell = cells[op, transform, "float64"]
            assert cell["status"] == "unsupported", cell
            for role in roles:
                assert f"{role} raised {name} on every call in float64: no float64 kernel for avg_pool2d" \
                    in cell["reason"]
    assert result.ok and not result.findings


@pytest.mark.parametrize("isolate", [False, True])
def test_conform_with_a_user_adapter_calls_a_rejected_dtype_unsupported(isolate):
    result = symjac.conform(ADAPTER, dtypes=("float32", "float64", "float16"), families=("distinct",),
                            isolate=isolate)
    cells = {(r["config"]["op"], r["dtype"]): r for r in result.results}
    for op, name in (("typeerror", "TypeError"), ("runtimeerror", "RuntimeError"), ("custom", "KernelMissing")):
        assert cells[op, "float32"]["status"] == "pass"
        for dtype in ("float64", "float16"):
            assert cells[op, dtype]["status"] == "unsupported"
            assert f"raised {name} on every call in {dtype}: no {dtype} kernel for avg_pool2d" \
                in cells[op, dtype]["reason"]
    # a backward returning float32 whatever it is given is a finding in float64 and float16
    assert cells["returns_float32", "float32"]["status"] == "pass"
    assert cells["returns_float32", "float64"]["category"] == "bad_output"
    assert [r["config"]["op"] for r in result.findings] == ["returns_float32"] * 2


def test_conform_without_ml_dtypes_says_why_bfloat16_is_not_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    result = symjac.conform(ADAPTER, dtypes=("bfloat16", "float32"), families=("distinct",), isolate=False,
                            ops=["typeerror"])
    cells = {r["dtype"]: r for r in result.results}
    assert cells["bfloat16"]["status"] == "not_run" and "ml_dtypes" in cells["bfloat16"]["reason"]
    assert cells["float32"]["status"] == "pass"
    table = result.table()
    row = next(line for line in table.splitlines() if line.startswith("typeerror"))
    assert "not run: ml_dtypes missing" in row and "unsupported" not in row
    assert "not run: ml_dtypes missing: bfloat16 needs ml_dtypes: pip install ml_dtypes" in table


def test_the_command_line_prints_unsupported(tmp_path):
    (tmp_path / "f32.py").write_text(
        "import numpy as np\n\n"
        "def backward(x, dy):\n"
        "    if x.dtype != np.float32:\n"
        "        raise TypeError(f'no {x.dtype} kernel')\n"
        "    # max 2x2 stride 2, one maximum per window: dy goes to the argmax of each window\n"
        "    h, w = x.shape\n"
        "    win = x.reshape(h // 2, 2, w // 2, 2).transpose(0, 2, 1, 3).reshape(h // 2, w // 2, 4)\n"
        "    hot = np.eye(4)[win.argmax(-1)] * dy[..., None]\n"
        "    return hot.reshape(h // 2, w // 2, 2, 2).transpose(0, 2, 1, 3).reshape(h, w).astype(x.dtype)\n")
    spec_file = str(ROOT / "specs" / "seeds" / "textbook_4x4_max.toml")

    def run(dtype):
        return cli_runner.symjac("verify", spec_file, "--impl", str(tmp_path / "f32.py"), "--dtype", dtype,
                                 cwd=tmp_path)

    r = run("float64")
    # exit 4: the dtype is rejected, nothing failed (docs/cli.md; it was 1 before issue 33 item 10)
    assert r.returncode == 4 and r.stdout.startswith("UNSUPPORTED textbook_4x4_max"), r.stdout + r.stderr
    assert "backward raised TypeError on every call in float64: no float64 kernel (it returns in float32)" in r.stdout
    assert r.stdout.splitlines()[-1] == "hint: the implementation returns float32: try --dtype float32"
    r = run("float32")
    assert r.returncode == 0 and r.stdout.startswith("PASS textbook_4x4_max"), r.stdout + r.stderr


def test_a_jvp_not_written_is_named_not_implemented_not_a_dtype_it_rejects():
    """Issue 33, item 2: a ``jvp`` raising NotImplementedError in every dtype was reported
    "unsupported in float64", as if float64 were the problem."""
    lowered = symjac.lower(SPEC, (1, 2, 4, 4))

    def jvp(x, t):
        raise NotImplementedError("jvp not written yet")

    rep = symjac.verify(SPEC, forward=lambda x: lowered.forward(x), backward=lambda x, dy: lowered.vjp(x, dy),
                        jvp=jvp, input_shape=(1, 2, 4, 4))
    assert rep.verdict == "UNSUPPORTED" and rep.findings == ()
    assert "jvp is not implemented: it raised NotImplementedError on every call, in every float dtype: " \
           "jvp not written yet" in rep.headline
    assert "unsupported in" not in rep.headline and rep.returns_in == ()
    # a jvp that is written for float32 only is a dtype it rejects, and says where it returns

    def jvp32(x, t):
        if x.dtype != np.float32:
            raise NotImplementedError(f"no {x.dtype} jvp")
        return lowered.forward(t)  # average pooling is linear: J(x)·t is its forward at t

    rep = symjac.verify(SPEC, forward=lambda x: lowered.forward(x), backward=lambda x, dy: lowered.vjp(x, dy),
                        jvp=jvp32, input_shape=(1, 2, 4, 4))
    assert rep.verdict == "UNSUPPORTED" and "unsupported in float64" in rep.headline and rep.returns_in == ("float32",)


def test_the_command_line_says_a_backward_not_written_needs_no_other_dtype(tmp_path):
    """A backward raising NotImplementedError in every dtype: exit 4 (UNSUPPORTED, no finding) and a
    hint that no --dtype will do, not "try another --dtype" (issue 33, item 2)."""
    (tmp_path / "todo.py").write_text("def backward(x, dy):\n    raise NotImplementedError('todo')\n")
    spec_file = str(ROOT / "specs" / "seeds" / "textbook_4x4_max.toml")
    r = cli_runner.symjac("verify", spec_file, "--impl", str(tmp_path / "todo.py"), cwd=tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "backward is not implemented: it raised NotImplementedError on every call, in every float dtype: todo" \
        in r.stdout and "unsupported in float64" not in r.stdout
    assert r.stdout.splitlines()[-1] == ("hint: the implementation raises NotImplementedError in float64 and every "
                                         "other float dtype: no --dtype will do; it is not written")
