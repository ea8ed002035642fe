"""Golden data of max unpooling (:class:`symjac.MaxUnpool`): a scatter, not a window reduction.

A case holds the values ``x``, the ``indices`` (int64, of x's shape, exactly as the implementation
is given them: the spec's own, or generated per shape as the verifier's families have them), the
upstream ``dy``, the output ``y``, ``dx = J^T dy``, the Jacobian's COO (one entry 1 per written
output cell, from the input cell whose write wins) and a JVP. Every value is a copy of an input
(or 0), so every bound is 0. At a repeated index (two input cells naming one output cell) the
spec's ``write`` field says which write wins (``last``: the last in row-major input order), and
``dx`` is 0 at the overwritten cell: the derivative of that forward.

``[input]`` takes ``x`` (explicit values), or ``shape`` with a ``generator``: ``pooled`` (the
default: indices as a max pooling of the spec's windows returns them, repeated where the windows
overlap), ``repeats`` (a repeated index at every pair of input cells), ``equal_values`` or
``extreme`` (the repeats' indices; values all equal, or near the dtype's largest). With the spec's
own ``indices`` every generator uses them.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from symjac._errors import SpecError, named_by

from symjac.verifiers.unpool._inputs import FINITE_FAMILIES as GENERATORS  # exact values: not ``nonfinite``


def unpool_input(case: Any, dtype: Any = None) -> tuple[Any, np.ndarray, np.ndarray]:
    """(scatter, x, dy) of a max unpooling case, x and dy object arrays of exact Fractions (in
    ``dtype``: as it holds them, generated in it or rounded to it).

    Raises:
      SpecError: the input does not fit the spec (shape, indices, generator); the message names the file.
    """
    with named_by(case.source):
        return _unpool_input(case, dtype)


def _unpool_input(case: Any, dtype: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    from symjac._exact import ExactArray
    from symjac.check._rounding import float_dtype
    from symjac.io._specfile import held
    from symjac.pool._ops.unpool import check_input_shape
    from symjac.verifiers.unpool._inputs import dense, indices_of, values

    spec, inputs = case.operator, case.inputs
    seed = int(inputs.get("seed", 0))
    dt = float_dtype("float64" if dtype is None else dtype)
    generator = str(inputs.get("generator", "pooled"))
    if generator not in GENERATORS:
        raise SpecError(f"[input] generator={generator!r} is not valid for max unpooling: give one of "
                        f"{', '.join(GENERATORS)}")
    if "x" in inputs:
        shape = check_input_shape(spec, inputs["x"].shape)
        x = inputs["x"] if dtype is None else held(inputs["x"], dt, f"{case.source}: case {case.name!r} [input].x")
    elif "shape" in inputs or spec.indices is not None:
        shape = check_input_shape(spec, tuple(inputs["shape"]) if "shape" in inputs else spec.indices[0])
        x = ExactArray.from_any(values(generator, shape, dt, seed)).to_fractions()
    else:
        raise SpecError(f"case {case.name!r} has no [input] shape or x and its operator no indices: add "
                        "[input] shape = [N, C, ...], or pass --cover to write the coverage plan's shapes")
    s = spec.scatter(indices_of(spec, generator, shape))
    if "dy" in inputs:
        dy = inputs["dy"]
        if dy.shape != s.output_shape:
            raise SpecError(f"[input].dy: shape {dy.shape}; the output shape is {s.output_shape}")
        dy = dy if dtype is None else held(dy, dt, f"{case.source}: case {case.name!r} [input].dy")
    else:  # quarter-integers, exact in every dtype (bfloat16's 8 bits: |k| <= 127)
        dy = ExactArray.from_any(dense(s.output_shape, dt, seed + 1)).to_fractions()
    return s, x, dy


def unpool_quantities(case: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Exact quantities (object arrays of Fractions; ``indices`` and the COO's rows and columns
    int64) and metadata of a max unpooling case."""
    s, x, dy = unpool_input(case)
    jac = s.jacobian()
    one = Fraction(1)
    qs = {
        "x": x,
        "indices": s.indices.astype(np.int64),
        "dy": dy,
        "y": s.forward(x),
        "dx": s.vjp(dy),
        "jac_rows": jac.rows.astype(np.int64),
        "jac_cols": jac.cols.astype(np.int64),
        "jac_values": np.array([one] * jac.rows.size, dtype=object),
    }
    zero = Fraction(0)  # forward and vjp of object arrays: an unwritten output / overwritten cell is int 0
    for name in ("y", "dx"):
        qs[name] = np.vectorize(lambda v: Fraction(v) if v is not None else zero, otypes=[object])(qs[name])
    repeated = np.flatnonzero(s.repeated())
    meta: dict[str, Any] = {
        "operator": repr(case.operator), "input_shape": list(s.input_shape), "output_shape": list(s.output_shape),
        "jacobian": "COO over flattened (C-order) output rows and input columns: one entry 1 per written output "
                    "cell, at the input cell whose write wins (the operator's write: 'last' or 'first' in "
                    "row-major input order where indices repeat); dx is 0 at an overwritten input cell",
        "repeated_outputs": [int(o) for o in repeated],
        "overwritten_inputs": [int(i) for i in np.flatnonzero(s.overwritten())],
        "bounds": "max_abs_error is 0 for y, dx, jac_values and jvp: every value is a copy of an input value or 0, "
                  "exact in every dtype"}
    return qs, meta


def unpool_operator(case: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The ``operator`` object: the spec's fields (``indices`` is an array of the case, not a setting),
    its ``rank`` and the output's spatial size at this input (``output_size``, resolved)."""
    from symjac.io._operator import operator_json

    out = {k: v for k, v in operator_json(case.operator).items() if k != "indices"}
    out["rank"] = int(case.operator.rank)
    out["output_size"] = list(meta["output_shape"][2:])
    return out


def unpool_bounds(qs: dict[str, np.ndarray], dtypes: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per dtype, 0 for every computed quantity: copies round nothing."""
    computed = ("y", "dx", "jac_values", "jvp")
    return {dt: {name: np.zeros(np.asarray(qs[name]).shape) for name in computed if name in qs} for dt in dtypes}


def unpool_cover(case: Any) -> list[Any]:
    """The case at every shape of max unpooling's coverage plan and every generator."""
    from symjac.pool._ops.unpool import cover

    seed = int(case.inputs.get("seed", 0))
    out = []
    for shape in cover(case.operator):
        for generator in GENERATORS if case.operator.indices is None else ("pooled", "equal_values", "extreme"):
            name = f"{case.name}__{'x'.join(map(str, shape))}__{generator}"
            out.append(dataclasses.replace(case, name=name, expect={},
                                           inputs={"shape": list(shape), "generator": generator, "seed": seed}))
    return out
