"""Spec files: every shipped file loads and its [expect] values hold; bad files fail clearly."""

from pathlib import Path

import pytest

import symjac
from symjac.io.golden._write import check_expect
from symjac.io._specfile import load

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((ROOT / "specs").rglob("*.toml"))


def test_the_seed_and_convention_libraries_ship():
    names = {p.relative_to(ROOT / "specs").as_posix() for p in SPEC_FILES}
    assert {"seeds/nntrainer_avgpool_same_2x2.toml", "seeds/loss_scale_family.toml", "seeds/maxpool_ties.toml",
            "seeds/textbook_4x4_max.toml", "seeds/textbook_4x4_avg.toml"} <= names
    assert {"conventions/tf_same_stride2.toml", "conventions/onnx_same_lower.toml",
            "conventions/torch_ceil_include_pad.toml", "conventions/adaptive_5_to_3.toml",
            "conventions/dilated_max.toml", "conventions/channels_last.toml"} <= names


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_expectations_hold(path):
    # The [expect] values were written from the seeds or derived by hand in each
    # file's comments; check_expect recomputes them with the engine.
    for case in load(path).cases:
        assert check_expect(case) == [], case.source


def test_loss_family_has_five_losses_at_scale_8():
    cases = load(ROOT / "specs/seeds/loss_scale_family.toml").cases
    assert [c.name for c in cases] == ["sigmoid_ce", "softmax_ce", "kld", "constant_derivative", "mse"]
    assert all(c.operator.scale == 8 for c in cases)


def test_exact_values_in_strings(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = [2]\n[input]\nx = ["0.1", "3/4", 1]\n')
    case = load(p).cases[0]
    from fractions import Fraction

    assert case.inputs["x"].tolist() == [Fraction(1, 10), Fraction(3, 4), Fraction(1)]
    assert symjac.forward(case.operator, case.inputs["x"])[0] == symjac.forward(case.operator, ["1/10", "3/4"])[0]


@pytest.mark.parametrize("text, message", [
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernal = 2\n', r"\[operator\]: unknown key 'kernal'; did you mean 'kernel'\?"),
    ('[operatr]\n', r"unknown key 'operatr'; did you mean 'operator'\?"),
    ('[operator]\nkind = "pol"\n', r"kind: 'pol' is not valid \(did you mean 'pool'\?\)"),
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 0\n[input]\nshape = [2, 2]\n', r"kernel=0 is not valid"),
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\n[input]\nx = [[1, "a"]]\n', r"\[input\]\.x"),
    # No [input] at all is valid (verify uses the coverage plan); a dy without x or shape is not.
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\n[input]\ndy = [[1]]\n', r"give x \(explicit values\) or shape"),
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\n[input]\nshape = [2, 2]\ngenerator = "gauss"\n',
     r"generator: 'gauss' is not valid"),
    ('[operator]\nkind = "loss"\nloss = "mse"\nscale = -1\n', r"scale=-1 is not valid"),
    ('[operator\n', r"not valid TOML"),
])
def test_bad_files_name_file_and_key(tmp_path, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(symjac.SpecError, match=message) as info:
        load(p)
    assert str(p) in str(info.value)


def test_missing_file():
    with pytest.raises(symjac.SpecError, match="no such spec file"):
        load("specs/none.toml")
