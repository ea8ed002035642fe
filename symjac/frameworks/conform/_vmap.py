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

Each call of a per-sample callable runs the batched one :data:`BATCH` times, with the sample in
each slot of the batch and a companion that differs from it in the others (its values negated
and reversed: every maximum moves), and reads the sample's slot back. Where the slots agree
bitwise, that is the result; where they do not (the rule depends on where a sample sits, or
mixes samples), the result is the slot farthest from the per-sample op's own result, so the
verifier sees the wrong one and diagnoses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, Unsupported

#: Samples per batched call: the one under test and a companion.
BATCH = 2


def _companion(a: np.ndarray) -> np.ndarray:
    """Exact in every dtype: a negation and a reversal are no arithmetic."""
    return np.ascontiguousarray(np.negative(a).reshape(-1)[::-1].reshape(a.shape))


def _stack(a: np.ndarray, slot: int) -> np.ndarray:
    a = np.asarray(a)
    return np.stack([a if i == slot else _companion(a) for i in range(BATCH)])


def _slot(out: Any, slot: int) -> np.ndarray:
    """The sample's slot of a batched result (a result without the vmapped axis is returned as it
    is, for the verifier to report its shape)."""
    arr = np.asarray(out)
    if arr.ndim == 0 or arr.shape[0] != BATCH:
        return arr
    return np.array(arr[slot], copy=True)


def _distance(a: np.ndarray, b: Any) -> float:
    """How far a slot's result is from the per-sample one (a NaN, a shape apart: infinitely)."""
    try:
        ref = np.asarray(b, dtype=np.float64)
        diff = np.abs(np.asarray(a, dtype=np.float64) - ref)
    except (TypeError, ValueError):
        return np.inf
    if diff.shape != ref.shape or not np.all(np.isfinite(diff)):
        return np.inf
    return float(diff.max(initial=0.0))


def _pick(results: list[np.ndarray], reference: Callable[[], Any]) -> np.ndarray:
    if all(r.shape == results[0].shape and r.dtype == results[0].dtype and
           np.array_equal(r, results[0], equal_nan=True) for r in results[1:]):
        return results[0]
    try:
        ref = reference()
    except Exception:  # noqa: BLE001 - the per-sample op failing: the first slot stands
        return results[0]
    return max(results, key=lambda r: _distance(r, ref))


def per_sample(impl: Impl) -> Impl:
    """An :class:`Impl` of one sample whose forward, backward and jvp run ``impl.vmap``'s batched
    callables with the sample in every slot of a batch (a companion in the others) and return its
    slot's result (the one farthest from the per-sample op's where the slots disagree).

    Raises:
      Unsupported: ``impl`` has no batched transform (``impl.vmap`` is None).
    """
    batched = impl.vmap
    if batched is None:
        raise Unsupported(f"{impl.framework} {impl.op}: the adapter gives no vmap transform")

    def lift(fn: Callable[..., Any] | None, own: Callable[..., Any] | None) -> Callable[..., np.ndarray] | None:
        if fn is None:
            return None
        call = fn

        def one(*arrays: np.ndarray) -> np.ndarray:
            results = [_slot(call(*(_stack(a, slot) for a in arrays)), slot) for slot in range(BATCH)]
            return _pick(results, lambda: None if own is None else own(*(np.array(a, copy=True) for a in arrays)))

        return one

    forward = lift(batched.forward, impl.forward)
    assert forward is not None  # an Impl always has a forward
    return dataclasses.replace(impl, forward=forward, backward=lift(batched.backward, impl.backward),
                               jvp=lift(batched.jvp, impl.jvp), double_backward=None, vmap=None,
                               op=f"vmap({impl.op})")
