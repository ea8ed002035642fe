"""The symjac command line and its exit codes: run in process (:mod:`cli_runner`), and through the
real entry points (``python -m symjac`` and the console script) where the process is the point."""

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_runner import symjac

ROOT = Path(__file__).resolve().parent.parent
SEED000 = "specs/seeds/nntrainer_avgpool_same_2x2.toml"
BUGGY = "examples/nntrainer_pool.py:buggy"
FIXED = "examples/nntrainer_pool.py:fixed"


def test_verify_seed_000_buggy_exits_1_with_the_diagnosis():
    r = symjac("verify", SEED000, "--impl", BUGGY)
    assert r.returncode == 1, r.stderr
    # Seed 000: backward visits only the first of four windows; a quarter of the mass arrives.
    assert "backward visits 1 of 4 output windows: (0,1), (1,0), (1,1) get nothing; 1/4 of the gradient mass arrives" in r.stdout


def test_verify_seed_000_fixed_exits_0():
    r = symjac("verify", SEED000, "--impl", FIXED, "--dtype", "float32")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("PASS")


def test_verify_json_has_stable_keys():
    r = symjac("verify", SEED000, "--impl", BUGGY, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["windows_missing"] == 3 and doc["windows_total"] == 4 and doc["ok"] is False
    assert {"category", "window", "cells", "expected", "observed"} <= set(doc["findings"][1])


def test_verify_loss_family_file(tmp_path):
    # Seed 003: unscaled sibling derivatives; only MSE applies S.
    impl = tmp_path / "losses_impl.py"
    impl.write_text(
        "import numpy as np\n"
        "from types import SimpleNamespace as NS\n"
        "S = 8\n"
        "sigmoid_ce = NS(derivative=lambda z, y: 1 / (1 + np.exp(-z)) - y)\n"
        "def _softmax(z, y):\n"
        "    e = np.exp(z - z.max(axis=-1, keepdims=True)); return (e / e.sum(axis=-1, keepdims=True) - y) / z.shape[0]\n"
        "softmax_ce = NS(derivative=_softmax)\n"
        "kld = NS(derivative=lambda q, p: -p / q)\n"
        "constant_derivative = NS(derivative=lambda z, y=None: np.ones_like(z))\n"
        "mse = NS(derivative=lambda z, y: S * 2 * (z - y) / z.size)\n"
    )
    r = symjac("verify", "specs/seeds/loss_scale_family.toml", "--impl", f"{impl}")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert sum("FAIL" in line for line in lines) == 4 and sum(line.startswith("PASS mse") for line in lines) == 1
    assert all("loss scale" in line for line in lines if line.startswith("FAIL")), r.stdout


@pytest.mark.parametrize("args, message", [
    (("verify", "no/such/file.toml", "--impl", FIXED), "no such spec file"),
    (("verify", SEED000, "--impl", "examples/nntrainer_pool.py:nothing"), "has no attribute 'nothing'"),
    (("verify", SEED000, "--impl", "no_such_module_xyz:impl"), "importing no_such_module_xyz failed"),
    (("golden", SEED000, "--out", "/tmp/symjac-cli-test", "--format", "xml"), "--format 'xml' is not valid"),
    (("graph", SEED000, "--out", "/tmp/x.gif"), "give a .dot, .png or .svg file"),
])
def test_usage_errors_exit_2_with_one_line(args, message):
    r = symjac(*args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_impl_lacking_backward_exits_2(tmp_path):
    impl = tmp_path / "fwd_only.py"
    impl.write_text("def forward(x):\n    return x\n")
    r = symjac("verify", SEED000, "--impl", str(impl))
    assert r.returncode == 2 and "no callable 'backward'" in r.stderr and "Traceback" not in r.stderr


def test_unknown_spec_key_names_file_key_and_nearest(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernal = 2\n[input]\nshape = [2, 2]\n')
    r = symjac("explain", str(bad))
    assert r.returncode == 2
    assert f"{bad} [operator]: unknown key 'kernal'; did you mean 'kernel'?" in r.stderr


def test_explain_prints_templates_and_latex():
    r = symjac("explain", SEED000)
    assert r.returncode == 0
    # Seed 000's four windows hold 4, 2, 2 and 1 valid cells: four classes.
    assert "4 window classes" in r.stdout and "y[0,1] = x[0,1]/2 + x[1,1]/2" in r.stdout
    assert "dy[1,1]/dx[1,1] = 1" in r.stdout
    r = symjac("explain", SEED000, "--latex")
    assert r"\frac{x[0,1]}{2}" in r.stdout


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_golden_is_byte_identical_and_exact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        r = symjac("golden", SEED000, "--out", str(out), "--format", "json,npz,bin", "--dtype", "float32,float64")
        assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    doc = json.loads((a / "nntrainer_avgpool_same_2x2.json").read_text())
    # Seed 000: gradient [0.25, 0.75, 0.75, 2.25] for dy = ones.
    assert doc["arrays"]["dx"]["exact"] == ["1/4", "3/4", "3/4", "9/4"]
    assert doc["provenance"]["symjac_version"] and len(doc["provenance"]["spec_hash"]) == 64
    npz = np.load(a / "nntrainer_avgpool_same_2x2.npz")
    assert npz["y.float32"].dtype == np.float32 and npz["y.float32"].tolist() == [[2.5, 3.0], [3.5, 4.0]]
    index = json.loads((a / "nntrainer_avgpool_same_2x2" / "index.json").read_text())
    meta = index["arrays"]["dx.float64"]
    raw = np.fromfile(a / "nntrainer_avgpool_same_2x2" / meta["file"], dtype=meta["dtype"]).reshape(meta["shape"])
    assert raw.tolist() == [[0.25, 0.75], [0.75, 2.25]]


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_graph_writes_dot_and_png(tmp_path):
    dot = tmp_path / "g.dot"
    r = symjac("graph", SEED000, "--impl", BUGGY, "--out", str(dot))
    assert r.returncode == 1, r.stderr  # the picture is written, and the finding sets the exit code
    text = dot.read_text()
    assert text.startswith("digraph") and text.count('fillcolor="#d62728"') == 3  # the 3 missing windows
    png = tmp_path / "g.png"
    r = symjac("graph", SEED000, "--impl", BUGGY, "--out", str(png))
    assert r.returncode == 1
    assert symjac("graph", SEED000, "--impl", FIXED, "--out", str(tmp_path / "ok.dot")).returncode == 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "pip install 'symjac[plot]'" in r.stdout and png.with_suffix(".dot").exists()
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_console_script_is_installed():
    exe = shutil.which("symjac")
    if exe is None:
        pytest.skip("console script not on PATH (package not installed with pip)")
    r = subprocess.run([exe, "verify", SEED000, "--impl", FIXED], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0


@pytest.mark.parametrize("args, code", [(("verify", SEED000, "--impl", FIXED), 0),
                                        (("verify", SEED000, "--impl", BUGGY), 1),
                                        (("verify", SEED000, "--impl", FIXED, "--bogus"), 2)])
def test_python_m_symjac_exits_with_mains_code(args, code):
    # the other tests call main() in process; this one runs the entry point a user runs, in its own process
    r = symjac(*args, process=True, timeout=300)
    assert r.returncode == code, r.stdout + r.stderr
    if code < 2:
        assert r.stdout.startswith(("PASS", "FAIL")[code]), r.stdout
    else:
        assert r.stderr.startswith("usage: symjac verify ") and "unrecognized arguments: --bogus" in r.stderr


def test_golden_loss_with_default_inputs(tmp_path):
    spec = tmp_path / "mse_none.toml"
    spec.write_text('[operator]\nkind = "loss"\nloss = "mse"\nreduction = "none"\n')
    r = symjac("golden", str(spec), "--out", str(tmp_path / "g"), "--format", "json,npz")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "g" / "mse_none.json").read_text())
    assert doc["provenance"]["generator"] == "default"
    from fractions import Fraction

    pred, label, up, der = ([Fraction(v) for v in doc["arrays"][k]["exact"]] for k in ("pred", "label", "upstream", "derivative"))
    # reduction none, S = 1: the derivative is upstream * d(z - y)^2/dz = upstream * 2 (z - y).
    assert der == [u * 2 * (z - y) for z, y, u in zip(pred, label, up)]
    npz = np.load(tmp_path / "g" / "mse_none.npz")
    assert npz["provenance.json"].shape == ()  # 0-d arrays keep their shape


# ------------------------------------------------------------ several files, case selection

def _status_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith(("PASS", "FAIL", "SKIP", "ERROR"))]


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_verify_takes_a_directory_a_quoted_glob_and_several_files():
    # specs/seeds holds 6 files: 5 pooling cases and the 5-case loss family (seed 003).
    by_dir = symjac("verify", "specs/seeds", "--impl", FIXED, "-k", "nntrainer")
    by_glob = symjac("verify", "specs/seeds/nntrainer_*.toml", "--impl", FIXED)
    by_files = symjac("verify", SEED000, "--impl", FIXED, "specs/seeds/nntrainer_avgpool_same_2x2_mixed_dy.toml")
    for r in (by_dir, by_glob, by_files):
        assert r.returncode == 0, r.stdout + r.stderr
        assert [line.split(":")[0] for line in _status_lines(r.stdout)] == [
            "PASS nntrainer_avgpool_same_2x2", "PASS nntrainer_avgpool_same_2x2_mixed_dy"]
        assert "2 cases in float64: 2 passed, 0 failed, 0 skipped" in r.stdout


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_glob_or_directory_matching_nothing_is_a_usage_error(tmp_path):
    r = symjac("verify", "specs/seeds/*.tomx", "--impl", FIXED)
    assert r.returncode == 2 and "'specs/seeds/*.tomx': no spec file matches this pattern" in r.stderr
    r = symjac("verify", str(tmp_path), "--impl", FIXED)
    assert r.returncode == 2 and "the directory holds no *.toml spec file" in r.stderr
    assert "Is a directory" not in r.stderr


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_case_and_keyword_select_cases():
    r = symjac("verify", "specs/seeds", "--impl", FIXED, "--case", "nntrainer_avgpool_same_2x2")
    assert r.returncode == 0 and len(_status_lines(r.stdout)) == 1, r.stdout
    r = symjac("verify", "specs/seeds", "--impl", FIXED, "-k", "nntrainer and not mixed")
    assert [line.split(":")[0] for line in _status_lines(r.stdout)] == ["PASS nntrainer_avgpool_same_2x2"]
    r = symjac("verify", "specs/seeds", "--impl", FIXED, "--case", "nntrainer_avgpool_same2x2")
    assert r.returncode == 2 and "no such case; did you mean 'nntrainer_avgpool_same_2x2'?" in r.stderr
    r = symjac("verify", "specs/seeds", "--impl", FIXED, "-k", "conv")
    assert r.returncode == 2 and "-k 'conv' selects no case; cases: sigmoid_ce" in r.stderr


def test_keyword_expressions():
    from symjac.cli._select import SelectionError, keyword_matcher

    match = keyword_matcher("(avg or MAX) and not ties")
    assert [match(n) for n in ("textbook_4x4_avg", "textbook_4x4_max", "maxpool_ties_3x3", "mse")] == [
        True, True, False, False]
    for bad in ("avg and", "(avg", "and avg", ""):
        with pytest.raises(SelectionError, match="-k"):
            keyword_matcher(bad)


def test_multi_case_file_reports_each_case_and_skips_kinds_the_impl_lacks(tmp_path):
    # A file mixing a pooling case and a loss case, verified against a pooling implementation:
    # the pooling case runs and is reported; the loss case is skipped with a reason.
    mixed = tmp_path / "mixed.toml"
    mixed.write_text((ROOT / SEED000).read_text().replace("name =", "[[case]]\nname =", 1)
                     .replace("[operator]", "[case.operator]").replace("[input]", "[case.input]")
                     .replace("[expect]", "[case.expect]")
                     + '\n[[case]]\nname = "mse"\n[case.operator]\nkind = "loss"\nloss = "mse"\n')
    r = symjac("verify", str(mixed), "--impl", FIXED)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _status_lines(r.stdout)
    assert lines[0].startswith("PASS nntrainer_avgpool_same_2x2: ")
    assert lines[1].startswith("SKIP mse: the implementation has no callable 'derivative' for the loss case 'mse'")
    assert "2 cases in float64: 1 passed, 0 failed, 1 skipped" in r.stdout
    # Selecting only the loss case leaves nothing this implementation can run: a usage error.
    r = symjac("verify", str(mixed), "--impl", FIXED, "--case", "mse")
    assert r.returncode == 2 and "no callable 'derivative'" in r.stderr


def test_verify_verbose_prints_the_headline_once():
    r = symjac("verify", SEED000, "--impl", BUGGY, "-v")
    assert r.returncode == 1
    headline = "backward visits 1 of 4 output windows"
    assert r.stdout.count(headline) == 1, r.stdout
    # Each cell named with its exact value, a bare number (1/2, 1), not '1/2' or '1'.
    assert "    cell   expected  observed\n    (0,1)  1/2       0.0\n    (1,1)  1/2       0.0" in r.stdout
    assert "    (1,1)  1         0.0" in r.stdout and "'" not in r.stdout.split("subject:")[1].split("\n", 1)[1]


# ------------------------------------------------------------ help, version, usage

def test_every_argument_has_help_and_every_command_examples_and_docs():
    from symjac.cli._main import COMMANDS, build_parser

    parser, parsers = build_parser()
    assert set(parsers) >= {"verify", "golden", "explain", "graph", "sweep"}
    for command in COMMANDS:
        p = parsers[command.name]
        for action in p._actions:
            assert action.help, f"symjac {command.name}: {action.dest} has no help"
        text = p.format_help()
        assert "examples:\n  symjac " + command.name in text and f"docs: {command.docs}" in text
        assert (ROOT / command.docs.split("#")[0]).is_file()
        for example in command.examples:  # every example parses as its command
            assert parser.parse_args(shlex.split(example)[1:]).command == command.name


def test_help_and_version_from_the_command_line():
    r = symjac("verify", "--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "docs: docs/cli.md#symjac-verify" in r.stdout
    from symjac import __version__

    r = symjac("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"symjac {__version__}"


def test_unknown_argument_prints_the_subcommands_usage():
    r = symjac("verify", SEED000, "--impl", FIXED, "--bogus")
    assert r.returncode == 2
    assert r.stderr.startswith("usage: symjac verify ") and "unrecognized arguments: --bogus" in r.stderr


def test_impl_did_you_mean_and_candidates():
    r = symjac("verify", SEED000, "--impl", "examples/nntrainer_pool.py:fixd")
    assert r.returncode == 2 and "has no attribute 'fixd'; did you mean examples/nntrainer_pool.py:fixed?" in r.stderr
    r = symjac("verify", SEED000, "--impl", "examples/nntrainer_pool.py")
    assert r.returncode == 2
    assert "candidates: buggy, fixed (e.g. --impl examples/nntrainer_pool.py:buggy)" in r.stderr


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_loss_key_names_the_file_key_and_suggests(tmp_path):
    spec = tmp_path / "ce.toml"
    spec.write_text('[operator]\nkind = "loss"\nloss = "cross_entropy"\n')
    r = symjac("explain", str(spec))
    assert r.returncode == 2
    assert "[operator]: loss='cross_entropy' is not valid (did you mean 'softmax_ce'?)" in r.stderr
    spec.write_text('[operator]\nkind = "pool"\nmode = "average"\nkernel = 2\npadding = "SAME"\n[input]\nshape = [2, 2]\n')
    r = symjac("explain", str(spec))
    assert r.returncode == 2 and "mode='average' is not valid (did you mean 'avg'?)" in r.stderr
    spec.write_text('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\nstride = 1\npadding = "SAME"\n[input]\nshape = [2, 2]\n')
    assert symjac("explain", str(spec)).returncode == 0  # TF's "SAME" is our "same"


def test_explain_softmax_ce_omits_unset_weights_and_smoothing(tmp_path):
    spec = tmp_path / "sce.toml"
    spec.write_text('[operator]\nkind = "loss"\nloss = "softmax_ce"\n[input]\npred = [[1, 2, 3]]\nlabel = [[0, 1, 0]]\n')
    r = symjac("explain", str(spec))
    assert r.returncode == 0, r.stderr
    assert "w0" not in r.stdout and "epsilon" not in r.stdout
    # l = -sum_c t_c (z_c - log sum exp z): SymPy prints the first term as below.
    assert "-t0*(z0 - log(exp(z0) + exp(z1) + exp(z2)))" in r.stdout
    spec.write_text('[operator]\nkind = "loss"\nloss = "softmax_ce"\nweight = [1, 2]\nlabel_smoothing = "0.1"\n')
    r = symjac("explain", str(spec))
    assert "where w0 = 1, w1 = 2, epsilon = 1/10" in r.stdout


def test_explain_softmax_ce_over_many_classes_prints_the_class_generic_forms(tmp_path, monkeypatch):
    # 300 classes written out would be 300 derivatives of 300-term sums (O(C^2) SymPy work:
    # 6.7 s at C = 40); above EXPLICIT_CLASSES explain prints the forms SymPy derives for
    # every C at once, classes j and k written out, the others as sums, and builds no
    # per-class template.
    from symjac.io._explain import explain
    from symjac.io._specfile import load
    from symjac.loss import _elements as _templates

    def no_template(*args):
        raise AssertionError("the per-class template was built")

    monkeypatch.setattr(_templates, "loss_template", no_template)
    spec = tmp_path / "sce.toml"
    row, label = ", ".join(["0.5"] * 300), ", ".join(["1.0"] + ["0.0"] * 299)
    spec.write_text(f'[operator]\nkind = "loss"\nloss = "softmax_ce"\n[input]\npred = [[{row}]]\nlabel = [[{label}]]\n')
    text = explain(load(spec).cases[0])
    assert "per-row loss over C = 300 classes" in text and "epsilon" not in text and "w_j" not in text
    # unit weights and no smoothing: dl/dz_j = p_j (t_j + t_k + TW) - t_j, with p_j = e^{z_j}/(s + e^{z_j} + e^{z_k})
    # (SymPy prints it expanded; the proof that it is the derivative: tests/test_softmax_classes.py)
    assert "dl/dz_j = TW*exp(z_j)/(s + exp(z_j) + exp(z_k)) + t_j*(-1 + exp(z_j)/(s + exp(z_j) + exp(z_k)))" in text
    spec.write_text(spec.read_text().replace('loss = "softmax_ce"', 'loss = "softmax_ce"\nlabel_smoothing = "0.1"\n'
                                             f'weight = [{", ".join(["1"] * 299)}, 2]'))
    text = explain(load(spec).cases[0])
    assert "where epsilon = 1/10, w = (1, 1, " in text and ", 2)" in text and "w_j" in text


# ------------------------------------------------------------ graph

@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_graph_says_which_case_it_drew_and_takes_case(tmp_path):
    r = symjac("graph", "specs/seeds", "-k", "nntrainer", "--out", str(tmp_path / "g.dot"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == ("case 'nntrainer_avgpool_same_2x2' from specs/seeds/nntrainer_avgpool_same_2x2.toml "
                                        "(first of 2 selected; pick another with --case: nntrainer_avgpool_same_2x2_mixed_dy)")
    r = symjac("graph", "specs/seeds", "--case", "textbook_4x4_max", "--out", str(tmp_path / "g.dot"))
    assert r.stdout.splitlines()[0] == "case 'textbook_4x4_max' from specs/seeds/textbook_4x4_max.toml"
    r = symjac("graph", "specs/seeds/loss_scale_family.toml", "--out", str(tmp_path / "g.dot"))
    assert r.returncode == 2 and "graph draws pooling windows" in r.stderr


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_graph_slice_of_a_batched_input(tmp_path):
    pytest.importorskip("matplotlib")
    # specs/conventions/channels_last.toml: input (1, 4, 4, 3), NHWC.
    r = symjac("graph", "specs/conventions/channels_last.toml", "--out", str(tmp_path / "g.png"), "--slice", "0,2")
    assert r.returncode == 0, r.stderr
    assert "drew slice N=0, C=2 of input (1, 4, 4, 3)" in r.stdout
    r = symjac("graph", "specs/conventions/channels_last.toml", "--out", str(tmp_path / "g.png"), "--slice", "1,0")
    assert r.returncode == 2 and "--slice 1,0 is outside the input (1, 4, 4, 3): N has 1 and C 3 entries" in r.stderr
    r = symjac("graph", "specs/conventions/channels_last.toml", "--out", str(tmp_path / "g.png"), "--slice", "x")
    assert r.returncode == 2 and "give two indices n,c" in r.stderr


@pytest.mark.slow  # several seconds: the full suite's (--run-slow)
def test_golden_and_explain_take_globs_directories_and_selection(tmp_path):
    r = symjac("explain", "specs/seeds/textbook_*.toml")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("textbook_4x4_avg: Pool(") and "\n\ntextbook_4x4_max: Pool(" in r.stdout
    out = tmp_path / "g"
    r = symjac("golden", "specs/seeds", "--case", "maxpool_ties_3x3", "-k", "ties", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(out / "maxpool_ties_3x3.json")]
    r = symjac("golden", "specs/seeds", "--out", str(out), "--format", "json")
    assert r.returncode == 0 and len(r.stdout.split()) == 10  # 5 pooling cases + the 5-case loss family


# -- issue 10: malformed spec files and imports exit 2 with one line ----------------------
POOL_HEAD = '[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\n[input]\nshape = [2, 2]\n'


@pytest.mark.parametrize("text, message", [
    ('[operator]\nkind = {x=1}\n', r"\[operator\]\.kind: \{'x': 1\} is not valid; give one of pool"),
    ('[operator]\nkind = ["pool"]\n', r"\[operator\]\.kind: \['pool'\] is not valid"),
    ('operator = "pool"\n', r"\[operator\]: expected a table .* got str 'pool'"),
    ("case = 5\n", r"case = 5 is not valid; give \[\[case\]\] tables"),
    ("case = [1, 2]\n", r"case = \[1, 2\] is not valid"),
    (POOL_HEAD + 'seed = "x"\n', r"\[input\]\.seed: 'x' is not valid; give an integer >= 0"),
    (POOL_HEAD + "seed = -1\n", r"\[input\]\.seed: -1 is not valid; give an integer >= 0"),
    (b'name = "\xff\xfe"\n', r"not UTF-8 text \(byte 8: invalid start byte\)"),
    ('[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\n[input]\nx = [[1, "1e999999999"], [3, 4]]\n',
     r"\[input\]\.x\[0, 1\]='1e999999999' has a decimal exponent beyond"),
])
def test_malformed_spec_file_values_exit_2_with_one_line(tmp_path, text, message):
    import re

    p = tmp_path / "bad.toml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    r = symjac("verify", str(p), "--impl", FIXED)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.search(message, lines[0]), lines[0]


def test_impl_whose_import_exits_0_is_a_usage_error(tmp_path):
    # Was: symjac verify exits 0 and prints nothing (a false success).
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    r = symjac("verify", SEED000, "--impl", str(tmp_path / "exits.py") + ":fixed")
    assert r.returncode == 2 and r.stdout == ""
    assert "importing" in r.stderr and "called sys.exit(0)" in r.stderr


# -- issue 10: spec files without [input] use the coverage plan; --timeout -----------------
NO_INPUT = '[operator]\nkind = "pool"\nmode = "avg"\nkernel = 3\nstride = 2\npadding = "same"\n'
SAME_IMPLS = '''
import numpy as np


def pads(L, swap):  # TF SAME, kernel 3, stride 2: total = max((ceil(L/2)-1)*2 + 3 - L, 0), extra cell high
    total = max((-(-L // 2) - 1) * 2 + 3 - L, 0)
    lo, hi = total // 2, total - total // 2
    return (hi, lo) if swap else (lo, hi)


class Same:
    def __init__(self, swap):
        self.swap = swap

    def windows(self, H, W):
        (t, _), (l, _) = pads(H, self.swap), pads(W, self.swap)
        for i in range(-(-H // 2)):
            for j in range(-(-W // 2)):
                yield i, j, [(p, q) for p in range(2 * i - t, 2 * i - t + 3) for q in range(2 * j - l, 2 * j - l + 3)
                             if 0 <= p < H and 0 <= q < W]

    def forward(self, x):
        y = np.zeros(x.shape[:2] + (-(-x.shape[2] // 2), -(-x.shape[3] // 2)), x.dtype)
        for i, j, cells in self.windows(*x.shape[2:]):
            y[:, :, i, j] = sum(x[:, :, p, q] for p, q in cells) / len(cells)
        return y

    def backward(self, x, dy):
        dx = np.zeros_like(x)
        for i, j, cells in self.windows(*x.shape[2:]):
            for p, q in cells:
                dx[:, :, p, q] += dy[:, :, i, j] / len(cells)
        return dx


good, swapped = Same(False), Same(True)
'''


def test_spec_file_without_input_verifies_the_coverage_plan(tmp_path):
    (tmp_path / "s.toml").write_text(NO_INPUT)
    (tmp_path / "impls.py").write_text(SAME_IMPLS)
    r = symjac("verify", str(tmp_path / "s.toml"), "--impl", str(tmp_path / "impls.py") + ":good", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["coverage_plan"]) == len(doc["shapes"]) >= 2 and all(s["ok"] for s in doc["shapes"])
    # The low/high pad swap passes at 5x5 (pads (1, 1) both ways) but not on the plan.
    r = symjac("verify", str(tmp_path / "s.toml"), "--impl", str(tmp_path / "impls.py") + ":swapped")
    assert r.returncode == 1 and "shapes of the coverage plan" in r.stdout, r.stdout + r.stderr


def test_timeout_flag_turns_a_hanging_backward_into_a_finding(tmp_path):
    (tmp_path / "hang.py").write_text("import time\n\ndef backward(x, dy):\n    time.sleep(30)\n    return x\n")
    r = symjac("verify", SEED000, "--impl", str(tmp_path / "hang.py"), "--timeout", "0.5", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)  # the rest of the report still comes back
    assert doc["findings"][0]["category"] == "timeout" and doc["windows_total"] == 4
    assert "did not return within 0.5 s" in doc["findings"][0]["message"]
    r = symjac("verify", SEED000, "--impl", str(tmp_path / "hang.py"), "--timeout", "-1")
    assert r.returncode == 2 and "--timeout -1" in r.stderr


_AVG_CASES = """
[[case]]
name = "avg2"
[case.operator]
kind = "pool"
mode = "avg"
kernel = [2]
stride = [2]

[[case]]
name = "unplannable"
[case.operator]
kind = "pool"
mode = "avg"
kernel = [1]
padding = [[1, 1]]

[[case]]
name = "avg3"
[case.operator]
kind = "pool"
mode = "avg"
kernel = [3]
stride = [3]
"""

# Non-overlapping 1-D average pooling written out (valid padding, (N, C, L)): each output is the
# mean of k cells, so each of those cells gets dy/k; the cells past the last window get nothing.
_AVG_IMPL = """
import numpy as np
from types import SimpleNamespace

def _avg(k, scale):
    def forward(x):
        n = x.shape[-1] // k * k
        return x[..., :n].reshape(*x.shape[:-1], n // k, k).mean(axis=-1)
    def backward(x, dy):
        dx = np.zeros_like(x)
        dx[..., :dy.shape[-1] * k] = np.repeat(dy * scale(k), k, axis=-1)
        return dx
    return SimpleNamespace(forward=forward, backward=backward)

avg2 = _avg(2, lambda k: 1 / k)
avg3 = _avg(3, lambda k: {BUG})
unplannable = avg2
"""


@pytest.mark.parametrize("bug", [False, True])
def test_a_case_symjac_cannot_verify_is_named_and_the_others_still_run(tmp_path, bug):
    # issue 33 item 13: a case whose coverage plan cannot be built (kernel 1 with padding 1: the end
    # windows read only padding at every length) aborted the whole run with exit 2, naming no case.
    # Now it is an ERROR line naming it; the other cases are verified; the exit code is 1 if any of
    # them has a finding, else 2 (not everything asked was verified).
    (tmp_path / "cases.toml").write_text(_AVG_CASES)
    (tmp_path / "impl.py").write_text(_AVG_IMPL.replace("{BUG}", "1.0" if bug else "1 / k"))
    r = symjac("verify", "cases.toml", "--impl", "impl.py", cwd=tmp_path)
    assert r.returncode == (1 if bug else 2), r.stdout + r.stderr
    lines = _status_lines(r.stdout)
    # in the file's order
    assert lines[0].startswith("PASS avg2: ") and lines[2].startswith("FAIL avg3: " if bug else "PASS avg3: ")
    assert lines[1].startswith("ERROR unplannable: not verified: cover: ") and "fits no input length" in lines[1]
    assert f"3 cases in float64: {1 if bug else 2} passed, {1 if bug else 0} failed, 1 not verified (ERROR), " \
           "0 skipped" in r.stdout
    doc = json.loads(symjac("verify", "cases.toml", "--impl", "impl.py", "--json", cwd=tmp_path).stdout)
    assert [(d["case"], d["ok"], d.get("error", "")[:7]) for d in doc] == [
        ("avg2", True, ""), ("unplannable", False, "cover: "), ("avg3", not bug, "")]
    # alone, the case is the usage error it was: nothing else was asked
    r = symjac("verify", "cases.toml", "--impl", "impl.py", "--case", "unplannable", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("symjac verify: error: cover: ") and not r.stdout


# Seed 003's mse and constant_derivative (S = 8), right in float32 and refused in every other dtype:
# mse's derivative is S·2·(z - y)/n (mean over n entries), constant_derivative's S·1 (ℓ = z).
_FLOAT32_ONLY = """
import numpy as np
from types import SimpleNamespace as NS

def _float32_only(f):
    def derivative(z, y=None):
        if z.dtype != np.float32:
            raise TypeError(f"only float32 here, not {z.dtype}")
        return f(z, y)
    return NS(derivative=derivative)

mse = _float32_only(lambda z, y: np.float32(8) * 2 * (z - y) / np.float32(z.size))
constant_derivative = _float32_only(lambda z, y: np.full_like(z, 8))
sigmoid_ce = NS(derivative=lambda z, y: 1 / (1 + np.exp(-z)) - y)  # seed 003's missing S: a finding
"""


def test_a_rejected_dtype_is_unsupported_not_failed_and_exits_4_with_a_hint(tmp_path):
    # issue 33 item 10: an implementation that raises on every call in float64 and returns in float32
    # was counted "2 failed" and exited 1, with no hint. Now: "2 unsupported", exit 4, the dtype it
    # returns in named (symjac calls it in float32 to explain the refusal: docs/cli.md).
    (tmp_path / "impl.py").write_text(_FLOAT32_ONLY)
    seeds = str(ROOT / "specs/seeds/loss_scale_family.toml")
    two = (seeds, "--impl", "impl.py", "--case", "mse", "--case", "constant_derivative")
    r = symjac("verify", *two, cwd=tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    assert [line.split(":")[0] for line in r.stdout.splitlines()] == [  # in the file's order
        "UNSUPPORTED constant_derivative", "UNSUPPORTED mse", "2 cases in float64", "hint"], r.stdout
    assert "2 cases in float64: 0 passed, 0 failed, 2 unsupported, 0 skipped" in r.stdout
    assert r.stdout.splitlines()[-1] == "hint: the implementation returns float32: try --dtype float32"
    doc = json.loads(symjac("verify", *two, "--json", cwd=tmp_path).stdout)
    assert [(d["case"], d["ok"], d["returns_in"]) for d in doc] == [
        ("constant_derivative", False, ["float32"]), ("mse", False, ["float32"])]
    # in the dtype it takes, both pass
    r = symjac("verify", *two, "--dtype", "float32", cwd=tmp_path)
    assert r.returncode == 0 and "2 cases in float32: 2 passed, 0 failed, 0 skipped" in r.stdout, r.stdout
    # a finding elsewhere makes it exit 1, as before; the rejected dtype is still no failure
    r = symjac("verify", *two, "--case", "sigmoid_ce", cwd=tmp_path)
    assert r.returncode == 1 and "3 cases in float64: 0 passed, 1 failed, 2 unsupported, 0 skipped" in r.stdout


_FLOAT32_POOL = """
import sys
import numpy as np
sys.path.insert(0, {examples!r})
import nntrainer_pool

def _float32_only(f):
    def call(x, *rest):
        if x.dtype != np.float32:
            raise TypeError(f"only float32 here, not {x.dtype}")
        return f(x, *rest)
    return call

forward, backward = _float32_only(nntrainer_pool.fixed.forward), _float32_only(nntrainer_pool.fixed.backward)
"""


def test_graph_of_a_rejected_dtype_says_unsupported_and_exits_4(tmp_path):
    # issue 33 item 10: it said FAIL and exited 1, as verify did
    (tmp_path / "impl.py").write_text(_FLOAT32_POOL.replace("{examples!r}", repr(str(ROOT / "examples"))))
    r = symjac("graph", str(ROOT / SEED000), "--impl", "impl.py", "--out", "g.dot", cwd=tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "UNSUPPORTED nntrainer_avgpool_same_2x2: unsupported in float64: " in r.stdout, r.stdout


def test_explain_of_max_pooling_says_what_heaviside_0_means_and_avg_does_not():
    # The note is max's (its operator's explain_note): ties, the Clarke set and the spec's tie option.
    r = symjac("explain", "specs/seeds/maxpool_ties.toml")
    assert r.returncode == 0 and "Heaviside(x[0,0] - Max(" in r.stdout
    note = [line for line in r.stdout.splitlines() if line.startswith("note: Heaviside(0)")]
    assert len(note) == 1 and "Clarke subgradient" in note[0] and 'tie = "first"' in note[0]
    r = symjac("explain", SEED000)
    assert r.returncode == 0 and "Heaviside" not in r.stdout and "note:" not in r.stdout


def test_a_mistyped_impl_file_or_spec_path_names_the_nearest_file_in_its_folder(tmp_path):
    (tmp_path / "shape.toml").write_text((ROOT / "specs/seeds/maxpool_ties.toml").read_text())
    (tmp_path / "all_tie.py").write_text("def impl(x):\n    return x\n")
    (tmp_path / "other.txt").write_text("")
    r = symjac("verify", "shape.toml", "--impl", "alltie.py:impl", cwd=tmp_path)
    assert r.returncode == 2 and "no such file alltie.py (did you mean 'all_tie.py'?)" in r.stderr
    r = symjac("explain", "shap.toml", cwd=tmp_path)
    assert r.returncode == 2 and "shap.toml: no such spec file (did you mean 'shape.toml'?)" in r.stderr
    r = symjac("explain", "zzzzzz.toml", cwd=tmp_path)  # nothing near: no suggestion
    assert r.returncode == 2 and "no such spec file" in r.stderr and "did you mean" not in r.stderr


def test_max_nnz_sets_the_budget_and_the_message_names_it(tmp_path):
    # avg 2x2, stride 1 on 6x6: 25 windows x 4 slots = 100 Jacobian entries (and 36 inputs).
    spec = tmp_path / "big.toml"
    spec.write_text('name = "big"\n[operator]\nkind = "pool"\nmode = "avg"\nkernel = 2\nstride = 1\n'
                    '[input]\nshape = [1, 1, 6, 6]\n')
    for command in (("golden", str(spec), "--out", str(tmp_path / "o")), ("explain", str(spec)),
                    ("graph", str(spec), "--out", str(tmp_path / "g.dot"))):
        r = symjac(*command, "--max-nnz", "99")
        assert r.returncode == 2, (command, r.stderr)
        assert "= 100 Jacobian entries exceed the budget of 99" in r.stderr and "--max-nnz N" in r.stderr
        assert "symjac.pool.MAX_NNZ" not in r.stderr
        r = symjac(*command, "--max-nnz", "100")
        assert r.returncode == 0, (command, r.stderr)
    r = symjac("verify", str(spec), "--impl", FIXED, "--max-nnz", "99")
    assert r.returncode == 2 and "--max-nnz N" in r.stderr
    r = symjac("explain", str(spec), "--max-nnz", "0")
    assert r.returncode == 2 and "--max-nnz: '0' is no positive integer" in r.stderr
