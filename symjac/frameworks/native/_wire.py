"""The native-kernel protocol's messages (docs/native.md): what a request says, and reading a response.

A message is ASCII header lines (``key value``), an empty line, then raw arrays,
little-endian and C order (the golden ``bin`` layout). The operator's settings are the
spec's fields written generically by :func:`symjac.io._operator.operator_fields` (one
line per field that is set, plus the resolved ``pads`` and ``rank`` of a pool; the golden
metadata's ``operator`` object is the same data), so nothing here depends on which operator it is:
both routes, the process (:mod:`symjac.frameworks.native.process`) and the shared library
(:mod:`symjac.frameworks.native.ctypes`), send the same lines.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import SpecError, SymjacError
from symjac.io._operator import operator_fields

PROTOCOL = 1
REQUEST = f"symjac {PROTOCOL} request"
RESPONSE = f"symjac {PROTOCOL} response"
#: A response header longer than this is garbage, not a header.
MAX_HEADER = 1 << 16
#: The dtypes the wire carries (NumPy's names; bfloat16 with ml_dtypes).
#: The settings bytes a request carries (contrib/symjac_driver.h's SYMJAC_SETTINGS less its '\\0'),
#: and the room kept in it for the ``rank`` and ``pads`` lines of an input shape.
MAX_SETTINGS, SHAPE_ROOM = 16383, 160
DTYPES = ("float16", "bfloat16", "float32", "float64", "int64", "int32", "int8", "uint8", "bool")


class ChildError(SymjacError, RuntimeError):
    """A native kernel failed a call: it refused, hung, crashed or broke the protocol.

    Raised by the callables of :mod:`symjac.frameworks.native.process` and ``ctypes``; symjac's
    guarded call turns it into a ``bad_output`` finding that quotes the message.
    """


class KernelRefused(ChildError):
    """The kernel answered ``status error`` (``symjac_fail``): it cannot serve the request.

    ``outside``: the byte ranges its driver found changed around the buffers (``outside`` lines of
    the response), if any: a refusal that wrote outside its buffers is a fault, not a refusal.
    """

    def __init__(self, message: str, outside: Sequence[tuple[str, int, int]] = ()):
        super().__init__(message)
        self.outside = tuple(outside)


class ChildTimeout(ChildError):
    """The child did not answer within the request's deadline (it was killed and is restarted)."""


class ChildCrashed(ChildError):
    """The child exited or was killed by a signal before it answered."""


class ProtocolError(ChildError):
    """The child's answer broke the protocol: garbage, a wrong byte count, or an answer out of turn."""


class BadCommand(ChildError):
    """The kernel command cannot be run: empty, not a command line (an unbalanced quote), or its
    program is missing, not executable or a directory. A usage error, raised when the command is given."""


for _error in (ChildError, KernelRefused, ChildTimeout, ChildCrashed, ProtocolError, BadCommand):
    _error.__module__ = "symjac.frameworks.native.process"  # where users import them from


def _text(value: Any) -> str:
    """A setting's value as the wire writes it: ints, 1/0, words, exact fractions, lists flat."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, Fraction):
        return str(value)  # "8" or "1/3": exact (symjac_setting_number reads both)
    if isinstance(value, (tuple, list)):
        return " ".join(_text(v) for v in value)
    return str(value)


def check_settings_fit(spec: Any) -> None:
    """Refuse a spec whose settings a request cannot carry (a RoI operator with many boxes).

    Raises:
      SpecError: its settings lines (and room for ``rank`` and ``pads``) take more than
        :data:`MAX_SETTINGS` bytes, the longest line named.
    """
    lines = settings(spec)
    size = sum(len(line) + 1 for line in lines) + SHAPE_ROOM
    if size > MAX_SETTINGS:
        longest = max(lines, key=len)
        raise SpecError(f"the settings of this {type(spec).__name__} take {size} bytes (the longest, {longest.split(' ')[0]!r}, "
                        f"{len(longest)}); a native request carries at most {MAX_SETTINGS} (contrib/symjac_driver.h's "
                        "SYMJAC_SETTINGS, the C ABI's settings): give fewer or shorter values, e.g. fewer boxes")


def settings(spec: Any, pads: tuple[tuple[int, int], ...] | None = None) -> list[str]:
    """The settings lines of ``spec`` (a pool, max unpooling or a loss; and, for a pool, its resolved ``pads``
    at one input shape)."""
    lines = [f"{key} {_text(value)}" for key, value in operator_fields(spec, pads).items()]
    for line in lines:
        if "\n" in line or not line.isascii():
            raise SymjacError(f"setting {line!r} cannot be written on the wire (one ASCII line each)")
    return lines


def wire_dtype(a: np.ndarray) -> str:
    name = a.dtype.name
    if name not in DTYPES:
        raise SymjacError(f"dtype {a.dtype} has no name on the native wire; give one of {', '.join(DTYPES)}")
    return name


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The little-endian NumPy dtype of a wire dtype name."""
    if name == "bfloat16":
        import ml_dtypes

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(name).newbyteorder("<")


def array_line(role: str, name: str, dtype: str, shape: tuple[int, ...]) -> str:
    return f"{role} {name} {dtype} {len(shape)}{''.join(f' {n}' for n in shape)}"


def capacity(output_shape: tuple[int, ...], inputs: Sequence[tuple[str, np.ndarray | None]]) -> int:
    """Elements of the output buffer a kernel gets (``output_capacity``): room for the output symjac
    expects and for one of any input's size, so a kernel may set another shape within it."""
    return max([math.prod(output_shape), *(a.size for _, a in inputs if a is not None)])


@dataclasses.dataclass(frozen=True)
class Request:
    """One request: its header text and the payload's parts (the inputs' bytes, in order).

    ``output`` is the name of the output, ``expected`` its dtype and shape as symjac expects them,
    ``capacity`` the elements the kernel may answer with (:func:`capacity`).
    """

    id: int
    op: str
    header: bytes
    payload: tuple[bytes, ...]
    inputs: tuple[tuple[str, np.ndarray], ...]
    output: str
    expected: tuple[str, tuple[int, ...]]
    capacity: int


def request(id: int, op: str, lines: Sequence[str], inputs: Sequence[tuple[str, np.ndarray | None]],
            output: tuple[str, str, tuple[int, ...]], protocol: Sequence[str] = ()) -> Request:
    """Build request ``id``: ``inputs`` (None ones left out) and the output symjac expects.

    ``protocol``: lines about the call rather than the operator (``poison``, ``perturb``, ``repeat``:
    :mod:`symjac.frameworks.native._poison`), written after the output line.
    """
    given = tuple((n, a) for n, a in inputs if a is not None)
    parts = tuple(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes() for _, a in given)
    head = [REQUEST, f"id {id}", f"op {op}", *lines,
            *(array_line("input", n, wire_dtype(a), a.shape) for n, a in given),
            array_line("output", *output), *protocol, f"bytes {sum(map(len, parts))}", "", ""]
    return Request(id, op, "\n".join(head).encode("ascii"), parts, given, output[0], (output[1], output[2]),
                   capacity(output[2], given))


@dataclasses.dataclass(frozen=True)
class Response:
    """A parsed response header: the arrays it announces, in payload order.

    ``poison``: the element the kernel's driver filled the output and the guard regions with
    (its echo of the request's ``poison`` line), or None when it did not say; ``outside``: each
    ``outside NAME FIRST LAST`` line, a buffer and the first and last byte (offsets from the
    buffer's start) the kernel changed around it.
    """

    status: str
    message: str
    output: tuple[str, str, tuple[int, ...]] | None
    inputs: tuple[tuple[str, str, tuple[int, ...]] | None, ...]  # None: "same"
    nbytes: int
    poison: str | None = None
    outside: tuple[tuple[str, int, int], ...] = ()


def _shape_of(words: list[str], line: str) -> tuple[str, str, tuple[int, ...]]:
    try:
        name, dtype, ndim, dims = words[0], words[1], int(words[2]), tuple(int(w) for w in words[3:])
    except (IndexError, ValueError):
        raise ProtocolError(f"the response line {line!r} is not 'NAME DTYPE NDIM DIMS...'") from None
    if dtype not in DTYPES or ndim != len(dims) or ndim > 8 or any(d < 0 for d in dims):
        raise ProtocolError(f"the response line {line!r} names no valid dtype ({', '.join(DTYPES)}) and shape")
    return name, dtype, dims


def nbytes(entry: tuple[str, str, tuple[int, ...]]) -> int:
    return math.prod(entry[2]) * numpy_dtype(entry[1]).itemsize


def parse_response(header: bytes, req: Request) -> Response:
    """Read a response header (without its closing empty line), checked against ``req``.

    Raises:
      ProtocolError: garbage, an answer to another request (out of turn), arrays that
        do not match the request's inputs, or a byte count that is not their size.

    A ``status error`` answer (the kernel refused) is returned, with its message.
    """
    try:
        text = header.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(f"the response is not ASCII text: it begins {header[:48]!r}") from None
    lines = text.split("\n")
    if lines[0] != RESPONSE:
        raise ProtocolError(f"the response does not begin with {RESPONSE!r}: it begins {header[:48]!r}")
    fields: dict[str, str] = {}
    output = None
    states: list[tuple[str, str, tuple[int, ...]] | None] = []
    names: list[str] = []
    outside: list[tuple[str, int, int]] = []
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key == "output":
            output = _shape_of(value.split(), line)
        elif key == "input":
            words = value.split()
            names.append(words[0] if words else "")
            states.append(None if words[1:] == ["same"] else _shape_of(words, line))
        elif key == "outside":
            outside.append(_outside_of(value.split(), line, req))
        else:
            fields[key] = value
    if fields.get("id") != str(req.id) or fields.get("op") != req.op:
        raise ProtocolError(f"answer out of turn: request {req.id} ({req.op}) got the answer of id "
                            f"{fields.get('id')!r} ({fields.get('op')!r})")
    status, message = fields.get("status", ""), fields.get("message", "")
    try:
        size = int(fields.get("bytes", ""))
    except ValueError:
        raise ProtocolError(f"the response to request {req.id} has no 'bytes N' line") from None
    if status == "error":
        if size:
            raise ProtocolError(f"the error response to request {req.id} announces {size} payload bytes, not 0")
        return Response(status, message or "(no message)", None, (), 0, None, tuple(outside))
    if status != "ok":
        raise ProtocolError(f"the response to request {req.id} has status {status!r}, not 'ok' or 'error'")
    if output is None or output[0] != req.output:
        raise ProtocolError(f"the response to request {req.id} has no 'output {req.output} ...' line")
    if math.prod(output[2]) > req.capacity:  # refused before a byte of it is read
        raise ProtocolError(f"the response to request {req.id} announces an output of {math.prod(output[2])} "
                            f"elements ({output[1]} {output[2]}, {size} payload bytes); the request allows at most "
                            f"{req.capacity} (its output_capacity)")
    sent = [n for n, _ in req.inputs]
    if names != sent:
        raise ProtocolError(f"the response to request {req.id} lists inputs {names}; the request sent {sent} "
                            "(each as 'input NAME same' or with its state after the call)")
    for state, (name, a) in zip(states, req.inputs):
        if state is not None and (state[1] != wire_dtype(a) or state[2] != a.shape):
            raise ProtocolError(f"the response to request {req.id} returns {name} as {state[1]} {state[2]}; "
                                f"it was sent as {a.dtype} {a.shape} (an input's state keeps its dtype and shape)")
    need = nbytes(output) + sum(nbytes(s) for s in states if s is not None)
    if size != need:
        raise ProtocolError(f"the response to request {req.id} announces {size} payload bytes; its arrays "
                            f"need {need}")
    return Response(status, message, output, tuple(states), size, fields.get("poison"), tuple(outside))


def _outside_of(words: list[str], line: str, req: Request) -> tuple[str, int, int]:
    """An ``outside NAME FIRST LAST`` line: a buffer of the request and a byte range around it."""
    buffers = [n for n, _ in req.inputs] + [req.output]
    try:
        name, first, last = words[0], int(words[1]), int(words[2])
    except (IndexError, ValueError):
        raise ProtocolError(f"the response line {line!r} is not 'outside NAME FIRST LAST'") from None
    if name not in buffers or len(words) != 3 or first > last:
        raise ProtocolError(f"the response line {line!r} names no buffer of request {req.id} ({', '.join(buffers)}) "
                            "with a byte range FIRST <= LAST")
    return name, first, last


def unpack(resp: Response, payload: bytes | bytearray | memoryview,
           req: Request) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The output and each input's state after the call (None where unchanged)."""
    assert resp.output is not None
    offset = nbytes(resp.output)
    out = np.frombuffer(payload, dtype=numpy_dtype(resp.output[1]), count=math.prod(resp.output[2]))
    result = out.reshape(resp.output[2]).astype(out.dtype.newbyteorder("="))
    states: list[np.ndarray | None] = []
    for state in resp.inputs:
        if state is None:
            states.append(None)
            continue
        size = nbytes(state)
        a = np.frombuffer(payload, dtype=numpy_dtype(state[1]), count=math.prod(state[2]), offset=offset)
        states.append(a.reshape(state[2]))
        offset += size
    return result, states


def write_back(states: list[np.ndarray | None], args: Sequence[np.ndarray | None]) -> None:
    """Write each returned input state into the caller's array: a mutation the kernel made
    shows to symjac's guard exactly as a Python implementation's would."""
    given = [a for a in args if a is not None]
    for state, target in zip(states, given):
        if state is not None and isinstance(target, np.ndarray) and target.flags.writeable:
            target[...] = state
