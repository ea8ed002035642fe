"""symjac.frameworks.native.process: C kernels (contrib/examples, built here) and faulty children verified
through the native protocol, never a hang.

Expected reports come from the Python twins run in the same test (examples/nntrainer_pool.py,
the seed-003 unscaled derivative) and from the seed documents: seed 000's gradient
[[1/4, 3/4], [3/4, 9/4]] and "visits 1 of 4 output windows"; seed 003's observed -0.5 where
S = 8 makes -4 right (/work/shared/seeds, docs/case-seed00*.md).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np
import pytest

import cli_runner
import symjac
import symjac.frameworks.native.process as sjp
from native_kernels import ROOT, build, deadline, needs_cc  # noqa: F401 - deadline: a fixture

sys.path.insert(0, str(ROOT / "examples"))
import nntrainer_pool  # noqa: E402

pytestmark = [needs_cc, pytest.mark.usefixtures("deadline")]

SEED000 = symjac.Pool("avg", 2, stride=1, padding="same")
X = np.array([[1.0, 2.0], [3.0, 4.0]])
ONES = np.ones((2, 2))
CHILD = str(pathlib.Path(__file__).with_name("native_child.py"))
CRASH = r"""
#include <stdlib.h>
#include "symjac_driver.h"
static int dispatch(symjac_request *r) {
    (void)r;
#ifdef SEGFAULT
    *(volatile int *)0 = 1;
#else
    abort();
#endif
    return 0;
}
SYMJAC_MAIN(dispatch)
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("native")
    (out / "crash.c").write_text(CRASH)
    return {
        "pool": str(build(out, "pool.c")),
        "pool_bug": str(build(out, "pool.c", "-DSEED000_BUG")),
        "loss": str(build(out, "loss.c")),
        "loss_bug": str(build(out, "loss.c", "-DSEED003_BUG")),
        "abort": str(build(out, out / "crash.c", name="abort")),
        "segfault": str(build(out, out / "crash.c", "-DSEGFAULT", name="segfault")),
    }


def _findings(report: symjac.Report) -> list[tuple[str, str]]:
    return [(f.category, f.message) for f in report.findings]


# ------------------------------------------------------------------- the planted bugs


@pytest.mark.parametrize("name", ["pool.c", "loss.c"])
def test_the_kernel_authors_part_is_one_short_dispatch(name: str) -> None:
    # issue 22: the author's part of each contrib example is <= 60 lines of C, and no Python:
    # the file is its dispatch function, the includes and SYMJAC_MAIN
    text = (ROOT / "contrib" / "examples" / name).read_text()
    lines = text.splitlines()
    start = lines.index("static int dispatch(symjac_request *r) {")
    end = lines.index("}", start)
    assert end - start + 1 <= 60
    assert [line for line in lines[end + 1:] if line.strip()] == ["SYMJAC_MAIN(dispatch)"]
    assert text.count("static ") == 1  # nothing besides the dispatch


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_seed000_in_c_gets_the_report_of_its_python_twin(kernels: dict[str, str], dtype: str) -> None:
    x, dy = X.astype(dtype), ONES.astype(dtype)
    python = symjac.verify(SEED000, forward=nntrainer_pool.buggy.forward, backward=nntrainer_pool.buggy.backward,
                           x=x, dy=dy)
    with sjp.Child(kernels["pool_bug"]) as child:
        impl = sjp.impl(child, SEED000)
        native = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=x, dy=dy)
        # the audit: dx = [0.25] * 4 from the current source
        assert impl.backward(x, dy).tolist() == [[0.25, 0.25], [0.25, 0.25]]
    assert "visits 1 of 4 output windows" in python.headline  # the seed's own words
    assert native.categories() == python.categories() == ["missing_windows", "not_fd_consistent"]
    assert native.headline == python.headline
    assert _findings(native) == _findings(python)
    assert child.starts == 1  # one process served the whole verification


def test_seed000_fixed_in_c_gives_the_audits_gradient(kernels: dict[str, str]) -> None:
    impl = sjp.impl(kernels["pool"], SEED000)
    assert impl.forward(X).tolist() == [[2.5, 3.0], [3.5, 4.0]]  # seed 000: forward 2.5, 3, 3.5, 4
    assert impl.backward(X, ONES).tolist() == [[0.25, 0.75], [0.75, 2.25]]  # seed 000: the repair
    report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
    assert report.ok, report.headline


# The seed-000 loop bound (last window start <= L - k + top) cuts windows only in average pooling's
# backward and only where a window starts beyond L - k + top: more padding at the bottom than at
# the top (SAME with an even total), or a ceil-mode window overhanging the bottom padding.
POOLS = [
    (SEED000, False),                                                                  # pads (0, 1)
    (symjac.Pool("avg", 3, stride=2, padding=1, divisor="include_pad", ceil_mode=True), False),  # overhang
    (symjac.Pool("avg", (2, 3), stride=(1, 2), padding="same_lower"), True),          # extra pad on top
    (symjac.Pool("avg", 3, stride=1, padding=1), True),                               # symmetric pads
    (symjac.Pool("max", 3, stride=2, padding=1), True),                               # max: not that loop
    (symjac.Pool("max", (3, 2), stride=1, padding="same"), True),
]


@pytest.mark.parametrize(("spec", "bug_passes"), POOLS, ids=[repr(p) for p, _ in POOLS])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fixed_pooling_kernel_passes_the_coverage_plan(kernels: dict[str, str], spec: symjac.Pool,
                                                           bug_passes: bool, dtype: str) -> None:
    impl = sjp.impl(kernels["pool"], spec)
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, dtype=dtype)
    assert report.ok, report.headline
    bug = sjp.impl(kernels["pool_bug"], spec)
    bad = symjac.verify(spec, forward=bug.forward, backward=bug.backward, dtype=dtype)
    assert bad.ok == bug_passes, bad.headline
    if not bug_passes:
        assert bad.categories()[0] == "missing_windows", bad.headline


def test_seed003_missing_scale_in_c_as_in_python(kernels: dict[str, str]) -> None:
    loss = symjac.Loss("sigmoid_ce", scale=8)
    bug = sjp.loss_impl(kernels["loss_bug"], loss)
    # seed 003: logit 0, label 1, S = 8: the layer emits the base derivative -0.5, not -4
    assert bug.derivative(np.array([0.0]), np.array([1.0])).tolist() == [-0.5]
    native = symjac.verify_loss(loss, derivative=bug.derivative, forward=bug.forward, pred=[0.0], label=[1.0])

    def unscaled(z: np.ndarray, y: np.ndarray) -> np.ndarray:  # the Python twin: (sigmoid(z) - y) / n
        return ((1 / (1 + np.exp(-z)) - y) / z.size).astype(z.dtype)

    python = symjac.verify_loss(loss, derivative=unscaled, pred=[0.0], label=[1.0])
    assert native.categories() == python.categories() == ["missing_scale"]
    # the default inputs (six elements) too, in float32
    assert symjac.verify_loss(loss, derivative=bug.derivative, dtype="float32").categories() == ["missing_scale"]


@pytest.mark.parametrize("kind", ["mse", "sigmoid_ce"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fixed_loss_kernel_passes(kernels: dict[str, str], kind: str, reduction: str, dtype: str) -> None:
    loss = symjac.Loss(kind, reduction=reduction, scale=8)
    k = sjp.loss_impl(kernels["loss"], loss)
    report = symjac.verify_loss(loss, derivative=k.derivative, forward=k.forward, dtype=dtype)
    assert report.ok, report.headline
    # the seed-003 build: mse applies S (nntrainer's one correct loss), sigmoid_ce forgets it
    bug = sjp.loss_impl(kernels["loss_bug"], loss)
    cats = symjac.verify_loss(loss, derivative=bug.derivative, forward=bug.forward, dtype=dtype).categories()
    assert cats == ([] if kind == "mse" else ["missing_scale"])


def test_a_refusal_is_a_finding_that_names_the_reason(kernels: dict[str, str]) -> None:
    spec = symjac.FractionalMaxPool(2, output_size=3)  # the one pooling operator pool.c does not implement
    impl = sjp.impl(kernels["pool"], spec)
    report = symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 5, 5))
    assert "bad_output" in report.categories()
    assert any("operator fractional_max_pool is not implemented" in f.message and "KernelRefused" in f.message
               for f in report.findings)


def test_large_arrays_cross_both_pipes(kernels: dict[str, str]) -> None:
    # 2 x 3 x 256 x 256 float64: 3 MiB each way, far beyond a pipe's buffer
    spec = symjac.Pool("avg", 3, stride=1, padding=1)
    x = np.random.default_rng(0).standard_normal((2, 3, 256, 256))
    dy = np.random.default_rng(1).standard_normal((2, 3, 256, 256))
    impl = sjp.impl(kernels["pool"], spec)
    lowered = symjac.lower(spec, x.shape)
    np.testing.assert_allclose(impl.forward(x), lowered.forward(x), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(impl.backward(x, dy), lowered.vjp(x, dy), rtol=1e-13, atol=1e-13)


# ------------------------------------------------------------------------- faults


def _python_child(mode: str, tmp_path: pathlib.Path, once: bool = True) -> sjp.Child:
    """The fault child; its deadline 2 s when it hangs, else 5 s (room for a slow start on a busy machine)."""
    argv = [sys.executable, CHILD, mode] + ([str(tmp_path / "faulted")] if once else [])
    return sjp.Child(argv, timeout=2.0 if mode == "hang" else 5.0)


FAULTS = [
    ("hang", sjp.ChildTimeout, r"did not answer within 2 s \(request 1, backward: 0 response bytes received\)"),
    ("exit3", sjp.ChildCrashed, r"exited with code 3 before answering"),
    ("segv", sjp.ChildCrashed, r"was killed by SIGSEGV"),
    ("garbage", sjp.ProtocolError, r"does not begin with 'symjac 1 response': it begins b'hello, I am not a kernel"),
    ("short_exit", sjp.ChildCrashed, r"exited with code 0 before answering \(request 1, backward: \d+ of \d+ response"),
    ("short_hang", sjp.ChildTimeout, r"did not answer within 5 s \(request 1, backward: (\d+) of (?!\1)\d+ response"),
    ("extra", sjp.ProtocolError, r"wrote 8 bytes more than its response to request 1"),
    ("wrong_bytes", sjp.ProtocolError, r"announces 104 payload bytes; its arrays need 96"),
    ("wrong_id", sjp.ProtocolError, r"answer out of turn: request 1 \(backward\) got the answer of id '2'"),
    ("answer_first", sjp.ProtocolError, r"(answer out of turn: request 1 \(backward\) got the answer of id '0')"
                                        r"|(wrote \d+ bytes out of turn, before request 1)"),
    ("refuse", sjp.KernelRefused, r"refused backward \(request 1\): no such kernel here"),
]


@pytest.mark.parametrize(("mode", "error", "text"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_raises_and_the_next_call_gets_a_fresh_child(tmp_path: pathlib.Path, mode: str,
                                                             error: type[Exception], text: str) -> None:
    x, dy = np.zeros((1, 1, 3, 4)), np.zeros((1, 1, 3, 4))  # 96 bytes of dx (float64, 12 cells)
    with _python_child(mode, tmp_path) as child:
        impl = sjp.impl(child, SEED000)
        start = time.monotonic()
        with pytest.raises(error, match=text):
            impl.backward(x, dy)
        assert time.monotonic() - start < 15  # the deadline is 2 or 5 s; never a hang
        assert impl.backward(x, dy).tolist() == np.zeros((1, 1, 3, 4)).tolist()  # the next call is served
        assert child.starts == (1 if mode == "refuse" else 2)  # a refusal keeps the child


def test_an_answer_repeated_later_is_out_of_turn_at_the_next_request(tmp_path: pathlib.Path) -> None:
    with _python_child("twice", tmp_path) as child:
        impl = sjp.impl(child, SEED000)
        assert impl.forward(X).shape == (2, 2)  # the first answer is whole
        time.sleep(0.5)  # the repeat arrives meanwhile
        # the repeat is read before request 2 is sent, or (on a slow machine) as its answer
        with pytest.raises(sjp.ProtocolError, match=r"(bytes out of turn, before request 2 \(after answering "
                                                    r"request 1 \(forward\)\))|(answer out of turn: request 2 "
                                                    r"\(forward\) got the answer of id '1')"):
            impl.forward(X)
        assert impl.forward(X).shape == (2, 2) and child.starts == 2


def _wait_for_exit(child: sjp.Child) -> None:
    """Until the child's process has ended (a test reads the private handle to know)."""
    proc = child._proc
    assert proc is not None
    proc.wait(timeout=30)


def test_a_program_serving_one_request_per_run_is_restarted_silently(tmp_path: pathlib.Path) -> None:
    with _python_child("one_shot", tmp_path, once=False) as child:
        impl = sjp.impl(child, SEED000)
        for _ in range(3):
            assert impl.forward(X).shape == (2, 2)
            _wait_for_exit(child)
        assert child.starts == 3


def test_a_crash_after_answering_is_reported_at_the_next_request(tmp_path: pathlib.Path) -> None:
    with _python_child("exit_after", tmp_path) as child:
        impl = sjp.impl(child, SEED000)
        assert impl.forward(X).shape == (2, 2)
        _wait_for_exit(child)
        with pytest.raises(sjp.ChildCrashed, match=r"exited with code 3 between requests, after answering request 1 "
                                                   r"\(forward\)"):
            impl.forward(X)
        assert impl.forward(X).shape == (2, 2) and child.starts == 2


@pytest.mark.parametrize(("name", "signal_name"), [("abort", "SIGABRT"), ("segfault", "SIGSEGV")])
def test_a_c_kernel_that_crashes_is_a_finding_naming_the_signal(kernels: dict[str, str], name: str,
                                                                signal_name: str) -> None:
    impl = sjp.impl(sjp.Child(kernels[name], timeout=5.0), SEED000)
    with pytest.raises(sjp.ChildCrashed, match=f"was killed by {signal_name}"):
        impl.backward(X, ONES)
    report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
    messages = [f.message for f in report.findings if f.category == "bad_output"]
    assert any(f"ChildCrashed: kernel `{kernels[name]}` was killed by {signal_name}" in m for m in messages), messages


# hang and short_hang wait out a deadline at every call of a verify run (30 s and 25 s): slow; the default
# run keeps both faults' own messages in test_a_fault_raises_and_the_next_call_gets_a_fresh_child
@pytest.mark.parametrize("mode", [pytest.param("hang", marks=pytest.mark.slow), "exit3", "segv", "garbage", "short_exit",
                                  pytest.param("short_hang", marks=pytest.mark.slow), "extra", "wrong_bytes",
                                  "wrong_id", "refuse"])
def test_verify_reports_a_faulty_child_and_returns(tmp_path: pathlib.Path, mode: str) -> None:
    # every call faults (no marker): each is a finding, and verify still ends in bounded time
    child = _python_child(mode, tmp_path, once=False)
    impl = sjp.impl(child, SEED000)
    start = time.monotonic()
    report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
    # bounded, not fast: short_hang waits out its 5 s deadline at each call (76 s measured idle once every
    # call is checked and max's orders family runs; a hang guard, not a speed target)
    assert time.monotonic() - start < 180
    error = next(e for m, e, _ in FAULTS if m == mode)
    assert not report.ok
    assert any(f.category == "bad_output" and error.__name__ in f.message for f in report.findings), \
        _findings(report)
    child.close()


def test_a_kernel_that_writes_to_its_input_is_seen_by_the_mutation_check(tmp_path: pathlib.Path) -> None:
    with _python_child("mutate", tmp_path, once=False) as child:
        impl = sjp.impl(child, SEED000)
        x = X.copy()
        impl.backward(x, ONES.copy())
        assert x.tolist() == [[0.0, 0.0], [0.0, 0.0]]  # the state the child returned, written back
        report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES)
    assert "mutates_inputs" in report.categories()
    assert any("changed x in place" in f.message for f in report.findings)


def test_a_chatty_child_cannot_block(tmp_path: pathlib.Path) -> None:
    # 1 MiB on stderr before each answer: more than a pipe holds, drained while waiting
    with _python_child("chatty", tmp_path, once=False) as child:
        impl = sjp.impl(child, SEED000)
        for _ in range(3):
            assert impl.forward(X).shape == (2, 2)
        assert child.stderr_tail().endswith("x" * 100) and child.starts == 1


def test_a_guard_timeout_below_the_childs_deadline_does_not_hold_the_next_call(tmp_path: pathlib.Path) -> None:
    # symjac's guard gives up after 0.5 s; the child's own deadline is 30 s: the next call kills the
    # abandoned child at once, so the report arrives long before 30 s
    child = sjp.Child([sys.executable, CHILD, "hang"], timeout=30.0)
    impl = sjp.impl(child, SEED000)
    start = time.monotonic()
    report = symjac.verify(SEED000, forward=impl.forward, backward=impl.backward, x=X, dy=ONES, timeout=0.5)
    assert time.monotonic() - start < 25
    assert "timeout" in report.categories()
    child.close()


def test_a_command_that_cannot_start_is_refused_when_given() -> None:
    # a usage error, not a kernel's defect: refused by impl() (and by verify --exec, exit 2)
    with pytest.raises(sjp.BadCommand, match="cannot run kernel `/nonexistent/kernel --flag`: /nonexistent/kernel "
                                             "does not exist"):
        sjp.impl("/nonexistent/kernel --flag", SEED000)


# ------------------------------------------------------------------- the command line


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_symjac_verify_exec(kernels: dict[str, str]) -> None:
    seed000 = "specs/seeds/nntrainer_avgpool_same_2x2.toml"
    bug = cli_runner.symjac("verify", seed000, "--exec", kernels["pool_bug"])
    assert bug.returncode == 1, bug.stderr
    assert bug.stdout.startswith("FAIL nntrainer_avgpool_same_2x2: backward visits 1 of 4 output windows")
    fixed = cli_runner.symjac("verify", seed000, "--exec", kernels["pool"])
    assert fixed.returncode == 0 and fixed.stdout.startswith("PASS nntrainer_avgpool_same_2x2"), fixed.stdout
    losses = cli_runner.symjac("verify", "specs/seeds/loss_scale_family.toml", "--exec", kernels["loss_bug"], "--case", "sigmoid_ce",
                  "--case", "mse", "--json")
    assert losses.returncode == 1
    by_case = {r["case"]: r for r in json.loads(losses.stdout)}
    assert [f["category"] for f in by_case["sigmoid_ce"]["findings"]] == ["missing_scale"]
    assert by_case["mse"]["findings"] == []  # nntrainer's mse applies S
    neither = cli_runner.symjac("verify", seed000)
    assert neither.returncode == 2 and "give one of --impl MODULE_OR_PATH[:ATTR], --exec CMD" in neither.stderr


def test_a_driver_refusing_unknown_settings_takes_the_seed_losses(tmp_path: pathlib.Path) -> None:
    # issue 33 item 8: docs/native.md sends a loss's `operator`, `kind`, `reduction`, `scale`, then only the
    # options that differ from the kind's default. The seed-003 cases set none, so a driver that knows only
    # the mandatory keys takes every one (before: softmax_ce sent `label_smoothing 0`, `labels probabilities`,
    # kld `log_input 0`, `log_target 0`, and this driver refused them).
    from symjac.io._specfile import load
    cases = load(ROOT / "specs" / "seeds" / "loss_scale_family.toml").cases
    pred, label = np.zeros((1, 2)), np.zeros((1, 2))
    with sjp.Child([sys.executable, CHILD, "strict"], timeout=5.0) as child:
        for case in cases:
            impl = sjp.impl_for(child, case.operator)
            assert impl.derivative(pred, label).shape == (1, 2), case.name
        # the driver does refuse what it does not know: an option away from its default is sent
        impl = sjp.impl_for(child, symjac.Loss("kld", log_input=True))
        with pytest.raises(sjp.KernelRefused, match="unknown setting log_input"):
            impl.derivative(pred, label)
