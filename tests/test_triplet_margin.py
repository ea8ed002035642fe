"""Issue 32: the triplet_margin kind (PyTorch ``triplet_margin_loss``), rows ``[anchor | positive | negative]``.

The exact values come from mpmath, written here from PyTorch's documented definition
(``ℓ = max(d(a, q) - d(a, n) + margin, 0)``, ``d(x, y) = ‖x - y + eps‖_p``, the swap's
``min(d(a, n), d(q, n))``), independent of the SymPy template under test, and from PyTorch's
forward in float64. ``verify_loss`` passes PyTorch and a correct NumPy implementation and catches
the planted defects at its defaults (whose rows reach the hinge's and the swap's kinks on purpose).
"""

from __future__ import annotations

import itertools
from typing import Any

import mpmath
import numpy as np
import pytest

import symjac
from symjac import InputError, Loss, SpecError, verify_loss

S = 8  # the loss scale of every case: a missing scale shows

#: rows of 3·D = 6 (D = 2): the anchor beyond, between and behind the others; the Euclidean
#: distances irrational (the sqrt's exact values and bounds), the hinge active and not
PRED_D2 = np.array([[1.0, 2.0, 0.5, -1.0, 3.0, 0.25], [0.0, 1.0, 2.0, 1.0, 0.0, -1.0],
                    [-0.5, 0.75, 1.5, 1.25, -0.25, 0.5], [2.0, -1.5, -0.75, 0.5, 2.5, -2.0]])


# ----------------------------------------------------------------------------- the definition in mpmath


def triplet_ref(pred: np.ndarray, margin: float = 1.0, p: int = 2, eps: float = 1e-6, swap: bool = False) -> list[Any]:
    """PyTorch docs: L(a, p, n) = max{d(a_i, p_i) - d(a_i, n_i) + margin, 0}, d(x, y) = ‖x - y‖_p, the
    difference with eps added (pairwise_distance); swap: d(a, n) := min(d(a, n), d(p, n))."""
    rows = np.asarray(pred, dtype=object).reshape(-1, pred.shape[-1])
    d = rows.shape[1] // 3

    def dist(x: Any, y: Any) -> Any:
        diffs = [mpmath.mpf(xi) - mpmath.mpf(yi) + mpmath.mpf(eps) for xi, yi in zip(x, y)]
        return mpmath.fsum(abs(t) ** p for t in diffs) ** (mpmath.mpf(1) / p)

    out = []
    for row in rows:
        a, q, n = row[:d], row[d:2 * d], row[2 * d:]
        neg = min(dist(a, n), dist(q, n)) if swap else dist(a, n)
        out.append(max(dist(a, q) - neg + mpmath.mpf(margin), mpmath.mpf(0)))
    return out


OPTIONS = [{}, {"p": 1}, {"swap": True}, {"p": 1, "swap": True, "margin": 0.5, "eps": 0.25}]


def _ref_options(loss: Loss) -> dict[str, Any]:
    return {"margin": float(loss.margin), "p": loss.p, "eps": float(loss.eps), "swap": bool(loss.swap)}


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("where", ["defaults", "d2"])
def test_values_and_clarke_ends_against_mpmath_from_the_definition(opts: dict[str, Any], where: str) -> None:
    loss = Loss("triplet_margin", reduction="sum", **opts)
    pred = symjac.default_loss_inputs(loss)[0] if where == "defaults" else PRED_D2
    ref = _ref_options(loss)
    with mpmath.workdps(60):
        want = mpmath.fsum(triplet_ref(pred, **ref))
        assert abs(symjac.loss_value(loss, pred, None) - want) < mpmath.mpf(10) ** -50
        lo, hi = symjac.loss_derivative_set(loss, pred, None)
        for j in range(pred.size):  # one-sided differences of the definition: the Clarke ends (one kink per entry)
            def along(x: Any, j: int = j) -> Any:
                moved = pred.astype(object).reshape(-1).copy()
                moved[j] = x
                return mpmath.fsum(triplet_ref(moved.reshape(pred.shape), **ref))

            x, h = mpmath.mpf(float(pred.reshape(-1)[j])), mpmath.mpf(2) ** -80
            ends = sorted([(along(x) - along(x - h)) / h, (along(x + h) - along(x)) / h])
            assert abs(lo.reshape(-1)[j] - ends[0]) < 1e-20 and abs(hi.reshape(-1)[j] - ends[1]) < 1e-20, (j, ends)


def test_the_defaults_reach_the_hinges_and_the_swaps_kinks() -> None:
    # row 1 (a, q, n) = (2, 1, 0): d(a, q) - d(a, n) + 1 = (1 + ε) - (2 + ε) + 1 = 0, the hinge's kink: dℓ/da
    # from 0 (inactive) to sign - sign = 0, dℓ/dq from 0 to -1, dℓ/dn from 0 to 1
    loss = Loss("triplet_margin", reduction="sum")
    pred, _, _ = symjac.default_loss_inputs(loss)
    lo, hi = symjac.loss_derivative_set(loss, pred, None)
    assert [float(v) for v in lo[1]] == [0.0, -1.0, 0.0] and [float(v) for v in hi[1]] == [0.0, 0.0, 1.0]
    # row 2 with swap: a = q = 1/2, n = 0: d(a, n) = d(q, n) = 1/2 + ε, the min's kink: the hinge active,
    # dℓ/da in [0, 1] (ε-signs: 1 - {1 or 0}), dℓ/dq in [-2, -1], dℓ/dn 1 either way
    swap = Loss("triplet_margin", reduction="sum", swap=True)
    lo, hi = symjac.loss_derivative_set(swap, pred, None)
    assert [float(v) for v in lo[2]] == [0.0, -2.0, 1.0] and [float(v) for v in hi[2]] == [1.0, -1.0, 1.0]


def test_the_spec_its_synonyms_and_typed_errors() -> None:
    loss = Loss("triplet_margin")
    assert (loss.margin, loss.p, float(loss.eps), loss.swap) == (1, 2, 1e-6, False)
    for wrong in ("triplet_margin_loss", "tripletmarginloss"):
        with pytest.raises(SpecError, match="triplet_margin"):
            Loss(wrong)
    for bad, word in (({"p": 3}, "p=3"), ({"margin": 0}, "margin=0"), ({"margin": -1}, "margin=-1"),
                      ({"eps": -1e-3}, "eps="), ({"swap": "yes"}, "swap=")):
        with pytest.raises(SpecError, match=word):
            Loss("triplet_margin", **bad)
    with pytest.raises(SpecError, match="does not apply"):
        Loss("triplet_margin", weight=(1, 2))
    with pytest.raises(InputError, match="3·D"):
        symjac.loss_value(loss, np.zeros((2, 4)), None)
    at_zero = np.array([[1.0, 2.0, 1.0, 2.0, 0.0, 0.0]])  # a - q + ε = ε ≠ 0: fine
    symjac.loss_value(loss, at_zero, None)
    with pytest.raises(InputError, match="unit ball"):  # x - y + ε = 0 in every entry: the norm at 0
        symjac.loss_value(Loss("triplet_margin", eps=0), at_zero, None)


# ----------------------------------------------------------------------------- PyTorch: values and verify_loss


def _torch_impl(reduction: str, opts: dict[str, Any], scale: Any = S) -> tuple[Loss, Any]:
    pytest.importorskip("torch")
    from symjac.frameworks.torch import triplet_margin_loss

    return triplet_margin_loss(reduction=reduction, scale=scale, **opts)


@pytest.mark.parametrize("opts", OPTIONS)
def test_pytorch_forward_is_the_exact_value(opts: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    for reduction, pred in itertools.product(("mean", "sum"), ("defaults", "d2")):
        loss, _ = _torch_impl(reduction, opts)
        pred = symjac.default_loss_inputs(loss)[0] if pred == "defaults" else PRED_D2
        z, d = torch.tensor(pred), pred.shape[-1] // 3
        got = torch.nn.functional.triplet_margin_loss(z[:, :d], z[:, d:2 * d], z[:, 2 * d:], **_ref_options(loss),
                                                      reduction=reduction).item()
        assert abs(got - float(symjac.loss_value(loss, pred, None))) <= 8e-16 * max(1.0, abs(got))


def _grid(*axes: list[Any]) -> list[Any]:
    combos = list(itertools.product(*axes))
    return [pytest.param(*c, marks=() if i == 0 else pytest.mark.slow) for i, c in enumerate(combos)]


@pytest.mark.parametrize(("reduction", "dtype", "opts"),
                         _grid(["mean", "sum", "none"], ["float32", "float64"], [{}, {"p": 1}, {"swap": True},
                                                                                   {"p": 1, "swap": True}]))
def test_verify_loss_passes_pytorch(reduction: str, dtype: str, opts: dict[str, Any]) -> None:
    loss, impl = _torch_impl(reduction, opts)
    # p = 2: PyTorch's norm forms Σ(x - y + ε)², which overflows at the extreme family
    # (test_pytorch_overflows_at_extreme_magnitudes); every other family runs
    families = ("nonfinite",) if loss.p == 2 else None
    report = verify_loss(loss, impl, dtype=dtype, families=families)
    assert report.ok, report.headline
    report = verify_loss(loss, impl, dtype=dtype, pred=PRED_D2)  # D = 2: the Euclidean norm's square root
    assert report.ok, report.headline


def test_pytorch_overflows_at_extreme_magnitudes() -> None:
    # a real finding, not a false alarm: at a - q = (-2, 1/2)·2^640 (float64) the distance is finite
    # (mpmath), while PyTorch's norm of 2 entries squares them first: both distances inf, the loss
    # inf - inf = NaN
    torch = pytest.importorskip("torch")
    g = 2.0**640
    row = np.array([[-g, g, g, g / 2, -g / 2, g]])
    z = torch.tensor(row)
    assert not np.isfinite(torch.nn.functional.triplet_margin_loss(z[:, :2], z[:, 2:4], z[:, 4:]).item())
    assert mpmath.isfinite(triplet_ref(row)[0]) and triplet_ref(row)[0] < 4 * g
    loss, impl = _torch_impl("mean", {})
    report = verify_loss(loss, impl, dtype="float64")
    assert not report.ok
    assert {f.family for f in report.findings} == {"extreme"}


# ----------------------------------------------------------------------------- NumPy references and planted defects


def _norm(x: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """‖x‖_p per row and its gradient (0 at a norm of 0, as PyTorch's); p = 2 scaled by the row's largest
    magnitude (no overflow)."""
    if p == 1:
        return np.abs(x).sum(axis=-1), np.sign(x)
    s = np.abs(x).max(axis=-1, keepdims=True)
    s = np.where(s == 0, 1, s)
    norm = s[:, 0] * np.sqrt(((x / s) ** 2).sum(axis=-1))
    return norm, x / np.where(norm == 0, 1, norm)[:, None]


def _triplet_numpy(reduction: str = "mean", margin: float = 1.0, p: int = 2, eps: float = 1e-6, swap: bool = False,
                   *, scaled: bool = True, denominator: str = "right", side: str = "right", upstream_used: bool = True,
                   eps_in_backward: bool = True, swap_in_backward: bool = True) -> tuple[Any, Any]:
    """triplet_margin's forward and S·dL/dpred in NumPy (in the dtype); the keywords plant one defect each."""
    def parts(z: np.ndarray, with_eps: bool = True) -> tuple[Any, ...]:
        d = z.shape[-1] // 3
        a, q, n = z[:, :d], z[:, d:2 * d], z[:, 2 * d:]
        e = z.dtype.type(eps if with_eps else 0)
        (daq, gaq), (dan, gan), (dqn, gqn) = _norm(a - q + e, p), _norm(a - n + e, p), _norm(q - n + e, p)
        use_qn = (dqn < dan) if swap else np.zeros(dan.shape, dtype=bool)
        arg = daq - np.where(use_qn, dqn, dan) + z.dtype.type(margin)
        return arg, gaq, gan, gqn, use_qn

    def forward(z: np.ndarray, _: Any) -> Any:
        ell = np.maximum(parts(z)[0], 0)
        return ell if reduction == "none" else (ell.sum() / (len(ell) if reduction == "mean" else 1)).astype(z.dtype)

    def derivative(z: np.ndarray, _: Any, u: Any = None) -> np.ndarray:
        arg, gaq, gan, gqn, use_qn = parts(z, eps_in_backward)
        if not swap_in_backward:
            use_qn = np.zeros_like(use_qn)
        act = ((arg >= 0) if side == "right" else (arg < 0)).astype(z.dtype)[:, None]  # the kink: either side
        uq = use_qn[:, None]
        h = act * np.concatenate([gaq - np.where(uq, 0, gan), -gaq - np.where(uq, gqn, 0), np.where(uq, gqn, gan)],
                                 axis=-1)
        if reduction == "none":
            h = h * (u[:, None] if upstream_used else 1.0)
        elif reduction == "mean":
            h = h / (len(h) if denominator == "right" else h.size)
        return (h * (S if scaled else 1)).astype(z.dtype)

    return derivative, forward


@pytest.mark.parametrize(("reduction", "opts"), _grid(["mean", "sum", "none"], OPTIONS[:3]))
def test_a_correct_numpy_triplet_passes_every_family(reduction: str, opts: dict[str, Any]) -> None:
    derivative, forward = _triplet_numpy(reduction, **opts)
    loss = Loss("triplet_margin", reduction=reduction, scale=S, **opts)
    for pred in (None, PRED_D2):
        report = verify_loss(loss, derivative=derivative, forward=forward, dtype="float64", pred=pred)
        assert report.ok, report.headline


@pytest.mark.parametrize(("defect", "reduction", "opts", "category"), [
    ({"scaled": False}, "mean", {}, "missing_scale"),
    ({"denominator": "entries"}, "mean", {}, "wrong_scale"),
    ({"side": "wrong"}, "mean", {}, "wrong_values"),
    ({"upstream_used": False}, "none", {}, "wrong_values"),
    ({"eps_in_backward": False}, "mean", {}, "wrong_values"),
    ({"swap_in_backward": False}, "mean", {"swap": True}, "wrong_values"),
])
def test_planted_triplet_defects_are_caught_at_the_defaults(defect: dict[str, Any], reduction: str,
                                                            opts: dict[str, Any], category: str) -> None:
    derivative, forward = _triplet_numpy(reduction, **opts, **defect)
    report = verify_loss(Loss("triplet_margin", reduction=reduction, scale=S, **opts), derivative=derivative,
                         forward=forward, dtype="float64")
    assert not report.ok
    assert category in {f.category for f in report.findings}, report.headline


# ----------------------------------------------------------------------------- spec files and golden data

SPEC = """name = "triplet"
[operator]
kind = "loss"
loss = "triplet_margin"
margin = "0.5"
p = {p}
swap = {swap}
scale = 8
[input]
pred = [[1.0, 2.0, 0.5, -1.0, 3.0, 0.25], [0.0, 1.0, 2.0, 1.0, 0.0, -1.0], [2.0, -1.5, -0.75, 0.5, 2.5, -2.0]]
"""


def test_a_spec_file_reads_the_kind_and_its_options(tmp_path: Any) -> None:
    from symjac.io._specfile import load

    path = tmp_path / "triplet.toml"
    path.write_text(SPEC.format(p=1, swap="true"))
    (case,) = load(path).cases
    assert case.operator == Loss("triplet_margin", margin=0.5, p=1, swap=True, scale=8)
    path.write_text(SPEC.format(p=3, swap="false"))
    with pytest.raises(SpecError, match="p=3"):
        load(path)


@pytest.mark.parametrize(("p", "swap"), [(2, "false"), (1, "true")])
def test_golden_data_holds_the_exact_values_and_pytorch_stays_within_its_bounds(tmp_path: Any, p: int,
                                                                                swap: str) -> None:
    import json

    import cli_runner

    torch = pytest.importorskip("torch")
    (tmp_path / "triplet.toml").write_text(SPEC.format(p=p, swap=swap))
    r = cli_runner.symjac("golden", str(tmp_path / "triplet.toml"), "--out", str(tmp_path / "golden"),
                          "--dtype", "float32,float64")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "golden" / "triplet.json").read_text())
    assert doc["operator"]["kind"] == "triplet_margin" and doc["operator"].get("p", 2) == p  # a default left out
    arrays = doc["arrays"]
    pred = np.array(arrays["pred"]["float64"]).reshape(3, 6)
    with mpmath.workdps(60):  # the mean of the definition's values (mpmath)
        want = mpmath.fsum(triplet_ref(pred, margin=0.5, p=p, swap=swap == "true")) / 3
        assert abs(mpmath.mpf(arrays["value"]["exact"]) - want) < mpmath.mpf(10) ** -35
    for dtype in ("float32", "float64"):
        z = torch.tensor(arrays["pred"][dtype], dtype=getattr(torch, dtype)).reshape(3, 6).requires_grad_()
        loss = torch.nn.functional.triplet_margin_loss(z[:, :2], z[:, 2:4], z[:, 4:], margin=0.5, p=p,
                                                       swap=swap == "true")
        (8 * loss).backward()
        assert abs(float(loss.detach()) - arrays["value"][dtype]) <= arrays["value"]["max_abs_error"][dtype]
        got = z.grad.double().numpy().reshape(-1)
        want_d = np.array(arrays["derivative"][dtype])
        bound = np.array(arrays["derivative"]["max_abs_error"][dtype])
        assert np.all(np.abs(got - want_d) <= bound), dtype
        assert np.any(np.abs(got / 8 - want_d) > bound)  # a forgotten scale is outside


def test_a_stencil_onto_the_norms_zero_is_left_out_not_a_crash() -> None:
    # conform's full grid, float16: row [1.75, 1.75, -0.25] with eps = 1/16 (D = 1). A finite-difference
    # step of 1/16 on the anchor puts a - q + ε at 0, where the Euclidean norm has no derivative and the
    # forward bound's condition divides by 0: that stencil is no smooth stencil (left out, as at a
    # kink); verify_loss ran into a ZeroDivisionError there.
    pytest.importorskip("torch")
    loss, impl = _torch_impl("mean", {"margin": 1.0, "p": 2, "eps": 0.0625, "swap": True})
    pred = np.array([[-0.625, 1.0, 0.5], [0.25, -0.25, -1.25], [1.75, 1.75, -0.25], [-0.875, -0.75, -0.375]])
    report = verify_loss(loss, impl, pred=pred, dtype="float16")
    assert report.ok, str(report)
