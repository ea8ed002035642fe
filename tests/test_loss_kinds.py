"""Every registered loss kind's rules, generically (PyTorch OpInfo style): a kind is tested by registering it.

Each test runs over every kind in ``symjac.loss._kinds.REGISTRY`` and each of its
``samples`` (option sets), on its ``default_inputs``. The references are independent of
the rule under test: a derivative rule against mpmath's numerical differentiation (at
60 digits, with its own extra working precision) of the kind's raw SymPy element loss
lowered to mpmath; a second-derivative rule against mpmath's differentiation of the
first-derivative rule, and against PyTorch's double backward in float64.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import sympy

import symjac
from symjac.loss import _numbers
from symjac.loss._evaluate import evaluate
from symjac.loss._kinds import REGISTRY
from symjac.loss._spec import KINDS, SYNONYMS, Loss

#: the kinds with an element template (a kind evaluated whole, ctc, has its own tests: tests/test_loss_ctc.py)
SPECS = [pytest.param(name, opts, id=f"{name}-{i}") for name, kind in REGISTRY.items() if not kind.whole
         for i, opts in enumerate(kind.samples)]
ALL_OPTIONS = {f.name for f in dataclasses.fields(Loss)} - {"kind", "reduction", "scale"}


def _elements(loss: Loss) -> tuple[Any, list[tuple[int, list[Any]]]]:
    """The kind's template and, per counted element of the default inputs off a kink (the margin
    family's defaults reach them on purpose: no derivative there to differentiate), its arguments (mpmath)."""
    pred, label, _ = symjac.default_loss_inputs(loss)
    ev = evaluate(loss, pred, label)
    tpl = ev.template
    at = tpl.at_kink([np.asarray(c) for c in ev.columns]) if hasattr(tpl, "at_kink") else False
    counted = ev.counted.reshape(-1) & ~np.asarray(at, dtype=bool)
    with mpmath.workdps(60):
        rows = [(i, [_mp(c[i]) for c in ev.columns]) for i in range(len(ev.columns[0])) if counted[i]]
    return ev, rows


def _mp(v: Any) -> Any:
    """An MPFR number (or a constant a lowered function folded to a Python number) as mpmath."""
    return _numbers.to_mpf(v) if _numbers.is_number(v) else mpmath.mpf(v)


def _raw(tpl: Any) -> Any:
    """The raw SymPy element loss, as written in the definition, lowered to mpmath."""
    return sympy.lambdify(tpl.symbols, tpl.loss, modules="mpmath")


def _close(a: Any, b: Any, rel: float = 1e-25) -> bool:
    return bool(abs(a - b) <= rel * max(1, abs(a), abs(b)))


def test_the_registry_is_the_spec_kinds() -> None:
    assert KINDS == tuple(REGISTRY)
    for name, kind in REGISTRY.items():
        assert kind.name == name
        assert set(kind.options) <= ALL_OPTIONS
        assert all(SYNONYMS[s] == name for s in kind.synonyms)
        assert Loss(name).kind == name
        for opts in kind.samples:
            assert set(opts) <= set(kind.options)


#: The options that move a kink (every kind of symjac/loss/_kinds/ checked: huber's and smooth_l1's
#: |pred - label| = delta; mae's kink at 0 and kld's 0·log 0 at a label of 0 move with no option, and
#: weight, pos_weight, label_smoothing, log_input, log_target scale or reshape smooth losses), each drawn
#: over a range: powers of two, δ = 3 (not one), far below and above 1, and δ = 2^15, 10^9, 10^-9, beyond
#: the powers of two that keep the inputs exact in float16.
KINK_OPTIONS: dict[str, tuple[Any, ...]] = {"delta": (0.5, 1, 2, 3, 0.25, 1e-3, 1e3, 1.5, 0.75, 2**15, 1e9, 1e-9)}
KINKED = [pytest.param(name, {opt: v}, id=f"{name}-{opt}={v}") for name, kind in REGISTRY.items() if not kind.whole
          for opt in kind.options if opt in KINK_OPTIONS for v in KINK_OPTIONS[opt]]


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize(("name", "opts"), KINKED)
def test_default_inputs_avoid_the_kinks_their_options_move(name: str, opts: dict[str, Any], reduction: str) -> None:
    # Issue 34: Loss("huber", delta=2) refused its own default inputs (|d| = 2 sat on the kink).
    test_default_inputs_lie_in_the_domain(name, opts, reduction)
    delta = opts.get("delta")
    if delta is not None and 2.0**-21 <= delta < 2.0**15:  # where a power of two scales them (float16): both branches
        pred, label, _ = symjac.default_loss_inputs(Loss(name, reduction=reduction, **opts))
        gaps = np.abs(pred - label)
        assert (gaps < delta).any() and (gaps > delta).any(), gaps


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_default_inputs_lie_in_the_domain(name: str, opts: dict[str, Any], reduction: str) -> None:
    loss = Loss(name, reduction=reduction, **opts)
    kind = REGISTRY[name]
    pred, label, upstream = symjac.default_loss_inputs(loss)
    assert (label is None) == (not kind.takes_label)
    if reduction == "none":
        assert upstream.shape == kind.element_shape(pred.shape)
    ev = evaluate(loss, pred, label, upstream)  # the kind's domain check raises outside it
    if kind.kinks_at_defaults:  # the margin family: some default entries on a kink on purpose (issue 32)
        assert ev.template.at_kink([np.asarray(c) for c in ev.columns]).any()  # a hinge's argument exactly 0
        lo, hi = symjac.loss_derivative_set(loss, pred, label, upstream)
        d = symjac.loss_derivative(loss, pred, label, upstream)
        assert all(a <= b <= c for a, b, c in zip(lo.reshape(-1), d.reshape(-1), hi.reshape(-1)))
        # multi_margin's [a]₊² (p = 2) is C¹: its kink is the second derivative's
        assert ev.smooth == (name == "multi_margin" and opts.get("p") == 2)
        return
    assert ev.smooth  # no default input on a kink
    symjac.loss_hessian(loss, pred, label, upstream)  # nor where the second derivative jumps (InputError)
    # every value is a short dyadic fraction, exact in float16 (the same numbers in every dtype)
    for a in (pred, label, upstream):
        if a is not None and np.asarray(a).dtype.kind == "f":
            assert np.array_equal(np.asarray(a).astype(np.float16).astype(np.float64), a)
    lo, hi = symjac.loss_derivative_set(loss, pred, label, upstream)  # the Clarke rule: the derivative off kinks
    d = symjac.loss_derivative(loss, pred, label, upstream)
    assert all(a == b == c for a, b, c in zip(lo.reshape(-1), hi.reshape(-1), d.reshape(-1)))


@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_the_derivative_rule_is_the_derivative_of_the_template(name: str, opts: dict[str, Any]) -> None:
    # ev.h comes from the stable forms (element-wise) or the class-generic forms
    # (softmax_ce), in MPFR; the reference differentiates the raw element loss numerically.
    loss = Loss(name, **opts)
    ev, rows = _elements(loss)
    tpl, n = ev.template, ev.template.classes
    raw = _raw(tpl)
    h = ev.h.reshape(-1, n)
    with mpmath.workdps(60):
        for i, args in rows:
            for c in range(n):
                def along(x: Any, c: int = c, args: list[Any] = args) -> Any:
                    return raw(*args[:c], x, *args[c + 1:])

                want = mpmath.diff(along, args[c])
                assert _close(_mp(h[i, c]), want), (name, opts, i, c)
                assert _close(tpl.derivative_fn(*args)[c], want), (name, opts, i, c)


@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_the_second_derivative_rule_is_the_derivative_of_the_first(name: str, opts: dict[str, Any]) -> None:
    loss = Loss(name, **opts)
    kind = REGISTRY[name]
    ev, rows = _elements(loss)
    tpl, n = ev.template, ev.template.classes
    with mpmath.workdps(60):
        for _, args in rows:
            got = kind.second_derivative(tpl, *args)
            assert len(got) == n and all(len(r) == n for r in got)
            for c in range(n):
                for k in range(n):
                    def along(x: Any, c: int = c, k: int = k, args: list[Any] = args) -> Any:
                        return tpl.derivative_fn(*args[:k], x, *args[k + 1:])[c]

                    assert _close(got[c][k], mpmath.diff(along, args[k])), (name, opts, c, k)


@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_the_finite_difference_rule_keeps_the_stencil_in_the_domain(name: str, opts: dict[str, Any]) -> None:
    loss = Loss(name, **opts)
    kind = REGISTRY[name]
    pred, label, _ = symjac.default_loss_inputs(loss)
    h0 = 2.0**-17  # about u^(1/3) in float64, the verifier's step before the kind narrows it
    for j, z in enumerate(pred.reshape(-1).tolist()):
        h = kind.fd_step(loss, z, h0)
        if h is None:
            continue
        assert 0 < h <= h0
        assert kind.stencil_inside(loss, z - h, z + h)
        for zz in (z - h, z + h):
            moved = pred.copy()
            moved.reshape(-1)[j] = zz
            evaluate(loss, moved, label)  # inside the domain: no InputError


def test_every_kind_has_a_pytorch_oracle_for_its_second_derivative() -> None:
    assert {name for name, kind in REGISTRY.items() if not kind.whole} == set(TORCH)


def _torch_elementwise(name: str, loss: Loss) -> Any:
    F = pytest.importorskip("torch").nn.functional
    torch = pytest.importorskip("torch")
    d = float(loss.delta) if loss.delta is not None else None
    w = None if loss.weight is None else torch.tensor([float(v) for v in loss.weight], dtype=torch.float64)
    pw = None if loss.pos_weight is None else torch.tensor([float(v) for v in loss.pos_weight], dtype=torch.float64)
    table = {
        "mse": lambda z, y: (z - y) ** 2,
        "mae": lambda z, y: (z - y).abs(),
        "smooth_l1": lambda z, y: F.smooth_l1_loss(z, y, reduction="none", beta=d),
        "huber": lambda z, y: F.huber_loss(z, y, reduction="none", delta=d),
        "sigmoid_ce": lambda z, y: F.binary_cross_entropy_with_logits(z, y, weight=w, pos_weight=pw, reduction="none"),
        # F.binary_cross_entropy's backward divides by max(z(1 - z), 1e-12), which its
        # double backward carries to ~1e-11 relative: its formula through autograd's log
        "bce": lambda z, y: -(1 if w is None else w) * (y * z.log() + (1 - y) * (1 - z).log()),
        "kld": lambda z, y: F.kl_div(z if loss.log_input else z.log(), y, reduction="none",
                                     log_target=bool(loss.log_target)),
        "constant_derivative": lambda z, y: z,
        "poisson_nll": lambda z, y: F.poisson_nll_loss(z, y, log_input=bool(loss.log_input), full=bool(loss.full),
                                                       eps=float(loss.eps or 0), reduction="none"),
        "hinge_embedding": lambda z, y: F.hinge_embedding_loss(z, y, margin=float(loss.margin or 1), reduction="none"),
        "soft_margin": lambda z, y: F.soft_margin_loss(z, y, reduction="none"),
    }
    return table[name]


TORCH = {name: "elementwise" for name in ("mse", "mae", "smooth_l1", "huber", "sigmoid_ce", "bce", "kld",
                                           "constant_derivative", "poisson_nll", "hinge_embedding", "soft_margin")} | {
    name: "rows" for name in ("softmax_ce", "nll", "gaussian_nll", "multilabel_soft_margin", "multi_margin",
                              "multilabel_margin", "margin_ranking", "cosine_embedding", "triplet_margin")}


def _torch_rows(name: str, loss: Loss, label: np.ndarray) -> Any:
    """The summed loss of a class-axis kind as a function of the (rows, C) logits, through PyTorch ops
    that differentiate twice (PyTorch has no double backward of multi_margin_loss and
    multilabel_margin_loss: their definitions written with clamp, as PyTorch's docs state them)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    w = None if loss.weight is None else torch.tensor([float(v) for v in loss.weight], dtype=torch.float64)
    if name == "nll":
        ignore = -100 if loss.ignore_index is None else loss.ignore_index
        return lambda zz: F.nll_loss(zz, torch.tensor(label), weight=w, reduction="sum", ignore_index=ignore)
    if name == "gaussian_nll":  # (mean, variance) pairs along the last axis
        target = torch.tensor(label, dtype=torch.float64)
        return lambda zz: F.gaussian_nll_loss(zz[..., 0], target[..., 0], zz[..., 1], full=bool(loss.full),
                                              eps=float(loss.eps or 0), reduction="sum")
    if name == "margin_ranking":  # (x1, x2) pairs along the last axis, the label (y, 0)
        target = torch.tensor(label, dtype=torch.float64)
        return lambda zz: F.margin_ranking_loss(zz[..., 0], zz[..., 1], target[..., 0], margin=float(loss.margin),
                                                reduction="sum")
    if name == "cosine_embedding":  # rows [x1 | x2], the label (y, 0, ..., 0)
        target, d = torch.tensor(label, dtype=torch.float64), label.shape[-1] // 2
        return lambda zz: F.cosine_embedding_loss(zz[..., :d], zz[..., d:], target[..., 0], margin=float(loss.margin),
                                                  reduction="sum")
    if name == "softmax_ce":
        target = torch.tensor(label) if REGISTRY[name].labels_are_indices(loss) else \
            torch.tensor(label, dtype=torch.float64)
        ignore = -100 if loss.ignore_index is None else loss.ignore_index
        return lambda zz: F.cross_entropy(zz, target, weight=w, label_smoothing=float(loss.label_smoothing or 0),
                                          reduction="sum", ignore_index=ignore)
    if name == "triplet_margin":  # rows [anchor | positive | negative] of 3·D
        def triplet(zz: Any) -> Any:
            d = zz.shape[-1] // 3
            return F.triplet_margin_loss(zz[:, :d], zz[:, d:2 * d], zz[:, 2 * d:], margin=float(loss.margin),
                                         p=loss.p, eps=float(loss.eps), swap=bool(loss.swap), reduction="sum")
        return triplet
    if name == "multilabel_soft_margin":
        return lambda zz: F.multilabel_soft_margin_loss(zz, torch.tensor(label, dtype=torch.float64), weight=w,
                                                        reduction="sum")
    if name == "multi_margin":
        def total(zz: Any) -> Any:
            c, out = zz.shape[-1], 0
            for r, t in enumerate(label.tolist()):
                wt = 1 if w is None else w[t]
                for i in range(c):
                    if i != t:
                        out = out + wt * torch.clamp(float(loss.margin) - zz[r, t] + zz[r, i], min=0) ** loss.p / c
            return out
        return total

    def total_ml(zz: Any) -> Any:
        c, out = zz.shape[-1], 0
        for r, row in enumerate(label.tolist()):
            targets = row[:row.index(-1)] if -1 in row else row
            for j in set(targets):
                for i in range(c):
                    if i not in targets:
                        out = out + torch.clamp(1 - zz[r, j] + zz[r, i], min=0) / c
        return out
    return total_ml


@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_the_second_derivative_rule_against_pytorch_double_backward(name: str, opts: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    loss = Loss(name, reduction="sum", **opts)
    kind = REGISTRY[name]
    pred, label, _ = symjac.default_loss_inputs(loss)
    ev, rows = _elements(loss)
    tpl = ev.template
    z = torch.tensor(pred, dtype=torch.float64, requires_grad=True)
    if TORCH[name] == "rows":  # a class axis: the per-row Hessian of the summed loss
        hess = torch.autograd.functional.hessian(_torch_rows(name, loss, label), z)  # (rows, C, rows, C)
        for i, args in rows:
            with mpmath.workdps(60):  # the rule's exact form may cancel (triplet_margin's 1/‖d‖ - d²/‖d‖³ at D = 1)
                got = kind.second_derivative(tpl, *args)
            want = hess[i, :, i, :].numpy()
            assert np.allclose(np.array(got, dtype=float), want, rtol=1e-12, atol=1e-14), (opts, i)
        return
    y = torch.tensor(label if label is not None else pred, dtype=torch.float64)
    ell = _torch_elementwise(name, loss)(z, y)
    (g,) = torch.autograd.grad(ell.sum(), z, create_graph=True)
    # element-wise: ℓ_i depends on z_i only, so d(Σ g)/dz is the Hessian's diagonal
    (g2,) = torch.autograd.grad(g.sum(), z, allow_unused=True) if g.requires_grad else (None,)
    want = np.zeros(pred.size) if g2 is None else g2.detach().numpy(force=True).reshape(-1)
    for i, args in rows:
        got = float(kind.second_derivative(tpl, *args)[0][0])
        assert np.isclose(got, want[i], rtol=1e-12, atol=1e-14), (name, opts, i, got, want[i])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_extreme_inputs_are_exact_in_the_dtype_in_the_domain_and_finite_there(name: str, opts: dict[str, Any],
                                                                             dtype: str) -> None:
    # the extreme family's inputs (verify_loss's, tests/test_loss_families.py): exact in the dtype,
    # in the kind's domain, off its kinks, and every exact derivative there finite in the dtype
    from symjac.loss._families import family_inputs

    loss = Loss(name, **opts)
    got = family_inputs(loss, "extreme", np.dtype(dtype))
    if got is None:  # the kind's float evaluation overflows only where its exact value does
        # linear in pred, or hinges of it (a square of a hinge overflows where its exact value does);
        # poisson_nll's log-rate form: e^z - y·z overflows where its exact value does
        # triplet_margin's p = 1 distance forms no square
        assert name in ("constant_derivative", "hinge_embedding", "multi_margin", "multilabel_margin",
                        "margin_ranking") or \
            (name == "poisson_nll" and loss.log_input) or (name == "triplet_margin" and loss.p == 1)
        return
    pred, label, _ = got
    for a in (pred, label):
        if a is not None and np.asarray(a).dtype.kind == "f":
            assert np.array_equal(np.asarray(a).astype(dtype).astype(np.float64), a)
    ev = evaluate(loss, pred, label)
    assert ev.smooth
    top = _numbers.number(float(np.finfo(dtype).max))
    assert not np.any(np.asarray(np.abs(ev.derivative()) > top, dtype=bool))


@pytest.mark.parametrize(("name", "opts"), SPECS)
def test_nonfinite_inputs_follow_the_convention_and_have_limits(name: str, opts: dict[str, Any]) -> None:
    # the nonfinite family: the convention's values in some elements, finite ones elsewhere; every
    # element with one ±inf entry has a limit of each derivative (SymPy's, or the kind's rule)
    from symjac.loss._families import Nonfinite, element_limits, nonfinite_inputs

    loss = Loss(name, **opts)
    kind = REGISTRY[name]
    pred, label, _ = nonfinite_inputs(loss)
    split = Nonfinite.of(loss, pred)
    assert split is not None and (~split.elements).any()  # some elements stay finite
    taken = {str(v) for v in kind.nonfinite(loss).values}
    assert {str(v) for v in pred.reshape(-1) if not np.isfinite(v)} == taken
    ev = evaluate(loss, np.where(split.codes != 0, 0.5, pred), label)
    per = ev.template.classes if kind.class_axis else 1
    for i in np.flatnonzero(split.elements):
        slot = split.limit_slot(int(i), per)
        if slot is None:
            continue
        args = [Fraction(*c[i].as_integer_ratio()) for c in ev.columns]
        _, hs = element_limits(loss, ev.template, args, *slot)
        assert all(h is not None for h in hs)
