"""symjac.frameworks.native.ctypes: the contrib C examples built as shared libraries and verified in process.

The same sources serve the process route (tests/test_native_process.py); here both routes
and the Python twin must give the same report. Expected numbers: seed 000's audit
(dx = [0.25] * 4 from the current source, [[1/4, 3/4], [3/4, 9/4]] repaired) and seed 003's
(observed -0.5 where S = 8 makes -4 right).
"""

from __future__ import annotations

import ctypes.util
import pathlib
import sys

import numpy as np
import pytest

import symjac
import symjac.frameworks.native.ctypes as sjc
import symjac.frameworks.native.process as sjp
from native_kernels import MUTATES, ROOT, build, deadline, needs_cc, needs_cxx  # noqa: F401 - deadline: a fixture

sys.path.insert(0, str(ROOT / "examples"))
import nntrainer_pool  # noqa: E402

pytestmark = [needs_cc, pytest.mark.usefixtures("deadline")]

SEED000 = symjac.Pool("avg", 2, stride=1, padding="same")
X = np.array([[1.0, 2.0], [3.0, 4.0]])
ONES = np.ones((2, 2))
SEGFAULT = r"""
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    (void)r;
    *(volatile int *)0 = 1;
    return 0;
}
SYMJAC_MAIN(dispatch)
"""
# The contrib pooling kernels behind a C++ dispatch (average pooling, float64 only).
CPP = r"""
#include "symjac_driver.h"
#include "pool_kernels.h"
static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    if (!symjac_is(r->mode, "avg") || !symjac_is(r->dtype, "float64")) return symjac_fail(r, "avg, float64 only");
    const symjac_array *grid = dy ? dy : &r->output;
    int64_t h = x->shape[x->ndim - 2], w = x->shape[x->ndim - 1];
    pool_nd p = pool_nd_2d(POOL_AVG, 0, x->count / (h * w), h, w, grid->shape[grid->ndim - 2],
                           grid->shape[grid->ndim - 1], r->kernel[0], r->kernel[1], r->stride[0], r->stride[1],
                           r->pads[0][0], r->pads[0][1], r->pads[1][0], r->pads[1][1], POOL_EXCLUDE_PAD);
    if (dy) pool_backward(&p, x->data, dy->data, r->output.data);
    else pool_forward(&p, x->data, r->output.data);
    return 0;
}
SYMJAC_MAIN(dispatch)
"""
WRONG_ABI = r"""
#include <stdint.h>
int64_t symjac_abi(void) { return ((int64_t)7 << 32) | 100; }
int symjac_call(void *r) { (void)r; return 0; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("native_so")
    for name, text in (("mutates", MUTATES), ("segfault", SEGFAULT), ("wrong_abi", WRONG_ABI)):
        (out / f"{name}.c").write_text(text)
    return {
        "pool": str(build(out, "pool.c", shared=True)),
        "pool_bug": str(build(out, "pool.c", "-DSEED000_BUG", shared=True)),
        "pool_exe": str(build(out, "pool.c")),
        "pool_bug_exe": str(build(out, "pool.c", "-DSEED000_BUG")),
        "loss": str(build(out, "loss.c", shared=True)),
        "loss_bug": str(build(out, "loss.c", "-DSEED003_BUG", shared=True)),
        "mutates": str(build(out, out / "mutates.c", shared=True)),
        "mutates_exe": str(build(out, out / "mutates.c")),
        "segfault": str(build(out, out / "segfault.c", shared=True)),
        "wrong_abi": str(build(out, out / "wrong_abi.c", shared=True)),
    }


@needs_cxx
def test_a_cpp_kernel_through_both_routes(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "kernel.cpp"
    src.write_text(CPP)
    program, library = build(tmp_path, src, name="kernel"), build(tmp_path, src, name="kernel", shared=True)
    spec = symjac.Pool("avg", 3, stride=2, padding=1)
    reports = [symjac.verify(spec, forward=i.forward, backward=i.backward)
               for i in (sjp.impl(str(program), spec), sjc.impl(library, spec))]
    assert reports[0].ok and reports[0].headline == reports[1].headline, reports[0].headline


def _findings(report: symjac.Report) -> list[tuple[str, str]]:
    return [(f.category, f.message) for f in report.findings]


def test_seed000_gets_one_report_through_ctypes_the_process_and_python(built: dict[str, str]) -> None:
    lib = sjc.impl(built["pool_bug"], SEED000)
    assert lib.backward(X, ONES).tolist() == [[0.25, 0.25], [0.25, 0.25]]  # the audit's current source
    reports = [symjac.verify(SEED000, forward=i.forward, backward=i.backward, x=X, dy=ONES)
               for i in (lib, sjp.impl(built["pool_bug_exe"], SEED000), nntrainer_pool.buggy)]
    assert "visits 1 of 4 output windows" in reports[2].headline
    assert [r.categories() for r in reports] == [["missing_windows", "not_fd_consistent"]] * 3
    assert len({r.headline for r in reports}) == 1
    assert _findings(reports[0]) == _findings(reports[1]) == _findings(reports[2])


@pytest.mark.parametrize("spec", [SEED000, symjac.Pool("avg", 3, stride=2, padding=1, ceil_mode=True),
                                  symjac.Pool("max", 3, stride=2, padding=1)], ids=repr)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_routes_agree_on_the_coverage_plan(built: dict[str, str], spec: symjac.Pool, dtype: str) -> None:
    for fixed, bug in (("pool", "pool_exe"), ("pool_bug", "pool_bug_exe")):
        lib, exe = sjc.impl(built[fixed], spec), sjp.impl(built[bug], spec)
        a = symjac.verify(spec, forward=lib.forward, backward=lib.backward, dtype=dtype)
        b = symjac.verify(spec, forward=exe.forward, backward=exe.backward, dtype=dtype)
        assert a.headline == b.headline and _findings(a) == _findings(b)
    fixed_report = symjac.verify(spec, forward=sjc.impl(built["pool"], spec).forward,
                                 backward=sjc.impl(built["pool"], spec).backward, dtype=dtype)
    assert fixed_report.ok, fixed_report.headline
    assert sjc.impl(built["pool"], SEED000).backward(X, ONES).tolist() == [[0.25, 0.75], [0.75, 2.25]]


def test_seed003_missing_scale_through_ctypes(built: dict[str, str]) -> None:
    loss = symjac.Loss("sigmoid_ce", scale=8)
    bug = sjc.loss_impl(built["loss_bug"], loss)
    assert bug.derivative(np.array([0.0]), np.array([1.0])).tolist() == [-0.5]  # seed 003: observed -0.5
    report = symjac.verify_loss(loss, derivative=bug.derivative, forward=bug.forward, pred=[0.0], label=[1.0])
    assert report.categories() == ["missing_scale"]
    for reduction in ("mean", "sum", "none"):
        for dtype in ("float32", "float64"):
            loss = symjac.Loss("sigmoid_ce", reduction=reduction, scale=8)
            k = sjc.loss_impl(built["loss"], loss)
            ok = symjac.verify_loss(loss, derivative=k.derivative, forward=k.forward, dtype=dtype)
            assert ok.ok, ok.headline


def test_a_write_to_an_input_is_seen_by_the_mutation_check(built: dict[str, str]) -> None:
    lib, exe = sjc.impl(built["mutates"], SEED000), sjp.impl(built["mutates_exe"], SEED000)
    x = X.copy()
    lib.backward(x, ONES.copy())
    assert x[0, 0] == 99  # the kernel worked on the array itself
    reports = [symjac.verify(SEED000, forward=i.forward, backward=i.backward, x=X, dy=ONES) for i in (lib, exe)]
    for report in reports:
        assert "mutates_inputs" in report.categories()
        assert any("changed x in place" in f.message and "1.0 -> 99.0" in f.message for f in report.findings)
    assert _findings(reports[0]) == _findings(reports[1])  # the process route writes the state back


def test_a_strided_input_goes_through_a_copy_that_is_written_back(built: dict[str, str]) -> None:
    impl = sjc.impl(built["pool"], SEED000)
    wide = np.arange(16.0).reshape(4, 4)
    assert impl.forward(wide[::2, ::2]).tolist() == impl.forward(np.ascontiguousarray(wide[::2, ::2])).tolist()
    mut = sjc.impl(built["mutates"], SEED000)
    view = wide.T[:2, :2]  # not C-contiguous
    mut.backward(view, ONES)
    assert wide[0, 0] == 99


def test_a_refusal_is_a_finding(built: dict[str, str]) -> None:
    spec = symjac.FractionalMaxPool(2, output_size=3)  # the one pooling operator pool.c does not implement
    impl = sjc.impl(built["pool"], spec)
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 5, 5))
    assert any("KernelRefused" in f.message and "operator fractional_max_pool is not implemented" in f.message
               for f in report.findings)


def test_a_crash_is_a_finding_with_isolate(built: dict[str, str]) -> None:
    # in process a segfault would end Python; verify(isolate=True) runs the calls in a forked worker
    impl = sjc.impl(built["segfault"], SEED000)
    report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES, isolate=True,
                           timeout=20)
    assert "crashed" in report.categories()
    assert any("SIGSEGV" in f.message for f in report.findings)


def test_a_library_of_another_abi_is_refused_when_loaded(built: dict[str, str]) -> None:
    with pytest.raises(sjc.AbiMismatch, match=r"protocol 7, symjac_request of 100 bytes"):
        sjc.impl(built["wrong_abi"], SEED000)
    libc = ctypes.util.find_library("c")
    if libc:
        with pytest.raises(sjc.AbiMismatch, match="exports no symjac_abi"):
            sjc.Library(libc)
