"""Crash isolation: a worker process turns an abort, a segfault or a SIGFPE into a Crashed naming the signal."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import numpy as np
import pytest

from symjac.check._invoke import invoke_isolated
from symjac.run._isolate import Crashed, Raised, TimedOut, Worker, describe_exit


def double(x):
    return 2 * x


def abort(x):
    os.abort()


def fpe(x):
    signal.raise_signal(signal.SIGFPE)


def fpe_kill(x):
    os.kill(os.getpid(), signal.SIGFPE)


def segfault(x):
    ctypes.string_at(0)  # reads address 0


def exits(x):
    os._exit(3)


def fails(x):
    raise ValueError("bad input")


def mutates(x):
    x[0] = 7.0
    return x.sum()


def sleeps(x):
    time.sleep(30)


FUNCTIONS = dict(double=double, abort=abort, fpe=fpe, fpe_kill=fpe_kill, segfault=segfault, exits=exits,
                 fails=fails, mutates=mutates, sleeps=sleeps)


@pytest.fixture
def worker():
    with Worker(FUNCTIONS, timeout=20) as w:
        yield w


@pytest.mark.parametrize("name, sig", [("abort", "SIGABRT"), ("fpe", "SIGFPE"), ("fpe_kill", "SIGFPE"),
                                       ("segfault", "SIGSEGV")])
def test_a_signal_is_a_crash_naming_it_and_the_next_call_works(worker, name, sig):
    with pytest.raises(Crashed, match=sig) as info:
        worker.call(name, np.zeros(2))
    assert info.value.signal == sig
    np.testing.assert_array_equal(worker.call("double", np.arange(3.0)), [0.0, 2.0, 4.0])
    assert worker.crashes == 1


def test_an_exit_and_a_raise(worker):
    with pytest.raises(Crashed, match="exited with status 3") as info:
        worker.call("exits", 1)
    assert info.value.signal is None
    with pytest.raises(Raised, match="ValueError: bad input"):
        worker.call("fails", 1)
    status, exc = invoke_isolated(worker, "fails", (1,))
    assert status == "raised" and exc.type_name == "ValueError" and 'raise ValueError("bad input")' in exc.traceback_text
    assert invoke_isolated(worker, "fpe", (1,))[0] == "crashed" and invoke_isolated(worker, "double", (2,)) == ("ok", 4)


def test_in_place_changes_come_back_to_the_caller(worker):
    x = np.arange(3.0)
    assert worker.call("mutates", x) == 7.0 + 1.0 + 2.0
    np.testing.assert_array_equal(x, [7.0, 1.0, 2.0])


def test_a_hang_is_killed_at_the_timeout():
    with Worker(FUNCTIONS, timeout=0.5) as w:
        started = time.monotonic()
        with pytest.raises(TimedOut, match="did not return within 0.5 s"):
            w.call("sleeps", 1)
        assert time.monotonic() - started < 10
        assert w.call("double", 2) == 4


def test_describe_exit():
    assert describe_exit(-int(signal.SIGFPE))[1] == "SIGFPE"
    assert describe_exit(0) == ("exited with status 0", None)


def test_exec_worker_runs_importable_functions_in_a_fresh_interpreter():
    with Worker({"double": np.negative, "abort": os.abort}, method="exec", timeout=60) as w:
        np.testing.assert_array_equal(w.call("double", np.arange(3.0)), [-0.0, -1.0, -2.0])
        with pytest.raises(Crashed, match="SIGABRT"):
            w.call("abort")
        assert w.call("double", 2.0) == -2.0
