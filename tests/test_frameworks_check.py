"""``symjac.frameworks.{torch,jax,tensorflow}.check``: one call with the framework's own arguments (issue 24).
Each framework's own op is the independent oracle of a passing check; a deliberately wrong backward fails."""

from __future__ import annotations

import pytest

import symjac
from framework_checks import nan_only

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see tests/conftest.py


def test_torch_check_maps_torchs_arguments_and_passes_torchs_own_op():
    torch = pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    report = sjt.check(torch.nn.functional.max_pool2d, kernel_size=3, stride=2, padding=1, input_shape=(1, 1, 7, 7))
    assert report.ok, report.headline


def test_torch_check_reads_a_modules_own_arguments():
    torch = pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    layer = torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
    assert sjt.check(layer, input_shape=(1, 1, 5, 5)).ok
    # The same module claimed to count pad cells: a padded corner window has 4 valid cells, divisor 4 (torch)
    # against 9 (include_pad): wrong weights, found.
    wrong = sjt.check(layer, count_include_pad=True, input_shape=(1, 1, 5, 5))
    assert "wrong_weights" in wrong.categories()


def _avg_pool_2x2_halved(torch):
    """2x2 average pooling as a torch.autograd.Function whose backward gives each cell dy/2 (the weight is 1/4)."""

    class AvgPool2x2(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.nn.functional.avg_pool2d(x, 2)

        @staticmethod
        def backward(ctx, dy):
            return torch.repeat_interleave(torch.repeat_interleave(dy, 2, -1), 2, -2) / 2  # the weight is 1/4

    return AvgPool2x2


def test_torch_check_runs_an_autograd_function_and_finds_its_bug():
    torch = pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    AvgPool2x2 = _avg_pool_2x2_halved(torch)
    report = sjt.check(AvgPool2x2, "avg_pool2d", kernel_size=2, input_shape=(1, 1, 4, 4))
    assert not report.ok and "wrong_weights" in report.categories()


def test_torch_check_runs_an_autograd_functions_apply_as_the_class():
    # (issue 33 item 3) Fn.apply's signature is (*args, **kwargs), yet torch hands its arguments to
    # Fn.forward(ctx, x): the check calls it as it calls Fn, with x alone, and names it Fn.
    torch = pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    class MaxPool2dK3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.nn.functional.max_pool2d(x, 3)

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                xx = x.detach().requires_grad_()
                return torch.autograd.grad(torch.nn.functional.max_pool2d(xx, 3), xx, dy)[0]  # torch's own: the oracle

    report = sjt.check(MaxPool2dK3.apply, kernel_size=3, input_shape=(1, 1, 6, 6))  # op from the class's name
    assert report.ok, report.headline
    assert "MaxPool2dK3" in report.headline and "apply" not in report.headline

    AvgPool2x2 = _avg_pool_2x2_halved(torch)
    wrong = sjt.check(AvgPool2x2.apply, "avg_pool2d", kernel_size=2, input_shape=(1, 1, 4, 4))
    assert "wrong_weights" in wrong.categories(), wrong.headline  # the old code: bad_output (forward got kernel_size)


def test_torch_check_names_the_op_and_the_arguments_it_takes():
    pytest.importorskip("torch")
    import symjac.frameworks.torch as sjt

    def my_kernel(x):
        return x

    with pytest.raises(symjac.SpecError, match=r"give op=, one of (\w+, )*max_pool1d, "):
        sjt.check(my_kernel, kernel_size=3)
    with pytest.raises(symjac.SpecError, match="max_pool2d has no argument 'kernel' \\(did you mean 'kernel_size'\\?\\)"):
        sjt.check(my_kernel, "max_pool2d", kernel=3)
    with pytest.raises(symjac.SpecError, match="op='maxpool2d' is not one of .*did you mean 'max_pool2d'"):
        sjt.check(my_kernel, "maxpool2d", kernel_size=3)


def test_jax_check_maps_flaxs_arguments():
    nn = pytest.importorskip("flax.linen")
    import symjac.frameworks.jax as sjj

    report = sjj.check(nn.avg_pool, window_shape=(2,), strides=(1,), padding=((1, 1),), count_include_pad=False,
                       input_shape=(1, 5, 1))
    assert report.ok, report.headline
    # Flax's own avg_pool with its documented default count_include_pad=True is not the exclude_pad spec
    wrong = sjj.check(lambda x: nn.avg_pool(x, (2,), (1,), ((1, 1),)), "avg_pool", window_shape=(2,), strides=(1,),
                      padding=((1, 1),), count_include_pad=False, input_shape=(1, 5, 1))
    assert "wrong_weights" in wrong.categories()


def test_tensorflow_check_maps_tf_nns_arguments():
    tf = pytest.importorskip("tensorflow")
    import symjac.frameworks.tensorflow as sjtf

    report = sjtf.check(tf.nn.max_pool2d, ksize=3, strides=2, padding="SAME", input_shape=(1, 5, 5, 1))
    assert report.ok or nan_only(report), report.headline  # (its NaN handling is a known defect)
