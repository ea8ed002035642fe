"""The ``symjac`` command line: verify, golden, explain, graph, sweep.

Exit codes: 0 verified (or the command did its job), 1 a verification finding,
2 a usage or spec error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from symjac.cli._impl import UsageError, load_impl

EXIT_OK, EXIT_FINDING, EXIT_USAGE = 0, 1, 2
DTYPES = ("float16", "float32", "float64")


def _callables(impl: Any, case: Any, target: str) -> dict[str, Any]:
    """The forward/backward (pool) or forward/derivative (loss) of a case.

    An implementation object may hold one attribute per case name (a family of
    implementations); otherwise the object itself is used.
    """
    holder = getattr(impl, case.name, impl) if isinstance(case.name, str) and case.name.isidentifier() else impl
    needed = "derivative" if case.is_loss else "backward"

    def get(name: str) -> Any:
        return holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)

    fn = get(needed)
    if not callable(fn):
        raise UsageError(f"--impl {target!r}: the implementation has no callable {needed!r} "
                         f"(it needs {needed}{'(pred, label)' if case.is_loss else '(x, dy)'} and optionally forward)")
    fwd = get("forward")
    return {needed: fn, "forward": fwd if callable(fwd) else None}


def _cases(path: str) -> Any:
    from symjac.io._specfile import load

    return load(path).cases


def cmd_verify(args: argparse.Namespace) -> int:
    import numpy as np

    from symjac.io._specfile import pool_input

    cases = _cases(args.spec)
    impl = load_impl(args.impl)
    failed = False
    reports = []
    for case in cases:
        fns = _callables(impl, case, args.impl)
        if case.is_loss:
            from symjac.verifiers._loss import verify_loss

            inputs = {k: np.array(case.inputs[k], dtype=np.float64) if k in case.inputs else None
                      for k in ("pred", "label", "upstream")}
            report = verify_loss(case.operator, derivative=fns["derivative"], forward=fns["forward"],
                                 pred=inputs["pred"], label=inputs["label"], upstream=inputs["upstream"],
                                 dtype=args.dtype)
        else:
            from symjac.verifiers._pool import verify

            _, x, dy = pool_input(case)
            explicit = "x" in case.inputs
            report = verify(case.operator, **fns, x=x.astype(np.float64) if explicit else None,
                            input_shape=None if explicit else x.shape,
                            dy=dy.astype(np.float64) if "dy" in case.inputs else None, dtype=args.dtype,
                            seed=int(case.inputs.get("seed", 0)))
        failed |= not report.ok
        reports.append((case, report))
    if args.json:
        out = [dict(case=c.name, **r.to_dict()) for c, r in reports]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
    else:
        for case, report in reports:
            summary = report.summary()
            summary = summary[len(case.name) + 2:] if summary.startswith(f"{case.name}: ") else summary
            print(f"{'PASS' if report.ok else 'FAIL'} {case.name}: {summary}")
            if not report.ok and args.verbose:
                print(report)
    return EXIT_FINDING if failed else EXIT_OK


def cmd_golden(args: argparse.Namespace) -> int:
    from symjac.io._golden import FORMATS, write_golden

    formats = [f for f in args.format.split(",") if f]
    for f in formats:
        if f not in FORMATS:
            raise UsageError(f"--format {f!r} is not valid: give a comma-separated subset of {','.join(FORMATS)}")
    dtypes = [d for d in args.dtype.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            raise UsageError(f"--dtype {d!r} is not valid: give a comma-separated subset of {','.join(DTYPES)}")
    written = write_golden(args.spec, Path(args.out), formats, dtypes)
    for path in written:
        print(path)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from symjac.io._explain import explain

    for case in _cases(args.spec):
        print(explain(case, latex=args.latex))
    return EXIT_OK


def cmd_graph(args: argparse.Namespace) -> int:
    from symjac.io._picture import write_graph

    out = Path(args.out)
    if out.suffix not in (".dot", ".png", ".svg"):
        raise UsageError(f"--out {args.out!r}: give a .dot, .png or .svg file")
    cases = _cases(args.spec)
    if cases[0].is_loss:
        raise UsageError(f"{args.spec}: graph draws pooling windows; this spec is a loss")
    impl = load_impl(args.impl) if args.impl else None
    fns = _callables(impl, cases[0], args.impl) if impl is not None else None
    messages, ok = write_graph(cases[0], out, fns, dtype=args.dtype)
    for message in messages:
        print(message)
    return EXIT_OK if ok else EXIT_FINDING


def cmd_sweep(args: argparse.Namespace) -> int:
    from symjac.cli._sweep import run_sweep

    impl_target = args.impl
    load_impl(impl_target)  # fail early, in this process, on a bad --impl
    failures = run_sweep(args.sweep, impl_target, jobs=args.jobs, scheduler=args.scheduler,
                         out=Path(args.out) if args.out else None, dtype=args.dtype, progress=not args.quiet)
    return EXIT_FINDING if failures else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="symjac", description="Prove a layer's backward is the exact derivative of its forward.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="verify an implementation against a spec file")
    p.add_argument("spec")
    p.add_argument("--impl", required=True, help="MODULE_OR_PATH:ATTR with forward/backward (pool) or forward/derivative (loss)")
    p.add_argument("--dtype", default="float64", choices=DTYPES)
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="print every finding")
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser("golden", help="write exact expected values for other test suites")
    p.add_argument("spec")
    p.add_argument("--out", required=True)
    p.add_argument("--format", default="json", help="comma-separated: json,npz,bin")
    p.add_argument("--dtype", default="float32,float64", help="comma-separated float dtypes for npz/bin")
    p.set_defaults(run=cmd_golden)

    p = sub.add_parser("explain", help="print the symbolic forward and Jacobian of each window class")
    p.add_argument("spec")
    p.add_argument("--latex", action="store_true")
    p.set_defaults(run=cmd_explain)

    p = sub.add_parser("graph", help="write the window graph (DOT) or a coverage picture (PNG/SVG)")
    p.add_argument("spec")
    p.add_argument("--impl", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default="float64", choices=DTYPES)
    p.set_defaults(run=cmd_graph)

    p = sub.add_parser("sweep", help="verify an implementation over a grid of configurations")
    p.add_argument("sweep")
    p.add_argument("--impl", required=True)
    p.add_argument("-j", "--jobs", type=int, default=1)
    p.add_argument("--scheduler", default=None, help="address of a Dask distributed scheduler (symjac[dask])")
    p.add_argument("--out", default=None, help="JSON-lines results file (default: stdout table only)")
    p.add_argument("--dtype", default="float64", choices=DTYPES)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_sweep)
    return parser


def main(argv: list[str] | None = None) -> int:
    from symjac._errors import SymjacError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed its usage line
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        return int(args.run(args))
    except (UsageError, SymjacError) as exc:
        print(f"symjac {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to report
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:
        print(f"symjac {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
