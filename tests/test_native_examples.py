"""contrib/examples/pool.c and loss.c cover every option the protocol sends (issue 33: docs/native.md is
complete for a C/C++ team; the example drivers cover both families and every option).

Each grid is a spec file verified through ``symjac verify SPEC --exec PROGRAM`` (one process for every
case): rank 1, 2 and 3, both layouts, dilation, ceil_mode, the three divisors, pad_value, lp p = 2 and 3
at a zero window (both zero_window rules), adaptive and global pooling; the reductions mean, batch_mean,
sum and none with sigmoid_ce's weight and pos_weight and softmax_ce's labels, weight, ignore_index and
label_smoothing. Every case must PASS. Each planted defect (a -D macro, listed in the kernels' headers)
must FAIL the cases it concerns. The default run verifies the grids at small explicit inputs in float64;
``--run-slow`` adds float32 and every pooling case over its whole coverage plan.
"""

from __future__ import annotations

import pathlib
import re

import pytest

import cli_runner
import symjac.frameworks.native.process as sjp
from native_kernels import (CC, CXX, CXX_FLAGS, EXAMPLES, FLAGS, INCLUDES, OPTIMISED, ROOT, SHARED,  # noqa: F401
                            build, deadline, needs_cc, run_compiler)  # deadline: a fixture
from symjac.io._case import verify_case
from symjac.io._specfile import load

pytestmark = [needs_cc, pytest.mark.usefixtures("deadline")]


def _case(name: str, operator: str, inputs: str = "") -> str:
    text = f'[[case]]\nname = "{name}"\n[case.operator]\n{operator.strip()}\n'
    return text + (f"[case.input]\n{inputs.strip()}\n" if inputs else "")


#: name -> (operator keys, input keys): the pooling grid.
POOLS = {
    "max_1d_dilated_ceil": ('kind = "pool"\nmode = "max"\nkernel = [3]\nstride = 2\npadding = 1\ndilation = 2\n'
                            'ceil_mode = true', "shape = [2, 3, 12]"),
    "avg_2d_last_include_ceil": ('kind = "pool"\nmode = "avg"\nkernel = [3, 2]\nstride = [2, 1]\n'
                                 'padding = [[1, 0], [1, 1]]\nceil_mode = true\ndivisor = "include_pad"\n'
                                 'layout = "channels_last"', "shape = [2, 7, 6, 3]"),
    "avg_3d_dilated": ('kind = "pool"\nmode = "avg"\nkernel = [2, 3, 2]\nstride = [1, 2, 2]\ndilation = [2, 1, 1]\n'
                       'padding = 1', "shape = [1, 2, 6, 7, 5]"),
    "max_3d_last_dilated": ('kind = "pool"\nmode = "max"\nkernel = [2, 2, 2]\nstride = 1\ndilation = 2\npadding = 1\n'
                            'ceil_mode = true\nlayout = "channels_last"', "shape = [1, 5, 4, 5, 2]"),
    "avg_same": ('kind = "pool"\nmode = "avg"\nkernel = 2\nstride = 1\npadding = "same"', "shape = [1, 2, 4, 5]"),
    "avg_divisor_4": ('kind = "pool"\nmode = "avg"\nkernel = 3\nstride = 2\npadding = 1\ndivisor = 4',
                      "shape = [1, 2, 7, 7]"),
    "max_pad_value_0": ('kind = "pool"\nmode = "max"\nkernel = 3\nstride = 2\npadding = 1\npad_value = 0',
                        'shape = [1, 2, 7, 7]\ngenerator = "all_negative"'),
    "lp2_zero_window": ('kind = "pool"\nmode = "lp"\nkernel = [2]\np = 2', "x = [[[0, 0, 3, 4, -1, 2]]]"),
    "lp3_zero_window_one": ('kind = "pool"\nmode = "lp"\nkernel = [2]\np = 3\nzero_window = "one"',
                            "x = [[[0, 0, 3, 4, 1, 2]]]"),
    "lp2_2d_last": ('kind = "pool"\nmode = "lp"\nkernel = [2, 3]\nstride = 1\np = 2\nlayout = "channels_last"',
                    "shape = [1, 4, 5, 2]"),
    "adaptive_avg_3d": ('kind = "adaptive_pool"\nmode = "avg"\noutput_size = [2, 3, 2]', "shape = [1, 2, 5, 7, 3]"),
    "adaptive_max_1d_last": ('kind = "adaptive_pool"\nmode = "max"\noutput_size = [5]\nlayout = "channels_last"',
                             "shape = [2, 3, 2]"),
    "global_avg_1d": ('kind = "global_pool"\nmode = "avg"\nrank = 1', "shape = [2, 3, 5]"),
    "global_max_3d_last": ('kind = "global_pool"\nmode = "max"\nrank = 3\nlayout = "channels_last"',
                           "shape = [1, 3, 2, 4, 2]"),
}

#: name -> (operator keys, input keys): the loss grid (2-D preds, so batch_mean's B = 2 differs from n).
LOSSES = {
    "mse_batch_mean": ('kind = "loss"\nloss = "mse"\nreduction = "batch_mean"\nscale = 8',
                       "pred = [[0.5, -1, 2], [1, 0, -3]]\nlabel = [[0, 1, 1], [2, 0, 1]]"),
    "sigmoid_ce_weights": ('kind = "loss"\nloss = "sigmoid_ce"\nweight = [1, 2, "1/2"]\npos_weight = [3, "1/4", 1]',
                           "pred = [[0.5, -1, 2], [1, 0, -3]]\nlabel = [[0, 1, 1], [1, 0, \"1/2\"]]"),
    "sigmoid_ce_pos_weight_batch_mean": ('kind = "loss"\nloss = "sigmoid_ce"\npos_weight = 2\n'
                                         'reduction = "batch_mean"\nscale = 4',
                                         "pred = [[0.5, -1, 2], [1, 0, -3]]\nlabel = [[0, 1, 1], [1, 0, 1]]"),
    "sigmoid_ce_weight_none": ('kind = "loss"\nloss = "sigmoid_ce"\nweight = ["1/2", 2]\nreduction = "none"',
                               "pred = [[0.5, -1], [1, 0]]\nlabel = [[0, 1], [1, 0]]"),
    "softmax_ce_probabilities": ('kind = "loss"\nloss = "softmax_ce"\nweight = [1, "1/2", 2]\n'
                                 'label_smoothing = "1/4"',
                                 'pred = [[0.5, -1, 2], [1, 0, -3]]\nlabel = [["1/4", "3/4", 0], [0, 0, 1]]'),
    "softmax_ce_indices_ignore": ('kind = "loss"\nloss = "softmax_ce"\nlabels = "indices"\nweight = [1, "1/2", 2]\n'
                                  'ignore_index = 1\nlabel_smoothing = "1/8"',
                                  "pred = [[0.5, -1, 2], [1, 0, -3], [2, 2, 0], [0, 1, 0]]\nlabel = [0, 2, 1, 1]"),
    "softmax_ce_indices_batch_mean": ('kind = "loss"\nloss = "softmax_ce"\nlabels = "indices"\nignore_index = 0\n'
                                      'reduction = "batch_mean"',
                                      "pred = [[[0.5, -1, 2], [1, 0, -3]], [[2, 2, 0], [0, 1, 0]]]\n"
                                      "label = [[0, 2], [1, 0]]"),
    "softmax_ce_indices_none": ('kind = "loss"\nloss = "softmax_ce"\nlabels = "indices"\nreduction = "none"\n'
                                'scale = 8\nignore_index = 2', "pred = [[0.5, -1, 2], [1, 0, -3]]\nlabel = [2, 0]"),
    "softmax_ce_sum_3d": ('kind = "loss"\nloss = "softmax_ce"\nreduction = "sum"',
                          'pred = [[[0.5, -1], [1, 0]], [[2, 2], [0, 1]]]\nlabel = [[[1, 0], [0, 1]], [[0, 1], '
                          '["1/2", "1/2"]]]'),
    # the default inputs (symjac.default_loss_inputs): its extreme and non-finite families too
    "sigmoid_ce_default_inputs": ('kind = "loss"\nloss = "sigmoid_ce"\nweight = [2]\npos_weight = "3/2"', ""),
    "softmax_ce_default_inputs": ('kind = "loss"\nloss = "softmax_ce"\nlabels = "indices"\nweight = [1, 2, 3]\n'
                                  'label_smoothing = "1/10"\nreduction = "batch_mean"', ""),
}

#: (source, macro) -> the cases its defect fails: each planted defect is caught.
DEFECTS = {
    ("pool.c", "-DSEED000_BUG"): ["avg_same"],
    ("pool.c", "-DDILATION_BUG"): ["max_1d_dilated_ceil", "avg_3d_dilated"],
    ("pool.c", "-DCHANNELS_LAST_BUG"): ["avg_2d_last_include_ceil", "lp2_2d_last"],
    ("pool.c", "-DCEIL_DIVISOR_BUG"): ["avg_2d_last_include_ceil"],
    ("pool.c", "-DDIVISOR_BUG"): ["avg_divisor_4"],
    ("pool.c", "-DLP_ZERO_BUG"): ["lp2_zero_window", "lp3_zero_window_one"],
    ("pool.c", "-DADAPTIVE_BUG"): ["adaptive_avg_3d"],
    ("loss.c", "-DBATCH_MEAN_BUG"): ["mse_batch_mean", "softmax_ce_indices_batch_mean"],
    ("loss.c", "-DPOS_WEIGHT_BUG"): ["sigmoid_ce_weights", "sigmoid_ce_pos_weight_batch_mean"],
    ("loss.c", "-DIGNORE_INDEX_BUG"): ["softmax_ce_indices_ignore"],
}


#: The defects the default run checks (the rest with --run-slow).
FAST = {"-DDILATION_BUG", "-DCHANNELS_LAST_BUG", "-DBATCH_MEAN_BUG"}
DEFECT_PARAMS = [pytest.param(source, macro, id=macro[2:], marks=() if macro in FAST else pytest.mark.slow)
                 for source, macro in DEFECTS]


def _grid(path: pathlib.Path, cases: dict[str, tuple[str, str]], inputs: bool = True) -> pathlib.Path:
    path.write_text("\n".join(_case(name, op, given if inputs else "") for name, (op, given) in cases.items()))
    return path


@pytest.fixture(scope="module")
def grids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    out = tmp_path_factory.mktemp("grids")
    return {"pool": _grid(out / "pool.toml", POOLS), "loss": _grid(out / "loss.toml", LOSSES),
            "pool_plan": _grid(out / "pool_plan.toml", POOLS, inputs=False)}


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("drivers")
    return {"pool.c": str(build(out, "pool.c")), "loss.c": str(build(out, "loss.c"))}


def _verify(spec: pathlib.Path, program: str, *args: str) -> dict[str, str]:
    """``symjac verify SPEC --exec PROGRAM``: each case's verdict line, by case name."""
    run = cli_runner.symjac("verify", str(spec), "--exec", program, *args)
    lines = [line for line in run.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert lines, f"exit {run.returncode}: {run.stdout}\n{run.stderr}"
    return {line.split()[1].rstrip(":"): line for line in lines}


@pytest.mark.parametrize("family", ["pool", "loss"])
def test_every_option_of_the_grid_passes_through_exec(grids: dict[str, pathlib.Path], programs: dict[str, str],
                                                      family: str) -> None:
    cases = POOLS if family == "pool" else LOSSES
    verdicts = _verify(grids[family], programs[f"{family}.c"])
    assert sorted(verdicts) == sorted(cases)
    failed = [line for line in verdicts.values() if not line.startswith("PASS ")]
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize(("grid", "dtype"), [("pool", "float32"), ("loss", "float32"), ("pool_plan", "float64"),
                                             ("pool_plan", "float32")])
def test_the_whole_grid_passes_in_both_dtypes_and_over_the_coverage_plans(grids: dict[str, pathlib.Path],
                                                                         programs: dict[str, str], grid: str,
                                                                         dtype: str) -> None:
    verdicts = _verify(grids[grid], programs["loss.c" if grid == "loss" else "pool.c"], "--dtype", dtype)
    assert len(verdicts) == len(LOSSES if grid == "loss" else POOLS)
    failed = [line for line in verdicts.values() if not line.startswith("PASS ")]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize(("source", "macro"), DEFECT_PARAMS)
def test_each_planted_defect_fails_its_cases(grids: dict[str, pathlib.Path], tmp_path: pathlib.Path, source: str,
                                             macro: str) -> None:
    program = str(build(tmp_path, source, macro))
    spec = load(grids["pool" if source == "pool.c" else "loss"])
    wanted = DEFECTS[(source, macro)]
    with sjp.Child(program) as child:
        for case in (c for c in spec.cases if c.name in wanted):
            report = verify_case(case, sjp.impl_for(child, case.operator), "float64")
            assert not report.ok, f"{macro} passes {case.name}: {report.headline}"
            assert not any("KernelRefused" in f.message for f in report.findings), report.headline  # not a refusal


@pytest.mark.slow
@pytest.mark.parametrize(("source", "macro"), list(DEFECTS), ids=[m[2:] for _, m in DEFECTS])
def test_each_planted_defect_fails_through_exec(grids: dict[str, pathlib.Path], tmp_path: pathlib.Path, source: str,
                                                macro: str) -> None:
    program = str(build(tmp_path, source, macro))
    wanted = DEFECTS[(source, macro)]
    cases = [arg for name in wanted for arg in ("--case", name)]
    verdicts = _verify(grids["pool" if source == "pool.c" else "loss"], program, *cases)
    assert sorted(verdicts) == sorted(wanted)
    assert all(line.startswith("FAIL ") for line in verdicts.values()), verdicts


def _variants() -> list[object]:
    """Each source of contrib/examples as it is, with each macro it or an example header it includes
    tests (its planted defects, pool.cpp's VERBOSE), and as a library (-DSYMJAC_SHARED)."""
    variants = []
    for source in sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".c", ".cpp")):
        text = source.read_text()
        headers = re.findall(r'^#include "(\w+\.h)"', text, re.M)
        text += "".join((EXAMPLES / h).read_text() for h in headers if (EXAMPLES / h).is_file())
        macros = sorted(set(re.findall(r"^#\s*if(?:n?def)?\s+(\w+)\s*$", text, re.M)) - {"__cplusplus"})
        variants += [pytest.param(source.name, (), id=f"{source.name}-as_is")]
        variants += [pytest.param(source.name, (f"-D{m}",), id=f"{source.name}-{m}") for m in macros
                     if not m.endswith("_H")]
        variants += [pytest.param(source.name, SHARED[1:], id=f"{source.name}-shared")]
    return variants


# Each variant is checked nowhere else: the README's run takes a sample, .ci/run's full suite every variant.
@pytest.mark.parametrize(("source", "flags"), _variants())
def test_the_examples_build_warning_free_optimised(tmp_path: pathlib.Path, source: str, flags: tuple[str, ...]) -> None:
    # The tests build at -O0 (native_kernels.FLAGS): fast. The warnings only an optimising compile
    # gives (-Wmaybe-uninitialized, -Wformat-truncation, ...) are checked here, once a variant: at -O2
    # with every warning an error, and each source as it is also at -O3 (nothing on stderr).
    cxx = source.endswith(".cpp")
    compiler = CXX if cxx else CC
    if compiler is None:
        pytest.skip("no C++ compiler (c++ or g++) on PATH" if cxx else "no C compiler (cc or gcc) on PATH")
    flags_o0 = CXX_FLAGS if cxx else FLAGS
    run_compiler([compiler, *(f for f in flags_o0 if not f.startswith("-O")), *OPTIMISED, *INCLUDES, *flags, "-c",
                  "-o", str(tmp_path / "k.o"), str(EXAMPLES / source)])
    if not flags:
        cmd = [compiler, "-Wall", "-Wextra", "-O3", *INCLUDES, "-c", "-o", str(tmp_path / "k.o"), str(EXAMPLES / source)]
        proc = run_compiler(cmd, check=False)
        assert proc.returncode == 0 and not proc.stderr, f"{' '.join(cmd)}:\n{proc.stderr}"
