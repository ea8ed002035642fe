"""Atomic writes (issue 24, item 2): an interrupted, killed or failed write leaves the previous
good file or nothing; golden case names that slug alike are refused before anything is written."""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_runner import symjac
from symjac import _atomic

ROOT = Path(__file__).resolve().parent.parent
AVG = """name = "{name}"
[operator]
kind = "pool"
mode = "avg"
kernel = 2
[input]
shape = [1, 1, 4, 4]
generator = "distinct"
"""


def _golden(tmp_path, *spec_texts, args=()):
    specs = []
    for i, text in enumerate(spec_texts):
        spec = tmp_path / f"case{i}.toml"
        spec.write_text(text, encoding="utf-8")
        specs.append(str(spec))
    out = tmp_path / "golden"
    return symjac("golden", *specs, "--out", str(out), *args), out


def _leftovers(folder):
    return sorted(p.name for p in Path(folder).rglob("*") if p.suffix in (".tmp", ".old"))


def test_a_write_that_raises_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("good\n")
    with pytest.raises(KeyboardInterrupt):
        with _atomic.atomic_open(path, "w") as f:
            f.write("half of the new")
            raise KeyboardInterrupt  # SIGINT's exception, mid-write
    assert path.read_text() == "good\n"
    assert _leftovers(tmp_path) == []


def test_a_full_disk_leaves_the_old_file(tmp_path, monkeypatch):
    # ENOSPC at the sync (the data did not fit): the rename never happens
    path = tmp_path / "f.bin"
    path.write_bytes(b"good")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_atomic.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        _atomic.write_bytes(path, b"new" * 1000)
    assert path.read_bytes() == b"good"
    assert _leftovers(tmp_path) == []


def test_sigkill_while_rewriting_leaves_the_old_file(tmp_path):
    # A real SIGKILL in the middle of a rewrite: nothing can clean up, the old file must stand.
    path = tmp_path / "golden.json"
    path.write_text('{"good": true}\n')
    code = textwrap.dedent(f"""
        import os, signal
        from symjac import _atomic
        with _atomic.atomic_open({str(path)!r}, "w") as f:
            f.write('{{"new": ')
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT)
    assert r.returncode == -signal.SIGKILL
    assert json.loads(path.read_text()) == {"good": True}


def test_a_new_file_gets_the_usual_permissions_and_an_old_one_keeps_its_own(tmp_path):
    fresh = tmp_path / "fresh.txt"
    _atomic.write_text(fresh, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    old = tmp_path / "old.txt"
    old.write_text("x")
    old.chmod(0o640)
    _atomic.write_text(old, "y")
    assert old.read_text() == "y" and old.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("fmt", ["json", "npz", "bin"])
def test_golden_rewrite_that_runs_out_of_space_keeps_the_good_files(tmp_path, fmt):
    # golden writes once; then the rewrite runs with a 64-byte file-size limit (RLIMIT_FSIZE:
    # a write past it fails with EFBIG, as a write to a full disk fails with ENOSPC; CPython
    # ignores SIGXFSZ). Every file from the first run must be byte-identical, none torn.
    resource = pytest.importorskip("resource")
    r, out = _golden(tmp_path, AVG.format(name="avg2"), args=("--format", fmt))
    assert r.returncode == 0, r.stderr
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert max(map(len, before.values())) > 64  # the limit bites

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    # a resource limit on the process: a real one
    r = symjac("golden", tmp_path / "case0.toml", "--out", out, "--format", fmt, "--dtype", "float16", process=True,
               preexec_fn=small_disk)
    assert r.returncode == 2 and "File too large" in r.stderr, (r.returncode, r.stderr)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _leftovers(out) == []


@pytest.mark.parametrize("names", [("a b", "a_b"), ("a/b", "a_b"), ("名前", "🐍"), ("same", "same")])
def test_golden_refuses_case_names_that_would_share_a_file(tmp_path, names):
    r, out = _golden(tmp_path, *(AVG.format(name=n) for n in names))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "would both be written as" in r.stderr and repr(names[0]) in r.stderr and repr(names[1]) in r.stderr
    assert not out.exists() or not any(out.iterdir())  # refused before anything was written


def test_golden_writes_distinct_names_as_before(tmp_path):
    r, out = _golden(tmp_path, AVG.format(name="a b"), AVG.format(name="a-b"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a-b.json", "a_b.json"]


def test_a_failed_golden_run_leaves_no_new_folder_behind(tmp_path):
    # 1e300 is past float16's largest finite value (65504): refused after the case is read, before its
    # first file; the new folder (and its new parents) go again, an existing one stays
    over = AVG.format(name="over").replace('shape = [1, 1, 4, 4]\ngenerator = "distinct"',
                                           "x = [[[[1e300, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]]]")
    spec = tmp_path / "over.toml"
    spec.write_text(over, encoding="utf-8")
    out = tmp_path / "new" / "deeper" / "golden"
    r = symjac("golden", str(spec), "--out", str(out), "--dtype", "float16")
    assert r.returncode == 2 and "beyond the largest finite float16" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    r = symjac("golden", str(spec), "--out", str(kept), "--dtype", "float16")
    assert r.returncode == 2 and kept.is_dir()


def test_made_folder_keeps_what_was_written_before_a_failure(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with _atomic.made_folder(tmp_path / "a" / "b") as folder:
            _atomic.write_text(folder / "done.json", "{}\n")
            raise KeyboardInterrupt
    assert (tmp_path / "a" / "b" / "done.json").read_text() == "{}\n"
