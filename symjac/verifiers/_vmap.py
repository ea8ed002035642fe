"""Batched rules under test: a vmapped forward / VJP / JVP seen one sample at a time.

A batching rule (``torch.func.vmap``, ``jax.vmap``, ``tf.vectorized_map``, a custom
``autograd.Function.vmap``) is separate code from the per-sample op, and has had silent bugs
(pytorch/functorch 1019: ``vmap(jvp(vjp(max_pool2d)))``; 202: a max_pool2d batch rule).
:class:`PerSample` turns a batched rule into per-sample callables, so the verifier checks the
batched results exactly as it checks the per-sample op, with its diagnosis (windows, cells,
how much) and its guarded calls.

**The rule** is called at a batch position: ``rule(in_axis, out_axis)`` returns the batched
callables, an object or dict with ``forward(xb)``, ``backward(xb, dyb)`` and/or ``jvp(xb, tb)``
(or one callable: the batched forward), each taking every array argument with one more axis,
the batch, at position ``in_axis`` and returning its result with the batch at ``out_axis``, as
``torch.func.vmap(f, in_dims=in_axis, out_dims=out_axis)`` and ``jax.vmap(f, in_axes=in_axis,
out_axes=out_axis)`` build them (the positions are non-negative, at most the sample's rank).
An object with those callables instead of a rule batches axis 0 only (``tf.vectorized_map``):
positions other than 0 are then not checked, and the report says so.

**Each per-sample call runs the batched rule once**, at one of :data:`LAYOUTS` in turn (a batch
of 3 with the batch second in the arguments and last in the result and the sample in the last
two slots, a batch of 1, a batch of 2 with the batch last in and second out, a batch of 3 at
axis 0 with the sample first and last), the other slots holding companions that differ from
the sample and from each other (its values negated and reversed, rolled by one, or reversed: no arithmetic,
exact in every dtype; every maximum moves). Equal arguments get
the same layout (the verifier's repeated calls compare like with like). The sample's slots are
read back: where they agree bitwise, that is the result; where they do not (the rule depends
on where a sample sits, or mixes samples), the result is the slot farthest from the per-sample
op's own result, so the verifier sees the wrong one and diagnoses it (with no per-sample op to
compare with, the call raises, naming the slots: a ``bad_output`` finding). A rule that writes
into its batched arguments has the sample's slot of them copied back into the call's
arguments, so the guarded call's mutation check sees it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

#: The per-sample callables a batched rule may give, with their array arguments.
ROLES = {"forward": ("x",), "backward": ("x", "dy"), "jvp": ("x", "t")}


@dataclasses.dataclass(frozen=True)
class Layout:
    """One batch a per-sample call is run in.

    Attributes:
      size: the batch size.
      in_axis: where the batch axis sits in each argument (-1: last, after the sample's axes).
      out_axis: where it sits in the result (-1: last).
      slots: the slots holding the sample under test; the others hold companions.
    """

    size: int
    in_axis: int
    out_axis: int
    slots: tuple[int, ...]

    def positions(self, rank: int) -> tuple[int, int]:
        """``(in_axis, out_axis)`` as non-negative positions for samples of ``rank`` axes."""
        return tuple(rank if a < 0 else a for a in (self.in_axis, self.out_axis))  # type: ignore[return-value]

    def describe(self, rank: int) -> str:
        i, o = self.positions(rank)
        return f"batch of {self.size} at axis {i} (result axis {o}), sample at slot {', '.join(map(str, self.slots))}"


#: The batches, in turn: sizes 1, 2 and 3 (odd, above 2), the batch axis at 0 and elsewhere in
#: arguments and results; the first the richest (a verification with few distinct calls reaches
#: it). The batches of 3 hold the sample in the last slot and in the first or the second, a
#: companion in the other: a rule that fills the last slot of an odd batch with zeros, or copies
#: into slot 2 what another slot holds, gives the sample two results.
LAYOUTS = (Layout(3, 1, -1, (1, 2)), Layout(1, 0, 0, (0,)), Layout(2, -1, 1, (1,)), Layout(3, 0, 0, (0, 2)))


def _companion(a: np.ndarray, slot: int) -> np.ndarray:
    """The companion a slot holds (one kind per slot, so two companions differ): the sample negated
    and reversed, rolled by one, or reversed; no arithmetic, exact in every dtype."""
    flat = np.asarray(a).reshape(-1)
    out = (np.negative(flat)[::-1], np.roll(flat, 1), flat[::-1])[slot % 3]
    return np.ascontiguousarray(out.reshape(np.shape(a)))


def _stack(a: np.ndarray, layout: Layout, axis: int) -> np.ndarray:
    parts = [np.asarray(a) if slot in layout.slots else _companion(a, slot) for slot in range(layout.size)]
    return np.stack(parts, axis=axis)


def _distance(a: np.ndarray, b: Any) -> float:
    """How far a slot's result is from the per-sample one (a NaN, a shape apart: infinitely)."""
    try:
        ref = np.asarray(b, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(np.asarray(a, dtype=np.float64) - ref)
    except (TypeError, ValueError):
        return np.inf
    if diff.shape != ref.shape or not np.all(np.isfinite(diff)):
        return np.inf
    return float(diff.max(initial=0.0))


def _digest(arrays: tuple[np.ndarray, ...]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1).data if a.size else b"")
    return h.digest()


def axis0_only(rule: Any) -> bool:
    """Whether ``rule`` is an object of batched callables (axis 0 only), not a rule of positions."""
    return not callable(rule) or isinstance(rule, Mapping) or any(
        callable(getattr(rule, name, None)) for name in ROLES)


class PerSample:
    """Per-sample ``forward``/``backward``/``jvp`` running a batched rule (see the module docstring).

    Args:
      rule: ``rule(in_axis, out_axis) -> batched callables``, or the batched callables (axis 0 only).
      reference: the per-sample op's own callables by role (None where it has none): the
        result where the sample's slots disagree is the one farthest from them.
    """

    def __init__(self, rule: Any, reference: Mapping[str, Callable[..., Any] | None] | None = None):
        self.rule = rule
        self.fixed = axis0_only(rule)
        self.layouts = tuple(dict.fromkeys(
            dataclasses.replace(lay, in_axis=0, out_axis=0) if self.fixed else lay for lay in LAYOUTS))
        self.reference = dict(reference or {})
        self._built: dict[tuple[int, int], dict[str, Callable[..., Any] | None]] = {}
        self._turn: dict[str, int] = {}
        self._seen: dict[tuple[str, bytes], int] = {}
        self.calls: dict[str, dict[int, int]] = {}  # role -> layout index -> calls
        self.rank = 0

    def callables(self, in_axis: int, out_axis: int) -> dict[str, Callable[..., Any] | None]:
        """The rule's batched callables at a batch position, built once per position."""
        key = (in_axis, out_axis)
        if key not in self._built:
            made = self.rule if self.fixed else self.rule(in_axis, out_axis)
            self._built[key] = _callables_of(made)
        return self._built[key]

    def has(self, role: str) -> bool:
        """Whether the rule gives a batched ``role`` (looked up at axis 0)."""
        return self.callables(0, 0).get(role) is not None

    def layout_for(self, role: str, arrays: tuple[np.ndarray, ...]) -> int:
        """The next layout in turn; equal arguments again get the layout they had."""
        key = (role, _digest(arrays))
        if key not in self._seen:
            turn = self._turn.get(role, 0)
            self._seen[key] = turn % len(self.layouts)
            self._turn[role] = turn + 1
        return self._seen[key]

    def per_sample(self, role: str) -> Callable[..., np.ndarray] | None:
        """The per-sample ``role`` callable (None when the rule gives none)."""
        if not self.has(role):
            return None

        def one(*arrays: np.ndarray) -> np.ndarray:
            index = self.layout_for(role, arrays)
            layout = self.layouts[index]
            self.rank = rank = np.ndim(arrays[0])
            i_in, i_out = layout.positions(rank)
            fn = self.callables(i_in, i_out)[role]
            if fn is None:
                raise TypeError(f"the batched rule at in_axis={i_in}, out_axis={i_out} gives no {role}, though it "
                                "gives one at axis 0")
            batched = [_stack(a, layout, i_in) for a in arrays]
            counts = self.calls.setdefault(role, {})
            counts[index] = counts.get(index, 0) + 1
            out = fn(*batched)
            _copy_back(arrays, batched, layout.slots[0], i_in)
            return self._pick(role, arrays, _slots(out, layout, i_out, role))

        return one

    def _pick(self, role: str, arrays: tuple[np.ndarray, ...], results: list[np.ndarray]) -> np.ndarray:
        if all(r.shape == results[0].shape and r.dtype == results[0].dtype and
               np.array_equal(r, results[0], equal_nan=True) for r in results[1:]):
            return results[0]
        own = self.reference.get(role)
        if own is None:
            raise ValueError(f"the batched {role} gives one sample different results in different slots of one "
                             "batch: a batching rule's result must not depend on where a sample sits")
        try:
            ref = own(*(np.array(a, copy=True) for a in arrays))
        except Exception:  # noqa: BLE001 - the per-sample op failing: the first slot stands
            return results[0]
        return max(results, key=lambda r: _distance(r, ref))

    def layouts_run(self) -> list[dict[str, Any]]:
        """The layouts the calls ran at, with their calls per role (the report's figures); every
        layout in turn, uncounted (``calls`` None), when the calls ran in an isolated worker."""
        out = []
        counted = bool(self.calls)  # none in this process: the calls ran in an isolated worker's
        for index, layout in enumerate(self.layouts):
            calls = {role: c[index] for role, c in self.calls.items() if c.get(index)} if counted else None
            if calls or not counted:
                i, o = layout.positions(self.rank)
                out.append({"batch": layout.size, "in_axis": i, "out_axis": o, "slots": list(layout.slots),
                            "calls": calls})
        return out


def _callables_of(made: Any) -> dict[str, Callable[..., Any] | None]:
    """The batched callables a rule returned: an object or dict with them, or one callable (the forward)."""
    def get(name: str) -> Any:
        fn = made.get(name) if isinstance(made, Mapping) else getattr(made, name, None)
        return fn if callable(fn) else None

    found = {role: get(role) for role in ROLES}
    if not any(found.values()) and callable(made) and not isinstance(made, Mapping):
        found["forward"] = made
    return found


def _slots(out: Any, layout: Layout, axis: int, role: str) -> list[np.ndarray]:
    """The sample's slots of a batched result (copies), or a TypeError naming the shape."""
    arr = np.asarray(out)
    if arr.ndim <= axis or arr.shape[axis] != layout.size:
        raise TypeError(f"the batched {role} returned shape {arr.shape}: expected the batch of {layout.size} at "
                        f"axis {axis}")
    return [np.array(np.take(arr, s, axis=axis), copy=True) for s in layout.slots]


def _copy_back(arrays: tuple[np.ndarray, ...], batched: list[np.ndarray], slot: int, axis: int) -> None:
    """Writes the rule made into the sample's slot of an argument, made into the argument itself."""
    for a, b in zip(arrays, batched):
        back = np.take(b, slot, axis=axis)
        if isinstance(a, np.ndarray) and a.flags.writeable and back.shape == a.shape and \
                not np.array_equal(back, a, equal_nan=True):
            np.copyto(a, back, casting="unsafe")


def per_sample(rule: Any, reference: Mapping[str, Callable[..., Any] | None] | None = None
               ) -> dict[str, Callable[..., np.ndarray] | None]:
    """The per-sample ``forward``, ``backward`` and ``jvp`` of a batched rule (None where it gives
    none), each call one batched call at the next of :data:`LAYOUTS` (:class:`PerSample`)."""
    sample = PerSample(rule, reference)
    return {role: sample.per_sample(role) for role in ROLES}
