"""Verify a native kernel run as a program: the symjac native protocol over stdin/stdout.

The program (any language; in C, ``contrib/symjac_driver.h`` is the whole protocol and
the kernel author writes one dispatch function) is started once and answers one request
at a time: the operation, the operator's settings, the input arrays; it returns the
result and the inputs' state after the call. docs/native.md has every field and byte.

::

    import symjac
    import symjac.frameworks.native.process as sjp

    spec = symjac.Pool("avg", 2, stride=1, padding="same")
    impl = sjp.impl("./pool", spec)
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 2, 2))

    loss = symjac.Loss("sigmoid_ce", scale=8)
    k = sjp.loss_impl("./loss", loss)
    symjac.verify_loss(loss, derivative=k.derivative, forward=k.forward)

A kernel that refuses a request, hangs past the request's deadline, crashes (its exit
code or signal named), writes garbage, too few or too many bytes, or answers out of turn
makes the callable raise a :class:`ChildError` (which symjac's guarded call reports as
a finding); the child is then killed and the next call starts a fresh one. An input the
kernel wrote to is written back into the array the callable was given, so symjac's
mutation check sees it as it sees a Python implementation's.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from symjac.frameworks._adapter import Impl
from symjac.frameworks.native._child import DEFAULT_TIMEOUT, Child, describe_exit
from symjac.frameworks.native._calls import NOT_IN_PROTOCOL, LossCalls, check_native_spec, spec_calls
from symjac.frameworks.native._poison import KernelFault, Poison, Run, buffer_sizes, echoed, protocol_lines, settle
from symjac.frameworks.native._wire import (
    BadCommand,
    ChildCrashed,
    ChildError,
    ChildTimeout,
    KernelRefused,
    ProtocolError,
    request,
    unpack,
    write_back,
)
from symjac.loss._spec import Loss, check_loss
from symjac.pool._ops.unpool import MaxUnpool
from symjac.pool._spec import PoolSpec
from symjac.frameworks._adapter import LossImpl

__all__ = ["DEFAULT_TIMEOUT", "BadCommand", "Child", "ChildCrashed", "ChildError", "ChildTimeout", "KernelFault",
           "KernelRefused", "ProtocolError", "deadline_below", "describe_exit", "impl", "impl_for", "loss_impl"]

Command = str | Sequence[str] | Child


def _child(cmd: Command, timeout: float, env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> Child:
    return cmd if isinstance(cmd, Child) else Child(cmd, timeout=timeout, env=env, cwd=cwd)


#: Children already warned about: their responses do not echo the poison.
_UNPOISONED: weakref.WeakSet[Child] = weakref.WeakSet()


class _Send:
    """One call of the kernel: its poisoned runs (:func:`symjac.frameworks.native._poison.settle`), each a
    request to the child, sharing the call's deadline; the first run's result, its inputs' state written back."""

    def __init__(self, child: Child):
        self.child = child

    def __call__(self, op: str, lines: list[str], inputs: list[tuple[str, np.ndarray | None]],
                 output: tuple[str, str, tuple[int, ...]]) -> np.ndarray:
        deadline = time.monotonic() + self.child.timeout

        def run(poison: Poison, repeat: int) -> Run:
            req = request(self.child.next_id(), op, lines, inputs, output, protocol_lines(poison, output[1], repeat))
            resp, payload = self.child.exchange(req, deadline)
            result, states = unpack(resp, payload, req)
            poisoned = echoed(resp, poison, output[1])
            if not poisoned and self.child not in _UNPOISONED:
                _UNPOISONED.add(self.child)
                warnings.warn(f"kernel `{self.child.command}` does not echo the poison symjac sends (its driver is "
                              "older than this symjac's contrib/symjac_driver.h, or does not implement it): its "
                              "unwritten outputs and reads of memory it never wrote are not checked "
                              "(docs/native.md#what-the-kernel-did-not-write)", stacklevel=2)
            return Run(result, states, resp.outside, poisoned)

        return settle(run, buffer_sizes(inputs, output), output,
                      lambda first: write_back(first.states, [a for _, a in inputs]))


def impl(cmd: Command, spec: PoolSpec | MaxUnpool, *, timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None,
         cwd: str | os.PathLike[str] | None = None) -> Impl:
    """An :class:`Impl` whose ``forward(x)`` and ``backward(x, dy)`` are requests to a kernel program
    (for :class:`symjac.MaxUnpool`, ``forward(x, indices)`` and ``backward(x, indices, dy)``).

    Args:
      cmd: the program: a command line (split with :func:`shlex.split`, no shell), an
        argument list, or a :class:`Child` to share one process between several specs.
      spec: the pooling (or max unpooling) spec whose settings every request carries.
      timeout: seconds each call may take, its poisoned runs together (keep it below ``symjac.verify``'s own
        ``timeout``, 60 s by default, so a hung kernel is named as such).
      env, cwd: the program's environment and working directory.

    Returns:
      ``Impl(forward, backward, framework="process", op=<command>)``.

    Raises:
      SpecError: ``spec`` is not a pooling spec.
      ChildError: (from the callables) the kernel refused, hung, crashed or broke the protocol.
    """
    spec = check_native_spec(spec)
    child = _child(cmd, timeout, env, cwd)
    calls = spec_calls(_Send(child), spec)
    reproducer = (f"import symjac, symjac.frameworks.native.process as sjp\nimpl = sjp.impl({child.argv!r}, symjac.{spec!r})\n"
                  "y = impl.forward(x)\ndx = impl.backward(x, dy)\n")
    return Impl(forward=calls.forward, backward=calls.backward, framework="process", op=child.command,
                kwargs={"cmd": child.argv, "spec": spec}, reproducer=reproducer, missing=NOT_IN_PROTOCOL)


def loss_impl(cmd: Command, loss: Loss, *, timeout: float = DEFAULT_TIMEOUT, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> LossImpl:
    """A :class:`symjac.LossImpl` whose ``derivative`` and ``forward`` are requests to a kernel program.

    ``derivative(pred, label[, upstream])`` asks for ``S·dL/dpred`` (op ``derivative``),
    ``forward(pred, label)`` for the loss value ``L`` (op ``loss``): pass them to
    :func:`symjac.verify_loss` (``derivative=k.derivative, forward=k.forward``) or give the
    object to :func:`symjac.check_loss_family`. Arguments as for :func:`impl`.

    Raises:
      SpecError: ``loss`` is not a :class:`symjac.Loss`.
    """
    loss = check_loss(loss)
    calls = LossCalls(_Send(_child(cmd, timeout, env, cwd)), loss)
    return LossImpl(loss=loss, derivative=calls.derivative, forward=calls.forward)


def impl_for(cmd: Command, spec: PoolSpec | MaxUnpool | Loss) -> Impl | LossImpl:
    """:func:`impl` for a pooling spec, :func:`loss_impl` for a loss: what a spec-file case needs
    (``symjac verify SPEC --exec CMD`` gives every case one shared :class:`Child`)."""
    return loss_impl(cmd, spec) if isinstance(spec, Loss) else impl(cmd, spec)


def deadline_below(guard_timeout: float | None) -> float:
    """A request deadline just below symjac's per-call ``timeout`` (None or 0: no limit, a day
    here), so that a hung kernel is named, and killed, by the process route."""
    return 0.9 * guard_timeout if guard_timeout else 86400.0
