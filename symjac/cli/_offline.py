"""``symjac probes SPEC --out DIR`` and ``symjac check SPEC --responses DIR``: verify a kernel
that runs elsewhere, by rounds of recorded requests (:mod:`symjac.frameworks.native._offline`;
docs/native.md#offline-kernels-that-run-elsewhere).

``check`` exits 0 or 1 as ``verify`` does once every request is answered, and
:data:`EXIT_PENDING` (3) with one line saying how many requests the next round needs.
``check SPEC --observed FILE`` diagnoses one observed dx (:mod:`symjac.io._observed`).
"""

from __future__ import annotations

import argparse
from typing import Any

from symjac._errors import UsageError
from symjac._progress import Progress
from symjac.cli._select import add_quiet_argument, add_spec_arguments

EXIT_OK, EXIT_FINDING, EXIT_PENDING = 0, 1, 3
DTYPES = ("float16", "bfloat16", "float32", "float64")
PROBES_HELP = "write the requests verify would send a kernel that runs elsewhere (first round)"
CHECK_HELP = "verify from the responses to those requests (or write the next round's requests)"
PROBES_EXAMPLES = ("symjac probes specs/seeds/nntrainer_avgpool_same_2x2.toml --out probes",)
CHECK_EXAMPLES = ("symjac check specs/seeds/nntrainer_avgpool_same_2x2.toml --responses probes",
                  "symjac check specs/seeds/nntrainer_avgpool_same_2x2.toml --observed dx.npy")
DOCS = "docs/cli.md#symjac-probes-and-symjac-check"


def add_probes_arguments(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the request files (created if missing)")
    _dtype(p)
    add_quiet_argument(p)


def add_check_arguments(p: argparse.ArgumentParser) -> None:
    add_spec_arguments(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--responses", metavar="DIR",
                       help="the folder of requests and their response files (the next round's requests go there)")
    which.add_argument("--observed", metavar="FILE",
                       help="instead: one observed dx for the case's x and dy (.npy, .npz), or a golden bin case folder "
                            "(its dx.DTYPE for its own x and dy), diagnosed against the exact Jacobian at window level")
    _dtype(p)
    add_quiet_argument(p)


def _dtype(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default="float64", choices=DTYPES,
                   help="dtype of the arrays the kernel receives (default float64)")


def _rounds(args: argparse.Namespace, folder: str) -> tuple[list[tuple[Any, Any]], int]:
    from symjac.cli._select import select_cases
    from symjac.frameworks.native._offline import run_offline

    reports, pending = [], 0
    cases = select_cases(args.spec, args.case or (), args.keyword)
    with Progress(f"symjac {args.command}", len(cases), enabled=not args.quiet) as progress:  # after 2 s, on a terminal
        for case in progress.each(cases):
            got = run_offline(case, folder, args.dtype)
            if isinstance(got, int):
                pending += got
            else:
                reports.append((case, got))
    return reports, pending


def _more(pending: int, folder: str) -> str:
    return (f"{pending} more request(s) to run in {folder}: answer them (python -m symjac.frameworks._offline "
            f"{folder} --exec CMD), then run symjac check again")


def run_probes(args: argparse.Namespace) -> int:
    _, pending = _rounds(args, args.out)
    print(_more(pending, args.out) if pending else f"every request is answered in {args.out}: run symjac check")
    return EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.observed is not None:
        return _observed(args)
    if not Path(args.responses).is_dir():
        raise UsageError(f"--responses {args.responses!r} is no folder (write it with symjac probes --out)")
    reports, pending = _rounds(args, args.responses)
    if pending:
        print(_more(pending, args.responses))
        return EXIT_PENDING
    for case, report in reports:
        summary = report.summary()
        named = summary.startswith((f"{case.name}: ", f"{case.name} in "))
        print(f"{report.verdict} {summary if named else f'{case.name}: {summary}'}")
    return EXIT_OK if all(r.ok for _, r in reports) else EXIT_FINDING


def _observed(args: argparse.Namespace) -> int:
    from symjac.cli._select import select_cases
    from symjac.io._observed import diagnose_observed, load_observed

    cases = select_cases(args.spec, args.case or (), args.keyword)
    if len(cases) != 1:
        raise UsageError(f"--observed diagnoses one case; {len(cases)} are selected (pick one with --case)")
    try:
        got = load_observed(args.observed, args.dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"--observed {args.observed!r}: {exc}") from None
    result = diagnose_observed(cases[0], got.dx, got.x, got.dy)
    print("\n".join(result.lines))
    return EXIT_OK if result.ok else EXIT_FINDING
