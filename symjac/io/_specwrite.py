"""Writing spec files: a pooling spec (and its input) as TOML that ``load_spec_file`` reads back.

The inverse of :mod:`symjac.io._specfile` for what reproducers need: one case with an
``[operator]`` table and a generated ``[input]`` (shape, generator, seed) or an explicit
one (exact values).
"""

from __future__ import annotations

from typing import Any

from symjac.pool._ops import operator_of
from symjac.pool._ops.unpool import MaxUnpool
from symjac.pool._spec import AdaptivePool, FractionalMaxPool, GlobalPool, Pool, PoolSpec


def operator_table(spec: PoolSpec | MaxUnpool) -> dict[str, Any]:
    """The ``[operator]`` table of a pooling spec (every field, so the file is explicit)."""
    if isinstance(spec, MaxUnpool):
        return unpool_table(spec)
    if not operator_of(spec).kernel_windows:  # RoI pooling: its kind is its rule's (its name), its fields too
        return {"kind": operator_of(spec).spec_kind or spec.mode, **operator_of(spec).spec_table(spec)}
    if isinstance(spec, Pool):
        padding: Any = spec.padding if isinstance(spec.padding, str) else [list(p) for p in spec.padding]
        table: dict[str, Any] = {"kind": "pool", "mode": spec.mode, "kernel": list(spec.kernel),
                                 "stride": list(spec.stride or spec.kernel), "padding": padding,
                                 "dilation": list(spec.dilation), "ceil_mode": spec.ceil_mode}
        table.update(operator_of(spec).spec_table(spec))
        pad_value = getattr(spec, "pad_value", None)
        if pad_value is not None:
            table["pad_value"] = pad_value
    elif isinstance(spec, AdaptivePool):
        table = {"kind": "adaptive_pool", "mode": spec.mode, "output_size": list(spec.output_size)}
    elif isinstance(spec, FractionalMaxPool):
        table = fractional_table(spec)
    else:
        assert isinstance(spec, GlobalPool)
        table = {"kind": "global_pool", "mode": spec.mode, "rank": spec.rank}
    table["layout"] = spec.layout
    return table


def fractional_table(spec: FractionalMaxPool) -> dict[str, Any]:
    """A fractional max pool's ``[operator]`` table: its sequences, or its kernel, output size and
    samples (exact, as text ``"p/q"``)."""
    if spec.sequences is not None:
        return {"kind": "fractional_max_pool", "sequences": [list(s) for s in spec.sequences],
                "overlapping": spec.overlapping}
    return {"kind": "fractional_max_pool", "kernel": list(spec.kernel or ()), "output_size": list(spec.output_size or ()),
            "samples": [str(u) for u in spec.samples or ()]}


def unpool_table(spec: MaxUnpool) -> dict[str, Any]:
    """The ``[operator]`` table of a :class:`symjac.MaxUnpool` (``kind = "max_unpool"``)."""
    table: dict[str, Any] = {"kind": "max_unpool", "kernel": list(spec.kernel), "stride": list(spec.stride or ()),
                             "padding": [list(p) for p in spec.padding]}
    if spec.output_size is not None:
        table["output_size"] = list(spec.output_size)
    if spec.indices is not None:
        table["indices"] = spec.given().tolist()
    return {**table, "flat": spec.flat, "write": spec.write}


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(i) for i in v) + "]"
    raise TypeError(f"cannot write {v!r} ({type(v).__name__}) to TOML")


def dumps(name: str, description: str, operator: dict[str, Any], inputs: dict[str, Any],
          comment: str = "") -> str:
    """One spec-file case as TOML text."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines += [f"name = {_value(name)}", f"description = {_value(description)}", "", "[operator]"]
    lines += [f"{k} = {_value(v)}" for k, v in operator.items()]
    lines += ["", "[input]"] + [f"{k} = {_value(v)}" for k, v in inputs.items()]
    return "\n".join(lines) + "\n"
