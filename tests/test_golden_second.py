"""Golden data's forward-mode and second-order entries: t/jvp (pooling) and v/hvp (losses).

Expected values are hand derivations from the definitions (beside each), not symjac's.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np

from symjac.io.golden._write import write_golden
from symjac.io._specfile import load

SPECS = Path(__file__).resolve().parents[1] / "specs" / "seeds"


def test_pooling_cases_carry_a_tangent_and_its_jvp(tmp_path: Path) -> None:
    cases = load(SPECS / "nntrainer_avgpool_same_2x2.toml").cases
    write_golden(cases, tmp_path, ["json", "npz"], ["float16", "float32"])
    doc = json.loads((tmp_path / "nntrainer_avgpool_same_2x2.json").read_text())
    a = doc["arrays"]
    t = [Fraction(v) for v in a["t"]["exact"]]
    # SAME (upper) padding on a 2x2 input: windows of 4, 2, 2 and 1 cells, each J·t the mean of its cells
    want = [(t[0] + t[1] + t[2] + t[3]) / 4, (t[1] + t[3]) / 2, (t[2] + t[3]) / 2, t[3]]
    assert [Fraction(v) for v in a["jvp"]["exact"]] == want
    assert "t" not in a or "max_abs_error" not in a["t"]  # an input: no bound
    # a float16 evaluation of the same means (sum in order, then divide) stays within the bound
    t16 = np.array([float(v) for v in t], dtype=np.float16)
    got = [(t16[0] + t16[1] + t16[2] + t16[3]) / np.float16(4), (t16[1] + t16[3]) / np.float16(2),
           (t16[2] + t16[3]) / np.float16(2), t16[3]]
    for g, w, b in zip(got, want, a["jvp"]["max_abs_error"]["float16"]):
        assert abs(Fraction(float(g)) - w) <= Fraction(b)
    z = np.load(tmp_path / "nntrainer_avgpool_same_2x2.npz")
    assert z["jvp.float32"].tolist() == [[float(w) for w in want[:2]], [float(w) for w in want[2:]]]
    assert "jvp.float32.max_abs_error" in z.files
    assert "second" in doc


def test_loss_cases_carry_a_direction_and_its_hvp(tmp_path: Path) -> None:
    cases = load(SPECS / "loss_scale_family.toml").cases
    write_golden(cases, tmp_path, ["json"], ["float32"])
    hvp = {}
    for case in ("mse", "sigmoid_ce", "softmax_ce", "kld", "constant_derivative"):
        a = json.loads((tmp_path / f"{case}.json").read_text())["arrays"]
        v = [Fraction(x) for x in a["v"]["exact"]]
        hvp[case] = ([Fraction(x) for x in a["hvp"]["exact"]], v)
        assert all(b >= 0 for b in a["hvp"]["max_abs_error"]["float32"])
    s = 8  # every case of seed 003 has loss scale 8
    # mse: ℓ = (z - y)², ℓ'' = 2
    assert hvp["mse"][0] == [s * 2 * hvp["mse"][1][0]]
    # sigmoid_ce at z = 0: ℓ'' = σ(0)(1 - σ(0)) = 1/4
    assert hvp["sigmoid_ce"][0] == [s * Fraction(1, 4) * hvp["sigmoid_ce"][1][0]]
    # kld, Q = 1/2, P = 1/4: ℓ = P(log P - log Q), ℓ'' = P/Q² = 1
    assert hvp["kld"][0] == [s * hvp["kld"][1][0]]
    # constant_derivative: ℓ = z, ℓ'' = 0
    assert hvp["constant_derivative"][0] == [0]
    # softmax_ce at z = (0, 0): H = diag(p) - ppᵀ = [[1/4, -1/4], [-1/4, 1/4]]
    got, (v0, v1) = hvp["softmax_ce"]
    assert got == [s * (v0 - v1) / 4, s * (v1 - v0) / 4]
