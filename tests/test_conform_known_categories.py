"""A known defect is matched by its categories: a cell of a documented configuration is ``known:``
only when every category of its findings is one the adapter documents (``KnownDefect``); a finding of
another kind there is a failure, the known text beside it. A plain string still means any category."""

from __future__ import annotations

from pathlib import Path

import pytest

import symjac
from symjac.frameworks import KnownDefect

ROOT = Path(__file__).resolve().parent.parent
# conform_known_adapter's max_known doubles its gradient: each window's row is 2·e_argmax where the
# exact one is e_argmax, so wrong_weights, not_fd_consistent (a forward difference gives 1) and, at
# ties, tie_not_subgradient (a row summing to 2 is outside the hull of the unit vectors); its
# mse_known's halved hvp (v/n, the exact 2v/n) is wrong_scale
ADAPTER = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from conform_known_adapter import make as _make, make_loss, loss_configurations as _losses
from symjac.frameworks import Config, KnownDefect
DOUBLED = ("wrong_weights", "not_fd_consistent", "tie_not_subgradient")

def make(config):  # every op here is max_known's doubled gradient
    spec, impl = _make(Config("max_known", {{}}, config.input_shape, config.label))
    return spec, impl

def configurations(grid="small"):
    for op in ("max_known", "max_other", "max_string"):
        yield Config(op, {{}}, (1, 1, 4, 4), op)

def known_defect(config, transform="vjp"):
    if config.op == "max_known":
        return KnownDefect("max_known: its gradient is doubled", DOUBLED)
    if config.op == "max_other":  # documented as another kind: its doubled gradient is not that one
        return KnownDefect("max_other: NaN in its gradient", ("bad_output",))
    return "max_string: its gradient is doubled"  # the old form: any category

def loss_configurations(grid="small"):
    return [c for c in _losses(grid) if c.op == "mse_known"]

def known_loss_defect(config, dtype, transform):
    return KnownDefect("mse_known: its hvp is NaN", ("bad_output",)) if transform == "hvp" else None
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = tmp_path_factory.mktemp("adapter") / "typed_adapter.py"
    path.write_text(ADAPTER)
    return symjac.conform(f"{path}:", dtypes=("float64",), families=("distinct",), transforms=("vjp", "hvp"),
                          isolate=False)


def _cell(result, op, transform="vjp"):
    (cell,) = [r for r in result.results if r["config"]["op"] == op and r["config"].get("transform", "vjp") == transform]
    return cell


def test_a_documented_category_is_known(result):
    cell = _cell(result, "max_known")
    assert (cell["status"], cell["category"], cell["categories"]) == ("known_defect", "wrong_weights", [
        "wrong_weights", "not_fd_consistent", "tie_not_subgradient"])
    assert cell["known_categories"] == ["wrong_weights", "not_fd_consistent", "tie_not_subgradient"]


def test_an_undocumented_category_in_a_documented_configuration_fails_the_run(result):
    cell = _cell(result, "max_other")
    assert (cell["status"], cell["category"], cell["known_unexplained"]) == ("finding", "wrong_weights", [
        "wrong_weights", "not_fd_consistent", "tie_not_subgradient"])
    loss = _cell(result, "mse_known", "hvp")
    assert (loss["status"], loss["category"]) == ("finding", "wrong_scale")
    assert not result.ok
    assert sorted(r["config"]["op"] for r in result.findings) == ["max_other", "mse_known"]
    table = result.table()
    assert "known:wrong_weights" in table
    assert ("not known: wrong_weights, not_fd_consistent, tie_not_subgradient is not among the categories "
            "(bad_output) of the defect the adapter documents for max_other: max_other: NaN in its gradient") in table


def test_the_string_form_means_any_category(result):
    cell = _cell(result, "max_string")
    assert cell["status"] == "known_defect" and "known_categories" not in cell


def test_known_defect_checks_its_categories():
    assert str(KnownDefect("text", ("crashed",))) == "text"
    with pytest.raises(symjac.SymjacError, match="give one or more of forward_values"):
        KnownDefect("text", ("wrong",))
    with pytest.raises(symjac.SymjacError, match="give one or more of"):
        KnownDefect("text", ())


def test_the_built_in_adapters_document_their_categories():
    # the categories conform's cells of each defect have (tests/test_conform.py shows them on the frameworks)
    import symjac.frameworks.onnxruntime as so
    import symjac.frameworks.tensorflow as stf
    from symjac.frameworks import Config

    ties = stf.known_defect(Config("max_pool3d", {"ksize": [2] * 3, "strides": [2] * 3, "padding": "VALID"},
                                   (1, 4, 4, 4, 1)))
    # (then TensorFlow's NaN handling, at the nonfinite family's inputs: tests/test_nonfinite_frameworks.py)
    assert ties.categories[0] == "tie_not_subgradient" and ties.families == ()
    # output size 1 (SIGFPE or uninitialized memory) and the 3-D ties: both texts, every category of either
    both = stf.known_defect(Config("AdaptiveMaxPooling3D", {"output_size": [1, 2, 2]}, (1, 4, 4, 4, 1)))
    assert {"crashed", "tie_not_subgradient"} <= set(both.categories) and "; and: TensorFlow's MaxPool3DGrad" in both
    explicit = stf.known_defect(Config("max_pool2d", {"ksize": [3, 3], "strides": [3, 3],
                                                      "padding": [[0, 0], [1, 0], [0, 1], [0, 0]]}, (1, 6, 6, 2)), "jvp")
    assert explicit.categories[0] == "bad_output"
    same = so.known_defect(Config("max_pool", {"kernel_shape": [3], "dilations": [2], "auto_pad": "SAME_UPPER"},
                                  (1, 1, 7)))
    assert same.categories == ("bad_output", "forward_values")  # a wrong shape, or wrong values at the same shape
