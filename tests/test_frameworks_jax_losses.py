"""The JAX loss adapters (optax): ``derivative`` is ``jax.grad``, ``hvp`` ``jax.jvp(jax.grad)``,
checked by ``verify_loss`` against the exact derivative and Hessian (issue 23)."""

from __future__ import annotations


import pytest

import symjac
from framework_checks import check_losses

pytest.importorskip("jax")
pytest.importorskip("optax")
import symjac.frameworks.jax as sjj  # noqa: E402


def _check(configs, dtypes=("float32", "float64")):
    return check_losses(sjj, configs, dtypes)


def test_the_documented_arguments_map_to_the_spec():
    assert sjj.huber_loss("sum", delta=0.5)[0] == symjac.Loss("huber", reduction="sum", delta=0.5)
    assert sjj.softmax_cross_entropy_with_integer_labels()[0] == symjac.Loss("softmax_ce", labels="indices")


def test_one_configuration_of_every_loss_passes():
    configs = list(sjj.loss_configurations("small"))[:5]
    assert {c.op for c in configs} == {"squared_error", "huber_loss", "sigmoid_binary_cross_entropy",
                                       "softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels"}
    assert _check(configs, ("float32",))["float32"] == 5


@pytest.mark.slow
def test_every_loss_configuration_passes_derivative_and_hvp():
    checked = _check(sjj.loss_configurations("full"))
    assert min(checked.values()) >= 300, checked
