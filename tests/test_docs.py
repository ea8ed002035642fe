"""Execute every code block of docs/*.md and README.md.

One test per fenced block, id ``<file>:<line>:<lang>``. The blocks of one Markdown
file run in document order, in one subprocess (``python tests/test_docs.py --run``),
inside a scratch directory holding copies of the repository's ``specs/`` and
``examples/`` and ``contrib/`` (relative paths in the docs work as from the repository root, and
nothing a block writes lands in the checkout). Documents run in parallel.

Fence info strings: the language, then optional tags.

- ``python``: executed with ``exec`` in one namespace per file. A line
  ``expr  # -> text`` asserts that ``str(expr)`` equals ``text`` (whitespace
  collapsed).
- ``console`` / ``bash``: each line starting with ``$ `` runs in a shell; the lines
  after it, up to the next ``$ ``, are its expected output (stdout and stderr
  merged; ``...`` inside a line matches any text, a line ``...`` any number of
  lines). A trailing ``# exit N`` on the command line sets the expected exit code
  (default 0).
- ``toml``: parsed with tomllib. A spec file (``[operator]`` or ``[[case]]``) is
  loaded with ``symjac.load_spec_file`` and its ``[expect]`` tables are checked
  against the exact values; tag ``sweep`` loads it with ``symjac.io._sweep.load_grid``
  instead. A comment ``# error: TEXT`` means loading must raise ``SpecError``
  with TEXT in its message.
- ``c``: compiled with ``gcc -std=c99 -Wall -Wextra -pedantic -Werror -I contrib``
  (skipped without gcc). Tag ``golden-reader``: the program is also run on every array of
  real ``symjac golden --format bin`` output and must print exactly its values.
- ``file=NAME`` (any language): the block is also written to NAME in the scratch
  directory (``python`` file blocks are compiled, not executed).
- ``norun``: not executed (reported as skipped, e.g. ``pip install``).
- ``torch``, ``gcc``, ``requires=NAME[,NAME]``: skipped unless each NAME is an
  importable module or an executable on PATH.

Blocks in other languages (``text``, ``json``, ``dot``) are output shown to the
reader; ``json`` blocks must parse.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import cli_runner

# Every block runs: each is an example a reader copies (no fast sample, tests/conftest.py).
pytestmark = pytest.mark.every_case

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
EXECUTED = {"python", "console", "bash", "sh", "shell", "toml", "c", "json"}
SHOWN = {"text", "dot"}
COMMAND_TIMEOUT = 180

# A README block containing a README_XFAIL key that fails is an expected failure; one
# containing a README_SKIP key is not run at all.
README_XFAIL: dict[str, str] = {}
README_SKIP = {
    "pip install -e .": "installs packages into the environment and runs the whole test suite (which includes this file)",
}


# --------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    index: int
    line: int  # 1-based line of the opening fence
    lang: str
    tags: frozenset[str]
    attrs: tuple[tuple[str, str], ...]
    text: str

    @property
    def id(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}:{self.lang}"

    def attr(self, name: str) -> str | None:
        return dict(self.attrs).get(name)


FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>[^`]*)$")


def parse_blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip().split()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].startswith(fence) and lines[i].strip() == fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: unclosed code fence")
        i += 1
        lang = info[0] if info else ""
        tags = frozenset(t for t in info[1:] if "=" not in t)
        attrs = tuple(tuple(t.split("=", 1)) for t in info[1:] if "=" in t)
        blocks.append(Block(path, len(blocks), start + 1, lang, tags, attrs, "\n".join(body) + "\n"))  # type: ignore[arg-type]
    return blocks


# ----------------------------------------------------------------------- the runner


class Skip(Exception):
    """A block that cannot run here (no torch, no gcc, norun)."""


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _docs_check(value: Any, expected: str, where: str) -> None:
    got = _collapse(str(value))
    if got != _collapse(expected):
        raise AssertionError(f"{where}: the docs say {expected!r}, the code gives {got!r}")


ARROW = re.compile(r"^(?P<indent>\s*)(?P<code>\S.*?)\s+#\s*->\s*(?P<expected>.+?)\s*$")


def transform_arrows(source: str, label: str) -> str:
    """Turn ``expr  # -> text`` lines into checks; leave everything else alone."""
    out = []
    for n, line in enumerate(source.splitlines(), 1):
        m = ARROW.match(line)
        if m:
            try:
                ast.parse(m.group("code"), mode="eval")
            except SyntaxError:
                m = None
        if m:
            where = f"{label}, line {n} ({m.group('code')})"
            line = f"{m.group('indent')}__docs_check__(({m.group('code')}), {m.group('expected')!r}, {where!r})"
        out.append(line)
    return "\n".join(out) + "\n"


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.rstrip().split("...")) + r"[ \t]*\n")
    return re.compile(r"\A" + "".join(parts) + r"\Z")


EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")


def parse_console(text: str) -> list[tuple[str, int, list[str]]]:
    """[(command, expected exit code, expected output lines)]."""
    commands: list[tuple[str, int, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            cmd = line[2:].strip()
            m = EXIT.search(cmd)
            commands.append((cmd, int(m.group(1)) if m else 0, []))
        elif commands:
            commands[-1][2].append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise ValueError(f"output line {line!r} before the first `$ ` command")
    for _, _, out in commands:
        while out and not out[-1].strip():
            out.pop()
    return commands


def _env() -> dict[str, str]:
    # as a user's shell runs them: not as an xdist worker (a block that runs pytest would read
    # PYTEST_XDIST_WORKER and think itself one: pytest-benchmark, where installed, then warns)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    return env


def check_requirements(block: Block) -> None:
    """Tags ``torch`` / ``gcc`` and ``requires=a,b``: modules or executables; Skip if one is missing."""
    needed = [t for t in ("torch", "gcc") if t in block.tags] + [r for r in (block.attr("requires") or "").split(",") if r]
    for name in needed:
        if shutil.which(name) is None and importlib.util.find_spec(name) is None:
            raise Skip(f"{name} is not installed")


#: what makes a command line need a shell: pipes, redirections, lists, substitutions, globs, variables
_SHELL = re.compile(r"[|&;<>`$*?(){}\[\]~\\]")


def symjac_argv(cmd: str) -> list[str] | None:
    """The arguments of a plain ``symjac ARGS`` line (quotes and a trailing comment allowed), which the
    runner calls in its own process (tests/cli_runner.py: no second or so of imports per line); None
    for any line that needs a shell, which runs in one."""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    if not words or words[0] != "symjac" or _SHELL.search(re.sub(r"\s+#[^\"']*$", "", cmd)):
        return None
    return words[1:]


def run_console(block: Block, workdir: Path) -> str:
    commands = parse_console(block.text)
    if not commands:
        raise AssertionError("the block has no `$ ` command line (tag it norun if it is not meant to run)")
    for cmd, code, expected in commands:
        argv = symjac_argv(cmd)
        if argv is not None:
            proc = cli_runner.symjac(*argv, cwd=workdir, merged=True)
        else:
            proc = subprocess.run(cmd, shell=True, cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT)
        out = "".join(line.rstrip() + "\n" for line in proc.stdout.splitlines())
        if proc.returncode != code:
            raise AssertionError(f"$ {cmd}\nexit code {proc.returncode}, the docs say {code}; output:\n{out}")
        if expected and not output_pattern(expected).match(out):
            raise AssertionError(f"$ {cmd}\noutput differs from the docs.\n--- docs:\n" + "\n".join(expected)
                                 + f"\n--- actual:\n{out}")
    return f"{len(commands)} command(s)"


def run_toml(block: Block, workdir: Path) -> str:
    import tomllib

    data = tomllib.loads(block.text)
    m = re.search(r"^#\s*error:\s*(.+?)\s*$", block.text, re.M)
    is_spec = "operator" in data or "case" in data
    if not is_spec and "sweep" not in block.tags:
        return "parsed"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "block.toml"
        path.write_text(block.text, encoding="utf-8")
        import symjac

        try:
            if "sweep" in block.tags:
                from symjac.io._sweep import load_grid

                grid = load_grid(path)
                result = f"sweep file: {len(grid)} configurations"
            else:
                from symjac.io._specfile import load

                spec = load(path)
                problems = []
                try:
                    from symjac.io.golden._write import check_expect
                except ImportError:  # pragma: no cover - older symjac
                    check_expect = None
                for case in spec.cases:
                    if case.expect and check_expect is not None:
                        problems += [f"{case.name}: {p}" for p in check_expect(case)]
                if problems:
                    raise AssertionError("[expect] disagrees with the exact values:\n" + "\n".join(problems))
                result = f"spec file: {len(spec.cases)} case(s), [expect] checked"
        except symjac.SpecError as exc:
            if m and m.group(1) in str(exc):
                return f"raised SpecError as documented: {exc}"
            raise
    if m:
        raise AssertionError(f"loading should raise SpecError containing {m.group(1)!r}, but it loaded")
    return result


# Seed 000 and 001, thirds (not dyadic: a reader printing too few digits fails), and losses (irrational values).
GOLDEN_SPECS = ("specs/seeds/nntrainer_avgpool_same_2x2.toml", "specs/seeds/maxpool_ties.toml",
                "specs/conventions/torch_ceil_include_pad.toml", "specs/seeds/loss_scale_family.toml")
C_TYPES = {"<f8": "f8", "<f4": "f4", "<f2": "f2", "<i8": "i8"}


def run_c(block: Block, workdir: Path) -> str:
    from native_kernels import run_compiler  # tests/: this file's folder, on sys.path as a script too

    gcc = shutil.which("gcc")
    if gcc is None:
        raise Skip("gcc is not installed")
    name = block.attr("file") or f"block{block.index}.c"
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / name
        src.write_text(block.text, encoding="utf-8")
        exe = tmp_path / Path(name).stem
        proc = run_compiler([gcc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", str(ROOT / "contrib"),
                             "-o", str(exe), str(src)], check=False)
        if proc.returncode:
            raise AssertionError(f"gcc failed:\n{proc.stderr}")
        if "golden-reader" not in block.tags:
            return "compiled"
        return f"compiled; printed exactly the values of {check_golden_reader(exe, tmp_path / 'golden')} golden arrays"


def check_golden_reader(exe: Path, out: Path) -> int:
    """Run ``exe FILE COUNT TYPE`` on every array of real golden output; it must print the stored values."""
    import numpy as np

    for spec in GOLDEN_SPECS:
        subprocess.run([sys.executable, "-m", "symjac", "golden", str(ROOT / spec), "--out", str(out),
                        "--format", "json,bin", "--dtype", "float16,float32,float64"], check=True, capture_output=True,
                       env=_env())
    checked = 0
    for index in sorted(out.glob("*/index.json")):
        exact = json.loads(index.parent.with_suffix(".json").read_text())["arrays"]
        for array, entry in json.loads(index.read_text())["arrays"].items():
            run = subprocess.run([str(exe), str(index.parent / entry["file"]), str(entry["count"]),
                                  C_TYPES[entry["dtype"]]], capture_output=True, text=True)
            if run.returncode:
                raise AssertionError(f"{exe.name} {entry['file']} failed ({run.returncode}): {run.stderr}")
            stored = np.fromfile(index.parent / entry["file"], dtype=entry["dtype"])
            # Parse in the array's own type: "%.9g" round-trips a float32, not the double of it.
            printed = np.array(run.stdout.split(), dtype=stored.dtype.newbyteorder("="))
            if printed.shape != stored.shape or not np.array_equal(printed, stored):
                raise AssertionError(f"{entry['file']}: C printed {printed.tolist()}, the file holds {stored.tolist()}")
            base, _, dtype = array.partition(".")
            if dtype in ("", "float16", "float32", "float64"):  # the JSON file: exact ints, and each dtype's values
                reference = exact[base]["values" if not dtype else dtype]
                reference = reference if isinstance(reference, list) else [reference]  # a scalar loss value
                if printed.astype(np.float64 if dtype else np.int64).tolist() != reference:
                    raise AssertionError(f"{entry['file']}: C printed {printed.tolist()}, the JSON golden says {reference}")
            checked += 1
    if checked < 40:
        raise AssertionError(f"only {checked} golden arrays were checked")
    return checked


def run_document(path: Path, workdir: Path) -> dict[int, dict[str, str]]:
    """Run every block of ``path`` in order; {block index: {"status", "message"}}."""
    os.chdir(workdir)
    sys.path.insert(0, str(workdir))
    namespace: dict[str, Any] = {"__name__": "__docs__", "__docs_check__": _docs_check}
    results: dict[int, dict[str, str]] = {}
    for block in parse_blocks(path):
        label = block.id
        try:
            if block.attr("file"):
                (workdir / block.attr("file")).write_text(block.text, encoding="utf-8")  # type: ignore[operator]
            if "norun" in block.tags:
                raise Skip("tagged norun")
            if path.name == README.name:
                for needle, reason in README_SKIP.items():
                    if needle in block.text:
                        raise Skip(reason)
            check_requirements(block)
            if block.lang == "python":
                if block.attr("file"):
                    compile(block.text, block.attr("file"), "exec")  # type: ignore[arg-type]
                    message = f"wrote {block.attr('file')}"
                else:
                    exec(compile(transform_arrows(block.text, label), label, "exec"), namespace)
                    message = "ran"
            elif block.lang in ("console", "bash", "sh", "shell"):
                message = run_console(block, workdir)
            elif block.lang == "toml":
                message = run_toml(block, workdir)
            elif block.lang == "c":
                message = run_c(block, workdir)
            elif block.lang == "json":
                json.loads(block.text)
                message = "parsed"
            else:
                continue
            results[block.index] = {"status": "passed", "message": message}
        except Skip as exc:
            results[block.index] = {"status": "skipped", "message": str(exc)}
        except BaseException:  # noqa: BLE001 - every failure is the block's result
            results[block.index] = {"status": "failed", "message": traceback.format_exc(limit=-6)}
    return results


# --------------------------------------------------------------------- pytest side


def _scratch(base: Path) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    for name in ("specs", "examples", "contrib"):
        shutil.copytree(ROOT / name, base / name, ignore=shutil.ignore_patterns("__pycache__"))
    return base


def _run_in_subprocess(path: Path, workdir: Path) -> dict[int, dict[str, str]]:
    out = workdir / "_results.json"
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run", str(path), "--workdir", str(workdir),
                           "--out", str(out)], capture_output=True, text=True, env=_env(), timeout=600)
    if not out.exists():
        raise RuntimeError(f"the docs runner crashed on {path.name} ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


class _Documents:
    def __init__(self, base: Path):
        self.base = base
        self.pool = ThreadPoolExecutor(max_workers=3)
        self.futures: dict[Path, Future[dict[int, dict[str, str]]]] = {}

    def start_all(self, paths: list[Path]) -> None:
        for path in paths:
            if path not in self.futures:
                workdir = _scratch(self.base / path.stem)
                self.futures[path] = self.pool.submit(_run_in_subprocess, path, workdir)

    def result(self, path: Path) -> dict[int, dict[str, str]]:
        self.start_all([path])
        return self.futures[path].result()


#: Documents of dozens of command lines each (a process start per ``$`` line: minutes in all on
#: 2 busy cores): their blocks are slow tests, run by .ci/run's full suite (``--run-slow``). What
#: they show keeps its default coverage in the commands' own tests (test_cli, test_native_process,
#: test_golden*, test_plugin); the default run executes every other document.
SLOW_DOCS = {"cli.md", "native.md", "golden-data.md", "pytest.md"}


@pytest.fixture(scope="session")
def documents(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    docs = _Documents(tmp_path_factory.mktemp("docs"))
    slow = request.config.getoption("--run-slow")
    docs.start_all([p for p in [*DOCS, README] if slow or p.name not in SLOW_DOCS])
    yield docs
    docs.pool.shutdown(wait=True)


def _executable(path: Path) -> list[Block]:
    return [b for b in parse_blocks(path) if b.lang in EXECUTED]


ALL_BLOCKS = [b for path in [*DOCS, README] for b in _executable(path)]


@pytest.mark.parametrize("block", [pytest.param(b, marks=[pytest.mark.slow] if b.path.name in SLOW_DOCS else [])
                                   for b in ALL_BLOCKS], ids=[b.id for b in ALL_BLOCKS])
def test_block(block: Block, documents: _Documents) -> None:
    result = documents.result(block.path).get(block.index)
    assert result is not None, f"{block.id} was not run"
    if block.path == README and result["status"] == "failed":
        for needle, reason in README_XFAIL.items():
            if needle in block.text:
                pytest.xfail(f"{reason}\n{result['message']}")
    if result["status"] == "skipped":
        pytest.skip(result["message"])
    if result["status"] == "failed":
        pytest.fail(result["message"], pytrace=False)


def test_docs_exist() -> None:
    names = {p.name for p in DOCS}
    for name in ("quickstart.md", "spec-files.md", "cli.md", "pytest.md", "golden-data.md",
                 "case-seed000-avgpool-same.md", "case-seed003-loss-scale.md", "case-seed001-maxpool-ties.md"):
        assert name in names, f"docs/{name} is missing"


@pytest.mark.parametrize("path", [*DOCS, README], ids=[str(p.relative_to(ROOT)) for p in [*DOCS, README]])
def test_every_block_has_a_known_language(path: Path) -> None:
    """A typo in a fence ("pyhton") must not silently exempt a block from testing."""
    unknown = [f"line {b.line}: {b.lang or '(none)'}" for b in parse_blocks(path) if b.lang not in EXECUTED | SHOWN]
    assert not unknown, f"{path.name}: blocks in languages the docs test does not know: {unknown}"


def test_arrow_and_output_helpers() -> None:
    ns: dict[str, Any] = {"__docs_check__": _docs_check}
    exec(transform_arrows("x = [1, 2]\nsum(x)  # -> 3\nx[0], x[1]  # -> (1, 2)\n", "t"), ns)
    with pytest.raises(AssertionError):
        exec(transform_arrows("sum([1, 2])  # -> 4\n", "t"), ns)
    assert output_pattern(["a ... c", "...", "z"]).match("a b c\nq\nr\nz\n")
    assert not output_pattern(["a", "z"]).match("a\nq\nz\n")
    assert parse_console("$ false  # exit 1\nout\n") == [("false  # exit 1", 1, ["out"])]


def test_only_plain_symjac_lines_run_in_process() -> None:
    assert symjac_argv('symjac golden "a b.toml" --out g  # exit 1 (a defect)') == ["golden", "a b.toml", "--out", "g"]
    for shell in ("symjac conform tensorflow -q 2>/dev/null", 'symjac x "a#b" | tail -1', "TF=1 symjac x",
                  "python -m symjac x", 'symjac probes --impl "examples/*.py"', "symjac x && ls"):
        assert symjac_argv(shell) is None, shell


# ------------------------------------------------------------------------ __main__


def main() -> None:
    parser = argparse.ArgumentParser(description="run the code blocks of one Markdown file (used by test_docs.py)")
    parser.add_argument("--run", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results = run_document(Path(args.run).resolve(), Path(args.workdir).resolve())
    Path(args.out).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
