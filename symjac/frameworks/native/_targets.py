"""A native kernel as the command line names it: ``--exec CMD`` (a program) or ``--lib PATH``
(a shared library), turned into one implementation per spec for ``symjac verify`` and
``symjac sweep``.

A :class:`NativeTarget` is plain data, so a sweep's worker processes (and Dask) get it pickled
and each opens the kernel once (:meth:`NativeTarget.factory`). The program route runs one
process for every spec (:class:`symjac.frameworks.native.process.Child`). The library route
loads the library once and calls it in a forked worker process, one per spec
(:class:`symjac.run._in_worker.InWorker`): a segfault, an abort or a hang of the library is a
``crashed`` or ``timeout`` finding, as on the program route, never the end of symjac; the
arrays a kernel changes in place come back from the worker, so a mutated input is still a
finding.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from symjac.frameworks._adapter import Impl, LossImpl
from symjac.loss._spec import Loss

#: The routes a target can take, by the option that names them.
ROUTES = ("exec", "lib")


@dataclasses.dataclass(frozen=True)
class NativeTarget:
    """``--exec CMD`` (``route="exec"``) or ``--lib PATH`` (``route="lib"``), with the per-call
    ``timeout`` of symjac's guard (None: no limit) that the route's own deadline stays below."""

    route: str
    target: str
    timeout: float | None = 60.0

    def __post_init__(self) -> None:
        if self.route not in ROUTES:
            raise ValueError(f"route={self.route!r}: give one of {ROUTES}")

    @property
    def option(self) -> str:
        """How the command line wrote it: ``--exec CMD`` or ``--lib PATH``."""
        return f"--{self.route} {self.target}"

    def factory(self) -> Factory:
        """The kernel opened (a program checked to be runnable, a library loaded): a callable
        ``factory(spec) -> Impl | LossImpl``.

        Raises:
          BadCommand: the program cannot run. LibraryError / AbiMismatch: the library cannot be used.
        """
        return Factory(self)


class Factory:
    """One opened native kernel; ``factory(spec)`` is an implementation of ``spec`` on it."""

    def __init__(self, target: NativeTarget):
        from symjac.frameworks.native import process as sjp

        self.target, self.child, self.library = target, None, None
        self.worker: Any = None
        if target.route == "exec":
            self.child = sjp.Child(target.target, timeout=sjp.deadline_below(target.timeout))
        else:
            from symjac.frameworks.native.ctypes import Library

            self.library = Library(target.target)

    def __call__(self, spec: Any) -> Impl | LossImpl:
        from symjac.frameworks.native import process as sjp

        if self.child is not None:
            return sjp.impl_for(self.child, spec)
        return self._in_worker(spec)

    def _in_worker(self, spec: Any) -> Impl | LossImpl:
        """The library's implementation of ``spec``, its callables run in a forked worker of its own
        (started at its first call, which ends the worker of the spec called before: specs are
        verified one after another, so one worker process at a time is alive)."""
        from symjac.frameworks.native import ctypes as sjc
        from symjac.frameworks.native.process import deadline_below
        from symjac.run._in_worker import InWorker
        from symjac.run._isolate import Worker

        library = self.library
        assert library is not None
        impl: Any = sjc.loss_impl(library, spec) if isinstance(spec, Loss) else sjc.impl(library, spec)
        names = ("derivative", "forward") if isinstance(impl, LossImpl) else ("forward", "backward")
        functions = {n: getattr(impl, n) for n in names if getattr(impl, n) is not None}
        worker = Worker(functions, timeout=deadline_below(self.target.timeout), method="fork")
        wrapped: dict[str, Any] = {n: _Active(self, worker, InWorker(worker, n)) for n in functions}
        return dataclasses.replace(impl, **wrapped)  # type: ignore[no-any-return]

    def close(self) -> None:
        """End the program (and whatever it started) or the library's worker process."""
        if self.child is not None:
            self.child.close()
        if self.worker is not None:
            self.worker.close()
            self.worker = None


class _Active:
    """A call of a spec's worker that first ends the worker of the spec called before."""

    def __init__(self, factory: Factory, worker: Any, call: Any):
        self.factory, self.worker, self.call = factory, worker, call

    def __call__(self, *args: Any) -> Any:
        if self.factory.worker is not self.worker:
            self.factory.close()
            self.factory.worker = self.worker
        return self.call(*args)
