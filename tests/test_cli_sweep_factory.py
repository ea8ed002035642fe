"""``symjac sweep``: whatever the factory returns is a result of the sweep, never its crash: a dict
with ``backward`` (as ``verify`` takes one) is verified, an object without ``backward`` is an
``error`` row naming what is missing."""

import json
import subprocess
import sys
from pathlib import Path

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
"""


def test_a_factory_returning_a_dict_or_no_backward_is_a_result(tmp_path):
    (tmp_path / "sweep.toml").write_text(SWEEP)
    (tmp_path / "factories.py").write_text(FACTORIES)
    rows = {}
    for name in ("as_dict", "nothing"):
        r = subprocess.run([sys.executable, "-m", "symjac", "sweep", "sweep.toml", "--impl", f"factories.py:{name}",
                            "--out", f"{name}.jsonl", "-q"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert "Traceback" not in r.stderr, r.stderr
        rows[name] = (r.returncode, json.loads((tmp_path / f"{name}.jsonl").read_text()))
    assert rows["as_dict"][0] == 0 and rows["as_dict"][1]["status"] == "pass"
    code, row = rows["nothing"]
    assert code == 1 and row["status"] == "error" and "no callable 'backward'" in row["reason"]
