"""``symjac sweep``: whatever the factory returns is a result of the sweep, never its crash: a dict
with ``backward`` (as ``verify`` takes one) is verified, an object without ``backward`` is an
``error`` row naming what is missing."""

import json
from pathlib import Path

from cli_runner import symjac

ROOT = Path(__file__).resolve().parent.parent
SWEEP = """[operator]
kind = ["pool"]
mode = ["avg"]
kernel = [2]
[input]
shape = [[1, 1, 4, 4]]
"""
FACTORIES = """import numpy as np


def as_dict(spec):
    # 2x2 average pooling, stride 2, on 4x4: every cell reads one window, dx = dy / 4 there
    return {"backward": lambda x, dy: np.repeat(np.repeat(dy, 2, axis=-2), 2, axis=-1) / 4}


def nothing(spec):
    return object()


def float32_only(spec):
    # as_dict's backward, refusing every dtype but float32
    def backward(x, dy):
        if x.dtype != np.float32:
            raise TypeError(f"only float32 here, not {x.dtype}")
        return np.repeat(np.repeat(dy, 2, axis=-2), 2, axis=-1) / np.float32(4)
    return {"backward": backward}
"""


def test_a_factory_returning_a_dict_or_no_backward_is_a_result(tmp_path):
    (tmp_path / "sweep.toml").write_text(SWEEP)
    (tmp_path / "factories.py").write_text(FACTORIES)
    rows = {}
    for name in ("as_dict", "nothing"):
        r = symjac("sweep", "sweep.toml", "--impl", f"factories.py:{name}", "--out", f"{name}.jsonl", "-q", cwd=tmp_path)
        assert "Traceback" not in r.stderr, r.stderr
        rows[name] = (r.returncode, json.loads((tmp_path / f"{name}.jsonl").read_text()))
    assert rows["as_dict"][0] == 0 and rows["as_dict"][1]["status"] == "pass"
    code, row = rows["nothing"]
    assert code == 1 and row["status"] == "error" and "no callable 'backward'" in row["reason"]


def test_a_rejected_dtype_is_an_unsupported_row_and_exits_4(tmp_path):
    # issue 33 item 10: a factory whose backward raises in float64 and returns in float32 was a
    # "fail" row and exit 1; now an "unsupported" row (returns_in float32), a hint, and exit 4
    (tmp_path / "sweep.toml").write_text(SWEEP)
    (tmp_path / "factories.py").write_text(FACTORIES)

    def sweep(*args):
        return symjac("sweep", "sweep.toml", "--impl", "factories.py:float32_only", "--out", "rows.jsonl", "-q", *args,
                      cwd=tmp_path)

    r = sweep()
    row = json.loads((tmp_path / "rows.jsonl").read_text())
    assert r.returncode == 4 and row["status"] == "unsupported" and row["returns_in"] == ["float32"], r.stdout
    lines = r.stdout.splitlines()
    assert lines[-2].startswith("0 pass 0 fail 1 unsupported 0 error 0 skipped of 1 configurations"), r.stdout
    assert lines[-1] == "hint: the implementation returns float32: try --dtype float32"
    r = sweep("--dtype", "float32")
    assert r.returncode == 0 and json.loads((tmp_path / "rows.jsonl").read_text())["status"] == "pass", r.stdout
