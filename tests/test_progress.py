"""The progress line of long ``verify`` and ``golden`` runs (issue 24): on stderr, only on a terminal, only
after the delay, never with ``-q``; erased at the end so the command's output is unchanged."""

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


def _run(stream, steps, enabled=True, delay=0.0):
    with Progress("symjac verify", len(steps), enabled=enabled, stream=stream, delay=delay, interval=0.01) as p:
        for name in steps:
            p.step(name)
            note(f"shape 1/2 of {name}")
            time.sleep(0.08)


def test_a_terminal_gets_a_redrawn_line_that_is_erased_at_the_end():
    tty = FakeTTY()
    _run(tty, ["a", "b"])
    text = tty.getvalue()
    assert "\rsymjac verify [" in text and "0/2 a · shape 1/2 of a" in text and "1/2 b" in text
    assert "[##########..........] 1/2" in text  # 20 cells, half done
    last = text.rsplit("\r", 2)
    assert last[-1] == "" and set(last[-2]) == {" "}  # the last write blanks the line and returns to its start


@pytest.mark.parametrize("stream, enabled, delay", [(io.StringIO(), True, 0.0), (FakeTTY(), False, 0.0),
                                                    (FakeTTY(), True, 60.0)],
                         ids=["not a terminal", "-q", "a run shorter than the delay"])
def test_nothing_is_drawn(stream, enabled, delay):
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
