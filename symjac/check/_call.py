"""The one way symjac calls code under test: every misbehaviour becomes a Finding.

Both verifiers (pools and losses) call an implementation only through a
:class:`Guard`. For each call it

- copies the array arguments first and compares them afterwards (bytes, with sha256
  checksums in the message): an argument changed in place is ``mutates_inputs``;
- runs the call under a per-call ``timeout`` (a call that does not return is a
  ``timeout`` finding and the verification goes on);
- turns an exception, ``SystemExit`` included, into ``bad_output`` keeping the last
  frames of its traceback and the shapes and dtypes of the arguments passed
  (``KeyboardInterrupt`` propagates: the user asked to stop);
- says what came back when it is no array (None, a generator, a scalar, text), and
  checks shape, dtype and finiteness.

:meth:`Guard.compare` is the repeat-call check for nondeterminism. Each kind of
misbehaviour is reported once per callable (``flag`` keys), however many calls hit it.

Calls run in a daemon thread kept for the next call. A timed-out call keeps running in
its thread (Python cannot stop a thread), which ends when the call does; the verification
continues without it, in another thread.

:meth:`Guard.arrays` hands a whole sequence of calls (a probe plan's colours, the finite
differences' moved inputs) to that thread at once: it runs them back to back and wakes
the caller once the sequence has ended (or :data:`AHEAD_BYTES` of results wait, or a
call failed). Handing each call to another thread and back costs two wake-ups of a
sleeping core (~0.2 ms a call on a shared VM, more than a small implementation's whole
call); a sequence pays them once. Reading each result while the next calls run would
overlap the two threads, but they then contend for the GIL: measured slower at small
sizes, where the hand-overs matter. Each call's ``timeout`` runs from its own start.

Isolated mode (``isolate=(worker, name)``, :mod:`symjac.check._isolate`): the same
checks, but the call runs in a worker process, so an abort, a segfault or a SIGFPE
of the implementation is a ``crashed`` finding naming the signal (and a hung call is
killed, not left running); the next call gets a fresh worker.
"""

from __future__ import annotations

import collections
import hashlib
import inspect
import itertools
import math
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from symjac.check._report import Finding
from symjac.check._rounding import is_float

#: Seconds one call of the implementation may take before it is a ``timeout`` finding.
DEFAULT_TIMEOUT = 60.0
#: Traceback frames kept for an exception raised by the implementation.
TRACEBACK_FRAMES = 5
#: Bytes of results of a sequence of calls (:meth:`Guard.arrays`) taken before they are read.
AHEAD_BYTES = 2**22


def sha256(a: np.ndarray) -> str:
    """Checksum of an array's bytes (what a mutation finding quotes)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, shape and dtype included."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def first_difference(a: np.ndarray, b: np.ndarray) -> int:
    """Flat index of the first element where ``a`` and ``b`` differ (NaN equals NaN)."""
    fa, fb = a.reshape(-1), b.reshape(-1)
    eq = fa == fb
    if fa.dtype.kind == "f" or is_float(fa.dtype):
        eq |= np.isnan(fa) & np.isnan(fb)
    return int(np.flatnonzero(~eq)[0])


def index_text(name: str, shape: tuple[int, ...], flat: int) -> str:
    """``name[i, j]`` for a flat index into ``shape``."""
    idx = [int(i) for i in np.unravel_index(flat, shape)] if shape else []
    return f"{name}[{', '.join(map(str, idx))}]"


def describe_arguments(names: tuple[str, ...], args: tuple[Any, ...]) -> dict[str, str]:
    """``{"x": "float32 (1, 1, 4, 4)", ...}``: what the implementation was given."""
    out = {}
    for name, a in zip(names, args):
        out[name] = "None" if a is None else f"{a.dtype} {tuple(a.shape)}" if isinstance(a, np.ndarray) \
            else type(a).__name__
    return out


def _what_came_back(value: Any) -> str | None:
    """Why ``value`` is no array of numbers, or None when it may be one."""
    if isinstance(value, np.ndarray) and value.ndim:  # the usual answer, at once
        return None
    if value is None:
        return "None"
    if inspect.isgenerator(value) or inspect.isawaitable(value):
        return f"a {type(value).__name__}"
    if isinstance(value, (str, bytes)):
        return f"text ({type(value).__name__})"
    if np.isscalar(value) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return f"a scalar ({type(value).__name__} {value!r})"
    return None


class _Sequence:
    """Calls handed to a runner at once: ``calls`` yields each call as ``(fn, args, ...)``
    (built in the runner's thread, as it goes; what follows ``args`` is the caller's, kept
    with the call), at most ``ahead`` results held untaken. Every call
    gets its own copies of the array arguments, so a call that writes into them changes
    neither the caller's arrays, which the caller reads meanwhile, nor the next call's.

    The runner wakes the caller only when ``ahead`` results wait, at a failure and at
    the end (a wake-up per result would wake the caller's core each call, and the
    woken caller takes the GIL from the runner).
    """

    def __init__(self, calls: Iterable[tuple[Any, ...]], ahead: int):
        self.calls, self.ahead = calls, ahead
        self.made = 0  # calls made
        self.given: collections.deque[tuple[Any, ...]] = collections.deque()  # the calls made, not yet taken
        self.results: collections.deque[Any] = collections.deque()
        self.changed = threading.Condition()  # results added (runner) or taken (caller); cancelled
        self.started = time.monotonic()  # when the call now running started
        self.cancelled = False

    def run(self) -> None:
        iterator = iter(self.calls)
        while True:
            with self.changed:
                while len(self.results) >= self.ahead and not self.cancelled:
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
            self._put((status, value, passed if wrote else args))
            del value, passed, args, call
            if status != "ok":  # a raise ends the sequence, as it ends the caller's loop
                break
        self._put(None)

    def _put(self, item: Any) -> None:
        with self.changed:
            self.results.append(item)
            if item is None or item[0] != "ok" or len(self.results) >= self.ahead:
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
            self.changed.notify()  # a runner waiting for room
            return item

    def cancel(self) -> None:
        with self.changed:
            self.cancelled = True
            self.changed.notify()


def _run(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
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
            if isinstance(job, _Sequence):
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


def _invoke(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None) -> tuple[str, Any]:
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
    if status == "raised" and isinstance(value, KeyboardInterrupt):
        raise value
    return status, value


def _invoke_each(seq: _Sequence, timeout: float) -> Generator[tuple[str, Any, tuple[Any, ...], Any], None, None]:
    """:func:`_invoke` for a sequence of calls in one runner: yields ``(status, value, the
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
            if status == "internal" or (status == "raised" and isinstance(value, KeyboardInterrupt)):
                raise value
            yield status, value, passed, seq.given.popleft()
    finally:
        seq.cancel()  # a runner waiting for room wakes, sees the cancel and stops
        if ended:
            _IDLE.append(runner)
        else:  # still running a call, or hung: it ends once that call returns
            runner.jobs.put(None)


class Guard:
    """Calls one callable of the implementation under test; never raises its errors.

    Args:
      fn: the callable.
      role: its name in messages (``"backward"``, ``"derivative"``, ``"forward"``).
      names: the names of its positional arguments (``("x", "dy")``).
      findings: the list findings are appended to (shared by a verification's guards).
      timeout: seconds per call, or None to call in the caller's thread without a limit.
      restore: after a call that changed an argument in place, put the original back
        (so later calls see the intended input); False leaves it, so a second call
        on the same buffers shows what the mutation does.
      isolate: ``(worker, name)``: run the call as ``worker.functions[name]`` in the
        worker process of a :class:`symjac.check._isolate.Worker` (whose own timeout
        applies) instead of calling ``fn`` here.
    """

    def __init__(self, fn: Callable[..., Any], role: str, names: tuple[str, ...], findings: list[Finding], *,
                 timeout: float | None = DEFAULT_TIMEOUT, restore: bool = True,
                 isolate: tuple[Any, str] | None = None):
        self.fn, self.role, self.names, self.findings = fn, role, names, findings
        self.timeout, self.restore, self.isolate = timeout, restore, isolate
        self.calls = 0
        self.mutated: set[str] = set()
        self.flagged: set[str] = set()
        self.bad = False  # this callable produced a finding of its own

    def flag(self, key: str, category: str, message: str, **kw: Any) -> None:
        """Record a finding about this callable, once per ``key``."""
        self.bad = True
        if key not in self.flagged:
            self.flagged.add(key)
            self.findings.append(Finding(category, message, **kw))

    def call(self, *args: Any, again: bool = False) -> tuple[bool, Any]:
        """One call: ``(True, returned value)``, or ``(False, None)`` once the failure is flagged.

        ``again`` marks a second call on the same buffers (in mutation messages).
        """
        before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        if self.isolate is None:
            status, value = _invoke(self.fn, args, self.timeout)
        else:
            from symjac.check._isolate import invoke

            status, value = invoke(*self.isolate, args)
        return self._settle(status, value, args, before, again)

    def _settle(self, status: str, value: Any, args: tuple[Any, ...], before: list[Any] | tuple[Any, ...],
                again: bool = False) -> tuple[bool, Any]:
        """Count one call, check its arguments against ``before`` and flag its failure."""
        self.calls += 1
        self._check_mutation(args, before, again)
        if status == "ok":
            return True, value
        arguments = describe_arguments(self.names, args)  # for the finding only
        if status == "timeout":
            limit = self.timeout if self.isolate is None else self.isolate[0].timeout
            left = "it may still be running" if self.isolate is None else "its worker process was killed"
            self.flag("timeout", "timeout", f"{self.role} did not return within {limit:g} s "
                      f"(call {self.calls}; {left}); later calls go on without it",
                      detail={"arguments": arguments, "timeout_seconds": limit})
            return False, None
        if status == "crashed":
            self.flag(f"crash:{value.signal}", "crashed",
                      f"{self.role} crashed its worker process: {value.description} (call {self.calls}); "
                      "later calls run in a fresh worker",
                      detail={"signal": value.signal, "arguments": arguments})
            return False, None
        if status == "raised":
            exc = value
            name = getattr(exc, "type_name", type(exc).__name__)  # a raise in the worker keeps its type's name
            message = getattr(exc, "message", str(exc))
            frames = getattr(exc, "traceback_text", None) or "".join(
                traceback.format_exception(exc)[-(TRACEBACK_FRAMES + 1):])
            self.flag(f"raise:{name}", "bad_output", f"{self.role} raised {name}: {message}",
                      detail={"exception": name, "traceback": frames, "arguments": arguments})
            return False, None
        return True, value

    def array(self, *args: Any, shape: tuple[int, ...] | None, dtype: np.dtype[Any] | None, index_name: str = "",
              shape_note: str = "", again: bool = False, infinite: Any = None) -> np.ndarray | None:
        """One call whose result must be an array of ``shape`` and ``dtype``, all finite.

        ``shape=()`` asks for one number (a scalar or any one-element array); None
        accepts any shape, and ``dtype=None`` any real dtype. ``infinite`` (broadcast
        to the result) holds +-inf where the exact value, rounded to the dtype,
        overflows: the same infinity there is the right answer, not a bad output.

        Returns the result (a copy), or None when it is unusable (the reason flagged).
        A wrong float dtype is flagged but the values are still returned for checking.
        """
        ok, value = self.call(*args, again=again)
        return self.check_output(value, shape, dtype, index_name, shape_note, infinite) if ok else None

    def arrays(self, calls: Iterable[tuple[Any, ...]], *, shape: tuple[int, ...] | None,
               dtype: np.dtype[Any] | None, index_name: str = "") -> Generator[np.ndarray | None, None, None]:
        """:meth:`array` for each call of a sequence, in order, with the calls run back to back
        in the call thread (:func:`call_each`): one hand-over for the whole sequence.

        ``calls`` is iterated in that thread, as the calls go (build arguments lazily
        there, with no side effects). Each call gets its own copies of the array
        arguments, compared with the originals afterwards: a call that writes into them
        is ``mutates_inputs``, and neither the caller nor a later call sees its writes.
        Stop reading at a None (an unusable result): the calls not yet started are cancelled.
        Isolated guards and ``timeout=None`` make the calls one by one with :meth:`array`.
        """
        size = math.prod(shape) * (dtype.itemsize if dtype is not None else 8) if shape is not None else 2**20
        yield from call_each([self], ((self, args, shape, dtype, index_name) for args in calls), size)

    def check_output(self, value: Any, shape: tuple[int, ...] | None, dtype: np.dtype[Any] | None, index_name: str = "",
                     shape_note: str = "", infinite: Any = None) -> np.ndarray | None:
        """See :meth:`array`; for a value obtained by :meth:`call`."""
        role = self.role
        what = _what_came_back(value) if shape != () else None
        if what is not None:
            self.flag("type", "bad_output", f"{role} returned {what}, not an array"
                      + (f" of shape {shape}" if shape is not None else ""))
            return None
        try:
            arr = np.array(value, copy=True)
        except Exception as exc:  # noqa: BLE001 - whatever it returned, report it
            self.flag("type", "bad_output", f"{role} returned {type(value).__name__}, not an array: {exc}")
            return None
        if shape == () and arr.size == 1:
            arr = arr.reshape(())  # one number: a scalar or any one-element array
        elif shape is not None and arr.shape != shape:
            expected = "one number" if shape == () else str(shape)
            self.flag("shape", "bad_output", f"{role} returned shape {arr.shape}; expected {expected}{shape_note}")
            return None
        if arr.dtype.kind not in "fiu" and not is_float(arr.dtype):  # bfloat16's kind is "V"
            self.flag("kind", "bad_output", f"{role} returned an array of dtype {arr.dtype}; expected "
                      f"{dtype or 'real numbers'}")
            return None
        if dtype is not None and arr.dtype != dtype:
            self.flag("dtype", "bad_output", f"{role} returned dtype {arr.dtype}; expected {dtype}")
        finite = np.isfinite(arr)
        if infinite is not None:
            with np.errstate(invalid="ignore"):
                finite |= np.isinf(arr) & (arr == np.asarray(infinite, dtype=np.float64))
        if not finite.all():
            j = int(np.flatnonzero(~finite.reshape(-1))[0])
            self.flag("finite", "bad_output",
                      f"{role} returned {int((~finite).sum())} non-finite value(s) (NaN/Inf); first at "
                      f"{index_text(index_name or 'output', arr.shape, j)}: {arr.reshape(-1)[j]}")
            return None
        return arr

    def compare(self, first: np.ndarray, second: np.ndarray, index_name: str = "output") -> bool:
        """The repeat-call check: two results for equal inputs must agree bitwise.

        Flags ``nondeterministic`` and returns False when they do not.
        """
        if same(first, second):
            return True
        j = first_difference(first, second)
        differ = int((first != second).sum())
        self.flag("nondeterministic", "nondeterministic",
                  f"{self.role} gave different results for equal inputs at {differ} of {first.size} elements "
                  f"(first at {index_text(index_name, first.shape, j)}: {first.reshape(-1)[j].item()!r} vs "
                  f"{second.reshape(-1)[j].item()!r})",
                  cells=(tuple(int(i) for i in np.unravel_index(j, first.shape)),),
                  expected=first.reshape(-1)[j].item(), observed=second.reshape(-1)[j].item())
        return False

    def _check_mutation(self, args: tuple[Any, ...], before: list[Any] | tuple[Any, ...], again: bool) -> None:
        for name, a, b in zip(self.names, args, before):
            if not isinstance(a, np.ndarray) or a is b or same(a, b):
                continue
            self.mutated.add(name)
            j = first_difference(b, a)
            where = index_text(name, b.shape, j)
            self.flag(f"mutate:{name}", "mutates_inputs",
                      f"{self.role} changed {name} in place{' on a second call' if again else ''} "
                      f"(sha256 {sha256(b)[:12]} -> {sha256(a)[:12]}); first change at {where}: "
                      f"{b.reshape(-1)[j].item()!r} -> {a.reshape(-1)[j].item()!r}, {int((b != a).sum())} "
                      f"element(s) changed. The caller's {name} is corrupted for every later use.",
                      cells=(tuple(int(i) for i in np.unravel_index(j, b.shape)),),
                      expected=b.reshape(-1)[j].item(), observed=a.reshape(-1)[j].item())
            if self.restore:
                a[...] = b


def call_each(guards: list[Guard], calls: Iterable[tuple[Any, ...]],
              size: int) -> Generator[np.ndarray | None, None, None]:
    """:meth:`Guard.array` for each call of a sequence that may mix the ``guards``' callables
    (a forward and a backward at one input), run back to back in the call thread: one
    hand-over for the whole sequence (~0.1 ms a hand-over on a shared VM, as much as a
    small implementation's call).

    Args:
      guards: every guard the calls use (the first takes a timeout met while a call's
        arguments were still being built); one timeout, none isolated, or the calls
        are made one by one with :meth:`Guard.array`.
      calls: ``(guard, args, shape, dtype, index_name)`` per call, iterated in the call
        thread as the calls go (build arguments lazily there, with no side effects).
      size: bytes of the largest result (at most :data:`AHEAD_BYTES` of results wait).

    Yields each call's checked result, or None when it is unusable (the reason flagged
    by its guard; stop reading then: the calls not yet started are cancelled).
    """
    timeouts = {g.timeout for g in guards}
    if len(timeouts) > 1 or None in timeouts or any(g.isolate is not None for g in guards):
        for guard, args, shape, dtype, index_name in calls:
            yield guard.array(*args, shape=shape, dtype=dtype, index_name=index_name)
        return
    ahead = max(1, AHEAD_BYTES // max(size, 1))
    seq = _Sequence(((guard.fn, args, guard, shape, dtype, index_name)
                     for guard, args, shape, dtype, index_name in calls), ahead)
    timeout = guards[0].timeout
    assert timeout is not None
    results = _invoke_each(seq, timeout)
    taken: collections.deque[tuple[str, Any, tuple[Any, ...], Any]] = collections.deque()
    try:
        while True:
            if not taken:  # a chunk at a time: one wake-up a chunk
                taken.extend(itertools.islice(results, ahead))
                if not taken:
                    break
            status, value, passed, call = taken.popleft()
            if call is None:  # timed out building its arguments (symjac's own step): on the first guard
                guards[0]._settle(status, value, (), ())
                yield None
                continue
            _, args, guard, shape, dtype, index_name = call
            ok, value = guard._settle(status, value, passed, args)
            yield guard.check_output(value, shape, dtype, index_name) if ok else None
    finally:
        results.close()
        for call in [c for _, _, _, c in taken] + list(seq.given):  # made but not read: the caller stopped first
            if call is not None:
                call[2].calls += 1
