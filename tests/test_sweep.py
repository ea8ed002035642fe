"""Sweeps: the grid, local workers, and a Dask LocalCluster giving the same results."""

import json
from pathlib import Path

import pytest

import symjac
from symjac.cli._sweep import run_sweep
from symjac.io._sweep import load_grid, verify_grid

ROOT = Path(__file__).resolve().parent.parent
LOWERED = "tests/sweep_impl.py:make"


@pytest.fixture
def sweep_file(tmp_path):
    p = tmp_path / "sweep.toml"
    p.write_text(
        '[operator]\nkind = ["pool"]\nmode = ["avg", "max"]\nkernel = [2, 3]\nstride = [1, 2]\n'
        'padding = ["valid", "same"]\n[input]\nshape = [[1, 2, 4, 5], [2, 2]]\n'
    )
    return p


def test_grid_is_the_product(sweep_file):
    grid = load_grid(sweep_file)
    assert len(grid) == 2 * 2 * 2 * 2 * 2  # mode x kernel x stride x padding x shape
    assert grid[0] == {"operator": {"kind": "pool", "mode": "avg", "kernel": 2, "stride": 1, "padding": "valid"},
                       "input": {"shape": [1, 2, 4, 5]}}


def test_invalid_combinations_are_skipped(sweep_file, monkeypatch):
    monkeypatch.chdir(ROOT)
    results = verify_grid(load_grid(sweep_file), LOWERED)
    skipped = [r for r in results if r["status"] == "skipped"]
    # kernel 3 with valid padding cannot fit a 2x2 input: 2 modes x 2 strides = 4 combinations.
    assert len(skipped) == 4 and all("exceeds the padded input length" in r["reason"] for r in skipped)
    assert all(r["status"] == "pass" for r in results if r["status"] != "skipped")


def test_failures_are_counted_and_written(tmp_path, sweep_file, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "results.jsonl"
    results = run_sweep(sweep_file, "tests/sweep_impl.py:make_broken", out=out, progress=False)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 32 and [r["status"] for r in results] == [r["status"] for r in lines]
    broken = [r for r in lines if r["status"] == "fail"]
    # The broken backward halves every gradient: all 28 valid configurations fail.
    assert len(broken) == 28
    assert "0 pass 28 fail 0 error 4 skipped of 32 configurations" in capsys.readouterr().out


def test_local_processes_match_serial(sweep_file, monkeypatch):
    monkeypatch.chdir(ROOT)
    grid = load_grid(sweep_file)[:8]
    assert verify_grid(grid, LOWERED, jobs=2) == verify_grid(grid, LOWERED)


def test_dask_local_cluster_matches_local_run(sweep_file, monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.chdir(ROOT)
    grid = load_grid(sweep_file)[:8]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        remote = verify_grid(grid, LOWERED, scheduler=cluster.scheduler_address)
    assert remote == verify_grid(grid, LOWERED)


def test_missing_sweep_file():
    with pytest.raises(symjac.SpecError, match="no such sweep file"):
        load_grid("nope.toml")


def test_sweep_keys_are_checked_when_read(tmp_path):
    p = tmp_path / "typo.toml"
    p.write_text('[operator]\nkind = ["pool"]\nmode = ["avg"]\nkernel = [2]\nstide = [1]\n[input]\nshape = [[4, 4]]\n')
    with pytest.raises(symjac.SpecError, match=r"unknown key 'stide'; did you mean 'stride'\?"):
        load_grid(p)
    p.write_text('[operator]\nkind = ["loss"]\n[input]\nshape = [[4]]\n')
    # the kinds are read from the spec-file tables (io._specfile.OPERATOR_TABLES); the message
    # is the one the sweep gave when it listed them itself
    with pytest.raises(symjac.SpecError, match=r"\[operator\]\.kind: 'loss' is not valid in a sweep; sweeps run "
                       r"pooling specs \('pool', 'adaptive_pool', 'global_pool', 'fractional_max_pool', 'roi_align', "
                       r"'roi_pool'\)$"):
        load_grid(p)


def test_results_file_is_written_atomically(tmp_path, sweep_file, monkeypatch):
    # A write that fails (EFBIG under a file-size limit, as ENOSPC on a full disk) must leave the
    # previous results file as it was; writing in place truncated it first.
    monkeypatch.chdir(ROOT)
    out = tmp_path / "results.jsonl"
    out.write_text('{"previous": true}\n')

    def refuse(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("symjac._atomic.os.fsync", refuse)
    with pytest.raises(OSError, match="No space"):
        run_sweep(sweep_file, LOWERED, out=out, progress=False)
    assert out.read_text() == '{"previous": true}\n'
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
