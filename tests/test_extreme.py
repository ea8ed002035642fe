"""The ``extreme`` input family (issue 34): magnitudes near the dtype's overflow threshold where a
correct evaluation stays finite. Written from the issue: a float32 lp pooling that squares before it
scales (overflow at ~1e19) passed at defaults; the family must catch it and its kin (an average
whose running sum overflows, a max started from a finite sentinel), while correct implementations
pass, and an average whose sum overflows in the dtype where the mean would not (what JAX and
TensorFlow do in float16, and every framework in float32) is not called wrong."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import edge_impls as E
import symjac

AVG = symjac.Pool("avg", (3,), stride=2, padding=1)
MAX = symjac.Pool("max", (3,), stride=2, padding=1)


def lp(p: int, scaled: bool) -> dict:
    kw = dict(kernel=2, stride=2, p=p, scaled=scaled)
    return {"forward": functools.partial(E.lp_forward, **kw), "backward": functools.partial(E.lp_backward, **kw)}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("p", [2, 3])
def test_an_lp_that_raises_to_the_power_before_it_scales_fails_at_defaults(dtype, p):
    spec = symjac.Pool("lp", (2,), stride=2, p=p)
    rep = symjac.verify(spec, **lp(p, scaled=False), dtype=dtype)
    assert not rep.ok
    found = [f for f in rep.findings if f.family == "extreme"]
    assert found and found[0].category == "bad_output" and "non-finite" in found[0].message
    assert symjac.verify(spec, **lp(p, scaled=True), dtype=dtype).ok  # the same, scaled: finite there


def test_an_lp_backward_alone_that_overflows_is_caught_too():
    spec = symjac.Pool("lp", (2,), stride=2, p=2)
    rep = symjac.verify(spec, backward=lp(2, scaled=False)["backward"], dtype="float32")
    assert {f.category for f in rep.findings if f.family == "extreme"} & {"missing_windows", "wrong_weights",
                                                                           "bad_output"}


def test_symjacs_own_lp_lowering_scales_and_passes():
    for p in (1, 2, 3):
        spec = symjac.Pool("lp", (3,), stride=2, p=p)
        for dtype in ("float16", "float32"):
            rep = symjac.verify(spec, forward=lambda x, s=spec: symjac.lower(s, x.shape).forward(x),
                                backward=lambda x, dy, s=spec: symjac.lower(s, x.shape).vjp(x, dy), dtype=dtype)
            assert rep.ok, rep.summary()


def test_pytorch_lp_pool_overflows_where_the_norm_is_finite():
    """Measured with torch 2.13: float32 cells of 2^65 and 2^64 give inf, the exact y is 2^64·√5 = 4.1e19."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([[[2.0**65, 2.0**64]]], dtype=torch.float32)
    assert torch.isinf(torch.nn.functional.lp_pool1d(x, 2, 2)).all()
    import symjac.frameworks.torch as sjt

    rep = symjac.verify(*sjt.lp_pool1d(2, 2), dtype="float32")
    assert not rep.ok and any(f.family == "extreme" and f.category == "bad_output" for f in rep.findings)


def test_an_avg_whose_running_sum_overflows_is_caught():
    """A box filter by prefix sums (cumsum, then differences): each window's sum is far below the
    range, the row's running sum is not."""
    def forward(x):
        index, valid, _ = E.windows(x, 3, 2, 1)
        with np.errstate(over="ignore", invalid="ignore"):
            prefix = np.concatenate([np.zeros(x.shape[:-1] + (1,), x.dtype), np.cumsum(x, axis=-1, dtype=x.dtype)],
                                    axis=-1)
            lo = np.clip(index[:, 0], 0, x.shape[-1])
            hi = np.clip(index[:, -1] + 1, 0, x.shape[-1])
            return ((prefix[..., hi] - prefix[..., lo]) / valid.sum(axis=-1).astype(x.dtype)).astype(x.dtype)

    assert symjac.verify(AVG, forward=forward, backward=E.avg_backward, input_shape=(1, 1, 7), families=()).ok  # small x
    rep = symjac.verify(AVG, forward=forward, backward=E.avg_backward, dtype="float32")
    assert not rep.ok
    assert any(f.family == "extreme" for f in rep.findings)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_avg_summing_in_the_dtype_may_overflow_where_the_mean_is_finite(dtype):
    """Not a defect: JAX and TensorFlow sum float16 in float16 (three cells of 40000 give inf), and all four
    frameworks sum float32 in float32 (three cells of 3e38 give inf); PyTorch and ONNX Runtime accumulate
    float16 in float32 (40000). Where Σ|x| can reach the dtype's overflow threshold either answer passes."""
    big = {"float16": 40000.0, "float32": 3e38}[dtype]
    x = np.array([[[big, big, big, big, big, 1.0, 2.0]]], dtype=dtype)
    naive = symjac.verify(AVG, forward=E.avg_forward, backward=E.avg_backward, x=x)
    assert naive.ok, naive.summary()
    wide = symjac.verify(AVG, forward=functools.partial(E.avg_forward, accumulate="float64"), backward=E.avg_backward,
                         x=x)
    assert wide.ok, wide.summary()
    # ... but only there: the window of 1 and 2 must be exact
    def wrong(x):
        y = E.avg_forward(x)
        y[..., -1] = np.inf
        return y

    assert "bad_output" in symjac.verify(AVG, forward=wrong, x=x).categories()


@pytest.mark.parametrize(("dtype", "sentinel"), [("float32", -1e30), ("float64", -3.4028234663852886e38),
                                                 ("float16", -6e4), ("bfloat16", -1e30)])
def test_a_max_started_from_a_finite_sentinel_is_caught(dtype, sentinel):
    """``m = -1e30; for v in window: if v > m: m = v`` (or float32's lowest in a float64 kernel):
    right at every input above the sentinel, wrong below it."""
    def route(x):
        _, valid, w = E.windows(x, 3, 2, 1)
        best = np.full(w.shape[:-1], sentinel, dtype=np.float64)
        slot = np.full(w.shape[:-1], -1)
        for k in range(w.shape[-1]):
            better = valid[..., k] & (w[..., k] > best)
            best, slot = np.where(better, w[..., k], best), np.where(better, k, slot)
        return best.astype(x.dtype), slot

    def backward(x, dy):
        index, valid, w = E.windows(x, 3, 2, 1)
        slot = route(x)[1]
        return E.scatter(x, index, valid, (np.arange(w.shape[-1]) == slot[..., None]) * dy[..., None])

    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    assert symjac.verify(MAX, forward=lambda x: route(x)[0], backward=backward, input_shape=(2, 3, 9), dtype=dtype,
                         families=()).ok
    rep = symjac.verify(MAX, forward=lambda x: route(x)[0], backward=backward, dtype=dtype)
    assert not rep.ok
    assert any(f.family == "extreme" for f in rep.findings)


def test_correct_max_and_avg_pass_the_extreme_family():
    for dtype in ("float16", "float32", "float64"):
        assert symjac.verify(MAX, forward=E.max_forward, backward=E.max_backward, dtype=dtype).ok
        rep = symjac.verify(AVG, forward=E.avg_forward, backward=E.avg_backward, dtype=dtype)
        assert rep.ok, rep.summary()
        assert "extreme" in rep.stats["families"]


def test_the_extreme_inputs_are_where_the_issue_says():
    from symjac.pool._geometry import resolve
    from symjac.verifiers.pool._inputs import extreme_input

    g = resolve(symjac.Pool("lp", (2,), stride=2, p=2), (2, 3, 8))
    x = extreme_input(g, np.float32).astype(np.float64)
    assert (np.abs(x) >= 2.0**64).all()  # x² >= 2^128: beyond float32's range...
    assert np.sqrt((x.reshape(2, 3, 4, 2) ** 2).sum(-1)).max() < np.finfo(np.float32).max / 4  # ...y far inside
    g = resolve(AVG, (2, 3, 8))
    x = extreme_input(g, np.float16).astype(np.float64)
    assert np.abs(x).max() * 3 <= 65504 / 2  # every window's Σ|x| within half the threshold
    assert np.abs(x).min() > 65504 / 24


def test_an_lp_whose_exact_value_is_beyond_the_dtype_may_return_inf():
    """Window (max, max) of float32: y = √2·max rounds to inf; the scaled reference returns inf there
    (main: a bad_output false alarm), and the window of 1 and 2 must still be √5."""
    spec = symjac.Pool("lp", (2,), stride=2, p=2)
    big = np.finfo(np.float32).max
    x = np.array([[[big, big, 1.0, 2.0]]], dtype=np.float32)
    impl = lp(2, scaled=True)
    assert symjac.verify(spec, **impl, x=x, families=()).ok

    def wrong(x):
        y = impl["forward"](x)
        y[..., 1] = np.inf
        return y

    assert "bad_output" in symjac.verify(spec, forward=wrong, x=x, families=()).categories()
