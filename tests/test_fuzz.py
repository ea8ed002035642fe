"""Bounded fuzzing (issue 10): random valid and invalid specs, shapes and inputs.

Whatever goes in, the only exceptions that may come out are SpecError and InputError
(symjac's typed errors for bad input); anything else (TypeError, MemoryError,
OverflowError, KeyError, a hang) is a bug. The campaign is sized to run in well under
a minute.
"""

import math
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symjac
from symjac import AdaptivePool, GlobalPool, InputError, Pool, SpecError
from test_verify_reach import Lowered
from sampling import examples

EXPECTED = (SpecError, InputError)
#: Examples per full run (a quarter in the README's, tests/sampling.py): 600 keeps CI well under a minute; SYMJAC_FUZZ_EXAMPLES=5000 for a longer campaign.
EXAMPLES = int(os.environ.get("SYMJAC_FUZZ_EXAMPLES", "600"))

def mostly(valid, invalid):
    """``valid`` nine times in ten, else ``invalid``: most cases get past the spec."""
    return st.integers(0, 9).flatmap(lambda i: invalid if i == 0 else valid)


small_int = st.integers(-2, 5)
weird_scalar = st.one_of(
    small_int, st.sampled_from([0, 10**9, 2**31, 2**63, -(10**9)]), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4), st.none(), st.booleans(), st.builds(np.int64, small_int), st.builds(np.float32, small_int),
    st.just(np.array(["avg"])), st.just(np.array([2, 2])))
weird = st.one_of(weird_scalar, st.lists(weird_scalar, max_size=3), st.lists(small_int, max_size=4).map(tuple))


def sizes(rank, low=1, high=3):
    one = st.one_of(st.integers(low, high), st.builds(np.int64, st.integers(low, high)))
    return mostly(st.one_of(one, st.tuples(*[one] * rank)), weird)


@st.composite
def specs(draw):
    kind = draw(st.sampled_from(["pool", "pool", "pool", "adaptive", "global"]))
    rank = draw(st.integers(1, 3))
    mode = draw(mostly(st.sampled_from(["max", "avg"]), st.one_of(st.just("mean"), weird)))
    layout = draw(mostly(st.sampled_from(["channels_first", "channels_last"]), weird))
    if kind == "pool":
        kernel = draw(mostly(st.tuples(*[st.integers(1, 3)] * rank), weird))
        kw = {"stride": draw(st.one_of(st.none(), sizes(rank))), "dilation": draw(sizes(rank, 1, 2)),
              "padding": draw(mostly(st.one_of(st.sampled_from(["valid", "same", "same_lower"]), st.integers(0, 2),
                                               st.tuples(*[st.tuples(st.integers(0, 2), st.integers(0, 2))] * rank)),
                                     st.one_of(st.sampled_from(["full", ""]), st.integers(-2, 10**9), weird))),
              "ceil_mode": draw(mostly(st.booleans(), weird)), "layout": layout}
        if isinstance(mode, str) and mode == "avg":
            kw["divisor"] = draw(mostly(st.one_of(st.sampled_from(["exclude_pad", "include_pad"]), st.integers(1, 5)),
                                        weird))
        return lambda: Pool(mode, kernel, **kw)
    if kind == "adaptive":
        size = draw(mostly(st.tuples(*[st.integers(1, 4)] * rank), weird))
        return lambda: AdaptivePool(mode, size, layout=layout)
    return lambda: GlobalPool(mode, rank=draw(mostly(st.just(rank), weird)), layout=layout)


shapes = mostly(st.lists(st.integers(1, 6), min_size=1, max_size=5).map(tuple),
                st.one_of(st.lists(st.integers(-1, 7), max_size=6).map(tuple), weird,
                          st.lists(st.sampled_from([1, 2, 10**6, 10**12]), min_size=2, max_size=5).map(tuple)))


def small_enough(g) -> bool:
    # Keep the exact engine's work tiny: few cells, and max windows of <= 9 cells (the
    # SymPy Max template grows fast with the window size).
    return g.batch * g.n_in <= 400 and g.valid.sum(axis=1).max() <= 9


@settings(max_examples=examples(EXAMPLES), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(specs(), shapes, st.integers(0, 3), st.sampled_from(["float64", "float32", "float16", "bfloat16", "int8", None]))
def test_only_typed_errors_escape(make_spec, shape, seed, dtype):
    try:
        spec = make_spec()
    except EXPECTED:
        return
    try:
        g = symjac.resolve(spec, shape)
    except EXPECTED:
        return
    if not small_enough(g):
        return
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, size=g.input_shape).astype(np.float64) / 2
    try:
        y = symjac.forward(spec, x)
        dx = symjac.vjp(spec, x, np.ones(y.shape))
        assert dx.shape == g.input_shape
        low = symjac.lower(spec, g.input_shape)
        assert low.vjp(x, np.ones(y.shape)).shape == low.forward(x).shape[:0] + g.input_shape
        report = symjac.verify(spec, backward=Lowered(spec).backward, forward=Lowered(spec).forward,
                               input_shape=g.input_shape, dtype=dtype, seed=seed, timeout=None)
        assert report.ok, report  # the lowered reference is correct in every dtype
    except EXPECTED:
        return


@settings(max_examples=examples(60), deadline=None)
@given(specs())
def test_cover_only_raises_typed_errors(make_spec):
    try:
        spec = make_spec()
        plan = symjac.cover(spec)
    except EXPECTED:
        return
    assert plan and all(min(shape) >= 1 for shape in plan)
    rest = [s for s in plan if not (s[0] == 3 and 37 in (s[1], s[-1]))]  # all but the wide shape
    assert len(plan) - len(rest) == 1  # the wide shape (batch 3, 37 channels), once
    assert len(rest) <= 64 or math.prod(len({s[i] for s in rest}) for i in range(2, 2 + spec.rank)) > 64
