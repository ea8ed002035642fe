"""The pytest plugin: light to load, parametrises over spec files."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester whose in-process runs keep every module they import but the run's own files.

    pytester drops, after each in-process run, the modules the run imported, so that a later run
    imports its test files afresh. That also drops what symjac imported lazily (NumPy's and SymPy's
    submodules, symjac's stages), and NumPy's C extensions cannot load twice in one process: the next
    import would fail. Here only the modules of files under the run's own directory are dropped; a
    run then costs its tests, not a second or so of importing SymPy (``runpytest_subprocess`` stays
    for what only a new process shows: the plugin found through its entry point)."""
    from _pytest.pytester import SysModulesSnapshot

    def imported_elsewhere(name: str) -> bool:
        origin = getattr(sys.modules.get(name), "__file__", None) or ""
        return not origin.startswith(str(pytester.path))

    def snapshot() -> SysModulesSnapshot:
        return SysModulesSnapshot(preserve=imported_elsewhere)

    monkeypatch.setattr(pytester, "_Pytester__take_sys_modules_snapshot", snapshot)
    monkeypatch.setattr(pytester, "_sys_modules_snapshot", snapshot())
    return pytester


def test_loading_the_plugin_imports_no_sympy():
    code = "import sys, symjac._pytest_plugin; print(sorted(m for m in ('sympy', 'numpy', 'networkx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_symjac_is_light():
    code = "import sys, symjac; print('sympy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_plugin_is_registered_by_entry_point():
    from importlib.metadata import entry_points

    eps = entry_points(group="pytest11")
    assert any(ep.name == "symjac" and ep.value == "symjac._pytest_plugin" for ep in eps)


def test_marker_parametrises_over_cases(pytester):
    spec_dir = ROOT / "specs" / "seeds"
    pytester.makepyfile(f"""
        import pytest
        import symjac

        @pytest.mark.symjac_spec({str(spec_dir / "textbook_*.toml")!r}, {str(spec_dir / "loss_scale_family.toml")!r})
        def test_case(symjac_spec, symjac_dtype):
            assert symjac_dtype == "float32"
            assert symjac_spec.name
    """)
    result = pytester.runpytest_inprocess("--symjac-dtype", "float32", "-v")
    # 2 textbook files + 5 loss cases.
    result.assert_outcomes(passed=7)
    # A case's test id is its name.
    result.stdout.fnmatch_lines(["*test_case?textbook_4x4_avg? PASSED*", "*test_case?mse? PASSED*"])


def test_fixture_without_marker_is_a_usage_error(pytester):
    pytester.makepyfile("""
        def test_case(symjac_spec):
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*mark it @pytest.mark.symjac_spec*"])


def test_assert_backward_matches_in_a_test(pytester):
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "examples")!r})
        import pytest
        import numpy as np
        import symjac
        from symjac.testing import assert_backward_matches
        from nntrainer_pool import buggy, fixed

        SPEC = symjac.Pool("avg", 2, stride=1, padding="same")

        def test_fixed():
            report = assert_backward_matches(SPEC, fixed.backward, fixed.forward, x=np.array([[1., 2.], [3., 4.]]))
            assert report.ok

        def test_buggy():
            assert_backward_matches(SPEC, buggy.backward, buggy.forward, x=np.array([[1., 2.], [3., 4.]]))
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*VerificationError*backward visits 1 of 4 output windows*"])


def test_marker_glob_matching_nothing_is_one_clear_collection_error(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.symjac_spec("nothing/*.toml")
        def test_case(symjac_spec):
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret != 0
    where = str(pytester.path)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([f"*test_case: @pytest.mark.symjac_spec('nothing/*.toml') matches no spec file in {where}"])
    assert out.count(f"in {where}") == 1 and f"{where} or {where}" not in out
    assert "pluggy/_hooks.py" not in out and "Traceback" not in out and "_pytest_plugin.py" not in out


SEED_LOSSES = """
import numpy as np
from types import SimpleNamespace as NS

S = 8
# Seed 003: only mse applies the loss scale S; sigmoid_ce forgets it.
mse = NS(derivative=lambda z, y: (S * 2 * (z - y) / z.size).astype(z.dtype))
sigmoid_ce = NS(derivative=lambda z, y: ((1 / (1 + np.exp(-z)) - y) / z.size).astype(z.dtype))
"""


def test_symjac_case_verifies_pool_and_loss_cases(pytester):
    pytester.makepyfile(impls=SEED_LOSSES)
    pytester.makepyfile(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "examples")!r})
        import pytest
        import impls
        import nntrainer_pool

        @pytest.mark.symjac_spec({str(ROOT / "specs/seeds/nntrainer_avgpool_same_2x2.toml")!r})
        def test_pool_fixed(symjac_case):
            report = symjac_case.verify(nntrainer_pool.fixed)
            assert report.ok and report.stats["dtype"] == "float32"

        @pytest.mark.symjac_spec({str(ROOT / "specs/seeds/nntrainer_avgpool_same_2x2.toml")!r})
        def test_pool_buggy(symjac_case):
            symjac_case.verify(nntrainer_pool.buggy)

        @pytest.mark.symjac_spec({str(ROOT / "specs/seeds/loss_scale_family.toml")!r})
        def test_losses(symjac_case):
            if symjac_case.name not in ("mse", "sigmoid_ce"):
                pytest.skip("not in impls")
            symjac_case.verify(impls)
    """)
    result = pytester.runpytest_inprocess("--symjac-dtype", "float32", "-v", "--tb=short")
    result.assert_outcomes(passed=2, failed=2, skipped=3)
    result.stdout.fnmatch_lines(["*test_pool_fixed?nntrainer_avgpool_same_2x2? PASSED*",
                                 "*test_pool_buggy?nntrainer_avgpool_same_2x2? FAILED*",
                                 "*test_losses?sigmoid_ce? FAILED*", "*test_losses?mse? PASSED*"])
    # The assertion's first line is the one-line summary; the details follow, without repeating it.
    result.stdout.fnmatch_lines(["E * symjac.VerificationError: backward visits 1 of 4 output windows*",
                                 "E * subject: Pool(mode='avg'*",
                                 "E * - ?missing_windows? 3 of 4 windows send no gradient: (0,1), (1,0), (1,1)"])
    # Once in the failure's own lines (the short summary at the end repeats it, untruncated under CI=true).
    failure = [line for line in result.stdout.lines if line.startswith("E ")]
    assert sum("backward visits 1 of 4 output windows" in line for line in failure) == 1
    result.stdout.fnmatch_lines(["E * symjac.VerificationError: sigmoid_ce in float32: *missing loss scale*"])


def test_assert_loss_matches():
    import numpy as np

    import symjac
    from symjac.testing import assert_loss_matches

    loss = symjac.Loss("sigmoid_ce", scale=8)
    # d/dz of mean(sigmoid_ce) at one element, times S = 8: 8 * (sigmoid(z) - y).
    good = assert_loss_matches(loss, lambda z, y: (8 * (1 / (1 + np.exp(-z)) - y)).astype(z.dtype), pred=[0.0, 2.0][:1],
                               label=[1.0])
    assert good.ok
    try:
        assert_loss_matches(loss, lambda z, y: (1 / (1 + np.exp(-z)) - y).astype(z.dtype), pred=[0.0], label=[1.0])
    except AssertionError as exc:
        assert isinstance(exc, symjac.VerificationError)
        assert str(exc).splitlines()[0] == exc.report.summary() and exc.report.categories()[0] == "missing_scale"
        assert str(exc).count(exc.report.summary()) == 1
    else:
        raise AssertionError("an unscaled derivative passed")


def test_a_long_report_fails_a_test_in_one_screen_and_shows_whole_under_vv(pytester):
    # issue 33 item 1: a failing test printed the whole report (557 lines with --tb=line). A backward
    # that sends 1/2 to every cell of 2x2 max windows (the exact one sends 1 to one cell each) is wrong
    # at every window: the report's details run to hundreds of lines; the failure shows one screen.
    pytester.makepyfile("""
        import numpy as np
        import symjac
        from symjac.testing import assert_backward_matches

        def test_halves():
            assert_backward_matches(symjac.Pool("max", 2, stride=2), lambda x, dy: np.zeros_like(x) + 0.5,
                                    input_shape=(1, 1, 8, 8))
    """)
    short = pytester.runpytest_inprocess("--tb=short", "-p", "no:cacheprovider")
    short.assert_outcomes(failed=1)
    failure = [line for line in short.stdout.lines if line.startswith("E ")]
    assert 10 < len(failure) <= 41  # SCREEN_LINES (40) and the exception's own line
    assert failure[-1].endswith("more lines: the error's .report.details() (pytest -vv) shows every finding")
    assert not any("symjac report, every finding" in line for line in short.stdout.lines)
    whole = pytester.runpytest_inprocess("--tb=short", "-vv", "-p", "no:cacheprovider")
    whole.assert_outcomes(failed=1)
    at = next(i for i, line in enumerate(whole.stdout.lines) if "symjac report, every finding" in line)
    more = int(failure[-1].split("... ")[1].split()[0])  # the lines the cut left out, all shown here
    assert len(whole.stdout.lines) - at > more
