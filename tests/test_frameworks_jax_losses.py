"""The JAX loss adapters (optax): ``derivative`` is ``jax.grad``, ``hvp`` ``jax.jvp(jax.grad)``,
checked by ``verify_loss`` against the exact derivative and Hessian (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from framework_checks import check_losses

pytest.importorskip("jax")
pytest.importorskip("optax")
import symjac.frameworks.jax as sjj  # noqa: E402
from symjac.frameworks import Unsupported  # noqa: E402


def _check(configs, dtypes=("float32", "float64")):
    return check_losses(sjj, configs, dtypes)


def test_the_documented_arguments_map_to_the_spec():
    assert sjj.huber_loss("sum", delta=0.5)[0] == symjac.Loss("huber", reduction="sum", delta=0.5)
    assert sjj.softmax_cross_entropy_with_integer_labels()[0] == symjac.Loss("softmax_ce", labels="indices")


def test_one_configuration_of_every_loss_passes():
    configs = list(sjj.loss_configurations("small"))
    configs = configs[:5] + configs[36:38]  # one of each op of the first cycle (36 of them), then of the KL one
    assert {c.op for c in configs} == {"squared_error", "huber_loss", "sigmoid_binary_cross_entropy",
                                       "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels",
                                       "kl_divergence", "kl_divergence_with_log_targets"}
    assert _check(configs, ("float32",))["float32"] == 7


def test_optax_kl_divergences_map_to_kld_and_pass():
    # log-probabilities; a zero target (0·log 0 = 0) in the first row; the log-targets <= 0
    log_q = np.array([[-0.5, -1.25, -2.0], [-0.75, -0.25, -3.0]])
    p = np.array([[0.5, 0.5, 0.0], [0.25, 0.625, 0.125]])
    for make, label, log_target in ((sjj.kl_divergence, p, False), (sjj.kl_divergence_with_log_targets, log_q[::-1], True)):
        for reduction in ("batch_mean", "sum"):
            loss, impl = make(reduction)
            assert loss == symjac.Loss("kld", reduction=reduction, log_input=True, log_target=log_target)
            report = symjac.verify_loss(loss, impl, pred=log_q, label=label, dtype="float64")
            assert report.ok, f"{loss}: {report}"
    with pytest.raises(Unsupported, match="sums each row"):
        sjj.kl_divergence("none")


def test_planted_kl_denominator_is_caught():
    # jnp.mean over every element, not over the rows: 1/C of the batch mean (C = 3)
    import jax.numpy as jnp
    import optax

    loss, _ = sjj.kl_divergence("batch_mean")
    planted = sjj.loss_impl(lambda q, y: jnp.mean(optax.losses.kl_divergence(q, y)[:, None] / 3 * jnp.ones(3)), loss)
    report = symjac.verify_loss(loss, planted, pred=np.array([[-0.5, -1.25, -2.0], [-0.75, -0.25, -3.0]]),
                                label=np.array([[0.5, 0.5, 0.0], [0.25, 0.625, 0.125]]), dtype="float64")
    assert "wrong_scale" in report.categories() and "1/3" in report.summary(), report


@pytest.mark.slow
def test_every_loss_configuration_passes_derivative_and_hvp():
    checked = _check(sjj.loss_configurations("full"))
    assert min(checked.values()) >= 300, checked
