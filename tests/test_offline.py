"""The offline route (frameworks/_offline.py, cli/_offline.py): record verify's requests, answer
them elsewhere, replay by rounds; the report is verify's own, finding by finding."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import cli_runner
from native_kernels import build, needs_cc
from symjac.check._call import Guard
from symjac.check._invoke import Unanswered
from symjac.cli._select import select_cases
from symjac.frameworks.native._offline import answer, read_request, run_offline
from symjac.io._case import verify_case

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from nntrainer_pool import buggy, fixed  # noqa: E402

SEED000 = str(ROOT / "specs/seeds/nntrainer_avgpool_same_2x2.toml")
MAX_PLAN = """name = "max2_plan"
[operator]
kind = "pool"
mode = "max"
kernel = 2
stride = 2
"""


def _max_forward(x: np.ndarray) -> np.ndarray:
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    c = x[..., :h, :w]
    return c.reshape(*c.shape[:-2], h // 2, 2, w // 2, 2).max(axis=(-3, -1))


def _max_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    dx = np.zeros_like(x)
    for idx in np.ndindex(*dy.shape):
        *lead, i, j = idx
        window = x[(*lead, slice(2 * i, 2 * i + 2), slice(2 * j, 2 * j + 2))]
        a, b = np.unravel_index(int(np.argmax(window)), (2, 2))
        dx[(*lead, 2 * i + a, 2 * j + b)] += dy[idx]
    return dx


max_pool = SimpleNamespace(forward=_max_forward, backward=_max_backward)


def _rounds(case, folder, impl, dtype="float64"):
    n = 0
    while isinstance(got := run_offline(case, folder, dtype), int):
        assert got > 0
        assert answer(folder, impl) == got  # every written request is answered once
        n += 1
        assert n < 50
    return got, n


def _same_report(offline, direct):
    """The offline report is verify's, but for why the JVP, double backward and batching rule went
    unchecked: the wire carries forward and backward requests only, the Python object has none of them."""
    a, b = offline.to_dict(), direct.to_dict()
    for d in (a, b):
        d["summary"] = d["summary"].split("; not checked: ")[0]
        for entry in d.get("transforms", {}).values():
            entry.pop("why", None)
    assert a == b
    assert "native protocol carries forward and backward requests only" in offline.stats["transforms"]["jvp"]["why"]


@pytest.mark.parametrize("impl", [buggy, fixed], ids=["buggy", "fixed"])
def test_seed000_offline_report_is_verifys(impl, tmp_path):
    case = select_cases([SEED000], (), None)[0]
    report, n = _rounds(case, tmp_path, impl)
    assert n >= 1
    _same_report(report, verify_case(case, impl, "float64"))


@pytest.mark.slow  # ~10 s: the whole max-pooling plan over the wire (the other offline tests take the route faster)
def test_max_pool_coverage_plan_offline_report_is_verifys(tmp_path):
    spec = tmp_path / "max.toml"
    spec.write_text(MAX_PLAN)
    case = select_cases([str(spec)], (), None)[0]
    report, _ = _rounds(case, tmp_path / "dir", max_pool, "float32")
    direct = verify_case(case, max_pool, "float32")
    _same_report(report, direct)
    assert len(report.to_dict()["shapes"]) > 1  # the plan's shapes all went over the wire


def test_unanswered_passes_the_guard_and_is_no_finding():
    findings: list = []

    def unanswered(x):
        raise Unanswered("not yet")

    guard = Guard(unanswered, "backward", ("x",), findings)
    with pytest.raises(Unanswered):
        guard.call(np.zeros(2))
    with pytest.raises(Unanswered):
        list(guard.arrays([(np.zeros(2),), (np.ones(2),)], shape=(2,), dtype=np.dtype(np.float64)))
    assert findings == []
    ValueErrorGuard = Guard(lambda x: int("x"), "backward", ("x",), findings)  # an ordinary raise stays a finding
    assert ValueErrorGuard.call(np.zeros(2)) == (False, None)
    assert [f.category for f in findings] == ["bad_output"]


def test_requests_are_the_wire_requests_named_by_content(tmp_path):
    case = select_cases([SEED000], (), None)[0]
    assert run_offline(case, tmp_path) > 0
    index = json.loads((tmp_path / "index.json").read_text())
    files = sorted(p.name for p in tmp_path.glob("*.request"))
    assert sorted(r["request"] for r in index["requests"]) == files
    import hashlib

    for name in files:
        data = (tmp_path / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == name.split(".")[0]
        assert data.startswith(b"symjac 1 request\nid 0\nop ")
        op, lines, inputs, output = read_request(data)
        assert "operator pool" in lines and "padding same" in lines
        assert [n for n, _ in inputs] == (["x"] if op == "forward" else ["x", "dy"])


def test_kernel_error_response_is_a_refusal_finding(tmp_path):
    case = select_cases([SEED000], (), None)[0]

    def refuse(x, dy):
        raise ValueError("no backward here")

    impl = SimpleNamespace(forward=fixed.forward, backward=refuse)
    report, _ = _rounds(case, tmp_path, impl)
    assert "bad_output" in report.categories()
    assert any("KernelRefused" in f.message and "no backward here" in f.message for f in report.findings)


def test_cli_rounds_and_exit_codes(tmp_path):
    def symjac(*args):
        return cli_runner.symjac(*args, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})

    d = str(tmp_path / "probes")
    r = symjac("probes", SEED000, "--out", d)
    # the first round's 12 calls, each asked for as its two poisoned runs (docs/native.md)
    assert r.returncode == 0 and r.stdout.startswith("24 more request(s) to run in"), r.stdout + r.stderr
    codes = []
    for _ in range(10):
        r = symjac("check", SEED000, "--responses", d)
        codes.append(r.returncode)
        if r.returncode != 3:
            break
        assert "more request(s) to run" in r.stdout and len(r.stdout.splitlines()) == 1
        subprocess.run([sys.executable, "-m", "symjac.frameworks.native._offline", d, "--impl",
                        "examples/nntrainer_pool.py:buggy"], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
                       capture_output=True, timeout=300)
    assert codes[0] == 3 and codes[-1] == 1
    assert r.stdout.startswith("FAIL nntrainer_avgpool_same_2x2: backward visits 1 of 4 output windows")
    r = symjac("check", SEED000, "--responses", str(tmp_path / "absent"))
    assert r.returncode == 2 and "is no folder" in r.stderr


# --observed. Seed 000's case: x 2x2, avg k=2 s=1 SAME (pads low 0, high 1), padding out of
# the divisor: window (0,0) covers all 4 cells (1/4 each), (0,1) cells (0,1),(1,1) (1/2),
# (1,0) cells (1,0),(1,1) (1/2), (1,1) cell (1,1) (1/1). With dy = ones the exact dx is
# [[1/4, 3/4], [3/4, 9/4]]; the buggy backward's, window (0,0) alone, is 1/4 everywhere.

def _observe(dx):
    from symjac.io._observed import diagnose_observed

    return diagnose_observed(select_cases([SEED000], (), None)[0], np.asarray(dx))


def test_observed_exact_dx_is_ok_and_missing_windows_are_named():
    assert _observe(np.array([[0.25, 0.75], [0.75, 2.25]], dtype=np.float32)).ok
    got = _observe(np.full((2, 2), 0.25))
    assert not got.ok
    assert got.lines[0].endswith("off the exact J^T dy at 3 of 4 cells (worst at dx(1,1): expected 2.25, observed 0.25)")
    assert "  windows (0,1), (1,0), (1,1) get nothing" in got.lines and "  windows (0,0) arrive" in got.lines


def test_observed_wrong_share_of_one_window():
    # window (1,1)'s gradient (1 at cell (1,1)) arrives halved: 9/4 - 1/2 = 7/4 there
    got = _observe(np.array([[0.25, 0.75], [0.75, 1.75]]))
    assert "  windows with another share of their gradient: (1,1) x0.5" in got.lines


@pytest.mark.parametrize("suffix", [".npy", ".npz", "bin"])
def test_cli_observed_reads_npy_npz_and_golden_bin(tmp_path, suffix):
    from symjac.cli._main import main

    dx = np.full((2, 2), 0.25, dtype=np.float32)
    path = tmp_path / f"dx{suffix}"
    if suffix == ".npy":
        np.save(path, dx)
    elif suffix == ".npz":
        np.savez(path, dx=dx)
    else:
        path.mkdir()
        dx.tofile(path / "dx.float32.bin")
        (path / "index.json").write_text(json.dumps({"arrays": {"dx.float32": {
            "file": "dx.float32.bin", "dtype": "<f4", "shape": [2, 2], "count": 4}}}))
    assert main(["check", SEED000, "--observed", str(path)]) == 1


MAXPOOL = """
[operator]
kind = "pool"
mode = "max"
kernel = [2, 2]
[input]
shape = [%s]
"""


def test_cli_observed_takes_x_and_dy_from_a_golden_case_folder(tmp_path, capsys):
    """A kernel run on a golden folder's x and dy, its dx written over the folder's dx: the
    diagnosis uses the folder's inputs (shape 1x1x2x4), not the spec's (1x1x4x4 here)."""
    from symjac.cli._main import main

    (tmp_path / "golden.toml").write_text(MAXPOOL % "1, 1, 2, 4")
    (tmp_path / "m.toml").write_text(MAXPOOL % "1, 1, 4, 4")
    assert main(["golden", str(tmp_path / "golden.toml"), "--format", "bin", "--dtype", "float32",
                 "--out", str(tmp_path / "g")]) == 0
    folder = tmp_path / "g" / "golden"
    arrays = json.loads((folder / "index.json").read_text())["arrays"]
    x = np.fromfile(folder / "x.float32.bin", np.float32).reshape(1, 1, 2, 4)
    dy = np.fromfile(folder / "dy.float32.bin", np.float32).reshape(1, 1, 1, 2)
    assert arrays["dx.float32"]["shape"] == [1, 1, 2, 4]
    assert np.all(dy != 0)  # each window has a gradient to drop
    # By hand: kernel 2x2, stride 2, valid: windows (0,0,0,0) (columns 0-1) and (0,0,0,1)
    # (columns 2-3); each window's dy goes to its largest x (distinct within each window).
    dx = np.zeros((1, 1, 2, 4), np.float32)
    for w in range(2):
        block = x[0, 0, :, 2 * w:2 * w + 2]
        assert len(set(block.reshape(-1).tolist())) == 4
        i, j = np.unravel_index(int(np.argmax(block)), block.shape)
        dx[0, 0, i, 2 * w + j] = dy[0, 0, 0, w]
    dx.tofile(folder / "dx.float32.bin")
    capsys.readouterr()
    assert main(["check", str(tmp_path / "m.toml"), "--observed", str(folder), "--dtype", "float32"]) == 0
    assert "matches the exact J^T dy at all 8 cells" in capsys.readouterr().out
    # planted defect: window (0,0,0,1)'s gradient dropped
    dx[0, 0, :, 2:] = 0
    dx.tofile(folder / "dx.float32.bin")
    assert main(["check", str(tmp_path / "m.toml"), "--observed", str(folder), "--dtype", "float32"]) == 1
    out = capsys.readouterr().out
    assert "  windows (0,0,0,1) get nothing" in out and "  windows (0,0,0,0) arrive" in out


def test_cli_observed_names_the_files_it_takes(tmp_path, capsys):
    from symjac.cli._main import main

    np.zeros(4, np.float32).tofile(tmp_path / "dx.float32.bin")
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "dx.float32.bin", tmp_path / "empty"):
        assert main(["check", SEED000, "--observed", str(path)]) == 2
        err = capsys.readouterr().err
        assert "--observed takes a .npy file, an .npz archive" in err and "golden bin case folder" in err


@needs_cc
@pytest.mark.parametrize("defines", [("-DSEED000_BUG",), ()], ids=["bug", "fixed"])
def test_exec_responder_gives_the_process_routes_report(tmp_path, defines):
    """The remote side as a C kernel program: the offline report is the process route's."""
    import symjac.frameworks.native.process as sjp

    program = str(build(tmp_path, "pool.c", *defines))
    case = select_cases([SEED000], (), None)[0]
    folder = tmp_path / "dir"
    rounds = 0
    while isinstance(got := run_offline(case, folder), int):
        assert answer(folder, exec=program) == got
        rounds += 1
    online = verify_case(case, sjp.impl(program, case.operator), "float64")
    assert rounds >= 1 and got.to_dict() == online.to_dict()


@needs_cc
@pytest.mark.parametrize("name", ["sigmoid_ce", "mse"])
def test_loss_cases_offline_give_the_process_routes_report(tmp_path, name):
    """Seed 003's C loss kernel (missing scale in sigmoid_ce; mse right) answered offline."""
    import symjac.frameworks.native.process as sjp

    program = str(build(tmp_path, "loss.c", "-DSEED003_BUG"))
    case = select_cases([str(ROOT / "specs/seeds/loss_scale_family.toml")], (name,), None)[0]
    while isinstance(got := run_offline(case, tmp_path / "dir"), int):
        assert answer(tmp_path / "dir", exec=program) == got
    online = verify_case(case, sjp.loss_impl(program, case.operator), "float64")
    assert got.to_dict() == online.to_dict()
    assert got.ok == (name == "mse")
