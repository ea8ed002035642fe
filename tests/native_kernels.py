"""Build the contrib C examples for the native-route tests (tests/test_native_*.py).

``build(tmp_path, "pool.c", "-DSEED000_BUG")`` compiles contrib/examples/pool.c with the
system compiler into tmp_path (a program, or with ``shared=True`` a library for ctypes);
:data:`CC` is None without a compiler, and the tests then skip.
"""

from __future__ import annotations

import pathlib
import shutil
import signal
import subprocess
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"
EXAMPLES = CONTRIB / "examples"
CC = shutil.which("cc") or shutil.which("gcc")
#: Every warning an error: the header and the examples must compile cleanly as C99.
FLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-pedantic", "-Werror")

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


def build(out: pathlib.Path, source: str | pathlib.Path, *defines: str, shared: bool = False,
          name: str | None = None) -> pathlib.Path:
    """Compile ``source`` (a file of contrib/examples, or a path) into ``out``; returns the program or library."""
    assert CC is not None
    src = pathlib.Path(source) if pathlib.Path(source).is_absolute() else EXAMPLES / source
    stem = name or (src.stem + "".join(d.replace("-D", "_").lower() for d in defines))
    target = out / (f"lib{stem}.so" if shared else stem)
    cmd = [CC, *FLAGS, "-I", str(CONTRIB), "-I", str(EXAMPLES), *defines, "-o", str(target), str(src), "-lm"]
    if shared:
        cmd[1:1] = ["-shared", "-fPIC", "-DSYMJAC_SHARED"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    return target


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
