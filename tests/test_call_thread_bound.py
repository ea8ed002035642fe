"""Implementations bound to their thread (an sqlite3 connection made on the caller's thread,
like tinygrad's kernel cache) under the default timeout (issue 21 item 6)."""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest

import symjac

SPEC = symjac.Pool("avg", 2)
SHAPE = (1, 2, 4, 4)


def _sqlite_bound():
    """forward and backward that use a connection made here (sqlite3 refuses it on another
    thread: ProgrammingError), as a framework with a per-thread cache does."""
    db = sqlite3.connect(":memory:")
    db.execute("create table calls (n integer)")

    def touch():
        db.execute("insert into calls values (1)")

    def forward(x):
        touch()
        return symjac.lower(SPEC, x.shape).forward(x)

    def backward(x, dy):
        touch()
        return symjac.lower(SPEC, x.shape).vjp(x, dy)

    return forward, backward, db


def test_sqlite3_refuses_another_thread():  # what makes the helper thread fail (the premise)
    forward, _, _ = _sqlite_bound()
    rep = symjac.verify(SPEC, forward=forward, input_shape=SHAPE, timeout=None)  # caller's thread: fine
    assert rep.ok
    import threading

    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(sqlite3.ProgrammingError, forward,
                                                                    np.zeros(SHAPE))))
    t.start()
    t.join()
    assert errors


def test_a_thread_bound_implementation_passes_under_the_default_timeout():
    forward, backward, db = _sqlite_bound()
    rep = symjac.verify(SPEC, forward=forward, backward=backward, input_shape=SHAPE)
    assert rep.ok, rep.details()
    # each call wrote one row: the first call of each callable raised in the helper thread (no row)
    # and was made again on this thread (its row), the check in a helper thread raised again (no row)
    assert db.execute("select count(*) from calls").fetchone()[0] == rep.stats["forward_calls"] + \
        rep.stats["backward_calls"]
    rep = symjac.verify(SPEC, forward=forward, backward=backward)  # the coverage plan's shapes too
    assert rep.ok, rep.details()


def test_a_thread_bound_implementation_that_is_wrong_is_still_caught():
    db = sqlite3.connect(":memory:")

    def backward(x, dy):
        db.execute("select 1")
        return 2 * symjac.lower(SPEC, x.shape).vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, input_shape=SHAPE)
    assert rep.categories() == ["wrong_weights"]


def test_a_thread_bound_call_that_hangs_is_a_timeout_on_the_main_thread():
    db = sqlite3.connect(":memory:")
    calls = [0]

    def forward(x):
        db.execute("select 1")
        calls[0] += 1
        if calls[0] > 1:
            time.sleep(30)
        return symjac.lower(SPEC, x.shape).forward(x)

    started = time.monotonic()
    rep = symjac.verify(SPEC, forward=forward, input_shape=SHAPE, timeout=1)
    assert time.monotonic() - started < 20
    assert rep.categories() == ["timeout"]
    assert "it was interrupted" in rep.findings[0].message


def test_raising_in_every_thread_is_no_thread_binding():
    calls = [0]

    def backward(x, dy):
        calls[0] += 1
        raise sqlite3.ProgrammingError("a defect wherever it runs")

    rep = symjac.verify(SPEC, backward=backward, input_shape=SHAPE)
    assert rep.categories() == ["bad_output"]


def test_a_raise_on_the_first_call_only_stays_a_defect():
    lowered = symjac.lower(SPEC, SHAPE)
    calls = [0]

    def backward(x, dy):  # not bound to a thread: the call made again on the caller's thread returns,
        calls[0] += 1     # but so does the next one in a helper thread
        if calls[0] == 1:
            raise RuntimeError("uninitialised on the first call")
        return lowered.vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, forward=lowered.forward, input_shape=SHAPE)
    assert "bad_output" in rep.categories() and rep.unsupported is None  # nor an unsupported dtype


def test_a_sequence_of_calls_goes_on_on_the_callers_thread():
    from symjac.check._call import Guard

    db = sqlite3.connect(":memory:")
    findings: list = []
    guard = Guard(lambda x: (db.execute("select 1"), 2 * x)[1], "forward", ("x",), findings)
    xs = [np.full(3, float(i)) for i in range(5)]
    out = list(guard.arrays(((x,) for x in xs), shape=(3,), dtype=np.dtype(np.float64)))
    assert findings == [] and guard.here and guard.calls == 5
    assert [o.tolist() for o in out] == [[2.0 * i] * 3 for i in range(5)]  # 2x, by hand
