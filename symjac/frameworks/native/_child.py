"""A native kernel's process: start it once, exchange one request and response at a time.

Every exchange runs in one ``selectors`` loop with a deadline: the request is written
(non-blocking) while the response is read and the child's stderr drained, so neither
a child that stops reading, nor one that answers before reading everything, nor one
that fills its stderr can block symjac. Any failure (a refusal aside) kills the child;
the next call starts a fresh one. Nothing here waits without a deadline.

The kernel runs in a session (and process group) of its own, with its allocator perturbed
(:func:`symjac.frameworks.native._poison.perturbed_env`): when symjac ends it, whatever the
kernel started is ended with it. Its leader is watched without being reaped (``waitid`` with
``WNOWAIT``) until the group is killed, so the group's id cannot meanwhile go to another process.
"""

from __future__ import annotations

import collections
import itertools
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from symjac.frameworks.native._poison import perturbed_env
from symjac.frameworks.native._stderr import NotableLines
from symjac.frameworks.native._wire import (
    MAX_HEADER,
    RESPONSE,
    BadCommand,
    ChildCrashed,
    ChildError,
    ChildTimeout,
    KernelRefused,
    ProtocolError,
    Request,
    Response,
    parse_response,
)

#: Seconds one request may take (writing it, the kernel's work, reading the answer).
DEFAULT_TIMEOUT = 30.0
#: Bytes of the child's stderr kept for messages (the latest).
STDERR_TAIL = 4096
#: Characters of the stderr tail a message quotes.
QUOTED_TAIL = 600
_CHUNK = 1 << 16
_FIRST_LINE = RESPONSE.encode() + b"\n"


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """The process has ended. Where the platform allows (``waitid``), without reaping it: its pid,
    which is its process group's id, then stays reserved until :func:`_end` has killed the group."""
    if proc.returncode is not None:
        return True
    if hasattr(os, "waitid"):
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped already (not by us): as poll() says
            pass
    return proc.poll() is not None


def _end(proc: subprocess.Popen[bytes]) -> int:
    """Kill what is left of the kernel's process group (its own children, and itself if it still
    runs), reap it and close its pipes; its exit status."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        if not _exited(proc):  # (signals take a moment; and a kernel that left its group still ends)
            try:
                proc.kill()
            except OSError:
                pass
    code = proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return code


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a child: close its stdin (a driver then exits 0), wait 1 s for it, then end its group."""
    if not _exited(proc):
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + 1.0
        while not _exited(proc) and time.monotonic() < deadline:
            time.sleep(0.005)
    _end(proc)


def _unrunnable(program: str, env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> str | None:
    """Why ``program`` cannot be started (as :class:`subprocess.Popen` would look it up), or None."""
    if os.sep in program or (os.altsep and os.altsep in program):
        path = os.path.join(os.fspath(cwd), program) if cwd is not None else program
        where = f" (in {os.fspath(cwd)})" if cwd is not None else ""
        if not os.path.exists(path):
            return f"{program} does not exist{where}"
        if os.path.isdir(path):
            return f"{program} is a directory, not a program{where}"
        if not os.access(path, os.X_OK):
            return f"{program} is not executable{where} (chmod +x {program})"
        return None
    search = (os.environ if env is None else env).get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        here = os.path.join(os.fspath(cwd) if cwd is not None else ".", program)
        hint = f"; for the one in this folder write ./{program}" if os.path.exists(here) else ""
        return f"no program {program!r} on PATH{hint}"
    return None


class _Retired(Exception):
    """The child exited with code 0 after answering, before reading the next request (a program
    serving one request per run): the request goes to a fresh child."""


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} ({signal.strsignal(-code) or 'unknown signal'})"
    return f"exited with code {code}"


class Child:
    """A kernel program speaking the symjac native protocol on its stdin/stdout.

    Args:
      cmd: the command: a string (split as a shell would, with :func:`shlex.split`; not
        run through a shell) or an argument list.
      timeout: seconds each request may take (the requests of one call share it: ``exchange``'s
        ``deadline``); a request that takes longer kills the child
        (:class:`ChildTimeout`) and the next request starts a fresh one.
      env, cwd: as for :class:`subprocess.Popen` (the allocator's perturbation is added to
        ``env`` unless it sets its own: :func:`symjac.frameworks.native._poison.perturbed_env`).

    Raises:
      BadCommand: ``cmd`` is empty or not a command line, or its program is missing, not
        executable or a directory.

    The child is started at the first request and ended by :meth:`close` (also when the
    object is collected, and at exit). Requests from several threads are served one at a
    time; a request that finds the previous one still waiting for the child (symjac's
    guard gave up on it) kills the child, so the earlier call fails at once instead of
    holding this one.
    """

    def __init__(self, cmd: str | Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None):
        try:
            self.argv = shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
        except ValueError as exc:  # an unbalanced quote
            raise BadCommand(f"the kernel command {cmd!r} is not a command line ({exc}; it is split as a shell "
                             "would, without running one)") from None
        if not self.argv:
            raise BadCommand("the kernel command is empty")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ChildError(f"timeout={timeout!r} is not valid: give seconds > 0")
        self.timeout = float(timeout)
        self.env, self.cwd = (dict(env) if env is not None else None), cwd
        problem = _unrunnable(self.argv[0], self.env, cwd)
        if problem is not None:
            raise BadCommand(f"cannot run kernel `{self.command}`: {problem}")
        self.starts = 0  # processes started so far (restarts show here)
        self._served = 0  # requests the running process has answered
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: Any = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._killed: subprocess.Popen[bytes] | None = None  # the process symjac killed itself, if any
        self._last = "none yet"  # the last request answered, for messages
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._notable = NotableLines()  # the running process's line that says what went wrong

    @property
    def command(self) -> str:
        """The command line, quoted as a shell would read it."""
        return shlex.join(self.argv)

    @property
    def _name(self) -> str:
        return f"kernel `{self.command}`"

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the child (stdin closed; killed after 1 s if it does not exit)."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._finalizer = None

    def next_id(self) -> int:
        return next(self._ids)  # atomic: callers in several threads get distinct ids

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-STDERR_TAIL:]

    def stderr_notable(self) -> list[str]:
        """The first line of the running (or last) process's stderr that says what went wrong
        (:data:`symjac.frameworks.native._stderr.NOTABLE`: a sanitizer's `ERROR:` line, UBSan's
        `runtime error:`, a C++ exception's `terminate called ...`), and the line right after it if
        it matches too (the exception's `what():`); kept wherever the tail has moved since."""
        return self._notable.lines()

    def _stderr_says(self) -> str:
        """For a message: the notable lines the quoted tail does not show, then the tail."""
        err = self.stderr_tail().strip()
        tail = err[-QUOTED_TAIL:]
        notable = [line for line in self.stderr_notable() if line and line not in tail]
        said = f"; its stderr says {' '.join(repr(line) for line in notable)}" if notable else ""
        if not err:
            return said
        return said + (" and ends: " if said else "; its stderr ends: ") + repr(tail)

    # ------------------------------------------------------------------ one request

    def exchange(self, req: Request, deadline: float | None = None) -> tuple[Response, memoryview]:
        """Send ``req`` and return the response header and payload.

        ``deadline``: a :func:`time.monotonic` time the answer must arrive by (several requests of
        one call share one); by default :attr:`timeout` from now.

        Raises:
          KernelRefused: the kernel answered ``status error`` (the child keeps running).
          ChildTimeout, ChildCrashed, ProtocolError: the child is killed; the next call restarts it.
        """
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=0.05):
            # an abandoned call (symjac's guard timed out) holds the child: kill it, so that call fails now
            proc = self._proc
            if proc is not None and not _exited(proc):
                self._killed = proc
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
            if not self._lock.acquire(timeout=self.timeout):
                raise ChildTimeout(f"{self._name}: an earlier request still holds the child")
        try:
            try:
                resp, payload = self._exchange(req, deadline)
            except _Retired:  # it served one request and exited: a fresh child for this one
                self._kill()
                resp, payload = self._exchange(req, deadline)
        except BaseException as exc:  # the stream is out of step (or interrupted): a fresh child next time
            abandoned = self._killed is not None and self._killed is self._proc
            self._kill()
            if abandoned and isinstance(exc, ChildCrashed):
                raise ChildTimeout(f"{self._name} was still busy with request {req.id} ({req.op}) when "
                                   "symjac gave up on it (its guard's timeout) and a later call killed it") from None
            raise
        finally:
            self._lock.release()
        if resp.status == "error":
            raise KernelRefused(f"{self._name} refused {req.op} (request {req.id}): {resp.message}", resp.outside)
        return resp, payload

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            # a session of its own: killing its group ends what the kernel started too
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=perturbed_env(self.env), cwd=self.cwd, bufsize=0,
                                    start_new_session=True)
        except OSError as exc:
            raise ChildCrashed(f"cannot start {self._name}: {exc}") from None
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
        self.starts += 1
        self._served = 0
        self._notable = NotableLines()
        self._proc = proc
        self._finalizer = weakref.finalize(self, _stop, proc)
        return proc

    def _kill(self) -> None:
        """Kill the child (its process group) and reap it; the next request starts a fresh one."""
        if self._proc is not None:
            _end(self._proc)
        self.close()
        self._killed = None

    def _keep_stderr(self, data: bytes) -> None:
        self._stderr.append(data)
        self._stderr_size += len(data)
        while self._stderr_size > STDERR_TAIL and len(self._stderr) > 1:
            self._stderr_size -= len(self._stderr.popleft())
        self._notable.feed(data)

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        """Keep what the (ended) child left in its stderr pipe: a sanitizer writes its report just
        before it exits, and symjac may see stdout close before reading it. Bounded (a process the
        kernel started may hold the pipe open and go on writing)."""
        if proc.stderr is None or proc.stderr.closed:
            return
        for _ in range(64):
            try:
                data = os.read(proc.stderr.fileno(), _CHUNK)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            self._keep_stderr(data)

    def _where(self, req: Request, got: int, total: int | None) -> str:
        of = f" of {total}" if total is not None else ""
        return f"(request {req.id}, {req.op}: {got}{of} response bytes received)" + self._stderr_says()

    def _reap(self, proc: subprocess.Popen[bytes]) -> tuple[int | None, str]:
        """Its exit status and how it ended, once it closed its stdout (killed after 2 s if it runs on)."""
        deadline = time.monotonic() + 2.0
        while not _exited(proc) and time.monotonic() < deadline:
            time.sleep(0.005)
        if not _exited(proc):
            _end(proc)
            return None, "closed its stdout but kept running (killed)"
        self._drain_stderr(proc)
        code = _end(proc)
        return code, describe_exit(code)

    def _ended_early(self, proc: subprocess.Popen[bytes], req: Request, out: bytearray, total: int | None) -> None:
        """The child ended before its answer was whole: :class:`_Retired` when it had answered before
        and exited 0 without a byte of this one (one request per run), else :class:`ChildCrashed`."""
        status, how = self._reap(proc)
        if status == 0 and not out and self._served:
            raise _Retired()
        raise ChildCrashed(f"{self._name} {how} before answering {self._where(req, len(out), total)}")

    def _exchange(self, req: Request, deadline: float) -> tuple[Response, memoryview]:
        proc = self._proc
        if proc is not None and _exited(proc):
            ours = self._killed is proc
            self._drain_stderr(proc)
            code = _end(proc)
            self.close()
            self._killed = None
            # exit code 0 after an answer (a program serving one request per run) or our own kill: restart;
            # a crash between requests is the kernel's
            if code and not ours:
                raise ChildCrashed(f"{self._name} {describe_exit(code)} between requests, after answering "
                                   f"{self._last}{self._stderr_says()}")
            proc = None
        if proc is None or self._finalizer is None or not self._finalizer.alive:
            proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stray = self._read_now(proc)
        if stray:
            raise ProtocolError(f"{self._name} wrote {len(stray)} bytes out of turn, before request {req.id} "
                                f"(after answering {self._last}): {stray[:48]!r}")
        sel = selectors.DefaultSelector()
        out = bytearray()
        pending = [memoryview(req.header), *(memoryview(p) for p in req.payload if p)]
        try:
            sel.register(proc.stdout, selectors.EVENT_READ, "out")
            sel.register(proc.stderr, selectors.EVENT_READ, "err")
            if pending:
                sel.register(proc.stdin, selectors.EVENT_WRITE, "in")
            header_end, resp, total = -1, None, None
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChildTimeout(f"{self._name} did not answer within {self.timeout:g} s "
                                       f"{self._where(req, len(out), total)}; it was killed")
                events = sel.select(min(left, 1.0))
                if not events and _exited(proc):  # dead, its stdout held open by a process it started
                    self._ended_early(proc, req, out, total)
                for key, _ in events:
                    if key.data == "in":
                        pending = self._write(proc, pending, sel)
                        continue
                    try:
                        data = os.read(key.fileobj.fileno(), _CHUNK)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    if key.data == "err":
                        if data:
                            self._keep_stderr(data)
                        else:
                            sel.unregister(proc.stderr)
                        continue
                    if not data:  # stdout closed: the child ended (or closed it)
                        self._ended_early(proc, req, out, total)
                    out += data
                if resp is None:
                    header_end = out.find(b"\n\n")
                    if header_end < 0 and len(out) > MAX_HEADER:
                        raise ProtocolError(f"{self._name} wrote {len(out)} bytes with no end of a response "
                                            f"header: it begins {bytes(out[:48])!r}")
                    if header_end >= 0:
                        if pending:
                            raise ProtocolError(f"{self._name} answered request {req.id} before reading "
                                                "all of it (out of turn)")
                        resp = parse_response(bytes(out[:header_end]), req)
                        total = header_end + 2 + resp.nbytes
                    elif not _FIRST_LINE.startswith(bytes(out[:len(_FIRST_LINE)])):
                        raise ProtocolError(f"{self._name}'s answer does not begin with {RESPONSE!r}: "
                                            f"it begins {bytes(out[:48])!r}")
                if total is not None and len(out) >= total:
                    break
            sel.unregister(proc.stdout)
        finally:
            sel.close()
        assert resp is not None and total is not None
        extra = len(out) - total + len(self._read_now(proc))
        if extra:
            raise ProtocolError(f"{self._name} wrote {extra} bytes more than its response to request {req.id} "
                                f"({req.op}) announces ({resp.nbytes} payload bytes)")
        self._last = f"request {req.id} ({req.op})"
        self._served += 1
        return resp, memoryview(out)[header_end + 2:total]

    def _write(self, proc: subprocess.Popen[bytes], pending: list[memoryview],
               sel: selectors.BaseSelector) -> list[memoryview]:
        assert proc.stdin is not None
        try:
            while pending:
                n = os.write(proc.stdin.fileno(), pending[0])
                pending[0] = pending[0][n:]
                if len(pending[0]):
                    break
                pending.pop(0)
        except BlockingIOError:
            return pending
        except (BrokenPipeError, ConnectionResetError):
            pending = []  # it stopped reading; its exit shows on stdout
        if not pending:
            sel.unregister(proc.stdin)
        return pending

    def _read_now(self, proc: subprocess.Popen[bytes]) -> bytes:
        """Whatever the child has written to stdout and not yet been read (stderr kept)."""
        assert proc.stdout is not None and proc.stderr is not None
        got = bytearray()
        for stream in (proc.stderr, proc.stdout):
            while True:
                try:
                    data = os.read(stream.fileno(), _CHUNK)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                if stream is proc.stderr:
                    self._keep_stderr(data)
                else:
                    got += data
        return bytes(got)
