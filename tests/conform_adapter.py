"""A user adapter for ``symjac conform`` tests: symjac's own NumPy lowering as the
"framework", with deliberately broken ops (a doubled gradient, an abort, a SIGFPE, an
unsupported convention) so every kind of conformance cell appears without a framework."""

from __future__ import annotations

import os
import signal


import symjac
from symjac.frameworks import Config, Impl, Unsupported


def _impl(spec, shape, op, scale=1.0, crash=None):
    lowered = symjac.lower(spec, shape)

    def forward(x):
        if crash == "abort":
            os.abort()
        return lowered.forward(x)

    def backward(x, dy):
        if crash == "fpe":
            signal.raise_signal(signal.SIGFPE)
        return (lowered.vjp(x, dy) * scale).astype(x.dtype)

    return Impl(forward, backward, "numpy", op, {}, "dx = backward(x, dy)  # the broken op\n")


def make(config):
    shape = config.input_shape
    k = config.kwargs["kernel"]
    if config.op == "unsupported_op":
        raise Unsupported("this adapter has no such convention")
    mode = "avg" if config.op.startswith("avg") else "max"
    spec = symjac.Pool(mode, k, stride=config.kwargs.get("stride"))
    behaviour = {"max_doubled": {"scale": 2.0}, "max_abort": {"crash": "abort"}, "avg_fpe": {"crash": "fpe"}}
    return spec, _impl(spec, shape, config.op, **behaviour.get(config.op, {}))


def configurations(grid="small"):
    yield Config("max_ok", {"kernel": 2}, (1, 1, 4, 4), "max k2")
    yield Config("avg_ok", {"kernel": 2, "stride": 1}, (1, 1, 4, 4), "avg k2 s1")
    yield Config("max_doubled", {"kernel": 2}, (1, 1, 4, 4), "max k2 doubled")
    yield Config("max_abort", {"kernel": 2}, (1, 1, 4, 4), "max k2 abort")
    yield Config("avg_fpe", {"kernel": 2}, (1, 1, 4, 4), "avg k2 sigfpe")
    yield Config("unsupported_op", {"kernel": 2}, (1, 1, 4, 4), "unsupported")


class crash_free:  # noqa: N801 - an adapter object: ``conform_adapter.py:crash_free``
    """The same adapter without the ops that kill their process (for runs without isolation)."""

    make = staticmethod(make)

    @staticmethod
    def configurations(grid="small"):
        return [c for c in configurations(grid) if c.op not in ("max_abort", "avg_fpe")]
