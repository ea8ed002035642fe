"""contrib/symjac_driver.h for its users (issue 33 item 9): symjac_setting's value stops at the end of
its line; what a kernel prints to stdout goes to stderr, off the protocol; and a C++ kernel
(contrib/examples/pool.cpp) catches its exceptions and refuses, where an uncaught one is a crash
whose message quotes what()."""

from __future__ import annotations

import pathlib
import subprocess

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.ctypes as sjc
import symjac.frameworks.native.process as sjp
from native_kernels import CXX, EXAMPLES, ROOT, build, deadline, needs_cc, needs_cxx  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("deadline")

SEED000 = symjac.Pool("avg", 2, stride=1, padding="same")
X = np.array([[1.0, 2.0], [3.0, 4.0]])
ONES = np.ones((2, 2))


# ------------------------------------------------------------------ symjac_setting

SETTING = r"""
#include "symjac_driver.h"
int main(void) {
    static symjac_request r;
    char kind[32], cut[3], absent[8] = "junk";
    int n;
    strcpy(r.settings, "operator loss\nkind mse\nreduction mean\nscale 8\nweight 1/2 3\nlast no newline");
    n = symjac_setting(&r, "kind", kind, sizeof kind);
    printf("kind [%s] %d\n", kind, n);
    n = symjac_setting(&r, "reduction", cut, sizeof cut);
    printf("cut [%s] %d\n", cut, n);
    n = symjac_setting(&r, "red", absent, sizeof absent);
    printf("prefix [%s] %d\n", absent, n);
    printf("present %d %d\n", symjac_setting(&r, "weight", NULL, 0), symjac_setting(&r, "pad_value", NULL, 0));
    n = symjac_setting(&r, "last", kind, sizeof kind);
    printf("last [%s] %d\n", kind, n);
    printf("scale %g\n", symjac_setting_number(&r, "scale", 1));
    return 0;
}
"""


@needs_cc
def test_symjac_setting_stops_at_the_end_of_its_line(tmp_path: pathlib.Path) -> None:
    # issue 33 item 9a: printed with %s, the value was "mse\nreduction mean\nscale 8\n..."
    (tmp_path / "setting.c").write_text(SETTING)
    run = subprocess.run([str(build(tmp_path, tmp_path / "setting.c"))], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "kind [mse] 3",  # "mse": 3 characters, the line's end not included
        "cut [me] 4",  # "mean" (4) into 3 bytes: 2 characters and '\0', as snprintf; the length says so
        "prefix [] -1",  # "red" is no setting: a key matches whole
        "present 5 -1",  # "1/2 3": 5 characters; no pad_value line
        "last [no newline] 10",  # a last line without its '\n' ends at the settings' '\0'
        "scale 8",
    ]


# ------------------------------------------------------------------ stdout is the kernel's, the protocol is not

PRINTS = r"""
#include <unistd.h>
#include "symjac_driver.h"
#include "pool_kernels.h"
static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    const symjac_array *grid = dy ? dy : &r->output;
    char padding[16];
    pool_nd p;
    int64_t h, w;
    symjac_setting(r, "padding", padding, sizeof padding);
    printf("[mylib] %s request %lld, padding %s\n", r->op, (long long)r->id, padding);
    fputs("[mylib] no newline yet...", stdout);
    if (write(1, "[mylib] write(1)\n", 17) != 17) return symjac_fail(r, "write(1) failed");
    h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1]; /* 2-D, NCHW, float64 */
    p = pool_nd_2d(POOL_AVG, 0, x->count / (h * w), h, w, grid->shape[grid->ndim - 2], grid->shape[grid->ndim - 1],
                   r->kernel[0], r->kernel[1], r->stride[0], r->stride[1], r->pads[0][0], r->pads[0][1],
                   r->pads[1][0], r->pads[1][1], POOL_EXCLUDE_PAD);
    if (dy) pool_backward(&p, x->data, dy->data, r->output.data);
    else pool_forward(&p, x->data, r->output.data);
    return 0;
}
SYMJAC_MAIN(dispatch)
"""


@needs_cc
def test_a_kernel_printing_to_stdout_leaves_the_protocol_clean(tmp_path: pathlib.Path) -> None:
    # issue 33 item 9b: symjac_serve moves the protocol off fd 1 and points fd 1 at stderr
    (tmp_path / "prints.c").write_text(PRINTS)
    program = build(tmp_path, tmp_path / "prints.c", "-D_POSIX_C_SOURCE=200809L")
    with sjp.Child(str(program), timeout=10.0) as child:
        impl = sjp.impl(child, SEED000)
        assert impl.backward(X, ONES).tolist() == [[0.25, 0.75], [0.75, 2.25]]
        report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
        assert report.ok, report.findings
        assert child.starts == 1  # never a protocol error, never a restart
        tail = child.stderr_tail()
    assert "[mylib] backward request 1, padding same\n" in tail
    assert "[mylib] write(1)\n" in tail
    assert "[mylib] no newline yet...[mylib] " in tail  # stdout's buffer reaches stderr after each request
    assert cli_runner.symjac("verify", "specs/seeds/nntrainer_avgpool_same_2x2.toml", "--exec", str(program)).returncode == 0


# ------------------------------------------------------------------ C++: contrib/examples/pool.cpp


THROWS = r"""
#include <stdexcept>
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    if (r->id > 0) throw std::runtime_error("boom from the kernel");
    return 0;
}
SYMJAC_MAIN(dispatch)
"""


@pytest.fixture(scope="module")
def cxx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if CXX is None:
        pytest.skip("no C++ compiler (c++ or g++) on PATH")
    out = tmp_path_factory.mktemp("cxx")
    (out / "throws.cpp").write_text(THROWS)
    pool = EXAMPLES / "pool.cpp"
    return {"pool": str(build(out, pool, name="pool_cpp")),
            "verbose": str(build(out, pool, "-DVERBOSE", name="pool_cpp_verbose")),
            "libpool": str(build(out, pool, name="pool_cpp", shared=True)),
            "throws": str(build(out, out / "throws.cpp", name="throws"))}


SPECS = ["specs/seeds/nntrainer_avgpool_same_2x2.toml", "specs/seeds/maxpool_ties.toml", "specs/seeds/textbook_4x4_max.toml",
         "specs/conventions/torch_ceil_include_pad.toml", "specs/conventions/tf_same_stride2.toml"]


@needs_cxx
def test_the_cxx_example_passes_verify_exec(cxx: dict[str, str]) -> None:
    run = cli_runner.symjac("verify", *SPECS, "--exec", cxx["pool"])
    status = [line.split(":")[0] for line in run.stdout.splitlines() if line.startswith(("PASS", "FAIL", "ERROR"))]
    assert run.returncode == 0 and status == ["PASS nntrainer_avgpool_same_2x2", "PASS maxpool_ties_3x3",
                                              "PASS textbook_4x4_max", "PASS torch_ceil_include_pad",
                                              "PASS tf_same_stride2"], run.stdout + run.stderr


@needs_cxx
def test_the_cxx_example_passes_the_coverage_plan_on_both_routes(cxx: dict[str, str]) -> None:
    spec = symjac.Pool("max", 3, stride=2, padding=1)
    for impl in (sjp.impl(cxx["pool"], spec), sjc.impl(cxx["libpool"], spec)):
        report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, dtype="float32")
        assert report.ok, report.findings


@needs_cxx
def test_the_cxx_example_refuses_what_it_throws_and_keeps_serving(cxx: dict[str, str]) -> None:
    dilated = symjac.Pool("max", 2, stride=1, dilation=2)
    x = np.arange(16.0).reshape(4, 4)
    for impl in (sjp.impl(cxx["pool"], dilated), sjc.impl(cxx["libpool"], dilated)):
        with pytest.raises(sjp.KernelRefused, match="refused forward .*: dilation and pad_value are not implemented"):
            impl.forward(x)
    with sjp.Child(cxx["pool"], timeout=10.0) as child:
        with pytest.raises(sjp.KernelRefused, match="dtype float16 is not implemented"):
            sjp.impl(child, SEED000).forward(X.astype(np.float16))
        assert sjp.impl(child, SEED000).forward(X).tolist() == [[2.5, 3.0], [3.5, 4.0]]
        assert child.starts == 1  # the exception was an answer, not a crash


@needs_cxx
def test_the_cxx_examples_log_on_stdout_reaches_stderr(cxx: dict[str, str]) -> None:
    with sjp.Child(cxx["verbose"], timeout=10.0) as child:
        impl = sjp.impl(child, SEED000)
        report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
        assert report.ok, report.findings
        assert "[pool.cpp] backward avg float64 padding same\n" in child.stderr_tail()
        assert child.starts == 1


@needs_cxx
def test_an_uncaught_cxx_exception_is_a_crash_quoting_what(cxx: dict[str, str]) -> None:
    # docs/native.md: std::terminate, SIGABRT; the message quotes the exception and its what()
    impl = sjp.impl(sjp.Child(cxx["throws"], timeout=10.0), SEED000)
    with pytest.raises(sjp.ChildCrashed, match=r"was killed by SIGABRT .*what\(\):  boom from the kernel"):
        impl.forward(X)
