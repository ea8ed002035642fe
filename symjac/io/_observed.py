"""One observed dx (a golden failure of a C++ suite) diagnosed against the exact Jacobian.

A single vector-Jacobian product cannot be probed further, so the diagnosis is what one
dx can show: which cells are off the exact ``J^T dy`` (beyond ``4 eps`` times the sum of
the magnitudes of their contributions, in the observed dtype), and a least-squares fit of
the observed dx as ``J^T (w * dy)``: each output window's weight ``w`` (1: its gradient
arrives; 0: it gets nothing; other: a wrong share), plus what no window explains (the
residual, gradient where the Jacobian has none). Where windows overlap so that the fit
is not unique, the lines say so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.io._specfile import pool_input
from symjac.pool._jacobian import jacobian


OBSERVED_FILES = ("a .npy file, an .npz archive (its dx array, or its only one) or a golden bin case folder "
                  "(holding index.json, as symjac golden --format bin writes it)")


@dataclasses.dataclass(frozen=True)
class ObservedInput:
    """An observed ``dx``, with the ``x`` and ``dy`` it was computed for where its file holds them
    (a golden case folder: exact Fractions of the values stored there), else None."""

    dx: np.ndarray
    x: np.ndarray | None = None
    dy: np.ndarray | None = None


def load_observed(path: str | Path, dtype: str | None = None) -> ObservedInput:
    """A dx from a ``.npy`` file, an ``.npz`` archive (its ``dx`` array, or its only one) or a
    golden ``bin`` case folder: its ``dx.DTYPE`` array (``dtype``'s if it has one, else the first
    ``dx`` array its ``index.json`` names), with the folder's ``x.DTYPE`` and ``dy.DTYPE`` of the
    same dtype (the inputs the kernel ran on), where it has them.

    Raises:
      InputError: ``path`` is none of those files (the message says which it takes), or the
        folder names no dx array.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "index.json").is_file():
            raise InputError(f"{path}: a folder without index.json; --observed takes {OBSERVED_FILES}")
        arrays = json.loads((path / "index.json").read_text())["arrays"]
        names = [n for n in arrays if n.split(".")[0] == "dx" and len(n.split(".")) == 2]
        if not names:
            raise InputError(f"{path}/index.json names no dx array")
        name = f"dx.{dtype}" if f"dx.{dtype}" in names else names[0]
        suffix = name.split(".", 1)[1]

        def read(entry: dict[str, Any]) -> np.ndarray:
            return np.fromfile(path / entry["file"], dtype=entry["dtype"]).reshape(entry["shape"])

        def exact(key: str) -> np.ndarray | None:
            from symjac._exact import ExactArray

            return ExactArray.from_any(read(arrays[key])).to_fractions() if key in arrays else None

        return ObservedInput(read(arrays[name]), exact(f"x.{suffix}"), exact(f"dy.{suffix}"))
    if path.suffix == ".npz":
        with np.load(path) as archive:
            keys = [k for k in archive.files if k.split(".")[0] == "dx"] or archive.files
            if len(keys) != 1 and "dx" not in archive.files:
                raise InputError(f"{path}: give an archive with one dx array (it has {', '.join(archive.files)})")
            return ObservedInput(np.asarray(archive["dx" if "dx" in archive.files else keys[0]]))
    if path.suffix != ".npy":
        raise InputError(f"{path}: not a .npy or .npz file; --observed takes {OBSERVED_FILES}")
    try:
        return ObservedInput(np.asarray(np.load(path, allow_pickle=False)))
    except ValueError as exc:
        raise InputError(f"{path}: not a .npy array ({exc}); --observed takes {OBSERVED_FILES}") from None


@dataclasses.dataclass(frozen=True)
class Observed:
    """The diagnosis: ``ok`` (every cell within its bound) and its lines."""

    ok: bool
    lines: tuple[str, ...]


def _cell(shape: tuple[int, ...], flat: int) -> str:
    return "(" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + ")"


def diagnose_observed(case: Any, dx: np.ndarray, x: np.ndarray | None = None, dy: np.ndarray | None = None) -> Observed:
    """Diagnose ``dx``, observed for ``x`` and ``dy`` (exact Fractions; each not given: the pooling
    ``case``'s), at window level."""
    if case.is_loss:
        raise InputError(f"{case.name}: --observed diagnoses a pooling backward's dx; this case is a loss")
    if x is None or dy is None:
        _, case_x, case_dy = pool_input(case)
        x = case_x if x is None else x
        dy = case_dy if dy is None else dy
    jac = jacobian(case.operator, x, tie=case.tie if case.tie not in (None, "any") else "first")
    if dx.shape != tuple(jac.input_shape):
        raise InputError(f"{case.name}: the observed dx has shape {dx.shape}; the case's x has {jac.input_shape}")
    m = np.zeros(jac.shape)
    m[jac.rows, jac.cols] = [float(jac.table[int(i)]) for i in jac.value_ids]
    d = np.array(dy, dtype=np.float64).reshape(-1)
    contributions = m.T * d  # (cells, windows): column o is window o's gradient
    expected = contributions.sum(axis=1)
    observed = np.asarray(dx, dtype=np.float64).reshape(-1)
    eps = float(np.finfo(dx.dtype).eps) if dx.dtype.kind == "f" else 2.0**-52
    bound = 4 * eps * np.abs(contributions).sum(axis=1)
    off = np.abs(observed - expected) > bound
    name = f"{case.name} in {dx.dtype}"
    if not off.any():
        return Observed(True, (f"{name}: the observed dx matches the exact J^T dy at all {observed.size} cells",))
    worst = int(np.argmax(np.abs(observed - expected) - bound))
    lines = [f"{name}: the observed dx is off the exact J^T dy at {int(off.sum())} of {observed.size} cells "
             f"(worst at dx{_cell(dx.shape, worst)}: expected {float(expected[worst])!r}, observed {float(observed[worst])!r})"]
    weights, _, rank, _ = np.linalg.lstsq(contributions, observed, rcond=None)
    residual = observed - contributions @ weights
    out_shape = tuple(jac.output_shape)
    used = np.abs(contributions).sum(axis=0) > 0
    groups: dict[str, list[str]] = {"get nothing": [], "arrive": []}
    shares: list[str] = []
    for o in np.flatnonzero(used):
        w = float(weights[o])
        label = _cell(out_shape, int(o))
        if abs(w) <= 1e-9:
            groups["get nothing"].append(label)
        elif abs(w - 1) <= 1e-9:
            groups["arrive"].append(label)
        else:
            shares.append(f"{label} x{w:.6g}")
    fit = "" if rank == int(used.sum()) else f" (not unique: the windows' gradients have rank {rank} of {int(used.sum())})"
    lines.append(f"window fit dx = J^T (w * dy){fit}:")
    lines += [f"  windows {', '.join(v)} {k}" for k, v in groups.items() if v]
    if shares:
        lines.append(f"  windows with another share of their gradient: {', '.join(shares)}")
    outside = np.flatnonzero(np.abs(residual) > bound)
    if outside.size:
        lines.append(f"  no window explains the gradient at {outside.size} cell(s): "
                     + ", ".join(f"dx{_cell(dx.shape, int(i))} ({residual[i]:+.6g})" for i in outside[:8]))
    return Observed(False, tuple(lines))
