"""Batched rules under test: a framework's vmapped forward / VJP / JVP seen one sample at a time.

A batching rule (``torch.func.vmap``, ``jax.vmap``, ``tf.vectorized_map``) is separate code
from the per-sample op, and has had silent bugs (pytorch/functorch 1019: ``vmap(jvp(vjp(
max_pool2d)))``; 202: a max_pool2d batch rule). :func:`per_sample` turns an adapter's
``Impl.vmap`` (callables on arrays with one more leading, vmapped axis) back into an
:class:`~symjac.frameworks.Impl` of one sample, so :func:`symjac.verify` checks the batched
results exactly as it checks the per-sample op: against the exact forward, Jacobian and JVP,
exactly where the exact answer is representable and within the derived bound elsewhere, and
with its diagnosis (windows, cells, how much) and its guarded calls (a batched rule that
raises, returns a wrong shape or depends on where a sample sits is a finding, not a crash).

Each call stacks the sample with :data:`BATCH` - 1 companions that differ from it (its
negation, which moves every maximum, and its values reversed) and reads the sample's slot
back; the slot moves with every call (call k uses slot k mod :data:`BATCH`), so a rule that is
wrong in one batch position only, or that mixes samples, shows in the probes that used it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported

#: Samples per batched call: the one under test and two companions.
BATCH = 3


def _companions(a: np.ndarray) -> list[np.ndarray]:
    """Exact in every dtype: a negation and a reversal are no arithmetic."""
    return [np.negative(a), np.ascontiguousarray(a.reshape(-1)[::-1].reshape(a.shape))]


def _stack(a: np.ndarray, slot: int) -> np.ndarray:
    others = _companions(np.asarray(a))
    return np.stack(others[:slot] + [np.asarray(a)] + others[slot:])


def _slot(out: Any, slot: int) -> np.ndarray:
    """The sample's slot of a batched result (a result without the vmapped axis is returned as it
    is, for the verifier to report its shape)."""
    arr = np.asarray(out)
    if arr.ndim == 0 or arr.shape[0] != BATCH:
        return arr
    return np.array(arr[slot], copy=True)


def per_sample(impl: Impl) -> Impl:
    """An :class:`Impl` of one sample whose forward, backward and jvp run ``impl.vmap``'s batched
    callables on a batch holding the sample and its companions, and return the sample's slot.

    Raises:
      Unsupported: ``impl`` has no batched transform (``impl.vmap`` is None).
    """
    batched = impl.vmap
    if batched is None:
        raise Unsupported(f"{impl.framework} {impl.op}: the adapter gives no vmap transform")
    counter = itertools.count()

    def lift(fn: Callable[..., Any] | None) -> Callable[..., np.ndarray] | None:
        if fn is None:
            return None
        call = fn

        def one(*arrays: np.ndarray) -> np.ndarray:
            slot = next(counter) % BATCH
            return _slot(call(*(_stack(a, slot) for a in arrays)), slot)

        return one

    forward = lift(batched.forward)
    assert forward is not None  # an Impl always has a forward
    return dataclasses.replace(impl, forward=forward, backward=lift(batched.backward), jvp=lift(batched.jvp),
                               double_backward=None, vmap=None, op=f"vmap({impl.op})")
