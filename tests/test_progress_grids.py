"""The progress of ``sweep`` and ``conform`` (issue 33): their configurations are counted through
:mod:`symjac._progress`, the one home of progress, not a bar of their own; on a terminal only, after the
delay, erased at the end; ``symjac.conform(progress=...)`` takes a hook as ``symjac.verify`` does."""

from __future__ import annotations

import importlib.machinery
import io
import re
import sys
import types
from pathlib import Path

import pytest

import symjac
from symjac import _progress
from symjac.cli._main import main

ROOT = Path(__file__).resolve().parent.parent
ADAPTER = str(ROOT / "tests" / "conform_adapter.py") + ":crash_free"  # no crashing op: runs in this process
LOWERED = "tests/sweep_impl.py:make"


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _tty(monkeypatch) -> FakeTTY:
    """stderr a terminal, the delay 0 (called in the test's body: capsys sets its own stderr before)."""
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.setattr(_progress, "INTERVAL", 0.005)
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


@pytest.fixture
def sweep_file(tmp_path):
    p = tmp_path / "sweep.toml"  # 2 x 2 x 2 = 8 configurations
    p.write_text('[operator]\nkind = ["pool"]\nmode = ["avg", "max"]\nkernel = [2, 3]\nstride = [1, 2]\n'
                 '[input]\nshape = [[1, 1, 6, 7]]\n')
    return p


def _erased(text: str) -> bool:
    """The last write blanks the line and returns to its start: nothing is left on stderr's line."""
    last = text.rsplit("\r", 2)
    return len(last) == 3 and last[-1] == "" and set(last[-2]) == {" "}


@pytest.mark.parametrize("tqdm_installed", [True, False], ids=["tqdm", "stdlib"])
def test_sweep_on_a_terminal_counts_configurations_and_erases_its_line(monkeypatch, capsys, sweep_file,
                                                                       tqdm_installed):
    # before: the executor drew its own bar at once, with no command name, and left it with a newline
    if tqdm_installed:
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.chdir(ROOT)
    tty = _tty(monkeypatch)
    assert main(["sweep", str(sweep_file), "--impl", LOWERED]) == 0
    shown = tty.getvalue()
    assert "symjac sweep [" in shown and "/8 configurations" in shown
    assert "\n" not in shown and _erased(shown)
    table = capsys.readouterr().out
    tty.seek(0)
    tty.truncate()
    assert main(["sweep", str(sweep_file), "--impl", LOWERED, "-q"]) == 0
    assert tty.getvalue() == "" and capsys.readouterr().out == table  # the command's output is unchanged


def test_sweep_into_a_pipe_draws_nothing(monkeypatch, capsys, sweep_file):
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    monkeypatch.chdir(ROOT)
    assert main(["sweep", str(sweep_file), "--impl", LOWERED]) == 0
    assert capsys.readouterr().err == ""


def test_conform_on_a_terminal_goes_through_the_one_progress_line(monkeypatch, capsys):
    tty = _tty(monkeypatch)
    code = main(["conform", ADAPTER, "--dtype", "float64", "--families", "distinct", "--no-isolate"])
    assert code == 1  # max_doubled's wrong weights (tests/test_conform.py)
    shown = tty.getvalue()
    assert "symjac conform [" in shown and re.search(r"\d/4 cells", shown)  # "1 failed": the hook test
    assert "\n" not in shown and _erased(shown)
    assert "configurations" in capsys.readouterr().out  # the table, on stdout as before


def test_conform_calls_a_progress_hook_per_configuration():
    calls = []
    result = symjac.conform(ADAPTER, dtypes=("float64",), families=("distinct",), isolate=False,
                            progress=lambda *a: calls.append(a))
    n = len(result.results)
    assert n == 4  # max_ok, avg_ok, max_doubled, unsupported_op (tests/conform_adapter.py)
    # 0 of n before the first, then one call a configuration finished, then n of n "done"
    assert [(d, t) for d, t, _ in calls] == [(i, n) for i in range(n + 1)] + [(n, n)]
    # a configuration verified in this process does not tell its own coverage plan's shapes
    assert all(re.fullmatch(rf"\d/{n} cells(, 1 failed)?", detail) for _, _, detail in calls[:-1])
    assert calls[-1][2] == "done"


def test_conform_progress_true_is_silent_off_a_terminal(capfd):
    symjac.conform(ADAPTER, ops=["max_ok"], dtypes=("float64",), families=("distinct",), isolate=False,
                   progress=True)
    assert capfd.readouterr().err == ""


def test_in_a_notebook_with_tqdm_the_bar_is_tqdms_widget(monkeypatch):
    pytest.importorskip("tqdm")
    made = []

    class Widget:  # tqdm.notebook.tqdm's calls, recorded
        def __init__(self, total, desc, leave):
            self.total, self.desc, self.n, self.postfix, self.closed, self.shown = total, desc, 0, "", False, []
            made.append(self)

        def set_description_str(self, desc, refresh=True):
            self.desc = desc

        def set_postfix_str(self, postfix, refresh=True):
            self.postfix = postfix

        def refresh(self):
            self.shown.append((self.n, self.desc, self.postfix))

        def close(self):
            self.closed = True

    notebook = types.ModuleType("tqdm.notebook")
    notebook.tqdm = Widget
    widgets = types.ModuleType("ipywidgets")
    widgets.__spec__ = importlib.machinery.ModuleSpec("ipywidgets", None)  # installed, as far as find_spec sees
    monkeypatch.setitem(sys.modules, "tqdm.notebook", notebook)
    monkeypatch.setitem(sys.modules, "ipywidgets", widgets)
    monkeypatch.setattr(_progress, "in_notebook", lambda: True)
    symjac.verify(symjac.Pool("avg", (2,)), backward=_avg2, progress=True)
    (widget,) = made
    assert widget.total == 1.0 and widget.desc == "symjac done" and widget.closed
    assert any("shape 2/" in postfix and 0 < n < 1 for n, _, postfix in widget.shown)
    assert widget.shown[0][1] == "symjac verify" and widget.shown[-1][0] == 1.0  # full at the end


def _avg2(x, dy):  # kernel 2, stride 2, no padding: dx_i = dy_(i//2) / 2, a last odd cell in no window
    import numpy as np

    dx = np.zeros_like(x)
    dx[..., :2 * dy.shape[-1]] = np.repeat(dy, 2, axis=-1) / 2
    return dx
