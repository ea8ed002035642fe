"""ONNX Runtime's losses (``NegativeLogLikelihoodLoss``, ``SoftmaxCrossEntropyLoss``), forward only
(issue 32): ``verify_loss`` checks their values against the exact loss within the forward's bound and
reports the derivative not checked; planted conventions (ignored weights, ignored ignore_index, the
sum for the weighted mean) are caught; ``conform onnxruntime`` runs their grid."""

from __future__ import annotations

import numpy as np
import pytest

import symjac

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import symjac.frameworks.onnxruntime as sor  # noqa: E402
from symjac.frameworks._ort_losses import ONNX_NAMES, run_loss_node  # noqa: E402
from symjac.verifiers.loss._forward_only import NOT_CHECKED  # noqa: E402

# log-probabilities (rows of dyadic numbers) and one class per row; class 1 is the ignored one below
LOGP = np.array([[-1.25, -2.0, -0.5], [-0.75, -1.5, -3.0], [-0.25, -1.75, -2.5]])
LABEL = np.array([2, 0, 1])
WEIGHT = (0.75, 2.0, 0.5)
# the same rows as (N, d1, C) = (1, 3, 3): ONNX's (N, C, d1) after the adapter's move of the class axis
LOGP_3D, LABEL_3D = LOGP[None], LABEL[None]

OPS = (sor.negative_log_likelihood_loss, sor.softmax_cross_entropy_loss)


def test_the_documented_arguments_map_to_the_spec():
    assert sor.negative_log_likelihood_loss("sum", weight=WEIGHT, ignore_index=1)[0] == symjac.Loss(
        "nll", reduction="sum", weight=WEIGHT, ignore_index=1)
    assert sor.softmax_cross_entropy_loss()[0] == symjac.Loss("softmax_ce", labels="indices")
    _, impl = sor.softmax_cross_entropy_loss("none", weight=WEIGHT)
    assert impl.derivative is None and impl.hvp is None and callable(impl.forward)


def test_nll_forward_by_hand():
    # weighted mean, class 1 ignored: rows 0 and 1 count, -(w2·z02 + w0·z10)/(w2 + w0)
    _, impl = sor.negative_log_likelihood_loss("mean", weight=WEIGHT, ignore_index=1)
    want = (0.5 * 0.5 + 0.75 * 0.75) / (0.5 + 0.75)
    assert float(impl.forward(LOGP, LABEL)) == want
    _, impl = sor.negative_log_likelihood_loss("none", weight=WEIGHT, ignore_index=1)
    np.testing.assert_array_equal(impl.forward(LOGP, LABEL), [0.25, 0.5625, 0.0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("make", OPS, ids=lambda f: f.__name__)
def test_forward_passes_and_the_derivative_is_not_checked(make, reduction, dtype):
    for options in ({}, {"weight": WEIGHT}, {"weight": WEIGHT, "ignore_index": 1}):
        loss, impl = make(reduction, **options)
        for pred, label in ((LOGP, LABEL), (LOGP_3D, LABEL_3D)):
            report = symjac.verify_loss(loss, impl, pred=pred, label=label, dtype=dtype)
            assert report.ok, f"{loss} {dtype}: {report}"
            assert NOT_CHECKED in report.headline and report.stats["derivative"]["checked"] is False


def _planted(name, reduction):
    """The ONNX op itself, without the weight and ignore_index the spec says."""
    return symjac.LossImpl(loss="nll", derivative=None, forward=run_loss_node(ONNX_NAMES[name],
                                                                              {"reduction": reduction}, None))


@pytest.mark.parametrize("name", sorted(ONNX_NAMES))
def test_planted_conventions_are_caught(name):
    make = getattr(sor, name)
    # weights ignored: the model has none, the spec weights the rows
    spec, _ = make("sum", weight=WEIGHT)
    bad = _planted(name, "sum")
    assert symjac.verify_loss(spec, forward=bad.forward, pred=LOGP, label=LABEL).categories() == ["forward_values"]
    # ignore_index ignored: the model counts row 2
    spec, _ = make("none", ignore_index=1)
    bad = _planted(name, "none")
    report = symjac.verify_loss(spec, forward=bad.forward, pred=LOGP, label=LABEL, dtype="float32")
    assert report.categories() == ["forward_values"] and "[2]" in report.summary(), report
    # the weighted sum for the weighted mean (Σ w[label] = 1.25 over the counted rows)
    spec, _ = make("mean", weight=WEIGHT, ignore_index=1)
    bad = symjac.LossImpl(spec, None, forward=run_loss_node(ONNX_NAMES[name], {"reduction": "sum", "ignore_index": 1},
                                                            WEIGHT))
    report = symjac.verify_loss(spec, bad, pred=LOGP, label=LABEL)
    assert report.categories() == ["forward_values"], report
    finding = report.findings[0]
    assert finding.observed / float(finding.expected) == pytest.approx(1.25, rel=1e-12), report


def test_forward_only_verification_refuses_what_it_cannot_check():
    loss, impl = sor.negative_log_likelihood_loss()
    with pytest.raises(symjac.InputError, match="finite predictions"):
        symjac.verify_loss(loss, impl, pred=np.where(LOGP == -2.0, np.nan, LOGP), label=LABEL)
    with pytest.raises(symjac.InputError, match="forward=.*alone"):
        symjac.verify_loss(loss, pred=LOGP, label=LABEL)
    with pytest.raises(symjac.SpecError, match="forward only"):
        symjac.check_loss_family({"ort": impl})


def test_conform_runs_the_loss_grid():
    result = symjac.conform("onnxruntime", ops=list(ONNX_NAMES), dtypes=["float32", "bfloat16"], grid="small")
    cells = [r for r in result.results if r["dtype"] == "float32"]
    assert len(cells) == 36 and {r["config"]["op"] for r in cells} == set(ONNX_NAMES)
    assert all(r["status"] == "pass" and r["forward_only"] for r in cells), [r for r in cells if r["status"] != "pass"]
    bf16 = [r for r in result.results if r["dtype"] == "bfloat16"]
    assert bf16 and all(r["status"] == "unsupported" and "bfloat16" in r["reason"] for r in bf16)
    assert not result.findings


def test_a_failing_forward_only_cell_writes_a_runnable_reproducer(tmp_path):
    # the cell's record as run_loss_cell writes it for a finding; the script runs ORT's snippet and
    # prints its loss beside symjac's exact one (here the weighted mean by hand: 0.65)
    import subprocess
    import sys

    from symjac.frameworks._loss_grid import LossConfig
    from symjac.frameworks.conform._loss import _inputs
    from symjac.frameworks.conform.reproducers._loss import write_loss_reproducer

    spec, impl = sor.negative_log_likelihood_loss("mean", weight=WEIGHT, ignore_index=1)
    config = LossConfig("negative_log_likelihood_loss", {}, LOGP, LABEL)
    r = {"config": {"label": "nll", "transform": "vjp"}, "status": "finding", "category": "forward_values",
         "dtype": "float64", "forward_only": True, "reproducer": impl.reproducer, "loss": repr(spec),
         "inputs": _inputs(spec, config, np.dtype("float64"))}
    [script] = write_loss_reproducer(tmp_path, "cell", "onnxruntime", r)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "loss_value (framework) = [0.65]" in out.stdout and "loss_value (exact)     = [0.65]" in out.stdout
