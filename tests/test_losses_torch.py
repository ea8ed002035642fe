"""PyTorch as the independent oracle for symjac's losses (skipped without torch).

260 generated cases (deterministic seeds) over F.mse_loss, F.l1_loss,
F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy_with_logits (weight,
pos_weight), F.binary_cross_entropy (weight), F.cross_entropy (class indices and
probabilities; weight, label_smoothing, ignore_index; every reduction) and
F.kl_div (log_target; log-probability and probability input), with loss scales
S in {1, 8, 3, 1024, 1/2}, float32 and float64. For each case, PyTorch's forward
is the implementation's forward and its autograd gradient times S, as a NumPy
callable, is the implementation's derivative: ``verify_loss`` must pass, i.e.
torch's values agree with the exact loss within the derived bound, its
gradients with the exact S·dL/dpred, and with central differences of its own
forward (zero disagreements).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from symjac import Loss, verify_loss

torch = pytest.importorskip("torch")
F = torch.nn.functional

N_CASES = 260
SCALES = (1, 8, 3, 1024, 0.5)
KIND_CYCLE = ("mse", "l1", "smooth_l1", "huber", "bcewl", "bcewl", "bce", "ce", "ce", "ce", "kl", "kl", "const")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


def _dyadic(rng, lo, hi, shape, bits=6):
    """Values on a 2^-bits grid: exact in float32/64, so torch and symjac see the same numbers."""
    return np.round(rng.uniform(lo, hi, shape) * 2**bits) / 2**bits


def make_case(i):
    """Case i: a symjac Loss and the PyTorch function it should equal (plus inputs and tags)."""
    rng = np.random.default_rng(1000 + i)
    kind = KIND_CYCLE[i % len(KIND_CYCLE)]
    dtype = np.float64 if i % 5 == 4 else np.float32
    scale = SCALES[(i // len(KIND_CYCLE)) % len(SCALES)]
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 6))
    reduction = ("mean", "sum", "none", "batch_mean")[int(rng.integers(0, 4))]
    tred = "sum" if reduction == "batch_mean" else reduction  # batch_mean = torch sum / pred.shape[0]
    batch = reduction == "batch_mean"
    opts: dict = {}
    tags = {kind, reduction}
    if kind in ("mse", "l1", "smooth_l1", "huber"):
        pred, label = _dyadic(rng, -3, 3, (n, c)), _dyadic(rng, -3, 3, (n, c))
        if kind == "l1" and i % 2:
            label.reshape(-1)[0] = pred.reshape(-1)[0]  # a kink: torch's sign(0) = 0 lies in the Clarke set
            tags.add("kink")
        delta = float(rng.choice([0.5, 1.0, 1.5, 2.0]))
        spec_kind = "mae" if kind == "l1" else kind
        if kind in ("smooth_l1", "huber"):
            opts["delta"] = delta  # smooth_l1: PyTorch's beta; huber: delta

        def fn(x, y, kind=kind, delta=delta):
            if kind == "mse":
                return F.mse_loss(x, y, reduction=tred)
            if kind == "l1":
                return F.l1_loss(x, y, reduction=tred)
            if kind == "smooth_l1":
                return F.smooth_l1_loss(x, y, reduction=tred, beta=delta)
            return F.huber_loss(x, y, reduction=tred, delta=delta)
    elif kind == "bcewl":
        spec_kind = "sigmoid_ce"
        pred, label = _dyadic(rng, -6, 6, (n, c)), rng.choice([0.0, 1.0, 0.25, 0.5], (n, c))
        pw = w = None
        if rng.random() < 0.6:
            pw = _dyadic(rng, 0.25, 4, (c,), 2)
            opts["pos_weight"] = tuple(pw)
            tags.add("pos_weight")
        if rng.random() < 0.3:
            w = _dyadic(rng, 0.25, 2, (c,), 2)
            opts["weight"] = tuple(w)
            tags.add("weight")

        def fn(x, y, pw=pw, w=w):
            return F.binary_cross_entropy_with_logits(
                x, y, weight=None if w is None else torch.tensor(w, dtype=x.dtype),
                pos_weight=None if pw is None else torch.tensor(pw, dtype=x.dtype), reduction=tred)
    elif kind == "bce":
        spec_kind = "bce"
        pred, label = _dyadic(rng, 1 / 32, 31 / 32, (n, c), 8), rng.choice([0.0, 1.0, 0.25], (n, c))
        w = None
        if rng.random() < 0.4:
            w = _dyadic(rng, 0.25, 2, (c,), 2)
            opts["weight"] = tuple(w)
            tags.add("weight")

        def fn(x, y, w=w):
            return F.binary_cross_entropy(x, y, weight=None if w is None else torch.tensor(w, dtype=x.dtype),
                                          reduction=tred)
    elif kind == "ce":
        spec_kind = "softmax_ce"
        pred = _dyadic(rng, -5, 5, (n, c))
        indices = rng.random() < 0.6
        w = None
        if rng.random() < 0.5:
            w = _dyadic(rng, 0.25, 3, (c,), 2)
            opts["weight"] = tuple(w)
            tags.add("weight")
        eps = float(rng.choice([0.0, 0.0, 0.1, 0.25]))
        if eps:
            opts["label_smoothing"] = eps  # 0.1 is not dyadic: torch rounds it, the bound charges that
            tags.add("label_smoothing")
        if indices:
            opts["labels"] = "indices"
            tags.add("indices")
            label = rng.integers(0, c, n)
            if n > 1 and rng.random() < 0.5:
                label[int(rng.integers(0, n))] = -100
                opts["ignore_index"] = -100
                tags.add("ignore_index")
        else:
            tags.add("probabilities")
            raw = rng.random((n, c))
            label = np.round(raw / raw.sum(1, keepdims=True) * 64) / 64

        def fn(x, y, w=w, eps=eps):
            return F.cross_entropy(x, y, weight=None if w is None else torch.tensor(w, dtype=x.dtype),
                                   ignore_index=-100, reduction=tred, label_smoothing=eps)
    elif kind == "kl":
        spec_kind = "kld"
        log_target, log_input = bool(rng.random() < 0.4), bool(rng.random() < 0.7)
        opts.update(log_target=log_target, log_input=log_input)
        tags.update({"log_target"} if log_target else set())
        tags.add("log_input" if log_input else "prob_input")
        label = _dyadic(rng, -3, 0, (n, c)) if log_target else rng.choice([0.0, 0.125, 0.25, 0.5, 0.75], (n, c))
        pred = _dyadic(rng, -3, 0, (n, c)) if log_input else _dyadic(rng, 1 / 16, 1.0, (n, c))
        kred = "batchmean" if batch else reduction
        batch = False  # kl_div has batchmean itself

        def fn(x, y, log_input=log_input, log_target=log_target, kred=kred):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # kl_div's reduction='mean' warning
                return F.kl_div(x if log_input else torch.log(x), y, reduction=kred, log_target=log_target)
    else:
        spec_kind = "constant_derivative"
        pred, label = _dyadic(rng, -3, 3, (n, c)), None

        def fn(x, y):
            return x.mean() if tred == "mean" else (x.sum() if tred == "sum" else x)
    loss = Loss(spec_kind, reduction=reduction, scale=scale, **opts)
    shape = pred.shape[:-1] if spec_kind == "softmax_ce" else pred.shape
    upstream = _dyadic(rng, -2, 2, shape) if reduction == "none" else None
    tags.add(np.dtype(dtype).name)
    return {"id": f"{i}-{kind}-{reduction}-{np.dtype(dtype).name}-S{scale}", "loss": loss, "fn": fn,
            "batch": batch, "pred": pred, "label": label, "upstream": upstream, "dtype": dtype, "scale": scale,
            "tags": tags}


def torch_impl(case, scale=None):
    """(forward, derivative) NumPy callables around PyTorch; derivative = autograd gradient × S."""
    fn, batch = case["fn"], case["batch"]
    s = case["scale"] if scale is None else scale

    def run(x, y):
        out = fn(x, None if y is None else torch.from_numpy(y))
        return out / x.shape[0] if batch else out

    def forward(pred, label):
        with torch.no_grad():
            return run(torch.from_numpy(pred), label).numpy()

    def derivative(pred, label, upstream=None):
        x = torch.from_numpy(pred).requires_grad_(True)  # shares pred's memory: mutation would show
        (g,) = torch.autograd.grad(run(x, label), x,
                                   grad_outputs=None if upstream is None else torch.from_numpy(upstream))
        return (g * s).numpy()

    return forward, derivative


@pytest.mark.parametrize("i", range(N_CASES))
def test_torch_values_and_autograd_pass_verify_loss(i):
    case = make_case(i)
    forward, derivative = torch_impl(case)
    report = verify_loss(case["loss"], derivative=derivative, forward=forward, pred=case["pred"],
                         label=case["label"], upstream=case["upstream"], dtype=case["dtype"])
    assert report.ok, f"{case['id']}\n{report}"
    assert report.stats["fd_checked"] > 0


def test_cases_cover_the_issue():
    tags = set().union(*(make_case(i)["tags"] for i in range(N_CASES)))
    need = {"mse", "l1", "smooth_l1", "huber", "bcewl", "bce", "ce", "kl", "pos_weight", "weight",
            "label_smoothing", "ignore_index", "indices", "probabilities", "log_target", "log_input", "prob_input",
            "mean", "sum", "none", "batch_mean", "float32", "float64", "kink"}
    assert need <= tags, need - tags
    assert N_CASES >= 200


def test_cross_entropy_all_reductions_both_label_forms():
    # Each reduction with each label form appears among the cases.
    seen = {(c["loss"].reduction, c["loss"].labels) for c in map(make_case, range(N_CASES))
            if c["loss"].kind == "softmax_ce"}
    assert seen >= {(r, f) for r in ("mean", "sum", "none", "batch_mean") for f in ("indices", "probabilities")}


# The oracle harness can fail: torch's gradient without S, or against the wrong reduction.


def test_torch_gradient_without_scale_is_missing_scale():
    # seed 003's counterexample through PyTorch: BCE-with-logits, logit 0, label 1, S = 8 -> -4.0;
    # torch's unscaled gradient is -0.5.
    case = {"fn": lambda x, y: F.binary_cross_entropy_with_logits(x, y), "batch": False, "scale": 8}
    _, derivative = torch_impl(case, scale=1)
    report = verify_loss(Loss("sigmoid_ce", scale=8), derivative=derivative, pred=[0.0], label=[1.0])
    assert report.categories() == ["missing_scale"]
    assert float(report.findings[0].observed[0]) == -0.5


def test_torch_mean_against_a_sum_spec_is_wrong_scale():
    # cross_entropy's default mean over 4 rows, checked as reduction='sum': c = S/4 = 2 with S = 8.
    case = {"fn": lambda x, y: F.cross_entropy(x, y), "batch": False, "scale": 8}
    _, derivative = torch_impl(case)
    pred = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -1.0], [0.25, 0.5, 0.75], [-2.0, 2.0, 0.0]], dtype=np.float32)
    report = verify_loss(Loss("softmax_ce", labels="indices", reduction="sum", scale=8), derivative=derivative,
                         pred=pred, label=np.array([0, 1, 2, 1]))
    assert report.categories() == ["wrong_scale"]
    assert "c = 2 (S/n: averaged over the n = 4 elements where the spec sums)" in report.findings[0].message


@pytest.mark.parametrize("i", range(4))
def test_triplet_margin_against_pytorch(i):
    # F.triplet_margin_loss on pred's rows [anchor | positive | negative] (D = 1 to 3), p 1 or 2, swap, every
    # reduction, float32 and float64: PyTorch's forward and autograd × S pass verify_loss
    rng = np.random.default_rng(2000 + i)
    n, d = int(rng.integers(2, 5)), 1 + i % 3
    p, swap, reduction = 1 + i % 2, bool(i // 2), ("mean", "sum", "none", "mean")[i]
    dtype, scale = (np.float32, np.float64)[i % 2], SCALES[i]
    loss = Loss("triplet_margin", reduction=reduction, scale=scale, p=p, swap=swap, margin=0.5)

    def fn(x, _):
        return F.triplet_margin_loss(x[:, :d], x[:, d:2 * d], x[:, 2 * d:], margin=0.5, p=p, swap=swap,
                                     reduction=reduction)

    case = {"fn": fn, "batch": False, "scale": scale}
    forward, derivative = torch_impl(case)
    pred = _dyadic(rng, -2, 2, (n, 3 * d)).astype(dtype)
    upstream = _dyadic(rng, -2, 2, (n,)).astype(dtype) if reduction == "none" else None
    report = verify_loss(loss, derivative=derivative, forward=forward, pred=pred, upstream=upstream, dtype=dtype)
    assert report.ok, report
