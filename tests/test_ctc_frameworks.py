"""The frameworks' CTC losses as (spec, LossImpl): PyTorch's ``ctc_loss``, optax's ``ctc_loss`` and
``tf.nn.ctc_loss`` (issue 32), each verified with its own autodiff, and the defects planted in them.

Oracles, independent of the code under test: each framework's own forward and gradient (a correct
implementation must pass: 0 false alarms), and PyTorch's ``ctc_loss(log_softmax(z))`` with autograd
for the composition the logit-taking peers compute (``log_input=False``). The planted defects wrap a
framework's correct calls with one slip each: a wrong blank, the incoming gradient ignored, the loss
scale missing, ``"mean"``'s division by each target length missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import symjac
from symjac import Loss, LossImpl, SpecError, verify_loss
from symjac.frameworks._loss_grid import ctc_case

ADAPTERS = {"torch": ("torch", "symjac.frameworks.torch", "blank"),
            "jax": ("optax", "symjac.frameworks.jax", "blank_id"),
            "tensorflow": ("tensorflow", "symjac.frameworks.tensorflow", "blank_index")}


def _adapter(name: str) -> Any:
    package, module, _ = ADAPTERS[name]
    pytest.importorskip(package)
    import importlib

    return importlib.import_module(module)


def _make(name: str, blank: int = 0, reduction: str = "mean", scale: Any = 8, **extra: Any) -> tuple[Loss, LossImpl]:
    return _adapter(name).ctc_loss(**{ADAPTERS[name][2]: blank}, reduction=reduction, scale=scale, **extra)


def _inputs(loss: Loss) -> tuple[np.ndarray, Any]:
    """symjac's default CTC inputs with every alignment possible (the peers have no zero_infinity; optax
    has no +inf: item 3 gets 5 frames, enough for its target)."""
    pred, (targets, il, tl), _ = symjac.default_loss_inputs(loss)
    il = il.copy()
    il[3] = 5
    return pred, (targets, il, tl)


def _dtypes(name: str) -> list[str]:
    # TF's dense ctc_loss multiplies a float32 tensor into float64 logits and raises (measured, TF 2.x)
    return ["float32"] if name == "tensorflow" else ["float32", "float64"]


def test_the_specs_state_each_frameworks_convention() -> None:
    pytest.importorskip("torch")
    spec, impl = _make("torch", blank=2, reduction="sum", scale=1, zero_infinity=True)
    assert spec == Loss("ctc", reduction="sum", blank=2, zero_infinity=True, assume_log_softmax=True)
    assert impl.hvp is None  # PyTorch: "derivative for aten::_ctc_loss_backward is not implemented"
    for name in ("jax", "tensorflow"):
        try:
            spec, impl = _make(name, blank=1, reduction="none", scale=1)
        except pytest.skip.Exception:
            continue
        assert spec == Loss("ctc", reduction="none", blank=1, log_input=False) and impl.hvp is None
    with pytest.raises(SpecError, match="log_input=False"):
        Loss("ctc", log_input=False, assume_log_softmax=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_log_input_false_is_the_composition_with_log_softmax(reduction: str, dtype: str) -> None:
    """symjac's exact ctc(log_softmax(z)) and its derivative against PyTorch's ctc_loss of log_softmax(z)
    with autograd through both (float64; float32 logits read exactly)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    z = (np.round(rng.normal(size=(7, 3, 5)) * 8) / 8).astype(dtype).astype(np.float64)
    label = (np.array([[1, 1, 2], [3, 4, 3], [2, 2, 2]]), np.array([7, 5, 6]), np.array([3, 3, 2]))
    up = np.array([0.5, -1.0, 2.0]) if reduction == "none" else None
    t = torch.tensor(z, requires_grad=True)
    out = torch.nn.functional.ctc_loss(t.log_softmax(-1), *(torch.tensor(a) for a in label), reduction=reduction)
    out.backward(torch.ones_like(out) if up is None else torch.tensor(up))
    loss = Loss("ctc", reduction=reduction, log_input=False)
    value = np.array(symjac.loss_value(loss, z, label), dtype=float)
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-13)
    got = np.array(symjac.loss_derivative(loss, z, label, up), dtype=float)
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("name", ["torch", "jax", "tensorflow"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_each_frameworks_ctc_passes_at_the_defaults(name: str, reduction: str) -> None:
    for blank in (0, 2):
        loss, impl = _make(name, blank=blank, reduction=reduction)
        pred, label = _inputs(loss)
        for dtype in _dtypes(name):
            r = verify_loss(loss, derivative=impl.derivative, forward=impl.forward, pred=pred, label=label,
                            dtype=dtype)
            assert r.ok, f"{name} blank={blank} {dtype}: {r}"


def test_pytorch_with_zero_infinity_and_an_impossible_alignment_passes() -> None:
    for reduction in ("mean", "sum", "none"):
        loss, impl = _make("torch", reduction=reduction, zero_infinity=True)
        r = verify_loss(loss, derivative=impl.derivative, forward=impl.forward)
        assert r.ok and r.stats["impossible_alignments"] == 1, str(r)


def test_pytorch_as_a_free_input_derivative_is_named_assumes_log_softmax() -> None:
    loss, impl = _make("torch", reduction="sum", assume_log_softmax=False)
    r = verify_loss(loss, derivative=impl.derivative, forward=impl.forward)
    assert r.categories() == ["assumes_log_softmax"], str(r)


def _defect(name: str, defect: str) -> tuple[Loss, Any, Any]:
    """(spec, derivative, forward) of the framework's CTC with one slip."""
    reduction = {"ignores_upstream": "none", "wrong_mean": "mean", "wrong_blank": "sum"}.get(defect, "sum")
    loss, impl = _make(name, reduction=reduction)
    derivative, forward = impl.derivative, impl.forward
    if defect == "wrong_blank":  # the op called with blank 1 where the spec says 0
        _, other = _make(name, blank=1, reduction=reduction)
        derivative, forward = other.derivative, other.forward
    elif defect == "ignores_upstream":
        derivative = lambda lp, tg, il, tl, up: impl.derivative(lp, tg, il, tl)  # noqa: E731
    elif defect == "unscaled":
        derivative = lambda *a: impl.derivative(*a) / 8  # noqa: E731
    elif defect == "wrong_mean":  # "mean" as the sum over items / N: no division by each target length
        _, summed = _make(name, reduction="sum")
        derivative = lambda lp, *rest: summed.derivative(lp, *rest) / lp.shape[1]  # noqa: E731
    return loss, derivative, forward


DEFECTS = [("wrong_blank", "forward_values", ""), ("ignores_upstream", "wrong_values", "incoming gradient"),
           ("unscaled", "missing_scale", "S = 8"), ("wrong_mean", "wrong_scale", "target length")]


@pytest.mark.parametrize("name", ["torch", "jax", "tensorflow"])
@pytest.mark.parametrize(("defect", "category", "said"), DEFECTS)
def test_planted_defects_in_each_framework_are_caught(name: str, defect: str, category: str, said: str) -> None:
    loss, derivative, forward = _defect(name, defect)
    pred, label = _inputs(loss)
    r = verify_loss(loss, derivative=derivative, forward=forward, pred=pred, label=label, dtype="float32")
    assert category in r.categories(), f"{name} {defect}: {r}"
    assert any(said in f.message for f in r.findings if f.category == category), str(r)


def test_a_wrong_blank_is_caught_in_the_derivative_alone() -> None:
    loss, derivative, _ = _defect("torch", "wrong_blank")
    r = verify_loss(loss, derivative=derivative)
    assert r.categories() == ["wrong_values"], str(r)


def test_the_grid_reaches_every_ctc_option() -> None:
    """ctc_case's draws: each blank position, reduction and zero_infinity, repeats, an impossible
    alignment (+inf by the rule: fewer frames than labels plus repeats), padding frames, empty targets."""
    rng = np.random.default_rng(32)
    seen: set[Any] = set()
    for _ in range(60):
        options, x, (targets, il, tl), up = ctc_case(rng)
        frames, batch, classes = x.shape
        assert np.array_equal(x.astype(np.float16).astype(np.float64), x) and (up is None) == (
            options["reduction"] != "none")
        seen |= {("blank", options["blank"] in (0, classes - 1)), ("reduction", options["reduction"]),
                 ("zero_infinity", options["zero_infinity"])}
        for b in range(batch):
            t = targets[b, :tl[b]]
            repeats = int(np.count_nonzero(t[1:] == t[:-1]))
            seen |= {("repeat", repeats > 0), ("padding", bool(il[b] < frames)), ("empty", bool(tl[b] == 0)),
                     ("impossible", bool(il[b] < tl[b] + repeats))}
            assert options["blank"] not in t
    assert seen >= {("blank", True), ("blank", False), ("reduction", "mean"), ("reduction", "sum"),
                    ("reduction", "none"), ("zero_infinity", True), ("repeat", True), ("padding", True),
                    ("empty", True), ("impossible", True)}, seen


@pytest.mark.slow
def test_conform_runs_the_torch_ctc_grid_without_a_false_alarm() -> None:
    from cli_runner import symjac as run

    _adapter("torch")
    result = run("conform", "torch", "--ops", "ctc_loss", "--dtype", "float32,float64", "--transforms", "vjp,hvp")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ctc_loss" in result.stdout and " pass" in result.stdout
    assert "finding" not in result.stdout and "error" not in result.stdout, result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["jax", "tensorflow"])
def test_the_peers_ctc_grid_passes(name: str) -> None:
    """The conform cells of the first configurations (the whole grid: ``symjac conform jax --ops ctc_loss``,
    minutes: each shape compiles)."""
    from symjac.frameworks.conform._loss import run_loss_cell

    adapter = _adapter(name)
    first: dict[str, int] = {}  # the first configuration of each reduction
    for i, c in enumerate(adapter.loss_configurations("small")):
        if c.op == "ctc_loss":
            first.setdefault(c.kwargs["reduction"], i)
    assert len(first) >= 2
    for i in first.values():
        job = {"loss": True, "op": "ctc_loss", "grid": "small", "index": i, "transform": "vjp"}
        out = run_loss_cell(job, ADAPTERS[name][1], "float32")
        assert out["status"] == "pass", out
        hvp = run_loss_cell({**job, "transform": "hvp"}, ADAPTERS[name][1], "float32")
        assert hvp["status"] == "unsupported" and "no hvp" in hvp["reason"], hvp
