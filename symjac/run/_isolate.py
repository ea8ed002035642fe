"""Crash isolation: run an implementation's callables in a worker process.

A framework op that aborts, segfaults or raises SIGFPE kills the process it runs
in. :class:`Worker` runs named callables in a child process and turns the death of
that child into a :class:`Crashed` exception naming the signal, so the caller
(the guarded-call core's isolated mode, :func:`symjac.check._invoke.invoke_isolated`;
``conform``) records a ``crashed`` finding and goes on; the next call starts a fresh child.

Start method: ``"fork"`` (the default on Linux) needs nothing picklable: the child
inherits the callables. Fork is unsafe once a multithreaded runtime has started
in the parent: a forked child has none of its threads, so after TensorFlow has run here
a TensorFlow op in a fork waits forever (an op that raises SIGFPE showed as a timeout).
The default then becomes a fresh interpreter with the callables pickled by value
(cloudpickle; :data:`FORK_UNSAFE`), its start (the framework's import) not counted in the
calls' timeout; without cloudpickle, or for callables it cannot pickle, a fork as before
and a timeout finding says why. ``conform`` builds every implementation *inside* a fresh
interpreter. ``"spawn"`` (macOS, Windows) starts a clean interpreter and needs picklable
callables (module-level functions of an importable module). NumPy's warnings are off in calls.

Protocol over one pipe: the parent sends ``(name, args)``; the child answers
``("ok", result, mutated, notes)`` (``mutated``: index -> the argument's contents after the
call, for arguments the callable changed in place, so the parent's own mutation
check sees what happened in the child) or ``("raised", type_name, message, traceback, notes)``;
``notes["changed"]`` names the callable whose array result of the call before changed after
it was sent (a helper thread still writing into it: pickling copied it at return).

A callable that calls ``os.fork()`` and lets the child return from the call as well would
have two processes answer one call (and the next answers read out of turn). The worker
knows its own pid: a process that returns from a call with another pid is such a child; it
writes its pid on a side pipe and ends (``os._exit``) without answering, and the worker's
answer's ``notes["forked"]`` has the pids of the children that returned (waited for briefly after
a call that forked, so a child running the rest of the call is counted with it; one
returning later is counted with the next answer). Children that never return from the call
(a ``multiprocessing`` pool's, an ``exec``) are no finding.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

#: Seconds a single call may take before the worker is killed and the call reported as hung.
DEFAULT_TIMEOUT = 120.0
#: Seconds a fresh-interpreter worker may take to start and load its functions (importing their
#: frameworks: TensorFlow takes tens of seconds on a loaded machine), not counted in a call's timeout.
START_TIMEOUT = 600.0


class Crashed(Exception):
    """The worker died (or hung) during a call.

    Attributes:
      signal: the signal's name (``"SIGABRT"``, ``"SIGSEGV"``, ``"SIGFPE"``), or None
        when the worker exited with a status or was killed for hanging.
      description: a human phrase: ``"killed by SIGFPE (floating-point exception)"``.
    """

    def __init__(self, description: str, signal_name: str | None = None):
        super().__init__(description)
        self.description = description
        self.signal = signal_name


class TimedOut(Crashed):
    """The call did not return within the worker's timeout; the worker was killed."""


class Raised(Exception):
    """The callable raised in the worker: its type name, message, traceback text and carried findings."""

    def __init__(self, type_name: str, message: str, traceback_text: str = "", findings: tuple[Any, ...] = ()):
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.message = type_name, message
        self.traceback_text = traceback_text
        self.symjac_findings = findings  # (check._report.carried reads them)


def describe_exit(exitcode: int | None) -> tuple[str, str | None]:
    """A child's exit code as (phrase, signal name or None)."""
    if exitcode is None:
        return "did not finish", None
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
        except ValueError:
            return f"killed by signal {-exitcode}", None
        return f"killed by {sig.name} ({signal.strsignal(sig) or sig.name})", sig.name
    return f"exited with status {exitcode}", None


def _default_signals() -> None:
    """Default actions for the crash signals, before every call: GMP (through gmpy2, which
    SymPy imports, perhaps only during the previous call) installs a C handler that turns
    SIGFPE into abort(); the parent should see the signal the op raised."""
    for name in ("SIGFPE", "SIGSEGV", "SIGBUS", "SIGILL"):
        if hasattr(signal, name):
            try:
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            except (OSError, ValueError):
                pass


#: Seconds the worker waits at most, after a call that forked, for a child to return from it.
FORK_WAIT = 5.0


class _Forks:
    """The worker's watch on forks of the callables (see the module's docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.count = 0  # forks (os.fork) during the current call, in the worker
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)
        self.unreaped: set[int] = set()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_parent=self._forked)

    def _forked(self) -> None:
        if os.getpid() == self.pid:
            self.count += 1

    def end_child(self) -> None:
        """In a process that returned from a call: a forked child, unless this is the worker."""
        if os.getpid() != self.pid:
            try:
                os.write(self.write, os.getpid().to_bytes(8, "little"))
            finally:
                os._exit(0)

    def returned(self, seconds: float) -> list[int]:
        """Pids of children that returned from a call: waits up to twice the call's ``seconds``
        (bounded by :data:`FORK_WAIT`) for each fork of this call to report."""
        pids: list[int] = []
        deadline = time.monotonic() + min(FORK_WAIT, 0.1 + 2 * seconds) if self.count else 0.0
        while True:
            try:
                data = os.read(self.read, 8 * 64)
            except BlockingIOError:
                data = b""
            pids += [int.from_bytes(data[k:k + 8], "little") for k in range(0, len(data) - 7, 8)]
            left = deadline - time.monotonic()
            if data:
                continue  # read all there is first
            if len(pids) >= self.count or left <= 0:
                break
            select.select([self.read], [], [], left)
        self.unreaped.update(pids)
        for pid in list(self.unreaped):  # reap the children that ended (they are ours to wait for)
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.unreaped.discard(pid)
            except ChildProcessError:
                self.unreaped.discard(pid)
        self.count = 0
        return pids


def _changed(previous: tuple[str, np.ndarray, bytes] | None) -> str | None:
    """The callable's name when its previous array result no longer holds its bytes at return."""
    return previous[0] if previous is not None and previous[1].tobytes() != previous[2] else None


def _serve(conn: Any, functions: Mapping[str, Callable[..., Any]]) -> None:
    """The child's loop: call, answer, repeat until the parent closes the pipe."""
    try:  # a crashing op should not litter core files
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    try:  # gmpy2 installs its SIGFPE handler on import: import it now, so the reset before each call wins
        import gmpy2  # noqa: F401
    except ImportError:
        pass
    import faulthandler  # (pytest enables it: a crash here is the parent's to report, not a traceback dump)

    faulthandler.disable()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        # A forked child inherits PyTorch's OpenMP state but not its threads: a parallel
        # op would wait for them forever. One thread needs no team (DataLoader does the same).
        torch.set_num_threads(1)
    forks = _Forks()
    last: tuple[str, np.ndarray, bytes] | None = None  # the last call's name, array result and its bytes then
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:  # the parent's stop request (with fork the child holds a copy of the
            return           # parent's end of the pipe too, so closing it is not an EOF here)
        name, args = message
        previous, last = last, None  # the last call's result: changed since it returned (a helper thread)?
        _default_signals()
        before = [a.tobytes() if isinstance(a, np.ndarray) else None for a in args]
        started = time.monotonic()
        try:
            with np.errstate(all="ignore"):
                result = functions[name](*args)
        except BaseException as exc:  # noqa: BLE001 - everything the callable does is reported
            forks.end_child()
            changed = _changed(previous)
            notes = {"forked": forks.returned(time.monotonic() - started), "changed": changed,
                     "findings": getattr(exc, "symjac_findings", ())}  # (plain tuples: a native route's findings)
            conn.send(("raised", type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)[-6:]), notes))
            continue
        forks.end_child()
        changed = _changed(previous)  # compared after this call too: a write that waits for the next launch
        notes = {"forked": forks.returned(time.monotonic() - started), "changed": changed}
        mutated = {i: a for i, (a, b) in enumerate(zip(args, before)) if b is not None and a.tobytes() != b}
        try:
            payload = pickle.dumps(("ok", result, mutated, notes), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - e.g. a framework tensor that does not pickle
            try:
                result = np.asarray(result)
                payload = pickle.dumps(("ok", result, mutated, notes), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001
                conn.send(("raised", "TypeError", f"returned a {type(result).__name__} that cannot leave the "
                                                  f"worker process ({type(exc).__name__}: {exc})", "", notes))
                continue
        if isinstance(result, np.ndarray) and not any(isinstance(a, np.ndarray) and np.may_share_memory(a, result)
                                                      for a in args):
            last = (name, result, result.tobytes())
        conn.send_bytes(payload)


def _tensorflow_ran() -> bool:
    context = sys.modules.get("tensorflow.python.eager.context")
    state = getattr(context, "_context", None)
    return bool(getattr(state, "_initialized", False))


def _jax_ran() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


#: Frameworks whose thread pools a forked child lacks, and whether one has run in this process (its
#: runtime started): its ops in a ``fork`` worker can then wait forever for threads that exist only
#: here, so that a crash of the op shows as a hang (PyTorch's are made safe in the child instead).
FORK_UNSAFE = {"TensorFlow": _tensorflow_ran, "JAX": _jax_ran}


def fork_unsafe() -> list[str]:
    """The :data:`FORK_UNSAFE` frameworks that have run in this process."""
    return [name for name, ran in FORK_UNSAFE.items() if ran()]


def default_method() -> str:
    """``"fork"`` where the platform has it (Linux), else ``"exec"``."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin" else "exec"


def _exec_main(fd: int) -> None:
    """Entry point of an ``"exec"`` worker: a fresh interpreter serving on socket ``fd``.

    The parent sends its ``sys.path`` first (so the functions unpickle as they import
    there), then the functions (pickled by reference: importable module-level callables).
    """
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: end at once, no traceback; the parent reports it
    conn = Connection(fd)
    sys.path[:] = conn.recv()
    try:
        functions = conn.recv()
        if isinstance(functions, bytes):  # cloudpickle's (closures by value): see Worker
            functions = pickle.loads(functions)
    except Exception as exc:  # noqa: BLE001 - the parent falls back to a fork
        conn.send(("unloadable", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready",))  # loaded (frameworks imported): the calls' clocks start now
    _serve(conn, functions)


class _Exec:
    """A fresh-interpreter child (``subprocess``) with the slice of the ``Process`` interface
    the worker uses. Unlike multiprocessing's spawn it does not re-import the parent's
    ``__main__`` (a script or ``python -m symjac`` without a main guard would run again)."""

    def __init__(self, fd: int):
        import subprocess

        code = "import sys; from symjac.run._isolate import _exec_main; _exec_main(int(sys.argv[1]))"
        self.popen = subprocess.Popen([sys.executable, "-c", code, str(fd)], pass_fds=(fd,))

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        import subprocess

        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        self.popen.kill()

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()  # negative: killed by that signal, as for multiprocessing


class Worker:
    """Named callables served by a child process, restarted after each crash.

    Args:
      functions: name -> callable. With ``"exec"`` they must pickle (module-level
        functions of importable modules).
      timeout: seconds one call may take (None: no limit).
      method: ``"fork"`` (the child inherits the callables and everything else: fast,
        needs nothing picklable, but unsafe once a multithreaded framework has run in
        this process) or ``"exec"`` (a fresh interpreter: safe whatever ran here, costs
        an interpreter start and the framework's import); default :func:`default_method`.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, functions: Mapping[str, Callable[..., Any]], *, timeout: float | None = DEFAULT_TIMEOUT,
                 method: str | None = None):
        self.functions = dict(functions)
        self.timeout = timeout
        self.method = method or default_method()
        if self.method not in ("fork", "exec"):
            raise ValueError(f"method={method!r}: give 'fork' or 'exec'")
        #: The functions pickled by value (cloudpickle), for an ``exec`` worker chosen in place of a fork.
        self.payload: bytes | None = None
        self.pending: Any = None  # an answer read while waiting for a fresh interpreter's start
        #: Why a worker's hang may be no hang of the implementation (a fork after TensorFlow ran), or "".
        self.note = ""
        unsafe = fork_unsafe() if method is None and self.method == "fork" else []
        if unsafe:
            self._exec_instead(unsafe)
        self.process: Any = None
        self.conn: Any = None
        self.crashes = 0
        #: Pids of forked children of the callable that returned from the last call (see the module's docstring).
        self.forked: list[int] = []
        #: The name of the callable whose result (of the call before the last) changed after it returned, or None.
        self.changed: str | None = None

    def _exec_instead(self, unsafe: list[str]) -> None:
        """The default ``fork`` after a :data:`FORK_UNSAFE` framework has run here: a fresh
        interpreter instead, the functions (closures too) pickled by value with cloudpickle;
        without cloudpickle, or for functions it cannot pickle, a fork as before, and
        :attr:`note` says why a call of that framework may hang there."""
        frameworks = " and ".join(unsafe)
        try:
            import cloudpickle

            self.payload = cloudpickle.dumps(self.functions)
            pickle.loads(self.payload)
        except Exception as exc:  # noqa: BLE001 - no cloudpickle, or functions it cannot pickle
            self.payload = None
            self.note = (f"{frameworks} ran in this process before its worker was forked, and a fork has none of "
                         f"its threads: its ops can hang there (a fresh interpreter needs the callables to "
                         f"pickle by value: {type(exc).__name__}: {exc})")
            return
        self.method = "exec"

    def _start(self) -> None:
        if self.method == "exec":
            import socket
            from multiprocessing.connection import Connection

            mine, theirs = socket.socketpair()
            self.process = _Exec(theirs.fileno())
            theirs.close()
            self.conn = Connection(mine.detach())
            self.conn.send(list(sys.path))
            self.conn.send(self.payload if self.payload is not None else self.functions)
            self._await_ready()
            return
        context = multiprocessing.get_context("fork")
        parent, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, self.functions), daemon=True)
        # A daemonic process (a Dask worker) may not start children through multiprocessing;
        # the worker is ours to reap (close / kill), so the check does not apply to it.
        me = multiprocessing.current_process()
        daemonic = me.daemon
        if daemonic:
            me._config["daemon"] = False  # type: ignore[attr-defined]
        try:
            self.process.start()
        finally:
            if daemonic:
                me._config["daemon"] = True  # type: ignore[attr-defined]
        child.close()
        self.conn = parent

    def _await_ready(self) -> None:
        """Wait for a fresh interpreter's ``ready`` (or ``unloadable``, left for :meth:`call` to read)."""
        deadline = time.monotonic() + max(START_TIMEOUT, self.timeout or 0.0)
        while not self.conn.poll(0.05):
            if not self.process.is_alive() or time.monotonic() > deadline:
                return  # call() sees the dead or hung worker
        try:
            answer = self.conn.recv()
        except (EOFError, OSError):
            return
        if answer[0] != "ready":
            self.pending = answer

    def _stop(self, kill: bool = False) -> None:
        if self.process is None:
            return
        if self.conn is not None:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.conn.close()
        if kill and self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.process = self.conn = None

    def call(self, name: str, *args: Any) -> Any:
        """Run ``functions[name](*args)`` in the child.

        Arrays the callable changed in place are changed the same way here.

        Raises:
          Crashed: the child died (a signal or an exit) or exceeded the timeout.
          Raised: the callable raised (its type name and message).
        """
        self.forked, self.changed = [], None
        if self.process is None or not self.process.is_alive():
            self._start()
        try:
            self.conn.send((name, args))
        except (BrokenPipeError, OSError):
            return self._crashed()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while self.pending is None and not self.conn.poll(0.05):
            if not self.process.is_alive():
                if self.conn.poll(0):  # answered just before exiting
                    break
                return self._crashed()
            if deadline is not None and time.monotonic() > deadline:
                self._stop(kill=True)
                self.crashes += 1
                raise TimedOut(f"did not return within {self.timeout:g} s (killed)")
        try:
            answer = self.pending or pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            return self._crashed()
        self.pending = None
        if answer[0] == "unloadable":  # the fresh interpreter could not load the functions: fork, as before
            self._stop(kill=True)
            self.method, self.payload = "fork", None
            self.note = f"the worker runs forked: a fresh interpreter could not load the callables ({answer[1]})"
            return self.call(name, *args)
        *answer, notes = answer
        self.forked, self.changed = notes["forked"], notes["changed"]
        if answer[0] == "raised":
            raise Raised(answer[1], answer[2], answer[3], findings=notes.get("findings", ()))
        _, result, mutated = answer
        for i, value in mutated.items():
            if isinstance(args[i], np.ndarray) and args[i].flags.writeable:
                args[i][...] = value
        return result

    def _crashed(self) -> Any:
        self.process.join(5)
        phrase, sig = describe_exit(self.process.exitcode)
        self._stop(kill=True)
        self.crashes += 1
        raise Crashed(phrase, sig)

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self._stop(kill=True)
        except Exception:  # noqa: BLE001 - e.g. in a forked child, which cannot join its sibling
            pass
