"""The one way symjac calls code under test: every misbehaviour becomes a Finding.

Both verifiers (pools and losses) call an implementation only through a
:class:`Guard`. For each call it

- copies the array arguments first and compares them afterwards (bytes, with sha256
  checksums in the message): an argument changed in place is ``mutates_inputs``;
- copies the result the moment the call returns, in the thread that made the call: the verdict reads that copy, and a
  result that changes afterwards (a helper thread of the implementation, or an asynchronous kernel, still writing
  into the array it returned) is ``result_changed_after_return`` (:mod:`symjac.check._watch`: the latest results are
  compared with their copies whenever a call is settled, and every one once more when the verification ends,
  :meth:`Guard.finish`, waiting a moment while the implementation still holds one);
- in a worker process (``isolate``), flags a call whose forked child returned from it too
  (``forked``: :mod:`symjac.run._isolate` ends that child; the parent's answer is checked);
- runs the call under a per-call ``timeout`` (a call that does not return is a ``timeout`` finding, and on it goes);
- turns an exception, ``SystemExit`` included, into ``bad_output`` keeping the last frames of its traceback and
  the arguments' shapes and dtypes (``KeyboardInterrupt`` propagates: the user asked to stop); one that carries
  findings (:func:`symjac.check._report.carried`: a native route's) into those findings;
- says what came back when it is no array (None, a generator, a scalar, text), and checks shape, dtype, finiteness.

:meth:`Guard.compare` is the repeat-call check for nondeterminism. Each kind of misbehaviour is reported once per
callable (``flag`` keys), however many calls hit it.

How a call is made (a kept daemon thread with a per-call timeout, a sequence of calls handed over at once, a worker
process) is :mod:`symjac.check._invoke`'s; this module checks what each call did.
"""

from __future__ import annotations

import collections
import hashlib
import inspect
import math
import traceback
import time
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import Any

import numpy as np

from symjac.check._invoke import CallSequence, alarm_available, invoke, invoke_each, invoke_here, invoke_isolated
from symjac.check._invoke import same as same  # the bitwise comparison of the call core (verifiers import it here)
from symjac.check._report import Finding, carried
from symjac.check._rounding import is_float
from symjac.check._watch import Watch

#: Seconds one call of the implementation may take before it is a ``timeout`` finding.
DEFAULT_TIMEOUT = 60.0
#: Traceback frames kept for an exception raised by the implementation.
TRACEBACK_FRAMES = 5
#: Bytes of results of a sequence of calls (:meth:`Guard.arrays`) taken before they are read.
AHEAD_BYTES = 2**22


#: Callables found bound to their thread (:meth:`Guard._thread_bound`): later guards call them on the caller's.
_BOUND: weakref.WeakSet[Any] = weakref.WeakSet()


def _bound(fn: Any) -> bool:
    try:
        return fn in _BOUND
    except TypeError:  # not weakly referable
        return False


def sha256(a: np.ndarray) -> str:
    """Checksum of an array's bytes (what a mutation finding quotes)."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


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
        worker process of a :class:`symjac.run._isolate.Worker` (whose own timeout
        applies) instead of calling ``fn`` here.
    """

    def __init__(self, fn: Callable[..., Any], role: str, names: tuple[str, ...], findings: list[Finding], *,
                 timeout: float | None = DEFAULT_TIMEOUT, restore: bool = True,
                 isolate: tuple[Any, str] | None = None):
        self.fn, self.role, self.names, self.findings = fn, role, names, findings
        self.timeout, self.restore, self.isolate = timeout, restore, isolate
        self.calls = 0
        self.seconds = 0.0  # spent inside fn (isolated: the round trip to the worker process)
        self.mutated: set[str] = set()
        self.flagged: set[str] = set()
        self.bad = False  # this callable produced a finding of its own
        self.answered = 0  # calls that returned (whatever they returned)
        # bound to its thread: calls made on the caller's (see _thread_bound); tried: that was looked at
        self.here = timeout is not None and isolate is None and _bound(fn)
        self.tried_here = self.here
        self.raises: dict[str, str] = {}  # exception type name -> the first message, of the calls that raised
        self.watch = Watch()  # what the calls returned, compared with their copies at return (_returning)
        self.returns_in: np.dtype[Any] | None = None  # the other dtype it returned in (rejects' probe)
        self.unimplemented = False  # rejects found NotImplementedError in every float dtype

    def _returning(self, *args: Any) -> Any:
        """``fn(*args)``, its array result copied at once in the thread that made the call
        (the copy is what the guard checks and hands on, copied again: the verifier may write
        into its arrays); the original stays watched until :meth:`finish`."""
        started = time.perf_counter()
        try:
            value = self.fn(*args)
        finally:
            self.seconds += time.perf_counter() - started
        if not isinstance(value, np.ndarray):
            return value
        kept = np.array(value, copy=True)
        if any(isinstance(a, np.ndarray) and np.may_share_memory(a, value) for a in args):
            return kept  # an argument handed back (or a view of one): what changes it is the mutation check's
        self.watch.add(value, kept)
        return kept

    def _check_returned(self, final: bool = False) -> None:
        """Flag a result that changed after its call returned (compared with its copy at return):
        the latest results, those found changed as they were let go, and (``final``) every one."""
        changes = self.watch.finish() if final else self.watch.latest()
        if changes:
            self.flag("changed_after_return", "result_changed_after_return",
                      f"{self.role} returned an array that changed after the call had returned ({changes[0]}): "
                      "something of the implementation (a helper thread, an asynchronous kernel) still writes "
                      "into it. symjac checked the values at return; a caller reading the array later gets others.")

    def finish(self) -> None:
        """The verification's last look at what the calls returned (:meth:`symjac.check._watch.Watch.finish`):
        call it once every call is made, before the report is written."""
        self._check_returned(final=True)

    def flag(self, key: str, category: str, message: str, **kw: Any) -> None:
        """Record a finding about this callable, once per ``key``."""
        self.bad = True
        if key not in self.flagged:
            self.flagged.add(key)
            self.findings.append(Finding(category, message, **kw))

    def call(self, *args: Any, again: bool = False, reference: tuple[Any, ...] | None = None) -> tuple[bool, Any]:
        """One call: ``(True, returned value)``, or ``(False, None)`` once the failure is flagged.

        ``again`` marks a second call on the same buffers (in mutation messages).
        ``reference``: arrays the array arguments were copied from (bit for bit) and that
        nothing else writes to: the arguments are compared with them after the call
        instead of with copies taken here (the same exact check, without a copy per call).
        """
        if reference is not None:
            if len(reference) != len(args) or any(
                    isinstance(a, np.ndarray) and not (isinstance(r, np.ndarray) and same(a, r))
                    for a, r in zip(args, reference)):
                raise ValueError("reference= must hold the arrays the arguments were copied from")
            before: list[Any] = list(reference)
        else:
            before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        if self.here:
            status, value = invoke_here(self._returning, args, self.timeout)
        elif self.isolate is None:
            status, value = self._thread_bound(*invoke(self._returning, args, self.timeout), args)
        else:
            started = time.perf_counter()
            status, value = invoke_isolated(*self.isolate, args)
            self.seconds += time.perf_counter() - started
            self._check_forked(self.isolate[0].forked)
            if self.isolate[0].changed:  # the worker saw a result of the call before change (named by its role)
                self.flag("changed_after_return", "result_changed_after_return",
                          f"{self.isolate[0].changed} returned an array that changed after the call had returned "
                          "(in the worker process): something of the implementation (a helper thread, an "
                          "asynchronous kernel) still writes into it. symjac checked the values at return.")
        return self._settle(status, value, args, before, again)

    def _thread_bound(self, status: str, value: Any, args: tuple[Any, ...]) -> tuple[str, Any]:
        """A call that raised in the call thread, looked at once: made again on the caller's thread.
        If it returns there and raises in a call thread again, the callable is bound to the thread
        that made its state (an sqlite3 connection, tinygrad's kernel cache): this call's answer is
        the caller's thread's, and every later call is made there (:func:`invoke_here`, timed by
        SIGALRM on the main thread). Otherwise the first raise stands (a call that raises now and
        then is a defect)."""
        if status != "raised" or self.tried_here or self.timeout is None or self.isolate is not None:
            return status, value
        self.tried_here = True
        here = invoke_here(self._returning, args, self.timeout)
        if here[0] != "ok" or invoke(self._returning, args, self.timeout)[0] != "raised":
            return status, value
        self.here = True
        try:
            _BOUND.add(self.fn)
        except TypeError:
            pass
        return here

    def _check_forked(self, pids: list[int]) -> None:
        """Flag a call whose forked child returned from it too (an isolated worker saw it)."""
        if pids:
            self.flag("forked", "forked",
                      f"{self.role} forked its process (os.fork()) and the child returned from the call as well "
                      f"(pid {', '.join(map(str, pids))}): two processes then go on running the caller's code. "
                      "symjac's worker ended the child and checked the parent's answer",
                      detail={"child_pids": pids})

    def _settle(self, status: str, value: Any, args: tuple[Any, ...], before: list[Any] | tuple[Any, ...],
                again: bool = False) -> tuple[bool, Any]:
        """Count one call, check its arguments against ``before`` and earlier results, and flag its failure."""
        self.calls += 1
        self._check_mutation(args, before, again)
        self._check_returned()
        if status == "ok":
            self.answered += 1
            return True, value
        arguments = describe_arguments(self.names, args)  # for the finding only
        if status == "timeout":
            limit = self.timeout if self.isolate is None else self.isolate[0].timeout
            left = ("it was interrupted" if self.here and alarm_available() else "it may still be running") \
                if self.isolate is None else "its worker process was killed" + (
                    f"; {self.isolate[0].note}" if getattr(self.isolate[0], "note", "") else "")
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
        if status == "raised" and carried(value):  # what a native route saw its kernel do, named by it
            for category, text, detail in carried(value):
                self.flag(category, category, f"{self.role} {text}", detail={**detail, "arguments": arguments})
            return False, None
        if status == "raised":
            exc = value
            name = getattr(exc, "type_name", type(exc).__name__)  # a raise in the worker keeps its type's name
            message = getattr(exc, "message", str(exc))
            self.raises.setdefault(name, message)
            frames = getattr(exc, "traceback_text", None) or "".join(
                traceback.format_exception(exc)[-(TRACEBACK_FRAMES + 1):])
            self.flag(f"raise:{name}", "bad_output", f"{self.role} raised {name}: {message}",
                      detail={"exception": name, "traceback": frames, "arguments": arguments})
            return False, None
        return True, value

    def array(self, *args: Any, shape: tuple[int, ...] | None, dtype: np.dtype[Any] | None, index_name: str = "",
              shape_note: str = "", again: bool = False, infinite: Any = None,
              reference: tuple[Any, ...] | None = None, nonfinite: Any = None) -> np.ndarray | None:
        """One call whose result must be an array of ``shape`` and ``dtype``, all finite.

        ``shape=()`` asks for one number (a scalar or any one-element array); None
        accepts any shape, and ``dtype=None`` any real dtype. ``infinite`` (broadcast
        to the result) holds +-inf where the exact value, rounded to the dtype,
        overflows: the same infinity there is the right answer, not a bad output.
        ``nonfinite`` (a boolean mask broadcast to the result) marks where the exact answer
        is (or, by a convention or the rounding model, may be) NaN or ±inf: a non-finite
        value there is the caller's to compare, not a bad output; elsewhere it is one.

        Returns the result (a copy), or None when it is unusable (the reason flagged).
        A wrong float dtype is flagged but the values are still returned for checking.
        ``reference``: as for :meth:`call`.
        """
        ok, value = self.call(*args, again=again, reference=reference)
        return self.check_output(value, shape, dtype, index_name, shape_note, infinite, nonfinite) if ok else None

    def arrays(self, calls: Iterable[tuple[Any, ...]], *, shape: tuple[int, ...] | None,
               dtype: np.dtype[Any] | None, index_name: str = "",
               nonfinite: Any = None) -> Generator[np.ndarray | None, None, None]:
        """:meth:`array` for each call of a sequence, in order, with the calls run back to back
        in the call thread (:func:`call_each`): one hand-over for the whole sequence.

        ``calls`` is iterated in that thread, as the calls go (build arguments lazily
        there, with no side effects). Each call gets its own copies of the array
        arguments, compared with the originals afterwards: a call that writes into them
        is ``mutates_inputs``, and neither the caller nor a later call sees its writes.
        Stop reading at a None (an unusable result): the calls not yet started are cancelled.
        Isolated guards and ``timeout=None`` make the calls one by one with :meth:`array`.
        ``nonfinite``: as for :meth:`array`, for every call.
        """
        size = math.prod(shape) * (dtype.itemsize if dtype is not None else 8) if shape is not None else 2**20
        yield from call_each([self], ((self, args, shape, dtype, index_name, nonfinite) for args in calls), size)

    def rejects(self, dtype: np.dtype[Any], args_in: Callable[[np.dtype[Any]], tuple[Any, ...]]) -> str | None:
        """Why the callable does not support ``dtype``, or None when it may.

        It does not when every call in ``dtype`` raised (at least two), all of one exception type, and a
        call in another float dtype (float32, float64, float16, until one returns: :attr:`returns_in`;
        ``args_in(other)`` the arguments in it) returns. ``NotImplementedError`` in every dtype says it is
        not written (:attr:`unimplemented`). Raising on some calls only, or anything else always, is a defect.
        """
        if self.answered or len(self.raises) != 1 or self.calls == 0:
            return None
        (name, message), = self.raises.items()
        said = f"{self.role} raised {name} on every call in {dtype}: {message}"
        probe = Guard(self.fn, self.role, self.names, [], timeout=self.timeout, isolate=self.isolate)
        if self.calls < 2 and probe.call(*args_in(dtype))[0]:
            return None  # called once, and it returns when called again: raising on a call is a defect
        for other in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)):
            if other != dtype and probe.call(*args_in(other))[0]:
                self.returns_in = other
                return f"{said} (it returns in {other})"
        if name == "NotImplementedError":  # in every dtype: the derivative is not written, not a dtype it rejects
            self.unimplemented = True
            return f"{self.role} is not implemented: it raised NotImplementedError on every call, in every float dtype: {message}"
        return None

    def raise_findings(self) -> list[Finding]:
        """The findings of this callable's raises (what a dtype it rejects turns into ``unsupported``)."""
        said = f"{self.role} raised "  # at the start, or after a transform's tag ("jvp: jvp raised ...")
        return [f for f in self.findings if f.category == "bad_output" and f.detail and "exception" in f.detail
                and (f.message.startswith(said) or f.message.split(": ", 1)[-1].startswith(said))]

    def check_output(self, value: Any, shape: tuple[int, ...] | None, dtype: np.dtype[Any] | None, index_name: str = "",
                     shape_note: str = "", infinite: Any = None, nonfinite: Any = None) -> np.ndarray | None:
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
        if nonfinite is not None:
            finite |= np.broadcast_to(np.asarray(nonfinite, dtype=bool), arr.shape)
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


def _mask(rest: list[Any]) -> Any:
    """A call's ``nonfinite`` mask: the optional sixth entry of :func:`call_each`'s tuples."""
    return rest[0] if rest else None


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
      calls: ``(guard, args, shape, dtype, index_name)`` per call, or with a sixth entry, its
        ``nonfinite`` mask (:meth:`Guard.array`), iterated in the call thread as the calls go
        (build arguments lazily there, with no side effects).
      size: bytes of the largest result (at most :data:`AHEAD_BYTES` of results, with the
        arguments they hold, wait).

    Yields each call's checked result, or None when it is unusable (the reason flagged
    by its guard; stop reading then: the calls not yet started are cancelled).
    """
    timeouts = {g.timeout for g in guards}
    if len(timeouts) > 1 or None in timeouts or any(g.isolate is not None or g.here for g in guards):
        for guard, args, shape, dtype, index_name, *mask in calls:
            yield guard.array(*args, shape=shape, dtype=dtype, index_name=index_name, nonfinite=_mask(mask))
        return
    ahead = max(1, AHEAD_BYTES // max(size, 1))
    seq = CallSequence(((guard._returning, args, guard, shape, dtype, index_name, _mask(mask))
                        for guard, args, shape, dtype, index_name, *mask in calls), ahead, AHEAD_BYTES)
    timeout = guards[0].timeout
    assert timeout is not None
    results = invoke_each(seq, timeout)
    taken: collections.deque[tuple[str, Any, tuple[Any, ...], Any]] = collections.deque()
    try:
        while True:
            if not taken:  # a chunk at a time (one wake-up a chunk), of at most AHEAD_BYTES with its arguments
                held = 0
                for item in results:
                    taken.append(item)
                    held += sum(a.nbytes for a in (item[1], *item[2]) if isinstance(a, np.ndarray))
                    if len(taken) >= ahead or held >= AHEAD_BYTES:
                        break
                if not taken:
                    break
            status, value, passed, call = taken.popleft()
            if call is None:  # timed out building its arguments (symjac's own step): on the first guard
                guards[0]._settle(status, value, (), ())
                yield None
                continue
            _, args, guard, shape, dtype, index_name, mask = call
            if status == "raised" and not guard.tried_here:
                own = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
                status, value = guard._thread_bound(status, value, own)  # (its own copies, as in the sequence)
                if guard.here:  # bound to the caller's thread: this call's answer is from there, the rest too
                    ok, value = guard._settle(status, value, own, args)
                    yield guard.check_output(value, shape, dtype, index_name, nonfinite=mask) if ok else None
                    results.close()
                    for _, args, guard, shape, dtype, index_name, mask in seq.iterator:
                        yield guard.array(*args, shape=shape, dtype=dtype, index_name=index_name, nonfinite=mask)
                    return
            ok, value = guard._settle(status, value, passed, args)
            yield guard.check_output(value, shape, dtype, index_name, nonfinite=mask) if ok else None
    finally:
        results.close()
        for call in [c for _, _, _, c in taken] + list(seq.given):  # made but not read: the caller stopped first
            if call is not None:
                call[2].calls += 1
