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

    return spec, Impl(forward, backward, "numpy", config.op, {})


def configurations(grid="small"):
    for op in (*ERRORS, "returns_float32"):
        yield Config(op, {"kernel": 2}, (1, 2, 4, 4), op)
