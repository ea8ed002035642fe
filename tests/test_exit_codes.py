"""One exit-code contract for every command (docs/cli.md, "Exit codes"; issue 33):
0 everything checked passed (or the command did its job), 1 a defect was found, 2 symjac could
not do what was asked, 3 ``check --responses`` has requests left, 4 UNSUPPORTED alone.

Each row runs the command line in this process (``symjac.cli._main.main``). The defects are
seed 000's (the SAME 2x2 average-pooling backward that visits 1 of 4 windows) and a doubled
max-pooling gradient; the repairs are symjac's NumPy lowering, which the engine tests check
against PyTorch and the seeds.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from symjac.cli._main import build_parser, main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEED000 = str(ROOT / "specs" / "seeds" / "nntrainer_avgpool_same_2x2.toml")
TIES = str(ROOT / "specs" / "seeds" / "maxpool_ties.toml")
NNTRAINER = str(ROOT / "examples" / "nntrainer_pool.py")
ADAPTER = str(ROOT / "tests" / "conform_adapter.py") + ":crash_free"
IMPLS = '''
import numpy as np
import symjac


class _Lowered:
    def __init__(self, spec, scale=1.0):
        self.spec, self.scale = spec, scale

    def forward(self, x):
        return symjac.lower(self.spec, x.shape).forward(x)

    def backward(self, x, dy):
        return (symjac.lower(self.spec, x.shape).vjp(x, dy) * self.scale).astype(x.dtype)


def right(spec):
    return _Lowered(spec)


def doubled(spec):  # a defect: twice the gradient
    return _Lowered(spec, 2.0)


class _Todo:
    def backward(self, x, dy):
        raise NotImplementedError("todo")


def todo(spec):  # a backward not written: UNSUPPORTED
    return _Todo()


backward = _Todo().backward
'''
SWEEP = """
[operator]
kind = ["pool"]
mode = ["avg"]
kernel = [2]
stride = [1]
padding = ["same"]
[input]
shape = [[1, 1, 2, 2]]
"""

#: (command line, exit code). ``{t}`` is the test's temporary folder.
ROWS = [
    (["verify", SEED000, "--impl", f"{NNTRAINER}:fixed"], 0),
    (["verify", SEED000, "--impl", f"{NNTRAINER}:buggy"], 1),
    (["verify", "{t}/missing.toml", "--impl", f"{NNTRAINER}:fixed"], 2),
    (["verify", SEED000], 2),  # no implementation given
    (["verify", SEED000, "--impl", "{t}/impls.py"], 4),
    (["golden", SEED000, "--out", "{t}/golden"], 0),
    (["golden", SEED000, "--out", "{t}/golden2", "--format", "xml"], 2),
    (["explain", SEED000], 0),
    (["explain", "{t}/missing.toml"], 2),
    (["graph", SEED000, "--out", "{t}/g.dot"], 0),
    (["graph", SEED000, "--impl", f"{NNTRAINER}:buggy", "--out", "{t}/g1.dot"], 1),
    (["graph", SEED000, "--out", "{t}/g.xml"], 2),
    (["graph", SEED000, "--impl", "{t}/impls.py", "--out", "{t}/g4.dot"], 4),
    (["sweep", "{t}/sweep.toml", "--impl", "{t}/impls.py:right", "-q"], 0),
    (["sweep", "{t}/sweep.toml", "--impl", "{t}/impls.py:doubled", "-q"], 1),
    (["sweep", "{t}/missing.toml", "--impl", "{t}/impls.py:right", "-q"], 2),
    (["sweep", "{t}/sweep.toml", "--impl", "{t}/impls.py:todo", "-q"], 4),
    (["census", TIES], 0),
    (["census", SEED000], 2),  # average pooling has no ties to count
    (["conform", ADAPTER, "--ops", "max_ok,avg_ok", "--dtype", "float64", "--no-isolate", "-q"], 0),
    (["conform", ADAPTER, "--ops", "max_doubled", "--dtype", "float64", "--no-isolate", "-q"], 1),
    (["conform", "nosuch"], 2),
    (["probes", SEED000, "--out", "{t}/rounds"], 0),
    (["probes", "{t}/missing.toml", "--out", "{t}/rounds2"], 2),
    (["check", SEED000, "--responses", "{t}/empty"], 3),
    (["check", SEED000, "--observed", "{t}/right.npy"], 0),
    (["check", SEED000, "--observed", "{t}/seed000.npy"], 1),
    (["check", SEED000], 2),  # neither --responses nor --observed
]


@pytest.mark.parametrize(("argv", "code"), ROWS, ids=[f"{a[0]}-{c}-{i}" for i, (a, c) in enumerate(ROWS)])
def test_every_command_keeps_the_exit_code_contract(argv: list[str], code: int, tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "impls.py").write_text(IMPLS)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    (tmp_path / "empty").mkdir()
    # seed 000 at x = [[1, 2], [3, 4]], dy = ones: exact dx [[1/4, 3/4], [3/4, 9/4]]; the defect's [[1/4] * 2] * 2
    np.save(tmp_path / "right.npy", np.array([[0.25, 0.75], [0.75, 2.25]]))
    np.save(tmp_path / "seed000.npy", np.full((2, 2), 0.25))
    got = main([a.format(t=tmp_path) for a in argv])
    out, err = capsys.readouterr()
    assert got == code, f"exit {got}, the contract says {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    if code == 2:  # symjac could not do it: one line on stderr saying why, no traceback
        assert "Traceback" not in err and err.strip(), err
    if code == 4:
        assert out.splitlines()[-1].startswith("hint: "), out


def test_the_contract_covers_every_command_and_the_docs_name_each() -> None:
    _, parsers = build_parser()
    commands = set(parsers)
    tested = {argv[0] for argv, _ in ROWS}
    assert tested == commands, f"commands without a row: {sorted(commands - tested)}"
    for command in commands:  # each command exits 0 and 2 somewhere in the table
        assert {0, 2} <= {c for argv, c in ROWS if argv[0] == command}, command
    table = (ROOT / "docs" / "cli.md").read_text().split("## Exit codes", 1)[1].split("```", 1)[0]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", table, re.M)}
    for argv, code in ROWS:
        if code in (1, 3, 4):  # the codes that only some commands give name the commands that give them
            assert f"`{argv[0]}" in rows[code], (argv[0], code)


def test_a_run_in_process_leaves_the_python_budget_settings_as_they_were(capsys: pytest.CaptureFixture[str]) -> None:
    """``main`` names ``--max-nnz`` in its budget message for its own run only: a later Python call in the
    same process is told about ``max_nnz`` again (the CI run saw the CLI's hint leak into test_geometry)."""
    import symjac.pool

    before = symjac.pool.BUDGET_HINT, symjac.pool.MAX_NNZ
    assert main(["explain", SEED000, "--max-nnz", "1000"]) == 0
    capsys.readouterr()
    assert (symjac.pool.BUDGET_HINT, symjac.pool.MAX_NNZ) == before
