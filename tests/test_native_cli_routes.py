"""The native routes from the command line: ``verify --lib`` (a shared library, its calls in a
forked worker) and ``sweep --exec`` / ``sweep --lib`` (issue 33, item 12).

Expected results: seed 000's audit (the SAME 2x2 stride-1 average-pooling backward visits 1 of
4 windows on a 2x2 input; on 4x4 the same loop bound skips the last row and column of windows,
9 of 16 visited, the seed's loop ``start <= H - k + top`` with top = 0 at k = 2) and seed 003's
(a loss derivative without its scale S = 8). A crash, a hang or a mutated input of the library
is a finding of the report, never the end of symjac.
"""

from __future__ import annotations

import pathlib
import time

import pytest

import cli_runner
from native_kernels import MUTATES, ROOT, build, needs_cc

pytestmark = needs_cc

SEED000 = str(ROOT / "specs" / "seeds" / "nntrainer_avgpool_same_2x2.toml")
SEED003 = str(ROOT / "specs" / "seeds" / "loss_scale_family.toml")
SEGFAULT = r"""
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    if (symjac_is(r->op, "backward")) *(volatile int *)0 = 1;
    symjac_zero_output(r);
    return 0;
}
SYMJAC_MAIN(dispatch)
"""
HANGS = r"""
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    volatile int forever = 1;
    while (forever && symjac_is(r->op, "backward")) {}
    symjac_zero_output(r);
    return 0;
}
SYMJAC_MAIN(dispatch)
"""
SWEEP = """
[operator]
kind = ["pool"]
mode = ["avg"]
kernel = [2]
stride = [1, 2]
padding = ["same", 0]

[input]
shape = [[1, 1, 4, 4]]
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("cli_routes")
    for name, text in (("segfault", SEGFAULT), ("hangs", HANGS), ("mutates", MUTATES)):
        (out / f"{name}.c").write_text(text)
    (out / "sweep.toml").write_text(SWEEP)
    return {
        "pool": str(build(out, "pool.c", shared=True)),
        "pool_bug": str(build(out, "pool.c", "-DSEED000_BUG", shared=True)),
        "pool_bug_exe": str(build(out, "pool.c", "-DSEED000_BUG")),
        "loss_bug": str(build(out, "loss.c", "-DSEED003_BUG", shared=True)),
        **{name: str(build(out, out / f"{name}.c", shared=True)) for name in ("segfault", "hangs", "mutates")},
        "sweep": str(out / "sweep.toml"),
    }


def test_verify_lib_finds_seed_000_and_passes_the_repair(libs: dict[str, str]) -> None:
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["pool_bug"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("FAIL nntrainer_avgpool_same_2x2: backward visits 1 of 4 output windows: "
                               "(0,1), (1,0), (1,1) get nothing")
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["pool"])
    assert r.returncode == 0 and r.stdout.startswith("PASS nntrainer_avgpool_same_2x2"), r.stdout + r.stderr


def test_verify_lib_finds_seed_003_in_a_loss_library(libs: dict[str, str]) -> None:
    r = cli_runner.symjac("verify", SEED003, "--lib", libs["loss_bug"], "--case", "sigmoid_ce")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[missing_scale]" in r.stdout and "S = 8" in r.stdout


def test_a_library_that_crashes_is_a_finding_not_the_end_of_symjac(libs: dict[str, str]) -> None:
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["segfault"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("FAIL nntrainer_avgpool_same_2x2") and "crashed" in r.stdout
    assert "SIGSEGV" in cli_runner.symjac("verify", SEED000, "--lib", libs["segfault"], "-v").stdout


def test_a_library_that_hangs_is_a_timeout_finding(libs: dict[str, str]) -> None:
    started = time.monotonic()
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["hangs"], "--timeout", "2", "-v")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "timeout" in r.stdout and "did not return within" in r.stdout
    assert time.monotonic() - started < 240  # each hung call is killed by its worker's deadline


def test_a_library_that_changes_its_input_is_a_finding(libs: dict[str, str]) -> None:
    # the kernel writes into x in the worker process; the worker sends the change back
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["mutates"], "-v")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "mutates_inputs" in r.stdout and "changed x in place" in r.stdout


def test_bad_kernel_options_are_usage_errors(libs: dict[str, str], tmp_path: pathlib.Path) -> None:
    r = cli_runner.symjac("verify", SEED000, "--lib", str(tmp_path / "missing.so"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot load" in r.stderr, r.stderr
    r = cli_runner.symjac("verify", SEED000, "--lib", libs["pool"], "--exec", libs["pool_bug_exe"])
    assert r.returncode == 2 and "got --exec and --lib" in r.stderr, r.stderr
    r = cli_runner.symjac("sweep", libs["sweep"])
    assert r.returncode == 2 and "give one of --impl" in r.stderr, r.stderr


@pytest.mark.parametrize("route", ["--exec", "--lib"])
def test_sweep_takes_a_native_kernel(libs: dict[str, str], route: str) -> None:
    kernel = libs["pool_bug_exe" if route == "--exec" else "pool_bug"]
    r = cli_runner.symjac("sweep", libs["sweep"], route, kernel, "-q")
    assert r.returncode == 1, r.stdout + r.stderr
    rows = r.stdout.splitlines()
    # seed 000's loop bound: at stride 1 SAME on 4x4 the last row and column of windows get nothing
    assert rows[1].startswith("fail    mode=avg, kernel=2, stride=1, padding=same") and "visits 9 of 16" in rows[1]
    assert [row.split()[0] for row in rows[2:5]] == ["pass", "pass", "pass"]
    assert rows[-1] == "3 pass 1 fail 0 error 0 skipped of 4 configurations"


def test_sweep_lib_on_two_workers_passes_the_repair(libs: dict[str, str]) -> None:
    r = cli_runner.symjac("sweep", libs["sweep"], "--lib", libs["pool"], "-j", "2", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "4 pass 0 fail 0 error 0 skipped of 4 configurations"
