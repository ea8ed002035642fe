"""bfloat16 wherever float16 is: dtype parsing, lowering, golden data (verify: tests/test_verify_reach.py)."""

import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import cli_runner
import symjac
from symjac import InputError, Pool
from symjac.check._rounding import float_dtype, unit_roundoff

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
ROOT = Path(__file__).resolve().parent.parent


def test_bfloat16_is_a_float_dtype_with_unit_roundoff_2_to_minus_8():
    # bfloat16: 8 significand bits (7 stored), so u = 2^-8 (ml_dtypes' eps is 2^-7 = 2u).
    assert float_dtype("bfloat16") == BF16 and float_dtype(ml_dtypes.bfloat16) == BF16
    assert unit_roundoff(BF16) == 2.0**-8 == float(ml_dtypes.finfo(BF16).eps) / 2
    with pytest.raises(InputError, match=r"dtype='int8' is not valid: give one of 'float16', 'bfloat16'"):
        float_dtype("int8")


def test_missing_ml_dtypes_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now raises ImportError
    with pytest.raises(InputError, match=r"pip install 'symjac\[bfloat16\]'"):
        float_dtype("bfloat16")


@pytest.mark.parametrize("spec", [Pool("avg", 3, stride=1, padding=1), Pool("max", 2, stride=1, padding="same"),
                                  Pool("avg", 3, stride=2, divisor="include_pad", padding=1, ceil_mode=True)])
def test_lowering_in_bfloat16_is_within_the_rounding_bound(spec):
    shape = (2, 3, 5, 5)
    x = ((np.arange(50 * 3) % 17) - 8).reshape(shape).astype(np.float64) / 4  # quarters: exact in bfloat16
    low = symjac.lower(spec, shape)
    y = low.forward(x.astype(BF16))
    exact_y = symjac.forward(spec, x)
    assert y.dtype == BF16 and y.shape == exact_y.shape
    # Sum of n terms then one division (or a max: exact): |err| <= gamma_{n+1} * sum|x|/d;
    # n <= 9 and |x| <= 2 bound the relative error by gamma_10 = 10u/(1-10u), u = 2^-8.
    u = 2.0**-8
    g10 = 10 * u / (1 - 10 * u)
    mass = symjac.forward(spec, np.abs(x)) if spec.mode == "avg" else None  # sum|x|/d per window
    for i, (got, want) in enumerate(zip(y.astype(np.float64).ravel(), exact_y.ravel())):
        bound = 0 if mass is None else g10 * float(mass.ravel()[i])
        assert abs(Fraction(float(got)) - Fraction(want)) <= Fraction(bound), (i, got, want)
    dy = np.ones(y.shape, BF16)
    dx = low.vjp(x.astype(BF16), dy)
    assert dx.dtype == BF16 and dx.shape == x.shape


def test_lowering_refuses_other_dtypes_naming_bfloat16():
    with pytest.raises(InputError, match="float16, bfloat16, float32 or float64"):
        symjac.lower(Pool("avg", 2), (2, 2)).forward(np.zeros((2, 2), np.int32))


def test_golden_bfloat16_bits_match_torch_rounding(tmp_path):
    torch = pytest.importorskip("torch")
    spec = ROOT / "specs/seeds/nntrainer_avgpool_same_2x2.toml"
    r = cli_runner.symjac("golden", str(spec), "--out", str(tmp_path), "--format", "json,bin", "--dtype", "bfloat16")
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "nntrainer_avgpool_same_2x2"
    index = json.loads((folder / "index.json").read_text())
    doc = json.loads((tmp_path / "nntrainer_avgpool_same_2x2.json").read_text())
    for name in ("y", "dx", "jac_values"):
        entry = index["arrays"][f"{name}.bfloat16"]
        assert entry["dtype"] == "<u2" and entry["bits_of"] == "bfloat16"
        bits = np.frombuffer((folder / entry["file"]).read_bytes(), "<u2")
        # Independent rounding: PyTorch's float64 -> bfloat16 (round to nearest even); the
        # exact values are short fractions, so float64 holds them exactly first.
        exact = [float(Fraction(v)) for v in doc["arrays"][name]["exact"]]
        want = torch.tensor(exact, dtype=torch.float64).to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
        assert bits.tolist() == want.tolist(), name


def test_verify_loss_takes_bfloat16_arrays_as_it_takes_their_float64_values():
    # ml_dtypes' bfloat16 has dtype kind "V": verify_loss refused such pred/label arrays
    # ("give real numbers"); their values widen exactly to float64, which it always took.
    loss = symjac.Loss("softmax_ce")
    pred = np.array([[0.5, -1.0, 2.0], [0.25, 3.0, -0.5]], dtype=BF16)  # dyadic: exact in bfloat16
    label = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=BF16)

    def exact(z, y):
        return np.asarray(symjac.loss_derivative(loss, z.astype(float), y.astype(float)), dtype=float).astype(z.dtype)

    def doubled(z, y):
        return (2 * exact(z, y).astype(float)).astype(z.dtype)

    for derivative, categories in ((exact, []), (doubled, ["wrong_scale"])):
        as_bf16 = symjac.verify_loss(loss, derivative=derivative, pred=pred, label=label, dtype="bfloat16")
        as_f64 = symjac.verify_loss(loss, derivative=derivative, pred=pred.astype(np.float64),
                                    label=label.astype(np.float64), dtype="bfloat16")
        assert as_bf16.categories() == as_f64.categories() == categories
        assert as_bf16.stats["inputs_rounded"] is as_f64.stats["inputs_rounded"] is False
