"""Making the calls of code under test: in a kept daemon thread under a timeout, a whole
sequence of calls handed over at once, or in a worker process.

The guarded-call core (:mod:`symjac.check._call`) makes every call through these and turns
what comes back, ``("ok", value)``, ``("raised", exc)``, ``("timeout", ...)`` or
``("crashed", Crashed)``, into findings.

Calls run in a daemon thread kept for the next call. A timed-out call keeps running in
its thread (Python cannot stop a thread), which ends when the call does; the verification
continues without it, in another thread.

:meth:`symjac.check._call.Guard.arrays` hands a whole sequence of calls (a probe plan's
colours, the finite differences' moved inputs) to that thread at once (:class:`CallSequence`):
it runs them back to back and wakes the caller once the sequence has ended (or
:data:`symjac.check._call.AHEAD_BYTES` of results and their arguments wait, or a call failed). Handing each call to
another thread and back costs two wake-ups of a sleeping core (~0.2 ms a call on a shared VM,
more than a small implementation's whole call); a sequence pays them once. Reading each result
while the next calls run would overlap the two threads, but they then contend for the GIL:
measured slower at small sizes, where the hand-overs matter. Each call's ``timeout`` runs from
its own start.

Isolated mode (:func:`invoke_isolated`, a :class:`symjac.run._isolate.Worker`): the same
checks, but the call runs in a worker process, so an abort, a segfault or a SIGFPE
of the implementation is a ``crashed`` finding naming the signal (and a hung call is
killed, not left running); the next call gets a fresh worker.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from symjac.run._isolate import Crashed, Raised, TimedOut, Worker


class Unanswered(BaseException):
    """A call the implementation cannot make yet (an offline answer not yet run): not the
    implementation's failure, so the guard lets it through, as it lets ``KeyboardInterrupt``,
    and the verification stops (:mod:`symjac.frameworks.native._offline`)."""


#: What a call may raise that is no finding: the guard re-raises it.
PASS_THROUGH = (KeyboardInterrupt, Unanswered)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, shape and dtype included (compared a MB at a time: no whole copy)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    step = max(1, 2**20 // max(1, a.dtype.itemsize))
    return all(fa[i:i + step].tobytes() == fb[i:i + step].tobytes() for i in range(0, fa.size, step))


class CallSequence:
    """Calls handed to a runner at once: ``calls`` yields each call as ``(fn, args, ...)``
    (built in the runner's thread, as it goes; what follows ``args`` is the caller's, kept
    with the call), at most ``ahead`` results held untaken. Every call
    gets its own copies of the array arguments, so a call that writes into them changes
    neither the caller's arrays, which the caller reads meanwhile, nor the next call's.

    The runner wakes the caller only when ``ahead`` results wait, at a failure and at
    the end (a wake-up per result would wake the caller's core each call, and the
    woken caller takes the GIL from the runner).
    """

    def __init__(self, calls: Iterable[tuple[Any, ...]], ahead: int, budget: int | None = None):
        self.calls, self.ahead, self.budget = calls, ahead, budget
        self.held = 0  # bytes of the arrays the results not yet taken hold (their values and arguments)
        self.sizes: collections.deque[int] = collections.deque()
        self.iterator = iter(calls)  # (the calls not yet made, once the sequence has ended)
        self.made = 0  # calls made
        self.given: collections.deque[tuple[Any, ...]] = collections.deque()  # the calls made, not yet taken
        self.results: collections.deque[Any] = collections.deque()
        self.changed = threading.Condition()  # results added (runner) or taken (caller); cancelled
        self.started = time.monotonic()  # when the call now running started
        self.cancelled = False

    def run(self) -> None:
        iterator = self.iterator
        while True:
            with self.changed:
                while self.results and self._full() and not self.cancelled:
                    self.changed.wait()
            self.started = time.monotonic()  # the next call's clock (building its arguments included)
            try:
                call = None if self.cancelled else next(iterator, None)
            except BaseException as exc:  # noqa: BLE001 - symjac's own error building the arguments: the caller raises it
                self._put(("internal", exc, ()))
                return
            if call is None:
                break
            self.made += 1
            self.given.append(call)
            fn, args = call[0], call[1]
            passed = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
            status, value = _run(fn, passed)
            # the copies are kept for the mutation finding only if the call wrote into one
            wrote = any(isinstance(a, np.ndarray) and not same(a, b) for a, b in zip(passed, args))
            kept = passed if wrote else args
            self._put((status, value, kept), sum(a.nbytes for a in (value, *kept) if isinstance(a, np.ndarray)))
            del value, passed, args, call
            if status != "ok":  # a raise ends the sequence, as it ends the caller's loop
                break
        self._put(None)

    def _full(self) -> bool:
        """Whether the results waiting fill the look-ahead: ``ahead`` of them, or ``budget`` bytes
        (arguments included: a long kernel's 4096 probe tangents of 3.6 MB each held 15 GB)."""
        return len(self.results) >= self.ahead or (self.budget is not None and self.held >= self.budget)

    def _put(self, item: Any, size: int = 0) -> None:
        with self.changed:
            self.results.append(item)
            self.sizes.append(size)
            self.held += size
            if item is None or item[0] != "ok" or self._full():
                self.changed.notify()

    def take(self, timeout: float) -> Any:
        """The next result, None at the end, or ``"timeout"`` once the call now running has
        taken ``timeout`` seconds."""
        with self.changed:
            while not self.results:
                left = self.started + timeout - time.monotonic()
                if left <= 0:
                    return "timeout"
                self.changed.wait(left)
            item = self.results.popleft()
            self.held -= self.sizes.popleft()
            self.changed.notify()  # a runner waiting for room
            return item

    def cancel(self) -> None:
        with self.changed:
            self.cancelled = True
            self.changed.notify()


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    """One call, NumPy's floating-point warnings off: symjac's inputs hold ±inf, NaN and
    extremes on purpose, and what the implementation makes of them is judged by its values,
    not by a RuntimeWarning it prints (an ``np.errstate`` of its own still holds inside)."""
    try:
        with np.errstate(all="ignore"):
            return "ok", fn(*args)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the implementation's failure is a finding
        return "raised", exc


class _Runner:
    """A daemon thread that runs the calls handed to it, one at a time: starting a thread
    per call costs ~0.1 ms, as much as a small implementation's whole call."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="symjac-call", daemon=True).start()

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            if isinstance(job, CallSequence):
                job.run()
            else:
                fn, args, box, done = job
                box.append(_run(fn, args))
                done.release()
            del job  # hold nothing of the call (arguments, result) while idle


#: Runners waiting for a call. One whose call timed out (or was interrupted) is not put
#: back: it is told to end, and does once its call returns.
_IDLE: list[_Runner] = []
if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's threads
    os.register_at_fork(after_in_child=_IDLE.clear)


def _runner() -> _Runner:
    try:
        return _IDLE.pop()
    except IndexError:
        return _Runner()


def invoke(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> tuple[str, Any]:
    """Run ``fn(*args)``: ``("ok", value)``, ``("raised", exc)`` or ``("timeout", None)``."""
    if timeout is None:
        status, value = _run(fn, args)
    else:
        runner = _runner()
        box: list[tuple[str, Any]] = []
        done = threading.Lock()
        done.acquire()
        runner.jobs.put((fn, args, box, done))
        finished = False
        try:
            finished = done.acquire(timeout=timeout)
        finally:
            if finished:
                _IDLE.append(runner)
            else:
                runner.jobs.put(None)
        if not finished:
            return "timeout", None
        status, value = box[0]
    if status == "raised" and isinstance(value, PASS_THROUGH):
        raise value
    return status, value


class _Alarm(BaseException):
    """SIGALRM's handler raises it in a call on the caller's thread that has run out of time."""


def alarm_available() -> bool:
    """Whether a call in this thread can be timed out by SIGALRM (the main thread, POSIX)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def invoke_here(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> tuple[str, Any]:
    """:func:`invoke` in the caller's thread, for an implementation bound to its thread (state
    that only the thread that made it may use: an sqlite3 connection, a kernel cache).

    On the main thread a ``timeout`` is kept by ``signal.setitimer`` and SIGALRM: its handler
    raises in the call, which is a ``("timeout", None)`` (a call stuck in C code that never
    returns to Python cannot be interrupted so). Elsewhere the call has no time limit. A
    timer someone else had set (pytest-timeout) is set again afterwards, for what is left of it.
    """
    if timeout is None or not alarm_available():
        return invoke(fn, args, None)

    def ring(signum: int, frame: Any) -> None:
        raise _Alarm

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, ring)
    before = signal.setitimer(signal.ITIMER_REAL, timeout)
    box: list[tuple[str, Any]] = []
    try:
        try:
            box.append(_run(fn, args))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Alarm:  # rang after the call had returned, before the timer was stopped: the result stands
        pass
    finally:
        signal.signal(signal.SIGALRM, previous)
        if before[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, max(before[0] - (time.monotonic() - started), 1e-6), before[1])
    status, value = box[0] if box else ("timeout", None)
    if status == "raised" and isinstance(value, _Alarm):
        return "timeout", None
    if status == "raised" and isinstance(value, PASS_THROUGH):
        raise value
    return status, value


def invoke_each(seq: CallSequence, timeout: float) -> Generator[tuple[str, Any, tuple[Any, ...], Any], None, None]:
    """:func:`invoke` for a sequence of calls in one runner: yields ``(status, value, the
    arguments after the call, the call as given)`` per call, in order; a call that
    runs ``timeout`` seconds is yielded once as a timeout and ends the sequence. Closing
    the iterator early cancels the calls not yet started."""
    runner = _runner()
    seq.started = time.monotonic()
    runner.jobs.put(seq)
    ended = False
    try:
        while True:
            item = seq.take(timeout)
            if item == "timeout":
                call = seq.given.popleft() if seq.given else None  # None: still building its arguments
                yield "timeout", None, call[1] if call else (), call
                return
            if item is None:
                ended = True
                return
            status, value, passed = item
            if status == "internal" or (status == "raised" and isinstance(value, PASS_THROUGH)):
                raise value
            yield status, value, passed, seq.given.popleft()
    finally:
        seq.cancel()  # a runner waiting for room wakes, sees the cancel and stops
        if ended:
            _IDLE.append(runner)
        else:  # still running a call, or hung: it ends once that call returns
            runner.jobs.put(None)


def invoke_isolated(worker: Worker, name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """The isolated mode: run ``worker.functions[name](*args)`` in its worker process.

    Returns ``("ok", value)``, ``("raised", Raised)``, ``("timeout", TimedOut)`` or
    ``("crashed", Crashed)``: the statuses of :func:`invoke`, plus a crash of the worker
    process.
    """
    try:
        return "ok", worker.call(name, *args)
    except Raised as exc:
        return "raised", exc
    except TimedOut as exc:
        return "timeout", exc
    except Crashed as exc:
        return "crashed", exc
