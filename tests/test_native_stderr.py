"""A crashed kernel's message names what went wrong (issue 33 item 11): the first stderr line of a
sanitizer's report or of an uncaught C++ exception is kept, and quoted before the tail, even when
the report's legend and stack pushed it out of the tail the message quotes."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.process as sjp
from native_kernels import CC, CONTRIB, ROOT, deadline, run_compiler  # noqa: F401 - deadline: a fixture
from symjac.frameworks.native._child import QUOTED_TAIL

pytestmark = pytest.mark.usefixtures("deadline")

SPEC = symjac.Pool("avg", 2, stride=1, padding="same")
X = np.array([[1.0, 2.0], [3.0, 4.0]])
# reads one request's first line, writes the file argv[1] and argv[2] lines of junk to stderr in pieces
# of 7 bytes (lines split across reads), and exits 1 before answering
CHILD = r"""
import sys, time
sys.stdin.buffer.readline()
text = open(sys.argv[1], "rb").read() + b"junk line of a legend\n" * int(sys.argv[2])
for i in range(0, len(text), 7):
    sys.stderr.buffer.write(text[i:i + 7])
    sys.stderr.buffer.flush()
    if i % 700 == 0:
        time.sleep(0.001)
sys.exit(1)
"""


def _crash(tmp_path: pathlib.Path, printed: str, junk: int) -> str:
    script, text = tmp_path / "child.py", tmp_path / "stderr.txt"
    script.write_text(CHILD)
    text.write_text(printed)
    impl = sjp.impl(sjp.Child([sys.executable, str(script), str(text), str(junk)], timeout=10.0), SPEC)
    with pytest.raises(sjp.ChildCrashed) as info:
        impl.forward(X)
    return str(info.value)


def test_the_first_sanitizer_line_is_quoted_before_a_tail_that_lost_it(tmp_path: pathlib.Path) -> None:
    error = "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020 at pc 0x55"
    message = _crash(tmp_path, "noise\n" + error + "\nREAD of size 8\n", 400)  # ~9 KiB after it: past 4 KiB
    tail = ("junk line of a legend\n" * 400).strip()[-QUOTED_TAIL:]
    assert message.endswith(f"; its stderr says {error!r} and ends: {tail!r}"), message


def test_a_cxx_exception_is_quoted_with_its_what(tmp_path: pathlib.Path) -> None:
    lines = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  boom\n"
    message = _crash(tmp_path, "log\n" + lines, 200)
    assert ("its stderr says \"terminate called after throwing an instance of 'std::runtime_error'\" "
            "'what():  boom' and ends:") in message, message


def test_a_line_the_tail_still_shows_is_not_quoted_twice(tmp_path: pathlib.Path) -> None:
    message = _crash(tmp_path, "a.c:3:5: runtime error: signed integer overflow\n", 2)
    assert "its stderr says" not in message
    assert message.count("runtime error: signed integer overflow") == 1
    assert message.endswith("; its stderr ends: 'a.c:3:5: runtime error: signed integer overflow\\njunk line of a "
                            "legend\\njunk line of a legend'"), message


def test_only_the_first_report_is_kept(tmp_path: pathlib.Path) -> None:
    first, second = "x.c:1:1: runtime error: first", "x.c:2:2: runtime error: second"
    message = _crash(tmp_path, f"{first}\nunrelated\n{second}\n", 300)
    assert f"its stderr says {first!r} and ends" in message and "second" not in message, message


def test_a_last_line_without_its_newline_is_seen(tmp_path: pathlib.Path) -> None:
    message = _crash(tmp_path, "==9==ERROR: LeakSanitizer: detected memory leaks", 0)
    assert "==9==ERROR: LeakSanitizer: detected memory leaks" in message


ASAN = r"""
#include <stdlib.h>
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    volatile double *p = (double *)malloc(2 * sizeof(double));
    double s = p[5]; /* a heap-buffer-overflow */
    free((void *)p);
    ((double *)r->output.data)[0] = s;
    return 0;
}
SYMJAC_MAIN(dispatch)
"""


@pytest.fixture(scope="module")
def asan_kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The overflowing kernel built with AddressSanitizer; skips where the compiler cannot build or run it."""
    if CC is None:
        pytest.skip("no C compiler (cc or gcc) on PATH")
    out = tmp_path_factory.mktemp("asan")
    (out / "asan.c").write_text(ASAN)
    (out / "probe.c").write_text("#include <stdlib.h>\nint main(void) { free(malloc(1)); return 0; }\n")
    for name in ("probe", "asan"):
        cmd = [CC, "-std=c99", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-I", str(CONTRIB),
               "-o", str(out / name), str(out / f"{name}.c")]
        built = run_compiler(cmd, check=False)
        if built.returncode:
            pytest.skip(f"{CC} cannot build with -fsanitize=address: {built.stderr.strip()[-300:]}")
    ran = subprocess.run([str(out / "probe")], capture_output=True, text=True, timeout=60)
    if ran.returncode:
        pytest.skip(f"an AddressSanitizer program cannot run here: {ran.stderr.strip()[-300:]}")
    return str(out / "asan")


def test_an_asan_report_names_the_overflow(asan_kernel: str) -> None:
    impl = sjp.impl(sjp.Child(asan_kernel, timeout=20.0), SPEC)
    with pytest.raises(sjp.ChildCrashed) as info:
        impl.forward(X)
    message = str(info.value)
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in message, message
    assert message.index("ERROR: AddressSanitizer") < message.index("and ends:")  # before the tail (its legend)


def test_verify_exec_names_the_asan_report(asan_kernel: str) -> None:
    proc = cli_runner.symjac("verify", "specs/seeds/nntrainer_avgpool_same_2x2.toml", "--exec", asan_kernel, "--json")
    assert proc.returncode == 1, proc.stderr
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in proc.stdout

