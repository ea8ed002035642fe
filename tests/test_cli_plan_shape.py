"""``explain`` and ``graph`` on a pooling case without ``[input]`` (issue 24): they pick the coverage
plan's shape with the most window classes, as ``verify`` runs the plan, instead of refusing."""

from __future__ import annotations

from symjac.cli._main import main

SPEC = """[operator]
kind = "pool"
mode = "avg"
kernel = [3, 3]
stride = 2
padding = 1
"""


def test_explain_picks_the_plan_shape_with_the_most_window_classes(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(SPEC)
    assert main(["explain", str(tmp_path / "c.toml")]) == 0
    out = capsys.readouterr().out
    # Per axis, k=3, s=2, padding 1: at L = 9 the windows start at -1, 1, 3, 5, 7: a low edge (2 cells), interior
    # windows (3 cells) and a high edge (cells 7, 8: 2 cells), 3 classes; at L = 10 the last window holds 7, 8, 9
    # (3 cells): 2 classes. So the 2-D plan's richest shape is 9 x 9 with 3 * 3 = 9 classes.
    assert "input (1, 1, 9, 9) (no [input]:" in out
    assert "9 window classes" in out


def test_graph_draws_the_plan_shape(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(SPEC)
    out_file = tmp_path / "c.dot"
    assert main(["graph", str(tmp_path / "c.toml"), "--out", str(out_file)]) == 0
    assert "no [input]: input (1, 1, 9, 9)" in capsys.readouterr().out
    dot = out_file.read_text()
    assert dot.startswith("digraph") and '"x[0,0,8,8]"' in dot and '"x[0,0,9,' not in dot  # 9 x 9 cells


def test_a_case_with_an_input_keeps_it(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(SPEC + "[input]\nshape = [1, 1, 4, 4]\n")
    assert main(["explain", str(tmp_path / "c.toml")]) == 0
    out = capsys.readouterr().out
    assert "input (1, 1, 4, 4) -> output" in out and "no [input]" not in out
