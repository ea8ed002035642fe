"""The offline route: record the native protocol's requests, answer them elsewhere, replay.

For a kernel that runs on another machine (a board, a cluster, a C++ test suite's CI),
verification runs in rounds, because ``verify`` is adaptive (its diagnosis makes calls
that depend on earlier answers):

1. :func:`run_offline` verifies a case with a transport that answers each request from
   the folder: the response file of the request's content hash (``<hash>.response``
   beside ``<hash>.request``). A request without one raises :class:`Unanswered`, which
   the guarded call lets through (it is no finding), and the verification stops; a
   second, speculative run (unanswered calls answered with zeros, its report discarded)
   then records every request it could not answer, and the round's requests are written
   (``index.json`` lists them).
2. The remote side answers every request without a response (:func:`answer`, or
   ``python -m symjac.frameworks._offline DIR --exec CMD``).
3. :func:`run_offline` again: once every request is answered it returns the very
   :class:`symjac.Report` ``verify`` gives in process; otherwise the next round.

A request is the process route's request (docs/native.md) with ``id 0``; its name is the
sha256 of those bytes (op, settings, arrays, and the poisoned run's lines), so equal calls share
one answer (a nondeterministic kernel cannot show offline). Each call is poisoned as on the
process route (:func:`symjac.frameworks.native._poison.settle`): its runs are requests of their
own (``poison``, ``perturb``, ``repeat`` lines), and a response keeps its driver's ``poison`` echo
and ``outside`` lines, so a kernel answered with ``--exec`` gets the process route's findings. A
second run counts only when the first one's response echoes the poison (a Python implementation
answered with ``--impl`` has nothing to poison: one run a call; the first round asks for second runs
too, unused then, as nothing says yet who answers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import write_bytes, write_text
from symjac._errors import SymjacError, UsageError
from symjac.check._invoke import Unanswered
from symjac.frameworks._adapter import Impl
from symjac.frameworks.native._child import Child
from symjac.frameworks.native._calls import NOT_IN_PROTOCOL, LossCalls, spec_calls
from symjac.frameworks.native._poison import Poison, Run, buffer_sizes, echoed, protocol_lines, settle
from symjac.frameworks.native._wire import (
    REQUEST,
    RESPONSE,
    ChildError,
    KernelRefused,
    Request,
    Response,
    array_line,
    numpy_dtype,
    parse_response,
    request,
    unpack,
    wire_dtype,
    write_back,
)
from symjac.loss._spec import Loss
from symjac.run._load import load_impl
from symjac.io._case import verify_case
from symjac.frameworks._adapter import LossImpl

__all__ = ["Unanswered", "answer", "read_request", "run_offline"]

INDEX = "index.json"
#: Each op's arguments, in the order the implementation's callable takes them.
ARGUMENTS = {"forward": ("x",), "backward": ("x", "dy"), "loss": ("pred", "label"),
             "derivative": ("pred", "label", "upstream")}


def key(req: Request) -> str:
    """The request's name: sha256 of its bytes (header with ``id 0``, then the payload)."""
    h = hashlib.sha256(req.header)
    for part in req.payload:
        h.update(part)
    return h.hexdigest()


def message(req: Request) -> bytes:
    return req.header + b"".join(req.payload)


class Replay:
    """The transport of :class:`PoolCalls`/:class:`LossCalls` answering from ``folder``.

    ``speculate``: answer an unanswered request with zeros (to learn the round's further
    requests) instead of raising :class:`Unanswered`; as from a kernel that poisons (so a call's
    second run is asked for in the same round) unless ``echoes`` is False: the answers read so
    far did not echo the poison (a Python implementation's). ``pending`` holds the unanswered
    requests; ``echoes`` whether the answers read echoed the poison (None: none read).
    """

    def __init__(self, folder: Path, speculate: bool = False, echoes: bool | None = None):
        self.folder, self.speculate, self.echoes = folder, speculate, echoes
        self.pending: dict[str, Request] = {}

    def __call__(self, op: str, lines: list[str], inputs: list[tuple[str, np.ndarray | None]],
                 output: tuple[str, str, tuple[int, ...]]) -> np.ndarray:
        return settle(lambda poison, repeat: self._run(op, lines, inputs, output, poison, repeat),
                      buffer_sizes(inputs, output), output, lambda first: write_back(first.states, [a for _, a in inputs]))

    def _run(self, op: str, lines: list[str], inputs: list[tuple[str, np.ndarray | None]],
             output: tuple[str, str, tuple[int, ...]], poison: Poison, repeat: int) -> Run:
        req = request(0, op, lines, inputs, output, protocol_lines(poison, output[1], repeat))
        name = key(req)
        path = self.folder / f"{name}.response"
        if not path.exists():
            self.pending[name] = req
            if not self.speculate:
                raise Unanswered(f"request {name[:12]} ({op}) has no response in {self.folder}")
            zeros = np.zeros(output[2], dtype=numpy_dtype(output[1]).newbyteorder("="))
            # a guess that the kernel poisons: the call's second run is asked for in this round too
            return Run(zeros, [None] * len(req.inputs), (), self.echoes is not False)
        data = path.read_bytes()
        head, sep, payload = data.partition(b"\n\n")
        if not sep:
            raise KernelRefused(f"the response file {path} has no header")
        resp = parse_response(head, req)
        if resp.status == "error":
            raise KernelRefused(f"kernel refused {op} (request {name[:12]}): {resp.message}", resp.outside)
        result, states = unpack(resp, payload, req)
        poisoned = echoed(resp, poison, output[1])
        self.echoes = poisoned if self.echoes is None else self.echoes and poisoned
        return Run(result, states, resp.outside, poisoned)


def _impl(operator: Any, send: Replay, folder: Path) -> Impl | LossImpl:
    if isinstance(operator, Loss):
        calls = LossCalls(send, operator)
        return LossImpl(loss=operator, derivative=calls.derivative, forward=calls.forward)
    pool = spec_calls(send, operator)
    return Impl(forward=pool.forward, backward=pool.backward, framework="offline", op=str(folder),
                missing=NOT_IN_PROTOCOL)


def run_offline(case: Any, folder: str | Path, dtype: str = "float64", timeout: float | None = 60.0) -> Any:
    """Verify a spec-file case from the answers in ``folder``.

    Returns the :class:`symjac.Report` (every request answered: the report ``verify`` gives
    the kernel in process), or the number of requests of the next round, written to
    ``folder`` (created if missing) and listed in its ``index.json``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    strict = Replay(folder)
    try:
        return verify_case(case, _impl(case.operator, strict, folder), dtype, timeout)
    except Unanswered:
        pass
    guess = Replay(folder, speculate=True, echoes=strict.echoes)
    verify_case(case, _impl(case.operator, guess, folder), dtype, timeout)  # only its requests count
    pending = {**strict.pending, **guess.pending}
    for name, req in pending.items():
        write_bytes(folder / f"{name}.request", message(req))
    index = folder / INDEX
    listed = json.loads(index.read_text()) if index.exists() else {"requests": []}
    known = {r["request"] for r in listed["requests"]}
    listed["requests"] += [{"request": f"{n}.request", "op": r.op, "case": case.name}
                           for n, r in pending.items() if f"{n}.request" not in known]
    write_text(index, json.dumps(listed, indent=1) + "\n")
    return len(pending)


def read_request(data: bytes) -> tuple[str, list[str], list[tuple[str, np.ndarray]], tuple[str, str, tuple[int, ...]]]:
    """A request file as ``(op, lines, inputs, output)``: what :func:`request` was given (the lines:
    the settings, then those of a poisoned run, which a kernel's driver reads wherever they stand)."""
    head, _, payload = data.partition(b"\n\n")
    lines = head.decode("ascii").split("\n")
    if lines[0] != REQUEST:
        raise ChildError(f"not a symjac request: it begins {data[:48]!r}")
    op, settings = "", []
    shapes: list[tuple[str, str, tuple[int, ...]]] = []
    output: tuple[str, str, tuple[int, ...]] | None = None
    for line in lines[1:]:
        word, _, rest = line.partition(" ")
        words = rest.split()
        entry = (words[0], words[1], tuple(int(w) for w in words[3:])) if word in ("input", "output") else None
        if word == "op":
            op = rest
        elif word == "input" and entry is not None:
            shapes.append(entry)
        elif word == "output":
            output = entry
        elif word not in ("id", "bytes"):
            settings.append(line)
    inputs, offset = [], 0
    for name, dt, shape in shapes:
        dtype = numpy_dtype(dt)
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape)
        inputs.append((name, a.astype(dtype.newbyteorder("="))))
        offset += count * dtype.itemsize
    assert output is not None, "a request names its output"
    return op, settings, inputs, output


def response_bytes(op: str, output: str, result: np.ndarray | None, states: Sequence[tuple[str, np.ndarray | None]],
                   error: str = "", kernel: Response | None = None,
                   outside: Sequence[tuple[str, int, int]] = ()) -> bytes:
    """A response message (``id 0``): the result and each input's state (None: unchanged), or an error.

    ``kernel``: the kernel's own response, whose ``poison`` echo and ``outside`` lines are kept
    (``outside``: those of a refusal)."""
    kept = [f"outside {n} {a} {b}" for n, a, b in (kernel.outside if kernel is not None else outside)]
    if result is None:
        head = [RESPONSE, "id 0", f"op {op}", "status error", f"message {' '.join(error.split())}", *kept, "bytes 0"]
        return ("\n".join(head) + "\n\n").encode("ascii")
    arrays = [np.ascontiguousarray(result, dtype=result.dtype.newbyteorder("<"))]
    head = [RESPONSE, "id 0", f"op {op}", "status ok", array_line("output", output, wire_dtype(result), result.shape)]
    for name, state in states:
        if state is None:
            head.append(f"input {name} same")
        else:
            head.append(array_line("input", name, wire_dtype(state), state.shape))
            arrays.append(np.ascontiguousarray(state, dtype=state.dtype.newbyteorder("<")))
    if kernel is not None and kernel.poison is not None:
        head.append(f"poison {kernel.poison}")
    head += kept
    parts = [a.tobytes() for a in arrays]
    head.append(f"bytes {sum(map(len, parts))}")
    return ("\n".join(head) + "\n\n").encode("ascii") + b"".join(parts)


def _python_call(functions: dict[str, Callable[..., Any]], op: str,
                 inputs: list[tuple[str, np.ndarray]]) -> tuple[np.ndarray, list[np.ndarray | None]]:
    given = dict(inputs)
    args = [given.get(n) for n in ARGUMENTS[op]]
    while args and args[-1] is None:
        args.pop()
    before = {n: a.copy() for n, a in inputs}
    result = np.asarray(functions[op](*args))
    return result, [None if np.array_equal(a, before[n]) else a for n, a in inputs]


def answer(folder: str | Path, impl: Any = None, *, exec: str | Sequence[str] | None = None) -> int:
    """The remote side: answer every request in ``folder`` without a response, with a Python
    implementation (``forward``/``backward``, or a loss's ``derivative``/``forward``) or a
    kernel program (``exec``, the process route). Returns how many it answered."""
    folder = Path(folder)
    functions = {"forward": getattr(impl, "forward", None), "backward": getattr(impl, "backward", None),
                 "loss": getattr(impl, "forward", None), "derivative": getattr(impl, "derivative", None)}
    child = Child(exec) if exec is not None else None
    done = 0
    try:
        for path in sorted(folder.glob("*.request")):
            target = path.with_suffix(".response")
            if target.exists():
                continue
            op, lines, inputs, output = read_request(path.read_bytes())
            resp = None
            try:
                if child is not None:
                    req = request(child.next_id(), op, lines, inputs, output)
                    resp, payload = child.exchange(req)
                    result, changed = unpack(resp, payload, req)
                else:
                    result, changed = _python_call(functions, op, inputs)  # type: ignore[arg-type]
                data = response_bytes(op, output[0], result, [(n, s) for (n, _), s in zip(inputs, changed)],
                                      kernel=resp)
            except Exception as exc:  # noqa: BLE001 - the kernel's failure is its answer
                data = response_bytes(op, output[0], None, [], f"{type(exc).__name__}: {exc}",
                                      outside=getattr(exc, "outside", ()))
            write_bytes(target, data)
            done += 1
    finally:
        if child is not None:
            child.close()
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m symjac.frameworks._offline",
                                description="answer the requests of a symjac probes/check folder")
    p.add_argument("folder", metavar="DIR")
    p.add_argument("--exec", metavar="CMD", help="a kernel program speaking symjac's protocol (docs/native.md)")
    p.add_argument("--impl", metavar="MODULE_OR_PATH[:ATTR]", help="or a Python implementation")
    args = p.parse_args(argv)
    if (args.exec is None) == (args.impl is None):
        p.error("give --exec CMD or --impl MODULE_OR_PATH[:ATTR]")
    try:
        impl = load_impl(args.impl) if args.impl else None
        print(f"{answer(args.folder, impl, exec=args.exec)} request(s) answered in {args.folder}")
    except (SymjacError, UsageError, OSError) as exc:  # a command that cannot run, a folder that is none
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
