"""Issue 32, item 1: the likelihood losses nll, poisson_nll and gaussian_nll.

References, independent of the code under test: each loss written out below in mpmath from
its definition (PyTorch's documentation of ``nll_loss``, ``poisson_nll_loss`` and
``gaussian_nll_loss``), its derivative by ``mpmath.diff`` at 60 digits; PyTorch's forward and
autograd (importorskip). Correct NumPy references (stable forms, written here) and PyTorch's
own functions must pass ``verify_loss`` at its defaults (0 false alarms); the planted defects,
one change each to a correct reference, must be caught there.
"""

from __future__ import annotations

import math
import pathlib
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

import cli_runner
import symjac
from symjac import Loss, LossImpl, verify_loss

OPTIONS = {
    "nll": [{}, {"weight": (0.75, 2, 0.25)}, {"weight": (0.75, 2, 0.25), "ignore_index": 1}, {"ignore_index": 0}],
    "poisson_nll": [{}, {"full": True}, {"log_input": False}, {"log_input": False, "full": True, "eps": 2**-7}],
    "gaussian_nll": [{}, {"full": True}, {"eps": 2**-3}],
}
CASES = [pytest.param(kind, opts, id=f"{kind}-{i}") for kind, all_opts in OPTIONS.items()
         for i, opts in enumerate(all_opts)]
REDUCTIONS = ("mean", "sum", "none")
#: The verify_loss grids: mean in float32 in the default run, every other cell with --run-slow.
GRID = [pytest.param(reduction, dtype, marks=() if (reduction, dtype) == ("mean", "float32") else pytest.mark.slow,
                     id=f"{reduction}-{dtype}") for reduction in REDUCTIONS for dtype in ("float32", "float64")]


def _f(v: Any) -> Any:
    q = v if isinstance(v, Fraction) else Fraction(float(v))
    return mpmath.mpf(q.numerator) / q.denominator


# ------------------------------------------------------------------ mpmath from the definitions


def _definition(loss: Loss, pred: np.ndarray, label: np.ndarray) -> tuple[Any, Any]:
    """(z -> [ℓ_i], the mean's divisor) from PyTorch's documented definitions, in mpmath."""
    classes = pred.shape[-1]
    if loss.kind == "nll":  # ℓ = -w[y]·z[y]; the mean divides by Σ w[y] over the rows not at ignore_index
        w = [_f(v) for v in loss.weight] if loss.weight is not None else [mpmath.mpf(1)] * classes
        rows = [int(r) for r in label.reshape(-1)]
        keep = [r != loss.ignore_index for r in rows]

        def nll(z: list[Any]) -> list[Any]:
            return [-w[r] * z[i * classes + r] if k else mpmath.mpf(0) for i, (r, k) in enumerate(zip(rows, keep))]
        return nll, mpmath.fsum(w[r] for r, k in zip(rows, keep) if k)
    if loss.kind == "poisson_nll":  # e^z - y z or z - y log(z + eps); Stirling y log y - y + log(2πy)/2 where y > 1
        ys, eps = [_f(v) for v in label.reshape(-1)], _f(loss.eps)

        def poisson(z: list[Any]) -> list[Any]:
            out = []
            for zi, y in zip(z, ys):
                v = mpmath.exp(zi) - y * zi if loss.log_input else zi - y * mpmath.log(zi + eps)
                out.append(v + (y * mpmath.log(y) - y + mpmath.log(2 * mpmath.pi * y) / 2 if loss.full and y > 1
                                else 0))
            return out
        return poisson, mpmath.mpf(len(ys))
    # gaussian_nll: ½(log max(v, eps) + (μ - y)²/max(v, eps)) (+ ½ log 2π), pairs (μ, v)
    ys, eps = [_f(v) for v in label[..., 0].reshape(-1)], _f(loss.eps)

    def gaussian(z: list[Any]) -> list[Any]:
        out = []
        for i, y in enumerate(ys):
            m = max(z[2 * i + 1], eps)
            out.append((mpmath.log(m) + (z[2 * i] - y) ** 2 / m) / 2 + (mpmath.log(2 * mpmath.pi) / 2 if loss.full
                                                                      else 0))
        return out
    return gaussian, mpmath.mpf(len(ys))


def _total(loss: Loss, pred: np.ndarray, label: np.ndarray, upstream: Any) -> Any:
    elements, den = _definition(loss, pred, label)

    def total(*z: Any) -> Any:
        e = elements(list(z))
        if loss.reduction == "none":
            return mpmath.fsum(_f(u) * v for u, v in zip(np.asarray(upstream).reshape(-1), e))
        return mpmath.fsum(e) / (den if loss.reduction == "mean" else 1)
    return total


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(("kind", "opts"), CASES)
def test_values_and_derivatives_are_mpmaths_from_the_definition(kind: str, opts: dict[str, Any],
                                                                reduction: str) -> None:
    loss = Loss(kind, reduction=reduction, scale=8, **opts)
    pred, label, upstream = symjac.default_loss_inputs(loss)
    value = symjac.loss_value(loss, pred, label)
    got = symjac.loss_derivative(loss, pred, label, upstream).reshape(-1)
    with mpmath.workdps(60):
        elements, den = _definition(loss, pred, label)
        z0 = [_f(v) for v in pred.reshape(-1)]
        want = elements(z0)
        if reduction == "none":
            assert all(abs(a - b) <= mpmath.mpf(10) ** -40 * max(1, abs(b)) for a, b in zip(value.reshape(-1), want))
        else:
            total = mpmath.fsum(want) / (den if reduction == "mean" else 1)
            assert abs(value - total) <= mpmath.mpf(10) ** -40 * max(1, abs(total))
        f = _total(loss, pred, label, upstream)
        for j in range(len(z0)):
            d = 8 * mpmath.diff(lambda x, j=j: f(*z0[:j], x, *z0[j + 1:]), z0[j])
            assert abs(got[j] - d) <= mpmath.mpf(10) ** -30 * max(1, abs(d)), (j, got[j], d)


# ------------------------------------------------------------------ PyTorch


def _torch_fn(loss: Loss) -> Any:
    """PyTorch's functional for ``loss`` as ``fn(p, y) -> L`` (gaussian_nll: p[..., 0] the input, p[..., 1] var)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    red = loss.reduction
    if loss.kind == "nll":
        ignore = -100 if loss.ignore_index is None else loss.ignore_index
        return lambda p, y: F.nll_loss(p, y, weight=None if loss.weight is None else torch.tensor(
            [float(v) for v in loss.weight], dtype=p.dtype), ignore_index=ignore, reduction=red)
    if loss.kind == "poisson_nll":
        return lambda p, y: F.poisson_nll_loss(p, y, log_input=bool(loss.log_input), full=bool(loss.full),
                                               eps=float(loss.eps or 0), reduction=red)
    return lambda p, y: F.gaussian_nll_loss(p[..., 0], y[..., 0], p[..., 1], full=bool(loss.full),
                                            eps=float(loss.eps or 0), reduction=red)


def _torch_impl(loss: Loss) -> LossImpl:
    from symjac.frameworks.torch._losses import loss_impl

    return loss_impl(_torch_fn(loss), loss)


@pytest.mark.parametrize(("kind", "opts"), CASES)
def test_pytorch_forward_is_the_exact_value(kind: str, opts: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    loss = Loss(kind, reduction="none", **opts)
    pred, label, _ = symjac.default_loss_inputs(loss)
    y = torch.tensor(label) if kind == "nll" else torch.tensor(label, dtype=torch.float64)
    want = _torch_fn(loss)(torch.tensor(pred, dtype=torch.float64), y).numpy()
    got = np.array(symjac.loss_value(loss, pred, label), dtype=np.float64)
    assert np.allclose(got, want, rtol=1e-14, atol=0), (got, want)  # PyTorch's own float64 rounding


@pytest.mark.parametrize(("reduction", "dtype"), GRID)
@pytest.mark.parametrize(("kind", "opts"), CASES)
def test_pytorchs_losses_pass_at_the_defaults(kind: str, opts: dict[str, Any], reduction: str, dtype: str) -> None:
    pytest.importorskip("torch")
    loss = Loss(kind, reduction=reduction, scale=8, **opts)
    # gaussian_nll_loss forms (μ - y)² first: it overflows at the extreme family, test below
    families = ("nonfinite",) if kind == "gaussian_nll" else None
    report = verify_loss(loss, _torch_impl(loss), dtype=dtype, families=families)
    assert report.ok, str(report)
    assert "nonfinite" in report.stats["families"]


def test_pytorchs_gaussian_nll_overflows_where_the_exact_loss_is_finite() -> None:
    # (μ - y)² = (3G/2)² overflows float32 (G = 2^80) while ℓ ≈ 2.25G/2 and both derivatives
    # are finite: PyTorch's loss is inf and its variance gradient -inf (-(μ - y)²/(2v²))
    pytest.importorskip("torch")
    loss = Loss("gaussian_nll")
    report = verify_loss(loss, _torch_impl(loss), dtype="float32", families=("extreme",))
    assert not report.ok
    assert {f.category for f in report.findings} == {"bad_output"}
    assert all("extreme-magnitude" in f.message for f in report.findings)


def test_pytorchs_shared_variance_gradient_is_the_sum_of_the_pairs() -> None:
    # var of shape (N, 1) broadcast over D entries: its gradient is Σ_d ∂ℓ/∂v of the pairs that share it
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(32)
    mu, y = (np.round(rng.uniform(-2, 2, (3, 4)) * 64) / 64 for _ in range(2))
    var = np.array([[0.5], [1.25], [3.0]])
    loss = Loss("gaussian_nll", reduction="mean")
    pred = np.stack([mu, np.broadcast_to(var, mu.shape)], axis=-1)
    label = np.stack([y, np.zeros_like(y)], axis=-1)
    exact = np.array(symjac.loss_derivative(loss, pred, label), dtype=np.float64)
    v = torch.tensor(var, requires_grad=True)
    m = torch.tensor(mu, requires_grad=True)
    torch.nn.functional.gaussian_nll_loss(m, torch.tensor(y), v).backward()
    assert np.allclose(m.grad.numpy(), exact[..., 0], rtol=1e-14, atol=0)
    assert np.allclose(v.grad.numpy()[:, 0], exact[..., 1].sum(axis=1), rtol=1e-14, atol=0)


# ------------------------------------------------------------------ NumPy references and planted defects


def _nll(loss: Loss, *, weights: bool = True, ignore: bool = True, by_rows: bool = False, scale: bool = True,
         upstream: bool = True) -> LossImpl:
    """nll in NumPy: g[i, y_i] = -S·w[y_i]·r_i, r_i = 1/Σ w[y] (mean), 1 (sum), u_i (none)."""
    def parts(z: np.ndarray, t: np.ndarray, up: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = z.shape[-1]
        w = np.ones(c) if loss.weight is None or not weights else np.resize(np.array(loss.weight, dtype=float), c)
        rows = t.astype(np.int64).reshape(-1)
        keep = rows != loss.ignore_index if ignore and loss.ignore_index is not None else np.ones(rows.size, bool)
        k = np.where(keep, rows, 0) % c
        wy = np.where(keep, w[k], 0.0)
        if loss.reduction == "none":
            r = np.ones(rows.size) if up is None or not upstream else up.astype(np.float64).reshape(-1)
        elif loss.reduction == "sum":
            r = np.ones(rows.size)
        else:
            r = np.full(rows.size, 1.0 / (keep.sum() if by_rows else wy.sum()))
        return k, wy, r

    def derivative(z: np.ndarray, t: np.ndarray, up: Any = None) -> np.ndarray:
        k, wy, r = parts(z, t, up)
        g = np.zeros(z.shape, dtype=np.float64).reshape(-1, z.shape[-1])
        g[np.arange(k.size), k] = -wy * r * (float(loss.scale) if scale else 1.0)
        return g.reshape(z.shape).astype(z.dtype)

    def forward(z: np.ndarray, t: np.ndarray) -> np.ndarray:
        k, wy, r = parts(z, t, None)
        ell = -wy * z.astype(np.float64).reshape(-1, z.shape[-1])[np.arange(k.size), k]
        if loss.reduction == "none":
            return ell.astype(z.dtype)
        return np.asarray((ell * r).sum(), dtype=z.dtype)

    return LossImpl(loss, derivative, forward)


def _factor(loss: Loss, n: int, up: Any, *, upstream: bool = True, den: int | None = None) -> Any:
    if loss.reduction == "none":
        return 1.0 if up is None or not upstream else up.astype(np.float64)
    return 1.0 if loss.reduction == "sum" else 1.0 / (n if den is None else den)


def _poisson(loss: Loss, *, eps: bool = True, mask: str = ">", scale: bool = True, upstream: bool = True,
             by_rows: bool = False) -> LossImpl:
    """poisson_nll in NumPy (float64 inside, rounded to the dtype once)."""
    e = float(loss.eps or 0) if eps else 0.0

    def elements(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(all="ignore"):
            if loss.log_input:
                ell, h = np.exp(z) - y * z, np.exp(z) - y
            else:
                ell, h = z - y * np.log(z + e), 1 - y / (z + e)
            if loss.full:
                big = y > 1 if mask == ">" else y >= 1
                safe = np.where(big, y, 2.0)
                ell = ell + np.where(big, safe * np.log(safe) - safe + 0.5 * np.log(2 * np.pi * safe), 0.0)
        return ell, h

    def derivative(z: np.ndarray, y: np.ndarray, up: Any = None) -> np.ndarray:
        _, h = elements(z.astype(np.float64), y.astype(np.float64))
        r = _factor(loss, z.size, up, upstream=upstream, den=z.shape[0] if by_rows else None)
        return (h * r * (float(loss.scale) if scale else 1.0)).astype(z.dtype)

    def forward(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        ell, _ = elements(z.astype(np.float64), y.astype(np.float64))
        if loss.reduction == "none":
            return ell.astype(z.dtype)
        return np.asarray(ell.sum() * _factor(loss, z.size, None, den=z.shape[0] if by_rows else None), dtype=z.dtype)

    return LossImpl(loss, derivative, forward)


def _gaussian(loss: Loss, *, clamp: str = "min", var_grad: bool = True, scale: bool = True, upstream: bool = True,
              by_entries: bool = False) -> LossImpl:
    """gaussian_nll in NumPy, stable: r = (μ - y)/m, ℓ = ½(log m + r·(μ - y)), ∂ℓ/∂v = ½(1/m - r²) above ε."""
    eps = float(loss.eps or 0)

    def elements(p: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu, v, y = p[..., 0], p[..., 1], t[..., 0]
        with np.errstate(all="ignore"):
            m = np.maximum(v, eps) if clamp == "min" else np.minimum(v, eps)
            d = mu - y
            r = d / m
            ell = 0.5 * (np.log(m) + r * d) + (0.5 * math.log(2 * math.pi) if loss.full else 0.0)
            # 0 below ε; a NaN variance stays NaN (0·NaN), as max(NaN, ε) does in the loss
            hv = 0.5 * (1 / m - r * r) * (v > eps) if var_grad else np.zeros_like(v)
        return ell, np.stack([r, hv], axis=-1)

    def derivative(p: np.ndarray, t: np.ndarray, up: Any = None) -> np.ndarray:
        _, h = elements(p.astype(np.float64), t.astype(np.float64))
        r = _factor(loss, p.shape[0], up, upstream=upstream, den=p.size if by_entries else None)
        r = r[..., None] if isinstance(r, np.ndarray) else r
        return (h * r * (float(loss.scale) if scale else 1.0)).astype(p.dtype)

    def forward(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        ell, _ = elements(p.astype(np.float64), t.astype(np.float64))
        if loss.reduction == "none":
            return ell.astype(p.dtype)
        return np.asarray(ell.sum() * _factor(loss, p.shape[0], None, den=p.size if by_entries else None),
                          dtype=p.dtype)

    return LossImpl(loss, derivative, forward)


REFERENCES = {"nll": _nll, "poisson_nll": _poisson, "gaussian_nll": _gaussian}


@pytest.mark.parametrize(("reduction", "dtype"), GRID)
@pytest.mark.parametrize(("kind", "opts"), CASES)
def test_correct_numpy_references_pass_every_family(kind: str, opts: dict[str, Any], reduction: str,
                                                    dtype: str) -> None:
    loss = Loss(kind, reduction=reduction, scale=8, **opts)
    report = verify_loss(loss, REFERENCES[kind](loss), dtype=dtype)
    assert report.ok, str(report)
    ran = report.stats["families"]
    assert "nonfinite" in ran and ("extreme" in ran) == (kind != "poisson_nll" or not loss.log_input), ran


def _defect(kind: str, reduction: str, opts: dict[str, Any], **planted: Any) -> tuple[Loss, LossImpl]:
    loss = Loss(kind, reduction=reduction, scale=8, **opts)
    return loss, REFERENCES[kind](loss, **planted)


W = {"weight": (0.75, 2, 0.25)}
DEFECTS = [
    # (name, kind, reduction, options, planted change, the categories that may name it)
    ("nll missing scale", "nll", "mean", W, {"scale": False}, {"missing_scale"}),
    ("nll mean over rows, not Σ w[y]", "nll", "mean", W, {"by_rows": True}, {"wrong_scale", "wrong_values"}),
    ("nll weights ignored", "nll", "sum", W, {"weights": False}, {"wrong_values"}),
    ("nll ignore_index ignored", "nll", "sum", {"ignore_index": 1}, {"ignore": False}, {"wrong_values"}),
    ("nll ignore_index ignored, mean", "nll", "mean", {**W, "ignore_index": 1}, {"ignore": False},
     {"wrong_values", "wrong_scale"}),
    ("nll upstream ignored", "nll", "none", W, {"upstream": False}, {"wrong_values"}),
    ("poisson missing scale", "poisson_nll", "mean", {}, {"scale": False}, {"missing_scale"}),
    ("poisson mean over rows", "poisson_nll", "mean", {"log_input": False}, {"by_rows": True}, {"wrong_scale"}),
    ("poisson upstream ignored", "poisson_nll", "none", {}, {"upstream": False}, {"wrong_values"}),
    ("poisson eps left out", "poisson_nll", "sum", {"log_input": False}, {"eps": False}, {"wrong_values"}),
    ("poisson Stirling mask y >= 1", "poisson_nll", "sum", {"full": True}, {"mask": ">="}, {"forward_values"}),
    ("gaussian missing scale", "gaussian_nll", "mean", {}, {"scale": False}, {"missing_scale"}),
    ("gaussian mean over every entry", "gaussian_nll", "mean", {}, {"by_entries": True}, {"wrong_scale"}),
    ("gaussian upstream ignored", "gaussian_nll", "none", {}, {"upstream": False}, {"wrong_values"}),
    ("gaussian clamp on the wrong side", "gaussian_nll", "sum", {}, {"clamp": "max"}, {"wrong_values"}),
    ("gaussian no variance gradient", "gaussian_nll", "sum", {}, {"var_grad": False}, {"wrong_values"}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("name", "kind", "reduction", "opts", "planted", "categories"), DEFECTS,
                         ids=[d[0] for d in DEFECTS])
def test_planted_defects_are_caught_at_the_defaults(name: str, kind: str, reduction: str, opts: dict[str, Any],
                                                    planted: dict[str, Any], categories: set[str],
                                                    dtype: str) -> None:
    loss, impl = _defect(kind, reduction, opts, **planted)
    report = verify_loss(loss, impl, dtype=dtype)
    assert not report.ok, name
    found = {f.category for f in report.findings}
    assert found & categories, (name, found, str(report))


def test_the_kinds_are_constructible_with_their_defaults_and_take_pytorchs_options() -> None:
    # Issue 32: Loss("nll") was softmax_ce's synonym (a SpecError), the other two unknown
    assert Loss("nll").kind == "nll" and Loss("nll").ignore_index is None
    p = Loss("poisson_nll")
    assert (p.log_input, p.full, p.eps) == (True, False, Fraction(1e-8))
    g = Loss("gaussian_nll")
    assert (g.full, g.eps) == (False, Fraction(1e-6))
    with pytest.raises(symjac.SpecError, match="eps"):
        Loss("gaussian_nll", eps=0)
    with pytest.raises(symjac.SpecError, match="does not apply"):
        Loss("nll", label_smoothing=0.1)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(symjac.InputError, match=r"pred\[\.\.\., 1\]"):  # a negative variance
        symjac.loss_value(Loss("gaussian_nll"), [[0.0, -1.0]], [[0.0, 0.0]])
    with pytest.raises(symjac.InputError, match="pairs"):
        symjac.loss_value(Loss("gaussian_nll"), [[0.0, 1.0, 2.0]], [[0.0, 0.0, 0.0]])
    with pytest.raises(symjac.InputError, match=r"label\[\.\.\., 1\]"):
        symjac.loss_value(Loss("gaussian_nll"), [[0.0, 1.0]], [[0.0, 1.0]])
    with pytest.raises(symjac.InputError, match="z > -eps"):
        symjac.loss_value(Loss("poisson_nll", log_input=False), [-0.5], [1.0])
    with pytest.raises(symjac.InputError, match="out of range"):
        symjac.loss_value(Loss("nll"), [[-1.0, -2.0]], [2])
    with pytest.raises(symjac.InputError, match="divide by zero"):
        symjac.loss_value(Loss("nll", ignore_index=0), [[-1.0, -2.0]], [0])


def test_gaussian_clarke_set_at_the_clamp_and_zero_below() -> None:
    # at v = ε the derivative in v is the hull of 0 (below) and ½(1/ε - (μ - y)²/ε²) (above);
    # below ε it is 0: the loss does not depend on v there
    loss = Loss("gaussian_nll", eps=0.5, reduction="sum")
    lo, hi = symjac.loss_derivative_set(loss, [[1.0, 0.5]], [[0.0, 0.0]])
    above = 0.5 * (1 / 0.5 - 1 / 0.25)  # -1
    assert float(lo[0, 1]) == above and float(hi[0, 1]) == 0.0
    d = symjac.loss_derivative(loss, [[1.0, 0.25]], [[0.0, 0.0]])
    assert float(d[0, 1]) == 0.0 and float(d[0, 0]) == 2.0  # (μ - y)/ε


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("opts", OPTIONS["nll"], ids=["plain", "weight", "weight-ignore", "ignore0"])
def test_onnxruntime_negative_log_likelihood_loss_is_the_exact_value(opts: dict[str, Any], reduction: str) -> None:
    # ONNX Runtime has no autodiff: its NegativeLogLikelihoodLoss (opset 22) is an oracle of the value,
    # the weighted mean's denominator Σ w[y] over the rows not at ignore_index included
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    helper = onnx.helper
    loss = Loss("nll", reduction=reduction, **opts)
    pred, label, _ = symjac.default_loss_inputs(loss)
    attrs: dict[str, Any] = {"reduction": reduction}
    if loss.ignore_index is not None:
        attrs["ignore_index"] = loss.ignore_index
    inputs = ["X", "T"] + (["W"] if loss.weight is not None else [])
    node = helper.make_node("NegativeLogLikelihoodLoss", inputs, ["Y"], **attrs)
    i64 = onnx.TensorProto.INT64
    infos = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, None),
             helper.make_tensor_value_info("T", i64, None)]
    if loss.weight is not None:
        infos.append(helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT, None))
    graph = helper.make_graph([node], "nll", infos, [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"X": pred.astype(np.float32), "T": label.astype(np.int64)}
    if loss.weight is not None:
        feeds["W"] = np.array([float(w) for w in loss.weight], dtype=np.float32)
    (got,) = session.run(None, feeds)
    exact = symjac.loss_value(loss, pred, label)
    want = np.array(exact, dtype=np.float64) if reduction == "none" else float(exact)
    # the inputs are short dyadic fractions: float32 holds every product and sum here exactly
    assert np.array_equal(np.asarray(got, dtype=np.float64), want), (got, want)


def test_the_torch_adapter_maps_pytorchs_arguments_and_its_grid_passes() -> None:
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    assert sjt.nll_loss(weight=(1, 2), ignore_index=1, reduction="sum")[0] == Loss(
        "nll", reduction="sum", weight=(1, 2), ignore_index=1)
    assert sjt.poisson_nll_loss(log_input=False, full=True)[0] == Loss("poisson_nll", log_input=False, full=True,
                                                                       eps=1e-8)
    assert sjt.gaussian_nll_loss(eps=1e-3)[0] == Loss("gaussian_nll", eps=1e-3)
    configs = [c for c in sjt.loss_configurations("small") if c.op.endswith("nll_loss")]
    assert len(configs) == 12 and {c.op for c in configs} == {"nll_loss", "poisson_nll_loss", "gaussian_nll_loss"}
    for config in configs[:3]:  # one of each op
        loss, impl = sjt.make_loss(config)
        report = verify_loss(loss, impl, pred=config.pred, label=config.target, upstream=config.upstream,
                             dtype="float32")
        assert report.ok, str(report)


@pytest.mark.slow  # 36 cells: about 30 s
def test_conform_torch_on_the_likelihood_losses() -> None:
    pytest.importorskip("torch")
    result = symjac.conform("torch", ops=["nll_loss", "poisson_nll_loss", "gaussian_nll_loss"],
                            dtypes=("float32", "float64"), transforms=("vjp", "hvp"))
    assert result.ok, result.table()
    # 12 configurations (4 of each op) x 2 dtypes x 2 transforms, every one verified
    assert result.counts()["pass"] == len(result.results) == 48, result.table()


# ------------------------------------------------------------------ the --exec protocol (a C kernel)


@pytest.mark.parametrize(("defines", "bad"), [
    pytest.param((), set(), id="correct"),
    pytest.param(("-DPLANT_WEIGHTS",), {"nll"}, id="weights", marks=pytest.mark.slow),
    pytest.param(("-DPLANT_CLAMP",), {"gaussian_nll"}, id="clamp"),
    pytest.param(("-DPLANT_SCALE",), {"nll", "poisson_nll", "gaussian_nll"}, id="scale", marks=pytest.mark.slow)])
def test_a_native_kernel_on_the_protocol(tmp_path: Any, defines: tuple[str, ...], bad: set[str]) -> None:
    # tests/likelihood_kernels.c answers symjac's stdin/stdout protocol (contrib/symjac_driver.h) for the
    # three kinds: its options (weight, ignore_index, log_input, full, eps) reach it as settings lines
    from native_kernels import CC, build

    if CC is None:
        pytest.skip("no C compiler (cc or gcc) on PATH")
    import symjac.frameworks.process as sjp

    program = build(tmp_path, pathlib.Path(__file__).with_name("likelihood_kernels.c"), *defines)
    specs = [Loss("nll", weight=(0.75, 2, 0.25), ignore_index=1, scale=8),
             Loss("poisson_nll", log_input=False, full=True, reduction="none", scale=8),
             Loss("gaussian_nll", full=True, reduction="sum", scale=8)]
    for loss in specs:
        k = sjp.loss_impl(str(program), loss)
        for dtype in ("float32", "float64"):
            report = verify_loss(loss, derivative=k.derivative, forward=k.forward, dtype=dtype)
            assert report.ok == (loss.kind not in bad), (defines, str(report))


# ------------------------------------------------------------------ golden data per dtype

GOLDEN = {
    "nll": ('loss = "nll"\nscale = 8\nweight = [0.75, 2, 0.25]\nignore_index = 1\n',
            "pred = [[-1.25, -2.0, -0.5], [-0.75, -1.5, -3.0], [-0.25, -1.75, -2.5]]\nlabel = [2, 0, 1]\n"),
    "poisson_nll": ('loss = "poisson_nll"\nscale = 8\nlog_input = false\nfull = true\neps = "1/128"\n',
                    "pred = [[0.75, 0.5, 1.5], [0.25, 4.0, 2.5]]\nlabel = [[0.0, 0.5, 1.0], [2.0, 3.5, 6.0]]\n"),
    "gaussian_nll": ('loss = "gaussian_nll"\nscale = 8\nfull = true\n',
                     "pred = [[0.5, 0.5], [-1.25, 2.0], [2.0, 0.25]]\nlabel = [[0.25, 0.0], [-1.0, 0.0], [-0.5, 0.0]]\n"),
}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=() if k == "nll" else pytest.mark.slow) for k in sorted(GOLDEN)])
def test_golden_data_holds_pytorchs_values_within_each_dtypes_bound(tmp_path: Any, kind: str) -> None:
    # `symjac golden` for each kind in float16/32/64 (nll: class-index labels from a spec file, refused
    # before); PyTorch's loss and autograd in each dtype within each entry's max_abs_error, and the exact
    # value there mpmath's from the definition (above)
    import json

    torch = pytest.importorskip("torch")
    options, inputs = GOLDEN[kind]
    spec = tmp_path / "case.toml"
    spec.write_text(f'[operator]\nkind = "loss"\n{options}[input]\n{inputs}')
    out = tmp_path / "golden"
    run = cli_runner.symjac("golden", str(spec), "--out", str(out), "--dtype", "float16,float32,float64")
    assert run.returncode == 0, run.stderr
    arrays = json.loads((out / "case.json").read_text())["arrays"]
    loss = Loss(kind, **{k: v for k, v in {"nll": {"weight": (0.75, 2, 0.25), "ignore_index": 1},
                                           "poisson_nll": {"log_input": False, "full": True, "eps": 2**-7},
                                           "gaussian_nll": {"full": True}}[kind].items()})
    pred, label = (np.array(arrays[k]["float64"]).reshape(arrays[k]["shape"]) for k in ("pred", "label"))
    with mpmath.workdps(60):
        elements, den = _definition(loss, pred, label)
        exact = mpmath.fsum(elements([_f(v) for v in pred.reshape(-1)])) / den
    assert abs(float(exact) - arrays["value"]["float64"]) <= arrays["value"]["max_abs_error"]["float64"]
    for dtype in ("float16", "float32", "float64"):
        tdt = getattr(torch, dtype)
        z = torch.tensor(arrays["pred"][dtype], dtype=tdt).reshape(pred.shape).requires_grad_()
        y = (torch.tensor(label, dtype=torch.int64) if kind == "nll"
             else torch.tensor(arrays["label"][dtype], dtype=tdt).reshape(pred.shape))
        value = _torch_fn(loss)(z, y)
        (8 * value).backward()
        assert abs(float(value.detach()) - arrays["value"][dtype]) <= arrays["value"]["max_abs_error"][dtype]
        got = z.grad.double().numpy().reshape(-1)
        want = np.array(arrays["derivative"][dtype])
        bound = np.array(arrays["derivative"]["max_abs_error"][dtype])
        assert np.all(np.abs(got - want) <= bound), (dtype, np.abs(got - want) / bound)


def test_explain_shows_eps_with_its_value(tmp_path: Any) -> None:
    # the template's ε is the spec's eps (the symbol 'epsilon' is softmax_ce's label smoothing: it read 0 there)
    from symjac.io._explain import explain
    from symjac.io._specfile import load

    spec = tmp_path / "p.toml"
    spec.write_text('[operator]\nkind = "loss"\nloss = "poisson_nll"\nlog_input = false\neps = "1/128"\n'
                    '[input]\npred = [0.5]\nlabel = [2.0]\n')
    text = explain(load(spec).cases[0])
    assert "log(eps + z)" in text and "where eps = 1/128" in text
