"""Issue 32, item 2: the margin losses as loss kinds, at their kinks.

The exact values come from mpmath, written here from PyTorch's documented definitions
(independent of the SymPy templates under test), and from PyTorch's forward in float64.
``verify_loss`` at its defaults (whose inputs reach the kinks ``[a]₊`` at ``a = 0`` on
purpose) passes PyTorch's functional losses and correct NumPy references, and catches the
planted defects: a missing loss scale, a wrong reduction denominator, ignored class
weights, the wrong side of a kink, an ignored incoming gradient.
"""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np
import pytest

import symjac
from symjac import Loss, verify_loss

S = 8  # the loss scale of every planted-defect case: a missing scale shows


def _mp(x: Any) -> Any:
    return x if isinstance(x, mpmath.mpf) else mpmath.mpf(float(x))


def _plus(a: Any) -> Any:
    return a if a > 0 else mpmath.mpf(0)


# ----------------------------------------------------------------------------- the definitions in mpmath


def hinge_embedding_ref(z: np.ndarray, y: np.ndarray, margin: float = 1.0) -> list[Any]:
    """PyTorch docs: l_n = x_n if y_n = 1, max(0, margin - x_n) if y_n = -1."""
    return [_mp(a) if b == 1 else _plus(_mp(margin) - _mp(a)) for a, b in zip(z.reshape(-1), y.reshape(-1))]


def soft_margin_ref(z: np.ndarray, y: np.ndarray) -> list[Any]:
    """PyTorch docs: log(1 + exp(-y x)) per element."""
    return [mpmath.log1p(mpmath.exp(-_mp(b) * _mp(a))) for a, b in zip(z.reshape(-1), y.reshape(-1))]


REFS = {"hinge_embedding": hinge_embedding_ref, "soft_margin": soft_margin_ref}


def _mean(values: list[Any], n: int) -> Any:
    with mpmath.workdps(60):
        return mpmath.fsum(values) / n


@pytest.mark.parametrize("opts", [{"kind": "hinge_embedding"}, {"kind": "hinge_embedding", "margin": 0.5},
                                  {"kind": "hinge_embedding", "margin": -2}, {"kind": "soft_margin"}])
def test_values_and_derivatives_against_mpmath_from_the_definition(opts: dict[str, Any]) -> None:
    loss = Loss(**opts, reduction="sum")
    pred, label, _ = symjac.default_loss_inputs(loss)
    ref = REFS[loss.kind]
    extra = {"margin": float(loss.margin)} if loss.margin is not None else {}
    with mpmath.workdps(60):
        want = _mean(ref(pred, label, **extra), 1)
        assert abs(symjac.loss_value(loss, pred, label) - want) < mpmath.mpf(10) ** -50
        lo, hi = symjac.loss_derivative_set(loss, pred, label)
        for j in range(pred.size):  # one-sided numerical derivatives of the definition: the Clarke ends
            def along(x: Any, j: int = j) -> Any:
                moved = pred.astype(object).reshape(-1).copy()
                moved[j] = x
                return mpmath.fsum(ref(moved.reshape(pred.shape), label, **extra))

            x, h = _mp(pred.reshape(-1)[j]), mpmath.mpf(2) ** -80  # one-sided differences: error O(h)
            left, right = (along(x) - along(x - h)) / h, (along(x + h) - along(x)) / h
            ends = sorted([left, right])
            assert abs(lo.reshape(-1)[j] - ends[0]) < 1e-20 and abs(hi.reshape(-1)[j] - ends[1]) < 1e-20, j


def test_the_defaults_reach_the_hinges_kink_and_its_clarke_set_is_both_sides() -> None:
    # hinge_embedding at z = margin, y = -1: the left derivative -1 (inside the hinge), the right 0
    loss = Loss("hinge_embedding", reduction="sum")
    pred, label, _ = symjac.default_loss_inputs(loss)
    at = [j for j in range(pred.size) if pred.reshape(-1)[j] == 1 and label.reshape(-1)[j] == -1]
    assert at
    lo, hi = symjac.loss_derivative_set(loss, pred, label)
    assert [(float(lo.reshape(-1)[j]), float(hi.reshape(-1)[j])) for j in at] == [(-1.0, 0.0)] * len(at)


# ----------------------------------------------------------------------------- PyTorch: values and verify_loss


torch_cases = [
    ("hinge_embedding", {}, lambda F, L: lambda p, y: F.hinge_embedding_loss(p, y, margin=float(L.margin),
                                                                            reduction=L.reduction)),
    ("hinge_embedding", {"margin": -2}, lambda F, L: lambda p, y: F.hinge_embedding_loss(p, y, margin=float(L.margin),
                                                                                        reduction=L.reduction)),
    ("soft_margin", {}, lambda F, L: lambda p, y: F.soft_margin_loss(p, y, reduction=L.reduction)),
]


def _torch_impl(name: str, opts: dict[str, Any], make: Any, reduction: str, scale: Any = S) -> tuple[Loss, Any]:
    torch = pytest.importorskip("torch")
    from symjac.frameworks.torch._losses import loss_impl

    loss = Loss(name, reduction=reduction, scale=scale, **opts)
    return loss, loss_impl(make(torch.nn.functional, loss), loss)


@pytest.mark.parametrize(("name", "opts", "make"), torch_cases)
def test_pytorch_forward_is_the_exact_value(name: str, opts: dict[str, Any], make: Any) -> None:
    torch = pytest.importorskip("torch")
    for reduction in ("mean", "sum"):
        loss = Loss(name, reduction=reduction, **opts)
        pred, label, _ = symjac.default_loss_inputs(loss)
        got = make(torch.nn.functional, loss)(torch.tensor(pred), torch.tensor(label)).item()
        assert abs(got - float(symjac.loss_value(loss, pred, label))) <= 4e-16 * max(1.0, abs(got))


def _grid(*axes: list[Any]) -> list[Any]:
    """Every combination of the axes; all but the first (each axis's first value) marked slow."""
    import itertools

    combos = list(itertools.product(*axes))
    return [pytest.param(*c, marks=() if i == 0 else pytest.mark.slow) for i, c in enumerate(combos)]


@pytest.mark.parametrize(("reduction", "dtype"), _grid(["mean", "sum", "none"], ["float32", "float64"]))
@pytest.mark.parametrize(("name", "opts", "make"), torch_cases)
def test_verify_loss_passes_pytorch(name: str, opts: dict[str, Any], make: Any, reduction: str, dtype: str) -> None:
    loss, impl = _torch_impl(name, opts, make, reduction)
    # soft_margin: PyTorch's forward is log(1 + exp(-y·x)) as written, which overflows at the extreme
    # family's inputs (test_pytorch_soft_margin_overflows_at_extreme_magnitudes); every other family runs
    families = ("nonfinite",) if name == "soft_margin" else None
    report = verify_loss(loss, impl, dtype=dtype, families=families)
    assert report.ok, report.headline


def test_pytorch_soft_margin_overflows_at_extreme_magnitudes() -> None:
    # a real finding, not a false alarm: at x = -1024, y = 1 the loss is log1p(e^1024) = 1024 + log1p(e^-1024)
    # (mpmath), finite in float64, and PyTorch returns inf (its gradient NaN)
    torch = pytest.importorskip("torch")
    x = torch.tensor([-1024.0], dtype=torch.float64)
    assert torch.nn.functional.soft_margin_loss(x, torch.ones(1, dtype=torch.float64)).item() == float("inf")
    assert float(mpmath.log1p(mpmath.exp(1024))) == 1024.0
    loss, impl = _torch_impl("soft_margin", {}, torch_cases[2][2], "mean")
    report = verify_loss(loss, impl, dtype="float64")
    assert not report.ok
    assert {(f.category, f.family) for f in report.findings} == {("bad_output", "extreme")}


# ----------------------------------------------------------------------------- NumPy references and planted defects


def _hinge_numpy(margin: float = 1.0, *, side: str = "right", scaled: bool = True, denominator: str = "right",
                 upstream_used: bool = True, reduction: str = "mean") -> tuple[Any, Any]:
    """hinge_embedding's forward and S·dL/dpred in NumPy; the keywords plant one defect each."""
    def elements(p: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(y == 1, p, np.maximum(0, margin - p))

    def forward(p: np.ndarray, y: np.ndarray) -> Any:
        e = elements(p, y)
        return e if reduction == "none" else (e.sum() / (e.size if reduction == "mean" else 1)).astype(p.dtype)

    def derivative(p: np.ndarray, y: np.ndarray, u: Any = None) -> np.ndarray:
        inside = (p < margin) if side == "right" else (p > margin)  # the kink z = m itself: either side
        h = np.where(y == 1, 1.0, np.where(inside, -1.0, 0.0))
        if reduction == "none":
            h = h * (u if upstream_used else 1.0)
        elif reduction == "mean":
            h = h / (p.size if denominator == "right" else p.shape[0])
        return (h * (S if scaled else 1)).astype(p.dtype)

    return derivative, forward


def test_a_correct_numpy_hinge_passes_at_every_reduction() -> None:
    for reduction in ("mean", "sum", "none"):
        derivative, forward = _hinge_numpy(reduction=reduction)
        report = verify_loss(Loss("hinge_embedding", reduction=reduction, scale=S), derivative=derivative,
                             forward=forward, dtype="float64")
        assert report.ok, report.headline


@pytest.mark.parametrize(("defect", "reduction", "category"), [
    ({"scaled": False}, "mean", "missing_scale"),
    ({"denominator": "rows"}, "mean", "wrong_scale"),
    ({"side": "wrong"}, "mean", "wrong_values"),
    ({"upstream_used": False}, "none", "wrong_values"),
])
def test_planted_hinge_defects_are_caught_at_the_defaults(defect: dict[str, Any], reduction: str,
                                                          category: str) -> None:
    derivative, forward = _hinge_numpy(reduction=reduction, **defect)
    report = verify_loss(Loss("hinge_embedding", reduction=reduction, scale=S), derivative=derivative,
                         forward=forward, dtype="float64")
    assert not report.ok
    assert category in {f.category for f in report.findings}, report.headline


def test_a_stable_numpy_soft_margin_passes_every_family_and_a_naive_one_fails_extreme() -> None:
    def forward(p: np.ndarray, y: np.ndarray) -> Any:
        m = -y * p
        return np.mean(np.maximum(m, 0) + np.log1p(np.exp(-np.abs(m)))).astype(p.dtype)

    def derivative(p: np.ndarray, y: np.ndarray) -> np.ndarray:
        m = -y * p
        e = np.exp(-np.abs(m))
        sig = np.where(m >= 0, 1 / (1 + e), e / (1 + e))  # σ(-y·z) without overflow
        return (S * -y * sig / p.size).astype(p.dtype)

    def naive(p: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # e^M = inf, inf/inf = NaN: the defect
            e = np.exp(-y * p)
            return (S * -y * e / (1 + e) / p.size).astype(p.dtype)

    loss = Loss("soft_margin", scale=S)
    assert verify_loss(loss, derivative=derivative, forward=forward, dtype="float32").ok
    report = verify_loss(loss, derivative=naive, forward=forward, dtype="float32")
    assert {(f.category, f.family) for f in report.findings} == {("bad_output", "extreme")}


# ----------------------------------------------------------------------------- the class-axis kinds


def multilabel_soft_margin_ref(z: np.ndarray, y: np.ndarray, weight: Any = None) -> list[Any]:
    """PyTorch docs: -(1/C)·Σ_i w_i·(y_i·log σ(x_i) + (1 - y_i)·log σ(-x_i)) per row."""
    c = z.shape[-1]
    out = []
    for zr, yr in zip(z.reshape(-1, c), y.reshape(-1, c)):
        terms = []
        for i in range(c):
            x, t = _mp(zr[i]), _mp(yr[i])
            w = _mp(weight[i]) if weight is not None else 1
            terms.append(-w * (t * -mpmath.log1p(mpmath.exp(-x)) + (1 - t) * -mpmath.log1p(mpmath.exp(x))))
        out.append(mpmath.fsum(terms) / c)
    return out


def multi_margin_ref(z: np.ndarray, y: np.ndarray, p: int = 1, margin: float = 1.0, weight: Any = None) -> list[Any]:
    """PyTorch docs: Σ_{i≠y} w_y·max(0, margin - x[y] + x[i])^p / C per row."""
    c = z.shape[-1]
    out = []
    for zr, t in zip(z.reshape(-1, c), np.asarray(y).reshape(-1)):
        w = _mp(weight[int(t)]) if weight is not None else 1
        out.append(mpmath.fsum(w * _plus(_mp(margin) - _mp(zr[int(t)]) + _mp(zr[i])) ** p
                               for i in range(c) if i != int(t)) / c)
    return out


def multilabel_margin_ref(z: np.ndarray, y: np.ndarray) -> list[Any]:
    """PyTorch docs: Σ_{j in targets, i not in targets} max(0, 1 - (x[j] - x[i])) / C, the targets the
    row's entries before its first -1."""
    c = z.shape[-1]
    out = []
    for zr, yr in zip(z.reshape(-1, c), np.asarray(y).reshape(-1, c)):
        targets = []
        for v in yr:
            if v < 0:
                break
            targets.append(int(v))
        out.append(mpmath.fsum(_plus(1 - _mp(zr[j]) + _mp(zr[i])) for j in set(targets) for i in range(c)
                               if i not in targets) / c)
    return out


ROW_REFS = {"multilabel_soft_margin": multilabel_soft_margin_ref, "multi_margin": multi_margin_ref,
            "multilabel_margin": multilabel_margin_ref}


def _ref_options(loss: Loss) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if loss.weight is not None:
        out["weight"] = [float(w) for w in loss.weight]
    if loss.kind == "multi_margin":
        out.update(p=loss.p, margin=float(loss.margin))
    return out


ROW_SPECS = [{"kind": "multilabel_soft_margin"}, {"kind": "multilabel_soft_margin", "weight": (0.5, 2, 1)},
             {"kind": "multi_margin"}, {"kind": "multi_margin", "p": 2},
             {"kind": "multi_margin", "margin": 0.5, "weight": (0.5, 2, 1)}, {"kind": "multilabel_margin"}]


@pytest.mark.parametrize("opts", ROW_SPECS)
def test_row_kinds_against_mpmath_from_the_definition(opts: dict[str, Any]) -> None:
    loss = Loss(**opts, reduction="sum")
    pred, label, _ = symjac.default_loss_inputs(loss)
    ref, extra = ROW_REFS[loss.kind], _ref_options(loss)
    with mpmath.workdps(60):
        assert abs(symjac.loss_value(loss, pred, label) - mpmath.fsum(ref(pred, label, **extra))) < 1e-50
        lo, hi = symjac.loss_derivative_set(loss, pred, label)
        for j in range(pred.size):  # one-sided derivatives of the definition along each entry: the Clarke ends
            def along(x: Any, j: int = j) -> Any:
                moved = pred.astype(object).reshape(-1).copy()
                moved[j] = x
                return mpmath.fsum(ref(moved.reshape(pred.shape), label, **extra))

            x, h = _mp(pred.reshape(-1)[j]), mpmath.mpf(2) ** -80
            ends = sorted([(along(x) - along(x - h)) / h, (along(x + h) - along(x)) / h])
            assert abs(lo.reshape(-1)[j] - ends[0]) < 1e-20 and abs(hi.reshape(-1)[j] - ends[1]) < 1e-20, j


def _torch_row(F: Any, loss: Loss) -> Any:
    torch = pytest.importorskip("torch")

    def weight(dtype: Any) -> Any:
        return None if loss.weight is None else torch.tensor([float(w) for w in loss.weight], dtype=dtype)

    if loss.kind == "multilabel_soft_margin":
        return lambda p, y: F.multilabel_soft_margin_loss(p, y, weight=weight(p.dtype), reduction=loss.reduction)
    if loss.kind == "multi_margin":
        return lambda p, y: F.multi_margin_loss(p, y, p=loss.p, margin=float(loss.margin), weight=weight(p.dtype),
                                                reduction=loss.reduction)
    return lambda p, y: F.multilabel_margin_loss(p, y, reduction=loss.reduction)


@pytest.mark.parametrize("opts", ROW_SPECS)
def test_row_kinds_pytorch_forward_is_the_exact_value(opts: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    for reduction in ("mean", "sum"):
        loss = Loss(**opts, reduction=reduction)
        pred, label, _ = symjac.default_loss_inputs(loss)
        y = torch.tensor(label) if label.dtype.kind == "i" else torch.tensor(label, dtype=torch.float64)
        got = _torch_row(torch.nn.functional, loss)(torch.tensor(pred), y).item()
        assert abs(got - float(symjac.loss_value(loss, pred, label))) <= 4e-16 * max(1.0, abs(got))


@pytest.mark.parametrize(("reduction", "dtype"), _grid(["mean", "sum", "none"], ["float32", "float64"]))
@pytest.mark.parametrize("opts", ROW_SPECS)
def test_verify_loss_passes_pytorch_row_kinds(opts: dict[str, Any], reduction: str, dtype: str) -> None:
    import dataclasses

    torch = pytest.importorskip("torch")
    from symjac.frameworks.torch._losses import loss_impl

    loss = Loss(**opts, reduction=reduction, scale=S)
    impl = loss_impl(_torch_row(torch.nn.functional, loss), loss)
    if loss.kind != "multilabel_soft_margin":  # PyTorch has no double backward of these two ("not implemented")
        impl = dataclasses.replace(impl, hvp=None)
    report = verify_loss(loss, impl, dtype=dtype)
    assert report.ok, report.headline


def _multi_margin_numpy(weight: Any = None, *, reduction: str = "mean", scaled: bool = True,
                        denominator: str = "rows", weights_used: bool = True, upstream_used: bool = True,
                        side: str = "right") -> Any:
    """multi_margin (p = 1, margin 1) S·dL/dpred in NumPy; the keywords plant one defect each.
    ``side="mixed"`` takes the kink as active for the target's entry and inactive for the other's."""
    def derivative(p: np.ndarray, y: np.ndarray, u: Any = None) -> np.ndarray:
        n, c = p.shape
        w = np.ones(c) if weight is None or not weights_used else np.asarray(weight, dtype=np.float64)
        g = np.zeros((n, c))
        for r in range(n):
            t = int(y[r])
            for i in range(c):
                if i == t:
                    continue
                a = 1 - p[r, t] + p[r, i]
                active_i = a > 0 if side != "swapped" else a < 0
                active_t = a >= 0 if side == "mixed" else active_i
                g[r, i] += w[t] * active_i / c
                g[r, t] -= w[t] * active_t / c
        if reduction == "none" and upstream_used:
            g *= np.asarray(u)[:, None]
        elif reduction == "mean":
            g /= n if denominator == "rows" else n * c
        return (g * (S if scaled else 1)).astype(p.dtype)

    return derivative


def test_a_correct_numpy_multi_margin_passes_at_every_reduction() -> None:
    for reduction in ("mean", "sum", "none"):
        for weight in (None, (0.5, 2, 1)):
            loss = Loss("multi_margin", reduction=reduction, scale=S, weight=weight)
            report = verify_loss(loss, derivative=_multi_margin_numpy(weight, reduction=reduction), dtype="float64")
            assert report.ok, report.headline


@pytest.mark.parametrize(("defect", "reduction", "weight", "category"), [
    ({"scaled": False}, "mean", None, "missing_scale"),
    ({"denominator": "elements"}, "mean", None, "wrong_scale"),
    ({"weights_used": False}, "sum", (0.5, 2, 1), "wrong_values"),
    ({"side": "swapped"}, "sum", None, "wrong_values"),
    ({"side": "mixed"}, "sum", None, "wrong_values"),
    ({"upstream_used": False}, "none", None, "wrong_values"),
])
def test_planted_multi_margin_defects_are_caught_at_the_defaults(defect: dict[str, Any], reduction: str,
                                                                 weight: Any, category: str) -> None:
    loss = Loss("multi_margin", reduction=reduction, scale=S, weight=weight)
    report = verify_loss(loss, derivative=_multi_margin_numpy(weight, reduction=reduction, **defect),
                         dtype="float64")
    assert not report.ok
    assert category in {f.category for f in report.findings}, report.headline


def test_mixed_sides_of_one_kink_are_inside_each_entrys_interval_but_not_the_clarke_set() -> None:
    # the row at the kink z_1 - z_0 = 1 (target 1): the target's entry on the active side (-1/3), the
    # other's on the inactive side (0): each in its interval ([-1/3, 0] and [0, 1/3]), not on the segment
    # θ·(1/3, -1/3) that is the Clarke set there
    loss = Loss("multi_margin", reduction="sum", scale=S)
    report = verify_loss(loss, derivative=_multi_margin_numpy(reduction="sum", side="mixed"), dtype="float64",
                         families=())
    assert [f.category for f in report.findings] == ["wrong_values"]
    assert "not together" in report.findings[0].message
    assert report.stats["clarke_rows"] == {"segment": 1, "per_entry": 0}


# ----------------------------------------------------------------------------- conform torch --ops


MARGIN_OPS = ["hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
              "multilabel_margin_loss"]


def test_conform_torch_knows_pytorchs_functional_names() -> None:
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    configs = [c for c in sjt.loss_configurations("small") if c.op in MARGIN_OPS]
    assert {c.op for c in configs} == set(MARGIN_OPS)
    assert sjt.multi_margin_loss(p=2, margin=0.5, weight=(1, 2))[0] == Loss("multi_margin", p=2, margin=0.5,
                                                                           weight=(1, 2))
    assert sjt.hinge_embedding_loss(margin=2.0, reduction="sum")[0] == Loss("hinge_embedding", margin=2,
                                                                            reduction="sum")
    result = symjac.conform("torch", ops=["multi_margin_loss"], dtypes=("float64",), isolate=False,
                            transforms=("vjp", "hvp"))
    statuses = {(c["transform"], c["status"]) for c in result.results}
    # PyTorch has no double backward of multi_margin_loss: the hvp cell is unsupported, not a finding
    assert statuses == {("vjp", "pass"), ("hvp", "unsupported")}, statuses


@pytest.mark.slow
@pytest.mark.parametrize("op", MARGIN_OPS)
def test_conform_torch_margin_ops_pass(op: str) -> None:
    pytest.importorskip("torch")
    result = symjac.conform("torch", ops=[op], dtypes=("float32", "float64"), isolate=False,
                            transforms=("vjp", "hvp"))
    assert {c["status"] for c in result.results} <= {"pass", "unsupported"}


def test_ignored_class_weights_of_multilabel_soft_margin_are_caught() -> None:
    # dℓ/dz_c = w_c·(σ(z_c) - y_c)/C per row: a derivative without w_c is off at every class whose weight is not 1
    weight = (0.5, 2, 1)

    def derivative(z: np.ndarray, y: np.ndarray, use: bool = True) -> np.ndarray:
        w = np.array(weight) if use else np.ones(3)
        return (S * w * (1 / (1 + np.exp(-z)) - y) / 3 / z.shape[0]).astype(z.dtype)

    loss = Loss("multilabel_soft_margin", weight=weight, scale=S)
    assert verify_loss(loss, derivative=derivative, dtype="float64", families=()).ok
    report = verify_loss(loss, derivative=lambda z, y: derivative(z, y, False), dtype="float64", families=())
    assert report.categories() == ["wrong_values"], report.headline


def test_the_kink_policy_is_named() -> None:
    # PyTorch's multi_margin backward tests z > 0: at the kink the hinge is inactive (the -1 side); its
    # hinge_embedding_loss is clamp_min(margin - x, 0), whose backward passes the gradient at 0 (the +1 side)
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    for make, side in ((sjt.multi_margin_loss, "the -1 side"), (sjt.hinge_embedding_loss, "the +1 side")):
        spec, impl = make(reduction="sum")
        report = verify_loss(spec, impl, dtype="float64", families=())
        assert report.ok and report.stats["kink_policy"] == {side: 1}, report.stats.get("kink_policy")
