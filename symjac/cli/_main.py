"""The ``symjac`` command line: verify, golden, explain, graph, sweep, census, conform.

Exit codes: 0 verified (or the command did its job), 1 a verification finding,
2 a usage or spec error (one line on stderr, no traceback), 130 interrupted by Ctrl-C (one line
saying what was done and written and what was not: :mod:`symjac.cli._interrupt`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from symjac._errors import UsageError
from symjac._progress import Progress
from symjac.check._call import DEFAULT_TIMEOUT
from symjac.cli._select import add_quiet_argument, add_spec_arguments as add_spec_arguments
from symjac.cli import _census
from symjac.cli import _conform
from symjac.cli import _interrupt
from symjac.cli import _offline
from symjac.run._load import impl_candidates, load_impl

EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2
#: every case that did not pass is UNSUPPORTED: the implementation rejects the dtype (docs/cli.md)
EXIT_UNSUPPORTED = 4
DTYPES = ("float16", "bfloat16", "float32", "float64")  # bfloat16 needs symjac[bfloat16] (ml_dtypes)
DEFAULT_DTYPE = "float64"


def _callables(impl: Any, case: Any, target: str) -> dict[str, Any]:
    """:func:`case_callables`, its error said in the command line's words."""
    from symjac._errors import InputError
    from symjac.io._case import case_callables

    try:
        return case_callables(impl, case)
    except InputError as exc:
        found = impl_candidates(impl, ("derivative" if case.is_loss else "backward",))
        example = f" (e.g. --impl {target}:{found[0]})" if found else ""
        raise UsageError(f"--impl {target!r}: {exc}{example}") from None


def _selected(args: argparse.Namespace) -> list[Any]:
    from symjac.cli._select import select_cases

    return select_cases(args.spec, args.case or (), args.keyword)


def cmd_verify(args: argparse.Namespace) -> int:
    """Each selected case runs against the implementation (or its attribute named
    after the case) and is reported on its own line; a case whose kind the
    implementation does not provide (a loss case for a pooling implementation) is
    skipped with a line saying so, unless that leaves nothing to verify."""
    if args.timeout < 0:
        raise UsageError(f"--timeout {args.timeout:g}: give seconds > 0, or 0 for no limit")
    native = native_target(args)
    cases = _selected(args)
    kernel = None if native is None else native.factory()  # one program or library serves every case;
    # one that cannot run (BadCommand) or load (LibraryError) is a usage error, exit 2, before any case runs
    try:
        reports, skipped, errors = _verify_cases(args, cases, kernel)
    finally:
        if kernel is not None:
            kernel.close()  # the kernel, and whatever it started, ends here
    verdicts = [r.verdict for _, r in reports]
    unsupported = [r for _, r in reports if r.verdict == "UNSUPPORTED"]
    code = (EXIT_FINDING if "FAIL" in verdicts else EXIT_USAGE if errors else EXIT_UNSUPPORTED if unsupported
            else EXIT_OK)
    outcomes = sorted([*reports, *errors], key=lambda pair: cases.index(pair[0]))  # the files' order
    if args.json:
        out = [{"case": c.name, "file": c.source.split("#")[0],
                **({"ok": False, "error": str(r), "summary": f"not verified: {r}"} if isinstance(r, Exception) else r.to_dict())}
               for c, r in outcomes]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return code
    for case, report in outcomes:
        if isinstance(report, Exception):
            print(f"ERROR {case.name}: not verified: {report}")
            continue
        summary = report.summary()
        named = summary.startswith((f"{case.name}: ", f"{case.name} in "))  # a loss headline starts with its kind
        print(f"{report.verdict} {summary if named else f'{case.name}: {summary}'}")
        if not report.ok and args.verbose:
            print(report.details())
    for case, reason in skipped:
        print(f"SKIP {case.name}: {str(reason).split(': ', 1)[-1]}")
    if len(cases) > 1:
        print(f"{len(cases)} cases in {args.dtype}: {verdicts.count('PASS')} passed, {verdicts.count('FAIL')} failed, "
              + (f"{len(unsupported)} unsupported, " if unsupported else "")
              + (f"{len(errors)} not verified (ERROR), " if errors else "") + f"{len(skipped)} skipped")
    if unsupported:
        print(_dtype_hint(args.dtype, [d for r in unsupported for d in r.returns_in]))
    return code


def native_target(args: argparse.Namespace) -> Any:
    """The ``--exec`` / ``--lib`` kernel as a :class:`NativeTarget`, or None for ``--impl``; exactly
    one of the three (a :class:`UsageError` naming them otherwise)."""
    given = [name for name in ("impl", "exec", "lib") if getattr(args, name, None) is not None]
    if len(given) != 1:
        raise UsageError("give one of --impl MODULE_OR_PATH[:ATTR], --exec CMD (a kernel program) or --lib PATH "
                         "(a shared library exporting symjac_call)" + (f"; got {' and '.join('--' + g for g in given)}"
                                                                       if given else ""))
    if given[0] == "impl":
        return None
    from symjac.frameworks.native._targets import NativeTarget

    return NativeTarget(given[0], getattr(args, given[0]), getattr(args, "timeout", DEFAULT_TIMEOUT) or None)


def _dtype_hint(dtype: str, found: list[str]) -> str:
    """The hint after UNSUPPORTED results: the dtypes the implementation was found to return in
    (:attr:`symjac.Report.returns_in`), when known."""
    returns_in = sorted(set(found))
    if not returns_in:  # it returned in no other dtype: only NotImplementedError in every dtype is UNSUPPORTED so
        return (f"hint: the implementation raises NotImplementedError in {dtype} and every other float dtype: "
                "no --dtype will do; it is not written")
    return (f"hint: the implementation returns {' and '.join(returns_in)}: "
            + " or ".join(f"try --dtype {d}" for d in returns_in))


def _verify_cases(args: argparse.Namespace, cases: list[Any],
                  kernel: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """Each runnable case's report, the cases skipped (with why) and those symjac could not verify (a
    spec or an input it refuses, with the error; the other cases still run); ``kernel``: the ``--exec``
    or ``--lib`` kernel's factory (:meth:`NativeTarget.factory`)."""
    from symjac._errors import InputError, SpecError
    from symjac.io._case import verify_case

    impl = load_impl(args.impl) if kernel is None else None
    runnable, skipped = [], []
    for case in cases:
        case_impl = impl if kernel is None else kernel(case.operator)
        try:
            _callables(case_impl, case, args.impl)
            runnable.append((case, case_impl))
        except UsageError as exc:
            skipped.append((case, exc))
    if not runnable:
        raise skipped[0][1]
    reports, errors = [], []
    ledger = _interrupt.LEDGER  # what a Ctrl-C reports
    ledger.begin(len(runnable), "case", "verified")
    with Progress("symjac verify", len(runnable), enabled=not args.quiet) as progress:  # after 2 s, on a terminal
        for case, case_impl in runnable:
            progress.step(case.name)
            ledger.step(case.name)
            try:
                reports.append((case, verify_case(case, case_impl, args.dtype, args.timeout or None,
                                                  args.deterministic, large=args.large)))
            except (SpecError, InputError) as exc:  # this case only: no plan, an input refused
                if len(runnable) == 1:
                    raise
                errors.append((case, exc))
                ledger.finish("not verified")
                continue
            ledger.finish({"PASS": "passed", "FAIL": "failed", "UNSUPPORTED": "unsupported"}[reports[-1][1].verdict])
    return reports, skipped, errors


def _comma_list(option: str, value: str, valid: tuple[str, ...]) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    for item in items:
        if item not in valid:
            near = difflib.get_close_matches(item, valid, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise UsageError(f"{option} {item!r} is not valid{hint}: give a comma-separated subset of {','.join(valid)}")
    if not items:
        raise UsageError(f"{option}: give a comma-separated subset of {','.join(valid)}")
    return items


def cmd_golden(args: argparse.Namespace) -> int:
    from symjac.io.golden._write import FORMATS, write_golden

    formats = _comma_list("--format", args.format, FORMATS)
    dtypes = _comma_list("--dtype", args.dtype, DTYPES)
    with warnings.catch_warnings(record=True) as notes:  # cases a format cannot express: one line each
        warnings.simplefilter("always")
        cases = _selected(args)
        if args.cover:
            from symjac.io.golden._cover import cover_cases

            cases = cover_cases(cases)
        ledger = _interrupt.LEDGER  # what a Ctrl-C reports: the files written whole, the cases not
        ledger.begin(len(cases), "case", "written")

        def on_case(name: str) -> None:
            progress.step(name)
            ledger.step(name)

        with Progress("symjac golden", len(cases), enabled=not args.quiet) as progress:  # after 2 s, on a terminal
            paths = write_golden(cases, Path(args.out), formats, dtypes, divisors=args.divisors, on_case=on_case,
                                 on_written=ledger.wrote)
        for path in paths:
            print(path)
    for note in notes:
        print(f"note: {note.message}", file=sys.stderr)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from symjac.io._explain import explain

    cases = _selected(args)
    with Progress("symjac explain", len(cases), enabled=not args.quiet) as progress:  # after 2 s, on a terminal
        texts = [explain(case, latex=args.latex) for case in progress.each(cases)]
    print("\n\n".join(texts))
    return EXIT_OK


def _slice(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    parts = value.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--slice {value!r}: give two indices n,c (batch and channel), e.g. --slice 0,1")
    return int(parts[0]), int(parts[1])


def cmd_graph(args: argparse.Namespace) -> int:
    from symjac.io._picture import write_graph

    out = Path(args.out)
    if out.suffix not in (".dot", ".png", ".svg"):
        raise UsageError(f"--out {args.out!r}: give a .dot, .png or .svg file")
    selected = _selected(args)
    cases = [c for c in selected if not c.is_loss]
    if not cases:
        raise UsageError(f"{selected[0].source}: graph draws pooling windows; "
                         f"{'this case is a loss' if len(selected) == 1 else 'the selected cases are losses'}")
    case = cases[0]
    others = [c.name for c in cases[1:]]
    note = f" (first of {len(cases)} selected; pick another with --case: {', '.join(others)})" if others else ""
    print(f"case {case.name!r} from {case.source.split('#')[0]}{note}")
    impl = load_impl(args.impl) if args.impl else None
    fns = _callables(impl, case, args.impl) if impl is not None else None
    with Progress("symjac graph", 1, enabled=not args.quiet) as progress:  # after 2 s, on a terminal
        progress.step(case.name)
        messages, report = write_graph(case, out, fns, dtype=args.dtype, slice_nc=_slice(args.slice))
    for message in messages:
        print(message)
    verdict = "PASS" if report is None else report.verdict
    if verdict == "UNSUPPORTED":
        print(_dtype_hint(args.dtype, list(report.returns_in)))
    return {"PASS": EXIT_OK, "FAIL": EXIT_FINDING, "UNSUPPORTED": EXIT_UNSUPPORTED}[verdict]


def cmd_sweep(args: argparse.Namespace) -> int:
    from symjac.cli._sweep import run_sweep

    native = native_target(args)
    impl_target = args.impl if native is None else native
    if native is None:
        load_impl(impl_target)  # fail early, in this process, on a bad --impl
    else:
        native.factory().close()  # ... on a program that cannot run, a library that cannot load
    _interrupt.LEDGER.bar = not args.quiet  # the sweep's bar is on stderr's line until the end
    if args.out:
        _interrupt.LEDGER.pending.append(f"--out {args.out} (left as it was: results are written at the end)")
    results = run_sweep(args.sweep, impl_target, jobs=args.jobs, scheduler=args.scheduler,
                        out=Path(args.out) if args.out else None, dtype=args.dtype, progress=not args.quiet)
    statuses = {r["status"] for r in results}
    unsupported = [r for r in results if r["status"] == "unsupported"]
    if unsupported:
        print(_dtype_hint(args.dtype, [d for r in unsupported for d in r["returns_in"]]))
    return EXIT_FINDING if statuses & {"fail", "error"} else EXIT_UNSUPPORTED if unsupported else EXIT_OK


# ------------------------------------------------------------------ the parser

IMPL_HELP = ("the implementation: a .py path or an importable module, then :ATTR (e.g. mypool.py:fixed); "
             "pooling needs backward(x, dy), losses derivative(pred, label); forward is optional")
DTYPE_HELP = f"dtype of the arrays the implementation receives (default {DEFAULT_DTYPE})"


def _max_nnz_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-nnz", type=_positive_int, default=None, metavar="N",
                   help="the size budget of one pooling geometry (batch x windows x kernel slots, and batch x "
                        "input cells; default symjac.pool.MAX_NNZ = 2^26): a larger shape is refused")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is no positive integer (give e.g. 100000000)")
    return value


def native_arguments(p: argparse.ArgumentParser) -> None:
    """``--exec CMD`` and ``--lib PATH``: a native kernel instead of ``--impl`` (docs/native.md)."""
    p.add_argument("--exec", metavar="CMD", help="instead of --impl: a native kernel program speaking symjac's "
                   "protocol on stdin/stdout (contrib/symjac_driver.h; docs/native.md), started once")
    p.add_argument("--lib", metavar="PATH", help="instead of --impl: a shared library exporting symjac_call "
                   "(built from the same source with -shared -fPIC -DSYMJAC_SHARED; docs/native.md), its calls "
                   "run in a worker process: a crash is a finding")


def _verify_args(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    _max_nnz_arg(p)
    p.add_argument("--impl", metavar="MODULE_OR_PATH[:ATTR]", help=IMPL_HELP + " (or give --exec)")
    native_arguments(p)
    p.add_argument("--dtype", default=DEFAULT_DTYPE, choices=DTYPES, help=DTYPE_HELP)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"per call of the implementation (default {DEFAULT_TIMEOUT:g}; 0: no limit); "
                        "a call that takes longer is a timeout finding")
    p.add_argument("--deterministic", action="store_true",
                   help="the implementation promises bitwise reproducible results: equal calls that differ "
                        "bitwise are a nondeterministic finding (by default, a note when each is within the "
                        "rounding bound)")
    p.add_argument("--large", action="store_true", help="pooling cases without [input]: also verify the coverage "
                   "plan's index-width shapes (past 2^16 cells along each axis and per plane; docs/coverage.md)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON (a list for several cases)")
    p.add_argument("-v", "--verbose", action="store_true", help="after a FAIL line, print every finding")
    add_quiet_argument(p)


def _golden_args(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    _max_nnz_arg(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--format", default="json", metavar="FORMATS", help="comma-separated subset of json,npz,bin,onnx "
                   "(default json; onnx: ONNX backend-test directories, pooling cases ONNX can express)")
    p.add_argument("--dtype", default="float32,float64", metavar="DTYPES",
                   help="comma-separated float dtypes, for every format (default float32,float64)")
    p.add_argument("--divisors", action="store_true",
                   help="the operator object lists every output window's divisor (a pool's 'divisors')")
    p.add_argument("--cover", action="store_true", help="one case per coverage-plan shape and input family verify "
                   "runs, named CASE__SHAPE__FAMILY (pooling; a loss case is written as it is)")
    add_quiet_argument(p)


def _explain_args(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    _max_nnz_arg(p)
    p.add_argument("--latex", action="store_true", help="render the expressions as LaTeX")
    add_quiet_argument(p)


def _graph_args(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    _max_nnz_arg(p)
    p.add_argument("--impl", default=None, metavar="MODULE_OR_PATH[:ATTR]",
                   help="also verify this implementation and mark the windows it gets wrong; " + IMPL_HELP)
    p.add_argument("--out", required=True, metavar="FILE", help="a .dot (window graph), .png or .svg (picture) file")
    p.add_argument("--dtype", default=DEFAULT_DTYPE, choices=DTYPES, help=DTYPE_HELP)
    p.add_argument("--slice", default=None, metavar="N,C",
                   help="the (batch, channel) slice a picture shows for a batched input (default 0,0)")
    add_quiet_argument(p)


def _sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", metavar="SWEEP", help="a sweep file: a TOML grid of configurations")
    p.add_argument("--impl", metavar="MODULE_OR_PATH:FACTORY",
                   help="a factory called with each configuration's spec, returning the implementation "
                        "(or give --exec or --lib)")
    native_arguments(p)
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="address of a Dask distributed scheduler (pip install 'symjac[dask]')")
    p.add_argument("--out", default=None, metavar="FILE.jsonl", help="JSON-lines results file (default: table only)")
    p.add_argument("--dtype", default=DEFAULT_DTYPE, choices=DTYPES, help=DTYPE_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


@dataclasses.dataclass(frozen=True)
class Command:
    """One subcommand: its arguments, its handler, and what ``--help`` shows.

    Another module adds a subcommand by appending a ``Command`` to :data:`COMMANDS`
    (keep its module import light: heavy imports belong in ``run``).
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    examples: tuple[str, ...] = ()
    docs: str = "docs/cli.md"


SEED000 = "specs/seeds/nntrainer_avgpool_same_2x2.toml"
COMMANDS: list[Command] = [
    Command("verify", "verify an implementation against spec files", _verify_args, cmd_verify, (
        f"symjac verify {SEED000} --impl examples/nntrainer_pool.py:fixed",
        "symjac verify specs/ 'specs/seeds/*.toml' --impl mypool.py:impl -k 'avg and not ties'",
        "symjac verify specs/seeds/loss_scale_family.toml --impl mylosses.py --case mse --dtype float32 -v",
    ), "docs/cli.md#symjac-verify"),
    Command("golden", "write exact expected values for other test suites (C/C++ too)", _golden_args, cmd_golden, (
        f"symjac golden {SEED000} --out golden --format json,npz,bin --dtype float16,float32,float64",
    ), "docs/golden-data.md"),
    Command("explain", "print the symbolic forward and Jacobian of each window class (or loss)", _explain_args,
            cmd_explain, (f"symjac explain {SEED000}", "symjac explain specs/seeds/loss_scale_family.toml --case mse --latex"),
            "docs/cli.md#symjac-explain"),
    Command("graph", "write the window graph (DOT) or a coverage picture (PNG/SVG)", _graph_args, cmd_graph, (
        f"symjac graph {SEED000} --impl examples/nntrainer_pool.py:buggy --out seed000.png",
        "symjac graph specs/seeds/maxpool_ties.toml --out ties.svg --slice 0,0",
    ), "docs/cli.md#symjac-graph"),
    Command("sweep", "verify an implementation over a grid of configurations", _sweep_args, cmd_sweep, (
        "symjac sweep examples/sweep_small.toml --impl examples/torch_pool.py:make -j 2 --out results.jsonl",
    ), "docs/cli.md#symjac-sweep"),
    Command("census", _census.HELP, _census.add_arguments, _census.run, _census.EXAMPLES, "docs/cli.md#symjac-census"),
    Command("conform", "verify a framework's pooling ops over a convention matrix", _conform.add_arguments,
            _conform.run, _conform.EXAMPLES, "docs/case-conform.md"),
    Command("probes", _offline.PROBES_HELP, _offline.add_probes_arguments, _offline.run_probes,
            _offline.PROBES_EXAMPLES, _offline.DOCS),
    Command("check", _offline.CHECK_HELP, _offline.add_check_arguments, _offline.run_check,
            _offline.CHECK_EXAMPLES, _offline.DOCS),
]


def _epilog(command: Command) -> str:
    lines = ["examples:", *(f"  {e}" for e in command.examples), "", f"docs: {command.docs}"]
    return "\n".join(lines)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each subcommand's parser (for its own usage line)."""
    from symjac._version import __version__

    parser = argparse.ArgumentParser(
        prog="symjac", description="Prove a layer's backward is the exact derivative of its forward.",
        epilog="run 'symjac COMMAND --help' for a command's options and examples; docs: docs/cli.md",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"symjac {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers = {}
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help, epilog=_epilog(command),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_arguments(p)
        p.set_defaults(run=command.run)
        parsers[command.name] = p
    return parser, parsers


def main(argv: list[str] | None = None) -> int:
    from symjac._errors import SymjacError

    parser, parsers = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if isinstance(getattr(args, "spec", None), list) and not any(e.startswith("-") for e in extra):
            args.spec += extra  # spec paths after an option: a b --impl X c
            extra = []
        if extra:  # the subcommand's usage, not the top level's
            parsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse already printed its usage line
        return EXIT_USAGE if exc.code else EXIT_OK
    import symjac.pool

    settings = symjac.pool.BUDGET_HINT, symjac.pool.MAX_NNZ  # this run's; a caller's in process come back
    if hasattr(args, "max_nnz"):  # the budget's message names this run's option, not the Python settings
        symjac.pool.BUDGET_HINT = "--max-nnz N"
        if args.max_nnz is not None:
            symjac.pool.MAX_NNZ = args.max_nnz
    try:
        return _interrupt.interruptible(args.command, lambda: int(args.run(args)))  # Ctrl-C: one line, exit 130
    except (UsageError, SymjacError) as exc:
        print(f"symjac {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to report
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:
        print(f"symjac {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        symjac.pool.BUDGET_HINT, symjac.pool.MAX_NNZ = settings


if __name__ == "__main__":
    raise SystemExit(main())
