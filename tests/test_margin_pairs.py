"""Issue 32, item 2: the pairwise margin losses margin_ranking and cosine_embedding as loss kinds.

The exact values come from mpmath, written here from PyTorch's documented definitions
(``max(0, -y·(x1 - x2) + margin)``; aten Loss.cpp's ``cos = Σx1·x2 / sqrt((Σx1² + 1e-12)(Σx2² + 1e-12))``,
``1 - cos`` at y = 1, ``max(0, cos - margin)`` at y = -1), independent of the SymPy templates
under test, and from PyTorch's forward in float64. ``verify_loss`` at its defaults (which reach
the hinges' kinks on purpose) passes PyTorch's functional losses and catches planted defects: a
missing loss scale, a wrong reduction denominator, the wrong side of a kink, an ignored incoming
gradient, and for cosine_embedding a forgotten ε and a gradient without the norms' derivative.
"""

from __future__ import annotations

import json
from typing import Any

import mpmath
import numpy as np
import pytest

import cli_runner
import symjac
from symjac import Loss, verify_loss

S = 8  # the loss scale of every case: a missing scale shows
# aten Loss.cpp's EPSILON 1e-12 as PyTorch 2.13 applies it in float64 too: float32's nearest,
# 9.999999960041972e-13 (measured: test_the_epsilon_is_pytorchs_and_a_zero_vector_has_its_derivative)
EPS = mpmath.mpf(float(np.float32(1e-12)))


def _mp(x: Any) -> Any:
    return x if isinstance(x, mpmath.mpf) else mpmath.mpf(float(x))


def margin_ranking_ref(z: Any, y: Any, margin: float = 0.0) -> list[Any]:
    """PyTorch docs: max(0, -y·(x1 - x2) + margin) per pair; (x1, x2) along the last axis."""
    z, y = np.asarray(z, dtype=object).reshape(-1, 2), np.asarray(y).reshape(-1, 2)
    return [max(mpmath.mpf(0), -_mp(t[0]) * (_mp(a[0]) - _mp(a[1])) + _mp(margin)) for a, t in zip(z, y)]


def cosine_ref(z: Any, y: Any, margin: float = 0.0) -> list[Any]:
    """aten Loss.cpp: cos = Σx1·x2 / sqrt((Σx1² + ε)(Σx2² + ε)), ε = EPS; 1 - cos at y = 1, max(0, cos - m) at -1."""
    c = np.shape(z)[-1]
    z, y = np.asarray(z, dtype=object).reshape(-1, c), np.asarray(y).reshape(-1, c)
    out, d = [], c // 2
    for a, t in zip(z, y):
        x1, x2 = [_mp(v) for v in a[:d]], [_mp(v) for v in a[d:]]
        cos = mpmath.fsum(p * q for p, q in zip(x1, x2)) / mpmath.sqrt(
            (mpmath.fsum(p * p for p in x1) + EPS) * (mpmath.fsum(q * q for q in x2) + EPS))
        out.append(1 - cos if t[0] == 1 else max(mpmath.mpf(0), cos - _mp(margin)))
    return out


REFS = {"margin_ranking": margin_ranking_ref, "cosine_embedding": cosine_ref}
SPECS = [{"kind": "margin_ranking"}, {"kind": "margin_ranking", "margin": 0.5},
         {"kind": "margin_ranking", "margin": -2}, {"kind": "cosine_embedding"},
         {"kind": "cosine_embedding", "margin": 0.25}]


@pytest.mark.parametrize("opts", SPECS)
def test_values_and_clarke_ends_against_mpmath_from_the_definition(opts: dict[str, Any]) -> None:
    loss = Loss(**opts, reduction="sum")
    pred, label, _ = symjac.default_loss_inputs(loss)
    ref, m = REFS[loss.kind], float(loss.margin)
    with mpmath.workdps(60):
        assert abs(symjac.loss_value(loss, pred, label) - mpmath.fsum(ref(pred, label, m))) < mpmath.mpf(10) ** -50
        lo, hi = symjac.loss_derivative_set(loss, pred, label)
        for j in range(pred.size):  # one-sided derivatives of the definition along each entry: the Clarke ends
            def along(x: Any, j: int = j) -> Any:
                moved = pred.astype(object).reshape(-1).copy()
                moved[j] = x
                return mpmath.fsum(ref(moved.reshape(pred.shape), label, m))

            x, h = _mp(pred.reshape(-1)[j]), mpmath.mpf(2) ** -80
            ends = sorted([(along(x) - along(x - h)) / h, (along(x + h) - along(x)) / h])
            assert abs(lo.reshape(-1)[j] - ends[0]) < 1e-20 and abs(hi.reshape(-1)[j] - ends[1]) < 1e-20, j


@pytest.mark.parametrize("kind", ["margin_ranking", "cosine_embedding"])
def test_the_defaults_reach_the_kink(kind: str) -> None:
    # margin_ranking: x1 = x2 at margin 0; cosine_embedding: an orthogonal row at y = -1 (cos = 0 exactly, ε or not)
    loss = Loss(kind, reduction="sum")
    pred, label, _ = symjac.default_loss_inputs(loss)
    ref = REFS[kind]
    lo, hi = symjac.loss_derivative_set(loss, pred, label)
    c = pred.shape[-1]
    at = [r for r in range(pred.shape[0]) if label[r, 0] == -1 and (
        pred[r, 0] == pred[r, 1] if kind == "margin_ranking" else np.dot(pred[r, :c // 2], pred[r, c // 2:]) == 0)]
    assert at and all(ref(pred[r:r + 1], label[r:r + 1])[0] == 0 for r in at)
    for r in at:  # the Clarke set: the segment between 0 and the active side's gradient; one end is 0
        assert all(min(abs(a), abs(b)) == 0 and a != b for a, b in zip(lo[r], hi[r]))


def test_the_epsilon_is_pytorchs_and_a_zero_vector_has_its_derivative() -> None:
    # PyTorch's forward in float64 at x1 = (1e-7, 0), x2 = (1, 0), y = -1, margin = -1 is cos + 1 with
    # float32's 1e-12 to the last bit, not with the double 1e-12 (the two differ in the 10th digit); at
    # x1 = 0, x2 = (1, 1/2), y = 1 its gradient in x1 is -x2/sqrt(ε·(5/4 + ε)) (about -894427.19 at x2's
    # first entry): the derivative of the definition symjac evaluates, zero norm included
    torch = pytest.importorskip("torch")
    F, f64 = torch.nn.functional, torch.float64
    with mpmath.workdps(60):
        tiny = [[1e-7, 0.0, 1.0, 0.0]]
        assert F.cosine_embedding_loss(torch.tensor([tiny[0][:2]], dtype=f64), torch.tensor([tiny[0][2:]], dtype=f64),
                                       -torch.ones(1, dtype=f64), margin=-1.0).item() == \
            float(cosine_ref(tiny, [[-1, 0, 0, 0]], -1.0)[0])
        assert float(cosine_ref(tiny, [[-1, 0, 0, 0]], -1.0)[0]) != float(
            mpmath.mpf(1e-7) / mpmath.sqrt((mpmath.mpf(1e-7) ** 2 + mpmath.mpf(1e-12)) * (1 + mpmath.mpf(1e-12))) + 1)
    loss = Loss("cosine_embedding", reduction="sum")
    pred, label = np.array([[0.0, 0.0, 1.0, 0.5]]), np.array([[1.0, 0.0, 0.0, 0.0]])
    z = torch.tensor(pred, requires_grad=True)
    value = F.cosine_embedding_loss(z[:, :2], z[:, 2:], torch.tensor(label[:, 0]), reduction="sum")
    (g,) = torch.autograd.grad(value, z)
    with mpmath.workdps(60):
        want = [-_mp(v) / mpmath.sqrt(EPS * (mpmath.mpf(5) / 4 + EPS)) for v in (1.0, 0.5)] + [0, 0]
        got = symjac.loss_derivative(loss, pred, label).reshape(-1)
        assert all(abs(a - b) <= 1e-40 * abs(b) + 1e-40 for a, b in zip(got, want))
    assert np.allclose(g.numpy().reshape(-1), [float(w) for w in want], rtol=1e-15, atol=0)
    assert symjac.loss_value(loss, pred, label) == 1  # cos = 0 exactly: no pole


# ----------------------------------------------------------------------------- PyTorch: values and verify_loss


def _torch(kind: str, margin: float, reduction: str, scale: Any = S) -> tuple[Loss, Any]:
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    make = sjt.margin_ranking_loss if kind == "margin_ranking" else sjt.cosine_embedding_loss
    return make(margin=margin, reduction=reduction, scale=scale)


@pytest.mark.parametrize("opts", SPECS)
def test_pytorch_forward_is_the_exact_value(opts: dict[str, Any]) -> None:
    for reduction in ("mean", "sum"):
        loss, impl = _torch(opts["kind"], float(opts.get("margin", 0)), reduction)
        pred, label, _ = symjac.default_loss_inputs(loss)
        got = float(impl.forward(pred, label))
        assert abs(got - float(symjac.loss_value(loss, pred, label))) <= 4e-16 * max(1.0, abs(got))


def _grid(*axes: list[Any]) -> list[Any]:
    import itertools

    combos = list(itertools.product(*axes))
    return [pytest.param(*c, marks=() if i == 0 else pytest.mark.slow) for i, c in enumerate(combos)]


@pytest.mark.parametrize(("opts", "reduction", "dtype"), _grid(SPECS, ["mean", "sum", "none"], ["float32", "float64"]))
def test_verify_loss_passes_pytorch(opts: dict[str, Any], reduction: str, dtype: str) -> None:
    loss, impl = _torch(opts["kind"], float(opts.get("margin", 0)), reduction)
    # cosine_embedding: PyTorch squares the entries as written, NaN at the extreme family's inputs
    # (test_pytorch_cosine_embedding_overflows_at_extreme_magnitudes); every other family runs
    families = ("nonfinite",) if loss.kind == "cosine_embedding" else None
    report = verify_loss(loss, impl, dtype=dtype, families=families)
    assert report.ok, report.headline


def test_pytorch_cosine_embedding_overflows_at_extreme_magnitudes() -> None:
    # a real finding, not a false alarm: at x1 = (2^640, 2^639), x2 = (2^640, -2^640) (y = 1) cos is
    # (1 - 1/2)/sqrt(5/4 · 2) = 0.316... (mpmath), finite, and PyTorch's Σx² is inf: NaN
    torch = pytest.importorskip("torch")
    g = 2.0**640
    x1, x2 = torch.tensor([[g, g / 2]], dtype=torch.float64), torch.tensor([[g, -g]], dtype=torch.float64)
    assert torch.isnan(torch.nn.functional.cosine_embedding_loss(x1, x2, torch.ones(1, dtype=torch.float64)))
    assert abs(cosine_ref([[g, g / 2, g, -g]], [[1, 0, 0, 0]])[0] - (1 - 0.5 / mpmath.sqrt(2.5))) < 1e-15
    loss, impl = _torch("cosine_embedding", 0.0, "mean")
    report = verify_loss(loss, impl, dtype="float64")
    assert not report.ok
    assert {f.family for f in report.findings} == {"extreme"}, report.headline


def test_the_kink_policy_is_named() -> None:
    # PyTorch's clamp_min backward passes the gradient at 0: the hinge's active side, named by the sign of
    # the template's kink argument (SymPy's canonical form): -y·(x1 - x2) + m for margin_ranking (its +1
    # side), m - cos for cosine_embedding (its -1 side)
    for kind, side in (("margin_ranking", "the +1 side"), ("cosine_embedding", "the -1 side")):
        loss, impl = _torch(kind, 0.0, "sum")
        report = verify_loss(loss, impl, dtype="float64", families=())
        assert report.ok and set(report.stats["kink_policy"]) == {side}, report.stats.get("kink_policy")


def test_bad_labels_and_layouts_are_typed_errors() -> None:
    for kind, pred, label, match in (
            ("margin_ranking", [[1.0, 0.5]], [[0.0, 0.0]], r"label\[\.\.\., 0\]"),
            ("margin_ranking", [[1.0, 0.5]], [[1.0, 1.0]], r"label\[\.\.\., 1\]"),
            ("margin_ranking", [[1.0, 0.5, 2.0]], [[1.0, 0.0, 0.0]], "pairs"),
            ("cosine_embedding", [[1.0, 0.5, 2.0]], [[1.0, 0.0, 0.0]], r"2·D"),
            ("cosine_embedding", [[1.0, 0.5, 2.0, 1.0]], [[1.0, 0.0, 1.0, 0.0]], r"label\[\.\.\., 1:\]"),
            ("cosine_embedding", [[1.0, 0.5, 2.0, 1.0]], [[0.0, 0.0, 0.0, 0.0]], r"\{-1, 1\}")):
        with pytest.raises(symjac.InputError, match=match):
            symjac.loss_value(Loss(kind), np.array(pred), np.array(label))
    with pytest.raises(symjac.SpecError, match="margin"):
        Loss("cosine_embedding", margin="wide")
    with pytest.raises(symjac.SpecError, match="does not apply"):
        Loss("margin_ranking", p=2)


# ----------------------------------------------------------------------------- NumPy references and planted defects


def _ranking_numpy(margin: float = 0.0, *, reduction: str = "mean", scaled: bool = True, denominator: str = "pairs",
                   side: str = "right", upstream_used: bool = True) -> Any:
    """margin_ranking's S·dL/dpred in NumPy; the keywords plant one defect each."""
    def derivative(p: np.ndarray, y: np.ndarray, u: Any = None) -> np.ndarray:
        t = y[..., 0]
        a = -t * (p[..., 0] - p[..., 1]) + margin
        on = (a > 0) if side == "right" else (a < 0)
        h = np.stack([-t * on, t * on], axis=-1).astype(np.float64)
        if reduction == "none":
            h = h * (np.asarray(u)[..., None] if upstream_used else 1.0)
        elif reduction == "mean":
            h = h / (p.shape[0] if denominator == "pairs" else p.size)
        return (h * (S if scaled else 1)).astype(p.dtype)

    return derivative


def _cosine_numpy(margin: float = 0.0, *, reduction: str = "mean", scaled: bool = True, denominator: str = "rows",
                  side: str = "right", upstream_used: bool = True, eps: float = float(EPS),
                  norm_derivative: bool = True) -> Any:
    """cosine_embedding's S·dL/dpred in float64 NumPy (aten's formula); the keywords plant one defect each."""
    def derivative(p: np.ndarray, y: np.ndarray, u: Any = None) -> np.ndarray:
        d = p.shape[-1] // 2
        a, b, t = p[..., :d].astype(np.float64), p[..., d:].astype(np.float64), y[..., 0]
        m1, m2 = (a * a).sum(-1, keepdims=True) + eps, (b * b).sum(-1, keepdims=True) + eps
        den = np.sqrt(m1 * m2)
        cos = (a * b).sum(-1, keepdims=True) / den
        keep = 1.0 if norm_derivative else 0.0
        dcos = np.concatenate([b / den - keep * cos * a / m1, a / den - keep * cos * b / m2], axis=-1)
        on = (cos[..., 0] - margin > 0) if side == "right" else (cos[..., 0] - margin < 0)
        h = np.where((t == 1)[..., None], -dcos, np.where(((t == -1) & on)[..., None], dcos, 0.0))
        if reduction == "none":
            h = h * (np.asarray(u)[..., None] if upstream_used else 1.0)
        elif reduction == "mean":
            h = h / (p.shape[0] if denominator == "rows" else p.size)
        return (h * (S if scaled else 1)).astype(p.dtype)

    return derivative


MAKERS = {"margin_ranking": _ranking_numpy, "cosine_embedding": _cosine_numpy}


@pytest.mark.parametrize("kind", ["margin_ranking", "cosine_embedding"])
def test_a_correct_numpy_implementation_passes_at_every_reduction(kind: str) -> None:
    for reduction in ("mean", "sum", "none"):
        report = verify_loss(Loss(kind, reduction=reduction, scale=S), derivative=MAKERS[kind](reduction=reduction),
                             dtype="float64", families=())
        assert report.ok, report.headline


DEFECTS = [
    ("margin_ranking", {"scaled": False}, "mean", "missing_scale"),
    ("margin_ranking", {"denominator": "entries"}, "mean", "wrong_scale"),
    ("margin_ranking", {"side": "wrong"}, "sum", "wrong_values"),
    ("margin_ranking", {"upstream_used": False}, "none", "wrong_values"),
    ("cosine_embedding", {"scaled": False}, "mean", "missing_scale"),
    ("cosine_embedding", {"denominator": "entries"}, "mean", "wrong_scale"),
    ("cosine_embedding", {"side": "wrong"}, "sum", "wrong_values"),
    ("cosine_embedding", {"upstream_used": False}, "none", "wrong_values"),
    # no ε: off by ε/|x|² relative, about 4e-12 at the defaults: thousands of float64 ulps
    ("cosine_embedding", {"eps": 0.0}, "sum", "wrong_values"),
    ("cosine_embedding", {"norm_derivative": False}, "sum", "wrong_values"),
]


@pytest.mark.parametrize(("kind", "defect", "reduction", "category"), DEFECTS)
def test_planted_defects_are_caught_at_the_defaults(kind: str, defect: dict[str, Any], reduction: str,
                                                    category: str) -> None:
    report = verify_loss(Loss(kind, reduction=reduction, scale=S),
                         derivative=MAKERS[kind](reduction=reduction, **defect), dtype="float64")
    assert not report.ok
    assert category in {f.category for f in report.findings}, report.headline


# ----------------------------------------------------------------------------- conform, golden data, spec files


def test_conform_torch_knows_pytorchs_functional_names() -> None:
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    ops = {"margin_ranking_loss", "cosine_embedding_loss"}
    assert {c.op for c in sjt.loss_configurations("small")} >= ops
    assert sjt.margin_ranking_loss(margin=0.5)[0] == Loss("margin_ranking", margin=0.5)
    assert sjt.cosine_embedding_loss(reduction="sum")[0] == Loss("cosine_embedding", reduction="sum")
    result = symjac.conform("torch", ops=["margin_ranking_loss"], dtypes=("float64",), isolate=False,
                            transforms=("vjp", "hvp"))
    assert {(c["transform"], c["status"]) for c in result.results} == {("vjp", "pass"), ("hvp", "pass")}


@pytest.mark.slow
@pytest.mark.parametrize(("op", "transforms"), [("margin_ranking_loss", ("vjp", "hvp")),
                                                ("cosine_embedding_loss", ("vjp",))])
def test_conform_torch_pair_ops_pass(op: str, transforms: tuple[str, ...]) -> None:
    # cosine_embedding_loss's hvp cells at D = 4 and 5 time out (symjac's SymPy second derivatives of a
    # 2·D-symbol row template are slow; no hand-written second_derivative rule yet): vjp only here
    pytest.importorskip("torch")
    result = symjac.conform("torch", ops=[op], dtypes=("float32", "float64"), isolate=False, transforms=transforms)
    assert result.results and {c["status"] for c in result.results} == {"pass"}


GOLDEN = {
    "margin_ranking": ('loss = "margin_ranking"\nscale = 8\nmargin = 0.5\n',
                       "pred = [[1.5, 0.5], [0.25, 1.5], [-1.0, 0.25]]\nlabel = [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]\n"),
    "cosine_embedding": ('loss = "cosine_embedding"\nscale = 8\n',
                         "pred = [[0.5, -1.0, 1.5, 0.25], [0.75, 1.25, 1.0, 0.5]]\n"
                         "label = [[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]]\n"),
}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=() if k == "margin_ranking" else pytest.mark.slow)
                                  for k in sorted(GOLDEN)])
def test_golden_data_holds_pytorchs_values_within_each_dtypes_bound(tmp_path: Any, kind: str) -> None:
    # `symjac golden` from a spec file with the kind (inputs off the kinks: golden data holds one derivative
    # there, PyTorch's is another Clarke element): the exact value mpmath's from the definition (above),
    # PyTorch's loss and autograd in float32/float64 within each entry's max_abs_error
    torch = pytest.importorskip("torch")
    options, inputs = GOLDEN[kind]
    spec = tmp_path / "case.toml"
    spec.write_text(f'[operator]\nkind = "loss"\n{options}[input]\n{inputs}')
    out = tmp_path / "golden"
    run = cli_runner.symjac("golden", str(spec), "--out", str(out), "--dtype", "float32,float64")
    assert run.returncode == 0, run.stderr
    arrays = json.loads((out / "case.json").read_text())["arrays"]
    pred, label = (np.array(arrays[k]["float64"]).reshape(arrays[k]["shape"]) for k in ("pred", "label"))
    margin = 0.5 if kind == "margin_ranking" else 0.0
    with mpmath.workdps(60):
        exact = mpmath.fsum(REFS[kind](pred, label, margin)) / pred.shape[0]
    assert abs(float(exact) - arrays["value"]["float64"]) <= arrays["value"]["max_abs_error"]["float64"]
    _, impl = _torch(kind, margin, "mean")
    for dtype in ("float32", "float64"):
        p = np.array(arrays["pred"][dtype], dtype=dtype).reshape(pred.shape)
        y = np.array(arrays["label"][dtype], dtype=dtype).reshape(pred.shape)
        assert abs(float(impl.forward(p, y)) - arrays["value"][dtype]) <= arrays["value"]["max_abs_error"][dtype]
        got = impl.derivative(p, y).astype(np.float64).reshape(-1)
        want, bound = (np.array(arrays["derivative"][k][dtype] if k else arrays["derivative"][dtype])
                       for k in (None, "max_abs_error"))
        assert np.all(np.abs(got - want) <= bound), (dtype, np.abs(got - want) / bound)
    del torch


def test_a_spec_file_case_checks_its_expected_values(tmp_path: Any) -> None:
    # a spec file with loss margin_ranking and exact [expect] values, checked by symjac.check_expect (PyTorch
    # docs: max(0, -y·(x1 - x2) + m) at m = 1/2: pairs (3/2, 1/2, y = 1) -> 0, (1/4, 3/2, y = -1) -> 0,
    # (-1, 1/2, y = 1) -> 2; d/dx1 = -y, d/dx2 = y where active; sum, S = 2)
    spec = tmp_path / "case.toml"
    text = ('[operator]\nkind = "loss"\nloss = "margin_ranking"\nmargin = "1/2"\nreduction = "sum"\nscale = 2\n'
            '[input]\npred = [[1.5, 0.5], [0.25, 1.5], [-1.0, 0.5]]\nlabel = [[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]]\n'
            '[expect]\nvalue = 2\nderivative = [[0, 0], [0, 0], [-2, 2]]\n')
    spec.write_text(text)
    (case,) = symjac.load_spec_file(spec).cases
    assert case.operator == Loss("margin_ranking", margin=0.5, reduction="sum", scale=2)
    assert symjac.check_expect(case) == []
    spec.write_text(text.replace("value = 2", "value = 3"))
    assert symjac.check_expect(symjac.load_spec_file(spec).cases[0])
