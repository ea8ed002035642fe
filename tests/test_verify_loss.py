"""symjac.verify_loss: findings for the loss-scale contract, purity, bad output; the family table.

Expected numbers come from seed 003 (shared/seeds/003_*.txt) or from hand
derivations in comments. The NumPy implementations under test are written here,
independently of symjac, from the textbook formulas.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import symjac
from symjac import InputError, Loss, LossImpl, SpecError, check_loss_family, verify_loss
from symjac.loss._evaluate import default_inputs
from symjac.loss._kind import REGISTRY

#: the kinds with a textbook reference here (ctc, evaluated whole, is tested in tests/test_loss_ctc.py;
#: nll, poisson_nll and gaussian_nll against their own references in tests/test_losses_nll.py, triplet_margin
#: against PyTorch's in tests/test_triplet_margin.py)
LIKELIHOOD = ("nll", "poisson_nll", "gaussian_nll")
KINDS = tuple(name for name, kind in REGISTRY.items()
              if not kind.whole and name not in LIKELIHOOD and name != "triplet_margin")

S = 8  # seed 003's loss scale


# ------------------------------------------------- independent NumPy references


def _factor(loss, z, upstream):
    """The reduction factor by the docstring's definitions, in z's dtype."""
    axis = REGISTRY[loss.kind].class_axis
    rows = z.shape[:-1] if axis else z.shape
    if loss.reduction == "none":
        return upstream[..., None] if axis else upstream
    if loss.reduction == "sum":
        return z.dtype.type(1)
    if loss.reduction == "batch_mean":
        return z.dtype.type(1) / z.dtype.type(rows[0] if rows else 1)
    return z.dtype.type(1) / z.dtype.type(int(np.prod(rows)))


def _sigmoid(z):
    with np.errstate(over="ignore"):  # e^-z = inf: σ = 0, right
        return 1 / (1 + np.exp(-z))


def _cosine(z, y, m):
    """PyTorch's cos = Σx1·x2 / sqrt((Σx1² + ε)(Σx2² + ε)) (ε float32's 1e-12) with each vector scaled by its largest
    magnitude s first (ε/s² beside it): no square overflows. (elements, dℓ/dz) in z's dtype."""
    t, d = z.dtype.type, z.shape[-1] // 2
    a, b = z[..., :d], z[..., d:]
    with np.errstate(all="ignore"):  # a NaN or ±inf row: NaN, as PyTorch
        sa, sb = np.abs(a).max(-1, keepdims=True), np.abs(b).max(-1, keepdims=True)
        ua, ub = a / sa, b / sb
        n1 = np.sqrt((ua * ua).sum(-1, keepdims=True) + t(np.float32(1e-12)) / (sa * sa))
        n2 = np.sqrt((ub * ub).sum(-1, keepdims=True) + t(np.float32(1e-12)) / (sb * sb))
        cos = (ua * ub).sum(-1, keepdims=True) / (n1 * n2)
        dcos = np.concatenate([(ub / (n1 * n2) - cos * ua / (n1 * n1)) / sa,
                               (ua / (n1 * n2) - cos * ub / (n2 * n2)) / sb], axis=-1)
    c, on = cos[..., 0], (y == -1) & (cos[..., 0] - m > 0)
    ell = np.where(y == 1, t(1) - c, np.where(on, c - m, t(0)))
    return ell, np.where((y == 1)[..., None], -dcos, np.where(on[..., None], dcos, t(0)))


def _hinges(loss, z, y):
    """Issue 32's margin family from PyTorch's docs: (elements, dℓ/dz) in z's dtype."""
    t = z.dtype.type
    kind = loss.kind
    if kind == "hinge_embedding":
        m = t(loss.margin)
        return np.where(y == 1, z, np.maximum(t(0), m - z)), np.where(y == 1, t(1), np.where(m - z > 0, t(-1), t(0)))
    if kind == "soft_margin":
        return np.logaddexp(t(0), -y * z), -y * _sigmoid(-y * z)
    if kind == "cosine_embedding":  # rows [x1 | x2], label (y, 0...): 1 - cos at y = 1, [cos - m]₊ at y = -1
        return _cosine(z, y[..., 0], t(loss.margin))
    if kind == "margin_ranking":  # (x1, x2) pairs along the last axis, label (y, 0): [-y·(x1 - x2) + m]₊
        yy, a = y[..., 0], -y[..., 0] * (z[..., 0] - z[..., 1]) + t(loss.margin)
        on = np.where(a > 0, yy, t(0))
        return np.maximum(t(0), a), np.stack([-on, on], axis=-1)
    c = z.shape[-1]
    w = np.ones(c, dtype=z.dtype) if loss.weight is None else np.array([float(v) for v in loss.weight], dtype=z.dtype)
    if kind == "multilabel_soft_margin":
        sp, sn = np.logaddexp(t(0), -z), np.logaddexp(t(0), z)
        return (w * (y * sp + (1 - y) * sn)).sum(-1) / t(c), w * (_sigmoid(z) - y) / t(c)
    ell, g = np.zeros(z.shape[:-1], dtype=z.dtype), np.zeros_like(z)
    for r in range(z.shape[0]):
        if kind == "multi_margin":
            pairs, wt = [(int(y[r]), i) for i in range(c) if i != int(y[r])], w[int(y[r])]
            m, p = t(loss.margin), loss.p
        else:  # multilabel_margin: the targets before the first -1
            row = [int(v) for v in y[r]]
            targets = row[:row.index(-1)] if -1 in row else row
            pairs, wt, m, p = [(j, i) for j in set(targets) for i in range(c) if i not in targets], t(1), t(1), 1
        for j, i in pairs:
            a = m - z[r, j] + z[r, i]
            if a > 0:
                ell[r] += wt * a**p / t(c)
                g[r, i] += wt * p * a ** (p - 1) / t(c)
                g[r, j] -= wt * p * a ** (p - 1) / t(c)
    return ell, g


MARGIN = dict.fromkeys(("hinge_embedding", "soft_margin", "multilabel_soft_margin", "multi_margin",
                        "multilabel_margin", "margin_ranking", "cosine_embedding"), _hinges)


def reference(loss, scale=None):
    """(forward, derivative) from the textbook formulas, computed in the input dtype."""
    s = float(loss.scale if scale is None else scale)
    kind = loss.kind

    def elements(z, y):
        d = None if y is None or kind in MARGIN else z - y
        if kind == "mse":
            return d * d
        if kind == "mae":
            return np.abs(d)
        if kind == "smooth_l1":
            b = z.dtype.type(loss.delta)
            return np.where(np.abs(d) < b, d * d / (2 * b), np.abs(d) - b / 2)
        if kind == "huber":
            b = z.dtype.type(loss.delta)
            return np.where(np.abs(d) < b, d * d / 2, b * (np.abs(d) - b / 2))
        if kind == "sigmoid_ce":  # -y log σ - (1-y) log(1-σ), via softplus
            sp = np.logaddexp(z.dtype.type(0), -z)
            return y * sp + (1 - y) * (z + sp)
        if kind == "bce":
            return -(y * np.log(z) + (1 - y) * np.log(1 - z))
        if kind == "kld":
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(y == 0, z.dtype.type(0), y * (np.log(y) - np.log(z)))
        if kind == "softmax_ce":
            m = z.max(-1, keepdims=True)
            logp = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
            return -(y * logp).sum(-1)
        if kind in MARGIN:
            return MARGIN[kind](loss, z, y)[0]
        return z  # constant_derivative

    def grads(z, y):
        d = None if y is None or kind in MARGIN else z - y
        if kind == "mse":
            return 2 * d
        if kind == "mae":
            return np.sign(d)
        if kind == "smooth_l1":
            b = z.dtype.type(loss.delta)
            return np.where(np.abs(d) < b, d / b, np.sign(d))
        if kind == "huber":
            b = z.dtype.type(loss.delta)
            return np.where(np.abs(d) < b, d, b * np.sign(d))
        if kind == "sigmoid_ce":
            return _sigmoid(z) - y
        if kind == "bce":
            return (z - y) / (z * (1 - z))
        if kind == "kld":
            return -y / z
        if kind == "softmax_ce":
            e = np.exp(z - z.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True) - y
        if kind in MARGIN:
            return MARGIN[kind](loss, z, y)[1]
        return np.ones_like(z)

    def forward(z, y):
        el = elements(z, y)
        if loss.reduction == "none":
            return el.astype(z.dtype)
        return (el.sum() * _factor(loss, z, None)).astype(z.dtype)

    def derivative(z, y, upstream=None):
        return (z.dtype.type(s) * grads(z, y) * _factor(loss, z, upstream)).astype(z.dtype)

    return forward, derivative


# ------------------------------------------------------------------- seed 003


def _seed_family(scale_all=False):
    """The five nntrainer losses of seed 003, as NumPy; only MSE applies S unless ``scale_all``."""
    k = S if scale_all else 1
    return {
        "mse": LossImpl("mse", lambda z, y: (S * 2 * (z - y) / z.size).astype(z.dtype),
                        lambda z, y: np.mean((z - y) ** 2), pred=[0.75], label=[0.5]),
        "sigmoid_ce": LossImpl("sigmoid_ce", lambda z, y: (k * (_sigmoid(z) - y)).astype(z.dtype),
                               pred=[0.0], label=[1.0]),
        "softmax_ce": LossImpl("softmax_ce", lambda z, y: (k * (np.exp(z) / np.exp(z).sum(-1) - y)).astype(z.dtype),
                               pred=[[0.0, 0.0]], label=[[1.0, 0.0]]),
        "kld": LossImpl("kld", lambda z, y: (k * (-y / z)).astype(z.dtype), pred=[0.5], label=[0.25]),
        "constant_derivative": LossImpl("constant_derivative", lambda z, y: (k * np.ones_like(z)).astype(z.dtype),
                                        pred=[0.5]),
    }


def test_seed003_family_table_four_missing_scale_one_pass():
    table = check_loss_family(_seed_family(), scale=S)
    verdicts = {r.name: r.verdict for r in table.rows}
    assert verdicts == {"mse": "pass", "sigmoid_ce": "missing_scale", "softmax_ce": "missing_scale",
                        "kld": "missing_scale", "constant_derivative": "missing_scale"}
    assert table.counts() == {"pass": 1, "missing_scale": 4}
    rows = {r.name: r for r in table.rows}
    # seed 003's numbers: base, expected (S = 8), observed.
    seed = {
        "sigmoid_ce": ([-0.5], [-4.0], [-0.5]),
        "softmax_ce": ([-0.5, 0.5], [-4.0, 4.0], [-0.5, 0.5]),
        "kld": ([-0.5], [-4.0], [-0.5]),
        "constant_derivative": ([1.0], [8.0], [1.0]),
        "mse": ([0.5], [4.0], [4.0]),  # by hand: 2·(0.75 - 0.5)/1 = 0.5; ×8 = 4
    }
    for name, (base, expected, observed) in seed.items():
        r = rows[name]
        assert [float(v) for v in r.base.reshape(-1)] == base
        assert [float(v) for v in r.expected.reshape(-1)] == expected
        assert r.observed is not None and r.observed.reshape(-1).tolist() == observed
    for name in ("sigmoid_ce", "softmax_ce", "kld", "constant_derivative"):
        assert rows[name].report.categories() == ["missing_scale"]
        assert "missing loss scale" in rows[name].report.findings[0].message


def test_seed003_family_table_renders_and_serialises():
    table = check_loss_family(_seed_family(), scale=S, dtype="float32")  # seed 003 is a float32 layer
    text = str(table)
    lines = text.splitlines()
    assert lines[0] == "loss-scale family check: S = 8, float32"
    assert lines[1].split() == ["loss", "base", "derivative", "expected", "(S", "=", "8)", "observed", "verdict"]
    assert lines[3].split() == ["sigmoid_ce", "[-0.5]", "[-4.0]", "[-0.5]", "missing_scale"]
    assert lines[4].split() == ["softmax_ce", "[-0.5,", "0.5]", "[-4.0,", "4.0]", "[-0.5,", "0.5]", "missing_scale"]
    assert lines[-1] == "5 losses: 1 pass, 4 missing_scale"
    d = json.loads(json.dumps(table.to_dict()))
    assert d["ok"] is False and d["scale"] == "8" and d["counts"] == {"pass": 1, "missing_scale": 4}
    assert [r["verdict"] for r in d["rows"]].count("missing_scale") == 4
    assert d["rows"][1]["expected"] == ["-4.0"] and d["rows"][1]["observed"] == [-0.5]


def test_seed003_repair_passes():
    # seed 003: after one helper call (×S) per loss, the four counterexamples pass.
    table = check_loss_family(_seed_family(scale_all=True), scale=S)
    assert table.ok and table.counts() == {"pass": 5}


def test_missing_scale_single_report():
    unscaled = lambda z, y: (_sigmoid(z) - y).astype(z.dtype)
    r = verify_loss(Loss("sigmoid_ce", scale=S), derivative=unscaled, pred=[0.0], label=[1.0])
    assert r.categories() == ["missing_scale"]
    f = r.findings[0]
    assert "missing loss scale" in f.message and "S = 8" in f.message
    assert float(f.expected[0]) == -4.0 and float(f.observed[0]) == -0.5  # seed 003
    assert not r.ok and r.to_dict()["findings"][0]["category"] == "missing_scale"


def test_wrong_scale_names_c():
    # S applied twice: c = S² = 64; seed input z = 0, y = 1 -> observed -32 (= 64·(-1/2)).
    twice = lambda z, y: (S * S * (_sigmoid(z) - y)).astype(z.dtype)
    r = verify_loss(Loss("sigmoid_ce", scale=S), derivative=twice, pred=[0.0], label=[1.0])
    assert r.categories() == ["wrong_scale"]
    assert "c = 64 (S², the scale applied twice)" in r.findings[0].message
    # Mean over 6 elements forgotten: c = S·6 = 48 on the default (2, 3) input.
    r = verify_loss(Loss("mse", scale=S), derivative=lambda z, y: (S * 2 * (z - y)).astype(z.dtype))
    assert r.categories() == ["wrong_scale"] and "c = 48 (S·D" in r.findings[0].message
    # A slightly wrong factor is still named: 8·(1 + 2^-7) = 8 + 1/16 = 129/16.
    r = verify_loss(Loss("constant_derivative", scale=S, reduction="sum"),
                    derivative=lambda z, y: np.full_like(z, S * (1 + 2**-7)))
    assert r.categories() == ["wrong_scale"] and "c = 129/16" in r.findings[0].message


def test_scale_one_cannot_be_missing():
    # With S = 1 the unscaled derivative is the right one.
    _, d = reference(Loss("sigmoid_ce"))
    assert verify_loss(Loss("sigmoid_ce", scale=1), derivative=d).ok


# ------------------------------------------------------------------- mutation


def test_kld_that_negates_its_label_in_place_is_mutates_inputs():
    # nntrainer issue 4328 (cited by seed 003): the KLD derivative negates the label buffer in place.
    # First call: right values (-S·P/Q·1/n), label left negated; second call on the same buffers
    # reads -P and returns +S·P/Q/n: wrong.
    def kld_mutating(q, p):
        p *= -1
        return (S * p / q / q.size).astype(q.dtype)

    r = verify_loss(Loss("kld", scale=S), derivative=kld_mutating)
    cats = r.categories()
    assert cats[0] == "mutates_inputs"
    assert "wrong_values" in cats
    mut = r.findings[0]
    assert "changed label in place" in mut.message and "sha256" in mut.message
    assert mut.expected == 0.5 and mut.observed == -0.5  # label[0, 0] = P = 0.5 (default inputs) -> -0.5
    second = next(f for f in r.findings if f.category == "wrong_values")
    assert "called again on the same buffers" in second.message and "label" in second.message
    # The first call's values were right: no scale or value finding about them.
    assert "missing_scale" not in cats and "wrong_scale" not in cats


def test_seed003_kld_with_mutation_in_a_family():
    fam = _seed_family(scale_all=True)

    def kld_mutating(q, p):
        p *= -1
        return (S * p / q).astype(q.dtype)

    fam["kld"] = LossImpl("kld", kld_mutating, pred=[0.5], label=[0.25])
    table = check_loss_family(fam, scale=S)
    row = next(r for r in table.rows if r.name == "kld")
    assert row.verdict == "mutates_inputs"
    assert row.observed is not None and row.observed.tolist() == [-4.0]  # seed 003: -P/Q·8 on the first call


def test_mutating_pred_and_upstream_are_findings():
    _, d = reference(Loss("mse", scale=S, reduction="none"))

    def clobbers_upstream(z, y, u):
        out = d(z, y, u)
        u[...] = 0
        return out

    r = verify_loss(Loss("mse", scale=S, reduction="none"), derivative=clobbers_upstream)
    assert r.categories() == ["mutates_inputs", "wrong_values"]
    assert "changed upstream in place" in r.findings[0].message

    def clobbers_pred(z, y):
        z += 1
        return np.zeros_like(z)

    r = verify_loss(Loss("mse", scale=S), derivative=clobbers_pred)
    assert r.categories()[0] == "mutates_inputs" and "changed pred in place" in r.findings[0].message


# ----------------------------------------------------------- misbehaviour


def test_nondeterministic():
    # Alternates between the right value and the next float up: within the bound, but not reproducible.
    _, d = reference(Loss("mse", scale=S))
    calls = []

    def flaky(z, y):
        calls.append(1)
        out = d(z, y)
        return np.nextafter(out, np.float32(np.inf)) if len(calls) % 2 else out

    # within the bound: a note (issue 21), a finding only for a team promising bitwise reproducibility
    # (at the default inputs alone: the extra families make one call each, and the next float up
    # from the limit -inf at a -inf prediction is a finding of its own)
    r = verify_loss(Loss("mse", scale=S), derivative=flaky, families=())
    assert r.ok and r.stats["nondeterminism"] is not None and r.notes, str(r)
    r = verify_loss(Loss("mse", scale=S), derivative=flaky, deterministic=True)
    assert r.categories() == ["nondeterministic"]


@pytest.mark.parametrize(
    "impl, match",
    [
        (lambda z, y: (_ for _ in ()).throw(ValueError("boom")), r"derivative raised ValueError: boom"),
        (lambda z, y: np.zeros(3, dtype=z.dtype), r"derivative returned shape \(3,\); expected \(2, 3\)"),
        (lambda z, y: np.full_like(z, np.nan),
         r"derivative returned 6 non-finite value\(s\) \(NaN/Inf\); first at pred\[0, 0\]: nan"),
        (lambda z, y: "not an array", r"derivative returned text \(str\), not an array of shape \(2, 3\)"),
        (lambda z, y: None, r"derivative returned None, not an array"),
        (lambda z, y: (v for v in z), r"derivative returned a generator, not an array"),
        (lambda z, y: 1.5, r"derivative returned a scalar \(float 1.5\), not an array"),
    ],
)
def test_bad_output_is_a_finding_never_a_crash(impl, match):
    r = verify_loss(Loss("mse", scale=S), derivative=impl)
    assert r.categories() == ["bad_output"]
    assert any(__import__("re").search(match, f.message) for f in r.findings), [f.message for f in r.findings]


def test_wrong_dtype_is_bad_output_values_still_checked():
    _, d = reference(Loss("mse", scale=S))
    r = verify_loss(Loss("mse", scale=S), derivative=lambda z, y: d(z, y).astype(np.float64), dtype="float32")
    assert r.categories() == ["bad_output"]
    assert "returned dtype float64; expected float32" in r.findings[0].message


def test_forward_raising_is_bad_output():
    _, d = reference(Loss("mse", scale=S))
    r = verify_loss(Loss("mse", scale=S), derivative=d, forward=lambda z, y: 1 / 0)
    assert r.categories() == ["bad_output"] and "forward raised" in r.findings[0].message


# ------------------------------------------------- every kind, every dtype


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "none", "batch_mean"])
@pytest.mark.parametrize("kind", KINDS)
def test_correct_numpy_implementations_pass(kind, reduction, dtype):
    loss = Loss(kind, reduction=reduction, scale=S)
    f, d = reference(loss)
    r = verify_loss(loss, derivative=d, forward=f, dtype=dtype)
    assert r.ok, str(r)
    assert r.stats["fd_checked"] > 0 and r.stats["fd_consistent"]
    # The bound is not vacuous: the errors are measured in ULPs and the bound is finite and modest.
    assert r.stats["bound_ulps_at_worst"] < 1e4


@pytest.mark.parametrize("kind", KINDS)
def test_small_relative_error_is_caught(kind):
    # Perturb one element by 2^-10 relative in float32 (~16000 ulp): far beyond any derived bound
    # for these inputs (the bounds are < 1e4 ulp, previous test), and not a single factor.
    loss = Loss(kind, scale=S)
    _, d = reference(loss)

    def off(z, y):
        out = d(z, y)
        out.reshape(-1)[0] *= np.float32(1 + 2**-10)
        out.reshape(-1)[-1] += np.float32(2**-3)
        return out

    r = verify_loss(loss, derivative=off)
    assert "wrong_values" in r.categories(), str(r)


def test_forward_disagreeing_with_spec_and_fd():
    # Forward computes the sum where the spec says mean (6 elements): forward_values; the (correct)
    # derivative is then not S·FD of that forward (6× too small): not_fd_consistent.
    loss = Loss("mse", scale=S)
    _, d = reference(loss)
    r = verify_loss(loss, derivative=d, forward=lambda z, y: ((z - y) ** 2).sum())
    assert r.categories() == ["forward_values", "not_fd_consistent"]
    assert "forward itself disagrees" in r.findings[1].message


def test_fd_catches_a_backward_inconsistent_with_its_forward():
    # A derivative with the sign of one branch wrong (huber linear branch): wrong_values, and the
    # FD oracle on the (correct) forward disagrees too.
    loss = Loss("huber", scale=S)
    f, d = reference(loss)

    def bad(z, y):
        out = d(z, y)
        dd = z - y
        return np.where(np.abs(dd) >= 1, -out, out).astype(z.dtype)

    r = verify_loss(loss, derivative=bad, forward=f)
    assert r.categories() == ["wrong_values", "not_fd_consistent"]


def test_kink_accepts_the_clarke_set():
    # mae at pred == label: any value in S·[-1, 1]/n is a valid derivative (by hand: n = 2, S = 8 -> [-4, 4]).
    loss = Loss("mae", scale=S)
    for v in (-4.0, 0.0, 2.5, 4.0):
        r = verify_loss(loss, derivative=lambda z, y, v=v: np.array([v, 4.0], dtype=z.dtype),
                        pred=[1.0, 2.0], label=[1.0, 1.0])
        assert r.ok, (v, str(r))
    r = verify_loss(loss, derivative=lambda z, y: np.array([4.5, 4.0], dtype=z.dtype), pred=[1.0, 2.0],
                    label=[1.0, 1.0])
    assert not r.ok


def test_report_json_has_stable_keys():
    _, d = reference(Loss("softmax_ce", scale=S))
    r = verify_loss(Loss("softmax_ce", scale=S), derivative=d)
    out = json.loads(r.to_json())
    for key in ("ok", "subject", "summary", "kind", "reduction", "scale", "dtype", "max_error_ulps",
                "bound_ulps_at_worst", "checksums", "findings"):
        assert key in out
    # One default dtype with verify and the CLI (float64); an exact integer scale is a JSON int.
    assert out["ok"] is True and out["scale"] == 8 and out["dtype"] == "float64"


# ----------------------------------------------------------------- bad input


def test_bad_inputs_raise_naming_the_argument():
    _, d = reference(Loss("mse", scale=S))
    with pytest.raises(InputError, match=r"label has shape \(2,\) but pred has shape \(3,\)"):
        verify_loss(Loss("mse"), derivative=d, pred=[1.0, 2.0, 3.0], label=[1.0, 2.0])
    with pytest.raises(InputError, match=r"dtype='int32' is not valid: give one of 'float16'"):
        verify_loss(Loss("mse"), derivative=d, dtype="int32")
    with pytest.raises(InputError, match=r"upstream is given but reduction='mean'"):
        verify_loss(Loss("mse"), derivative=d, pred=[1.0], label=[1.0], upstream=[1.0])
    with pytest.raises(InputError, match=r"pred\[0\] = 1.0 is outside \(0, 1\)"):
        verify_loss(Loss("bce"), derivative=d, pred=[1.0], label=[1.0])
    with pytest.raises(InputError, match=r"label\[0\] = 3 is out of range"):
        verify_loss(Loss("softmax_ce", labels="indices"), derivative=d, pred=[[0.0, 0.0]], label=[3])
    with pytest.raises(InputError, match=r"ignore_index=-1 matches every row"):
        verify_loss(Loss("softmax_ce", labels="indices", ignore_index=-1), derivative=d, pred=[[0.0, 0.0]],
                    label=[-1])
    with pytest.raises(InputError, match=r"derivative=3 is not callable"):
        verify_loss(Loss("mse"), derivative=3)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"loss='mse' is not a loss spec"):
        verify_loss("mse", derivative=d)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"beyond the range of float16"):
        verify_loss(Loss("constant_derivative", scale=2**20, reduction="sum"), derivative=d, dtype="float16")


def test_family_bad_input():
    fam = _seed_family()
    with pytest.raises(SpecError, match=r"scale=0 is not valid: the loss scale S must be > 0"):
        check_loss_family(fam, scale=0)
    with pytest.raises(SpecError, match=r"scale=-8 is not valid"):
        check_loss_family(fam, scale=-8)
    with pytest.raises(SpecError, match=r"impls=\{\} is not valid"):
        check_loss_family({})
    with pytest.raises(SpecError, match=r"impls\['x'\] has unknown key\(s\) \['deriv'\]"):
        check_loss_family({"x": {"loss": "mse", "deriv": None}})
    with pytest.raises(InputError, match=r"impls\['kld'\]: pred\[0\] = 1.5 is outside \(0, 1\]"):
        check_loss_family({"kld": LossImpl("kld", fam["kld"].derivative, pred=[1.5], label=[0.25])})


def test_family_accepts_dicts_and_default_inputs():
    impls = {k: {"loss": Loss(k), "derivative": reference(Loss(k), scale=S)[1]} for k in ("mse", "bce", "kld")}
    table = check_loss_family(impls, scale=S, dtype="float64")
    assert table.ok and table.dtype == "float64"
    assert all(r.loss.scale == S for r in table.rows)
    p, _, _ = default_inputs(Loss("bce"))
    assert table.rows[1].observed is not None and table.rows[1].observed.shape == p.shape


def test_float16_missing_scale():
    unscaled = lambda z, y: (-y / z).astype(z.dtype)
    r = verify_loss(Loss("kld", scale=1024, reduction="sum"), derivative=unscaled, pred=[0.5], label=[0.25],
                    dtype="float16")
    assert r.categories() == ["missing_scale"]


def test_module_doctests():
    # The docstring examples run (the verify_loss example is seed 003's missing scale).
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module("symjac.verifiers.loss._verify"))[:2]
    assert tried >= 3 and failures == 0


def test_forward_failing_only_at_stencil_points():
    # A forward exact at the given pred but 1% off elsewhere: caught at the finite-difference points.
    loss = Loss("mse", scale=S)
    f, d = reference(loss)
    base = np.array([0.5, -1.0], dtype=np.float32)

    def fwd(z, y):
        return f(z, y) if np.array_equal(z, base) else (f(z, y) * np.float32(1.01)).astype(z.dtype)

    r = verify_loss(loss, derivative=d, forward=fwd, pred=base, label=[0.25, 0.25])
    assert "forward_values" in r.categories()
    assert "finite-difference point" in next(f_.message for f_ in r.findings if f_.category == "forward_values")


def test_public_api_reexports():
    assert symjac.verify_loss is verify_loss and symjac.check_loss_family is check_loss_family


# -- issue 10: a forward that rightly returns inf ------------------------------------------
def test_forward_returning_inf_for_an_exact_loss_beyond_the_dtype_is_not_bad_output():
    # MSE mean of pred [300, 300], label 0: L = 300^2 = 90000 > 65504, float16's largest
    # finite value, so L rounds to inf in float16; dL/dpred = 2*300/2 = 300 fits.
    loss = symjac.Loss("mse")

    def derivative(z, y):
        return (2 * (z - y) / z.size).astype(z.dtype)

    def forward(z, y):  # float64 arithmetic, one rounding to float16 at the end: inf
        return np.float16(np.mean((z.astype(np.float64) - y) ** 2))

    report = symjac.verify_loss(loss, derivative=derivative, forward=forward, pred=[300.0, 300.0], label=[0.0, 0.0],
                                dtype="float16")
    assert report.ok, report
    assert report.stats["fd"].startswith("skipped: the exact loss overflows float16")
    # reduction "none": element 0 overflows (90000), element 1 does not (1); a forward
    # that returns inf for element 1 too is still wrong.
    per = symjac.Loss("mse", reduction="none")

    def derivative_none(z, y, u):
        return (2 * (z - y) * u).astype(z.dtype)

    def forward_none(z, y):
        return ((z.astype(np.float64) - y) ** 2).astype(np.float16)

    ok = symjac.verify_loss(per, derivative=derivative_none, forward=forward_none, pred=[300.0, 1.0], label=[0.0, 0.0],
                            dtype="float16")
    assert ok.ok, ok
    bad = symjac.verify_loss(per, derivative=derivative_none, forward=lambda z, y: np.full(z.shape, np.inf, z.dtype),
                             pred=[300.0, 1.0], label=[0.0, 0.0], dtype="float16")
    assert bad.categories() == ["bad_output"] and "loss[1]" in bad.findings[0].message


def test_exact_rational_inputs_are_rounded_to_the_dtype_and_flagged_when_not_exact() -> None:
    from fractions import Fraction

    # An object array of Fractions (as spec files give) is rounded once into the dtype,
    # like float inputs: 1/3 is no binary fraction (rounded, flagged), 3/4 is exact.
    def derivative(z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (2 * (z - y)).astype(z.dtype)  # mse, mean over one element: 2(z - y)

    for value, flagged in ((Fraction(1, 3), True), (Fraction(3, 4), False)):
        pred = np.array([value], dtype=object)
        for dtype in ("float32", "float64"):
            r = symjac.verify_loss(symjac.Loss("mse"), derivative=derivative, pred=pred, label=[0.0], dtype=dtype)
            assert r.ok, r
            assert r.stats["inputs_rounded"] is flagged


@pytest.mark.requires("ml_dtypes")
def test_bounds_stay_positive_when_depth_times_u_passes_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import gmpy2

    from symjac.loss import _bounds
    from symjac.loss._evaluate import to_numpy

    # softmax_ce over 20 classes has rounding depth ~45; in bfloat16 (u = 2^-8) depth·u
    # passes 1 from ~126 classes on. Pretend u = 2^-4 so it passes 1 here (45/16): the
    # first-order factor u/(1 - k·u) would turn negative; u·(1 + γ_k), with γ_k the
    # always-defined (1 - u)^-k - 1 beyond k·u >= 1, stays a (weak) bound. The derivative
    # given is the exact one rounded to bfloat16: within any valid bound.
    monkeypatch.setattr(_bounds, "unit_roundoff_mp", lambda dtype: gmpy2.mpfr(2.0**-4))
    rng = np.random.default_rng(0)
    pred = rng.integers(-8, 9, (3, 20)) / 4.0
    label = np.eye(20)[rng.integers(0, 20, 3)]
    loss = Loss("softmax_ce")
    exact = to_numpy(symjac.loss_derivative(loss, pred, label))
    report = verify_loss(loss, derivative=lambda z, y: exact.astype(z.dtype), pred=pred, label=label, dtype="bfloat16")
    assert report.ok, report
    # The forward bound of one element grows with its running error (a negative
    # coefficient would shrink it, and a large running error would make it negative).
    from symjac.check._rounding import float_dtype
    from symjac.loss._evaluate import evaluate

    bounds = _bounds.Bounds(evaluate(loss, pred, label, None, values=True), float_dtype("bfloat16"))
    assert bounds.k_loss * 2.0**-4 >= 1
    small, large = (float(bounds.element(gmpy2.mpfr(0), gmpy2.mpfr(0), gmpy2.mpfr(run))) for run in (0, 2**20))
    assert 0 <= small < large


def test_one_verify_loss_call_checks_its_loss_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # check_loss is called where a public entry point takes a Loss; verify_loss is one
    # entry point, so the evaluation, inputs and template inside it do not check again.
    from symjac.loss import _elements, _evaluate, _inputs, _spec
    from symjac.verifiers.loss import _verify as _loss

    calls: list[object] = []
    real = _spec.check_loss

    def counting(loss: object) -> object:
        calls.append(loss)
        return real(loss)

    for module in (_loss, _evaluate, _elements, _inputs):
        monkeypatch.setattr(module, "check_loss", counting)
    loss = Loss("softmax_ce", scale=8)
    def d(z: np.ndarray, y: np.ndarray) -> np.ndarray:  # softmax shifted by the max (the extreme family's check)
        e = np.exp(z - z.max(-1, keepdims=True))
        return (8 * (e / e.sum(-1, keepdims=True) - y) / len(z)).astype(z.dtype)

    assert verify_loss(loss, derivative=d).ok
    assert calls == [loss]


def test_a_wrong_hvp_leads_the_headline():
    # issue 33 item 2, for losses: mean MSE over n entries, L = Σ(z - y)²/n, dL/dz = 2(z - y)/n and
    # H = 2I/n, so H·v = 2v/n; the hvp below forgets the 2. Its finding comes first in the headline,
    # before the derivative's "matches".
    def derivative(z, y):
        return (2 * (z - y) / z.size).astype(z.dtype)

    def half_hvp(z, y, v):
        return (v / z.size).astype(z.dtype)

    rep = symjac.verify_loss(symjac.Loss("mse"), derivative=derivative, hvp=half_hvp)
    assert not rep.ok and rep.summary().startswith("mse: hvp: "), rep.summary()
    assert symjac.verify_loss(symjac.Loss("mse"), derivative=derivative,
                              hvp=lambda z, y, v: (2 * v / z.size).astype(z.dtype)).ok
