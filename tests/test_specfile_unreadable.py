"""Spec paths that name no readable spec file: a symbolic link loop, a broken link, a directory
where a file is expected, a file where a directory is, permission denied, non-UTF-8 bytes. Each
is exit 2 with one line naming the path and what would be valid (never a traceback), from the
command line and from ``symjac.load_spec_file``; a glob or a directory holding such a link names
it rather than leaving that spec out in silence."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import cli_runner
import symjac
from cli_checks import one_line_error

ROOT = Path(__file__).resolve().parent.parent
SPEC = (ROOT / "specs" / "seeds" / "maxpool_ties.toml").read_text()
VALID = "give the path of a spec file (a TOML file) or of a link to one"


def golden(*paths, cwd):
    return cli_runner.symjac("golden", *paths, "--out", "out", cwd=cwd)


@pytest.fixture
def tree(tmp_path):
    """good.toml, loop_a.toml <-> loop_b.toml, broken.toml -> gone.toml, a folder specs/ with
    good.toml and a link into the loop, and a regular file plain.txt."""
    (tmp_path / "good.toml").write_text(SPEC)
    (tmp_path / "loop_a.toml").symlink_to("loop_b.toml")
    (tmp_path / "loop_b.toml").symlink_to("loop_a.toml")
    (tmp_path / "broken.toml").symlink_to("gone.toml")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "good.toml").write_text(SPEC)
    (tmp_path / "specs" / "z_loop.toml").symlink_to("../loop_a.toml")
    (tmp_path / "plain.txt").write_text("not a folder")
    return tmp_path


def test_a_symlink_loop_names_the_loop(tree):
    r = golden("loop_a.toml", cwd=tree)
    line = one_line_error(r, "loop_a.toml: a symbolic link loop (loop_a.toml -> loop_b.toml -> loop_a.toml)", VALID)
    with pytest.raises(symjac.SpecError, match="a symbolic link loop"):
        symjac.load_spec_file(tree / "loop_a.toml")
    assert "Errno" not in line


@pytest.mark.parametrize("where", ["specs", "specs/*.toml", "specs/**/*.toml"])
def test_a_loop_inside_a_folder_or_a_glob_is_named_not_skipped(tree, where):
    # the folder's good.toml alone would run (exit 0) and its looping link be left out in silence
    r = golden(where, cwd=tree)
    one_line_error(r, "specs/z_loop.toml: a symbolic link loop", VALID)


def test_a_broken_symlink_names_its_target(tree):
    r = golden("broken.toml", cwd=tree)
    one_line_error(r, "broken.toml: a symbolic link to gone.toml, which does not exist", VALID)
    r = golden("*.toml", cwd=tree)  # among good.toml and the loop: the first one unreadable, sorted
    one_line_error(r, "broken.toml: a symbolic link to gone.toml", VALID)


def test_a_directory_where_a_file_is_expected(tree):
    # census reads one spec file (no folder expansion): a folder there is named as such
    r = cli_runner.symjac("census", "specs", cwd=tree)
    one_line_error(r, "specs: a directory, not a spec file", VALID)
    with pytest.raises(symjac.SpecError, match="a directory, not a spec file"):
        symjac.load_spec_file(tree / "specs")


def test_a_file_where_a_directory_is_expected(tree):
    r = golden("plain.txt/case.toml", cwd=tree)
    one_line_error(r, "plain.txt/case.toml: a part of the path before its last is a file, not a directory", VALID)


def test_permission_denied(tree, monkeypatch):
    # root reads any file: the reader's error is raised where the file is read, as the OS would
    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(symjac.SpecError, match=re.escape("good.toml: permission denied reading the spec file; " + VALID)):
        symjac.load_spec_file(tree / "good.toml")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may read any file")
def test_permission_denied_from_the_command_line(tree):
    (tree / "good.toml").chmod(0)
    try:
        one_line_error(golden("good.toml", cwd=tree), "good.toml: permission denied reading the spec file", VALID)
    finally:
        (tree / "good.toml").chmod(0o644)


def test_non_utf8_bytes(tree):
    (tree / "latin.toml").write_bytes(SPEC.replace('"max"', '"m\xe4x"').encode("latin-1"))
    one_line_error(golden("latin.toml", cwd=tree), "latin.toml: not UTF-8 text", "TOML files are UTF-8")
