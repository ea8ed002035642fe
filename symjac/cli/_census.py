"""``symjac census``: classify the pooling windows of an input as untied / exact / rounding / broken ties.

By default the spec file's exact ``x`` is the reference and its rounding to
``--dtype`` is the input (rounding ties are then the windows that rounding made
tie). ``--x FILE.npy`` takes the input as the implementation saw it (its own
dtype), with ``--reference FILE.npy`` (exact values, or a higher precision) beside it.
Without either, the input is generated in ``--dtype`` (``[input] shape``, or the coverage plan's).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from symjac._errors import UsageError
from symjac._progress import Progress
from symjac.cli._select import add_quiet_argument

DTYPES = ("float16", "float32", "float64")


HELP = "count exact ties (bifurcation) and rounding ties (compensation) of an input"
EXAMPLES = ("symjac census specs/seeds/maxpool_ties.toml --dtype float16",
            "symjac census spec.toml --x x16.npy --reference exact.npy --betas 0,1/2 --json")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The census options."""
    p.add_argument("spec", help="spec file with a max or lp pooling operator (its [input] x, or a generated input, unless --x is given)")
    p.add_argument("--dtype", default="float64", choices=DTYPES, help="round the spec's exact x to this dtype (default float64)")
    p.add_argument("--x", default=None, help="input as the implementation saw it (.npy)")
    p.add_argument("--reference", default=None, help="exact or higher-precision values of the same input (.npy)")
    p.add_argument("--dy", default=None, help="upstream gradient (.npy; default ones)")
    p.add_argument("--betas", default="0,1", help="the two β compared for max pooling, e.g. 0,1 or 0,1/2")
    p.add_argument("--json", action="store_true", help="print the census as JSON")
    add_quiet_argument(p)


def _load(path: str) -> Any:
    import numpy as np

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path!r} as a .npy array: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """``symjac census``: print the census of every case (text or JSON); exit 0."""
    from symjac.io._specfile import load
    from symjac.pool._census import ZONES

    betas = tuple(b.strip() for b in args.betas.split(","))
    if len(betas) != 2:
        raise UsageError(f"--betas {args.betas!r}: give two values, e.g. 0,1")
    cases = load(args.spec).cases
    with Progress("symjac census", len(cases), enabled=not args.quiet) as progress:  # after 2 s, on a terminal
        results = [_census(case, args, (betas[0], betas[1])) for case in progress.each(cases)]
    if args.json:
        out = [dict(case=c.name, **({"input": note} if note else {}), **census.to_dict())
               for c, census, note in results]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return 0
    for case, census, note in results:
        if note:
            print(f"{case.name}: {note}")
        counts = ", ".join(f"{z} {census.totals[z]}" for z in ZONES)
        a, b = census.policies
        print(f"{case.name}: {census.dtype}: {sum(census.totals.values())} windows: {counts}")
        for zone, items in census.differs.items():
            print(f"  backprop {a} vs {b} differs through the {zone} zone in batch items {list(items)}")
    return 0


def _census(case: Any, args: argparse.Namespace, betas: tuple[str, str]) -> tuple[Any, Any, str | None]:
    """One case's census, and how its input was made (None: given)."""
    import numpy as np

    from symjac.io._specfile import pool_input
    from symjac.pool._census import tie_census

    if case.is_loss:
        raise UsageError(f"{case.source}: census needs a pooling operator; this case is a loss")
    if args.x is not None:
        x = _load(args.x)
        reference = _load(args.reference) if args.reference else None
        note = None
    elif "x" in case.inputs:
        reference = case.inputs["x"]
        x = np.array([float(v) for v in reference.reshape(-1)]).reshape(reference.shape).astype(args.dtype)
        note = None
    else:  # generated in --dtype, as verify and graph do: its exact values are the reference
        g, reference, _ = pool_input(case, plan=True, dtype=args.dtype)
        x = reference.astype(np.float64).astype(args.dtype)
        note = _generated(case, g.input_shape)
    dy = _load(args.dy) if args.dy else None
    return case, tie_census(case.operator, x, reference, dy=dy, betas=betas), note


def _generated(case: Any, shape: tuple[int, ...]) -> str:
    """Which input census generated for a case without ``[input].x``."""
    generator = case.inputs.get("generator", "distinct")
    seed = int(case.inputs.get("seed", 0))
    if "shape" in case.inputs:
        return f"input {shape} generated ({generator}, seed {seed}) from [input] shape"
    return (f"no [input]: input {shape}, the largest shape of the coverage plan (symjac.cover), "
            f"generated ({generator}, seed {seed})")
