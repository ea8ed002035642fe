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

The kernel reads and writes the very arrays symjac passes (C order, host byte order;
a non-contiguous array goes through a copy that is written back), so a kernel that
writes to an input is seen by symjac's mutation check. A kernel that crashes takes the
Python process with it: use the process route (:mod:`symjac.frameworks.native.process`), or
``symjac.verify(..., isolate=True)``, for kernels that may.
"""

from __future__ import annotations

import ctypes as C
import math
import os
import threading
from typing import Any

import numpy as np

from symjac.frameworks._adapter import Impl
from symjac.frameworks.native._calls import LossCalls, PoolCalls
from symjac.frameworks.native._wire import PROTOCOL, ChildError, KernelRefused, numpy_dtype, wire_dtype
from symjac.loss._spec import Loss, check_loss
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.frameworks._adapter import LossImpl

__all__ = ["ENTRY", "AbiMismatch", "Library", "impl", "loss_impl"]

MAX_DIMS, MAX_INPUTS, MAX_RANK, NAME, SETTINGS, MESSAGE = 8, 4, 3, 32, 16384, 1024
#: The entry point a library exports (``SYMJAC_MAIN`` with ``-DSYMJAC_SHARED``).
ENTRY = "symjac_call"


class AbiMismatch(ChildError):
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


class Library:
    """A shared library exporting the symjac entry point, loaded once.

    Args:
      path: the ``.so`` (or ``.dylib``) file.
      entry: the entry point's name (default ``symjac_call``), ``int entry(symjac_request *)``.

    Raises:
      OSError: the library cannot be loaded.
      AbiMismatch: it has no ``symjac_abi`` or its request struct differs from this symjac's.
    """

    def __init__(self, path: str | os.PathLike[str], entry: str = ENTRY):
        self.path = os.fspath(path)
        self.lib = C.CDLL(self.path)
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
        self.fn = getattr(self.lib, entry)
        self.fn.restype, self.fn.argtypes = C.c_int, [C.POINTER(Request)]
        self._ids = 0
        self._lock = threading.Lock()

    def send(self, op: str, lines: list[str], inputs: list[tuple[str, Any]],
             output: tuple[str, str, tuple[int, ...]]) -> np.ndarray:
        """One call of the entry point: the inputs by pointer, the output into a fresh buffer."""
        given = [(n, a) for n, a in inputs if a is not None]
        if len(given) > MAX_INPUTS:
            raise ChildError(f"{len(given)} inputs; the C ABI carries at most {MAX_INPUTS}")
        text = ("\n".join(lines) + "\n").encode("ascii")
        if len(text) >= SETTINGS:
            raise ChildError(f"the settings take {len(text)} bytes; the C ABI holds {SETTINGS - 1}")
        with self._lock:
            self._ids += 1
            number = self._ids
        r = Request()
        r.id, r.op, r.settings, r.n_inputs = number, op.encode(), text, len(given)
        # the kernel works on the arrays themselves (a mutation reaches the caller's array);
        # one that is not contiguous in host order goes through a copy, written back after
        buffers = [a if a.flags.c_contiguous and a.dtype.isnative and a.flags.writeable else np.ascontiguousarray(a)
                   for _, a in given]
        for slot, (name, a), buf in zip(r.inputs, given, buffers):
            _fill(slot, name, wire_dtype(a), a.shape, buf.ctypes.data)
        name, dtype, shape = output
        capacity = max([math.prod(shape), *(a.size for _, a in given)])
        out = np.zeros(max(capacity, 1), dtype=numpy_dtype(dtype).newbyteorder("="))
        _fill(r.output, name, dtype, shape, out.ctypes.data)
        r.output_capacity = capacity
        status = self.fn(C.byref(r))
        for (_, a), buf in zip(given, buffers):
            if buf is not a and a.flags.writeable:
                a[...] = buf
        if status:
            message = r.message.decode("utf-8", "replace") or "(no message)"
            raise KernelRefused(f"{self.path} refused {op} (call {number}, status {status}): {message}")
        got = tuple(int(r.output.shape[i]) for i in range(r.output.ndim)) if 0 <= r.output.ndim <= MAX_DIMS else None
        if got is None or math.prod(got) > capacity:
            raise ChildError(f"{self.path} set an output of {r.output.ndim} dimensions {got}; "
                             f"{capacity} elements were allocated")
        return out[: math.prod(got)].reshape(got).copy()


def _library(lib: str | os.PathLike[str] | Library) -> Library:
    return lib if isinstance(lib, Library) else Library(lib)


def impl(lib: str | os.PathLike[str] | Library, spec: PoolSpec) -> Impl:
    """An :class:`Impl` calling a shared library's ``symjac_call`` for ``forward(x)`` and ``backward(x, dy)``.

    Raises:
      SpecError: ``spec`` is not a pooling spec.
      OSError, AbiMismatch: the library cannot be used (see :class:`Library`).
      KernelRefused: (from the callables) the kernel returned non-zero (``symjac_fail``).
    """
    spec, library = check_pool_spec(spec), _library(lib)
    calls = PoolCalls(library.send, spec)
    reproducer = (f"import symjac, symjac.frameworks.native.ctypes as sjc\nimpl = sjc.impl({library.path!r}, "
                  f"symjac.{spec!r})\ny = impl.forward(x)\ndx = impl.backward(x, dy)\n")
    return Impl(forward=calls.forward, backward=calls.backward, framework="ctypes", op=library.path,
                kwargs={"lib": library.path, "spec": spec}, reproducer=reproducer)


def loss_impl(lib: str | os.PathLike[str] | Library, loss: Loss) -> LossImpl:
    """A :class:`symjac.LossImpl` whose ``derivative`` and ``forward`` call a shared library's ``symjac_call``.

    Raises:
      SpecError: ``loss`` is not a :class:`symjac.Loss`.
    """
    loss = check_loss(loss)
    calls = LossCalls(_library(lib).send, loss)
    return LossImpl(loss=loss, derivative=calls.derivative, forward=calls.forward)
