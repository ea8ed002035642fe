"""The native routes' robustness (issue 34): a kernel's own processes end with it, an answer larger
than its request allows is refused before it is read, a kernel serving one request per run passes,
and a command or library that cannot be used is one clear line (exit 2 on the command line), never
a traceback or a finding against the kernel."""

from __future__ import annotations

import os
import pathlib
import resource
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.ctypes as sjc
import symjac.frameworks.native.process as sjp
from native_kernels import ROOT, build, deadline, needs_cc  # noqa: F401 - deadline: a fixture

pytestmark = [needs_cc, pytest.mark.usefixtures("deadline")]

SEED000 = "specs/seeds/nntrainer_avgpool_same_2x2.toml"
SPEC = symjac.Pool("avg", 2, stride=1, padding="same")
CHILD = str(pathlib.Path(__file__).with_name("native_child.py"))
# contrib's float64 average pooling behind a dispatch (MAIN: the program's main, defined per kernel)
DISPATCH = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "symjac_driver.h"
#include "pool_kernels.h"
static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    const symjac_array *grid = dy ? dy : &r->output;
    int64_t h, w;
    pool_nd p;
#ifdef CRASH
    abort();
#endif
    if (!symjac_is(r->dtype, "float64") || !symjac_is(r->mode, "avg") || r->rank != 2)
        return symjac_fail(r, "float64 2-D average pooling only");
    h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
    p = pool_nd_2d(POOL_AVG, 0, x->count / (h * w), h, w, grid->shape[grid->ndim - 2], grid->shape[grid->ndim - 1],
                   r->kernel[0], r->kernel[1], r->stride[0], r->stride[1], r->pads[0][0], r->pads[0][1],
                   r->pads[1][0], r->pads[1][1], POOL_EXCLUDE_PAD);
    if (dy) pool_backward(&p, x->data, dy->data, r->output.data);
    else pool_forward(&p, x->data, r->output.data);
    return 0;
}
"""
# serves one request, then exits 0 (docs/native.md: "exits with code 0 after answering (one request per run)")
ONE_SHOT = DISPATCH + r"""
int main(void) {
    static symjac_request request;
    static char line[SYMJAC_SETTINGS];
    return symjac__serve_one(dispatch, &request, line, sizeof line) == 2 ? 2 : 0;
}
"""
# starts a helper process that never ends by itself (and writes its pid to argv[1]), then serves
FORKS = DISPATCH + r"""
int main(int argc, char **argv) {
    pid_t helper = fork();
    FILE *f;
    (void)argc;
    if (helper == 0) {
        for (;;) pause();
    }
    f = fopen(argv[1], "w");
    fprintf(f, "%d\n", (int)helper);
    fclose(f);
    return symjac_serve(dispatch);
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("robust")
    (out / "one_shot.c").write_text(ONE_SHOT)
    (out / "forks.c").write_text(FORKS)
    return {"one_shot": str(build(out, out / "one_shot.c")),
            "forks": str(build(out, out / "forks.c", "-D_POSIX_C_SOURCE=200809L")),
            "forks_crash": str(build(out, out / "forks.c", "-D_POSIX_C_SOURCE=200809L", "-DCRASH", name="forks_crash")),
            "pool": str(build(out, "pool.c")), "libpool": str(build(out, "pool.c", shared=True))}


# ------------------------------------------------------------------ a kernel serving one request per run


def test_a_kernel_serving_one_request_per_run_passes(kernels: dict[str, str]) -> None:
    # issue 34: bad_output "exited with code 0 before answering" in 6 of 6 runs; the next request reached
    # the process before it had exited
    for _ in range(3):
        with sjp.Child(kernels["one_shot"]) as child:
            impl = sjp.impl(child, SPEC)
            report = symjac.verify(SPEC, forward=impl.forward, backward=impl.backward)
            assert report.ok and not report.findings, report.headline
            assert child.starts > 1  # a fresh process per request
    got = cli_runner.symjac("verify", SEED000, "--exec", kernels["one_shot"])
    assert got.returncode == 0 and got.stdout.startswith("PASS nntrainer_avgpool_same_2x2"), got.stdout + got.stderr


def test_a_kernel_exiting_0_before_it_answers_is_still_a_finding(tmp_path: pathlib.Path) -> None:
    # the restart is for a process that answered before: a fresh one that exits 0 unanswered is the kernel's
    with sjp.Child([sys.executable, CHILD, "short_exit"], timeout=5.0) as child:
        with pytest.raises(sjp.ChildCrashed, match=r"exited with code 0 before answering \(request 1"):
            sjp.impl(child, SPEC).forward(np.ones((2, 2)))


# ------------------------------------------------------------------ the kernel's own processes


def _ended(pid: int, wait: float = 0.0) -> bool:
    """The process has ended (gone, or a zombie waiting for init to reap it: Linux's /proc), within
    ``wait`` seconds (a SIGKILL takes effect shortly after it is sent)."""
    until = time.monotonic() + wait
    while True:
        try:
            if pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.02)


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_the_kernels_own_child_process_ends_with_verify_exec(kernels: dict[str, str], tmp_path: pathlib.Path) -> None:
    # issue 34: the kernel's own child process outlived `verify --exec`
    pid_file = tmp_path / "helper.pid"
    got = cli_runner.symjac("verify", SEED000, "--exec", f"{kernels['forks']} {pid_file}")
    assert got.returncode == 0, got.stdout + got.stderr
    helper = int(pid_file.read_text())
    assert _ended(helper, wait=5), f"the kernel's helper process {helper} still runs"


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_closing_a_child_ends_what_the_kernel_started(kernels: dict[str, str], tmp_path: pathlib.Path) -> None:
    pid_file = tmp_path / "helper.pid"
    with sjp.Child([kernels["forks"], str(pid_file)]) as child:
        assert sjp.impl(child, SPEC).forward(np.ones((1, 1, 2, 2))).shape == (1, 1, 2, 2)
        helper = int(pid_file.read_text())
        assert not _ended(helper)
    assert _ended(helper, wait=5)


@pytest.mark.skipif(not pathlib.Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_kernel_dying_while_its_child_holds_stdout_is_a_crash_not_a_timeout(kernels: dict[str, str],
                                                                              tmp_path: pathlib.Path) -> None:
    # its helper inherited stdout: no end of file comes, the kernel's exit is seen within a second anyway
    pid_file = tmp_path / "helper.pid"
    with sjp.Child([kernels["forks_crash"], str(pid_file)], timeout=20.0) as child:
        start = time.monotonic()
        with pytest.raises(sjp.ChildCrashed, match="was killed by SIGABRT"):
            sjp.impl(child, SPEC).forward(np.ones((1, 1, 2, 2)))
        assert time.monotonic() - start < 10
        assert _ended(int(pid_file.read_text()), wait=5)


# ------------------------------------------------------------------ an answer larger than the request allows


def test_an_announced_2gb_answer_is_refused_before_it_is_read() -> None:
    # issue 34: an answer announcing 2 GB for a 320-byte request was read in full (4.2 GB RSS). Here the
    # child sends the header and 1 MiB, then waits: reading on would wait out the 20 s deadline.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    x = np.zeros((1, 1, 4, 5))  # 20 float64: 160 bytes of x and of dy, 320 sent; dx may hold 20 elements
    with sjp.Child([sys.executable, CHILD, "huge"], timeout=20.0) as child:
        start = time.monotonic()
        with pytest.raises(sjp.ProtocolError, match=r"announces an output of 268435456 elements \(float64 "
                                                    r"\(268435456,\), 2147483648 payload bytes\); the request "
                                                    r"allows at most 20 \(its output_capacity\)"):
            sjp.impl(child, SPEC).backward(x, x)
        assert time.monotonic() - start < 10
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB on Linux
    assert grown < 256 * 1024, f"{grown} KiB more at peak"


# ------------------------------------------------------------------ usage errors: one line, exit 2


@pytest.fixture
def unusable(tmp_path: pathlib.Path) -> dict[str, str]:
    plain = tmp_path / "not_executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(stat.S_IRUSR | stat.S_IWUSR)
    folder = tmp_path / "a_folder"
    folder.mkdir()
    return {"quote": "./pool 'unbalanced", "missing": str(tmp_path / "missing"), "not_executable": str(plain),
            "folder": str(folder)}


REASONS = {"quote": r"is not a command line \(No closing quotation", "missing": r"missing does not exist",
           "not_executable": r"not_executable is not executable", "folder": r"a_folder is a directory, not a program"}


@pytest.mark.parametrize("what", list(REASONS))
def test_verify_exec_with_a_command_that_cannot_run_exits_2_with_one_line(unusable: dict[str, str],
                                                                          what: str) -> None:
    got = cli_runner.symjac("verify", SEED000, "--exec", unusable[what])
    assert got.returncode == 2, (got.returncode, got.stdout, got.stderr)
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symjac verify: error: "), got.stderr
    assert __import__("re").search(REASONS[what], lines[0]), lines[0]
    assert got.stdout == ""


@pytest.mark.parametrize("what", list(REASONS))
def test_a_command_that_cannot_run_is_bad_command_when_given(unusable: dict[str, str], what: str) -> None:
    with pytest.raises(sjp.BadCommand, match=REASONS[what]):
        sjp.impl(unusable[what], SPEC)


def test_the_offline_responder_with_a_command_that_cannot_run_exits_2(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    got = subprocess.run([sys.executable, "-m", "symjac.frameworks._offline", str(tmp_path), "--exec", "'x"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "is not a command line" in got.stderr and "Traceback" not in got.stderr


def test_a_library_without_the_entry_point_is_a_clear_error(kernels: dict[str, str], tmp_path: pathlib.Path) -> None:
    # issue 34: ctypes.Library(path, entry="wrong") gave a bare AttributeError traceback
    with pytest.raises(sjc.LibraryError, match=r"exports no entry point 'wrong' \(it exports symjac_call: "
                                               r"Library\(path\) or entry='symjac_call'\)"):
        sjc.Library(kernels["libpool"], entry="wrong")
    with pytest.raises(sjc.LibraryError, match=r"cannot load .*missing\.so"):
        sjc.Library(tmp_path / "missing.so")
    assert issubclass(sjc.LibraryError, OSError) and issubclass(sjc.AbiMismatch, sjc.LibraryError)
