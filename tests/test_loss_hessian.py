"""symjac.loss_hessian and verify_loss(loss, hvp=...).

References, independent of the code under test: every loss written out below in
mpmath from its definition (the formulas of ``symjac.Loss``'s docstring, PyTorch's
documentation), reduced and scaled here, and differentiated twice by ``mpmath.diff`` at
60 digits; and PyTorch's double backward in float64 (``torch.autograd.functional.hessian``
on the ``torch.nn.functional`` losses). The planted bugs are one change each to a
correct PyTorch HVP.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

import symjac
from symjac.loss._kinds import REGISTRY

SPECS = [pytest.param(name, opts, id=f"{name}-{i}") for name, kind in REGISTRY.items() if not kind.whole
         for i, opts in enumerate(kind.samples)]


def _f(v: Any) -> Any:
    v = Fraction(v) if not isinstance(v, Fraction) else v
    return mpmath.mpf(v.numerator) / v.denominator


def _element_loss(loss: symjac.Loss) -> Any:
    """ℓ(z, y, class) for the element-wise kinds, in mpmath, from the definitions."""
    d = _f(loss.delta) if loss.delta is not None else mpmath.mpf(1)

    def weight(c: int, w: Any) -> Any:
        return mpmath.mpf(1) if w is None else _f(w[c % len(w)] if len(w) > 1 else w[0])

    def ell(z: Any, y: Any, c: int) -> Any:
        k = loss.kind
        if k == "mse":
            return (z - y) ** 2
        if k == "mae":
            return abs(z - y)
        if k == "smooth_l1":
            a = abs(z - y)
            return a**2 / (2 * d) if a < d else a - d / 2
        if k == "huber":
            a = abs(z - y)
            return a**2 / 2 if a < d else d * (a - d / 2)
        if k == "sigmoid_ce":
            s = 1 / (1 + mpmath.exp(-z))
            return -weight(c, loss.weight) * (weight(c, loss.pos_weight) * y * mpmath.log(s) + (1 - y) * mpmath.log(1 - s))
        if k == "bce":
            return -weight(c, loss.weight) * (y * mpmath.log(z) + (1 - y) * mpmath.log(1 - z))
        if k == "kld":
            p = mpmath.exp(y) if loss.log_target else y
            log_q = z if loss.log_input else mpmath.log(z)
            return 0 if p == 0 else p * (mpmath.log(p) - log_q)
        if k == "constant_derivative":
            return z
        if k == "poisson_nll":  # PyTorch's poisson_nll_loss documentation; Stirling where y > 1
            eps = _f(loss.eps)
            base = mpmath.exp(z) - y * z if loss.log_input else z - y * mpmath.log(z + eps)
            return base + (y * mpmath.log(y) - y + mpmath.log(2 * mpmath.pi * y) / 2 if loss.full and y > 1 else 0)
        if k == "hinge_embedding":  # PyTorch docs: x at y = 1, max(0, margin - x) at y = -1
            return z if y == 1 else max(mpmath.mpf(0), _f(loss.margin) - z)
        if k == "soft_margin":
            return mpmath.log1p(mpmath.exp(-y * z))
        raise AssertionError(k)

    return ell


def _softmax_rows(loss: symjac.Loss, label: np.ndarray, classes: int) -> tuple[list[Any], list[Any]]:
    """Per row the smoothed weighted target coefficients a_c (ℓ = -Σ a_c log softmax_c), and D's terms."""
    eps = _f(loss.label_smoothing or 0)
    w = [_f(v) for v in loss.weight] if loss.weight is not None else [mpmath.mpf(1)] * classes
    coeffs, den = [], []
    for row in label:
        if loss.labels == "indices":
            if loss.ignore_index is not None and int(row) == loss.ignore_index:
                coeffs.append([mpmath.mpf(0)] * classes)
                den.append(mpmath.mpf(0))
                continue
            t = [mpmath.mpf(1 if c == int(row) else 0) for c in range(classes)]
            den.append(w[int(row)])  # PyTorch: a mean over the weights of the target classes
        else:
            t = [_f(Fraction(float(v))) for v in row]
            den.append(mpmath.mpf(1))
        coeffs.append([((1 - eps) * t[c] + eps / classes) * w[c] for c in range(classes)])
    return coeffs, den


ROW_KINDS = ("multilabel_soft_margin", "multi_margin", "multilabel_margin", "margin_ranking", "cosine_embedding",
             "triplet_margin")


def _row_loss(loss: symjac.Loss, label: Any, classes: int) -> Any:
    """(row index, its logits) -> ℓ of a margin-family class-axis kind (PyTorch docs), in mpmath."""
    w = [_f(v) for v in loss.weight] if loss.weight is not None else [mpmath.mpf(1)] * classes
    zero = mpmath.mpf(0)
    lab = np.asarray(label)

    def ell(r: int, z: list[Any]) -> Any:
        if loss.kind == "multilabel_soft_margin":
            y = [_f(Fraction(float(v))) for v in lab[r]]
            return mpmath.fsum(w[c] * (y[c] * mpmath.log1p(mpmath.exp(-z[c])) + (1 - y[c]) * mpmath.log1p(
                mpmath.exp(z[c]))) for c in range(classes)) / classes
        if loss.kind == "margin_ranking":  # PyTorch docs: max(0, -y·(x1 - x2) + margin), (x1, x2) a row
            return max(zero, -_f(Fraction(float(lab[r][0]))) * (z[0] - z[1]) + _f(loss.margin))
        if loss.kind == "cosine_embedding":  # aten Loss.cpp: Σx1·x2 / sqrt((Σx1² + ε)(Σx2² + ε)), (x1 | x2) a row,
            # ε float32's 1e-12 (PyTorch's in float64 too, measured: tests/test_margin_pairs.py)
            d, eps, y = classes // 2, mpmath.mpf(float(np.float32(1e-12))), lab[r][0]
            cos = mpmath.fsum(z[k] * z[d + k] for k in range(d)) / mpmath.sqrt(
                (mpmath.fsum(v**2 for v in z[:d]) + eps) * (mpmath.fsum(v**2 for v in z[d:]) + eps))
            return 1 - cos if y == 1 else max(zero, cos - _f(loss.margin))
        if loss.kind == "triplet_margin":  # PyTorch docs: max(d(a, q) - d(a, n) + margin, 0), d(x, y) = ‖x - y + ε‖_p,
            # d(a, n) the smaller of d(a, n) and d(q, n) with swap; the row [a | q | n]
            d, eps, p = classes // 3, _f(loss.eps), loss.p
            a, q, n = z[:d], z[d:2 * d], z[2 * d:]

            def dist(x: list[Any], y: list[Any]) -> Any:
                return mpmath.fsum(abs(u - v + eps) ** p for u, v in zip(x, y)) ** (mpmath.mpf(1) / p)
            far = min(dist(a, n), dist(q, n)) if loss.swap else dist(a, n)
            return max(zero, dist(a, q) - far + _f(loss.margin))
        if loss.kind == "multi_margin":
            t = int(lab[r])
            return mpmath.fsum(w[t] * max(zero, _f(loss.margin) - z[t] + z[i]) ** loss.p for i in range(classes)
                               if i != t) / classes
        row = lab[r].tolist()
        targets = row[:row.index(-1)] if -1 in row else row
        return mpmath.fsum(max(zero, 1 - z[j] + z[i]) for j in set(targets) for i in range(classes)
                           if i not in targets) / classes

    return ell


def _total(loss: symjac.Loss, pred: np.ndarray, label: Any, upstream: Any) -> Any:
    """z (flat mpmath list) -> S·L, from the definitions."""
    shape = pred.shape
    scale = _f(loss.scale)
    if loss.kind == "softmax_ce":
        classes = shape[-1]
        coeffs, den = _softmax_rows(loss, np.asarray(label).reshape(-1, classes) if loss.labels != "indices"
                                    else np.asarray(label).reshape(-1), classes)

        def elements(z: list[Any]) -> list[Any]:
            out = []
            for r, a in enumerate(coeffs):
                row = z[r * classes:(r + 1) * classes]
                lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))
                out.append(mpmath.fsum(a[c] * (lse - row[c]) for c in range(classes)))
            return out
        n_den = mpmath.fsum(den) if loss.labels == "indices" else mpmath.mpf(len(coeffs))
        batch = shape[0] if len(shape) > 1 else 1
    elif loss.kind in ROW_KINDS:  # the margin family's class-axis kinds, from PyTorch's documented definitions
        classes = shape[-1]
        row_loss = _row_loss(loss, label, classes)

        def elements(z: list[Any]) -> list[Any]:
            return [row_loss(r, z[r * classes:(r + 1) * classes]) for r in range(len(z) // classes)]
        n_den = mpmath.mpf(len(z0_rows := pred.reshape(-1, classes)))
        batch = len(z0_rows)
    elif REGISTRY[loss.kind].class_axis:  # nll, gaussian_nll: rows of their own definitions
        elements, n_den = _rows(loss, pred, label)
        batch = shape[0] if len(shape) > 1 else 1
    else:
        ell = _element_loss(loss)
        y = np.asarray(label if label is not None else pred, dtype=np.float64).reshape(-1)
        classes = shape[-1]

        def elements(z: list[Any]) -> list[Any]:
            return [ell(z[j], _f(Fraction(float(y[j]))), j % classes) for j in range(len(z))]
        n_den = mpmath.mpf(pred.size)
        batch = shape[0]

    def total(*z: Any) -> Any:
        e = elements(list(z))
        if loss.reduction == "none":
            return scale * mpmath.fsum(_f(Fraction(float(u))) * v for u, v in zip(np.asarray(upstream).reshape(-1), e))
        s = mpmath.fsum(e)
        return scale * {"sum": s, "mean": s / n_den, "batch_mean": s / batch}[loss.reduction]

    return total


def _rows(loss: symjac.Loss, pred: np.ndarray, label: Any) -> tuple[Any, Any]:
    """nll (PyTorch's nll_loss: -w[y]·z[y], the mean over Σ w[y] of the counted rows) and
    gaussian_nll (its gaussian_nll_loss: ½(log max(v, ε) + (μ - y)²/max(v, ε)) per (μ, v) row)."""
    classes = pred.shape[-1]
    if loss.kind == "nll":
        w = [_f(v) for v in loss.weight] if loss.weight is not None else [mpmath.mpf(1)] * classes
        w = w * classes if len(w) == 1 else w
        rows = [int(r) for r in np.asarray(label).reshape(-1)]
        counted = [r != loss.ignore_index for r in rows]

        def nll(z: list[Any]) -> list[Any]:
            return [-w[r] * z[i * classes + r] if ok else mpmath.mpf(0) for i, (r, ok) in enumerate(zip(rows, counted))]
        return nll, mpmath.fsum(w[r] for r, ok in zip(rows, counted) if ok)
    assert loss.kind == "gaussian_nll"
    eps, y = _f(loss.eps), [_f(Fraction(float(v))) for v in np.asarray(label)[..., 0].reshape(-1)]

    def gaussian(z: list[Any]) -> list[Any]:
        out = []
        for i, target in enumerate(y):
            m = max(z[2 * i + 1], eps)
            out.append((mpmath.log(m) + (z[2 * i] - target) ** 2 / m) / 2 + (mpmath.log(2 * mpmath.pi) / 2
                                                                          if loss.full else 0))
        return out
    return gaussian, mpmath.mpf(len(y))


def _mpmath_hessian(loss: symjac.Loss, pred: np.ndarray, label: Any, upstream: Any) -> np.ndarray:
    total = _total(loss, pred, label, upstream)
    z0 = [_f(Fraction(float(v))) for v in pred.reshape(-1)]
    n = len(z0)
    block = pred.shape[-1] if REGISTRY[loss.kind].class_axis else 1
    out = np.zeros((n, n), dtype=object)
    for j in range(n):
        for k in range(n):
            if j // block != k // block:
                out[j, k] = mpmath.mpf(0)  # separable: other elements do not meet (checked on the structure below)
                continue
            order = [0] * n
            order[j] += 1
            order[k] += 1
            out[j, k] = mpmath.diff(total, z0, tuple(order))
    return out


def off_kinks(pred: np.ndarray) -> np.ndarray:
    """The default inputs moved off their kinks (on a grid of 1/4 of the margin's magnitude): entry j
    by (2j + 1)/128, so every entry and every difference of two entries in a row (a class-axis hinge's
    kink, (j - i)/64) leaves the 1/4 grid for rows of up to 16 entries."""
    return pred + (2 * np.arange(pred.size).reshape(pred.shape) + 1) / 128


@pytest.mark.parametrize("reduction", ["mean", "sum", "batch_mean", "none"])
@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_loss_hessian_against_mpmath(name: str, opts: dict[str, Any], reduction: str) -> None:
    loss = symjac.Loss(name, reduction=reduction, scale=Fraction(3, 4) if reduction == "sum" else 8, **opts)
    pred, label, upstream = symjac.default_loss_inputs(loss)
    if REGISTRY[name].kinks_at_defaults:  # the margin family's defaults sit on kinks: no second derivative there
        pred = off_kinks(pred)
    got = symjac.loss_hessian(loss, pred, label, upstream)
    assert got.shape == pred.shape + pred.shape
    n = pred.size
    flat = got.reshape(n, n)
    with mpmath.workdps(60):
        want = _mpmath_hessian(loss, pred, label, upstream)
        for j in range(n):
            for k in range(n):
                assert abs(flat[j, k] - want[j, k]) <= mpmath.mpf(10) ** -40 * max(1, abs(want[j, k])), (j, k)


def test_loss_hessian_is_block_diagonal_and_raises_at_a_kink() -> None:
    loss = symjac.Loss("softmax_ce")
    h = symjac.loss_hessian(loss, [[0.5, -1.0], [2.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]).reshape(4, 4)
    assert all(h[j, k] == 0 for j in range(4) for k in range(4) if j // 2 != k // 2)
    with pytest.raises(symjac.InputError, match="kink"):
        symjac.loss_hessian(symjac.Loss("mae"), [0.5, 1.0], [0.5, 0.0])  # pred[0] == label[0]


# ---------------------------------------------------------------- PyTorch double backward


def _torch_loss(loss: symjac.Loss, label: Any, dtype: str = "float64") -> Any:
    """z -> S·L with torch.nn.functional (weights and labels in ``dtype``)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    dt = getattr(torch, dtype)
    red = {"batch_mean": "batchmean"}.get(loss.reduction, loss.reduction)
    s = float(loss.scale)
    w = None if loss.weight is None else torch.tensor([float(v) for v in loss.weight], dtype=dt)
    y = torch.tensor(label) if loss.labels == "indices" else (None if label is None else
                                                             torch.tensor(label, dtype=dt))
    k = loss.kind
    if k == "mse":
        return lambda z: s * F.mse_loss(z, y, reduction=red)
    if k == "huber":
        return lambda z: s * F.huber_loss(z, y, reduction=red, delta=float(loss.delta))
    if k == "smooth_l1":
        return lambda z: s * F.smooth_l1_loss(z, y, reduction=red, beta=float(loss.delta))
    if k == "sigmoid_ce":
        pw = None if loss.pos_weight is None else torch.tensor([float(v) for v in loss.pos_weight], dtype=dt)
        return lambda z: s * F.binary_cross_entropy_with_logits(z, y, weight=w, pos_weight=pw, reduction=red)
    if k == "softmax_ce":
        ignore = -100 if loss.ignore_index is None else loss.ignore_index
        return lambda z: s * F.cross_entropy(z, y, weight=w, label_smoothing=float(loss.label_smoothing or 0),
                                             ignore_index=ignore, reduction=red)
    assert k == "kld"
    return lambda z: s * F.kl_div(z if loss.log_input else z.log(), y, reduction=red,
                                  log_target=bool(loss.log_target))


TORCH_SPECS = [
    pytest.param("mse", {}, "mean", id="mse"),
    pytest.param("huber", {"delta": 1.5}, "sum", id="huber"),
    pytest.param("smooth_l1", {"delta": 0.5}, "mean", id="smooth_l1"),
    pytest.param("sigmoid_ce", {"weight": (0.5, 2, 1), "pos_weight": 3}, "mean", id="bce_logits-weights"),
    pytest.param("sigmoid_ce", {}, "sum", id="bce_logits-sum"),
    pytest.param("softmax_ce", {"weight": (1, 0.5, 2), "label_smoothing": 0.25}, "mean", id="ce-probs"),
    pytest.param("softmax_ce", {"labels": "indices", "weight": (1, 0.5, 2), "label_smoothing": 0.125,
                                "ignore_index": 0}, "mean", id="ce-indices-ignore"),
    pytest.param("softmax_ce", {"labels": "indices"}, "sum", id="ce-indices-sum"),
    pytest.param("kld", {"log_input": True, "log_target": False}, "batch_mean", id="kl_div"),
    pytest.param("kld", {"log_input": True, "log_target": True}, "sum", id="kl_div-log-target"),
]


@pytest.mark.parametrize(("name", "opts", "reduction"), TORCH_SPECS)
def test_loss_hessian_against_pytorch_double_backward(name: str, opts: dict[str, Any], reduction: str) -> None:
    torch = pytest.importorskip("torch")
    loss = symjac.Loss(name, reduction=reduction, scale=8, **opts)
    pred, label, _ = symjac.default_loss_inputs(loss)
    want = torch.autograd.functional.hessian(_torch_loss(loss, label), torch.tensor(pred)).numpy()
    got = np.array(symjac.loss_hessian(loss, pred, label), dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def _torch_hvp(f: Any) -> Any:
    torch = pytest.importorskip("torch")

    def hvp(pred: np.ndarray, label: Any, v: np.ndarray) -> np.ndarray:
        z = torch.tensor(pred, requires_grad=True)
        (g,) = torch.autograd.grad(f(z), z, create_graph=True)
        if not g.requires_grad:  # a loss linear in z (kl_div on log-probabilities): H = 0
            return np.zeros_like(pred)
        (hv,) = torch.autograd.grad(g, z, torch.tensor(v))
        return hv.numpy()

    return hvp


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("name", "opts", "reduction"), TORCH_SPECS)
def test_pytorch_hvps_pass(name: str, opts: dict[str, Any], reduction: str, dtype: str) -> None:
    loss = symjac.Loss(name, reduction=reduction, scale=8, **opts)
    pred, label, _ = symjac.default_loss_inputs(loss)
    if loss.labels != "indices":
        label = label.astype(dtype)  # the default inputs are dyadic: exact in float32
    hvp = _torch_hvp(_torch_loss(loss, label, dtype))
    r = symjac.verify_loss(loss, hvp=hvp, pred=pred.astype(dtype), label=label)
    assert r.ok, str(r)
    assert r.stats["hvp"]["ok"] and r.stats["hvp"]["max_error_ratio"] <= 1


def _sum_bce(scale: float, divide_by: int) -> Any:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    return lambda y: (lambda z: scale * F.binary_cross_entropy_with_logits(z, torch.tensor(y), reduction="sum")
                      / divide_by)


def test_planted_hvp_bugs_are_named() -> None:
    pytest.importorskip("torch")
    loss = symjac.Loss("sigmoid_ce", reduction="sum", scale=8)
    pred, label, _ = symjac.default_loss_inputs(loss)

    def make(scale: float, divide_by: int = 1) -> Any:
        f = _sum_bce(scale, divide_by)(label)
        inner = _torch_hvp(f)
        return lambda p, lab, v: inner(p, lab, v)

    assert symjac.verify_loss(loss, hvp=make(8)).ok
    # the loss scale forgotten in the HVP
    assert symjac.verify_loss(loss, hvp=make(1)).categories() == ["missing_scale"]
    # pytorch/pytorch 59477's shape: reduction='sum' differentiated as if it were a mean (1/6 of the truth)
    r = symjac.verify_loss(loss, hvp=make(8, pred.size))
    assert r.categories() == ["wrong_scale"] and f"1/{pred.size}" in r.findings[0].message
    good = make(8)

    def one_entry(p: np.ndarray, lab: Any, v: np.ndarray) -> np.ndarray:
        out = good(p, lab, v).copy()
        out[1, 2] *= 1.25  # the bug: one entry of H·v off by a quarter
        return out

    r = symjac.verify_loss(loss, hvp=one_entry)
    assert r.categories() == ["wrong_second_derivative"] and r.findings[0].cells == ((1, 2),)


def test_hvp_with_reduction_none_takes_the_upstream_and_misbehaviour_is_a_finding() -> None:
    loss = symjac.Loss("mse", reduction="none", scale=2)
    pred, label = np.array([0.5, -1.0, 2.0]), np.array([0.0, 0.25, 1.0])
    upstream = np.array([1.0, -0.5, 0.25])
    # ∂²/∂z_j² of S·Σ u_i (z_i - y_i)² is 2·S·u_j: the HVP is 2·S·u·v
    right = symjac.verify_loss(loss, hvp=lambda p, lab, v, u: 2 * 2 * u * v, pred=pred, label=label,
                               upstream=upstream)
    assert right.ok, str(right)

    def raises(p: Any, lab: Any, v: Any, u: Any) -> Any:
        raise ValueError("no second order")

    r = symjac.verify_loss(loss, hvp=raises, pred=pred, label=label, upstream=upstream)
    assert r.categories() == ["bad_output"]
    with pytest.raises(symjac.InputError, match="nothing to verify"):
        symjac.verify_loss(loss)
    with pytest.raises(symjac.InputError, match="v has shape"):
        symjac.verify_loss(loss, hvp=lambda p, lab, v, u: v, pred=pred, label=label, upstream=upstream, v=[1.0])


@pytest.mark.parametrize("name", ["huber", "smooth_l1"])
def test_huber_and_smooth_l1_have_a_second_derivative_at_zero_but_not_at_delta(name: str) -> None:
    """Failed on the first build (d = 0 refused as a kink: the sign(d) of the outer branch).
    Derivation: with δ = 1, ℓ = d²/2 (huber) or d²/(2δ) (smooth_l1) for |d| < δ, so ∂²ℓ/∂z² = 1
    at d = 0 (mean of 2: 1/2 each); at |d| = δ the second derivative is 1 from inside and
    0 from outside: it does not exist, and loss_hessian refuses it."""
    loss = symjac.Loss(name)
    h = symjac.loss_hessian(loss, np.array([0.5, -0.25]), np.array([0.5, -0.25]))
    assert [[float(v) for v in row] for row in h] == [[0.5, 0.0], [0.0, 0.5]]
    for z in (1.0, -1.0):
        with pytest.raises(symjac.InputError, match="kink of " + name):
            symjac.loss_hessian(loss, np.array([z, 3.0]), np.array([0.0, 0.0]))
    torch = pytest.importorskip("torch")
    f = {"huber": torch.nn.functional.huber_loss, "smooth_l1": torch.nn.functional.smooth_l1_loss}[name]
    y = torch.tensor([0.5, -0.25], dtype=torch.float64)
    ht = torch.autograd.functional.hessian(lambda z: f(z, y), y.clone())
    assert ht.tolist() == [[0.5, 0.0], [0.0, 0.5]]
