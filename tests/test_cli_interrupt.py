"""Ctrl-C (SIGINT) during a long command: exit code 130 and one line on stderr saying what was
done and written and what was not, never a traceback (the workers' neither); files already
written are whole and listed, a result file written at the end is left as it was.

Each run is started in its own session and interrupted, as a terminal's Ctrl-C does, by SIGINT
to its whole process group, once the command is demonstrably mid-run (its first file written,
or the implementation called: a marker file).
"""

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "specs" / "seeds"

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups (POSIX)")


def interrupt(args, ready, cwd, timeout=120):
    """Run ``symjac ARGS``; once ``ready()`` holds, SIGINT to its process group; the finished run."""
    p = subprocess.Popen([sys.executable, "-m", "symjac", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=cwd, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert p.poll() is None, ("finished before it could be interrupted", p.communicate())
            assert time.monotonic() < deadline, "never got under way"
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, out, err


def one_line(err, command):
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"symjac {command}: interrupted (Ctrl-C)"), lines[0]
    return lines[0]


# bfloat16 needs the 'bfloat16' extra (ml_dtypes): the test interrupts whichever dtypes the machine has
DTYPES = "float16,bfloat16,float32,float64" if importlib.util.find_spec("ml_dtypes") else "float16,float32,float64"


def test_golden_interrupted_lists_what_it_wrote_and_names_what_it_did_not(tmp_path):
    out = tmp_path / "g"
    args = ["golden", str(SEEDS / "textbook_4x4_max.toml"), str(SEEDS / "maxpool_ties.toml"), "--out", str(out),
            "--cover", "--dtype", DTYPES, "--format", "json,npz", "-q"]
    code, stdout, err = interrupt(args, lambda: out.exists() and any(out.glob("*.npz")), tmp_path)
    assert code == 130
    line = one_line(err, "golden")
    assert "cases written" in line and "not written:" in line and "files written whole (listed above)" in line
    listed = [Path(p) for p in stdout.split()]
    assert listed and all(p.is_file() for p in listed)
    # what is on disk is what was listed, each whole (atomic writes: no temporary file is left)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in listed)
    import json

    import numpy as np

    for path in listed:
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            np.load(path)["x.float32"]


SLOW_IMPL = """import time
from pathlib import Path

import numpy as np

def backward(x, dy):
    Path({marker!r}).touch()
    time.sleep(0.5)
    return np.zeros_like(x)
"""

TWO_CASES = """[[case]]
name = "a"
[case.operator]
kind = "pool"
mode = "avg"
kernel = 2
[[case]]
name = "b"
[case.operator]
kind = "pool"
mode = "avg"
kernel = 3
"""


def test_verify_interrupted_says_how_far_it_got(tmp_path):
    marker = tmp_path / "called"
    (tmp_path / "impl.py").write_text(SLOW_IMPL.format(marker=str(marker)))
    (tmp_path / "cases.toml").write_text(TWO_CASES)
    code, stdout, err = interrupt(["verify", "cases.toml", "--impl", "impl.py", "-q"], marker.exists, tmp_path)
    assert code == 130 and stdout == ""
    line = one_line(err, "verify")
    assert "at case 1 of 2 ('a')" in line and "0 of 2 cases verified" in line
    assert "not verified: 'a' (under way) and the 1 after it" in line and "nothing written" in line


FACTORY = """import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

def make(spec):
    def backward(x, dy):
        Path({marker!r}).touch()
        time.sleep(0.2)
        return np.zeros_like(x)
    return SimpleNamespace(backward=backward)
"""


def test_sweep_with_workers_interrupted_leaves_its_results_file_as_it_was(tmp_path):
    # two worker processes get the Ctrl-C too: they leave without a traceback of their own
    marker = tmp_path / "called"
    (tmp_path / "factory.py").write_text(FACTORY.format(marker=str(marker)))
    (tmp_path / "results.jsonl").write_text("previous\n")
    sweep = (ROOT / "examples" / "sweep_small.toml").read_text()
    (tmp_path / "sweep.toml").write_text(sweep)
    code, stdout, err = interrupt(["sweep", "sweep.toml", "--impl", "factory.py:make", "-j", "2", "--out",
                                   "results.jsonl", "-q"], marker.exists, tmp_path)
    assert code == 130 and stdout == ""
    line = one_line(err, "sweep")
    assert "not written: --out results.jsonl (left as it was" in line
    assert (tmp_path / "results.jsonl").read_text() == "previous\n"


ADAPTER = """import time
from pathlib import Path

import symjac
from symjac.frameworks import Config, Impl


def make(config):
    spec = symjac.Pool("avg", 2)
    lowered = symjac.lower(spec, config.input_shape)

    def backward(x, dy):
        Path({marker!r}).touch()
        time.sleep(0.5)
        return lowered.vjp(x, dy)

    return spec, Impl(lowered.forward, backward, "numpy", config.op, {{}}, "")


def configurations(grid="small"):
    for i in range(8):
        yield Config(f"avg_{{i}}", {{"kernel": 2}}, (1, 1, 4, 4 + i), f"avg k2 #{{i}}")
"""


def test_conform_with_isolated_workers_interrupted(tmp_path):
    # conform isolates every configuration in a worker process of its own, and -j 2 runs two
    # pool workers: the Ctrl-C reaches them all; one line, from the command
    marker = tmp_path / "called"
    (tmp_path / "adapter.py").write_text(ADAPTER.format(marker=str(marker)))
    code, stdout, err = interrupt(["conform", "adapter.py", "-j", "2", "-q", "--json", "out.json"],
                                  marker.exists, tmp_path)
    assert code == 130
    line = one_line(err, "conform")
    assert "not written: --json out.json (written at the end)" in line
    assert not (tmp_path / "out.json").exists()
