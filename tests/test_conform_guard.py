"""``symjac conform`` with a misbehaving user adapter, and its options (issue 24, item 3): a user
adapter's ``configurations()`` runs under the guard ``make()`` runs under; every failure is one line
and exit 2 (or a finding), never a traceback, a hang or a silent exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli_runner
from cli_checks import one_line_error

import symjac

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = str(ROOT / "tests" / "conform_misbehaving.py")
ADAPTER = str(ROOT / "tests" / "conform_adapter.py")
QUICK = ("--dtype", "float64", "--families", "distinct", "-q")


def cli(*args, **options):
    return cli_runner.symjac("conform", *args, env={"PYTHONPATH": str(ROOT)}, **options)


@pytest.mark.parametrize(("name", "words"), [
    ("raising", ("raised ValueError: no grid today",)),
    ("returns_none", ("returned NoneType", "iterable of symjac.frameworks.Config")),
    ("aborts", ("killed by SIGABRT",)),
    ("segfaults", ("killed by SIGSEGV",)),
    ("blocks", ("did not return within 3 s",)),
    ("endless", ("more than 100000 configurations",)),
    ("exits", ("raised SystemExit (0)",)),
])
def test_configurations_isolated_fail_in_one_line(name, words):
    # (3 s for the one that blocks; the others get time for the worker's start on a loaded machine)
    r = cli(f"{ADAPTERS}:{name}", "--timeout", "3" if name == "blocks" else "60", *QUICK)
    one_line_error(r, f"{name}': configurations('small')", *words)
    assert r.stdout == ""


@pytest.mark.parametrize(("name", "words"), [
    ("raising", ("raised ValueError",)), ("returns_none", ("returned NoneType",)),
    ("endless", ("more than 100000",)), ("exits", ("raised SystemExit (0)",))])
def test_configurations_in_process_fail_in_one_line(name, words):
    one_line_error(cli(f"{ADAPTERS}:{name}", "--no-isolate", *QUICK), *words)


@pytest.mark.parametrize(("option", "valid"), [
    (("-j", "100000"), "give 1 to 64 worker processes"), (("-j", "0"), "give 1 to 64"), (("-j", "-1"), "give 1 to 64"),
    (("--budget", "nan"), "give a positive number of seconds"), (("--budget", "inf"), "positive number"),
    (("--timeout", "-1"), "give seconds > 0, or 0 for no limit"), (("--timeout", "nan"), "0 for no limit")])
def test_bad_option_values_are_refused(option, valid):
    r = cli(ADAPTER, *option, *QUICK, timeout=60)
    one_line_error(r, option[0], valid)
    assert r.stdout == ""


def test_timeout_0_means_no_limit_as_for_verify():
    # verify --help: "0: no limit"; conform took 0 as 0 s, and every isolated cell came back crashed
    r = cli(f"{ADAPTER}:crash_free", "--timeout", "0", "--ops", "max_ok", *QUICK)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "1 pass" in r.stdout


@pytest.mark.parametrize(("option", "path", "why"), [
    ("--json", "/nonexistent-symjac-folder/out.json", "no folder"), ("--json", "tests", "is a folder"),
    ("--reproducers", "tests/conform_adapter.py", "is a file"),
    ("--reproducers", "tests/conform_adapter.py/inside", "is a file, not a folder")])
def test_output_paths_are_checked_before_the_run(option, path, why):
    r = cli(ADAPTER, option, path, *QUICK)
    one_line_error(r, option, why)
    assert r.stdout == ""  # nothing ran: no table


def test_json_that_runs_out_of_space_keeps_the_previous_file(tmp_path):
    # a 64-byte file-size limit (RLIMIT_FSIZE: a write past it fails with EFBIG, as a full disk
    # fails with ENOSPC; CPython ignores SIGXFSZ): the old JSON stays whole, no temporary is left
    resource = pytest.importorskip("resource")
    out = tmp_path / "c.json"
    out.write_text('{"previous": "run"}')

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    # a resource limit on the process: a real one
    r = cli(f"{ADAPTER}:crash_free", "--ops", "max_ok", "--no-isolate", "--json", str(out), *QUICK, timeout=120,
            process=True, preexec_fn=small_disk)
    assert r.returncode == 2 and "File too large" in r.stderr, (r.returncode, r.stderr)
    assert out.read_text() == '{"previous": "run"}' and [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_nothing_verified_is_no_success():
    r = cli(ADAPTER, "--budget", "1e-9", *QUICK)
    line = one_line_error(r, "no cell was verified", "not_run")
    assert "6 not_run" in line and "- " in r.stdout  # the table is printed, every cell '-'
    r = cli(f"{ADAPTERS}:all_broken", *QUICK)
    one_line_error(r, "no cell was verified", "2 error")


@pytest.mark.slow  # waits out a 10 s timeout (21 s); the default run bounds a blocking configurations() (below)
def test_a_hung_make_is_a_timeout_finding():
    # 10 s: the worker's start and the max k2 cell fit in it on a loaded machine, make() of 'hang' does not
    result = symjac.conform(f"{ADAPTERS}:hangs", dtypes=("float64",), families=("distinct",), timeout=10)
    cells = {r["config"]["label"]: r for r in result.results}
    assert cells["max k2"]["status"] == "pass"
    hung = cells["hang"]
    assert (hung["status"], hung["category"], hung["signal"]) == ("finding", "timeout", None)
    assert hung["summary"] == "hang in float64 did not return within 10 s; the process running it was killed"
    assert "timeout" in result.table()


def test_configurations_sharing_a_label_get_a_row_each_and_equal_ones_run_once():
    result = symjac.conform(f"{ADAPTERS}:same_label", dtypes=("float64",), families=("distinct",))
    assert [r["config"]["label"] for r in result.results] == ["max k2 [stride=3]", "max k2 [stride=None]"]
    assert [r["config"]["kwargs"]["stride"] for r in result.results] == [3, None]
    assert "2 configurations x 1 dtypes = 2 cells: 2 pass" in result.table()


@pytest.mark.parametrize("isolate", [True, False])
def test_a_configuration_without_a_shape_runs_at_the_coverage_plan(isolate):
    result = symjac.conform(f"{ADAPTERS}:no_shapes", dtypes=("float64",), families=("distinct",), isolate=isolate)
    shapes = {op: [r["config"]["input_shape"] for r in result.results if r["config"]["op"] == op]
              for op in ("max", "avg")}
    assert shapes == {"max": [list(s) for s in symjac.cover(symjac.Pool("max", 2))],
                      "avg": [list(s) for s in symjac.cover(symjac.Pool("avg", 3, stride=2))]}
    assert len(shapes["max"]) > 1 and result.ok and result.verified == len(result.results)
    # a configuration without a label is named by its op and arguments
    assert {r["config"]["label"] for r in result.results if r["config"]["op"] == "avg"} == {"avg kernel=3 stride=2"}


def test_the_limitation_hook_makes_a_cell_unsupported():
    result = symjac.conform(f"{ADAPTERS}:limited", dtypes=("float32", "float64"), families=("distinct",))
    cells = {(r["config"]["op"], r["dtype"]): r for r in result.results}
    assert cells["avg", "float32"]["status"] == "unsupported"
    assert cells["avg", "float32"]["reason"] == "no float32 avg kernel"
    assert {cells[k]["status"] for k in cells if k != ("avg", "float32")} == {"pass"}
    doc = (ROOT / "docs" / "frameworks.md").read_text()
    user_part = doc[doc.index("## Your own framework"):]
    assert "limitation(config, dtype)" in user_part and "input_shape" in user_part


def test_a_budget_samples_across_the_grid():
    # 24 configurations of 0.25 s each (make() sleeps) and a 1.5 s budget: a handful run; in the
    # adapter's order they would be the first ones, #00, #01, ...
    result = symjac.conform(f"{ADAPTERS}:slow", dtypes=("float64",), families=("distinct",), isolate=False,
                            budget=1.5)
    ran = [i for i, r in enumerate(result.results) if r["status"] != "not_run"]
    assert 2 <= len(ran) < 24
    assert ran != list(range(len(ran))) and max(ran) >= len(ran)
