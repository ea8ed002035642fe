"""The progress line of long ``verify``, ``golden``, ``sweep`` and ``conform`` runs (issues 24, 33): on stderr,
only on a terminal, only after the delay, never with ``-q``; erased at the end so the command's output is
unchanged; drawn by tqdm when it is installed (the ``progress`` extra), by a stdlib line when not."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from symjac import _progress
from symjac._progress import Progress, note
from symjac.cli._main import main

ROOT = Path(__file__).resolve().parent.parent


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_tqdm(monkeypatch):
    """tqdm not installed: ``import tqdm`` raises ImportError (a None entry in sys.modules)."""
    monkeypatch.setitem(sys.modules, "tqdm", None)


def _run(stream, steps, enabled=True, delay=0.0):
    with Progress("symjac verify", len(steps), enabled=enabled, stream=stream, delay=delay, interval=0.01) as p:
        for name in steps:
            p.step(name)
            note(f"shape 1/2 of {name}")
            time.sleep(0.08)


def test_a_terminal_gets_a_redrawn_line_that_is_erased_at_the_end(no_tqdm):
    tty = FakeTTY()
    _run(tty, ["a", "b"])
    text = tty.getvalue()
    assert "\rsymjac verify [" in text and "0/2 a · shape 1/2 of a" in text and "1/2 b" in text
    assert "[##########..........] 1/2" in text  # 20 cells, half done
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and set(last[-2]) == {" "}  # the last write blanks the line and returns to its start


def test_with_tqdm_the_bar_is_tqdms_and_is_erased_at_the_end(monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    made = []
    real = tqdm.tqdm

    def spy(*args, **kwargs):
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", spy)
    tty = FakeTTY()
    _run(tty, ["a", "b"])
    text = tty.getvalue()
    assert len(made) == 1 and made[0]["file"] is tty and made[0]["leave"] is False  # one bar, on our stream
    assert "\rsymjac verify [" in text and "0/2 a · shape 1/2 of a" in text and "1/2 b · shape 1/2 of b" in text
    assert "[##########..........]" not in text  # tqdm's bar, not the stdlib line's 20 cells
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and set(last[-2]) == {" "}  # tqdm's leave=False blanks the line, back to its start


def test_tqdm_is_made_only_after_the_delay(monkeypatch):
    # a run shorter than the delay writes nothing: tqdm's bar would draw itself when made
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(tqdm, "tqdm", lambda *a, **k: pytest.fail("tqdm made before the delay"))
    tty = FakeTTY()
    _run(tty, ["a"], delay=60.0)
    assert tty.getvalue() == ""


@pytest.mark.parametrize("tqdm_installed", [True, False], ids=["tqdm", "stdlib"])
def test_braces_in_a_step_name_are_text(monkeypatch, tqdm_installed):
    # tqdm's bar_format is a format string: a case named "a{b}" must not be read as a field
    if tqdm_installed:
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)
    tty = FakeTTY()
    _run(tty, ["a{b}"])
    assert "0/1 a{b} · shape 1/2 of a{b}" in tty.getvalue()


@pytest.mark.parametrize("stream, enabled, delay", [(io.StringIO(), True, 0.0), (FakeTTY(), False, 0.0),
                                                    (FakeTTY(), True, 60.0)],
                         ids=["not a terminal", "-q", "a run shorter than the delay"])
@pytest.mark.parametrize("tqdm_installed", [True, False], ids=["tqdm", "stdlib"])
def test_nothing_is_drawn(monkeypatch, stream, enabled, delay, tqdm_installed):
    if tqdm_installed:
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)
    stream.seek(0)
    stream.truncate()
    _run(stream, ["a"], enabled=enabled, delay=delay)
    assert stream.getvalue() == ""


def test_note_without_an_open_line_is_a_no_op():
    note("nothing listens")  # must not raise


SLOW = '''
import time
import numpy as np

def forward(x):  # kernel 2, stride 2, no padding: y_j = (x_2j + x_2j+1) / 2, a last odd cell in no window
    time.sleep(0.02)
    n = x.shape[-1] // 2
    return ((x[..., 0:2 * n:2] + x[..., 1:2 * n:2]) / 2).astype(x.dtype)

def backward(x, dy):
    time.sleep(0.02)
    dx = np.zeros_like(x)
    dx[..., :2 * dy.shape[-1]] = np.repeat(dy, 2, axis=-1) / 2
    return dx
'''


@pytest.mark.parametrize("quiet", [False, True])
def test_verify_on_a_terminal_shows_the_case_and_the_plan_shape(tmp_path, monkeypatch, capsys, quiet):
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "c.toml").write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = [2]\n')
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress, "INTERVAL", 0.01)
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    code = main(["verify", str(tmp_path / "c.toml"), "--impl", str(tmp_path / "slow.py"), *(["-q"] if quiet else [])])
    assert code == 0 and capsys.readouterr().out.startswith("PASS c:")
    if quiet:
        assert tty.getvalue() == ""
    else:
        assert "symjac verify [" in tty.getvalue() and "0/1 c · shape 1/" in tty.getvalue()


def test_golden_on_a_terminal_shows_its_cases(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress, "INTERVAL", 0.001)
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    spec = ROOT / "specs" / "seeds" / "maxpool_ties.toml"
    assert main(["golden", str(spec), "--out", str(tmp_path / "g"), "--format", "json,npz"]) == 0
    assert "symjac golden [" in tty.getvalue() and "maxpool_ties_3x3" in tty.getvalue()
    assert capsys.readouterr().out.strip().endswith(".npz")  # the paths still go to stdout


def test_one_case_moves_the_bar_with_its_sub_steps():
    # issue 33 item 4b: a single case's line stayed at an empty bar while its coverage plan ran
    with Progress("symjac verify", 1, stream=io.StringIO()) as p:  # not a terminal: nothing drawn, line() still renders
        p.step("c")
        assert "[....................] 0/1 c" in p.line()
        note("shape 3/4 of the coverage plan", 2, 4)  # 2 of 4 shapes done: 20 cells * 2/4 = 10
        assert "[##########..........] 0/1 c · shape 3/4 of the coverage plan" in p.line()
        note("shape 4/4 of the coverage plan", 3, 4)  # 20 * 3/4 = 15
        assert "[###############.....] 0/1" in p.line()
        p.step("d")  # a new step starts with no sub-step done: 20 * (1 + 0)/1 = the whole bar
        assert "[####################] 1/1 d" in p.line()


_AVG2 = '''
import numpy as np

def backward(x, dy):  # kernel 2, stride 2, no padding: dx_i = dy_(i//2) / 2, a last odd cell in no window
    dx = np.zeros_like(x)
    dx[..., :2 * dy.shape[-1]] = np.repeat(dy, 2, axis=-1) / 2
    return dx
'''


def _avg2():
    namespace: dict = {}
    exec(_AVG2, namespace)
    return namespace["backward"]


def test_verify_calls_a_progress_hook_shape_by_shape(capfd):
    # issue 33 item 4c: the Python API had no progress; a hook hears each coverage-plan shape
    import symjac

    spec = symjac.Pool("avg", (2,))
    calls = []
    report = symjac.verify(spec, backward=_avg2(), progress=lambda *a: calls.append(a))
    assert report.ok
    n = len(symjac.cover(spec))  # verify without a shape checks every shape of the plan (its docstring)
    assert n > 1
    # before shape i+1 is verified, i shapes are done; then n of n, "done"
    assert [(d, t) for d, t, _ in calls] == [(i, n) for i in range(n)] + [(n, n)]
    assert all(f"shape {i + 1}/{n} of the coverage plan" in detail for i, (_, _, detail) in enumerate(calls[:-1]))
    assert calls[-1][2] == "done"
    assert capfd.readouterr() == ("", "")  # a hook alone writes nothing


def test_verify_is_silent_by_default_and_off_a_terminal(capfd):
    import symjac

    spec = symjac.Pool("avg", (2,))
    symjac.verify(spec, backward=_avg2())
    symjac.verify(spec, backward=_avg2(), progress=True)  # stderr is captured here: not a terminal
    symjac.verify_loss(symjac.Loss("mse"), derivative=lambda p, y: (2 * (p - y) / p.size).astype(p.dtype),
                       progress=True)
    assert capfd.readouterr() == ("", "")


def test_verify_loss_hook_hears_the_end():
    import symjac

    calls = []
    symjac.verify_loss(symjac.Loss("mse"), derivative=lambda p, y: (2 * (p - y) / p.size).astype(p.dtype),
                       progress=lambda *a: calls.append(a))
    assert calls == [(1, 1, "done")]  # one loss call is one step


def test_a_bad_progress_argument_is_named():
    import symjac
    from symjac._errors import InputError

    with pytest.raises(InputError, match=r"progress='yes' is not valid: give None .*True .*callable"):
        symjac.verify(symjac.Pool("avg", (2,)), backward=_avg2(), progress="yes")


def test_in_a_notebook_the_line_is_an_updating_display(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display

    import symjac

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj.data)

    def display(obj, display_id=False):
        assert display_id is True
        shown.append(obj.data)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(_progress, "in_notebook", lambda: True)
    symjac.verify(symjac.Pool("avg", (2,)), backward=_avg2(), progress=True)
    assert shown[0].startswith("symjac [....................] 0/1 verify")
    assert any("shape 2/" in s for s in shown)
    assert shown[-1].startswith("symjac [####################] 1/1 done")
    assert not any("\r" in s for s in shown)
