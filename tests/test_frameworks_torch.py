"""The PyTorch adapter: the documented argument → spec mapping, every generated configuration
verified in float32 and float64, wrap() on modules / autograd Functions, and broken wrappers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import symjac  # noqa: E402
import symjac.frameworks.torch as sjt  # noqa: E402
from framework_checks import assert_counts, check_configurations  # noqa: E402
from symjac.frameworks import Unsupported  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


# The mapping, from PyTorch's documentation (torch.nn.functional / torch.nn pooling pages).
MAPPING = [
    (sjt.max_pool2d(kernel_size=3, stride=2, padding=1, ceil_mode=True)[0],
     symjac.Pool("max", (3, 3), stride=(2, 2), padding=((1, 1), (1, 1)), ceil_mode=True)),
    (sjt.max_pool1d(3)[0], symjac.Pool("max", (3,), stride=(3,))),  # stride=None → kernel_size
    (sjt.max_pool3d(2, 1, 0, dilation=2)[0], symjac.Pool("max", (2, 2, 2), stride=1, dilation=2)),
    # count_include_pad=True is the default: pad cells count in the divisor.
    (sjt.avg_pool2d(3, 1, 1)[0], symjac.Pool("avg", (3, 3), stride=1, padding=1, divisor="include_pad")),
    (sjt.avg_pool1d(3, 1, 1, count_include_pad=False)[0], symjac.Pool("avg", (3,), stride=1, padding=((1, 1),))),
    (sjt.avg_pool3d(2, divisor_override=3)[0], symjac.Pool("avg", (2, 2, 2), divisor=3)),
    (sjt.adaptive_avg_pool2d(3)[0], symjac.AdaptivePool("avg", (3, 3))),
    (sjt.adaptive_max_pool1d(4)[0], symjac.AdaptivePool("max", (4,))),
]


@pytest.mark.parametrize("got, expected", MAPPING, ids=[str(i) for i in range(len(MAPPING))])
def test_documented_arguments_map_to_the_spec(got, expected):
    assert got == expected


def test_output_size_none_is_unsupported():
    with pytest.raises(Unsupported, match="None"):
        sjt.adaptive_avg_pool2d((None, 3))


@pytest.mark.slow
def test_every_generated_configuration_verifies_in_float32_and_float64():
    checked = check_configurations(sjt, "full")
    assert_counts(checked, "full")


def test_small_grid_covers_every_op():
    ops = {c.op for c in sjt.configurations("small")}
    assert ops == {f"{kind}_pool{r}d" for kind in ("max", "avg", "adaptive_max", "adaptive_avg") for r in (1, 2, 3)} | \
        {"lp_pool1d", "lp_pool2d", "fractional_max_pool2d", "fractional_max_pool3d"} | {f"max_unpool{r}d" for r in (1, 2, 3)}


def test_wrap_module_function_and_custom_autograd_function():
    class Doubled(torch.autograd.Function):
        """A custom op with a hand-written backward, as a C++/CUDA extension would have."""

        @staticmethod
        def forward(ctx, x, k):
            y, idx = torch.nn.functional.max_pool2d(x, k, return_indices=True)
            ctx.save_for_backward(idx)
            ctx.shape = x.shape
            return y

        @staticmethod
        def backward(ctx, dy):
            (idx,) = ctx.saved_tensors
            dx = torch.zeros(ctx.shape, dtype=dy.dtype).flatten(2)
            dx.scatter_add_(2, idx.flatten(2), dy.flatten(2))
            return dx.view(ctx.shape), None

    spec = symjac.Pool("max", 2)
    for impl in (sjt.wrap(torch.nn.MaxPool2d(2)), sjt.wrap(torch.nn.functional.max_pool2d, kernel_size=2),
                 sjt.wrap(Doubled, k=2), sjt.wrap(lambda t: torch.nn.functional.max_pool2d(t, 2), name="lambda")):
        report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 2, 4, 6))
        assert report.ok, (impl.op, report)
        assert impl.framework == "torch"


def test_dtype_follows_x():
    spec, impl = sjt.avg_pool2d(2)
    for dtype in (np.float16, np.float32, np.float64):
        assert impl.forward(np.ones((1, 1, 4, 4), dtype)).dtype == dtype
        assert impl.backward(np.ones((1, 1, 4, 4), dtype), np.ones((1, 1, 2, 2), dtype)).dtype == dtype


def test_reproducer_of_a_wrapped_module_asks_for_it():
    assert "# fn = ...  # your MaxPool2d" in sjt.wrap(torch.nn.MaxPool2d(2)).reproducer
    reproducer = sjt.wrap(torch.nn.functional.avg_pool2d, kernel_size=2).reproducer
    assert "avg_pool2d(xt, kernel_size=2)" in reproducer  # an importable name: the snippet runs as is
    namespace = {"x": np.ones((1, 1, 2, 2)), "dy": np.ones((1, 1, 1, 1)), "print": lambda *a: None}
    exec(reproducer, namespace)
    assert namespace["dx"].numpy().tolist() == [[[[0.25, 0.25], [0.25, 0.25]]]]


def test_reproducer_runs_and_agrees():
    spec, impl = sjt.max_pool2d(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    x = np.arange(49, dtype=np.float64).reshape(1, 1, 7, 7)
    dy = np.ones((1, 1, 4, 4))
    namespace = {"x": x, "dy": dy, "print": lambda *a: None}
    exec(impl.reproducer, namespace)
    np.testing.assert_array_equal(namespace["y"].detach().numpy(), impl.forward(x))
    np.testing.assert_array_equal(namespace["dx"].numpy(), impl.backward(x, dy))


# ------------------------------------------------------------------ broken wrappers are flagged


def test_wrong_spec_mapping_is_flagged():
    # avg_pool2d's default count_include_pad=True mapped, wrongly, to exclude_pad.
    _, impl = sjt.avg_pool2d(3, 1, 1)
    wrong = symjac.Pool("avg", 3, stride=1, padding=1, divisor="exclude_pad")
    report = symjac.verify(wrong, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 5, 5))
    assert {"forward_values", "wrong_weights"} <= set(report.categories()), report


def test_gradient_scaled_by_two_is_flagged():
    spec, impl = sjt.avg_pool2d(3, 1, 1)
    report = symjac.verify(spec, forward=impl.forward, backward=lambda x, dy: 2 * impl.backward(x, dy),
                           input_shape=(1, 1, 5, 5))
    assert "wrong_weights" in report.categories(), report


def test_backward_that_drops_a_window_is_flagged():
    spec, impl = sjt.max_pool2d(2, 1)

    def drop(x, dy):
        dy = dy.copy()
        dy[..., 1, 2] = 0  # output window (1, 2) never sends its gradient back
        return impl.backward(x, dy)

    report = symjac.verify(spec, forward=impl.forward, backward=drop, input_shape=(1, 1, 5, 5))
    assert "missing_windows" in report.categories(), report
    assert "(0,0,1,2)" in report.summary()
