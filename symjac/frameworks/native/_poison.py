"""Poison what a native kernel did not write, so that what it left is seen, not guessed.

In a real framework a kernel's output buffer holds whatever memory was there, its scratch
allocations too, and other buffers sit right before and after its own. A fresh process's heap
is mostly zero pages, so a kernel that leaves an output element unwritten, copies out scratch
it never wrote, or writes a few elements past its buffer, passes a check that hands it fresh
zeroed memory. Both native routes therefore make every call on poisoned memory:

- the output buffer (all ``output_capacity`` elements) is pre-filled with a signalling NaN of the
  output's dtype (:class:`Poison`; the same bits for an integer dtype): arithmetic on it gives a
  NaN, and an element still holding it after the call was never written;
- :data:`GUARD` bytes before and after every buffer, the inputs' and the output's, hold the same
  bytes; after the call they must be unchanged, and so must the output past the shape symjac
  expects (the rest of the capacity);
- the allocator fills what the kernel allocates with a byte of its own (glibc's ``M_PERTURB``:
  ``MALLOC_PERTURB_`` for the process, ``mallopt`` per request);
- every call runs twice, with two poisons and two fill bytes (:data:`FIRST`, :data:`SECOND`); where
  the two results differ on equal inputs and the differing elements carry the poison's signature
  (:func:`_tainted`: its NaN payload, the allocator's fill bytes, an infinity or a magnitude of the
  fill's order), a third run under the first poison must repeat the first result bit for bit. A
  kernel that is merely nondeterministic (its runs differ in their last bits) is the verifier's to
  judge, never this module's.

What the runs show becomes a :class:`KernelFault`, which symjac's guarded call reports under the
categories it carries: ``out_of_bounds_write`` (a guard region or the output past its shape
changed: the buffer, the byte range, the elements), ``unwritten_output`` (output elements still
holding the poison in both runs) and ``uninitialized_read`` (output elements that differ between
the runs: the result depends on memory the kernel never wrote). Where a kernel's driver does not
echo the poison (a driver older than this, or another language's that ignores it), the first run
is all there is and only its guard report, if any, is checked.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from symjac.check._call import index_text
from symjac.frameworks.native._wire import ChildError, KernelRefused, Response, numpy_dtype

#: Bytes of poison before and after every buffer a kernel gets (a multiple of every itemsize).
GUARD = 4096
#: glibc's ``mallopt`` parameter for the perturb byte (``MALLOC_PERTURB_``).
M_PERTURB = -6
#: The quiet bit of each float dtype's NaN: a signalling NaN that went through arithmetic has it set.
QUIET = {"float64": 1 << 51, "float32": 1 << 22, "float16": 1 << 9, "bfloat16": 1 << 6}
#: A finite magnitude only the allocator's fill reaches (its 0x7F and 0xFE bytes are 1.4e306 and
#: -5.3e303 in float64, 3.4e38 and -1.7e38 in float32 and bfloat16; NaN in float16, where the fill is
#: recognised by its bytes alone).
HUGE = {"float64": 2.0**1000, "float32": 2.0**126, "bfloat16": 2.0**126, "float16": float("inf")}


@dataclasses.dataclass(frozen=True)
class Poison:
    """One run's poison: the element the buffers are filled with, per dtype, and the allocator's byte.

    Attributes:
      label: ``"first"`` or ``"second"``.
      floats: per float dtype the bits of a signalling NaN (exponent all ones, quiet bit clear).
      ints: per itemsize the bits used for an integer or bool buffer.
      perturb: glibc's perturb byte: the allocator fills fresh allocations with ``perturb ^ 0xFF``
        (0x7F or 0xFE: values near the dtype's largest) and freed memory with ``perturb``.
    """

    label: str
    floats: Mapping[str, int]
    ints: Mapping[int, int]
    perturb: int

    def bits(self, dtype: str) -> int:
        """The poison element of wire dtype ``dtype``, as an unsigned integer of its width."""
        return self.floats.get(dtype) or self.ints[numpy_dtype(dtype).itemsize]

    def element(self, dtype: str) -> bytes:
        """The poison element's bytes in host order (what a buffer holds)."""
        return self.bits(dtype).to_bytes(numpy_dtype(dtype).itemsize, sys.byteorder)

    def line(self, dtype: str) -> str:
        """The request's ``poison`` line: the element's bits in hex, as wide as the dtype."""
        return f"poison {self.bits(dtype):0{2 * numpy_dtype(dtype).itemsize}x}"

    def pattern(self, dtype: str, size: int) -> bytes:
        """``size`` bytes of the poison element repeated (a guard region's contents)."""
        element = self.element(dtype)
        return (element * (size // len(element) + 1))[:size]


FIRST = Poison("first", {"float64": 0x7FF5A5A5A5A5A5A5, "float32": 0x7FA5A5A5, "float16": 0x7DA5, "bfloat16": 0x7FA5},
               {8: 0x7FF5A5A5A5A5A5A5, 4: 0x7FA5A5A5, 2: 0x7DA5, 1: 0xA5}, 0x80)
SECOND = Poison("second", {"float64": 0xFFF55A5A5A5A5A5A, "float32": 0xFF9A5A5A, "float16": 0xFD5A, "bfloat16": 0xFF9A},
                {8: 0xFFF55A5A5A5A5A5A, 4: 0xFF9A5A5A, 2: 0xFD5A, 1: 0x5A}, 0x01)


def protocol_lines(poison: Poison, dtype: str, repeat: int = 0) -> list[str]:
    """The lines a request of the process route carries for one run (docs/native.md)."""
    return [poison.line(dtype), f"perturb {poison.perturb}", *([f"repeat {repeat}"] if repeat else [])]


def perturbed_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of a kernel process: ``env`` (or this process's), with the allocator perturbed
    unless it says otherwise: glibc's ``MALLOC_PERTURB_``, and its per-thread cache off
    (``glibc.malloc.tcache_count=0``: the cache hands a small chunk back as it was freed, unfilled,
    so a run would see the previous run's leftovers, not its own fill); macOS's
    ``MallocPreScribble``/``MallocScribble``."""
    out = dict(os.environ if env is None else env)
    out.setdefault("MALLOC_PERTURB_", str(FIRST.perturb))
    tunables = out.get("GLIBC_TUNABLES", "")
    if "tcache_count" not in tunables:
        out["GLIBC_TUNABLES"] = ":".join(t for t in (tunables, "glibc.malloc.tcache_count=0") if t)
    if sys.platform == "darwin":
        out.setdefault("MallocPreScribble", "1")
        out.setdefault("MallocScribble", "1")
    return out


@functools.cache
def _mallopt() -> Any:
    try:
        if not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return None
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, ValueError):  # no confstr, no such name, no mallopt: not glibc
        return None
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_int]
    return fn


def perturb_here(byte: int | None) -> None:
    """Set this process's allocator perturb byte (glibc only; None: back to ``MALLOC_PERTURB_``'s,
    or off): what a shared library's kernel allocates during its call is filled as in a kernel process."""
    fn = _mallopt()
    if fn is None:
        return
    if byte is None:
        try:
            byte = int(os.environ.get("MALLOC_PERTURB_", "0")) & 0xFF
        except ValueError:
            byte = 0
    fn(M_PERTURB, byte)


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a call: the result, each input's state after it (None: unchanged), the byte ranges
    changed around the buffers (``(buffer, first, last)``, offsets from its start), and whether the
    output started poisoned (the route did it, or the kernel's driver echoed the poison)."""

    result: np.ndarray
    states: list[np.ndarray | None]
    outside: tuple[tuple[str, int, int], ...]
    poisoned: bool


#: ``run(poison, repeat) -> Run``: one run of a call; ``repeat`` 1 for the confirming third run.
RunFn = Callable[[Poison, int], Run]


class KernelFault(ChildError):
    """The kernel wrote outside its buffers, left output unwritten, or returned values that depend
    on memory it never wrote. ``symjac_findings`` holds ``(category, text, detail)`` for each: the
    guarded call reports them under those categories (the text follows the callable's name)."""

    def __init__(self, findings: Sequence[tuple[str, str, dict[str, Any]]]):
        super().__init__("; ".join(text for _, text, _ in findings))
        self.symjac_findings = tuple(findings)


def buffer_sizes(inputs: Sequence[tuple[str, np.ndarray | None]],
                 output: tuple[str, str, tuple[int, ...]]) -> dict[str, tuple[int, int]]:
    """Each buffer's ``(itemsize, bytes)`` as a call gives it: the inputs, and the output symjac expects."""
    sizes = {name: (a.dtype.itemsize, a.nbytes) for name, a in inputs if a is not None}
    itemsize = numpy_dtype(output[1]).itemsize
    sizes[output[0]] = (itemsize, math.prod(output[2]) * itemsize)
    return sizes


def echoed(resp: Response, poison: Poison, dtype: str) -> bool:
    """The response's ``poison`` line echoes ``poison``: the kernel's driver filled the buffers with it."""
    try:
        return resp.poison is not None and int(resp.poison, 16) == poison.bits(dtype)
    except ValueError:
        return False


KernelFault.__module__ = "symjac.frameworks.native.process"  # where users import it from


def settle(run: RunFn, buffers: Mapping[str, tuple[int, int]], output: tuple[str, str, tuple[int, ...]],
           keep: Callable[[Run], None]) -> np.ndarray:
    """Run a call under :data:`FIRST` and :data:`SECOND` (and :data:`FIRST` again where they differ)
    and return the first run's result, or raise :class:`KernelFault` naming what the runs show.

    Args:
      run: one run of the call on fresh copies of its inputs.
      buffers: each buffer's ``(itemsize, bytes)`` as the request gives it (the inputs and the
        output symjac expects), for the messages.
      output: the output's name, dtype and expected shape.
      keep: given the first run as soon as it returns, to write its inputs' states back into the
        caller's arrays (a kernel that writes to an input is ``mutates_inputs`` whatever else it did).
    """
    first = _run(run, FIRST, 0, buffers)
    keep(first)
    if not first.poisoned:
        if first.outside:
            raise KernelFault([_outside(first.outside, buffers)])
        return first.result
    second = _run(run, SECOND, 0, buffers)
    regions = sorted(set(first.outside) | set(second.outside))
    findings = [_outside(regions, buffers)] if regions else []
    name, dtype, _ = output
    a, b = first.result, second.result
    if a.shape == b.shape and a.dtype == b.dtype and a.dtype.name == dtype and a.size:
        ua, ub = _bits(a), _bits(b)
        unwritten = (ua == FIRST.bits(dtype)) & (ub == SECOND.bits(dtype))
        if unwritten.any():
            findings.append(_unwritten(name, a, unwritten))
        tainted = (ua != ub) & ~unwritten & (_tainted(a, dtype, FIRST) | _tainted(b, dtype, SECOND))
        if tainted.any():
            third = _run(run, FIRST, 1, buffers)
            if third.result.shape == a.shape and np.array_equal(_bits(third.result), ua):
                findings.append(_depends(name, dtype, a, b, tainted))
    if findings:
        raise KernelFault(findings)
    return first.result


def _run(run: RunFn, poison: Poison, repeat: int, buffers: Mapping[str, tuple[int, int]]) -> Run:
    try:
        return run(poison, repeat)
    except KernelRefused as exc:  # a refusal that wrote outside its buffers is that fault
        if exc.outside:
            raise KernelFault([_outside(exc.outside, buffers)]) from None
        raise


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")).reshape(-1)


def _fill_bits(poison: Poison, itemsize: int) -> int:
    """An element made of the allocator's fill byte for fresh memory under ``poison``."""
    return int.from_bytes(bytes([poison.perturb ^ 0xFF]) * itemsize, sys.byteorder)


def _tainted(a: np.ndarray, dtype: str, poison: Poison) -> np.ndarray:
    """Which elements of a run's result under ``poison`` carry its signature: the poison's NaN
    (quiet or signalling, either sign), the allocator's fill bytes, or a magnitude of the fill's
    order (an infinity included). Values a computation on the inputs gives differ in their last
    bits between runs, if at all: none of these."""
    bits = _bits(a)
    width = 8 * a.dtype.itemsize
    magnitude = (1 << (width - 1)) - 1  # all but the sign bit
    quiet = QUIET.get(dtype, 0)
    signed = ((bits | quiet) & magnitude) == ((poison.bits(dtype) | quiet) & magnitude)
    filled = bits == _fill_bits(poison, a.dtype.itemsize)
    found: np.ndarray = signed | filled
    if dtype in HUGE:
        values = a.astype(np.float64).reshape(-1)
        with np.errstate(invalid="ignore"):
            found |= ~np.isnan(values) & (np.abs(values) >= HUGE[dtype])
    return found


def _outside(regions: Sequence[tuple[str, int, int]], buffers: Mapping[str, tuple[int, int]]) -> tuple[
        str, str, dict[str, Any]]:
    texts, detail = [], []
    for name, first, last in regions:
        itemsize, size = buffers[name]
        side = "before the start of" if last < 0 else "past the end of"
        elements = (f"element {first // itemsize}" if first // itemsize == last // itemsize else
                    f"elements {first // itemsize} to {last // itemsize}")
        texts.append(f"{side} {name}: bytes {first} to {last} ({elements}; {name} holds {size // itemsize} elements, "
                     f"{size} bytes)")
        detail.append({"buffer": name, "first_byte": first, "last_byte": last, "first_element": first // itemsize,
                       "last_element": last // itemsize, "buffer_elements": size // itemsize})
    return ("out_of_bounds_write",
            f"wrote outside its buffers: {'; '.join(texts)}. The bytes around every buffer held symjac's poison "
            "and changed during the call; in a real framework such a write lands in another buffer or in the "
            "allocator's bookkeeping", {"regions": detail})


def _unwritten(name: str, a: np.ndarray, unwritten: np.ndarray) -> tuple[str, str, dict[str, Any]]:
    idx = np.flatnonzero(unwritten)
    j = int(idx[0])
    return ("unwritten_output",
            f"left {idx.size} of {a.size} elements of {name} unwritten (first {index_text(name, a.shape, j)}, "
            f"element {j}, byte offset {j * a.dtype.itemsize}): after the call they still hold the poison symjac "
            "filled the output with (both runs); in a real framework they hold whatever memory was there",
            {"buffer": name, "elements": int(idx.size), "of": int(a.size), "first_element": j,
             "byte_offset": j * a.dtype.itemsize})


def _depends(name: str, dtype: str, a: np.ndarray, b: np.ndarray, differ: np.ndarray) -> tuple[
        str, str, dict[str, Any]]:
    idx = np.flatnonzero(differ)
    j = int(idx[0])
    return ("uninitialized_read",
            f"returned values that depend on memory it never wrote: {idx.size} of {a.size} elements of {name} "
            "differ between two runs on equal inputs whose unwritten memory differed (the output's poison, the "
            "guard regions and the allocator's fill) and carry that memory's bits, and a third run repeats the "
            "first bit for bit; first at "
            f"{index_text(name, a.shape, j)} (element {j}, byte offset {j * a.dtype.itemsize}): "
            f"{_shown(a, j)} vs {_shown(b, j)}{_origin(a, j, dtype)}",
            {"buffer": name, "elements": int(idx.size), "of": int(a.size), "first_element": j,
             "byte_offset": j * a.dtype.itemsize})


def _shown(a: np.ndarray, j: int) -> str:
    """Element ``j``'s value; a NaN with its bits (which poison it carries)."""
    value = a.reshape(-1)[j].item()
    if isinstance(value, float) and value != value:
        return f"NaN (bits 0x{int(_bits(a)[j]):0{2 * a.dtype.itemsize}x})"
    return repr(value)


def _origin(a: np.ndarray, j: int, dtype: str) -> str:
    """What the first run's value at ``j`` is made of, when its bits tell."""
    bits = int(_bits(a)[j])
    quiet = QUIET.get(dtype)
    if quiet is not None and bits | quiet == FIRST.bits(dtype) | quiet:
        return (" (symjac's poison, read back: the kernel read its output, or memory around a buffer, before "
                "writing it; a kernel that accumulates into its output must zero it first, as its framework "
                "does: symjac_zero_output(r), docs/native.md)")
    if bits == _fill_bits(FIRST, a.dtype.itemsize):
        return (f" (the byte 0x{FIRST.perturb ^ 0xFF:02X} throughout: the allocator's fill of fresh memory, copied "
                "out of an allocation the kernel never wrote)")
    return ""
