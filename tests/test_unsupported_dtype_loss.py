"""A dtype a loss implementation rejects on every call is unsupported, never a defect, in
``verify_loss`` and in ``conform``'s loss rows, as for pools (issue 21 item 6;
tests/test_unsupported_dtype.py is the pools' twin).

The implementations are the mean squared error written here: L = Σ(p - y)²/n, so
dL/dp = 2(p - y)/n and ∂²L/∂p² = (2/n)·I (H·v = 2v/n).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac

MSE = symjac.Loss("mse")
PRED = np.array([0.5, 1.0, -2.0, 0.25])
LABEL = np.array([0.0, 0.5, 1.0, 2.0])
N = PRED.size


class KernelMissing(Exception):
    """A framework's own exception type."""


def float32_only(error):
    """derivative, forward and hvp of the mean squared error that raise ``error`` in every dtype but float32."""

    def check(p):
        if p.dtype != np.float32:
            raise error(f"mse has no {p.dtype} kernel")

    def derivative(p, y):
        check(p)
        return (2 * (p - y) / N).astype(p.dtype)

    def forward(p, y):
        check(p)
        return np.asarray(((p - y) ** 2).mean(), dtype=p.dtype)

    def hvp(p, y, v):
        check(p)
        return (2 * v / N).astype(p.dtype)

    return derivative, forward, hvp


@pytest.mark.parametrize("error", [TypeError, RuntimeError, KernelMissing, NotImplementedError])
def test_a_float32_only_loss_is_unsupported_in_float64_with_its_reason(error):
    derivative, forward, hvp = float32_only(error)
    rep = symjac.verify_loss(MSE, derivative=derivative, forward=forward, hvp=hvp, pred=PRED, label=LABEL)
    assert rep.verdict == "UNSUPPORTED" and not rep.ok and rep.findings == ()
    for role in ("derivative", "forward", "hvp"):
        assert f"{role} raised {error.__name__} on every call in float64: mse has no float64 kernel" \
            in rep.unsupported
    assert rep.to_dict()["unsupported"] == rep.unsupported
    # the dtype it returns in, found by calling it in float32 (a NotImplementedError too)
    assert rep.returns_in == ("float32",)
    # in float32 it is verified, and passes
    assert symjac.verify_loss(MSE, derivative=derivative, forward=forward, hvp=hvp, pred=PRED, label=LABEL,
                              dtype="float32").ok


def test_a_forward_alone_that_rejects_the_dtype_is_unsupported():
    derivative, _, _ = float32_only(TypeError)
    _, forward, _ = float32_only(RuntimeError)

    def any_dtype(p, y):
        return (2 * (p - y) / N).astype(p.dtype)

    rep = symjac.verify_loss(MSE, derivative=any_dtype, forward=forward, pred=PRED, label=LABEL)
    assert rep.verdict == "UNSUPPORTED" and rep.findings == ()
    assert rep.unsupported.startswith("forward raised RuntimeError on every call in float64")
    assert str(rep).startswith("UNSUPPORTED: unsupported in float64")


def test_raising_on_the_first_call_only_is_a_defect():
    calls = []

    def derivative(p, y):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first call")
        return (2 * (p - y) / N).astype(p.dtype)

    rep = symjac.verify_loss(MSE, derivative=derivative, pred=PRED, label=LABEL)
    assert rep.verdict == "FAIL" and rep.unsupported is None and rep.categories() == ["bad_output"]


def test_raising_in_every_dtype_is_a_defect():
    def derivative(p, y):
        raise RuntimeError("broken")

    rep = symjac.verify_loss(MSE, derivative=derivative, pred=PRED, label=LABEL, dtype="float32")
    assert rep.verdict == "FAIL" and rep.unsupported is None and rep.categories() == ["bad_output"]


def test_two_exception_types_are_a_defect():
    calls = []

    def derivative(p, y):
        calls.append(1)
        raise (TypeError if len(calls) % 2 else ValueError)("no float64")

    rep = symjac.verify_loss(MSE, derivative=derivative, pred=PRED, label=LABEL)
    assert rep.verdict == "FAIL" and rep.unsupported is None


def test_a_rejected_forward_beside_a_wrong_derivative_still_fails():
    _, forward, _ = float32_only(TypeError)

    def doubled(p, y):  # 4(p - y)/n: twice the exact derivative
        return (4 * (p - y) / N).astype(p.dtype)

    rep = symjac.verify_loss(MSE, derivative=doubled, forward=forward, pred=PRED, label=LABEL)
    assert rep.verdict == "FAIL" and "forward raised TypeError on every call in float64" in rep.unsupported
    assert rep.categories() == ["wrong_scale"]


def test_returning_another_dtype_stays_a_finding():
    def derivative(p, y):
        return (2 * (p - y) / N).astype(np.float32)

    rep = symjac.verify_loss(MSE, derivative=derivative, pred=PRED, label=LABEL)
    assert rep.verdict == "FAIL" and rep.unsupported is None and "bad_output" in rep.categories()


ADAPTER = '''
import numpy as np
import symjac
from symjac.frameworks import LossConfig

PRED = np.array([0.5, 1.0, -2.0, 0.25])
LABEL = np.array([0.0, 0.5, 1.0, 2.0])


class KernelMissing(Exception):
    pass


def configurations(grid="small"):
    return []


def make(config):
    raise AssertionError("no pools here")


def loss_configurations(grid="small"):
    for op in ("runtimeerror", "custom", "returns_float32"):
        yield LossConfig(op, {}, PRED, LABEL, None, op)


def make_loss(config):
    n = PRED.size
    error = {"runtimeerror": RuntimeError, "custom": KernelMissing}.get(config.op)

    def check(p):
        if error is not None and p.dtype != np.float32:
            raise error(f"no {p.dtype} kernel for mse")

    def derivative(p, y):
        check(p)
        out = 2 * (p - y) / n
        return out.astype(np.float32 if config.op == "returns_float32" else p.dtype)

    def forward(p, y):
        check(p)
        return np.asarray(((p - y) ** 2).mean(), dtype=p.dtype)

    def hvp(p, y, v):
        check(p)
        return (2 * v / n).astype(p.dtype)

    return symjac.Loss("mse"), symjac.LossImpl(loss=symjac.Loss("mse"), derivative=derivative, forward=forward,
                                               hvp=hvp)
'''


def test_conform_calls_a_loss_dtype_the_framework_rejects_unsupported(tmp_path):
    path = tmp_path / "loss_dtypes.py"
    path.write_text(ADAPTER)
    result = symjac.conform(f"{path}:", dtypes=("float32", "float64"), transforms=("vjp", "hvp"), isolate=False,
                            ops=["losses"])
    cells = {(r["config"]["op"], r["config"].get("transform", "vjp"), r["dtype"]): r for r in result.results}
    for op, name in (("runtimeerror", "RuntimeError"), ("custom", "KernelMissing")):
        for transform in ("vjp", "hvp"):
            assert cells[op, transform, "float32"]["status"] == "pass"
            cell = cells[op, transform, "float64"]
            assert cell["status"] == "unsupported"
            assert f"raised {name} on every call in float64: no float64 kernel for mse" in cell["reason"]
    # a derivative returning float32 whatever it is given is a finding in float64
    assert cells["returns_float32", "vjp", "float32"]["status"] == "pass"
    assert cells["returns_float32", "vjp", "float64"]["category"] == "bad_output"
    assert [(r["config"]["op"], r["dtype"]) for r in result.findings] == [("returns_float32", "float64")]
