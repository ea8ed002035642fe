"""The call guard copies each result at return; a result changed afterwards is a finding (issue 21)."""

from __future__ import annotations

import threading

import symjac

SPEC = symjac.Pool("avg", 2, stride=1, padding="same")
SHAPE = (2, 3, 4, 5)


def _scribbling(fn):
    """``fn`` whose every result is written into by a helper thread after the call returned:
    the thread waits until the implementation is called again (a kernel still finishing
    into the last output buffer while the next launch starts), writes, and the next call
    returns only once the write is done -- so the write happens after return, every time,
    whatever the machine's speed (a sleep-timed thread raced a verify that finished first)."""
    waiting = []

    def call(*args):
        while waiting:
            go, thread = waiting.pop()
            go.set()
            thread.join()
        out = fn(*args)
        go = threading.Event()

        def scribble():
            go.wait()
            out[...] += 1.0

        thread = threading.Thread(target=scribble, daemon=True)
        thread.start()
        waiting.append((go, thread))
        return out

    return call


def test_a_backward_whose_thread_writes_into_its_result_after_return_is_a_finding():
    lowered = symjac.lower(SPEC, SHAPE)
    rep = symjac.verify(SPEC, backward=_scribbling(lowered.vjp), forward=lowered.forward, input_shape=SHAPE)
    assert not rep.ok
    assert "result_changed_after_return" in rep.categories()
    finding = next(f for f in rep.findings if f.category == "result_changed_after_return")
    assert finding.message.startswith("backward returned an array that changed after the call had returned")
    # the values checked are those at return: the lowering's exact VJP, so nothing else is wrong
    assert set(rep.categories()) == {"result_changed_after_return"}


def test_a_forward_whose_thread_writes_into_its_result_is_a_finding_too():
    lowered = symjac.lower(SPEC, SHAPE)
    rep = symjac.verify(SPEC, backward=lowered.vjp, forward=_scribbling(lowered.forward), input_shape=SHAPE)
    assert "result_changed_after_return" in rep.categories()


def test_results_kept_or_handed_back_are_no_finding():
    lowered = symjac.lower(SPEC, SHAPE)
    kept = []

    def backward(x, dy):  # keeps every result it returned (and never writes into one again)
        kept.append(lowered.vjp(x, dy))
        return kept[-1]

    assert symjac.verify(SPEC, backward=backward, forward=lowered.forward, input_shape=SHAPE).ok
    identity = symjac.Pool("avg", 1)  # y = x and dx = dy: an implementation may hand its argument back
    assert symjac.verify(identity, backward=lambda x, dy: dy, forward=lambda x: x, input_shape=(1, 2, 3, 3)).ok


def test_isolated_a_result_written_after_return_is_a_finding_too():
    lowered = symjac.lower(SPEC, SHAPE)
    rep = symjac.verify(SPEC, backward=_scribbling(lowered.vjp), forward=lowered.forward,
                        input_shape=SHAPE, isolate=True)
    assert "result_changed_after_return" in rep.categories()
    assert set(rep.categories()) == {"result_changed_after_return"}  # the values pickled at return are right
