"""What the command-line tests check of a refused run: exit 2 and one line on stderr."""


def one_line_error(r, *words):
    """``r`` (a finished ``subprocess.run``) exited 2 with exactly one stderr line, no
    traceback, holding each of ``words``; returns that line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]
