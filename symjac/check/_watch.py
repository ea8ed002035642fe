"""Results watched after their call returned, until the verification ends.

A helper thread of the implementation, or an asynchronous kernel, may still write into an
array after the call returned it. The guard copies every result at return (what the verdict
reads) and keeps the array it was given: the latest :data:`LATEST` are compared with their
copies whenever a call is settled, every one held is compared once more when the verification
ends (:meth:`Watch.finish`), and one let go earlier is compared as it goes. A write that lands
after the last look is missed, so the last look waits: until :data:`SETTLE` seconds after the
last call returned, for as long as something of the implementation still holds a result (a
thread that will write into it keeps a reference to it). Nothing holds the results of an
implementation that returns fresh arrays and forgets them, so it waits for nothing.

Memory: the arrays and their copies are held up to :data:`HELD_BYTES`, the :data:`LATEST`
up to :data:`LATEST_BYTES` (as many as the guard watched before; the latest always); an older
one is let go after a last comparison, and one the implementation still holds is then followed
by a weak reference and a checksum of its copy.
"""

from __future__ import annotations

import collections
import hashlib
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

#: Results compared with their copies at every settled call (the latest ones).
LATEST = 4
#: Bytes of results (the arrays returned and their copies) held for the last look beyond the :data:`LATEST`,
#: which are held up to :data:`LATEST_BYTES` (the latest always is).
HELD_BYTES = 2**18
LATEST_BYTES = 2**24
#: Seconds after the last call returned that the last look waits while the implementation holds a result.
SETTLE = 0.1
#: Seconds between two looks while waiting.
STEP = 0.002


def unchanged(returned: np.ndarray, kept: np.ndarray) -> bool:
    """``returned`` still holds the bits of ``kept`` (its copy at return), without a copy.

    Arrays of references (object dtype) compare their elements' identities: their bytes are
    pointers, and ``.view`` refuses them."""
    if returned.shape != kept.shape or returned.dtype != kept.dtype:
        return False
    if returned.dtype.hasobject:
        return all(a is b for a, b in zip(returned.reshape(-1).tolist(), kept.reshape(-1).tolist()))
    if returned.dtype.itemsize not in (1, 2, 4, 8):
        return bool(returned.tobytes() == kept.tobytes())
    bits = np.dtype(f"u{returned.dtype.itemsize}")
    return bool(np.array_equal(returned.view(bits), kept.view(bits)))


def _digest(a: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest()


def _chain(value: Any) -> list[Any]:
    """``value`` and the objects its memory belongs to (a view's base, that one's base, ...)."""
    chain = [value]
    while isinstance(chain[-1], np.ndarray) and chain[-1].base is not None and len(chain) < 16:
        chain.append(chain[-1].base)
    return chain


def _references(entries: list[tuple[Any, ...]]) -> list[list[int]]:
    """Per entry, the reference counts of its array and of the objects its memory belongs to."""
    counts = []
    for i in range(len(entries)):
        chain = _chain(entries[i][0])
        counts.append([sys.getrefcount(chain[j]) for j in range(len(chain))])
        del chain
    return counts


def _held_elsewhere(entries: list[tuple[Any, ...]]) -> list[bool]:
    """Per entry (its array first), whether something besides ``entries`` references the array or
    the memory it views: reference counts against those of fresh arrays held the same way."""
    counts = _references(entries)
    fresh = []
    for c in counts:  # a fresh chain of the same depth, held only by this list
        a = np.empty(1)
        for _ in range(len(c) - 1):
            a = a[:]
        fresh.append((a,))
        del a
    baseline = _references(fresh)
    return [any(n > m for n, m in zip(c, b)) for c, b in zip(counts, baseline)]


def describe(returned: np.ndarray, kept: np.ndarray) -> str | None:
    """How ``returned`` differs from its copy at return, or None when it does not."""
    if unchanged(returned, kept):
        return None
    if returned.shape != kept.shape or returned.dtype != kept.dtype:
        return f"its shape or dtype changed to {returned.dtype} {returned.shape}"
    flat_r, flat_k = returned.reshape(-1), kept.reshape(-1)
    if returned.dtype.hasobject:
        differ = np.array([a is not b for a, b in zip(flat_r.tolist(), flat_k.tolist())])
    else:
        differ = flat_r.view(np.uint8).reshape(flat_r.size, -1) != flat_k.view(np.uint8).reshape(flat_k.size, -1)
        differ = differ.any(axis=1) if differ.ndim == 2 else differ
    j = int(np.flatnonzero(differ)[0])
    index = ", ".join(str(int(i)) for i in np.unravel_index(j, kept.shape)) if kept.shape else ""
    return (f"first change at result[{index}]: {flat_k[j].item()!r} -> {flat_r[j].item()!r}, "
            f"{int(differ.sum())} element(s) changed")


class Watch:
    """The arrays one callable returned, watched until :meth:`finish`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: collections.deque[tuple[np.ndarray, np.ndarray]] = collections.deque()
        self.held_bytes = 0
        self.followed: list[tuple[weakref.ref[np.ndarray], bytes]] = []  # let go while held elsewhere
        self.changes: list[str] = []  # how results changed, found and not yet reported
        self.last_return = 0.0

    def add(self, value: np.ndarray, kept: np.ndarray) -> None:
        """Watch ``value``, returned by a call just now, whose copy at return is ``kept``."""
        with self.lock:
            self.last_return = time.monotonic()
            self.held.append((value, kept))
            self.held_bytes += value.nbytes + kept.nbytes
            while (len(self.held) > LATEST and self.held_bytes > HELD_BYTES) or (
                    len(self.held) > 1 and self.held_bytes > LATEST_BYTES):
                old = self.held.popleft()
                self.held_bytes -= old[0].nbytes + old[1].nbytes
                self._let_go([old])
                del old

    def _let_go(self, entries: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """A last comparison of each entry; one something else still holds is followed by a
        weak reference and the checksum of its copy (an array of references by nothing more)."""
        for (returned, kept), elsewhere in zip(entries, _held_elsewhere(entries)):
            change = describe(returned, kept)
            if change is not None:
                self.changes.append(change)
            elif elsewhere and not returned.dtype.hasobject:
                try:
                    self.followed.append((weakref.ref(returned), _digest(kept)))
                except TypeError:  # not weakly referable: nothing more to follow
                    pass

    def latest(self) -> list[str]:
        """How results changed: the :data:`LATEST` held last and followed last, and what was found as
        others went."""
        with self.lock:
            entries = list(self.held)[-LATEST:]
            followed = self.followed[-LATEST:]
        found = [c for c in (describe(r, k) for r, k in entries) if c is not None]
        found += self._followed_changes(followed)[0]
        with self.lock:
            found, self.changes = self.changes + found, []
        return found

    def _followed_changes(self, followed: list[tuple[weakref.ref[np.ndarray], bytes]]) -> tuple[list[str], bool]:
        """Changes of the results let go (``followed``) that are still alive; and whether any still is."""
        found, alive = [], False
        for ref, digest in followed:
            returned = ref()
            if returned is None:
                continue
            alive = True
            if _digest(returned) != digest:
                found.append("its bytes no longer match their checksum at return")
            del returned
        return found, alive

    def finish(self) -> list[str]:
        """The last look: every result held and followed is compared, again while something of the
        implementation still holds one, until :data:`SETTLE` seconds after the last call returned
        (or until they change). Everything is let go afterwards."""
        with self.lock:
            entries, self.held, self.held_bytes = list(self.held), collections.deque(), 0
            found, self.changes = self.changes, []
        while True:
            changes = [describe(*e) for e in entries]
            found += [c for c in changes if c is not None]
            pending = [e for e, c in zip(entries, changes) if c is None]
            followed, alive = self._followed_changes(self.followed)
            found += followed
            if found or time.monotonic() >= self.last_return + SETTLE:
                break
            elsewhere = _held_elsewhere(pending)
            if not alive and not any(elsewhere):
                break  # nothing of the implementation holds a result: nothing can write into one
            entries = [e for e, held in zip(pending, elsewhere) if held]
            time.sleep(min(STEP, max(0.0, self.last_return + SETTLE - time.monotonic())))
        self.followed = []
        return list(dict.fromkeys(found))
