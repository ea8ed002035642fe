"""tests/cli_runner.py, the in-process ``symjac`` the command-line tests use: what it hands the command
(cwd, environment, streams that are no terminal, warnings on stderr) and that it puts everything back."""

import os
import sys
import warnings

import cli_runner


def test_a_run_sees_cwd_env_and_pipes_and_leaves_them_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMJAC_RUNNER_UNSET", "kept")
    seen = {}

    def main(argv):
        seen.update(cwd=os.getcwd(), set=os.environ.get("SYMJAC_RUNNER_SET"),
                    unset=os.environ.get("SYMJAC_RUNNER_UNSET"), tty=(sys.stdout.isatty(), sys.stderr.isatty()),
                    stdin=sys.stdin.read())
        print("out " + " ".join(argv))
        warnings.warn("a note", UserWarning, stacklevel=1)
        warnings.warn("hidden", DeprecationWarning, stacklevel=1)  # a fresh process ignores it outside __main__
        raise SystemExit(3)

    monkeypatch.setattr("symjac.cli._main.main", main)
    before = os.getcwd(), sys.stdout, sys.stderr, sys.stdin
    r = cli_runner.symjac("verify", tmp_path, cwd=tmp_path, env={"SYMJAC_RUNNER_SET": "1", "SYMJAC_RUNNER_UNSET": None})
    assert (r.returncode, r.stdout, r.args) == (3, f"out verify {tmp_path}\n", ["symjac", "verify", str(tmp_path)])
    assert "UserWarning: a note" in r.stderr and "hidden" not in r.stderr
    assert seen == {"cwd": str(tmp_path), "set": "1", "unset": None, "tty": (False, False), "stdin": ""}
    assert (os.getcwd(), sys.stdout, sys.stderr, sys.stdin) == before
    assert "SYMJAC_RUNNER_SET" not in os.environ and os.environ["SYMJAC_RUNNER_UNSET"] == "kept"


def test_merged_streams_keep_the_order_they_were_written_in(monkeypatch):
    # a shell's `2>&1`, as the docs' console blocks show a command's output: both streams in one, in order
    def main(argv):
        print("first")
        print("second", file=sys.stderr)
        print("third")
        return 1

    monkeypatch.setattr("symjac.cli._main.main", main)
    r = cli_runner.symjac("verify", merged=True)
    assert (r.returncode, r.stdout, r.stderr) == (1, "first\nsecond\nthird\n", "")
    apart = cli_runner.symjac("verify")
    assert (apart.stdout, apart.stderr) == ("first\nthird\n", "second\n")
