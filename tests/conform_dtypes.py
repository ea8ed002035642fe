"""A user adapter for ``symjac conform`` tests: float32-only ops, each rejecting the other
dtypes with its own exception type, as real frameworks do for a missing dtype kernel."""

from __future__ import annotations

import numpy as np

import symjac
from symjac.frameworks import Config, Impl


class KernelMissing(Exception):
    """A framework's own error type for a missing dtype kernel."""


ERRORS = {"typeerror": TypeError, "runtimeerror": RuntimeError, "custom": KernelMissing}


def make(config):
    spec = symjac.Pool("avg", config.kwargs["kernel"])
    error = ERRORS.get(config.op)

    def check(x):
        if error is not None and x.dtype != np.float32:
            raise error(f"no {x.dtype} kernel for avg_pool2d")
        if config.op == "raises_at_one_shape" and x.shape[-1] == 2:
            raise RuntimeError("setup failed at width 2")

    def forward(x):
        check(x)
        return symjac.lower(spec, x.shape).forward(x)

    def backward(x, dy):
        check(x)
        dx = symjac.lower(spec, x.shape).vjp(x, dy)
        return dx.astype(np.float32) if config.op == "returns_float32" else dx

    def jvp(x, t):  # avg pooling is linear: J·t is the pool of t
        check(x)
        return symjac.lower(spec, x.shape).forward(t)

    def double_backward(x, dy, v):  # linear: ddx = 0, ddy = J·v
        check(x)
        return np.zeros_like(x), symjac.lower(spec, x.shape).forward(v)

    return spec, Impl(forward, backward, "numpy", config.op, {}, jvp=jvp, double_backward=double_backward)


def configurations(grid="small"):
    for op in (*ERRORS, "returns_float32"):
        yield Config(op, {"kernel": 2}, (1, 2, 4, 4), op)
