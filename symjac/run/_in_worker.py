"""A worker's callable as a plain callable: the calls of a route that a guarded call does not
isolate itself (``symjac verify --lib``, whose shared library runs in a forked worker whatever
verifier calls it), with a crash or a hang of the worker carried as its finding."""

from __future__ import annotations

from typing import Any

from symjac.run._isolate import Crashed, TimedOut, Worker


class InWorker:
    """``worker.functions[name]`` as a plain callable, for a route whose calls are not made by a
    guarded call's isolated mode (``symjac verify --lib``: the shared library's calls run in the
    worker, whatever verifier calls them). A crash or a hang of the worker is raised as an
    exception carrying its finding (``symjac_findings``: ``crashed`` naming the signal,
    ``timeout``), which the guarded call reports under that category; a raise in the worker is
    re-raised with its type's name, message and carried findings (:class:`Raised`)."""

    def __init__(self, worker: Worker, name: str):
        self.worker, self.name = worker, name

    def __call__(self, *args: Any) -> Any:
        try:
            return self.worker.call(self.name, *args)
        except TimedOut as exc:
            limit = self.worker.timeout
            raise WorkerFailed(exc, (("timeout", f"did not return within {limit:g} s (its worker process was "
                                                 "killed); later calls run in a fresh worker",
                                      {"timeout_seconds": limit}),)) from None
        except Crashed as exc:
            raise WorkerFailed(exc, (("crashed", f"crashed its worker process: {exc.description}; later calls "
                                                 "run in a fresh worker", {"signal": exc.signal}),)) from None


class WorkerFailed(Exception):
    """The worker of an :class:`InWorker` call died or hung: its finding is carried (``symjac_findings``)."""

    def __init__(self, cause: Crashed, findings: tuple[tuple[str, str, dict[str, Any]], ...]):
        super().__init__(str(cause))
        self.symjac_findings = findings
