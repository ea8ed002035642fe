"""softmax_ce's class-generic evaluation (symjac.loss._softmax) against the explicit per-class
SymPy build, and its structure: no SymPy work that grows with the number of classes."""

from __future__ import annotations

from typing import Any

import mpmath
import numpy as np
import pytest
import sympy

import symjac
from symjac.loss import _numbers
from symjac.loss._kinds.softmax_ce import explicit_template
from symjac.loss._evaluate import evaluate, to_numpy
from symjac.loss._elements import loss_template
from symjac.loss._templates import rounding_depth, running_error


def _args(classes: int, seed: int, eps: float) -> list[float]:
    """Distinct logits (some far apart), soft labels, unequal weights, ε: every term of
    every bound is exercised."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(classes) * 3
    t = rng.random(classes)
    t /= t.sum()
    w = rng.uniform(0.25, 2.0, classes)
    return [float(v) for v in (*z, *t, *w, eps)]


def _oracle(classes: int) -> tuple[Any, Any]:
    """The explicit template's ℓ, h_j, their condition sums and running errors, lowered to
    mpmath straight from SymPy (sympy.diff and running_error on the per-class forms)."""
    ex = explicit_template(classes)
    loss = sympy.lambdify(ex.symbols, [ex.loss, ex._cond(ex.loss), running_error(ex.loss)], modules="mpmath")
    hs = [[h, ex._cond(h), running_error(h)] for h in ex.derivatives]
    derivative = sympy.lambdify(ex.symbols, [e for trio in hs for e in trio], modules="mpmath")
    return loss, derivative


def _close(got: Any, want: Any) -> bool:
    return bool(abs(got - want) <= mpmath.mpf("1e-40") * max(abs(want), mpmath.mpf("1e-300")))


@pytest.mark.parametrize("classes", [1, 2, 3, 4, 5, pytest.param(6, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_values_and_bounds_equal_the_explicit_sympy_build(classes: int, eps: float) -> None:
    # Oracle: the per-class SymPy template (one symbol per class, sympy.diff, running_error
    # node by node), lowered to mpmath at 60 digits. Both the mpmath row path and the MPFR
    # batch path agree with it to 1e-40.
    tpl = loss_template(symjac.Loss("softmax_ce"), classes)
    ex = explicit_template(classes)
    assert tpl.loss_depth == rounding_depth(ex.loss)
    assert tpl.derivative_depth == max(rounding_depth(h) for h in ex.derivatives)
    loss_fn, derivative_fn = _oracle(classes)
    for seed in range(3):
        args = _args(classes, seed, eps)
        with mpmath.workdps(60):
            margs = [mpmath.mpf(v) for v in args]
            want_loss = loss_fn(*margs)
            want_h = derivative_fn(*margs)
            got_loss = tpl.loss_cond_fn(*margs)
            got_h = tpl.derivative_fn(*margs)
            got_hb = tpl.derivative_cond_fn(*margs)
        with _numbers.context():
            cols = [_numbers.from_floats(np.array([v])) for v in args]
            ell, h = tpl.stable_at(cols)
            lcond, lrun = tpl.loss_bounds_at(cols)
            hcond, hrun = tpl.derivative_bounds_at(cols)
        assert ell is not None and h is not None
        batch_loss = [_numbers.to_mpf(v[0]) for v in (ell, lcond, lrun)]
        for k in range(3):
            assert _close(got_loss[k], want_loss[k]), (k, got_loss[k], want_loss[k])
            assert _close(batch_loss[k], want_loss[k]), (k, batch_loss[k], want_loss[k])
        for j in range(classes):
            want = want_h[3 * j:3 * j + 3]
            assert _close(got_h[j], want[0]) and _close(_numbers.to_mpf(h[0, j]), want[0])
            assert _close(got_hb[j], want[1]) and _close(_numbers.to_mpf(hcond[0, j]), want[1])
            assert _close(got_hb[classes + j], want[2]) and _close(_numbers.to_mpf(hrun[0, j]), want[2])


def test_the_class_generic_derivation_rejects_a_wrong_form() -> None:
    # derivation() proves the forms for every C (it runs when a template is built); its
    # zero test tells an identity (h_j = W·p_j - a_j with W = Σ a_c, here a_j + a_k + rest)
    # from a slip (W without the rest).
    from symjac.loss import _softmax

    _, h = _softmax.derivation()
    zj = next(s for s in h.free_symbols if s.name == "z_j")
    zk = next(s for s in h.free_symbols if s.name == "z_k")
    pos = sympy.Symbol("P", positive=True)
    logs = {zj: sympy.log(pos), zk: sympy.log(sympy.Symbol("Q", positive=True))}
    by_name = {s.name: s for s in h.free_symbols}
    eps, n = by_name["epsilon"], by_name["C"]
    a = {c: ((1 - eps) * by_name[f"t_{c}"] + eps / n) * by_name[f"w_{c}"] for c in "jk"}
    rest = (1 - eps) * by_name["TW"] + eps / n * by_name["WS"]
    p = sympy.exp(zj) / (sympy.exp(zj) + sympy.exp(zk) + by_name["s"])
    assert _softmax._is_zero(h - ((a["j"] + a["k"] + rest) * p - a["j"]), logs)
    assert not _softmax._is_zero(h - ((a["j"] + a["k"]) * p - a["j"]), logs)


def _count_sympy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every differentiation and every lowering SymPy does."""
    calls: list[str] = []
    real_diff, real_lambdify, real_expr_diff = sympy.diff, sympy.lambdify, sympy.Expr.diff

    def diff(*args: Any, **kw: Any) -> Any:
        calls.append("diff")
        return real_diff(*args, **kw)

    def expr_diff(self: Any, *args: Any, **kw: Any) -> Any:
        calls.append("diff")
        return real_expr_diff(self, *args, **kw)

    def lambdify(*args: Any, **kw: Any) -> Any:
        calls.append("lambdify")
        return real_lambdify(*args, **kw)

    monkeypatch.setattr(sympy, "diff", diff)
    monkeypatch.setattr(sympy.Expr, "diff", expr_diff)
    monkeypatch.setattr(sympy, "lambdify", lambdify)
    return calls


def _inputs(rows: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(classes)
    return rng.standard_normal((rows, classes)), np.eye(classes)[rng.integers(0, classes, rows)]


def test_sympy_work_does_not_grow_with_the_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    # loss_derivative and verify_loss (with a forward: values, bounds of ℓ and h, finite
    # differences) differentiate and lower the same number of SymPy expressions at 3
    # classes as at 50: none, once the class-generic derivation (11 differentiations, once
    # per process, counted first) has run.
    from symjac.loss import _softmax

    calls = _count_sympy(monkeypatch)
    _softmax.derivation.cache_clear()
    _softmax.derivation()
    assert calls.count("diff") >= 11
    counts = []
    for classes in (3, 50):
        del calls[:]
        pred, label = _inputs(2, classes)
        loss = symjac.Loss("softmax_ce", label_smoothing=0.1, weight=tuple(np.linspace(0.5, 2, classes)))
        values = to_numpy(symjac.loss_derivative(loss, pred, label))
        report = symjac.verify_loss(loss, derivative=lambda z, y, v=values: v, forward=_forward(loss, classes),
                                    pred=pred, label=label)
        assert report.ok, report
        counts.append(len(calls))
    assert counts[0] == counts[1] == 0


def _forward(loss: symjac.Loss, classes: int) -> Any:
    """A float64 softmax cross-entropy, mean over rows (NumPy, shifted log-sum-exp)."""
    eps = float(loss.label_smoothing or 0)
    w = np.ones(classes) if loss.weight is None else np.array([float(v) for v in loss.weight])

    def forward(z: np.ndarray, t: np.ndarray) -> np.float64:
        m = z.max(axis=1, keepdims=True)
        logp = z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
        smooth = (1 - eps) * t + eps / classes
        return np.float64(-(smooth * w * logp).sum(axis=1).mean())

    return forward


def test_verify_loss_at_300_classes() -> None:
    # 2 rows x 300 classes: the exact derivative passes with its forward; a derivative
    # missing the mean's 1/rows is found (wrong_scale: c = 2·S).
    pred, label = _inputs(2, 300)
    loss = symjac.Loss("softmax_ce")
    good = to_numpy(symjac.loss_derivative(loss, pred, label))
    report = symjac.verify_loss(loss, derivative=lambda z, y: good, forward=_forward(loss, 300),
                                pred=pred, label=label)
    assert report.ok, report
    bad = symjac.verify_loss(loss, derivative=lambda z, y: good * 2, pred=pred, label=label)
    assert not bad.ok and "wrong_scale" in bad.categories()


def test_derivative_at_many_classes_matches_mpmath() -> None:
    # 1,000 classes, label smoothing: dℓ/dz_j = W·softmax_j - a_j (W = Σ a_c = 1 for a
    # one-hot label and ε in [0, 1]; a_c = (1 - ε)·t_c + ε/C), mean over 3 rows: /3.
    # Oracle: mpmath at 80 digits, to 1e-50 of W·softmax_j + a_j.
    pred, label = _inputs(3, 1000)
    loss = symjac.Loss("softmax_ce", label_smoothing=0.25)
    got = evaluate(loss, pred, label, values=False).derivative()
    with mpmath.workdps(80):
        for i in range(3):
            exps = [mpmath.exp(mpmath.mpf(v)) for v in pred[i]]
            total = mpmath.fsum(exps)
            for j in range(0, 1000, 37):
                a = mpmath.mpf(0.75) * mpmath.mpf(label[i, j]) + mpmath.mpf(0.25) / 1000
                want = (exps[j] / total - a) / 3
                assert abs(_numbers.to_mpf(got[i, j]) - want) <= mpmath.mpf("1e-50") * (exps[j] / total + a)


def test_to_numpy_rounds_to_bfloat16() -> None:
    # Oracle: ml_dtypes' own float64 -> bfloat16 cast (round to nearest; none of these
    # float64 values is a bfloat16 midpoint): 1/3, a normal value, beyond the range (inf),
    # below half the smallest subnormal (0).
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.dtype(ml_dtypes.bfloat16)
    values = [mpmath.mpf(1) / 3, mpmath.mpf(-2.5), mpmath.mpf(10) ** 40, mpmath.mpf(10) ** -45]
    with np.errstate(over="ignore"):
        want = np.array([1 / 3, -2.5, 1e40, 1e-45]).astype(bf)
    got = to_numpy(values, bf)
    assert got.dtype == bf and got.tobytes() == want.tobytes()


def test_verify_loss_in_bfloat16_with_a_forward_at_260_classes() -> None:
    # The forward check rounds the exact loss to bfloat16 (to_numpy): it passes for the
    # exact derivative rounded to bfloat16 and a float32 forward rounded to bfloat16.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.dtype(ml_dtypes.bfloat16)
    pred, label = _inputs(2, 260)
    pred = pred.astype(bf).astype(np.float64)
    loss = symjac.Loss("softmax_ce")
    values = to_numpy(symjac.loss_derivative(loss, pred, label)).astype(bf)

    def forward(z: np.ndarray, t: np.ndarray) -> np.ndarray:
        return np.asarray(_forward(loss, 260)(z.astype(np.float32), t.astype(np.float32)), dtype=bf)

    report = symjac.verify_loss(loss, derivative=lambda z, y: values, forward=forward, pred=pred, label=label,
                                dtype=bf)
    assert report.ok, report


@pytest.mark.parametrize("labels, reduction, dtype, scale", [
    ("probabilities", "mean", np.float32, 1),
    ("indices", "none", np.float64, 8),
    ("indices", "sum", np.float32, 0.5),
])
@pytest.mark.usefixtures("one_torch_thread")
def test_torch_cross_entropy_at_300_classes_passes(labels: str, reduction: str, dtype: Any, scale: float) -> None:
    # Oracle: PyTorch's F.cross_entropy (class weights, label smoothing 0.1, ignore_index
    # for indices) as the forward, its autograd gradient times S as the derivative:
    # verify_loss must pass them, finite differences included, at 300 classes.
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(300)
    rows, classes = 4, 300
    pred = np.round(rng.uniform(-4, 4, (rows, classes)) * 64) / 64
    weight = np.round(rng.uniform(0.25, 2, classes) * 4) / 4
    opts: dict[str, Any] = {"weight": tuple(weight), "label_smoothing": 0.1}
    if labels == "indices":
        label: np.ndarray = rng.integers(0, classes, rows)
        label[1] = -100
        opts.update(labels="indices", ignore_index=-100)
    else:
        raw = rng.random((rows, classes))
        label = np.round(raw / raw.sum(1, keepdims=True) * 2**12) / 2**12
    upstream = np.round(rng.uniform(-2, 2, rows) * 4) / 4 if reduction == "none" else None
    loss = symjac.Loss("softmax_ce", reduction=reduction, scale=scale, **opts)

    def run(x: Any, y: np.ndarray) -> Any:
        return torch.nn.functional.cross_entropy(x, torch.from_numpy(y), weight=torch.tensor(weight, dtype=x.dtype),
                                                 ignore_index=-100, reduction=reduction, label_smoothing=0.1)

    def forward(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return run(torch.from_numpy(z), y).numpy()  # type: ignore[no-any-return]

    def derivative(z: np.ndarray, y: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        x = torch.from_numpy(z).requires_grad_(True)
        (g,) = torch.autograd.grad(run(x, y), x, grad_outputs=None if u is None else torch.from_numpy(u))
        return (g * scale).numpy()  # type: ignore[no-any-return]

    report = symjac.verify_loss(loss, derivative=derivative, forward=forward, pred=pred, label=label,
                                upstream=upstream, dtype=dtype)
    assert report.ok, report
    assert report.stats["fd_checked"] > 0


def test_finite_difference_points_get_forward_bounds_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The stencil points z± need ℓ and its bound (the forward's), never dℓ/dz's bounds:
    # those are formed for the base rows only (at most the 4 rows here), not for the
    # 2 points of each of the 32 probes.
    from symjac.loss._softmax import SoftmaxTemplate

    rows_seen: list[int] = []
    real = SoftmaxTemplate.derivative_bounds_at

    def counting(self: SoftmaxTemplate, cols: Any) -> Any:
        rows_seen.append(len(cols[0]))
        return real(self, cols)

    monkeypatch.setattr(SoftmaxTemplate, "derivative_bounds_at", counting)
    pred, label = _inputs(4, 40)
    loss = symjac.Loss("softmax_ce")
    values = to_numpy(symjac.loss_derivative(loss, pred, label))
    report = symjac.verify_loss(loss, derivative=lambda z, y: values, forward=_forward(loss, 40), pred=pred,
                                label=label)
    assert report.ok and report.stats["fd_checked"] == 32
    assert sum(rows_seen) <= 4
