"""Every compile of the tests goes through here (the contrib examples, the tests' own kernels, C and C++).

``build(tmp_path, "pool.c", "-DSEED000_BUG")`` compiles contrib/examples/pool.c with the system
compiler into tmp_path (a program, or with ``shared=True`` a library for ctypes); a ``.cpp`` source is
built by the C++ compiler. :data:`CC` / :data:`CXX` are None without a compiler, and the tests then
skip. A test whose point is a command line of its own (a header warning-free at -O3) gives it whole
to :func:`run_compiler`.

Builds are at -O0 (about 4 times faster than -O2); every warning is an error. The warnings only an
optimising compile finds (-Wmaybe-uninitialized, -Wformat-truncation, ...) are checked once for each
source of contrib/examples, with each of its planted defects (OPTIMISED, by
tests/test_native_examples.py's test_the_examples_build_warning_free_optimised).

The compile cache
-----------------
:func:`run_compiler` keys a compile by a hash of what decides its output: the command line without
its output path, the compiler's identity (its path, where that path resolves, and its ``--version``),
the compiler's environment variables (CPATH, ...) and working directory, the text of each source on the command line and of
every header it can include from outside the system (each file of contrib/, contrib/examples/, each
``-I`` directory and each source's own directory). The output and the compiler's stderr are stored
under that key in :func:`cache_dir`, shared by every worker of a run, so that two tests, files or
workers compiling the same thing compile once: a worker that finds the key being compiled by another
waits for it (an ``flock`` per key), and each entry is written to a temporary name and renamed
(``os.replace``), so no reader ever sees half a file. Each test then gets a copy at its own path.
Only the repository's sources are cached (contrib/examples, tests/golden_layer.c, ...): a source a
test writes into its tmp_path is compiled once a run anyway, at a path no later run has.

Keeping entries across runs is safe because the key is the content: a changed header, source, flag
or compiler is another key, never a stale hit (the system's own headers and libraries change only
with the compiler's package, whose ``--version`` is in the key). A failed compile is not stored.
Entries unused for a day are removed. ``SYMJAC_TEST_CC_CACHE=DIR`` puts the cache in DIR, and
``SYMJAC_TEST_CC_CACHE=off`` runs every compile.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"
EXAMPLES = CONTRIB / "examples"
CC = shutil.which("cc") or shutil.which("gcc")
CXX = shutil.which("c++") or shutil.which("g++")
#: Every warning an error: the headers and the examples must compile cleanly as C99 / C++11.
WARNINGS = ("-Wall", "-Wextra", "-pedantic", "-Werror")
FLAGS = ("-std=c99", "-O0", *WARNINGS)
CXX_FLAGS = ("-std=c++11", "-O0", *WARNINGS)
#: What an optimising compile adds, checked once a source (not at every build): its warnings.
OPTIMISED = ("-O2",)
SHARED = ("-shared", "-fPIC", "-DSYMJAC_SHARED")
INCLUDES = ("-I", str(CONTRIB), "-I", str(EXAMPLES))

#: A kernel that answers zeros and writes 99 into x[0] (a backward that uses x as scratch): the mutated-input
#: finding of every native route.
MUTATES = r"""
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x");
    symjac_zero_output(r);
    if (symjac_is(x->dtype, "float64")) ((double *)x->data)[0] = 99;
    return 0;
}
SYMJAC_MAIN(dispatch)
"""

needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc or gcc) on PATH")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++ or g++) on PATH")

#: Sources, by suffix: what a command line names that the compiler reads (and the key hashes).
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".inc")
#: The compiler's environment variables that change what it reads or runs.
COMPILER_ENV = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "COMPILER_PATH",
                "GCC_EXEC_PREFIX", "SOURCE_DATE_EPOCH", "TMPDIR")
#: An entry unused this long is removed (an entry's mtime is its last use).
STALE_AFTER = 24 * 3600


def build(out: pathlib.Path, source: str | pathlib.Path, *defines: str, shared: bool = False,
          name: str | None = None, flags: Sequence[str] | None = None) -> pathlib.Path:
    """Compile ``source`` (a file of contrib/examples, or a path) into ``out``; returns the program or library.

    C with :data:`FLAGS`, a ``.cpp`` with :data:`CXX_FLAGS` (``flags`` replaces either), the contrib
    headers on the include path, ``-lm``; ``defines`` (or any further flags) before the source.
    """
    src = pathlib.Path(source) if pathlib.Path(source).is_absolute() else EXAMPLES / source
    cxx = src.suffix in (".cc", ".cpp", ".cxx")
    compiler = CXX if cxx else CC
    assert compiler is not None
    stem = name or (src.stem + "".join(d.replace("-D", "_").lower() for d in defines))
    target = out / (f"lib{stem}.so" if shared else stem)
    base = tuple(flags) if flags is not None else CXX_FLAGS if cxx else FLAGS
    run_compiler([compiler, *base, *(SHARED if shared else ()), *INCLUDES, *defines, "-o", str(target), str(src),
                  "-lm"])
    return target


def run_compiler(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (a compiler's command line with one ``-o TARGET``) through the cache; returns its result.

    With ``check`` a failed compile fails the test with the command and the compiler's stderr. A
    hit has the stderr of the compile that made the entry (the same warnings, if any).
    """
    cmd = [str(part) for part in cmd]
    at = cmd.index("-o") + 1
    sources = _sources(cmd[:at] + cmd[at + 1:])
    cache = cache_dir()
    if cache is None or not sources or not all(ROOT in s.resolve().parents for s in sources):
        # a test's own file in its tmp_path: compiled once a run anyway, at a path no other run has
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    else:
        result = _cached(cache, _key(cmd, at, sources), cmd, at, pathlib.Path(cmd[at]))
    if check:
        assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr}"
    return result


def _cached(cache: pathlib.Path, key: str, cmd: list[str], at: int, target: pathlib.Path) -> \
        subprocess.CompletedProcess[str]:
    entry, stderr = cache / key, cache / f"{key}.stderr"
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker compiling this key: wait for its entry
        hit = _copy_out(entry, stderr, target)
        if hit is not None:
            return subprocess.CompletedProcess(cmd, 0, "", hit)
        partial = cache / f"{key}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        result = subprocess.run([*cmd[:at], str(partial), *cmd[at + 1:]], capture_output=True, text=True,
                                timeout=300)
        try:
            if result.returncode == 0:
                partial.with_suffix(".err").write_text(result.stderr)
                os.replace(partial.with_suffix(".err"), stderr)  # the stderr first: an entry always has one
                os.replace(partial, entry)
                shutil.copy(entry, target)
        finally:
            for path in (partial, partial.with_suffix(".err")):
                path.unlink(missing_ok=True)
    return subprocess.CompletedProcess(cmd, result.returncode, result.stdout, result.stderr)


def _copy_out(entry: pathlib.Path, stderr: pathlib.Path, target: pathlib.Path) -> str | None:
    """The stored stderr, with the entry copied to ``target`` (and marked used); None if absent."""
    try:
        text = stderr.read_text()
        shutil.copy(entry, target)
        os.utime(entry), os.utime(stderr)
    except FileNotFoundError:  # none yet, or removed as stale by another process meanwhile
        return None
    return text


def _sources(args: list[str]) -> list[pathlib.Path]:
    """The files a command line names that the compiler reads as text."""
    return [pathlib.Path(a) for a in args if a.endswith(SOURCE_SUFFIXES) and os.path.isfile(a)]


def _key(cmd: list[str], at: int, sources: list[pathlib.Path]) -> str:
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label} {len(data)}\n".encode())
        digest.update(data)

    args = cmd[:at] + ["<output>"] + cmd[at + 1:]
    add("argv", "\0".join(args).encode())
    add("compiler", _identity(cmd[0]).encode())
    add("env", "\0".join(f"{k}={os.environ.get(k, '')}" for k in COMPILER_ENV).encode())
    add("cwd", os.getcwd().encode())  # -g records it
    includes = [pathlib.Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "-I"]
    includes += [pathlib.Path(a[2:]) for a in args if a.startswith("-I") and len(a) > 2]
    folders = {CONTRIB, EXAMPLES, *includes, *(s.parent for s in sources)}
    files = set(sources)
    for folder in folders:
        if folder.is_dir():
            files.update(p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file())
    for path in sorted(files, key=lambda p: str(p.resolve())):
        add(f"file {path.resolve()}", path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _identity(compiler: str) -> str:
    """The compiler's path, the file it resolves to, and its ``--version`` (once a process)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    return "\n".join([compiler, os.path.realpath(shutil.which(compiler) or compiler), version.stdout])


@functools.cache
def cache_dir() -> pathlib.Path | None:
    """The cache's directory (SYMJAC_TEST_CC_CACHE, or a per-user one in the temporary directory),
    private to this user and cleared of stale entries; None when SYMJAC_TEST_CC_CACHE is ``off``."""
    chosen = os.environ.get("SYMJAC_TEST_CC_CACHE", "")
    if chosen.lower() == "off":
        return None
    path = pathlib.Path(chosen or tempfile.gettempdir()) / (f"symjac-test-cc-{os.getuid()}" if not chosen else "")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o022:
        # someone else's, or writable by others: their files must not become this user's programs
        return pathlib.Path(tempfile.mkdtemp(prefix="symjac-test-cc-"))
    _remove_stale(path)
    return path


def _remove_stale(path: pathlib.Path) -> None:
    before = time.time() - STALE_AFTER
    for item in path.iterdir():
        try:
            if item.stat().st_mtime < before:
                item.unlink()
        except FileNotFoundError:
            pass  # another worker removed it first


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail a test that runs longer than 90 s (SIGALRM), so a deadlock is a failure, not a hung run."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("the test took longer than 90 s: something blocks")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(90)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)
