"""The reproducer script of a failing loss cell of a conformance run.

The worker that ran the cell recorded its inputs, the direction v and symjac's exact derivative
and H·v (:func:`symjac.frameworks.conform._loss.run_loss_cell`); the script defines them as NumPy
arrays, runs the adapter's snippet (``LossImpl.reproducer``: the framework's loss, its gradient
and its second-order autodiff along v, nothing of symjac) and prints the framework's values
beside the exact ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from symjac._atomic import write_text


def _literal(values: Any, dtype: str) -> str:
    """``np.array([...], dtype=...)`` of recorded values (float64 or integer lists), or ``None``."""
    if values is None:
        return "None"
    integer = dtype != "bfloat16" and np.issubdtype(np.dtype(dtype), np.integer)
    lit = np.array2string(np.asarray(values, dtype=np.int64 if integer else np.float64), separator=", ", floatmode="unique",
                          threshold=1 << 30, max_line_width=110)
    return f"np.array({lit}, dtype={'ml_dtypes.bfloat16' if dtype == 'bfloat16' else 'np.' + dtype})"


def _label(inputs: dict[str, Any]) -> str:
    """The label's literal: one array, or a sequence loss's parts (ctc: targets, input_lengths, target_lengths)."""
    if inputs.get("label_parts"):
        return "(" + ", ".join(_literal(part, "int64") for part in inputs["label"]) + ")"
    return _literal(inputs["label"], inputs["label_dtype"] or "float64")


def write_loss_reproducer(out: Path, stem: str, framework: str, r: dict[str, Any]) -> list[Path]:
    """The script ``out/stem.py`` of a failing loss cell (a text note when the cell recorded no inputs)."""
    config, transform = r["config"], r["config"].get("transform", "vjp")
    status = "known defect " if r["status"] == "known_defect" else ""
    forward_only = bool(r.get("forward_only")) and transform != "hvp"  # a runtime without autodiff: its forward
    what = "second derivative (hvp)" if transform == "hvp" else "forward (forward only)" if forward_only else "derivative"
    title = f"{framework} {config['label']} in {r['dtype']}: {status}{r['category']} in its {what}"
    inputs = r.get("inputs")
    if not inputs or not r.get("reproducer"):
        note = out / f"{stem}.txt"
        write_text(note, f"{title}\n{r.get('summary', '')}\nno reproducer: the cell recorded no inputs or the "
                         "adapter gave no snippet\n")
        return [note]
    dt, name = r["dtype"], "hvp" if transform == "hvp" else "loss_value" if forward_only else "derivative"
    key, scale = ("loss", "") if forward_only else (name, " * scale")
    known = f"\nKnown defect (the adapter documents it): {r['known_defect']}\n" if r.get("known_defect") else ""
    lines = [f'"""Reproducer: {title}.', "", f"Loss spec: symjac.{r.get('loss', '?')}", "",
             f"symjac: {r.get('summary', '')}", known,
             "Expected values: symjac's exact loss, derivative or Hessian-vector product, rounded to float64.", '"""',
             "import numpy as np"]
    if dt == "bfloat16":
        lines.append("import ml_dtypes")
    lines += ["", f"pred = {_literal(inputs['pred'], dt)}",
              f"label = {_label(inputs)}",
              f"upstream = {_literal(inputs['upstream'], dt)}", f"v = {_literal(inputs['v'], dt)}",
              f"scale = {inputs['scale']!r}  # the loss scale S: the derivative checked is S times the framework's",
              "", r["reproducer"], f"got = np.atleast_1d(np.asarray({name}, dtype=np.float64)){scale}",
              f"expected = {_literal(inputs.get(key), 'float64')}",
              "expected = None if expected is None else np.atleast_1d(expected)",
              f"print('{name} (framework) =', got.tolist())",
              f"print('{name} (exact)     =', None if expected is None else expected.tolist())",
              "if expected is not None:",
              "    diff = np.abs(got - expected)",
              "    worst = tuple(int(i) for i in np.unravel_index(np.argmax(diff), diff.shape))",
              f"    print(f'{name}: max |difference| {{diff.max():g}} at {{worst}}: {{float(got[worst])!r}}, expected "
              "{float(expected[worst])!r}')"]
    script = out / f"{stem}.py"
    write_text(script, "\n".join(lines) + "\n")
    return [script]
