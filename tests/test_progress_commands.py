"""Every command that may run past 2 s shows the progress line (issue 33's audit, docs/cli.md): ``explain``,
``graph``, ``census``, ``probes`` and ``check`` step over their cases as ``verify`` does, on a terminal only,
never with ``-q``; the framework ``check`` functions and :func:`symjac.check_loss_family` take ``progress=`` as
:func:`symjac.verify` does."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from symjac import _progress
from symjac.cli._main import main

ROOT = Path(__file__).resolve().parent.parent
SEED000 = str(ROOT / "specs" / "seeds" / "nntrainer_avgpool_same_2x2.toml")
TIES = str(ROOT / "specs" / "seeds" / "maxpool_ties.toml")


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _drawn_at_each_step(monkeypatch) -> FakeTTY:
    """stderr a terminal, and each step drawn as it starts (a quick command would end before the ticker
    draws): what a run past 2 s shows, without waiting for it."""
    step = _progress.Progress.step

    def drawn(self, name):
        step(self, name)
        if self.enabled:
            self._draw()

    monkeypatch.setattr(_progress.Progress, "step", drawn)
    monkeypatch.setattr(_progress, "DELAY", 60.0)  # the ticker stays out of it
    stream = FakeTTY()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def _commands(tmp_path):
    return {
        "explain": (["explain", SEED000], "nntrainer_avgpool_same_2x2"),
        "graph": (["graph", TIES, "--out", str(tmp_path / "t.dot")], "maxpool_ties_3x3"),
        "census": (["census", TIES], "maxpool_ties_3x3"),
        "probes": (["probes", SEED000, "--out", str(tmp_path / "p")], "nntrainer_avgpool_same_2x2"),
        "check": (["check", SEED000, "--responses", str(tmp_path / "p")], "nntrainer_avgpool_same_2x2"),
    }


@pytest.mark.parametrize("command", ["explain", "graph", "census", "probes", "check"])
@pytest.mark.parametrize("tqdm_installed", [True, False], ids=["tqdm", "stdlib"])
def test_a_command_steps_its_cases_on_a_terminal_and_not_with_q(tmp_path, monkeypatch, capsys, command,
                                                                 tqdm_installed):
    # before: these commands drew nothing however long they ran, and refused -q
    if tqdm_installed:
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)
    argv, case = _commands(tmp_path)[command]
    if command == "check":  # its requests: written by probes first
        assert main(["probes", SEED000, "--out", str(tmp_path / "p"), "-q"]) == 0
        capsys.readouterr()
    tty = _drawn_at_each_step(monkeypatch)
    code = main(argv)
    shown, out = tty.getvalue(), capsys.readouterr().out
    assert f"symjac {command} [" in shown and f"0/1 {case}" in shown
    assert "\n" not in shown and shown.endswith("\r")  # erased: the command's output starts on a clean line
    tty.seek(0)
    tty.truncate()
    assert main([*argv, "-q"]) == code
    assert tty.getvalue() == "" and capsys.readouterr().out == out  # the same output, nothing drawn


def test_into_a_pipe_nothing_is_drawn(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    assert main(["explain", SEED000]) == 0
    assert capsys.readouterr().err == ""


def test_a_framework_check_takes_a_progress_hook():
    torch = pytest.importorskip("torch")
    import symjac.frameworks.torch as st

    calls = []
    report = st.check(torch.nn.functional.avg_pool1d, kernel_size=2, stride=2, input_shape=(1, 1, 5),
                      progress=lambda *a: calls.append(a))
    assert report.ok and calls[-1] == (1, 1, "done")  # one shape given: one step (symjac.verify's hook)


def test_check_loss_family_takes_a_progress_hook():
    # issue 33's audit: five losses take 3.3 s; the call had no progress= (a TypeError before)
    import symjac

    def mse(p, y):  # d/dp of mean((p - y)^2) = 2 (p - y) / n
        return (2 * (p - y) / p.size).astype(p.dtype)

    calls = []
    table = symjac.check_loss_family({"a": symjac.LossImpl("mse", mse), "b": symjac.LossImpl("mse", mse)}, scale=1,
                                     progress=lambda *a: calls.append(a))
    assert table.ok
    assert calls == [(0, 2, "a (1/2)"), (1, 2, "b (2/2)"), (2, 2, "done")]
