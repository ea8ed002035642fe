"""Golden data: per-entry bounds a correct implementation stays within, dtypes in every
format, loss values, and the C/C++ reader in contrib/ (compiled when a compiler exists)."""

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from native_kernels import CC, CXX, build, run_compiler

import cli_runner

ROOT = Path(__file__).resolve().parent.parent
AVG3 = """name = "avg3"
[operator]
kind = "pool"
mode = "avg"
kernel = 3
stride = 1
[input]
shape = [1, 1, 6, 6]
generator = "random"
seed = 3
"""


def golden(spec_text, tmp_path, *args):
    spec = tmp_path / "case.toml"
    spec.write_text(spec_text)
    out = tmp_path / "golden"
    r = cli_runner.symjac("golden", str(spec), "--out", str(out), *args)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_torch_avg_pool_stays_within_each_entry_bound(tmp_path, dtype):
    # An independent correct implementation (PyTorch's avg_pool2d and its autograd) in the
    # working dtype: every entry within its own max_abs_error of the golden value, with no
    # threshold of our own; 1/9 weights are not exact in binary, so the bound is exercised.
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    doc = json.loads((golden(AVG3, tmp_path, "--dtype", dtype) / "avg3.json").read_text())
    arrays = doc["arrays"]
    tdt = getattr(torch, dtype)
    x = torch.tensor(np.array(arrays["x"][dtype]).reshape(arrays["x"]["shape"]), dtype=tdt, requires_grad=True)
    dy = torch.tensor(np.array(arrays["dy"][dtype]).reshape(arrays["dy"]["shape"]), dtype=tdt)
    y = F.avg_pool2d(x, 3, stride=1)
    y.backward(dy)
    for name, got in (("y", y.detach()), ("dx", x.grad)):
        got = got.double().numpy().reshape(-1)
        want = np.array(arrays[name][dtype])
        bound = np.array(arrays[name]["max_abs_error"][dtype])
        assert np.all(np.abs(got - want) <= bound), (name, np.abs(got - want) / bound)
        # The bound is tight enough to see a window lost: 1/9 of a cell's gradient is far outside.
        ninth = np.abs(want) / 9
        assert np.all(bound[ninth > 0] < ninth[ninth > 0])
        # max_ulp is the same bound in units of the golden value's last place.
        spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
        assert np.allclose(np.array(arrays[name]["max_ulp"][dtype]) * spacing, bound, rtol=1e-12)


def naive_avg3_backward(dy, shape, dtype):
    """A textbook loop: dx[cell] += dy[window] * (1/9), all in ``dtype`` (rounds at every step)."""
    dt = np.dtype(dtype)
    dx = np.zeros(shape, dtype=dt)
    ninth = dt.type(1) / dt.type(9)
    for i in range(dy.shape[0]):
        for j in range(dy.shape[1]):
            for a in range(3):
                for b in range(3):
                    dx[i + a, j + b] = dt.type(dx[i + a, j + b] + dt.type(dy[i, j] * ninth))
    return dx


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_naive_float_loop_differs_from_golden_but_within_bounds(tmp_path, dtype):
    doc = json.loads((golden(AVG3, tmp_path, "--dtype", dtype) / "avg3.json").read_text())
    dx, dy = doc["arrays"]["dx"], doc["arrays"]["dy"]
    got = naive_avg3_backward(np.array(dy[dtype], dtype=dtype).reshape(4, 4), (6, 6), dtype).astype(np.float64)
    want, bound = np.array(dx[dtype]), np.array(dx["max_abs_error"][dtype])
    assert np.any(got.reshape(-1) != want)  # a hand-picked zero tolerance would fail this correct loop
    assert np.all(np.abs(got.reshape(-1) - want) <= bound)


def test_bound_of_an_exact_zero_is_zero(tmp_path):
    # A cell in no window (kernel 2, stride 3 on length 5 skips index 2) has dx = 0 exactly.
    spec = AVG3.replace("kernel = 3\nstride = 1", "kernel = 2\nstride = 3").replace("[1, 1, 6, 6]", "[5, 5]")
    dx = json.loads((golden(spec, tmp_path) / "avg3.json").read_text())["arrays"]["dx"]
    zero = [i for i, v in enumerate(dx["exact"]) if v == "0"]
    assert zero and all(dx["max_abs_error"]["float32"][i] == 0 for i in zero)


def test_dtype_is_honoured_by_every_format(tmp_path):
    out = golden(AVG3, tmp_path, "--format", "json,npz,bin", "--dtype", "float16")
    doc = json.loads((out / "avg3.json").read_text())
    assert doc["dtypes"] == ["float16"]
    assert set(doc["arrays"]["dx"]) == {"shape", "exact", "float16", "max_abs_error", "max_ulp"}
    # float16 values are the correct rounding of the exact ones (numpy's float16 of the float64 of
    # a dyadic with few bits is exact; compare through Fractions).
    from fractions import Fraction

    for exact, f16 in zip(doc["arrays"]["y"]["exact"], doc["arrays"]["y"]["float16"]):
        assert float(np.float16(Fraction(exact))) == f16 or abs(Fraction(f16) - Fraction(exact)) <= abs(
            Fraction(float(np.float16(Fraction(exact)))) - Fraction(exact))
    z = np.load(out / "avg3.npz")
    assert sorted(k for k in z.files if k.startswith("dx")) == ["dx.float16", "dx.float16.max_abs_error"]
    assert z["dx.float16"].dtype == np.float16
    index = json.loads((out / "avg3" / "index.json").read_text())
    assert index["arrays"]["dx.float16"]["dtype"] == "<f2"


def test_loss_json_scalar_value_and_decimal_digits(tmp_path):
    # sigmoid_ce at z = 0, y = 1, mean over one element: log(1 + e^0) = log 2 (mpmath, independently).
    spec = '[operator]\nkind = "loss"\nloss = "sigmoid_ce"\nscale = 8\n[input]\npred = [0]\nlabel = [1]\n'
    doc = json.loads((golden(spec, tmp_path, "--dtype", "float32,float64") / "case.json").read_text())
    value = doc["arrays"]["value"]
    assert value["shape"] == [] and isinstance(value["float64"], float) and isinstance(value["exact"], str)
    assert value["float64"] == float(mpmath.log(2))
    with mpmath.workdps(50):
        assert value["exact"] == mpmath.nstr(mpmath.log(2), 40, strip_zeros=False)
    assert len(value["exact"]) < 45 and "/" not in value["exact"]
    # The derivative S * (sigmoid(0) - 1) = -4 is an exact binary fraction: written as one.
    assert doc["arrays"]["derivative"]["exact"] == ["-4"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_scaled_sigmoid_ce_stays_within_the_loss_bounds(tmp_path, dtype):
    # PyTorch's binary_cross_entropy_with_logits (mean) and its autograd, scaled by S = 8.
    torch = pytest.importorskip("torch")
    spec = ('[operator]\nkind = "loss"\nloss = "sigmoid_ce"\nscale = 8\n'
            '[input]\npred = [[0.5, -1.25, 3], [2, 0.75, -0.5]]\nlabel = [[1, 0, 1], [0, 1, 0]]\n')
    arrays = json.loads((golden(spec, tmp_path, "--dtype", dtype) / "case.json").read_text())["arrays"]
    tdt = getattr(torch, dtype)
    z = torch.tensor(arrays["pred"][dtype], dtype=tdt).reshape(2, 3).requires_grad_()
    y = torch.tensor(arrays["label"][dtype], dtype=tdt).reshape(2, 3)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    (8 * loss).backward()
    value = arrays["value"]
    assert abs(float(loss.detach()) - value[dtype]) <= value["max_abs_error"][dtype]
    got = z.grad.double().numpy().reshape(-1)
    want, bound = np.array(arrays["derivative"][dtype]), np.array(arrays["derivative"]["max_abs_error"][dtype])
    assert np.all(np.abs(got - want) <= bound), np.abs(got - want) / bound
    # A forgotten scale (seed 003) is far outside: 7/8 of each value.
    assert np.all(np.abs(got / 8 - want) > bound)


@pytest.mark.parametrize("compiler", ["gcc", "g++"])
def test_c_and_cpp_header_reads_every_array(tmp_path, compiler):
    if (CXX if compiler == "g++" else CC) is None:
        pytest.skip(f"no {'C++' if compiler == 'g++' else 'C'} compiler")
    src = tmp_path / ("dump.c" if compiler == "gcc" else "dump.cpp")
    src.write_text(r'''
#include <stdio.h>
#include "symjac_golden.h"
int main(int argc, char **argv) {
    symjac_golden_array a;
    char err[256];
    size_t i, first = 0;
    if (argc != 3) return 2;
    if (symjac_golden_load(argv[1], argv[2], &a, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    printf("%s %d %lu\n", a.dtype, a.ndim, (unsigned long)a.count);
    for (i = 0; i < a.count; i++) printf("%.17g %.17g\n", a.values[i], a.max_abs_error ? a.max_abs_error[i] : -1.0);
    double *got = (double *)malloc(a.count * sizeof(double));
    for (i = 0; i < a.count; i++) got[i] = a.values[i];
    got[0] += a.max_abs_error ? 2 * a.max_abs_error[0] + 1 : 1;   /* one element out of bounds */
    printf("%lu %lu\n", (unsigned long)symjac_golden_check(&a, got, &first), (unsigned long)first);
    free(got);
    symjac_golden_free(&a);
    return 0;
}
''')
    exe = build(tmp_path, src)  # C99 or C++11 by the suffix, every warning an error
    out = golden(AVG3, tmp_path, "--format", "bin", "--dtype", "float16,float32,float64")
    folder = out / "avg3"
    index = json.loads((folder / "index.json").read_text())["arrays"]
    for name, entry in index.items():
        run = subprocess.run([str(exe), str(folder), name], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        lines = run.stdout.splitlines()
        assert lines[0] == f"{entry['dtype']} {len(entry['shape'])} {entry['count']}"
        values = np.array([float(line.split()[0]) for line in lines[1:-1]])
        stored = np.fromfile(folder / entry["file"], dtype=entry["dtype"]).astype(np.float64)
        assert np.array_equal(values, stored), name
        if "max_abs_error_file" in entry:
            bounds = np.fromfile(folder / entry["max_abs_error_file"], dtype="<f8")
            assert np.array_equal([float(line.split()[1]) for line in lines[1:-1]], bounds)
        # The perturbed element 0 is the one out of bounds (the rest are the golden values).
        assert lines[-1] == "1 0"
    missing = subprocess.run([str(exe), str(folder), "nothing"], capture_output=True, text=True)
    assert missing.returncode == 1 and 'no array "nothing"' in missing.stderr


METADATA_READER = r'''
#include <stdio.h>
#include "symjac_golden.h"
/* argv: a case folder, then a missing one; err's size is a constant (sizeof), as in most callers */
int main(int argc, char **argv) {
    symjac_golden_array dx;
    char err[256], small[96], tiny[8], mode[32];
    long long pads[8];
    double got[36] = {0};
    size_t first = 0;
    int n;
    if (argc != 3) return 2;
    if (symjac_golden_load(argv[1], "dx.float32", &dx, err, sizeof err)) { puts(err); return 1; }
    n = symjac_golden_meta_ints(argv[1], "operator.pads", pads, 8, err, sizeof err);
    if (n != 4 || symjac_golden_meta_string(argv[1], "operator.mode", mode, sizeof mode, err, sizeof err)) {
        puts(err);
        return 1;
    }
    printf("pads %lld %lld %lld %lld, mode %s, %lu of %lu off\n", pads[0], pads[1], pads[2], pads[3], mode,
           (unsigned long)symjac_golden_check(&dx, got, &first), (unsigned long)dx.count);
    printf("%s\n", symjac_golden_tie_policy(argv[1], "float32", dx.values, err, sizeof err) ? "tied" : err);
    symjac_golden_free(&dx);
    if (symjac_golden_load(argv[2], "dx.float32", &dx, small, sizeof small)) puts(small);
    if (symjac_golden_meta_ints(argv[2], "operator.pads", pads, 8, small, sizeof small) < 0) puts(small);
    if (symjac_golden_meta_string(argv[2], "operator.mode", mode, sizeof mode, small, sizeof small)) puts(small);
    if (symjac_golden_load(argv[2], "dx.float32", &dx, tiny, sizeof tiny)) puts(tiny);
    return 0;
}
'''


@pytest.mark.parametrize("compiler", ["gcc", "g++"])
def test_the_metadata_readers_compile_without_warnings_at_o3(tmp_path, compiler):
    # issue 33 item 14: gcc -O3 -Wall -Wextra warned -Wformat-truncation 12 times (a 4096-byte path
    # formatted into the caller's err); the messages now cut a long path from its start
    if (CXX if compiler == "g++" else CC) is None:
        pytest.skip(f"no {'C++' if compiler == 'g++' else 'C'} compiler")
    src = tmp_path / ("meta.c" if compiler == "gcc" else "meta.cpp")
    src.write_text(METADATA_READER)
    std = ["-std=c99"] if compiler == "gcc" else ["-std=c++11"]
    exe = tmp_path / "meta"
    run_compiler([CXX if compiler == "g++" else CC, *std, "-O3", "-Wall", "-Wextra", "-pedantic", "-Wformat=2",
                  "-Wformat-truncation=2", "-Werror", "-I", str(ROOT / "contrib"), "-o", str(exe), str(src), "-lm"])
    folder = golden(AVG3, tmp_path, "--format", "bin", "--dtype", "float32") / "avg3"
    missing = "/nowhere/" + "deep/" * 60 + "case"
    run = subprocess.run([str(exe), str(folder), missing], capture_output=True, text=True, check=True)
    lines = run.stdout.splitlines()
    # AVG3: valid 3x3 average pooling of a 6x6 input, so no pads and dx has 36 elements; every cell is in
    # a window and dy is random, so no golden dx is 0 and all 36 differ from the zeros given
    assert lines[0] == "pads 0 0 0 0, mode avg, 36 of 36 off"
    assert lines[1] == f"{folder}: no dx_first.float32: the case has no tied windows (or no dtype float32)"
    # each message fits the 96 bytes given, its path's end and its reason whole
    assert lines[2:5] == ["..." + f"{missing}/index.json"[-(95 - 3 - 2 - len("cannot read")):] + ": cannot read"] * 3
    assert all(len(line) == 95 for line in lines[2:5])  # 96 bytes: 95 characters and the '\0'
    assert lines[5:] == ["/nowher"]  # 8 bytes: too few for the reason, cut at err's size
    short = subprocess.run([str(exe), str(folder), "/nowhere/case"], capture_output=True, text=True, check=True)
    assert short.stdout.splitlines()[2:5] == ["/nowhere/case/index.json: cannot read"] * 3


def test_half_conversion_matches_numpy(tmp_path):
    if CC is None:
        pytest.skip("no C compiler")
    src = tmp_path / "half.c"
    src.write_text(r'''
#include <stdio.h>
#include <stdlib.h>
#include "symjac_golden.h"
int main(void) {
    unsigned h;
    for (h = 0; h < 65536; h++) printf("%.17g\n", symjac_golden_half((uint16_t)h));
    return 0;
}
''')
    exe = build(tmp_path, src)
    printed = np.array(subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split(),
                       dtype=np.float64)
    want = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    assert np.array_equal(printed, want, equal_nan=True)


SIGMOID_SCALED = """[operator]
kind = "loss"
loss = "sigmoid_ce"
scale = 8
[input]
pred = [0.0]
label = [1.0]
"""


def test_loss_golden_in_bfloat16(tmp_path):
    # Seed 003: sigmoid_ce at pred 0, label 1, scale 8 has derivative 8·(σ(0) - 1) = -4,
    # exact in every dtype. Spec-file inputs are exact rationals; bfloat16 (ml_dtypes)
    # takes no Fraction, so the inputs are rounded to it as every dtype's are.
    pytest.importorskip("ml_dtypes")
    arrays = json.loads((golden(SIGMOID_SCALED, tmp_path, "--dtype", "bfloat16,float32") / "case.json")
                        .read_text())["arrays"]
    derivative = arrays["derivative"]
    assert derivative["exact"] == ["-4"]
    assert derivative["bfloat16"] == derivative["float32"] == [-4.0]
    assert derivative["max_abs_error"]["bfloat16"][0] > derivative["max_abs_error"]["float32"][0] > 0


def test_loss_golden_at_an_input_a_dtype_rounds_is_computed_at_the_rounded_input(tmp_path):
    # pred = 1/3 is no binary fraction: an implementation in float16 sees 1365/4096 (1/3 =
    # 1.0101010101|0101...b x 2^-2, cut to 11 bits with a 0 next: 1.0101010101b/4), in float64
    # 6004799503160661/2^54 (Python's Fraction(1/3)). Golden data is computed at what each dtype
    # holds, one file per dtype, each with its bounds; the derivative 8·(σ(z) − 1) (label 1) from
    # mpmath at the rounded z is within them.
    third = SIGMOID_SCALED.replace("pred = [0.0]", 'pred = ["1/3"]')
    out = golden(third, tmp_path, "--dtype", "float16,float64")
    assert sorted(p.name for p in out.iterdir()) == ["case__float16.json", "case__float64.json"]
    mpmath.mp.prec = 200
    for dt, held in (("float16", Fraction(1365, 4096)), ("float64", Fraction(1 / 3))):
        doc = json.loads((out / f"case__{dt}.json").read_text())
        assert doc["dtypes"] == [dt] and doc["provenance"]["case"] == "case"
        a = doc["arrays"]
        assert a["pred"]["exact"] == [str(held)]
        z = mpmath.mpf(held.numerator) / held.denominator
        exact = 8 * (1 / (1 + mpmath.exp(-z)) - 1)
        got = a["derivative"][dt][0]
        # correctly rounded: within half a spacing of the dtype's grid at the value (|value| in [2, 4))
        assert abs(mpmath.mpf(got) - exact) <= abs(float(np.spacing(np.dtype(dt).type(got)))) / 2
        assert a["derivative"]["max_abs_error"][dt][0] > 0
    quarter = SIGMOID_SCALED.replace("pred = [0.0]", 'pred = ["3/4"]')  # exact in both: one file, both dtypes
    out = tmp_path / "exact"
    out.mkdir()
    arrays = json.loads((golden(quarter, out, "--dtype", "float16,float64") / "case.json").read_text())["arrays"]
    assert set(arrays["derivative"]["max_abs_error"]) == {"float16", "float64"}


def test_json_is_strict_where_terms_cancel_to_zero(tmp_path):
    # Adaptive 5 -> 3 average pooling with random inputs: some outputs and gradients are
    # exactly 0 from terms that cancel, so their bound is positive while a ULP of the
    # golden value 0 is the smallest subnormal: max_ulp is null there (no Infinity, which
    # JSON has not: RFC 8259), and index.json's worst max_ulp is over the other values.
    spec = (ROOT / "specs" / "conventions" / "adaptive_5_to_3.toml").read_text()
    out = golden(spec, tmp_path, "--format", "json,bin", "--dtype", "float32,float64")
    def not_json(token):
        pytest.fail(f"non-JSON constant {token}")

    for path in out.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=not_json)
    doc = json.loads(next(out.glob("*.json")).read_text())
    cancelled = 0
    for name in ("y", "dx"):
        a = doc["arrays"][name]
        for dt in ("float32", "float64"):
            for exact, bound, ulp in zip(a["exact"], a["max_abs_error"][dt], a["max_ulp"][dt]):
                if exact == "0" and bound > 0:
                    cancelled += 1
                    assert ulp is None
                else:
                    assert ulp is not None and ulp >= 0
    assert cancelled > 0  # the case does exercise it
    index = json.loads(next(out.glob("*/index.json")).read_text())
    worst = index["arrays"]["y.float64"]["max_ulp"]
    assert 0 < worst < 1e6


MAX_NONOVERLAP = AVG3.replace('name = "avg3"', 'name = "mx"').replace('mode = "avg"', 'mode = "max"').replace(
    "kernel = 3\nstride = 1", "kernel = 2\nstride = 2")


def test_max_pool_without_overlap_is_exact_in_every_format(tmp_path):
    # y is one of the inputs (rounding to a dtype is monotone: the max of the rounded inputs is
    # the rounded max), each Jacobian entry is 1, and with stride = kernel each cell's dx is at
    # most one window's dy: a correct float implementation reproduces every golden value, bound 0.
    # (Old code: gamma(k) * mass, e.g. y 1.9e-06 in float32.)
    import importlib.util

    onnx = importlib.util.find_spec("onnx") is not None  # the ONNX layout needs symjac[onnx]; JSON runs without
    out = golden(MAX_NONOVERLAP, tmp_path, "--format", "json,onnx" if onnx else "json", "--dtype", "float32,float16")
    arrays = json.loads((out / "mx.json").read_text())["arrays"]
    for name in ("y", "dx", "jac_values"):
        for dt in ("float32", "float16"):
            assert set(arrays[name]["max_abs_error"][dt]) == {0.0}, (name, dt)
    if not onnx:
        pytest.skip("the JSON bounds are checked; the ONNX layout's atol needs the onnx package (symjac[onnx])")
    for dt in ("float32", "float16"):
        data = json.loads((out / "onnx" / f"test_symjac_mx_{dt}" / "data.json").read_text())
        assert data["atol"] == 0


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_overlapping_max_pool_bounds_the_sum_of_windows_only(tmp_path, dtype):
    # kernel 3, stride 1: a cell chosen by several windows sums their dy, which rounds; a cell
    # chosen by one window copies its dy (bound 0). y stays exact (one of the inputs).
    spec = MAX_NONOVERLAP.replace("kernel = 2\nstride = 2", "kernel = 3\nstride = 1")
    arrays = json.loads((golden(spec, tmp_path, "--dtype", dtype) / "mx.json").read_text())["arrays"]
    assert set(arrays["y"]["max_abs_error"][dtype]) == {0.0}
    windows = np.bincount(arrays["jac_cols"]["values"], minlength=36)  # windows routing to each cell
    bound = np.array(arrays["dx"]["max_abs_error"][dtype])
    assert np.any(windows >= 2) and np.all(bound[windows >= 2] > 0) and np.all(bound[windows < 2] == 0)
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    x = torch.tensor(np.array(arrays["x"][dtype]).reshape(1, 1, 6, 6), dtype=tdt, requires_grad=True)
    dy = torch.tensor(np.array(arrays["dy"][dtype]).reshape(1, 1, 4, 4), dtype=tdt)
    y = torch.nn.functional.max_pool2d(x, 3, stride=1)
    y.backward(dy)
    assert np.array_equal(y.detach().double().numpy().reshape(-1), np.array(arrays["y"][dtype]))
    got = x.grad.double().numpy().reshape(-1)
    assert np.all(np.abs(got - np.array(arrays["dx"][dtype])) <= bound)


def test_avg_pool_bounds_keep_the_gamma_model(tmp_path):
    # BOUND_NOTE's model by hand: y = sum of 9 terms x/9, k = 9 + 3, M = sum |x| / 9.
    arrays = json.loads((golden(AVG3, tmp_path) / "avg3.json").read_text())["arrays"]
    x = np.array([float(Fraction(v)) for v in arrays["x"]["exact"]]).reshape(6, 6)
    u = 2.0**-24
    mass = np.array([[np.abs(x[i:i + 3, j:j + 3]).sum() / 9 for j in range(4)] for i in range(4)]).reshape(-1)
    want = 12 * u / (1 - 12 * u) * mass * (1 + 2.0**-30)
    assert np.allclose(arrays["y"]["max_abs_error"]["float32"], want, rtol=1e-12, atol=0)
