"""Issue 34: a PASS means every derivative the implementation defines was checked.

``symjac.verify(spec, impl)`` checks the forward mode (``jvp``), the double backward and the
batching rule (``vmap``) of the object as well as its VJP, for every kind of object it takes
(an ``Impl``, an object or dict, a ``torch.autograd.Function`` subclass, the torch and JAX
wrappers), and names each derivative it did not check, and why; ``verify(spec, vmap=rule)`` checks
a batching rule at batch sizes 1, 2 and 3 with the batch at axis 0 and elsewhere; every
derivative is checked at the VJP's input families; ``isolate=True`` runs each in a worker.

Written from the issue's description: each planted defect below passes on main (6dce083's
``verify`` checked forward/backward only, had no ``vmap=``, checked the JVP at two inputs and ran
it in the caller's process). The expected values are derived in comments (a pooling layer's exact
derivatives are its window sums and routes) or come from PyTorch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import symjac
from symjac.frameworks import Impl

# 1-D average pooling, kernel 2, stride 2, the last cell of an odd length dropped: y_i = (x_2i + x_2i+1)/2,
# so J·t is the same pool of t and J^T dy puts dy_i/2 on cells 2i and 2i+1 (0 on a dropped last cell).
AVG2 = symjac.Pool("avg", (2,), stride=2)
SHAPE = (1, 2, 6)


def pool(x):
    n = x.shape[-1] // 2 * 2
    return (x[..., 0:n:2] + x[..., 1:n:2]) / 2


def unpool(x, dy):
    dx = np.zeros(dy.shape[:-1] + (x.shape[-1],), dtype=dy.dtype)
    n = dy.shape[-1] * 2
    dx[..., 0:n:2] = dy / 2
    dx[..., 1:n:2] = dy / 2
    return dx


def rule(bug=None):
    """A NumPy batching rule ``rule(in_axis, out_axis)``: each sample pooled alone, the batch moved
    from ``in_axis`` and to ``out_axis``; ``bug`` plants one batching defect."""

    def at(in_axis, out_axis):
        def lift(f):
            def batched(*arrays):
                arrays = [np.moveaxis(a, 0 if bug == "ignores_in_axis" else in_axis, 0) for a in arrays]
                out = np.stack([f(*(a[k] for a in arrays)) for k in range(arrays[0].shape[0])])
                if bug == "odd_last_zero" and len(out) % 2 == 1:
                    out[-1] = 0  # the last sample of an odd batch left zero-filled
                if bug == "above_two" and len(out) > 2:
                    out[2:] = out[0]  # written for batches of at most 2: slot 2 gets slot 0's result
                return np.moveaxis(out, 0, 0 if bug == "ignores_out_axis" else out_axis)

            return batched

        return {"forward": lift(pool), "backward": lift(unpool), "jvp": lift(lambda x, t: pool(t))}

    return at


def _transforms(report):
    return {name: entry["checked"] for name, entry in report.stats["transforms"].items()}


def _named(report, transform):
    return [f for f in report.findings if (f.detail or {}).get("transform") == transform]


# ----------------------------------------------------------------------------- item 1: every derivative


def test_an_impl_with_a_wrong_jvp_fails_naming_jvp():
    def jvp(x, t):
        y = pool(t)
        y[..., -1] = 0  # the last window gets no tangent
        return y

    impl = Impl(pool, unpool, "numpy", "avg2", jvp=jvp)
    report = symjac.verify(AVG2, impl, input_shape=SHAPE)
    assert report.verdict == "FAIL" and "missing_windows" in report.categories()
    assert _named(report, "jvp") and all(f.message.startswith("jvp") for f in _named(report, "jvp"))
    assert report.stats["transforms"]["vjp"] == {"ok": True, "checked": True}
    assert report.stats["transforms"]["jvp"]["ok"] is False
    # the same object as a dict, and its VJP alone: right
    assert not symjac.verify(AVG2, {"forward": pool, "backward": unpool, "jvp": jvp}, input_shape=SHAPE).ok
    assert symjac.verify(AVG2, impl, input_shape=SHAPE, transforms=("vjp",)).ok


def test_an_impl_with_a_wrong_double_backward_fails_naming_it():
    def double_backward(x, dy, v):
        return v.copy(), pool(v)  # ddx = v: as if ∂²y/∂x² were 1; avg pooling's is 0

    report = symjac.verify(AVG2, Impl(pool, unpool, "numpy", "avg2", double_backward=double_backward),
                           input_shape=SHAPE)
    assert report.categories() == ["wrong_second_derivative"]
    assert _named(report, "double_backward") == list(report.findings)


def test_the_report_names_what_it_did_not_check_and_why():
    # a double backward of average pooling: ddx = 0 (piecewise linear), ddy = J·v
    second = lambda x, dy, v: (np.zeros_like(x), pool(v))  # noqa: E731
    report = symjac.verify(AVG2, Impl(pool, unpool, "numpy", "avg2", missing={"jvp": "no forward mode here"},
                                      double_backward=second), input_shape=SHAPE)
    assert report.ok, report
    assert _transforms(report) == {"vjp": True, "jvp": False, "double_backward": True, "vmap": False}
    assert report.stats["transforms"]["jvp"]["why"] == "no forward mode here"
    assert ("not checked: jvp (no forward mode here); batched rule (vmap) (the numpy adapter gives no vmap for "
            "avg2)") in report.headline
    assert "not checked: jvp (no forward mode here)" in str(report).splitlines()[0]
    assert json.loads(report.to_json())["transforms"]["vmap"]["checked"] is False
    # an object of backward and forward alone (a NumPy module, a native kernel): the lack in stats only
    plain = symjac.verify(AVG2, {"backward": unpool, "forward": pool}, input_shape=SHAPE)
    assert plain.ok and "not checked" not in plain.headline
    assert plain.stats["transforms"]["jvp"] == {"checked": False, "why": "the implementation object has no jvp"}
    # a selection: what it excludes is named
    impl = Impl(pool, unpool, "numpy", "avg2", jvp=lambda x, t: pool(t))
    picked = symjac.verify(AVG2, impl, input_shape=SHAPE, transforms=("jvp",))
    assert _transforms(picked) == {"vjp": False, "jvp": True, "double_backward": False, "vmap": False}
    assert "not checked: vjp, double backward, batched rule (vmap) (excluded by transforms=('jvp',))" in picked.headline
    with pytest.raises(symjac.InputError, match="transforms=.*is not valid"):
        symjac.verify(AVG2, impl, input_shape=SHAPE, transforms=("hessian",))
    with pytest.raises(symjac.InputError, match="selects nothing the implementation defines"):
        symjac.verify(AVG2, impl, input_shape=SHAPE, transforms=("vmap",))


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _functions(torch):
    """Custom Functions of the 1-D pool above: a correct one defining every derivative, one with a
    wrong jvp, one whose double backward is wrong, one that defines only forward and backward."""
    F = torch.nn.functional

    class Avg2(torch.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            n = x.shape[-1] // 2 * 2
            return (x[..., 0:n:2] + x[..., 1:n:2]) / 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.length = inputs[0].shape[-1]

        @staticmethod
        def backward(ctx, dy):
            dx = torch.repeat_interleave(dy / 2, 2, dim=-1)
            return F.pad(dx, (0, ctx.length - dx.shape[-1]))

        @staticmethod
        def jvp(ctx, t):
            n = t.shape[-1] // 2 * 2
            return (t[..., 0:n:2] + t[..., 1:n:2]) / 2

    class WrongJvp(Avg2):
        @staticmethod
        def jvp(ctx, t):
            n = t.shape[-1] // 2 * 2
            out = (t[..., 0:n:2] + t[..., 1:n:2]) / 2
            out[..., -1] = 0  # the last window gets no tangent
            return out

    class Halve(torch.autograd.Function):  # the VJP's own backward (J·ggx) halves its result
        @staticmethod
        def forward(ctx, dy, length):
            ctx.length = length
            dx = torch.repeat_interleave(dy / 2, 2, dim=-1)
            return F.pad(dx, (0, length - dx.shape[-1]))

        @staticmethod
        def backward(ctx, ggx):
            n = ggx.shape[-1] // 2 * 2
            return (ggx[..., 0:n:2] + ggx[..., 1:n:2]) / 4, None

    class WrongDoubleBackward(Avg2):
        @staticmethod
        def backward(ctx, dy):
            return Halve.apply(dy, ctx.length)

    class Plain(torch.autograd.Function):  # old style: forward(ctx, x); no jvp, once differentiable
        @staticmethod
        def forward(ctx, x):
            ctx.length = x.shape[-1]
            return Avg2.forward(x)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, dy):
            dx = torch.repeat_interleave(dy / 2, 2, dim=-1)
            return F.pad(dx, (0, ctx.length - dx.shape[-1]))

    return Avg2, WrongJvp, WrongDoubleBackward, Plain


def test_a_torch_function_is_checked_in_every_derivative_it_defines(torch):
    Avg2, WrongJvp, WrongDoubleBackward, Plain = _functions(torch)
    good = symjac.verify(AVG2, Avg2)  # at defaults: every shape of the coverage plan
    assert good.ok, good
    assert _transforms(good) == {"vjp": True, "jvp": True, "double_backward": True, "vmap": True}
    assert "not checked" not in good.headline and "vmap: the batched forward, backward (VJP) and jvp" in good.headline
    bad = symjac.verify(AVG2, WrongJvp)
    assert "missing_windows" in bad.categories() and _named(bad, "jvp")
    assert bad.stats["transforms"]["vjp"]["ok"] is True
    # gradcheck agrees the forward mode is wrong
    x = torch.arange(6, dtype=torch.float64).reshape(1, 1, 6).requires_grad_()
    assert not torch.autograd.gradcheck(WrongJvp.apply, (x,), check_forward_ad=True, raise_exception=False)
    second = symjac.verify(AVG2, WrongDoubleBackward, input_shape=SHAPE)
    # ddy = J·v must be the pool of v; the planted one is half of it in every window
    assert second.categories() == ["wrong_weights"] and _named(second, "double_backward")
    assert not torch.autograd.gradgradcheck(WrongDoubleBackward.apply, (x,), raise_exception=False)


def test_what_a_torch_function_lacks_is_not_checked_and_never_a_defect(torch):
    *_, Plain = _functions(torch)
    report = symjac.verify(AVG2, Plain, input_shape=SHAPE)
    assert report.ok, report
    assert _transforms(report) == {"vjp": True, "jvp": False, "double_backward": False, "vmap": False}
    why = {name: report.stats["transforms"][name]["why"] for name in ("jvp", "double_backward", "vmap")}
    assert why == {"jvp": "Plain defines no jvp staticmethod (forward-mode AD)",
                   "double_backward": "Plain's backward is @once_differentiable (no double backward)",
                   "vmap": "Plain's forward takes ctx (no setup_context staticmethod): torch.func.vmap cannot run it"}
    assert "not checked: jvp (Plain defines no jvp staticmethod" in report.headline
    # an error raised inside a derivative the class defines is a defect, not a lack

    class Raises(Plain):
        @staticmethod
        def jvp(ctx, t):
            raise RuntimeError("forgot the tangent's shape")

    broken = symjac.verify(AVG2, Raises, input_shape=SHAPE)
    assert broken.categories() == ["bad_output"] and _named(broken, "jvp")


def test_a_backward_outside_autograd_has_no_double_backward_not_a_defect(torch):
    class Numpy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x.detach().numpy()
            return torch.tensor(pool(ctx.x))

        @staticmethod
        def backward(ctx, dy):
            return torch.tensor(unpool(ctx.x, dy.detach().numpy()))

    report = symjac.verify(AVG2, Numpy, input_shape=SHAPE)
    assert report.ok and report.stats["transforms"]["double_backward"]["checked"] is False
    assert "no grad_fn" in report.stats["transforms"]["double_backward"]["why"]


def test_the_wrappers_own_ops_pass_with_every_transform_named(torch):
    import symjac.frameworks.torch as sjt

    for spec, impl in (sjt.max_pool2d(3, 2, 1), sjt.avg_pool2d(2, 2, count_include_pad=False)):
        report = symjac.verify(spec, impl, input_shape=(1, 2, 5, 6))
        assert report.ok, report
        assert _transforms(report) == {"vjp": True, "jvp": True, "double_backward": True, "vmap": True}
        assert report.stats["transforms"]["vmap"]["batch_sizes"] == [1, 2, 3]
        assert report.stats["transforms"]["vmap"]["batch_axes"] == [0, 1, 4]


def test_lp_pool_transforms_reach_its_all_zero_windows(torch):
    # PyTorch's lp_pool2d(p=2) backward gives 0 at an all-zero window (its documented convention, the
    # spec's zero_window="zero"); its forward-mode JVP and double backward's J·v give NaN there
    # (sjt.known_defect documents it). The VJP passes; every other derivative fails there only.
    import symjac.frameworks.torch as sjt
    from symjac.frameworks import Config

    spec, impl = sjt.lp_pool2d(2, 2)
    report = symjac.verify(spec, impl, input_shape=(1, 2, 4, 5))
    # the VJP fails at the extreme family only: lp_pool's unscaled power sum overflows, a known defect there
    # (the batched rule's VJP with it)
    at_extreme = sjt.known_defect(Config("lp_pool2d", {"norm_type": 2}, (1, 2, 4, 5)), "vjp")
    vjp = [f for f in report.findings if not (f.detail or {}).get("transform")]
    assert vjp and all(f.family == "extreme" and at_extreme.explains(f.category, f.family) for f in vjp)
    known = sjt.known_defect(Config("lp_pool2d", {"norm_type": 2}, (1, 2, 4, 5)), "jvp")
    for name in ("jvp", "double_backward", "vmap"):
        found = _named(report, name)
        assert found and "ties" in {f.family for f in found}
        for f in found:
            assert (f.family == "ties" and f.category in known.categories) or \
                (f.family == "extreme" and name == "vmap" and at_extreme.explains(f.category, f.family)), f


def test_a_jax_op_passes_with_every_transform_named():
    pytest.importorskip("jax")
    import symjac.frameworks.jax as sjj

    spec, impl = sjj.reduce_window_max((1, 2, 2, 1), (1, 1, 2, 1), "VALID")
    # every family but nonfinite: JAX's max pooling NaN handling is a documented defect
    # (tests/test_nonfinite_frameworks.py)
    report = symjac.verify(spec, impl, input_shape=(1, 3, 5, 2), dtype="float32",
                           families=("all_negative", "near_ties", "orders", "extreme"))
    assert report.ok, report
    assert _transforms(report) == {"vjp": True, "jvp": True, "double_backward": True, "vmap": True}
    assert 0 in report.stats["transforms"]["vmap"]["batch_axes"] and \
        max(report.stats["transforms"]["vmap"]["batch_axes"]) == 4


def test_verify_loss_checks_the_hvp_an_implementation_object_defines():
    loss = symjac.Loss("mse", reduction="sum")  # L = Σ(z - y)²: dL/dz = 2(z - y), H = 2·I

    def derivative(z, y):
        return 2 * (z - y)

    right = symjac.LossImpl(loss, derivative, hvp=lambda z, y, v: 2 * v)
    assert symjac.verify_loss(loss, right).ok
    wrong = symjac.LossImpl(loss, derivative, hvp=lambda z, y, v: v)  # the exact H·v halved
    assert symjac.verify_loss(loss, wrong).categories() == ["wrong_scale"]
    plain = symjac.verify_loss(loss, {"derivative": derivative})
    assert plain.ok and "hvp" not in plain.headline and plain.stats["hvp"]["checked"] is False
    assert "the implementation object has no hvp" in plain.stats["hvp"]["why"]


# ----------------------------------------------------------------------------- item 2: the batched check


def test_a_correct_batching_rule_passes_at_every_batch_size_and_position():
    report = symjac.verify(AVG2, vmap=rule())  # at defaults: every shape of the plan
    assert report.ok, report
    vmap = report.stats["transforms"]["vmap"]
    assert vmap["batch_sizes"] == [1, 2, 3] and vmap["batch_axes"] == [0, 1, 3]
    assert {lay["out_axis"] for lay in vmap["layouts"]} == {0, 1, 3}
    assert vmap["callables"] == ["forward", "backward", "jvp"]
    # with the per-sample op as well
    assert symjac.verify(AVG2, Impl(pool, unpool, "numpy", "avg2", jvp=lambda x, t: pool(t), vmap=rule())).ok


@pytest.mark.parametrize("bug", ["odd_last_zero", "above_two", "ignores_in_axis", "ignores_out_axis"])
def test_a_batching_rule_wrong_in_one_batch_layout_fails_naming_the_rule(bug):
    impl = Impl(pool, unpool, "numpy", "avg2", jvp=lambda x, t: pool(t), vmap=rule(bug))
    report = symjac.verify(AVG2, impl)
    assert report.verdict == "FAIL"
    assert report.findings and _named(report, "vmap") == list(report.findings)
    assert report.stats["transforms"]["vjp"]["ok"] and report.stats["transforms"]["jvp"]["ok"]
    assert "vmap: " in report.headline
    # alone, with no per-sample op to compare slots with, too
    assert not symjac.verify(AVG2, vmap=rule(bug)).ok


def test_a_batching_rule_of_axis_zero_only_says_what_it_did_not_check():
    def stacked(f):  # each sample of axis 0 alone
        return lambda *arrays: np.stack([f(*sample) for sample in zip(*arrays)])

    fixed = {"forward": stacked(pool), "backward": stacked(unpool)}  # tf.vectorized_map's kind: no axes
    report = symjac.verify(AVG2, vmap=fixed, input_shape=SHAPE)
    assert report.ok and report.stats["transforms"]["vmap"]["batch_axes"] == [0]
    assert "the rule batches axis 0 only: other batch positions not checked" in report.headline
    assert report.stats["transforms"]["vmap"]["not_checked"] == {"jvp": "the batched rule gives none"}


def _torch_batched(torch, bug):
    """max_pool1d(2, 2) with a hand-written vmap staticmethod, planted ``bug``."""
    F = torch.nn.functional

    class Pool(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return F.max_pool1d(x, 2, 2)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            _, idx = F.max_pool1d(x, 2, 2, return_indices=True)
            return F.max_unpool1d(gy, idx, 2, 2, output_size=x.shape[-1:])

        @staticmethod
        def vmap(info, in_dims, x):
            x = x if bug == "ignores_in_dims" else x.movedim(in_dims[0], 0)
            out = F.max_pool1d(x.flatten(0, 1), 2, 2).unflatten(0, (x.shape[0], -1))
            if bug == "pairs" and out.shape[0] % 2:
                out[-1] = 0  # written for batches processed in pairs: an odd batch's last sample is left 0
            return out, 0

    return Pool


@pytest.mark.parametrize("bug", ["pairs", "ignores_in_dims"])
def test_a_torch_vmap_staticmethod_wrong_for_odd_batches_or_other_in_dims_fails(torch, bug):
    spec = symjac.Pool("max", (2,), stride=2)
    good = symjac.verify(spec, _torch_batched(torch, None), input_shape=(2, 3, 8))
    assert good.ok and good.stats["transforms"]["vmap"]["checked"], good
    report = symjac.verify(spec, _torch_batched(torch, bug), input_shape=(2, 3, 8))
    assert report.verdict == "FAIL" and _named(report, "vmap") == list(report.findings)


def test_the_vmap_argument_is_validated():
    with pytest.raises(symjac.InputError, match="nothing to verify"):
        symjac.verify(AVG2, input_shape=SHAPE)
    report = symjac.verify(AVG2, vmap=lambda i, o: 1 / 0, input_shape=SHAPE)  # a rule that raises
    assert report.categories() == ["bad_output"] and "ZeroDivisionError" in report.headline


# ----------------------------------------------------------------------------- item 3: as strong as the VJP


def test_pytorch_lp_pool1d_p1_forward_mode_defect_is_found(torch):
    # The input: lp_pool1d(x, 1, 3) (stride 2) at x = [1, -1, 0, 2, 3, 4, 5]; p = 1 is the window sum,
    # so J·t with t = 1 is 3 in every window; PyTorch's JVP gives 0 where a window's sum is 0.
    import symjac.frameworks.torch as sjt

    spec, impl = sjt.lp_pool1d(1, 3, 2)
    x = np.array([[[1, -1, 0, 2, 3, 4, 5.0]]])
    np.testing.assert_array_equal(impl.jvp(x, np.ones_like(x)), [[[0, 3, 3]]])
    tx = torch.tensor(x, requires_grad=True)
    assert not torch.autograd.gradcheck(lambda a: torch.nn.functional.lp_pool1d(a, 1, 3, 2), (tx,),
                                        check_forward_ad=True, check_backward_ad=False, raise_exception=False)
    for given in ({"jvp": impl.jvp}, {"double_backward": impl.double_backward}):
        report = symjac.verify(spec, x=x, **given)
        assert "missing_windows" in report.categories(), report
    report = symjac.verify(spec, sjt.wrap(torch.nn.functional.lp_pool1d, norm_type=1, kernel_size=3, stride=2))
    assert any(f.category == "missing_windows" for f in _named(report, "jvp"))


def test_a_jvp_that_routes_in_lower_precision_is_found_at_near_ties():
    # Max pooling's JVP takes t at each window's maximum; this one finds the maximum in float32, so
    # float64 inputs 1, 1 + 2^-40, ... (distinct in float64, all 1 in float32) route to the first cell.
    spec = symjac.Pool("max", (3,), stride=1)

    def jvp(x, t):
        xs = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), 3, axis=-1)
        k = np.argmax(xs, axis=-1)
        ts = np.lib.stride_tricks.sliding_window_view(t, 3, axis=-1)
        return np.take_along_axis(ts, k[..., None], axis=-1)[..., 0]

    report = symjac.verify(spec, jvp=jvp, input_shape=(1, 2, 9))
    assert report.verdict == "FAIL" and {f.family for f in report.findings} == {"near_ties"}
    assert report.stats["transforms"]["jvp"]["shapes"][0]["families"]["near_ties"] == 1


def test_an_average_jvp_accumulating_in_float32_is_found_at_near_ties():
    spec = symjac.Pool("avg", (3,), stride=1)

    def jvp(x, t):  # each window's sum accumulated in float32 for float64 tangents (exact for quarter-integers)
        ts = np.lib.stride_tricks.sliding_window_view(t.astype(np.float32), 3, axis=-1)
        return ts.sum(axis=-1).astype(t.dtype) / 3

    def double_backward(x, dy, v):
        return np.zeros_like(x), jvp(x, v)

    for given in ({"jvp": jvp}, {"double_backward": double_backward}):
        report = symjac.verify(spec, input_shape=(1, 2, 9), **given)
        assert report.verdict == "FAIL" and {f.family for f in report.findings} == {"near_ties"}, report


# ----------------------------------------------------------------------------- item 4: isolation


def test_isolate_runs_jvp_double_backward_and_the_batched_rule_in_a_worker(tmp_path):
    # In a child interpreter, so that on a route still run in the caller's process the abort kills
    # that child, not the test run: the child must survive and print the findings.
    script = tmp_path / "abort.py"
    script.write_text(textwrap.dedent("""
        import os
        import numpy as np
        import symjac

        spec = symjac.Pool("avg", (2,), stride=2)
        pool = lambda x: (x[..., 0::2] + x[..., 1::2]) / 2
        def unpool(x, dy):
            return np.repeat(dy / 2, 2, axis=-1)
        def aborts(*args):
            os.abort()
        for name, value in (("jvp", aborts), ("double_backward", aborts),
                            ("vmap", lambda i, o: {"forward": aborts})):
            r = symjac.verify(spec, forward=pool, backward=unpool, input_shape=(1, 1, 6), isolate=True,
                              **{name: value})
            signals = sorted({f.detail["signal"] for f in r.findings if f.category == "crashed"})
            print(name, r.verdict, r.categories(), signals)
        print("survived")
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines == ["jvp FAIL ['crashed'] ['SIGABRT']", "double_backward FAIL ['crashed'] ['SIGABRT']",
                     "vmap FAIL ['crashed'] ['SIGABRT']", "survived"]
