"""The JAX adapter: flax.linen and lax.reduce_window mappings, generated configurations in float32
and float64 (x64 scoped to symjac's calls), and a broken wrapper.

JAX compiles every new configuration with XLA (~0.3-1 s each on a shared 2-core machine), so the
default run checks the ``"small"`` grid; ``SYMJAC_FULL_GRID=1`` checks the ``"full"`` one (360
configurations, 0 findings in float32 and float64 when measured).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")

import symjac  # noqa: E402
import symjac.frameworks.jax as sjj  # noqa: E402
from framework_checks import FULL, assert_counts, check_configurations  # noqa: E402
from symjac.frameworks import Unsupported  # noqa: E402

# The mapping, from the flax.linen.max_pool/avg_pool and jax.lax.reduce_window documentation.
MAPPING = [
    # Flax: inputs (batch, window dims..., features); strides default to 1, not the window.
    (sjj.max_pool((2, 2))[0], symjac.Pool("max", (2, 2), stride=1, layout="channels_last")),
    (sjj.max_pool((3,), (2,), "SAME")[0], symjac.Pool("max", (3,), stride=2, padding="same", layout="channels_last")),
    # count_include_pad=True is Flax's default.
    (sjj.avg_pool((3, 3), padding=((1, 0), (2, 1)))[0],
     symjac.Pool("avg", (3, 3), stride=1, padding=((1, 0), (2, 1)), divisor="include_pad", layout="channels_last")),
    (sjj.avg_pool((2,), padding="SAME", count_include_pad=False)[0],
     symjac.Pool("avg", (2,), stride=1, padding="same", layout="channels_last")),
    (sjj.reduce_window_max((1, 1, 3, 3), (1, 1, 2, 2), "SAME_LOWER", layout="channels_first")[0],
     symjac.Pool("max", (3, 3), stride=2, padding="same_lower")),
    (sjj.reduce_window_sum((1, 2, 1), (1, 1, 1), ((0, 0), (1, 2), (0, 0)), (1, 3, 1))[0],
     symjac.Pool("avg", (2,), stride=1, padding=((1, 2),), dilation=3, divisor=1, layout="channels_last")),
]


@pytest.mark.parametrize("got, expected", MAPPING, ids=[str(i) for i in range(len(MAPPING))])
def test_documented_arguments_map_to_the_spec(got, expected):
    assert got == expected


def test_unsupported_conventions():
    with pytest.raises(Unsupported, match="no VJP"):
        sjj.reduce_window_max((1, 2, 2, 1), (1, 1, 1, 1), "VALID", (1, 2, 2, 1))
    with pytest.raises(Unsupported, match="batch and channel"):
        sjj.reduce_window_max((2, 2, 2, 1), (1, 1, 1, 1), "VALID")


@pytest.mark.slow
def test_generated_configurations_verify_in_float32_and_float64():
    grid = "full" if FULL else "small"
    assert_counts(check_configurations(sjj, grid), grid)


def test_small_grid_covers_every_op_and_rank():
    seen = {(c.op, len(c.input_shape) - 2) for c in sjj.configurations("small")}
    assert seen == {(op, r) for op in ("max_pool", "avg_pool", "reduce_window_max", "reduce_window_sum")
                    for r in (1, 2, 3)}


def test_float64_is_computed_in_float64_without_touching_the_global_flag():
    before = jax.config.jax_enable_x64
    spec, impl = sjj.avg_pool((3,))
    x = np.array([[[1.0], [2.0], [2.0 ** -40]]])
    y = impl.forward(x)
    assert y.dtype == np.float64
    assert y[0, 0, 0] == (3.0 + 2.0 ** -40) / 3  # float32 would lose the 2**-40 term
    assert jax.config.jax_enable_x64 == before
    assert impl.forward(x.astype(np.float32)).dtype == np.float32


def test_wrap_a_custom_vjp_function():
    @jax.custom_vjp
    def pool(x):
        return x.reshape(x.shape[0], -1, 2, x.shape[-1]).max(axis=2)

    def fwd(x):
        return pool(x), x

    def bwd(x, dy):
        # Every tied maximum gets the full gradient: the defect symjac must report at ties.
        windows = x.reshape(x.shape[0], -1, 2, x.shape[-1])
        mask = windows == windows.max(axis=2, keepdims=True)
        return ((mask * dy[:, :, None, :]).reshape(x.shape),)

    pool.defvjp(fwd, bwd)
    impl = sjj.wrap(pool)
    spec = symjac.Pool("max", (2,), layout="channels_last")
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 6, 1))
    assert "tie_not_subgradient" in report.categories(), report


def test_gradient_scaled_by_two_is_flagged():
    spec, impl = sjj.avg_pool((2, 2), (1, 1), "SAME", count_include_pad=False)
    report = symjac.verify(spec, forward=impl.forward, backward=lambda x, dy: 2 * impl.backward(x, dy),
                           input_shape=(1, 3, 3, 1))
    assert "wrong_weights" in report.categories(), report


def test_dtype_follows_x_including_half_precision():
    import ml_dtypes

    _, impl = sjj.max_pool((2,), (2,))
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        x = np.arange(8, dtype=dtype).reshape(1, 4, 2)
        assert impl.forward(x).dtype == dtype
        assert impl.backward(x, np.ones((1, 2, 2), dtype)).dtype == dtype
