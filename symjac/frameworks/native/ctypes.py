"""Verify a native kernel in a shared library, in process: the symjac C ABI through :mod:`ctypes`.

The library exports the entry point ``int symjac_call(symjac_request *r)`` and
``int64_t symjac_abi(void)`` (``contrib/symjac_driver.h``: build the same source that
serves the process route with ``-shared -fPIC -DSYMJAC_SHARED``). ``symjac_request``
carries what a request of the process route carries: the operation, the settings lines,
and for each input and the output a name, a dtype, a shape and a pointer (``x``, ``dy``,
and the output buffer; ``pred``, ``label``, ``upstream`` for losses). docs/native.md
gives the struct field by field.

::

    import symjac.frameworks.native.ctypes as sjc
    impl = sjc.impl("./libpool.so", spec)
    symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 2, 2))

Each call runs on poisoned memory, as on the process route
(:mod:`symjac.frameworks.native._poison`): the inputs are copied into buffers with a guard
region before and after (C order, host byte order), the output buffer is pre-filled with a
signalling NaN, glibc's allocator fills what the kernel allocates (``mallopt(M_PERTURB)``), and
the call runs twice under two poisons. A guard that changed, output left unwritten, or a result
that differs between the runs is a :class:`symjac.frameworks.native._poison.KernelFault`. An
input the kernel wrote to is written back into the caller's array, so symjac's mutation check
sees it. A kernel that crashes takes the Python process with it: use the process route
(:mod:`symjac.frameworks.native.process`), or ``symjac.verify(..., isolate=True)``, for kernels that may.
"""

from __future__ import annotations

import ctypes as C
import math
import os
import threading
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl, LossImpl
from symjac.frameworks.native._calls import NOT_IN_PROTOCOL, LossCalls, check_native_spec, spec_calls
from symjac.frameworks.native._poison import (
    GUARD,
    KernelFault,
    Poison,
    Run,
    buffer_sizes,
    perturb_here,
    settle,
)
from symjac.frameworks.native._wire import (
    PROTOCOL,
    ChildError,
    KernelRefused,
    capacity,
    numpy_dtype,
    wire_dtype,
    write_back,
)
from symjac.loss._spec import Loss, check_loss
from symjac.pool._ops.unpool import MaxUnpool
from symjac.pool._spec import PoolSpec

__all__ = ["ENTRY", "AbiMismatch", "KernelFault", "Library", "LibraryError", "impl", "loss_impl"]

MAX_DIMS, MAX_INPUTS, MAX_RANK, NAME, SETTINGS, MESSAGE = 8, 4, 3, 32, 16384, 1024
#: The entry point a library exports (``SYMJAC_MAIN`` with ``-DSYMJAC_SHARED``).
ENTRY = "symjac_call"


class LibraryError(ChildError, OSError):
    """The shared library cannot be used: it cannot be loaded, or does not export the entry point."""


class AbiMismatch(LibraryError):
    """The library's ``symjac_request`` is not the one this symjac knows (another protocol version)."""


class Array(C.Structure):
    """``symjac_array``."""

    _fields_ = [("name", C.c_char * NAME), ("dtype", C.c_char * NAME), ("ndim", C.c_int32), ("itemsize", C.c_int32),
                ("shape", C.c_int64 * MAX_DIMS), ("count", C.c_int64), ("data", C.c_void_p)]


class Request(C.Structure):
    """``symjac_request`` (its layout is checked against the library's ``symjac_abi()``)."""

    _fields_ = [("id", C.c_int64), ("op", C.c_char * NAME), ("settings", C.c_char * SETTINGS),
                ("n_inputs", C.c_int32), ("inputs", Array * MAX_INPUTS), ("output", Array),
                ("output_capacity", C.c_int64), ("message", C.c_char * MESSAGE),
                ("operator_name", C.c_char * NAME), ("dtype", C.c_char * NAME), ("mode", C.c_char * NAME),
                ("layout", C.c_char * NAME), ("divisor", C.c_char * NAME), ("rank", C.c_int32),
                ("ceil_mode", C.c_int32), ("kernel", C.c_int64 * MAX_RANK), ("stride", C.c_int64 * MAX_RANK),
                ("dilation", C.c_int64 * MAX_RANK), ("pads", (C.c_int64 * 2) * MAX_RANK),
                ("output_size", C.c_int64 * MAX_RANK), ("kind", C.c_char * NAME), ("reduction", C.c_char * NAME),
                ("scale", C.c_double)]


ABI = PROTOCOL << 32 | C.sizeof(Request)


def _fill(slot: Array, name: str, dtype: str, shape: tuple[int, ...], data: int | None) -> None:
    if len(shape) > MAX_DIMS:
        raise ChildError(f"{name} has {len(shape)} dimensions; the C ABI carries at most {MAX_DIMS}")
    slot.name, slot.dtype = name.encode(), dtype.encode()
    slot.ndim, slot.itemsize = len(shape), numpy_dtype(dtype).itemsize
    for i, n in enumerate(shape):
        slot.shape[i] = n
    slot.count = math.prod(shape)
    slot.data = data


class _Guarded:
    """A buffer between two guard regions of :data:`GUARD` bytes, all filled with the poison: the
    kernel's ``size`` bytes first, then the rest of its ``room`` (the output's capacity)."""

    def __init__(self, size: int, room: int, pattern: bytes):
        self.size, self.room = size, room
        self.fill = np.frombuffer(pattern, dtype=np.uint8)  # GUARD + room + GUARD bytes
        self.memory = self.fill.copy()
        self.address = self.memory.ctypes.data + GUARD

    @property
    def data(self) -> np.ndarray:
        return self.memory[GUARD:GUARD + self.size]

    def outside(self, name: str) -> list[tuple[str, int, int]]:
        """The byte ranges changed before the buffer and past its ``size`` (offsets from its start)."""
        found = []
        for start, stop in ((0, GUARD), (GUARD + self.size, 2 * GUARD + self.room)):
            changed = np.flatnonzero(self.memory[start:stop] != self.fill[start:stop])
            if changed.size:
                found.append((name, start + int(changed[0]) - GUARD, start + int(changed[-1]) - GUARD))
        return found


class Library:
    """A shared library exporting the symjac entry point, loaded once.

    Args:
      path: the ``.so`` (or ``.dylib``) file.
      entry: the entry point's name (default ``symjac_call``), ``int entry(symjac_request *)``.

    Raises:
      LibraryError: the library cannot be loaded, or does not export ``entry``.
      AbiMismatch: it has no ``symjac_abi`` or its request struct differs from this symjac's.
    """

    def __init__(self, path: str | os.PathLike[str], entry: str = ENTRY):
        self.path = os.fspath(path)
        try:
            self.lib = C.CDLL(self.path)
        except OSError as exc:
            raise LibraryError(f"cannot load {self.path}: {exc}") from None
        try:
            abi = self.lib.symjac_abi
        except AttributeError:
            raise AbiMismatch(f"{self.path} exports no symjac_abi(): build it with SYMJAC_MAIN and -DSYMJAC_SHARED "
                              "(contrib/symjac_driver.h)") from None
        abi.restype, abi.argtypes = C.c_int64, []
        if abi() != ABI:
            got = abi()
            raise AbiMismatch(f"{self.path}: protocol {got >> 32}, symjac_request of {got & 0xFFFFFFFF} bytes; "
                              f"this symjac speaks protocol {PROTOCOL} with {C.sizeof(Request)} bytes")
        try:
            self.fn = getattr(self.lib, entry)
        except AttributeError:
            has = ENTRY != entry and hasattr(self.lib, ENTRY)
            raise LibraryError(f"{self.path} exports no entry point {entry!r}"
                               + (f" (it exports {ENTRY}: Library(path) or entry={ENTRY!r})" if has else
                                  " (give the name of its int f(symjac_request *) function)")) from None
        self.fn.restype, self.fn.argtypes = C.c_int, [C.POINTER(Request)]
        self._ids = 0
        self._lock = threading.Lock()

    def send(self, op: str, lines: list[str], inputs: list[tuple[str, Any]],
             output: tuple[str, str, tuple[int, ...]]) -> np.ndarray:
        """One call of the entry point: its poisoned runs (:func:`symjac.frameworks.native._poison.settle`),
        each on copies of the inputs; the first run's result, the inputs it changed written back."""
        given = [(n, a) for n, a in inputs if a is not None]
        if len(given) > MAX_INPUTS:
            raise ChildError(f"{len(given)} inputs; the C ABI carries at most {MAX_INPUTS}")
        text = ("\n".join(lines) + "\n").encode("ascii")
        if len(text) >= SETTINGS:
            raise ChildError(f"the settings take {len(text)} bytes; the C ABI holds {SETTINGS - 1}")
        with self._lock:
            self._ids += 1
            number = self._ids
        host = [(n, np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))) for n, a in given]

        def run(poison: Poison, repeat: int) -> Run:
            return self._run(op, number, text, host, output, poison)

        return settle(run, buffer_sizes(given, output), output,
                      lambda first: write_back(first.states, [a for _, a in given]))

    def _call(self, r: Request, perturb: int) -> int:
        """The entry point on ``r``, with the allocator filling what the kernel allocates with the
        run's byte, in a thread of its own: glibc's per-thread cache, which hands a freed chunk back
        unfilled, starts empty there (and is emptied, filled, when the thread ends), so a run does
        not see the previous run's leftovers as its own memory."""
        box: list[Any] = []

        def call() -> None:
            try:
                box.append(self.fn(C.byref(r)))
            except BaseException as exc:  # noqa: BLE001 - ctypes' own errors: raised in the caller's thread
                box.append(exc)

        perturb_here(perturb)
        try:
            worker = threading.Thread(target=call, name="symjac-kernel", daemon=True)
            worker.start()
            worker.join()
        finally:
            perturb_here(None)
        if isinstance(box[0], BaseException):
            raise box[0]
        return int(box[0])

    def _run(self, op: str, number: int, text: bytes, inputs: list[tuple[str, np.ndarray]],
             output: tuple[str, str, tuple[int, ...]], poison: Poison) -> Run:
        r = Request()
        r.id, r.op, r.settings, r.n_inputs = number, op.encode(), text, len(inputs)
        name, dtype, shape = output
        buffers = []
        for slot, (arg, a) in zip(r.inputs, inputs):
            buf = _Guarded(a.nbytes, a.nbytes, poison.pattern(dtype, a.nbytes + 2 * GUARD))
            buf.data[:] = a.reshape(-1).view(np.uint8)
            _fill(slot, arg, wire_dtype(a), a.shape, buf.address)
            buffers.append(buf)
        itemsize = numpy_dtype(dtype).itemsize
        room = capacity(shape, inputs)
        out = _Guarded(math.prod(shape) * itemsize, room * itemsize, poison.pattern(dtype, room * itemsize + 2 * GUARD))
        _fill(r.output, name, dtype, shape, out.address)
        r.output_capacity = room
        status = self._call(r, poison.perturb)
        outside = [region for (arg, _), buf in zip(inputs, buffers) for region in buf.outside(arg)]
        outside += out.outside(name)
        states = [None if np.array_equal(buf.data, a.reshape(-1).view(np.uint8)) else
                  buf.data.copy().view(a.dtype).reshape(a.shape) for (_, a), buf in zip(inputs, buffers)]
        if status:
            message = r.message.decode("utf-8", "replace") or "(no message)"
            raise KernelRefused(f"{self.path} refused {op} (call {number}, status {status}): {message}", outside)
        got = tuple(int(r.output.shape[i]) for i in range(r.output.ndim)) if 0 <= r.output.ndim <= MAX_DIMS else None
        if got is None or math.prod(got) > room:
            raise ChildError(f"{self.path} set an output of {r.output.ndim} dimensions {got}; "
                             f"{room} elements were allocated")
        values = out.memory[GUARD:GUARD + math.prod(got) * itemsize].view(numpy_dtype(dtype).newbyteorder("="))
        return Run(values.reshape(got).copy(), states, tuple(outside), True)


def _library(lib: str | os.PathLike[str] | Library) -> Library:
    return lib if isinstance(lib, Library) else Library(lib)


def impl(lib: str | os.PathLike[str] | Library, spec: PoolSpec | MaxUnpool) -> Impl:
    """An :class:`Impl` calling a shared library's ``symjac_call`` for ``forward(x)`` and ``backward(x, dy)``
    (for :class:`symjac.MaxUnpool`, ``forward(x, indices)`` and ``backward(x, indices, dy)``).

    Raises:
      SpecError: ``spec`` is not a pooling spec.
      OSError, AbiMismatch: the library cannot be used (see :class:`Library`).
      KernelRefused: (from the callables) the kernel returned non-zero (``symjac_fail``).
    """
    spec, library = check_native_spec(spec), _library(lib)
    calls = spec_calls(library.send, spec)
    reproducer = (f"import symjac, symjac.frameworks.native.ctypes as sjc\nimpl = sjc.impl({library.path!r}, "
                  f"symjac.{spec!r})\ny = impl.forward(x)\ndx = impl.backward(x, dy)\n")
    return Impl(forward=calls.forward, backward=calls.backward, framework="ctypes", op=library.path,
                kwargs={"lib": library.path, "spec": spec}, reproducer=reproducer, missing=NOT_IN_PROTOCOL)


def loss_impl(lib: str | os.PathLike[str] | Library, loss: Loss) -> LossImpl:
    """A :class:`symjac.LossImpl` whose ``derivative`` and ``forward`` call a shared library's ``symjac_call``.

    Raises:
      SpecError: ``loss`` is not a :class:`symjac.Loss`.
    """
    loss = check_loss(loss)
    calls = LossCalls(_library(lib).send, loss)
    return LossImpl(loss=loss, derivative=calls.derivative, forward=calls.forward)
