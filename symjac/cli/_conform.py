"""``symjac conform FRAMEWORK``: a framework's pooling ops (and losses) over a convention matrix.

Registered as a ``Command`` in :mod:`symjac.cli._main` (``add_arguments``, ``run``).

Exit codes as for every command: 0 no finding, 1 a finding, 2 a usage error
(an unknown framework, a framework that is not installed, a bad option, a user adapter
whose ``configurations()`` fails), or no cell verified (every cell not run, unsupported,
skipped or an error). A defect the adapter documents that still reproduces is shown
(``known:CATEGORY``) but exits 0, unless ``--fail-on-known``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from symjac._errors import UsageError
from symjac._progress import Progress, on_terminal
from symjac.cli import _interrupt


def _list(option: str, text: str, valid: tuple[str, ...]) -> list[str]:
    items = [t for t in text.split(",") if t]
    for item in items:
        if item not in valid:
            raise UsageError(f"{option} {item!r} is not valid: give a comma-separated subset of {','.join(valid)}")
    if not items:
        raise UsageError(f"{option}: give at least one of {','.join(valid)}")
    return items


def _positive(option: str, value: float, valid: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} {value:g}: {valid}")


def _file_to_write(option: str, path: str) -> None:
    """Refuse, before the run, a path the results could not be written to."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give a file path")
    if not p.parent.is_dir():
        raise UsageError(f"{option} {path}: no folder {p.parent}")
    if not os.access(p.parent, os.W_OK):
        raise UsageError(f"{option} {path}: the folder {p.parent} is not writable")


def _folder_to_write(option: str, path: str) -> None:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {path}: is a file; give a folder")
    existing = next(q for q in (p, *p.parents) if q.exists())  # ("." or the root at the latest)
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"{option} {path}: the folder {existing} is not writable")


def run(args: argparse.Namespace) -> int:
    """The subcommand: the table on stdout, the progress bar and reproducer paths on stderr."""
    from symjac._atomic import write_text
    from symjac.verifiers.pool._inputs import GENERATORS
    from symjac.frameworks.conform._run import DTYPES, MAX_JOBS, conform

    if args.budget is not None:
        _positive("--budget", args.budget, "give a positive number of seconds")
    if not 1 <= args.jobs <= MAX_JOBS:
        raise UsageError(f"-j {args.jobs}: give 1 to {MAX_JOBS} worker processes")
    if args.timeout != 0:  # 0: no limit, as for verify
        _positive("--timeout", args.timeout, "give seconds > 0, or 0 for no limit")
    if args.json:
        _file_to_write("--json", args.json)
    if args.reproducers:
        _folder_to_write("--reproducers", args.reproducers)
    grid = args.grid or ("full" if args.budget is not None else "small")
    _interrupt.LEDGER.bar = not args.quiet and on_terminal(sys.stderr)  # what a Ctrl-C reports: the bar's line, the files written at the end
    _interrupt.LEDGER.pending += [f"{option} {path} (written at the end)" for option, path in
                                  (("--json", args.json), ("--reproducers", args.reproducers)) if path]
    with Progress("symjac conform", 1, enabled=not args.quiet):  # after 2 s, on a terminal: the cells done
        result = conform(args.framework, grid=grid, budget=args.budget, dtypes=_list("--dtype", args.dtype, DTYPES),
                         families=_list("--families", args.families, GENERATORS), isolate=not args.no_isolate,
                         jobs=args.jobs, scheduler=args.scheduler, timeout=args.timeout or None,
                         ops=[o for o in args.ops.split(",") if o] if args.ops else None,
                         transforms=_list("--transforms", args.transforms, tuple(_TRANSFORMS.split(","))),
                         modes=None if args.modes is None else _list("--modes", args.modes,
                                                                     tuple(_MODES.split(","))))
    print(result.table())
    if args.json:
        write_text(args.json, result.to_json() + "\n")
    if args.reproducers:
        for path in result.write_reproducers(args.reproducers):
            print(f"reproducer: {path}", file=sys.stderr)
    if not result.ok:
        return 1
    if args.fail_on_known and result.known:
        print(f"symjac conform: {len(result.known)} cells reproduce a known defect (--fail-on-known)", file=sys.stderr)
        return 1
    if not result.verified:  # nothing passed and nothing failed: no verdict, not a success
        counts = ", ".join(f"{v} {k}" for k, v in result.counts().items() if v) or "no cells"
        print(f"symjac conform: error: no cell was verified ({counts})", file=sys.stderr)
        return 2
    return 0


EXAMPLES = (
    "symjac conform torch --grid small",
    "symjac conform tensorflow --ops max_pool3d --dtype float32 --reproducers repro",
    "symjac conform onnxruntime --budget 60 --json ort.json",
    "symjac conform my_adapter.py:adapter --no-isolate -j 2",
    "symjac conform torch --transforms vjp,jvp,hvp,vmap --dtype float32,float64",
    "symjac conform torch --ops losses --transforms vjp,hvp --reproducers repro",
    "symjac conform tensorflow --transforms jvp,hvp --modes eager,compiled --dtype float32",
)

# the dtype, family and transform names, here so that building the parser imports nothing heavy
_DTYPES = "float16,bfloat16,float32,float64"
_FAMILIES = "distinct,ties,random"
_TRANSFORMS = "vjp,jvp,hvp,vmap"
_MODES = "eager,compiled"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``conform`` arguments (a help on each)."""
    p.add_argument("framework", metavar="FRAMEWORK",
                   help="torch, jax, tensorflow, onnxruntime, or a user adapter MODULE_OR_PATH:ATTR "
                        "(an object with configurations(grid) and make(config))")
    p.add_argument("--grid", choices=("small", "full"), default=None,
                   help="configurations: small (a few dozen; the default) or full (hundreds; the default with --budget)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting configurations after this many seconds (the rest show as -); "
                        "configurations start in a seeded random order, so those run span the grid")
    p.add_argument("--dtype", default=_DTYPES, metavar="DTYPES", help=f"comma-separated dtypes (default {_DTYPES})")
    p.add_argument("--families", default=_FAMILIES, metavar="FAMILIES",
                   help=f"comma-separated input families (default {_FAMILIES}; ties: max pooling only)")
    p.add_argument("--transforms", default="vjp", metavar="TRANSFORMS",
                   help=f"comma-separated derivatives to check, one column each (default vjp; of {_TRANSFORMS}: "
                        "jvp forward mode, hvp double backward, vmap the batched forward/VJP/JVP)")
    p.add_argument("--modes", default=None, metavar="MODES",
                   help=f"comma-separated modes of {_MODES}, a column each per transform: eager, and compiled, the "
                        "framework's compiled mode (tf.function, jax.jit, torch.compile) (default: both for "
                        "tensorflow and jax, eager for the others: torch.compile takes seconds per shape)")
    p.add_argument("--ops", default=None, metavar="OPS",
                   help="comma-separated op names (max_pool2d, cross_entropy) or the groups pools and losses: "
                        "only their configurations (default: all; losses have vjp and hvp cells)")
    p.add_argument("--fail-on-known", action="store_true",
                   help="exit 1 when a defect the adapter documents still reproduces (default: shown, exit 0)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    p.add_argument("--reproducers", default=None, metavar="DIR",
                   help="write a spec file and a Python script for every distinct failure class (known defects too)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1; at most 64)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="address of a Dask distributed scheduler (pip install 'symjac[dask]')")
    p.add_argument("--no-isolate", action="store_true",
                   help="run in this process (faster; a crashing op ends the run)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="per configuration: longer is a timeout finding (default 120; 0: no limit; with "
                        "--no-isolate the hung call's thread is left running); a user adapter's configurations() "
                        "gets the same")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
