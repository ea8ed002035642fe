"""Implementation factories for the sweep tests: symjac's NumPy lowering (a correct
reference the verifier checks like any other) and a broken variant."""

from types import SimpleNamespace

import symjac


def make(spec):
    cache = {}

    def lowered(x):
        if x.shape not in cache:
            cache[x.shape] = symjac.lower(spec, x.shape)
        return cache[x.shape]

    return SimpleNamespace(forward=lambda x: lowered(x).forward(x), backward=lambda x, dy: lowered(x).vjp(x, dy))


def make_broken(spec):
    impl = make(spec)
    return SimpleNamespace(forward=impl.forward, backward=lambda x, dy: impl.backward(x, dy) / 2)
