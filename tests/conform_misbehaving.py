"""User adapters for ``symjac conform`` that misbehave (issue 24, item 3): ``conform_misbehaving.py:NAME``
where NAME's ``configurations()`` raises, returns None, aborts, segfaults, blocks, never ends or
calls ``sys.exit(0)``; and well-behaved ones that use the protocol's optional parts (no input shapes,
shared labels, ``limitation()``, a slow ``make()``)."""

from __future__ import annotations

import ctypes
import itertools
import os
import time

import symjac
from symjac.frameworks import Config, Impl


def _impl(spec, op):
    def forward(x):
        return symjac.lower(spec, x.shape).forward(x)

    def backward(x, dy):
        return symjac.lower(spec, x.shape).vjp(x, dy).astype(x.dtype)

    return Impl(forward, backward, "numpy", op, {})


def make(config):
    """A max or avg pool (no shape needed to build it); ``hang``/``slow``/``broken`` ops misbehave."""
    if config.op == "hang":
        time.sleep(1000)
    if config.op == "slow":
        time.sleep(0.25)
    if config.op == "broken":
        raise RuntimeError("no such op here")
    mode = "avg" if config.op.startswith("avg") else "max"
    spec = symjac.Pool(mode, config.kwargs["kernel"], stride=config.kwargs.get("stride"))
    return spec, _impl(spec, config.op)


class _Adapter:
    make = staticmethod(make)

    def __init__(self, configurations, limitation=None):
        self._configurations = configurations
        if limitation is not None:
            self.limitation = limitation

    def configurations(self, grid="small"):
        return self._configurations()


def _raise():
    raise ValueError("no grid today")


def _abort():
    os.abort()


def _segfault():
    ctypes.string_at(0)


def _block():
    time.sleep(1000)


def _exit():
    raise SystemExit(0)


def _endless():
    return (Config("max", {"kernel": 2}, (1, 1, 4, 4), f"k2 #{i}") for i in itertools.count())


SHAPE = (1, 1, 4, 4)
raising = _Adapter(_raise)
returns_none = _Adapter(lambda: None)
aborts = _Adapter(_abort)
segfaults = _Adapter(_segfault)
blocks = _Adapter(_block)
endless = _Adapter(_endless)
exits = _Adapter(_exit)
# a kernel of 2 with stride 3 and with stride None (= the kernel) under one label; the second twice
same_label = _Adapter(lambda: [Config("max", {"kernel": 2, "stride": 3}, (1, 1, 5, 5), "max k2"),
                               Config("max", {"kernel": 2, "stride": None}, (1, 1, 5, 5), "max k2"),
                               Config("max", {"kernel": 2, "stride": None}, (1, 1, 5, 5), "max k2")])
no_shapes = _Adapter(lambda: [Config("max", {"kernel": 2}, label="max k2"), Config("avg", {"kernel": 3, "stride": 2})])
limited = _Adapter(lambda: [Config("max", {"kernel": 2}, SHAPE, "max k2"), Config("avg", {"kernel": 2}, SHAPE, "avg k2")],
                   limitation=lambda config, dtype: "no float32 avg kernel" if config.op == "avg" and
                   dtype.name == "float32" else None)
hangs = _Adapter(lambda: [Config("max", {"kernel": 2}, SHAPE, "max k2"), Config("hang", {"kernel": 2}, SHAPE, "hang")])
all_broken = _Adapter(lambda: [Config("broken", {"kernel": 2}, SHAPE, "b1"), Config("broken", {"kernel": 3}, SHAPE, "b2")])
slow = _Adapter(lambda: [Config("slow", {"kernel": 2, "n": i}, SHAPE, f"slow #{i:02d}") for i in range(24)])
