"""The pytest plugin: light to load, parametrises over spec files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]


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
    result = pytester.runpytest_subprocess("--symjac-dtype", "float32", "-v")
    # 2 textbook files + 5 loss cases.
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*test_case?textbook_4x4_avg?*PASSED*", "*loss_scale_family:mse*PASSED*"])


def test_fixture_without_marker_is_a_usage_error(pytester):
    pytester.makepyfile("""
        def test_case(symjac_spec):
            pass
    """)
    result = pytester.runpytest_subprocess()
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
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*VerificationError*backward visits 1 of 4 output windows*"])
