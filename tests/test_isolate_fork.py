"""Isolated workers and implementations that fork; the crash signal after TensorFlow has run (issue 21 item 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import symjac

SPEC = symjac.Pool("avg", 2)
SHAPE = (1, 2, 4, 4)


def test_a_fork_whose_child_returns_from_the_call_is_one_finding_naming_it():
    lowered = symjac.lower(SPEC, SHAPE)

    def backward(x, dy):  # os.fork() returns in both processes; both return dx
        os.fork()
        return lowered.vjp(x, dy)

    def forward(x):
        os.fork()
        return lowered.forward(x)

    rep = symjac.verify(SPEC, backward=backward, forward=forward, input_shape=SHAPE, isolate=True)
    # the forward and backward are right: no forward_values, nondeterministic, not_fd_consistent
    assert rep.categories() == ["forked"]
    assert {f.message.split(" ")[0] for f in rep.findings} == {"forward", "backward"}
    assert all("forked its process (os.fork()) and the child returned from the call as well" in f.message
               for f in rep.findings)


def test_a_fork_whose_child_raises_is_found_too():
    lowered = symjac.lower(SPEC, SHAPE)

    def backward(x, dy):
        if os.fork() == 0:
            raise RuntimeError("the child's error")
        return lowered.vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, forward=lowered.forward, input_shape=SHAPE, isolate=True)
    assert rep.categories() == ["forked"]


def test_children_that_never_return_from_the_call_are_no_finding():
    lowered = symjac.lower(SPEC, SHAPE)

    def backward(x, dy):  # a helper process that ends itself (as an exec or a pool's worker would)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return lowered.vjp(x, dy)

    rep = symjac.verify(SPEC, backward=backward, forward=lowered.forward, input_shape=SHAPE, isolate=True)
    assert rep.ok, rep.details()


@pytest.mark.slow
def test_the_crash_signal_is_reported_after_tensorflow_has_run():
    pytest.importorskip("tensorflow")
    script = textwrap.dedent("""
        import signal
        import numpy as np
        import tensorflow as tf
        import symjac
        from symjac.frameworks import tensorflow as stf

        tf.nn.max_pool2d(tf.zeros((1, 4, 4, 1)), 2, 2, "VALID")  # TensorFlow's thread pools have started
        spec, impl = stf.max_pool2d(ksize=2, strides=2, padding="VALID")

        def forward(x):
            y = impl.forward(x)  # a TensorFlow op in the worker (which hung in a fork), then the crash
            signal.raise_signal(signal.SIGFPE)
            return y

        x = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
        rep = symjac.verify(spec, forward=forward, x=x, isolate=True, timeout=60)
        print(rep.categories(), [f.detail.get("signal") for f in rep.findings])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['crashed'] ['SIGFPE']"
    assert signal.SIGFPE  # (the signal the worker died of, named in the finding)
